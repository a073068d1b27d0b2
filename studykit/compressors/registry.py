"""Name -> compressor class, and ``get`` with parameter checking.

The families register their classes when they are imported, and they import torch: :func:`load` imports them
on first need. What a command asks of the built-in compressors without running one (their names, parameters
and metadata, whether a setting is valid and what such an instance says of itself: :func:`check`) is also kept
on disk per fingerprint of the code that decides it (:func:`fingerprint`, :func:`cache_path`), so that
``python -m studykit predict`` or ``advise`` answers without importing torch once this code has answered it
before. A change to any compressor's source starts a new file, so a stale answer is never read; a class
registered from outside the kit is never cached (the registry is then loaded and asked).
"""
from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from studykit.compressors.base import Compressor

_REGISTRY: dict[str, type[Compressor]] = {}
GENERIC_PARAMS = ("error_feedback", "seed", "allow_nonfinite")
#: the modules whose classes register themselves, imported by :func:`load` (then the GPU kernels that attach to them)
FAMILIES = ("lowrank", "precision", "quantization", "sparsification", "thc")
_LOADED = False


class CompressorError(ValueError):
    """Bad input or parameter for a compressor; the message names compressor and problem."""


def load() -> None:
    """Import every family (each registers its compressors; this imports torch), then
    :mod:`~studykit.compressors.fastpath`, whose kernels attach to them, then make every codec's ``compress`` /
    ``decompress`` check its input first (:func:`~studykit.compressors.base.guard_inputs`). Done once per process."""
    global _LOADED
    if _LOADED:
        return
    for module in (*FAMILIES, "fastpath"):
        importlib.import_module(f"studykit.compressors.{module}")
    from studykit.compressors.base import guard_inputs

    for cls in {c for registered in _REGISTRY.values() for c in registered.__mro__}:
        guard_inputs(cls)  # again over the fast paths' dispatchers: a non-tensor is refused before one looks at it
    _LOADED = True
    _remember_classes()


def register(cls: type[Compressor]) -> type[Compressor]:
    """Class decorator: make ``cls`` available under ``cls.name``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no name")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise TypeError(f"compressor name {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def is_compressor(obj) -> bool:
    """Whether ``obj`` is a :class:`~studykit.compressors.base.Compressor` instance (without importing torch when
    no compressor class was ever imported: then nothing can be one)."""
    base = sys.modules.get("studykit.compressors.base")
    return base is not None and isinstance(obj, base.Compressor)


# ---------------------------------------------------------------- the disk cache of what the code answers
def fingerprint() -> str:
    """Hash of what decides a compressor's answers and plans: the sources of ``studykit/compressors/*.py`` and
    ``studykit/comm.py``, and torch's version (read from its installed metadata, without importing it)."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        from importlib import metadata

        try:
            version = metadata.version("torch")
        except metadata.PackageNotFoundError:
            version = "no torch"
        pkg = Path(__file__).resolve().parent
        h = hashlib.sha256(version.encode())
        for f in sorted(pkg.glob("*.py")) + [pkg.parent / "comm.py"]:
            h.update(f.name.encode())
            h.update(f.read_bytes())
        _FINGERPRINT = h.hexdigest()[:16]
    return _FINGERPRINT


_FINGERPRINT: str | None = None


def cache_path(kind: str) -> Path | None:
    """The on-disk cache file ``KIND-<fingerprint>.json`` of this code (``reports/cache/``, git-ignored;
    ``STUDYKIT_CACHE=DIR`` moves it, ``STUDYKIT_CACHE=off`` disables it: None)."""
    where = os.environ.get("STUDYKIT_CACHE", "")
    if where.lower() in ("off", "0", "no", "false"):
        return None
    if where:
        folder = Path(where)
    else:
        from studykit import paths

        folder = paths.REPORTS / "cache"
    return folder / f"{kind}-{fingerprint()}.json"


def read_cache(kind: str) -> dict:
    """What :func:`write_cache` saved under ``kind`` for this code ({} when none, disabled or damaged: a damaged
    cache is only a slower start)."""
    path = cache_path(kind)
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    ok = isinstance(data, dict) and data.get("fingerprint") == fingerprint() and isinstance(data.get(kind), dict)
    return data[kind] if ok else {}


def write_cache(kind: str, content: dict) -> None:
    """Save ``content`` (JSON-able) as this code's ``kind`` cache, atomically; a read-only checkout keeps none."""
    path = cache_path(kind)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{kind}-", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump({"fingerprint": fingerprint(), kind: content}, fh)
        os.replace(tmp, path)
    except OSError:
        pass  # the cache is an optimisation only


_FACTS: dict[str, dict] = {}  # cache path -> {"classes": {...}, "settings": {...}} read from / written to it


def _facts() -> dict:
    key = str(cache_path("registry"))
    if key not in _FACTS:
        got = read_cache("registry")
        _FACTS[key] = {"classes": dict(got.get("classes") or {}), "settings": dict(got.get("settings") or {})}
    return _FACTS[key]


def _builtin(cls) -> bool:
    return cls.__module__.startswith("studykit.compressors.")


def _class_facts(cls) -> dict | None:
    """What the registry answers of ``cls`` without an instance, JSON-able (defaults as Python literals); None
    when a default is not a literal (that class is then always asked)."""
    sig = {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()
           if k != "self" and p.kind is p.KEYWORD_ONLY}
    try:
        text = {k: repr(v) for k, v in sig.items()}
        if any(ast.literal_eval(t) != sig[k] for k, t in text.items()):
            return None
    except (ValueError, SyntaxError):
        return None
    main = getattr(cls, "main_parameter", None)
    return {"signature": text, "default_error_feedback": bool(cls.default_error_feedback),
            "metadata": {"family": cls.family, "key_param": cls.key_param, "bench_group": cls.bench_group,
                         "keeps_nonfinite": bool(cls.keeps_nonfinite)},
            "main_parameter": None if main is None else [main[0], list(main[1])]}


def _remember_classes() -> None:
    """Save the built-in classes' facts for processes that have not loaded them (once per code fingerprint)."""
    facts = _facts()
    classes = {}
    for name, cls in _REGISTRY.items():
        if _builtin(cls):
            got = _class_facts(cls)
            if got is None:
                return  # one class cannot be described: none are, so every answer comes from the classes
            classes[name] = got
    if classes != facts["classes"]:
        facts["classes"] = classes
        write_cache("registry", facts)


def _cached(name: str | None = None) -> dict | None:
    """The cached facts of every built-in class (of ``name``'s, when given) while the registry is not loaded and
    nothing else was registered; None where the classes must be asked."""
    if _LOADED or _REGISTRY:
        return None
    classes = _facts()["classes"]
    if not classes:
        return None
    if name is None:
        return classes
    return classes.get(name) if isinstance(name, str) else None


def _signature(name: str) -> dict[str, Any]:
    """Every keyword-only parameter of compressor ``name``'s constructor (generic ones included) with its default."""
    hit = _cached(name)
    if hit is not None:
        return {k: ast.literal_eval(v) for k, v in hit["signature"].items()}
    cls = _lookup(name)
    return {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()
            if k != "self" and p.kind is p.KEYWORD_ONLY}


def _default_error_feedback(name: str) -> bool:
    hit = _cached(name)
    return bool(hit["default_error_feedback"]) if hit is not None else bool(_lookup(name).default_error_feedback)


def available() -> list[str]:
    """Names of every registered compressor, sorted."""
    hit = _cached()
    if hit is not None:
        return sorted(hit)
    load()
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
    name = name if isinstance(name, str) else name.name
    hit = _cached(name)
    if hit is not None:
        return Metadata(**hit["metadata"])
    cls = _lookup(name)
    return Metadata(cls.family, cls.key_param, cls.bench_group, cls.keeps_nonfinite)


def main_parameter(name: str):
    """The class's own ``main_parameter`` (``("rank", (1, 4, 16))``: the parameter advise sweeps and its values),
    or None where the class states none."""
    hit = _cached(name)
    if hit is not None:
        main = hit["main_parameter"]
        return None if main is None else (main[0], tuple(main[1]))
    return getattr(_lookup(name), "main_parameter", None)


def in_group(group: str) -> tuple[str, ...]:
    """Names of the registered compressors whose ``bench_group`` is ``group``, sorted."""
    return tuple(n for n in available() if metadata(n).bench_group == group)


def parameters(name: str) -> dict[str, object]:
    """The specific parameters of compressor ``name`` with their defaults."""
    return {k: v for k, v in _signature(name).items() if k not in ("seed", "allow_nonfinite")}


def get(name: str | Compressor, **params) -> Compressor:
    """A new compressor ``name`` with ``params``; unknown names or parameters raise.

    ``error_feedback=True/False`` gives it an error-feedback memory
    (:class:`~studykit.compressors.memory.ResidualMemory`, in ``comp.memory``) or none; the
    default is the method's own convention (``default_error_feedback``: on for PowerSGD,
    EF-SignSGD, TopK...). The compressor is the same class either way.
    """
    if is_compressor(name):
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
        from studykit.compressors.memory import ResidualMemory

        comp.memory = ResidualMemory()
    return comp


def check(name: str, **params) -> dict:
    """Whether compressor ``name`` takes ``params`` (raising as :func:`get` does when not), and what such an
    instance says of itself: ``allreduce_compatible``, ``partition_invariant``, ``keeps_nonfinite``,
    ``one_round_allreduce``, ``error_feedback`` (whether it has a memory), ``world_size_steps`` (whether it has
    the methods of the world size by which its payload may change: ``protocol_for`` and ``lane_width``),
    ``max_world_size`` (the largest its ``plan()`` simulates). From the disk cache where this code answered it
    before (no torch), else from a new instance (:func:`get`)."""
    key = json.dumps([name, params], sort_keys=True, default=repr)
    facts = _facts()
    builtin = _cached(name) is not None or (_LOADED and name in _REGISTRY and _builtin(_REGISTRY[name]))
    if builtin and key in facts["settings"]:
        return dict(facts["settings"][key])
    comp = get(name, **params)
    from studykit.compressors.base import MAX_WORLD_SIZE

    steps = callable(getattr(comp, "protocol_for", None)) and callable(getattr(comp, "lane_width", None))
    out = {"allreduce_compatible": bool(comp.allreduce_compatible), "partition_invariant": bool(comp.partition_invariant),
           "keeps_nonfinite": bool(comp.keeps_nonfinite), "one_round_allreduce": bool(comp.one_round_allreduce),
           "error_feedback": comp.memory is not None, "world_size_steps": steps, "max_world_size": MAX_WORLD_SIZE}
    if _builtin(type(comp)) and facts["settings"].get(key) != out:
        facts["settings"][key] = out
        write_cache("registry", facts)
    return dict(out)


def coerce_params(name: str, params: dict) -> dict:
    """``params`` with every boolean parameter of compressor ``name`` parsed strictly (:func:`as_bool`)."""
    sig = _signature(name)
    out = dict(params)
    for key, value in params.items():
        default = _default_error_feedback(name) if key == "error_feedback" else sig.get(key)
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
    load()
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
    read by :func:`literal`; the name and parameters are checked as :func:`get` checks them (:func:`check`:
    booleans strictly, :func:`as_bool`).
    """
    name, params = split_spec(spec)
    try:
        check(name, **params)  # validates name and parameters
    except TypeError as exc:  # a parameter of the wrong type
        raise CompressorError(f"compressor spec {spec!r}: {exc}") from None
    return name, params


def spec_string(name: str, params: dict) -> str:
    """Inverse of :func:`parse_spec`: :func:`setting_label` in its ``"spec"`` style."""
    return setting_label(name, params, "spec")


# ---------------------------------------------------------------- the one text of a compressor setting
#: the styles of :func:`setting_label`
LABEL_STYLES = ("spec", "kv", "short", "key")
#: ``"short"`` labels: the prefix of a key parameter's value ('r4'; a ratio is a percentage instead: '1%')
_SHORT_PREFIX = {"rank": "r", "bits": "b", "levels": "s"}
#: ``"short"`` labels: options named after the key parameter where they differ from the class's default
#: (PowerSGD's CholeskyQR2: 'powersgd r32 cholesky')
LABEL_OPTIONS = {"powersgd": ("orthogonalize",)}


def setting_label(name: str, params: dict | None = None, style: str = "spec", *, params_only: bool = False) -> str:
    """The text people read for compressor ``name`` with ``params``: every place that names a setting calls this.

    * ``"spec"``: ``powersgd:rank=4``, ``topk:ratio=0.01,scope=layer`` (keys sorted): what commands take;
      :func:`parse_spec` reads it back.
    * ``"kv"``: ``powersgd rank=4``, ``topk ratio=0.01,scope=layer`` (the order given, floats by ``%g``): a
      setting spelled out (advise's candidates, predict, the explorer's bars, verify's figures).
    * ``"short"``: ``powersgd r4``, ``topk 1%``, ``powersgd r32 cholesky``: the class's key parameter
      (:attr:`Metadata.key_param`, a ratio as a percentage), then the options of :data:`LABEL_OPTIONS` that
      differ from their default; other parameters are not shown (tables and figures; the measured crossovers'
      method names). A name the registry does not know shows no parameter.
    * ``"key"``: ``powersgd {rank:4}``: the parameters as sorted JSON without quotes or spaces (verify's
      configuration names).

    ``params_only``: the parameters' text alone (``rank=4``, ``r4``; '' where none shows). No parameters: the name.
    """
    if style not in LABEL_STYLES:
        raise ValueError(f"setting_label: unknown style {style!r}; valid: {', '.join(LABEL_STYLES)}")
    params = dict(params or {})
    if style == "spec":
        text = ",".join(f"{k}={v}" for k, v in sorted(params.items()))
    elif style == "kv":
        text = ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())
    elif style == "key":
        text = json.dumps(params, sort_keys=True).replace('"', "").replace(" ", "") if params else ""
    else:
        text = _short_text(name, params)
    if params_only:
        return text
    return f"{name}" + ("" if not text else (":" if style == "spec" else " ") + text)


def _short_text(name: str, params: dict) -> str:
    """The parameters of a ``"short"`` label (:func:`setting_label`): 'r4', '1%', 'r32 cholesky' or ''."""
    if not params or not isinstance(name, str):
        return ""
    try:
        key = metadata(name).key_param
        defaults = parameters(name)
    except CompressorError:  # a name no class registers (an old record's, PyTorch's own hooks'): no parameter
        return ""
    parts = []
    if key in params:
        v = params[key]
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            parts.append(f"{_SHORT_PREFIX.get(key, key)}{v}")
        else:
            parts.append(f"{v * 100:g}%" if key == "ratio" else f"{_SHORT_PREFIX.get(key, key)}{v:g}")
    parts += [str(params[k]) for k in LABEL_OPTIONS.get(name, ()) if params.get(k, defaults.get(k)) != defaults.get(k)]
    return " ".join(parts)


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
