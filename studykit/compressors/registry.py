"""Name -> compressor class, and ``get`` with parameter checking."""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from studykit.compressors.base import Compressor, CompressorError, ErrorFeedback

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


def metadata(name: str | Compressor) -> Metadata:
    """The class metadata of compressor ``name`` (family, key parameter, benchmark group)."""
    cls = _lookup(name if isinstance(name, str) else name.name)
    return Metadata(cls.family, cls.key_param, cls.bench_group)


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

    ``error_feedback=True/False`` wraps it in :class:`ErrorFeedback` (default: the
    method's own convention, e.g. on for PowerSGD and EF-SignSGD).
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
    sig = inspect.signature(cls.__init__).parameters
    for key, value in list(params.items()):
        default = cls.default_error_feedback if key == "error_feedback" else getattr(sig.get(key), "default", None)
        if isinstance(default, bool):
            params[key] = as_bool(value, f"compressor {name!r}: parameter {key!r}")
    ef = params.pop("error_feedback", cls.default_error_feedback)
    comp = cls(**params)
    return ErrorFeedback(comp) if ef else comp


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


def parse_spec(spec: str) -> tuple[str, dict]:
    """``"topk:ratio=0.01,scope=layer"`` -> ``("topk", {"ratio": 0.01, "scope": "layer"})``.

    Values are read as int, float, bool (true/false) or left as strings. The name and
    parameters are checked by building the compressor once.
    """
    name, _, rest = spec.partition(":")
    params: dict = {}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq:
            raise CompressorError(f"compressor spec {spec!r}: expected key=value, got {item!r}")
        params[key.strip()] = literal(value.strip())
    get(name.strip(), **params)  # validates name and parameters
    return name.strip(), params


def spec_string(name: str, params: dict) -> str:
    """Inverse of :func:`parse_spec`."""
    return name + (":" + ",".join(f"{k}={v}" for k, v in sorted(params.items())) if params else "")


def literal(value: str):
    """A command-line value as int, float, bool (true/false) or the string itself."""
    low = value.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value
