"""Parameter shapes of the paper's models, written down without torchvision or weights.

Agarwal et al. 2022 studies ResNet-50 (97 MB), ResNet-101 (170 MB) and BERT-base (418 MB)
(Sec. 3, "Methodology"; the paper's MB are MiB of fp32 parameters); Han et al. 2024
adds VGG19. The shapes follow torchvision's / transformers' ``named_parameters()``
order (forward order; DDP buckets them in reverse). Totals are checked in the
tests against the published parameter counts. ``build`` makes the real module
when torchvision / transformers are installed (GPU machines), for timing.
"""
from __future__ import annotations

import math

Shape = tuple[int, ...]

#: published parameter counts (torchvision model cards; BERT-base = BertModel incl. pooler)
PARAM_COUNTS = {"resnet50": 25_557_032, "resnet101": 44_549_160, "vgg19": 143_667_240,
                "bert_base": 109_482_240, "gpt2_small": 124_439_808}


def _resnet(blocks: list[int], num_classes: int = 1000) -> list[Shape]:
    s: list[Shape] = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for stage, (planes, n) in enumerate(zip((64, 128, 256, 512), blocks)):
        for b in range(n):
            width, out = planes, planes * 4
            s += [(width, inplanes, 1, 1), (width,), (width,),
                  (width, width, 3, 3), (width,), (width,),
                  (out, width, 1, 1), (out,), (out,)]
            if b == 0:  # downsample projection in the first block of each stage
                s += [(out, inplanes, 1, 1), (out,), (out,)]
            inplanes = out
    return s + [(num_classes, 2048), (num_classes,)]


def _vgg19(num_classes: int = 1000) -> list[Shape]:
    cfg = [64, 64, 128, 128, 256, 256, 256, 256, 512, 512, 512, 512, 512, 512, 512, 512]
    s: list[Shape] = []
    cin = 3
    for c in cfg:
        s += [(c, cin, 3, 3), (c,)]
        cin = c
    return s + [(4096, 512 * 7 * 7), (4096,), (4096, 4096), (4096,), (num_classes, 4096), (num_classes,)]


def _bert(layers: int = 12, hidden: int = 768, inter: int = 3072, vocab: int = 30522,
          max_pos: int = 512, types: int = 2) -> list[Shape]:
    h = hidden
    s: list[Shape] = [(vocab, h), (max_pos, h), (types, h), (h,), (h,)]
    for _ in range(layers):
        s += [(h, h), (h,)] * 4 + [(h,), (h,)]          # q, k, v, attention output; LayerNorm
        s += [(inter, h), (inter,), (h, inter), (h,), (h,), (h,)]  # FFN; LayerNorm
    return s + [(h, h), (h,)]  # pooler


def _gpt2(layers: int = 12, hidden: int = 768, vocab: int = 50257, positions: int = 1024) -> list[Shape]:
    """GPT-2 small (Radford et al. 2019) as ``transformers.GPT2LMHeadModel(GPT2Config())`` lists its
    parameters: the LM head is tied to the token embedding, so it is not a parameter of its own."""
    h = hidden
    s: list[Shape] = [(vocab, h), (positions, h)]
    for _ in range(layers):
        s += [(h,), (h,), (h, 3 * h), (3 * h,), (h, h), (h,)]          # LayerNorm; fused q/k/v (Conv1D); proj
        s += [(h,), (h,), (h, 4 * h), (4 * h,), (4 * h, h), (h,)]      # LayerNorm; MLP
    return s + [(h,), (h,)]  # final LayerNorm


#: layer widths of the CPU MLPs (40 inputs, 10 classes): ``mlp_small`` has a 92 KB fp32 gradient,
#: ``mlp_large`` 4.4 MB (1,101,834 parameters; its 4 MiB hidden layer is one tensor), enough for
#: communication to matter on a throttled 0.5-5 Gbit/s network (``data/measurements/throttle``)
MLP_SIZES = {"mlp_small": (40, 128, 128, 10), "mlp_large": (40, 1024, 1024, 10)}


def _mlp(sizes=MLP_SIZES["mlp_small"]) -> list[Shape]:
    s: list[Shape] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        s += [(b, a), (b,)]
    return s


def _cnn_small() -> list[Shape]:
    # conv 3->16 3x3, conv 16->32 3x3 stride 2, global average pool, linear 32->10
    return [(16, 3, 3, 3), (16,), (32, 16, 3, 3), (32,), (10, 32), (10,)]


_SHAPES = {
    "resnet50": lambda: _resnet([3, 4, 6, 3]),
    "resnet101": lambda: _resnet([3, 4, 23, 3]),
    "vgg19": _vgg19,
    "bert_base": _bert,
    "gpt2_small": _gpt2,
    "mlp_small": _mlp,  # CPU smoke runs
    "mlp_large": lambda: _mlp(MLP_SIZES["mlp_large"]),  # CPU runs with a multi-MB gradient
    "cnn_small": _cnn_small,  # CPU smoke runs (3x32x32 images)
}


def available() -> list[str]:
    """Model names known to :func:`param_shapes`."""
    return sorted(_SHAPES)


def param_shapes(name: str) -> list[Shape]:
    """Parameter shapes of ``name`` in forward order."""
    if name not in _SHAPES:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(available())}")
    return _SHAPES[name]()


def numel(name: str) -> int:
    """Number of parameters of ``name``."""
    return sum(math.prod(s) for s in param_shapes(name))


def size_bytes(name: str, bytes_per_param: int = 4) -> int:
    """Gradient size in bytes (fp32 by default)."""
    return numel(name) * bytes_per_param


# --------------------------------------------------------------------------- real modules
#: per-worker batch sizes used by default when timing (MACHINE-NOTES: ResNets 64, VGG19 32, BERT 16)
DEFAULT_BATCH = {"resnet50": 64, "resnet101": 64, "vgg19": 32, "bert_base": 16, "gpt2_small": 8, "mlp_small": 32,
                 "mlp_large": 32, "cnn_small": 32}
#: BERT sequence length when timing (Agarwal et al. 2022 fine-tunes on Sogou News; 128 tokens is the usual setting)
BERT_SEQ_LEN = 128
#: GPT-2 small's context (Radford et al. 2019): its timing batch is 8 sequences of 1024 tokens
GPT2_SEQ_LEN = 1024


def seq_len_of(name: str, bert_seq_len: int = BERT_SEQ_LEN) -> int | None:
    """Tokens per sequence of a language model's timing batch (``bert_seq_len`` for BERT), None otherwise."""
    return bert_seq_len if name == "bert_base" else GPT2_SEQ_LEN if name == "gpt2_small" else None

_IMAGE_SIZE = {"resnet50": 224, "resnet101": 224, "vgg19": 224, "cnn_small": 32}
_CLASSES = {"resnet50": 1000, "resnet101": 1000, "vgg19": 1000, "cnn_small": 10, "mlp_small": 10,
            "mlp_large": 10}


def build(name: str):
    """A freshly initialised ``torch.nn.Module`` for ``name`` whose parameters have
    exactly :func:`param_shapes` (``name``) in order.

    ResNets/VGG need torchvision and ``bert_base`` needs transformers (both on the
    GPU machines); ``mlp_small``, ``mlp_large`` and ``cnn_small`` are plain torch.
    """
    import torch.nn as nn

    if name not in _SHAPES:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(available())}")
    if name in MLP_SIZES:
        sizes = MLP_SIZES[name]
        layers: list = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        return nn.Sequential(*layers[:-1])
    if name == "cnn_small":
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1),
                             nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    if name in ("resnet50", "resnet101", "vgg19"):
        try:
            import torchvision
        except Exception as exc:  # noqa: BLE001 - ImportError or a torch/torchvision mismatch
            raise ModuleNotFoundError(f"model {name!r} needs torchvision ({exc}); "
                                      "CPU smoke runs can use mlp_small or cnn_small") from None
        return getattr(torchvision.models, name)(weights=None)
    if name == "bert_base":
        try:
            from transformers import BertConfig, BertModel
        except Exception as exc:  # noqa: BLE001
            raise ModuleNotFoundError(f"model 'bert_base' needs transformers ({exc}); "
                                      "CPU smoke runs can use mlp_small or cnn_small") from None
        return BertModel(BertConfig())  # bert-base-uncased architecture, random weights, with pooler
    if name == "gpt2_small":
        try:
            from transformers import GPT2Config, GPT2LMHeadModel
        except Exception as exc:  # noqa: BLE001
            raise ModuleNotFoundError(f"model 'gpt2_small' needs transformers ({exc}); "
                                      "CPU smoke runs can use mlp_small or cnn_small") from None
        return GPT2LMHeadModel(GPT2Config())  # GPT-2 small (124M), random weights, tied LM head
    raise AssertionError(f"build: no module written for {name!r}")


def example_batch(name: str, batch_size: int, device="cpu", seq_len: int = BERT_SEQ_LEN):
    """A random ``(inputs, target)`` batch for ``name`` on ``device`` (ImageNet-sized images for the CNNs)."""
    import torch

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    g = torch.Generator().manual_seed(0)
    if name == "bert_base":
        ids = torch.randint(0, 30522, (batch_size, seq_len), generator=g)
        return ids.to(device), None
    if name == "gpt2_small":
        ids = torch.randint(0, 50257, (batch_size, GPT2_SEQ_LEN), generator=g)
        return ids.to(device), None
    if name in MLP_SIZES:
        x = torch.randn(batch_size, MLP_SIZES[name][0], generator=g)
    elif name in _IMAGE_SIZE:
        s = _IMAGE_SIZE[name]
        x = torch.randn(batch_size, 3, s, s, generator=g)
    else:
        raise ValueError(f"unknown model {name!r}; available: {', '.join(available())}")
    y = torch.randint(0, _CLASSES[name], (batch_size,), generator=g)
    return x.to(device), y.to(device)


def loss(name: str, model, batch):
    """Forward ``batch`` through ``model`` and return a scalar training loss.

    Classifiers: cross-entropy. ``bert_base``: mean square of the pooled output (a
    timing loss: the paper's classifier head would add 1.5k parameters, omitted so
    the gradients are exactly :func:`param_shapes` ('bert_base'); the backward still
    runs through every layer).
    """
    import torch.nn.functional as F

    x, y = batch
    if name == "bert_base":
        return model(input_ids=x).pooler_output.float().square().mean()
    if name == "gpt2_small":  # next-token cross-entropy (the model shifts the labels itself)
        return model(input_ids=x, labels=x).loss
    return F.cross_entropy(model(x), y)
