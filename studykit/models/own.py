"""The user's own models: ``FILE.py:FUNC``, ``torchvision:NAME``, ``transformers:MODEL_TYPE[:k=v,...]``
and names given to :func:`register` (the contract is in :mod:`studykit.models`' docstring).

Each spec resolves to an :class:`Own`: how to make its module, its timing batch and its loss.
Shapes come from the module built on the meta device (the CPU if that fails), cached per spec.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import Callable

#: the forms of a model spec besides a built-in name (error messages and ``--model`` help)
SPEC_FORMS = "FILE.py:FUNC, torchvision:NAME, transformers:MODEL_TYPE[:k=v,...] or a name given to register()"
_HF_EXAMPLE = "transformers:gpt2:n_layer=24,n_embd=1024,n_head=16"


@dataclasses.dataclass(frozen=True)
class Own:
    """How to make a spec's module, its timing batch and loss; ``key`` alone identifies it (shape cache)."""
    spec: str = dataclasses.field(compare=False)  # as the user wrote it
    key: tuple  # what identifies the module (a file's full path and modification time)
    factory: Callable = dataclasses.field(compare=False)
    batch: Callable | None = dataclasses.field(default=None, compare=False)  # (batch_size, device, seq_len)
    loss: Callable | None = dataclasses.field(default=None, compare=False)  # (model, batch) -> scalar
    no_batch: str = dataclasses.field(default="", compare=False)  # how to give a batch when ``batch`` is None
    module: object = dataclasses.field(default=None, compare=False)  # a registered live module (its shapes)


_REGISTERED: dict[str, Own] = {}


def register(name: str, module_or_factory, builtin: list[str], *, example_batch: Callable | None = None,
             loss: Callable | None = None) -> None:
    """Make ``name`` resolve to a live ``nn.Module`` or a zero-argument factory of one, once its shapes can be
    had (else the name keeps what it had); ``builtin``: the names it may not take."""
    import torch.nn as nn

    if not isinstance(name, str) or not name.strip() or ":" in name or name.endswith(".py") or name in builtin:
        raise ValueError(f"register: the name must be a non-empty string without ':' or '.py' and not a "
                         f"built-in name ({', '.join(builtin)}), got {name!r}")
    live = isinstance(module_or_factory, nn.Module)
    if not live and not callable(module_or_factory):
        raise TypeError(f"register: expected an nn.Module or a zero-argument factory returning one, got "
                        f"{type(module_or_factory).__name__}")
    factory = (lambda: copy.deepcopy(module_or_factory)) if live else module_or_factory
    where = f"register({name!r})"
    if not live:
        check_call(module_or_factory, 0, "the factory", "()", where)
    check_call(example_batch, 2, "example_batch", "(batch_size, device)", where)
    check_call(loss, 2, "loss", "(model, batch)", where)
    new = Own(name, ("registered", name, id(module_or_factory)), factory, _batch_of(example_batch), loss,
              "pass example_batch= to register()", module_or_factory if live else None)
    shapes.cache_clear()  # a module registered again (perhaps changed since) is read afresh
    shapes(new)  # raises before the name changes
    _REGISTERED[name] = new


def unregister(name: str) -> None:
    """Forget a name given to :func:`register` (nothing if it was not)."""
    _REGISTERED.pop(name, None)
    shapes.cache_clear()


def valid(spec: str | None, builtin: list[str]) -> str:
    """What a model may be (the closest known name first, when there is one)."""
    names = builtin + sorted(_REGISTERED)
    close = difflib.get_close_matches(spec, names, n=1) if spec else []
    return (f"did you mean {close[0]!r}? " if close else "") + f"available: {', '.join(names)}; or {SPEC_FORMS}"


def need(package: str, what: str):
    """``import package``, or ModuleNotFoundError saying that ``what`` needs it."""
    try:
        return importlib.import_module(package)
    except Exception as exc:  # noqa: BLE001 - ImportError or a broken install (e.g. a torch/torchvision mismatch)
        raise ModuleNotFoundError(f"{what} needs {package} ({exc}); pip install {package}, or give a FILE.py:FUNC "
                                  "spec; CPU smoke runs can use mlp_small or cnn_small") from None


def resolve(spec: str, builtin: list[str]) -> Own:
    """The :class:`Own` of ``spec``, which is not a built-in name; ValueError naming what is wrong and what is valid."""
    if spec in _REGISTERED:
        return _REGISTERED[spec]
    kind, _, rest = spec.partition(":")
    if kind == "torchvision":
        return _torchvision(spec, rest.strip())
    if kind == "transformers":
        return _transformers(spec, rest)
    path, _, func = spec.rpartition(":")
    if path.endswith(".py"):
        return _from_file(spec, path, func.strip())
    if spec.endswith(".py"):
        raise ValueError(f"model spec {spec!r} names a file but no function: write {spec}:FUNC, FUNC() returning "
                         "the nn.Module (e.g. examples/tiny_mlp.py:build)")
    raise ValueError(f"unknown model {spec!r}; {valid(spec, builtin)}")


def _from_file(spec: str, path: str, func: str) -> Own:
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"model spec {spec!r}: no file {path!r} (relative to {os.getcwd()}); "
                         "FILE.py:FUNC names an existing Python file")
    full, mtime_ns = str(p.resolve()), p.stat().st_mtime_ns
    try:
        mod = _import_file(full, mtime_ns)
    except ImportError as exc:
        raise ModuleNotFoundError(f"model spec {spec!r}: {path} needs a package that is not installed here: "
                                  f"{exc}") from exc
    fn = getattr(mod, func, None) if func.isidentifier() else None
    if fn is not None and not callable(fn):
        raise ValueError(f"model spec {spec!r}: {func} in {path} is a {type(fn).__name__}, not a function "
                         "returning the nn.Module")
    if fn is None:
        have = sorted(n for n, v in vars(mod).items()
                      if inspect.isfunction(v) and v.__module__ == mod.__name__ and not n.startswith("_"))
        raise ValueError(f"model spec {spec!r}: {path} defines no function {func!r}; its functions: "
                         f"{', '.join(have) or 'none'}")
    where = f"model spec {spec!r}"
    check_call(fn, 0, f"{func} in {path}", "()", where)
    check_call(getattr(mod, "example_batch", None), 2, f"example_batch in {path}", "(batch_size, device)", where)
    check_call(getattr(mod, "loss", None), 2, f"loss in {path}", "(model, batch)", where)
    return Own(spec, ("file", full, mtime_ns, func), fn, _batch_of(getattr(mod, "example_batch", None)),
               getattr(mod, "loss", None),
               f"define example_batch(batch_size, device) returning (inputs, target) in {path}")


@functools.lru_cache(maxsize=None)
def _import_file(path: str, mtime_ns: int):
    """The module of the Python file ``path``, imported again when it changes."""
    name = f"_studykit_model_{Path(path).stem}_{abs(hash((path, mtime_ns)))}"
    loader = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(loader)
    sys.modules[name] = mod  # dataclasses and pickle look a class's module up here
    try:
        loader.loader.exec_module(mod)
    except Exception as exc:
        sys.modules.pop(name, None)
        if isinstance(exc, ImportError):  # a package the file needs: ModuleNotFoundError stays one
            raise
        raise ValueError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    return mod


def check_call(fn: Callable | None, n_args: int, what: str, args: str, where: str) -> None:
    """ValueError unless ``fn`` (None: nothing to check) can be called with ``n_args`` positional arguments, as the
    contract calls it (``args`` names them); a callable whose signature cannot be read passes."""
    if fn is None:
        return
    if not callable(fn):
        raise ValueError(f"{where}: {what} is a {type(fn).__name__}, not a function taking {args}")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins and C extensions
        return
    try:
        sig.bind(*([None] * n_args))
    except TypeError:
        raise ValueError(f"{where}: {what} must take {args}, as the kit calls it; it takes {sig}") from None


def _batch_of(fn: Callable | None):
    """The contract's ``example_batch(batch_size, device)`` as an :class:`Own` batch (which also gets seq_len)."""
    return None if fn is None else (lambda batch_size, device, seq_len: fn(batch_size, device))


def image_batch(batch_size: int, device, size: int, classes: int):
    """``batch_size`` random 3 x size x size images and their labels below ``classes`` (seeded)."""
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch_size, 3, size, size, generator=g)
    return x.to(device), torch.randint(0, classes, (batch_size,), generator=g).to(device)


def _torchvision(spec: str, name: str) -> Own:
    tv = need("torchvision", f"model spec {spec!r}").models
    names = tv.list_models()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3)
        raise ValueError(f"model spec {spec!r}: torchvision has no model {name!r}"
                         + (f"; did you mean {', '.join(close)}?" if close else "")
                         + " (valid: torchvision.models.list_models())")
    # detection and segmentation builders would otherwise download ImageNet backbone weights
    builder_args = inspect.signature(tv.get_model_builder(name)).parameters
    offline = {"weights_backbone": None} if "weights_backbone" in builder_args else {}
    return Own(spec, ("torchvision", name), lambda: tv.get_model(name, weights=None, **offline),
               lambda batch_size, device, seq_len: image_batch(batch_size, device, _image_size(tv, name), 1000))


def _image_size(tv, name: str) -> int:
    """The crop size of the model's published weights' transforms (299 for Inception v3), else 224."""
    try:
        return int(next(iter(tv.get_model_weights(name))).transforms.keywords["crop_size"])
    except Exception:  # noqa: BLE001 - no weights listed, or transforms without a square crop
        return 224


def _transformers(spec: str, rest: str) -> Own:
    from studykit.compressors.registry import parse_params

    model_type, _, text = (s.strip() for s in rest.partition(":"))
    if not model_type:
        raise ValueError(f"model spec {spec!r}: name a model type, e.g. {_HF_EXAMPLE}")
    try:
        kw = parse_params(text)
    except ValueError:
        raise ValueError(f"model spec {spec!r}: expected key=value pairs after the model type, "
                         f"e.g. {_HF_EXAMPLE}") from None
    hf = need("transformers", f"model spec {spec!r}")
    known = list(hf.CONFIG_MAPPING.keys())
    if model_type not in known:
        close = difflib.get_close_matches(model_type, known, n=3)
        raise ValueError(f"model spec {spec!r}: transformers has no model type {model_type!r}"
                         + (f"; did you mean {', '.join(close)}?" if close else "")
                         + " (valid: transformers.CONFIG_MAPPING's keys, e.g. gpt2, bert, llama)")
    try:
        config = hf.AutoConfig.for_model(model_type, **kw)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"model spec {spec!r}: {exc}") from None

    def batch(batch_size, device, seq_len):
        import torch

        if getattr(config, "vocab_size", None) is None:
            raise ValueError(f"model spec {spec!r}: its config has no vocab_size for a batch of token ids; "
                             "give a FILE.py:FUNC spec with its own example_batch")
        g = torch.Generator().manual_seed(0)
        return torch.randint(0, config.vocab_size, (batch_size, seq_len), generator=g).to(device), None

    return Own(spec, ("transformers", spec), lambda: hf.AutoModel.from_config(config),
               batch, lambda model, b: model(input_ids=b[0]).last_hidden_state.float().square().mean())


def make(own: Own, meta: bool = False):
    """A fresh module of ``own``, on the meta device if ``meta`` and it builds there (else on the CPU);
    ValueError naming the model if its factory fails or makes no module."""
    import torch

    m = None
    if meta:
        try:
            with torch.device("meta"):
                m = own.factory()
        except Exception:  # noqa: BLE001 - some modules cannot be built on meta: the CPU decides
            m = None
    if m is None:
        try:
            m = own.factory()
        except ImportError as exc:  # ModuleNotFoundError stays one: measurements record the model as skipped
            raise ModuleNotFoundError(f"model {own.spec!r} needs a package that is not installed here: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - the user's code: say whose it is
            raise ValueError(f"model {own.spec}: building it failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(m, torch.nn.Module):
        raise ValueError(f"model {own.spec}: the function returned {type(m).__name__}, not a torch.nn.Module")
    return m


@functools.lru_cache(maxsize=None)
def shapes(own: Own) -> tuple:
    """Shapes of the parameters that require grad, in ``parameters()`` order (tied ones once)."""
    m = own.module if own.module is not None else make(own, meta=True)
    return tuple(tuple(p.shape) for p in m.parameters() if p.requires_grad)


def default_loss(model, batch):
    """The loss of a spec without its own: cross-entropy of the (first) output tensor with a target,
    else the output's ``.loss``, else the mean square of its first tensor."""
    import torch
    import torch.nn.functional as F

    def first(out):
        if isinstance(out, torch.Tensor):
            return out
        items = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else ()
        return next((t for t in map(first, items) if t is not None), None)

    x, y = batch
    out = model(**x) if isinstance(x, dict) else model(*x) if isinstance(x, (tuple, list)) else model(x)
    if y is None and getattr(out, "loss", None) is not None:
        return out.loss
    t = first(out)
    if t is None:
        raise ValueError(f"the model's output ({type(out).__name__}) holds no tensor; define loss(model, batch)")
    return F.cross_entropy(t, y) if y is not None else t.float().square().mean()
