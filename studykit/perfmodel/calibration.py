"""A calibration: the performance model's measured constants, each with uncertainty and source.

Agarwal et al. 2022, App. C ("Using the Performance Model") lists what the model needs:
the latency ``alpha``, the bandwidth ``BW``, the overlap slowdown ``gamma``, the
single-GPU backward time ``T_comp`` per model and batch size, and
``T_encode_decode`` per compressor and model. The kit adds what a prediction of the
*iteration* time needs (the non-backward overhead ``O`` per model and batch) and the
extended model's constants (:class:`~studykit.perfmodel.model.ModelOptions`): the
synchronization, per-bucket and per-tensor costs, the compression path's overhead, the
all-gather incast coefficient, and the network and world size it was measured on.
A :class:`Calibration` holds them
and is saved as a small JSON file under ``data/calibrations/``
(:meth:`Calibration.load` / :meth:`Calibration.save`).

Look-ups say how they found a value (``exact``, or a documented fallback), so a
prediction can report which numbers were measured and which were extrapolated.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from studykit import models

__all__ = ["Constant", "TComp", "TEncodeDecode", "Overhead", "PathOverhead", "Calibration", "GENERIC_PARAMS", "normalize_params"]

#: compressor parameters that do not change encode/decode cost or wire bytes
GENERIC_PARAMS = ("seed", "allow_nonfinite", "error_feedback")


def normalize_params(params: dict | None, compressor: str | None = None) -> dict:
    """Compressor parameters without the generic ones, keys sorted (for matching and caching).

    With ``compressor``, the compressor's defaults fill in what ``params`` leaves out, so
    ``{"rank": 4}`` and a record's full ``{"rank": 4, "warm_start": True, ...}`` match.
    """
    p = dict(params or {})
    if compressor is not None:
        from studykit import compressors

        if compressor in compressors.available():
            p = {**compressors.parameters(compressor), **p}
    return {k: p[k] for k in sorted(p) if k not in GENERIC_PARAMS}


@dataclass
class Constant:
    """One calibrated number: value, interval ``[low, high]``, unit, where it came from."""

    value: float
    unit: str
    source: str
    low: float | None = None
    high: float | None = None
    r2: float | None = None  # goodness of the fit that produced it, if fitted
    n: int | None = None  # number of records behind it, if fitted
    note: str = ""

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None and v != ""}

    @classmethod
    def from_dict(cls, d: dict) -> "Constant":
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"calibration constant has unknown field(s) {unknown}; valid: {sorted(known)}")
        return cls(**d)


@dataclass
class TComp(Constant):
    """Single-GPU backward time ``T_comp`` (s) of ``model`` at ``batch_size`` per worker."""

    model: str = ""
    batch_size: int | None = None  # None: the source does not state it (used for any batch size)


@dataclass
class Overhead(Constant):
    """Non-backward part of an iteration ``O`` (s) of ``model`` at ``batch_size``: forward, loss,
    optimizer step (``T_ddp(p=1) - T_comp``, or ``T_fwd_bwd - T_comp`` without the step)."""

    model: str = ""
    batch_size: int | None = None


@dataclass
class PathOverhead(Constant):
    """Framework work of the compression path that the profile does not time (s), per model, batch
    and ``mode`` (``post`` / ``hook``); calibrated on the identity compressor (beyond the paper)."""

    model: str = ""
    batch_size: int | None = None
    mode: str = "post"


@dataclass
class TEncodeDecode(Constant):
    """``T_encode_decode`` (s) of ``compressor(**params)`` on ``model``'s gradients.

    ``T(p) = value + per_worker_s * p`` (``per_worker_s`` = 0 unless fitted from
    profiles at several world sizes; Agarwal et al. 2022 Fig. 8 notes SignSGD's decode grows with p).
    """

    compressor: str = ""
    params: dict = field(default_factory=dict)
    model: str = ""
    per_worker_s: float = 0.0


@dataclass
class Calibration:
    """The constants of one cluster (or of the paper). Any of them may be absent (``None``)."""

    name: str
    description: str = ""
    alpha_s: Constant | None = None
    bandwidth_gbps: Constant | None = None
    gamma: Constant | None = None
    incast_coeff: Constant | None = None
    t_comp: list[TComp] = field(default_factory=list)
    t_encode_decode: list[TEncodeDecode] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)
    # beyond the paper (ModelOptions.extended); absent (None / empty) unless fitted
    gamma_extended: Constant | None = None  # gamma fitted jointly with the extended syncSGD terms below
    sync_delta_s: Constant | None = None
    per_bucket_s: Constant | None = None
    per_tensor_s: Constant | None = None
    overhead: list[Overhead] = field(default_factory=list)
    path_overhead: list[PathOverhead] = field(default_factory=list)
    world_size: int | None = None  # the world size of the DDP / sweep records (None: not stated)
    network: dict | None = None  # the records' network field (None: a real network)
    warnings: list[str] = field(default_factory=list)  # what a prediction should not trust (studykit.perfmodel.fit)
    #: parameter shapes of the models given by a spec (``FILE.py:FUNC``, ``torchvision:NAME``, ...), from the
    #: records: the calibration predicts them where they cannot be built (:func:`studykit.models.remember`)
    models: dict[str, list] = field(default_factory=dict)

    def __post_init__(self):
        for spec, shapes in self.models.items():
            models.remember(spec, shapes)

    SCALARS = ("alpha_s", "bandwidth_gbps", "gamma", "incast_coeff", "gamma_extended", "sync_delta_s", "per_bucket_s",
               "per_tensor_s")
    LISTS = {"t_comp": TComp, "t_encode_decode": TEncodeDecode, "overhead": Overhead, "path_overhead": PathOverhead}
    OPTIONAL_LISTS = ("overhead", "path_overhead")
    #: the least value of each constant (strict: must be above it); constants absent here may have any sign
    #: (the overhead O and the path overhead are differences of measured times)
    MINIMUM = {"alpha_s": (0.0, False), "bandwidth_gbps": (0.0, True), "gamma": (0.0, True),
               "incast_coeff": (0.0, False), "gamma_extended": (0.0, True), "sync_delta_s": (0.0, False),
               "per_bucket_s": (0.0, False), "per_tensor_s": (0.0, False), "t_comp": (0.0, True),
               "t_encode_decode": (0.0, False), "overhead": (-3600.0, False), "path_overhead": (-3600.0, False)}
    #: the largest plausible value of each constant (in its unit): above it a file is a typo or in another unit
    #: (a latency per ring step of a second, a backward pass or an encode/decode of an hour, gamma of 100)
    MAXIMUM = {"alpha_s": 1.0, "bandwidth_gbps": 1e6, "gamma": 100.0, "incast_coeff": 1000.0, "gamma_extended": 100.0,
               "sync_delta_s": 3600.0, "per_bucket_s": 3600.0, "per_tensor_s": 3600.0, "t_comp": 3600.0,
               "t_encode_decode": 3600.0, "overhead": 3600.0, "path_overhead": 3600.0}
    #: the unit each constant is stored in (what the model reads; any other is refused, not converted)
    UNITS = {"alpha_s": "s", "bandwidth_gbps": "Gbit/s", "gamma": "ratio", "incast_coeff": "ratio",
             "gamma_extended": "ratio", "sync_delta_s": "s", "per_bucket_s": "s", "per_tensor_s": "s", "t_comp": "s",
             "t_encode_decode": "s", "overhead": "s", "path_overhead": "s"}
    #: the fields that say what a list entry is for, and which fields make two entries the same configuration
    KEYS = {"t_comp": ("model", "batch_size"), "overhead": ("model", "batch_size"),
            "path_overhead": ("model", "batch_size", "mode"), "t_encode_decode": ("compressor", "model", "params")}
    REQUIRED = {"t_comp": ("model",), "overhead": ("model",), "path_overhead": ("model",),
                "t_encode_decode": ("compressor", "model")}
    PATH_MODES = ("post", "hook", "hook_blocking")

    # ------------------------------------------------------------------ I/O
    def to_dict(self) -> dict:
        d: dict[str, Any] = {"name": self.name, "description": self.description}
        for k in self.SCALARS:
            c = getattr(self, k)
            if c is not None:
                d[k] = c.to_dict()
        for k in self.LISTS:
            if k not in self.OPTIONAL_LISTS or getattr(self, k):
                d[k] = [c.to_dict() for c in getattr(self, k)]
        if self.world_size is not None:
            d["world_size"] = int(self.world_size)
        if self.network is not None:
            d["network"] = self.network
        if self.warnings:
            d["warnings"] = list(self.warnings)
        if self.models:
            d["models"] = {k: [list(s) for s in v] for k, v in self.models.items()}
        d["provenance"] = self.provenance
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Calibration":
        """The calibration of ``d`` (as :meth:`to_dict` writes it), checked: required fields present, types
        right, values and interval ends finite and within :data:`MINIMUM` / :data:`MAXIMUM`, units those of
        :data:`UNITS`, one list entry per configuration (:data:`KEYS`); ValueError naming the field."""
        if not isinstance(d, dict):
            raise ValueError(f"a calibration must be a JSON object, got {type(d).__name__}")
        known = {"name", "description", "provenance", "world_size", "network", "warnings", "models", *cls.SCALARS,
                 *cls.LISTS}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"calibration has unknown key(s) {unknown}; valid: {sorted(known)}")
        if "name" not in d:
            raise ValueError("calibration has no field 'name' (required)")
        _check(cls, d)
        kw = {k: Constant.from_dict(d[k]) for k in cls.SCALARS if d.get(k) is not None}
        lists = {k: [kind.from_dict(c) for c in d.get(k, [])] for k, kind in cls.LISTS.items()}
        return cls(name=d["name"], description=d.get("description", ""), provenance=d.get("provenance", {}),
                   world_size=d.get("world_size"), network=d.get("network"), warnings=list(d.get("warnings", [])),
                   models=dict(d.get("models") or {}),
                   **lists, **kw)

    def check(self) -> "Calibration":
        """This calibration, checked as :meth:`from_dict` checks a file (for one built in memory); ValueError
        naming the first field that fails."""
        _check(type(self), self.to_dict())
        return self

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Calibration":
        """The calibration saved at ``path``; ValueError naming the file and the field when it is not valid
        JSON or a field is missing, of the wrong type or out of range (:meth:`from_dict`)."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"calibration file {path} not found")
        try:
            d = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"calibration file {path}: not valid JSON ({exc})") from None
        try:
            return cls.from_dict(d)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"calibration file {path}: {exc}") from None

    def to_frame(self):
        """Every constant as one row of a pandas DataFrame (for tables and plots)."""
        import pandas as pd

        rows = []
        for k in self.SCALARS:
            c = getattr(self, k)
            if c is not None:
                rows.append({"constant": k, **c.to_dict()})
        for c in self.t_comp:
            rows.append({"constant": "t_comp_s", **c.to_dict()})
        for c in self.overhead:
            rows.append({"constant": "overhead_s", **c.to_dict()})
        for c in self.path_overhead:
            rows.append({"constant": "path_overhead_s", **c.to_dict()})
        for c in self.t_encode_decode:
            d = c.to_dict()
            d["params"] = json.dumps(c.params, sort_keys=True)
            rows.append({"constant": "t_encode_decode_s", **d})
        cols = ["constant", "model", "batch_size", "mode", "compressor", "params", "value", "low", "high", "unit", "r2", "n",
                "per_worker_s", "source", "note"]
        df = pd.DataFrame(rows)
        return df[[c for c in cols if c in df.columns]]

    # --------------------------------------------------------------- look-ups
    def require(self, name: str) -> Constant:
        """The scalar constant ``name``; ValueError naming it when the calibration lacks it."""
        if name not in self.SCALARS:
            raise ValueError(f"unknown calibration constant {name!r}; valid: {list(self.SCALARS)}")
        c = getattr(self, name)
        if c is None:
            raise ValueError(f"calibration {self.name!r} has no {name}; pass it explicitly")
        return c

    def t_comp_s(self, model: str, batch_size: int) -> tuple[float, str]:
        """``T_comp`` (s) of ``model`` at ``batch_size`` and how it was found.

        Exact entry if present; otherwise scaled linearly in batch size from the
        nearest batch size of the same model (assumes a saturated GPU: T_comp ∝ batch).
        """
        same = [c for c in self.t_comp if c.model == model]
        if not same:
            have = sorted({c.model for c in self.t_comp})
            raise ValueError(f"calibration {self.name!r} has no T_comp for model {model!r} "
                             f"(has: {have}); pass t_comp_s explicitly")
        for c in same:
            if c.batch_size == batch_size:
                return c.value, f"exact ({c.source})"
        known = [c for c in same if c.batch_size]
        if not known:
            c = same[0]
            return c.value, f"batch size not stated by the source, used as is ({c.source})"
        near = min(known, key=lambda c: (abs(math.log(c.batch_size / batch_size)), c.batch_size))
        return (near.value * batch_size / near.batch_size,
                f"scaled linearly from batch {near.batch_size} ({near.source})")

    def batch_size_of(self, model: str, default: int = 64) -> int:
        """The per-worker batch size of ``model``'s T_comp when the calibration has exactly one, else ``default``
        (what predict and advise assume when no batch size is given)."""
        found = {t.batch_size for t in self.t_comp if t.model == model and t.batch_size is not None}
        return found.pop() if len(found) == 1 else default

    def overhead_lookup(self, model: str, batch_size: int) -> tuple[float, str] | None:
        """``(O_s, how)`` of ``model`` at ``batch_size`` (exact entry only), or None."""
        for c in self.overhead:
            if c.model == model and c.batch_size == batch_size:
                return c.value, f"exact ({c.source})"
        return None

    def path_overhead_lookup(self, model: str, batch_size: int, mode: str) -> tuple[float, str] | None:
        """``(s, how)``: the compression path's overhead of ``model`` at ``batch_size`` in ``mode``, or None."""
        for c in self.path_overhead:
            if c.model == model and c.batch_size == batch_size and c.mode == mode:
                return c.value, f"exact ({c.source})"
        return None

    def t_encode_decode_s(self, compressor: str, params: dict | None, model: str) -> tuple[float, float, str]:
        """``(value_s, per_worker_s, how)`` for ``compressor(**params)`` on ``model``.

        Fallbacks, in order (each named in ``how``): exact match; linear interpolation
        (or extrapolation) in the one parameter that differs among this compressor's
        entries for ``model``; scaling an entry of another model by parameter count.
        """
        q = normalize_params(params, compressor)
        same_c = [e for e in self.t_encode_decode if e.compressor == compressor]
        if not same_c:
            have = sorted({e.compressor for e in self.t_encode_decode})
            raise ValueError(f"calibration {self.name!r} has no T_encode_decode for compressor {compressor!r} "
                             f"(has: {have}); pass t_encode_decode_s explicitly")
        # candidate sets: this model's entries, then each other model's scaled by parameter count
        sets = [([e for e in same_c if e.model == model], "")]
        others = sorted({e.model for e in same_c} - {model},
                        key=lambda m: (-sum(1 for e in same_c if e.model == m), m))
        for src in others:
            scale = models.numel(model) / models.numel(src)
            sets.append(([TEncodeDecode(**{**asdict(e), "value": e.value * scale,
                                           "per_worker_s": e.per_worker_s * scale, "model": model})
                          for e in same_c if e.model == src],
                         f"; scaled by parameter count from {src} (x{scale:.3f})"))
        for cands, how_model in sets:
            found = _match(cands, q, compressor)
            if found is not None:
                v, pw, how = found
                return v, pw, how + how_model
        have = sorted({(e.model, json.dumps(normalize_params(e.params), sort_keys=True, default=str))
                       for e in same_c})
        raise ValueError(f"calibration {self.name!r} has no T_encode_decode for {compressor} {q} on {model} "
                         f"(has (model, params): {have}); pass t_encode_decode_s explicitly")

    def compressors(self, model: str | None = None) -> list[tuple[str, dict]]:
        """(compressor, params) pairs with a T_encode_decode entry (for ``model`` if given)."""
        out, seen = [], set()
        for e in self.t_encode_decode:
            if model is None or e.model == model:
                norm = normalize_params(e.params, e.compressor)
                key = (e.compressor, json.dumps(norm, sort_keys=True, default=str))
                if key not in seen:
                    seen.add(key)
                    out.append((e.compressor, normalize_params(e.params)))
        return out


def _number(where: str, v, minimum: float | None = None, strict: bool = False, *, nan: bool = False,
            maximum: float | None = None) -> None:
    """ValueError unless ``v`` is a finite number (NaN too with ``nan``) above ``minimum`` (or at it, unless
    ``strict``) and at most ``maximum``."""
    bound = "" if minimum is None else f" {'>' if strict else '>='} {minimum:g}"
    if maximum is not None:
        bound += f"{' and' if bound else ''} <= {maximum:g}"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"field {where!r} must be a number{bound}, got {v!r}")
    if nan and math.isnan(v):
        return
    if not math.isfinite(v) or (minimum is not None and (v <= minimum if strict else v < minimum)) or (
            maximum is not None and v > maximum):
        raise ValueError(f"field {where!r} must be a number{bound}, got {v!r}")


def _integer(where: str, v, minimum: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValueError(f"field {where!r} must be an integer >= {minimum} or null, got {v!r}")


def _check_constant(where: str, c, name: str, cls) -> None:
    """The checks of one constant's fields (``where`` names it: ``gamma``, ``t_comp[1]``; ``name`` is its
    field of ``cls``, whose ``MINIMUM``, ``MAXIMUM``, ``UNITS`` and ``REQUIRED`` apply)."""
    if not isinstance(c, dict):
        raise ValueError(f"field {where!r} must be an object with value, unit and source, got {c!r}")
    for k in ("value", "unit", "source", *cls.REQUIRED.get(name, ())):
        if k not in c:
            raise ValueError(f"field {where!r} lacks required field {k!r}")
    lo, strict = cls.MINIMUM.get(name, (None, False))
    hi = cls.MAXIMUM.get(name)
    _number(f"{where}.value", c["value"], lo, strict, maximum=hi)
    for k in ("unit", "source", "note", "model", "compressor", "mode"):
        if k in c and not isinstance(c[k], str):
            raise ValueError(f"field {where + '.' + k!r} must be a string, got {c[k]!r}")
    unit = cls.UNITS.get(name)
    if unit is not None and c["unit"] != unit:
        raise ValueError(f"field {where + '.unit'!r} must be {unit!r} (the unit the model reads; convert the value "
                         f"and its interval), got {c['unit']!r}")
    for k in ("low", "high"):
        if c.get(k) is not None:
            _number(f"{where}.{k}", c[k], lo, strict, maximum=hi)
    if c.get("per_worker_s") is not None:
        _number(f"{where}.per_worker_s", c["per_worker_s"], -3600.0, maximum=3600.0)
    if name == "path_overhead" and c.get("mode", "post") not in cls.PATH_MODES:
        raise ValueError(f"field {where + '.mode'!r} must be one of {list(cls.PATH_MODES)}, got {c['mode']!r}")
    if c.get("low") is not None and c.get("high") is not None and c["low"] > c["high"]:
        raise ValueError(f"field {where + '.low'!r} {c['low']:g} is above {where + '.high'!r} {c['high']:g}")
    if c.get("r2") is not None:
        _number(f"{where}.r2", c["r2"], nan=True)
    if c.get("n") is not None:
        _integer(f"{where}.n", c["n"], 0)
    if c.get("batch_size") is not None:
        _integer(f"{where}.batch_size", c["batch_size"], 1)
    if "params" in c and not isinstance(c["params"], dict):
        raise ValueError(f"field {where + '.params'!r} must be an object, got {c['params']!r}")


def _check(cls, d: dict) -> None:
    """The checks of :meth:`Calibration.from_dict` (ValueError naming the first field that fails)."""
    if not isinstance(d["name"], str) or not d["name"]:
        raise ValueError(f"field 'name' must be a non-empty string, got {d['name']!r}")
    for k, typ, what in (("description", str, "a string"), ("provenance", dict, "an object"),
                         ("network", dict, "an object or null"), ("warnings", list, "a list of strings")):
        if d.get(k) is not None and not isinstance(d[k], typ):
            raise ValueError(f"field {k!r} must be {what}, got {d[k]!r}")
    if any(not isinstance(w, str) for w in d.get("warnings") or []):
        raise ValueError("field 'warnings' must be a list of strings")
    ms = d.get("models")
    if ms is not None and (not isinstance(ms, dict) or not all(
            isinstance(s, list) and all(isinstance(x, list) and all(isinstance(n, int) and n >= 0 for n in x)
                                        for x in s) for s in ms.values())):
        raise ValueError("field 'models' must map each model spec to its parameter shapes (lists of integers >= 0)")
    if d.get("world_size") is not None:
        _integer("world_size", d["world_size"], 1)
    for k in cls.SCALARS:
        if d.get(k) is not None:
            _check_constant(k, d[k], k, cls)
    for k in cls.LISTS:
        if k not in d:
            continue
        if not isinstance(d[k], list):
            raise ValueError(f"field {k!r} must be a list of constants, got {type(d[k]).__name__}")
        first: dict[str, int] = {}  # configuration -> index of its first entry
        for i, c in enumerate(d[k]):
            _check_constant(f"{k}[{i}]", c, k, cls)
            key = json.dumps([normalize_params(c.get(f)) if f == "params" else c.get(f) for f in cls.KEYS[k]],
                             sort_keys=True, default=str)
            if key in first:
                raise ValueError(f"field '{k}[{i}]' repeats '{k}[{first[key]}]' (same {', '.join(cls.KEYS[k])}); "
                                 "keep one entry per configuration")
            first[key] = i


def _match(cands: list[TEncodeDecode], q: dict, compressor: str | None = None):
    """Exact params match, else linear interpolation/extrapolation in the one numeric
    parameter where ``q`` differs (needs two entries agreeing on the others); else None."""
    for e in cands:
        if normalize_params(e.params, compressor) == q:
            return e.value, e.per_worker_s, f"exact ({e.source})"
    for key, val in q.items():
        if not isinstance(val, (int, float)) or isinstance(val, bool):
            continue
        rest = {k: v for k, v in q.items() if k != key}
        line = sorted((e for e in cands if isinstance(e.params.get(key), (int, float))
                       and {k: v for k, v in normalize_params(e.params, compressor).items() if k != key} == rest),
                      key=lambda e: e.params[key])
        distinct: dict[float, TEncodeDecode] = {}  # one entry per parameter value: two at one value span no line
        for e in line:
            distinct.setdefault(float(e.params[key]), e)
        line = list(distinct.values())
        if len(line) >= 2:
            xs = [float(e.params[key]) for e in line]
            # the two nearest points: interpolation inside, linear extrapolation outside
            i = max(1, min(len(xs) - 1, sum(1 for x in xs if x <= val)))
            a, b = line[i - 1], line[i]
            w = (val - a.params[key]) / (b.params[key] - a.params[key])
            v = a.value + w * (b.value - a.value)
            pw = a.per_worker_s + w * (b.per_worker_s - a.per_worker_s)
            kind = "interpolated" if xs[0] <= val <= xs[-1] else "extrapolated"
            return max(v, 0.0), max(pw, 0.0), f"{kind} in {key} from {a.params[key]} and {b.params[key]}"
    return None
