"""ViT-B/16 (Dosovitskiy et al. 2021, https://arxiv.org/abs/2010.11929) as a model of your own:
``--model examples/vit_b16.py:build`` (needs torchvision; random weights, nothing is downloaded).

``python -m studykit advise --model torchvision:vit_b_16 ...`` gives the same model without a file;
this one shows the contract to copy. No ``loss``: the default, cross-entropy, applies.
"""
IMAGE_SIZE, CLASSES = 224, 1000


def build():
    """torchvision's ViT-B/16 with fresh random weights."""
    import torchvision  # lazily: the kit imports this file for shapes on machines without torchvision too

    return torchvision.models.vit_b_16(weights=None)


def example_batch(batch_size: int, device="cpu"):
    """``(inputs, target)``: ``batch_size`` random 3x224x224 images and ImageNet class labels."""
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch_size, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g)
    y = torch.randint(0, CLASSES, (batch_size,), generator=g)
    return x.to(device), y.to(device)
