"""Parameter shapes of the paper's models, written down without torchvision or weights.

Seed 000 studies ResNet-50 (97 MB), ResNet-101 (170 MB) and BERT-base (418 MB)
(Sec. 3, "Methodology"; the paper's MB are MiB of fp32 parameters); seed 002
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
                "bert_base": 109_482_240}


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


def _mlp(sizes=(40, 128, 128, 10)) -> list[Shape]:
    s: list[Shape] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        s += [(b, a), (b,)]
    return s


_SHAPES = {
    "resnet50": lambda: _resnet([3, 4, 6, 3]),
    "resnet101": lambda: _resnet([3, 4, 23, 3]),
    "vgg19": _vgg19,
    "bert_base": _bert,
    "mlp_small": _mlp,  # CPU smoke runs
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
