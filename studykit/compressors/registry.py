"""Name -> compressor class, and ``get`` with parameter checking."""
from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass

from studykit.compressors.base import Compressor, CompressorError
from studykit.compressors.memory import ResidualMemory

_REGISTRY: dict[str, type[Compressor]] = {}
GENERIC_PARAMS = ("error_feedback", "seed", "allow_nonfinite")


def register(cls: type[Compressor]) -> type[Compressor]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no name")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise TypeError(f"compressor name {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def available() -> list[str]:
    """Names of every registered compressor, sorted."""
    return sorted(_REGISTRY)


@dataclass(frozen=True)
class Metadata:
    """What reports and plots need to know about a compressor, read from its class."""

    family: str  # "precision", "quantization", "sparsification", "low-rank"
    key_param: str | None  # the parameter that sets how hard it compresses
    bench_group: str  # "elementwise", "topk", "lowrank", "dense"
    keeps_nonfinite: bool = True  # whether its protocol carries inf/NaN by its arithmetic (Compressor.keeps_nonfinite)


def metadata(name: str | Compressor) -> Metadata:
    """The class metadata of compressor ``name`` (family, key parameter, benchmark group, whether it keeps inf/NaN)."""
    cls = _lookup(name if isinstance(name, str) else name.name)
    return Metadata(cls.family, cls.key_param, cls.bench_group, cls.keeps_nonfinite)


def in_group(group: str) -> tuple[str, ...]:
    """Names of the registered compressors whose ``bench_group`` is ``group``, sorted."""
    return tuple(n for n in available() if _REGISTRY[n].bench_group == group)


def parameters(name: str) -> dict[str, object]:
    """The specific parameters of compressor ``name`` with their defaults."""
    cls = _lookup(name)
    sig = inspect.signature(cls.__init__)
    return {k: p.default for k, p in sig.parameters.items()
            if k not in ("self", "seed", "allow_nonfinite") and p.kind is p.KEYWORD_ONLY}


def get(name: str | Compressor, **params) -> Compressor:
    """A new compressor ``name`` with ``params``; unknown names or parameters raise.

    ``error_feedback=True/False`` gives it an error-feedback memory
    (:class:`~studykit.compressors.memory.ResidualMemory`, in ``comp.memory``) or none; the
    default is the method's own convention (``default_error_feedback``: on for PowerSGD,
    EF-SignSGD, TopK...). The compressor is the same class either way.
    """
    if isinstance(name, Compressor):
        if params:
            raise CompressorError(f"compressor {name.name!r}: got an instance and parameters {sorted(params)}; "
                                  "pass a name to set parameters")
        return name
    cls = _lookup(name)
    valid = list(parameters(name)) + list(GENERIC_PARAMS)
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise CompressorError(f"compressor {name!r}: unknown parameter(s) {unknown}; valid: {sorted(valid)}")
    params = coerce_params(name, params)
    ef = params.pop("error_feedback", cls.default_error_feedback)
    comp = cls(**params)
    if ef:
        comp.memory = ResidualMemory()
    return comp


def coerce_params(name: str, params: dict) -> dict:
    """``params`` with every boolean parameter of compressor ``name`` parsed strictly (:func:`as_bool`)."""
    cls = _lookup(name)
    sig = inspect.signature(cls.__init__).parameters
    out = dict(params)
    for key, value in params.items():
        default = cls.default_error_feedback if key == "error_feedback" else getattr(sig.get(key), "default", None)
        if isinstance(default, bool):
            out[key] = as_bool(value, f"compressor {name!r}: parameter {key!r}")
    return out


TRUE_WORDS = ("yes", "true", "1", "on")
FALSE_WORDS = ("no", "false", "0", "off")


def as_bool(value, what: str = "value") -> bool:
    """A boolean given as bool, 0/1 or one of yes/true/1/on, no/false/0/off (any case); else an error."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in TRUE_WORDS + FALSE_WORDS:
        return value.strip().lower() in TRUE_WORDS
    raise CompressorError(f"{what} must be a boolean: true/false, yes/no, on/off or 1/0; got {value!r}")


def _lookup(name: str) -> type[Compressor]:
    if not isinstance(name, str) or name not in _REGISTRY:
        raise CompressorError(f"unknown compressor {name!r}; available: {', '.join(available())}")
    return _REGISTRY[name]


def parse_params(text: str, what: str = "spec") -> dict:
    """``"ratio=0.01,scope=layer"`` -> ``{"ratio": 0.01, "scope": "layer"}``, each value by :func:`literal`."""
    params: dict = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise CompressorError(f"{what}: expected key=value (e.g. powersgd:rank=4, topk:ratio=0.01), got {item!r}")
        params[key.strip()] = literal(value)
    return params


def split_spec(spec: str) -> tuple[str, dict]:
    """``"name:k=v,..."`` -> ``(name, params)`` without checking them against the registry."""
    name, _, rest = str(spec).partition(":")
    return name.strip(), parse_params(rest, f"compressor spec {spec!r}")


def parse_spec(spec: str) -> tuple[str, dict]:
    """``"topk:ratio=0.01,scope=layer"`` -> ``("topk", {"ratio": 0.01, "scope": "layer"})``.

    The one parser of ``name:k=v`` specs (profile, bench, ddp, predict, train, the notebooks). Values are
    read by :func:`literal`; the name and parameters are checked by building the compressor once
    (booleans strictly: :func:`as_bool`).
    """
    name, params = split_spec(spec)
    try:
        get(name, **params)  # validates name and parameters
    except TypeError as exc:  # a parameter of the wrong type
        raise CompressorError(f"compressor spec {spec!r}: {exc}") from None
    return name, params


def spec_string(name: str, params: dict) -> str:
    """Inverse of :func:`parse_spec`."""
    return name + (":" + ",".join(f"{k}={v}" for k, v in sorted(params.items())) if params else "")


NONE_WORDS = ("none", "null")


def literal(value: str):
    """A command-line value: bool (true/false, any case), None (none/null), int, float, a Python literal
    (a tuple, a quoted string), or else the string itself (``scope=layer``). Other boolean words
    (yes/no, on/off) stay strings here and become bools where the parameter is one (:func:`get`)."""
    text = str(value).strip()
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in NONE_WORDS:
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


# ---------------------------------------------------------------- argparse types, shared by every command
def spec_arg(text: str) -> tuple[str, dict]:
    """argparse ``type=``: a checked ``name[:k=v,...]`` spec (an error message names what is wrong)."""
    import argparse

    try:
        return parse_spec(text)
    except CompressorError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def param_arg(text: str) -> tuple[str, object]:
    """argparse ``type=``: one ``KEY=VALUE`` compressor parameter, the value by :func:`literal`."""
    import argparse

    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), literal(value)
