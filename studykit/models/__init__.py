"""Models by name or spec: the papers' models written down, and the user's own.

Agarwal et al. 2022 studies ResNet-50 (97 MB), ResNet-101 (170 MB) and BERT-base (418 MB)
(Sec. 3, "Methodology"; the paper's MB are MiB of fp32 parameters); Han et al. 2024
adds VGG19. Their shapes are written down below in torchvision's / transformers'
``named_parameters()`` order, without torchvision or weights; totals are checked in the
tests against the published parameter counts. ``build`` makes the real module when
torchvision / transformers are installed (GPU machines), for timing.

Every function taking a model name (and every ``--model``) also takes a *spec*
(:mod:`studykit.models.own`):

* ``FILE.py:FUNC``: FILE (a path relative to the current directory) is imported and ``FUNC()``
  returns the ``torch.nn.Module``. FILE may also define ``example_batch(batch_size, device)``
  returning ``(inputs, target)`` (only timing needs it; shapes never do) and ``loss(model, batch)``
  returning a scalar. Without ``loss``, the model is called as ``model(**inputs)`` (a dict),
  ``model(*inputs)`` (a tuple or list) or ``model(inputs)``; the loss is the cross-entropy of its
  (first) output tensor if ``target`` is not None, else the output's ``.loss`` if it has one, else
  the mean square of its first output tensor. Reading the spec checks that FUNC, ``example_batch`` and
  ``loss`` take those arguments (a ValueError names the one that does not). ``examples/tiny_mlp.py`` is one
  to copy;
* ``torchvision:NAME``: ``torchvision.models.get_model(NAME, weights=None)``; timing batches of
  3x224x224 images of 1000 classes (the crop size of its published weights where they say one, 299 for Inception v3);
* ``transformers:MODEL_TYPE[:k=v,...]``: ``AutoModel.from_config(AutoConfig.for_model(MODEL_TYPE, **kv))``,
  built offline (``transformers:gpt2:n_layer=24,n_embd=1024,n_head=16`` is GPT-2 medium); timing
  batches of ``seq_len`` token ids; loss: the mean square of ``last_hidden_state``;
* a name given to :func:`register` (a live module or a zero-argument factory).

A spec's parameter shapes come from its module, built on the meta device (on the CPU if that fails)
and cached per spec: ``[tuple(p.shape) for p in m.parameters() if p.requires_grad]``, in
``parameters()`` order (tied parameters once). DDP buckets the gradients in reverse of this order.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

from studykit.models import own as _own
from studykit.models.own import SPEC_FORMS, default_loss  # re-exported: part of this API

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
    """Built-in model names (besides them, every function here takes a spec of :data:`SPEC_FORMS`)."""
    return sorted(_SHAPES)


def _builtin(name) -> bool:
    """Whether ``name`` is a built-in name (else a spec); ValueError if it is no string at all."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a model must be a non-empty string, got {name!r}; {_own.valid(None, available())}")
    return name in _SHAPES


def _resolve(spec: str) -> _own.Own:
    return _own.resolve(spec, available())


def is_builtin(name: str) -> bool:
    """Whether ``name`` is one of :func:`available` (else a spec)."""
    return _builtin(name)


def remember(spec: str, shapes) -> None:
    """Shapes of ``spec`` as measured elsewhere (a calibration's or a record's ``param_shapes``): used when the
    spec cannot be built here (its file or package is missing), never instead of a module that builds."""
    if not _builtin(spec):
        _REMEMBERED[spec] = tuple(tuple(int(d) for d in s) for s in shapes)


_REMEMBERED: dict[str, tuple] = {}


def _spec_shapes(spec: str) -> tuple:
    try:
        return _own.shapes(_resolve(spec))
    except (ImportError, ValueError):
        if spec in _REMEMBERED:
            return _REMEMBERED[spec]
        raise


def param_shapes(name: str) -> list[Shape]:
    """Parameter shapes of a model name or spec in ``parameters()`` (forward) order (a spec that cannot be built
    here: the shapes :func:`remember` was given for it)."""
    return list(_builtin_shapes(name) if _builtin(name) else _spec_shapes(name))


@functools.lru_cache(maxsize=None)
def _builtin_shapes(name: str) -> tuple:
    return tuple(_SHAPES[name]())


def numel(name: str) -> int:
    """Number of parameters of ``name``."""
    return sum(math.prod(s) for s in param_shapes(name))


def size_bytes(name: str, bytes_per_param: int = 4) -> int:
    """Gradient size in bytes (fp32 by default)."""
    return numel(name) * bytes_per_param


def check(spec: str) -> str:
    """``spec`` itself if it names a model (a built-in or registered name, or a spec whose module builds);
    else ValueError (ModuleNotFoundError where a package is missing) naming what is wrong and what is valid."""
    if not _builtin(spec):
        _spec_shapes(spec)
    return spec


def is_known(spec: str) -> bool:
    """Whether :func:`check` accepts ``spec``."""
    try:
        check(spec)
    except (ValueError, ImportError):
        return False
    return True


def register(name: str, module_or_factory, *, example_batch: Callable | None = None,
             loss: Callable | None = None) -> str:
    """Make ``name`` a model for every function here: a live ``nn.Module`` (built as a deep copy) or a
    zero-argument factory of one; optional ``example_batch(batch_size, device)`` and ``loss(model, batch)``
    as in a ``FILE.py:FUNC`` file. Returns ``name``; a module that does not build is not registered."""
    _own.register(name, module_or_factory, available(), example_batch=example_batch, loss=loss)
    return name


# --------------------------------------------------------------------------- real modules
#: per-worker batch sizes used by default when timing (MACHINE-NOTES: ResNets 64, VGG19 32, BERT 16)
DEFAULT_BATCH = {"resnet50": 64, "resnet101": 64, "vgg19": 32, "bert_base": 16, "gpt2_small": 8, "mlp_small": 32,
                 "mlp_large": 32, "cnn_small": 32}
#: BERT sequence length when timing (Agarwal et al. 2022 fine-tunes on Sogou News; 128 tokens is the usual setting)
BERT_SEQ_LEN = 128
#: GPT-2 small's context (Radford et al. 2019): its timing batch is 8 sequences of 1024 tokens
GPT2_SEQ_LEN = 1024


def default_batch(spec: str) -> int:
    """Per-worker batch size used when timing ``spec``: :data:`DEFAULT_BATCH`, 32 for other specs."""
    return DEFAULT_BATCH.get(spec, 32)


def seq_len_of(name: str, bert_seq_len: int = BERT_SEQ_LEN) -> int | None:
    """Tokens per sequence of a language model's timing batch (``bert_seq_len`` for BERT and for
    ``transformers:`` specs), None otherwise (a ``FILE.py:FUNC`` file's batch is its own)."""
    if name == "bert_base" or str(name).startswith("transformers:"):
        return bert_seq_len
    return GPT2_SEQ_LEN if name == "gpt2_small" else None

_IMAGE_SIZE = {"resnet50": 224, "resnet101": 224, "vgg19": 224, "cnn_small": 32}
_CLASSES = {"resnet50": 1000, "resnet101": 1000, "vgg19": 1000, "cnn_small": 10, "mlp_small": 10,
            "mlp_large": 10}


def build(name: str):
    """A freshly initialised ``torch.nn.Module`` for ``name`` whose parameters have
    exactly :func:`param_shapes` (``name``) in order (a registered live module: a deep copy of it).

    ResNets/VGG need torchvision and ``bert_base`` needs transformers (both on the
    GPU machines); ``mlp_small``, ``mlp_large`` and ``cnn_small`` are plain torch.
    """
    import torch.nn as nn

    if not _builtin(name):
        return _own.make(_resolve(name))
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
        return getattr(_own.need("torchvision", f"model {name!r}").models, name)(weights=None)
    hf = _own.need("transformers", f"model {name!r}")
    if name == "bert_base":
        return hf.BertModel(hf.BertConfig())  # bert-base-uncased architecture, random weights, with pooler
    return hf.GPT2LMHeadModel(hf.GPT2Config())  # GPT-2 small (124M), random weights, tied LM head


def example_batch(name: str, batch_size: int, device="cpu", seq_len: int = BERT_SEQ_LEN):
    """A random ``(inputs, target)`` batch for ``name`` on ``device`` (ImageNet-sized images for the CNNs);
    a ``FILE.py:FUNC`` spec's comes from the file's ``example_batch`` (ValueError if it has none)."""
    import torch

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not _builtin(name):
        spec = _resolve(name)
        if spec.batch is None:
            raise ValueError(f"model {name!r} has no example batch, which timing needs: {spec.no_batch}")
        return spec.batch(batch_size, device, seq_len)
    g = torch.Generator().manual_seed(0)
    if name == "bert_base":
        ids = torch.randint(0, 30522, (batch_size, seq_len), generator=g)
        return ids.to(device), None
    if name == "gpt2_small":
        ids = torch.randint(0, 50257, (batch_size, GPT2_SEQ_LEN), generator=g)
        return ids.to(device), None
    if name in _IMAGE_SIZE:
        return _own.image_batch(batch_size, device, _IMAGE_SIZE[name], _CLASSES[name])
    x = torch.randn(batch_size, MLP_SIZES[name][0], generator=g)
    y = torch.randint(0, _CLASSES[name], (batch_size,), generator=g)
    return x.to(device), y.to(device)


def loss(name: str, model, batch):
    """Forward ``batch`` through ``model`` and return a scalar training loss.

    Classifiers: cross-entropy. ``bert_base``: mean square of the pooled output (a
    timing loss: the paper's classifier head would add 1.5k parameters, omitted so
    the gradients are exactly :func:`param_shapes` ('bert_base'); the backward still
    runs through every layer). A spec: its own loss, else :func:`default_loss` (module docstring).
    """
    import torch.nn.functional as F

    if not _builtin(name):
        return (_resolve(name).loss or default_loss)(model, batch)
    x, y = batch
    if name == "bert_base":
        return model(input_ids=x).pooler_output.float().square().mean()
    if name == "gpt2_small":  # next-token cross-entropy (the model shifts the labels itself)
        return model(input_ids=x, labels=x).loss
    return F.cross_entropy(model(x), y)
