"""A small MLP as a model of your own: ``--model examples/tiny_mlp.py:build``.

Plain torch, for CPU smoke runs and the tests. Copy this file for your model: ``build()`` returns the
``nn.Module``; ``example_batch`` is needed only for timing (``tcomp``, ``ddp``); there is no ``loss``,
so the kit's default applies (cross-entropy, as the target is not None).
"""
import torch
from torch import nn

IN_FEATURES, HIDDEN, CLASSES = 20, 64, 5


def build() -> nn.Module:
    """A 20-64-5 MLP with fresh random weights."""
    return nn.Sequential(nn.Linear(IN_FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))


def example_batch(batch_size: int, device="cpu"):
    """``(inputs, target)``: ``batch_size`` random feature vectors and class labels."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch_size, IN_FEATURES, generator=g)
    y = torch.randint(0, CLASSES, (batch_size,), generator=g)
    return x.to(device), y.to(device)
