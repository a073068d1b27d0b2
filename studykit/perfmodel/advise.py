"""Which way of synchronizing gradients is fastest here? syncSGD, the fp16 baseline and every compressor,
ranked by predicted iteration time, with a verdict in words.

One call of :func:`advise` answers it for a grid of world sizes and bandwidths, from a calibration (the
user's, or the paper's V100 inputs: Agarwal et al. 2022, https://arxiv.org/abs/2103.00543);
:func:`answer` (``studykit.advise``) is the same call for a model name, spec or live module:

* every candidate is priced by :func:`studykit.perfmodel.model.predict` (the compressors' traffic from
  their ``plan()``, derived once per compressor: :mod:`~studykit.perfmodel.payload`): syncSGD (Sec. 4.1),
  the fp16 baseline (DDP's fp16 compress hook: Sec. 4.1 with every bucket in half precision, plus the
  calibration's fp16 cast time when it has one) and each registered compressor with its main parameter
  swept (:data:`MAIN_PARAMETER`), compression after the backward pass (App. B) or, with ``mode="hook"``,
  as a DDP hook (:func:`hook_options`; fp16 and bf16 hooks priced as the fp16 baseline in their dtype);
* the interval of each time comes from the calibration's intervals (bootstrap intervals of a fitted
  calibration, stated ranges of the paper's): the time is monotone in every constant (more latency,
  less bandwidth, larger gamma, T_comp, T_encode_decode, overhead: never faster), so evaluating the
  model at the corner where every constant is at its cheap end, and at the one where every constant
  is at its dear end, bounds it. It is an envelope, wider than a joint bootstrap interval;
  constants without an interval count as exact (named in :attr:`Advice.exact_constants`);
* two candidates are *within the model's error* when their intervals, each widened by the model's
  median error for its kind (the committed ``data/verification/summary.csv``, or ``model_error``),
  overlap: the model cannot tell them apart;
* the verdict (:meth:`Advice.verdict`): the fastest compressor that beats the better baseline beyond
  the model's error, its speed-ups over both baselines and the bandwidth above which it stops paying
  (:meth:`Advice.crossover_gbps`); or, when none does, which baseline to use;
* accuracy evidence: whether ``data/training/`` holds a time-to-accuracy run of the candidate
  (same compressor and parameters), only of other parameters, or none (:func:`accuracy_evidence`).
  Those runs are on the kit's small tasks (MNIST-1D, a synthetic set), not on the model advised on.
"""
from __future__ import annotations

import csv
import functools
import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from studykit import compressors, paths
from studykit.perfmodel.calibration import Calibration, normalize_params
from studykit.perfmodel.model import (DEFAULT_BUCKET_BYTES, Hardware, ModelOptions, Workload, plan_summaries,
                                      plan_summary, predict)

__all__ = ["MAIN_PARAMETER", "Candidate", "candidates", "Advice", "advise", "answer", "hook_options", "wire_bits",
           "cast_bytes_scale", "accuracy_evidence", "model_errors", "AdviseError", "SUMMARY_CSV", "TRAINING",
           "MODE_WORDS", "CROSSOVER_MIN_GBPS", "CROSSOVER_MAX_GBPS", "CROSSOVER_PER_DECADE"]

#: each compressor's main parameter and the three values swept (a compressor class may state its own
#: as ``main_parameter = ("rank", (1, 4, 16))``, which wins); compressors not named have no main parameter
MAIN_PARAMETER: dict[str, tuple[str, tuple]] = {
    "powersgd": ("rank", (1, 4, 16)),  # Vogels et al. 2019; Agarwal et al. 2022 Table 3 uses ranks 4, 8, 16
    "atomo": ("rank", (1, 4, 16)),
    "topk": ("ratio", (0.001, 0.01, 0.1)),  # 0.1 %, 1 %, 10 % of the entries
    "randomk": ("ratio", (0.001, 0.01, 0.1)),
    "dgc": ("ratio", (0.001, 0.01, 0.1)),
    "mstopk": ("ratio", (0.001, 0.01, 0.1)),
    "topk_chunked": ("ratio", (0.001, 0.01, 0.1)),
    "quantize": ("bits", (2, 4, 8)),
    "qsgd": ("levels", (1, 4, 16)),
    "thc": ("bits", (2, 4, 8)),
}
SYNC = "syncSGD"
FP16 = "fp16 baseline"
SUMMARY_CSV = paths.DATA / "verification" / "summary.csv"
TRAINING = paths.DATA / "training"
#: how each mode runs the compressors, in the verdict's words
MODE_WORDS = {"post": "after the backward pass", "hook": "DDP hook"}
#: the crossover search (:meth:`Advice.crossover_gbps`): a log grid of bandwidths (Gbit/s), so many points a
#: decade, from the lowest to at least the highest (4x the highest bandwidth asked, where that is more)
CROSSOVER_MIN_GBPS = 0.01
CROSSOVER_MAX_GBPS = 1000.0
CROSSOVER_PER_DECADE = 24


class AdviseError(ValueError):
    """A missing or invalid input of :func:`advise`; the message names it and how to supply it."""


@dataclass(frozen=True)
class Candidate:
    """One way to synchronize: ``kind`` is ``"syncsgd"``, ``"fp16_hook"`` or ``"compressor"``."""

    label: str
    kind: str
    compressor: str | None = None
    params: tuple = ()  # sorted (key, value) pairs

    @property
    def param_dict(self) -> dict:
        return dict(self.params)


def _main_parameter(name: str):
    cls = compressors.registry._lookup(name)
    own = getattr(cls, "main_parameter", None)
    return own if own is not None else MAIN_PARAMETER.get(name)


def candidates(names: Sequence[str] | None = None, sweep: dict | None = None) -> list[Candidate]:
    """syncSGD, the fp16 baseline, then each compressor of ``names`` (default: every registered one)
    at each value of its main parameter (``sweep`` overrides :data:`MAIN_PARAMETER`: ``{name: (param,
    values)}``; a value the compressor refuses raises)."""
    out = [Candidate(SYNC, "syncsgd"), Candidate(FP16, "fp16_hook")]
    avail = compressors.available()
    for n in (avail if names is None else names):
        if n not in avail:
            raise AdviseError(f"unknown compressor {n!r}; available: {', '.join(avail)}")
        main = (sweep or {}).get(n) or _main_parameter(n)
        settings = [{}] if main is None else [{main[0]: v} for v in main[1]]
        for ps in settings:
            compressors.get(n, **ps)  # refuses a bad value, naming it
            label = n + ("" if not ps else " " + ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                                                          for k, v in ps.items()))
            out.append(Candidate(label, "compressor", n, tuple(sorted(ps.items()))))
    return out


# ------------------------------------------------------------------ evidence
def _key(compressor: str, params: dict) -> str:
    return json.dumps([compressor, normalize_params(params, compressor)], sort_keys=True, default=str)


@functools.lru_cache(maxsize=8)
def _evidence_index(folder: str, stamp: tuple) -> dict:
    from studykit.measure.records import RecordError, load_records

    runs: dict[str, dict] = {}
    for f in sorted(Path(folder).rglob("*.jsonl")):
        try:
            recs = load_records(f, kind="train_epoch", quiet=True)
        except RecordError:
            continue
        for r in recs:
            rid = r.get("run_id")
            spec = r.get("method_spec") or {}
            levels = spec.get("levels") or []
            run = runs.setdefault(rid, {"method": r.get("method"), "levels": levels, "folder":
                                        str(f.parent.relative_to(paths.ROOT)) if f.is_relative_to(paths.ROOT)
                                        else str(f.parent), "dataset": (r.get("dataset") or {}).get("dataset"),
                                        "world_size": r.get("world_size"), "epochs": 0, "test_acc": None})
            run["epochs"] = max(run["epochs"], int(r.get("epoch", 0)) + 1)
            if r.get("test_acc") is not None:
                run["test_acc"] = r["test_acc"]  # the last epoch's (records are in epoch order)
    index: dict[str, dict] = {"static": {}, "other": {}}
    for run in runs.values():
        for level in run["levels"]:
            try:
                name, params = compressors.parse_spec(level)
            except (compressors.CompressorError, ValueError):
                continue
            entry = {k: run[k] for k in ("method", "folder", "dataset", "world_size", "epochs", "test_acc")}
            entry["spec"] = level
            kind = "static" if len(run["levels"]) == 1 else "other"
            index[kind].setdefault(_key(name, params), []).append(entry)
            index.setdefault("by_compressor", {}).setdefault(name, set()).add(level)
    return index


def _index(folder: Path) -> dict | None:
    if not folder.is_dir():
        return None
    stamp = tuple(sorted((str(f), f.stat().st_mtime_ns) for f in folder.rglob("*.jsonl")))
    return _evidence_index(str(folder), stamp)


def accuracy_evidence(candidate: Candidate, folder: Path | str = TRAINING, *, index: dict | None = None) -> dict:
    """What ``folder`` (``data/training/``) holds on the accuracy of ``candidate``: ``status`` is ``"yes"``
    (a run that trained with exactly this compressor and these parameters), ``"other parameters"``,
    ``"adaptive runs only"`` (only inside a dynamic ladder) or ``"none"``; ``runs`` lists them."""
    folder = Path(folder)
    index = index if index is not None else _index(folder)
    if index is None:
        return {"status": "none", "runs": [], "note": f"no training records at {folder}"}
    if candidate.kind == "syncsgd":
        name, params = "none", {}
    elif candidate.kind == "fp16_hook":
        name, params = "fp16", {}
    else:
        name, params = candidate.compressor, candidate.param_dict
    key = _key(name, params)
    if key in index["static"]:
        runs = index["static"][key]
        return {"status": "yes", "runs": runs,
                "note": "; ".join(sorted({f"{r['folder']} ({r['dataset']}, p={r['world_size']}, {r['epochs']} epochs, "
                                          f"test acc {r['test_acc']:.3f})" for r in runs}))}
    others = sorted(index.get("by_compressor", {}).get(name, set()))
    if key in index["other"]:
        return {"status": "adaptive runs only", "runs": index["other"][key],
                "note": f"only as a level of adaptive runs ({', '.join(others)})"}
    if others:
        return {"status": "other parameters", "runs": [], "note": f"runs of {', '.join(others)} only"}
    return {"status": "none", "runs": [], "note": f"no run of {name} in {folder.name}/"}


# ------------------------------------------------------------------ model error
def model_errors(path: Path | str = SUMMARY_CSV, platform: str = "gpu", variant: str = "paper") -> dict[str, float]:
    """Median |relative error| of the model per group (``syncSGD``, ``compressors (post)``,
    ``compressors (hook)``) on ``platform`` for ``variant`` (paper / extended), from ``verify``'s summary."""
    path = Path(path)
    if not path.is_file():
        raise AdviseError(f"no verification summary at {path}: run `python -m studykit verify` or pass "
                          "--model-error (e.g. 0.05 for 5 %)")
    out = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row.get("platform") == platform and row.get("variant") == variant:
                out[row["group"]] = float(row["median_abs_rel_error"])
    if not out:
        raise AdviseError(f"{path} has no rows for platform {platform!r}, variant {variant!r}; pass --model-error")
    return out


# ------------------------------------------------------------------ inputs
def _ends(c, what: str, notes: dict, exact: list) -> tuple[float, float, float]:
    """(value, low, high) of a calibration constant; an absent end counts as the value (named in ``exact``)."""
    lo = c.low if c.low is not None else c.value
    hi = c.high if c.high is not None else c.value
    if c.low is None or c.high is None:
        exact.append(what)
    notes[what] = c.source
    return float(c.value), float(min(lo, c.value)), float(max(hi, c.value))


def _tcomp_ends(cal: Calibration, model: str, batch_size: int, notes: dict, exact: list):
    try:
        v, how = cal.t_comp_s(model, batch_size)
    except ValueError as exc:
        raise AdviseError(f"{exc} (--t-comp-ms)") from None
    notes["t_comp"] = how
    entry = next((c for c in cal.t_comp if c.model == model and c.batch_size == batch_size), None)
    if entry is None or entry.low is None or entry.high is None:
        exact.append("t_comp_s")
        return v, v, v
    return v, float(entry.low), float(entry.high)


def _ted_ends(cal: Calibration, name: str, params: dict, model: str):
    """(value, low, high, per_worker, how) of T_encode_decode; raises ValueError when unknown.

    The calibration's look-up first (exact, interpolated, scaled from another model); a parameter value
    it cannot price takes the look-up of the nearest parameter value it can (log distance), flagged
    ``assumed`` (T_encode_decode of most compressors changes little with their main parameter; Agarwal et al. 2022
    Table 3: MSTopK 103 / 104 ms at 1 % / 0.1 %)."""
    q = normalize_params(params, name)
    try:
        v, pw, how = cal.t_encode_decode_s(name, params, model)
        used = q
    except ValueError:
        def dist(ep):
            d = 0.0
            for k in set(q) | set(ep):
                a, b = q.get(k), ep.get(k)
                if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b > 0:
                    d += abs(math.log(float(a) / float(b)))
                elif a != b:
                    d += 100.0
            return d

        others = {json.dumps(normalize_params(e.params, name), sort_keys=True, default=str)
                  for e in cal.t_encode_decode if e.compressor == name}
        for ep in sorted((json.loads(o) for o in others), key=dist):
            try:
                v, pw, how = cal.t_encode_decode_s(name, ep, model)
            except ValueError:
                continue
            shown = {k: x for k, x in ep.items() if q.get(k) != x}
            how = f"assumed equal to {json.dumps(shown)}'s, not measured at these parameters: {how}"
            used = ep
            break
        else:
            raise
    entry = next((e for e in cal.t_encode_decode if e.compressor == name and e.model == model
                  and normalize_params(e.params, name) == used), None)
    if entry is not None and entry.low is not None and entry.high is not None and how.startswith(("exact", "assumed")):
        return v, min(float(entry.low), v), max(float(entry.high), v), pw, how
    return v, v, v, pw, how


# ------------------------------------------------------------------ hooks
def hook_options(options: ModelOptions) -> tuple[ModelOptions, str]:
    """The terms that price a compressor run as a DDP hook (``mode="hook"``), and how to say so.

    The kit's hook model as ``python -m studykit verify --overlap timeline`` scores it on the hook
    campaigns: the protocol issued per DDP bucket (``hook_buckets``) on the per-bucket timeline
    (``overlap="timeline"``: :func:`~studykit.perfmodel.model.hook_timeline_s`), the backward pass at
    ``T_comp`` (``hook_gamma`` off, verify's default). The timeline needs nothing that compression after
    the backward pass does not: a calibration holds no per-bucket profile, so each bucket is ready once its
    bytes are done and takes its share of ``T_encode_decode`` by bytes. :meth:`ModelOptions.paper` stays
    the model as published, which has no hook model: App. B, as after the backward pass."""
    if options == ModelOptions.paper():
        return options, "App. B, as after the backward pass (the paper's model has no hook model)"
    return (replace(options, hook_buckets=True, overlap="timeline"),
            "per DDP bucket on the per-bucket timeline (ModelOptions hook_buckets, overlap='timeline'; each "
            "bucket ready once its bytes are done, encode/decode shared among buckets by bytes)")


def cast_bytes_scale(compressor: str, params: dict, workload: Workload) -> float | None:
    """For a one-round all-reduce codec whose payload is the gradient cast to a narrower type (fp16, bf16:
    ``Compressor.one_round_allreduce`` and a plan of all-reduces of every gradient element): its bytes over
    the fp32 gradient's (0.5 for a 2-byte type). None for any other compressor."""
    if not compressors.get(compressor, **params).one_round_allreduce:
        return None
    s = plan_summary(compressor, params, workload.shapes(), 2, shapes_key=workload.model or workload.param_shapes)
    numel = sum(int(c["numel"]) for c in s.collectives)
    if s.allgather_count or numel != workload.gradient_bytes // 4 or s.allreduce_bytes >= workload.gradient_bytes:
        return None
    return s.allreduce_bytes / workload.gradient_bytes


def wire_bits(compressor: str, params: dict, workload: Workload, world_sizes: np.ndarray) -> dict[int, dict]:
    """Per world size: bits per gradient element one worker puts on the link (``plan()``'s bytes, as the
    training loop's ``bits_per_element``) and the integer type its payload is summed in, if any."""
    numel = workload.gradient_bytes / 4
    sums = plan_summaries(compressor, params, workload.shapes(), world_sizes.tolist(),
                          shapes_key=workload.model or workload.param_shapes)
    out = {}
    for q, s in sums.items():
        summed = sorted({c["dtype"] for c in s.collectives if c["op"] == "all_reduce"
                         and str(c["dtype"]).startswith(("int", "uint"))})
        integer = any(str(c["dtype"]).startswith(("int", "uint")) for c in s.collectives)
        out[int(q)] = {"bits_per_element": 8 * s.wire_bytes / numel, "summed_in": summed[0] if summed else None,
                       "integer_payload": integer}
    return out


# ------------------------------------------------------------------ result
def _x(v: float) -> str:
    return "-" if not np.isfinite(v) else f"{v:.1f}x" if v >= 2 else f"{v:.2f}x"


@dataclass
class Advice:
    """The ranking over a (bandwidth x world size) grid. Arrays are ``(candidate, bandwidth, world size)``.

    ``time_s`` / ``low_s`` / ``high_s``: predicted iteration time and its interval (NaN for a candidate
    the calibration cannot price: see ``unranked``); ``error``: the model's relative error used per
    candidate; ``evidence``: :func:`accuracy_evidence` per candidate; ``wire``: per compressor and world
    size, the bits per element on the link (:func:`wire_bits`); ``pricer``: the same prices at central
    constants for other bandwidths (what :meth:`crossover_gbps` searches). ``str(advice)`` is what
    ``python -m studykit advise`` prints (:meth:`format`).
    """

    candidates: list[Candidate]
    world_sizes: np.ndarray
    bandwidths_gbps: np.ndarray
    time_s: np.ndarray
    low_s: np.ndarray
    high_s: np.ndarray
    error: np.ndarray
    evidence: list[dict]
    unranked: dict[str, str] = field(default_factory=dict)  # label -> why
    how: dict[str, dict] = field(default_factory=dict)  # label -> how its inputs were found
    inputs: dict = field(default_factory=dict)
    exact_constants: list[str] = field(default_factory=list)
    error_groups: list[str] = field(default_factory=list)  # per candidate: whose verification error it takes
    wire: dict[str, dict[int, dict]] = field(default_factory=dict)
    #: (bandwidths_gbps, world_size) -> central iteration times (s), (candidate, bandwidth)
    pricer: Any = field(default=None, repr=False, compare=False)
    _crossovers: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def order(self) -> np.ndarray:
        """Candidate indices by predicted time, per grid point: ``(rank, bandwidth, world size)``; unranked last."""
        t = np.where(np.isnan(self.time_s), np.inf, self.time_s)
        return np.argsort(t, axis=0, kind="stable")

    @property
    def best(self) -> np.ndarray:
        """Index of the fastest candidate per grid point ``(bandwidth, world size)``."""
        return self.order[0]

    def _widened(self):
        e = self.error[:, None, None]
        return self.low_s * (1 - e), self.high_s * (1 + e)

    @property
    def within_error_of_best(self) -> np.ndarray:
        """``(candidate, bandwidth, world size)``: its interval, widened by the model's error, overlaps the best's."""
        lo, hi = self._widened()
        b = self.best
        hi_best = np.take_along_axis(hi, b[None], axis=0)
        return (lo <= hi_best) & ~np.isnan(self.time_s)

    def index(self, world_size: int, bandwidth_gbps: float) -> tuple[int, int]:
        """Grid indices ``(bandwidth, world size)`` of a point of the grid."""
        i = np.flatnonzero(np.isclose(self.bandwidths_gbps, bandwidth_gbps))
        j = np.flatnonzero(self.world_sizes == world_size)
        if not len(i) or not len(j):
            raise AdviseError(f"({world_size} GPUs, {bandwidth_gbps} Gbit/s) is not on the grid: world sizes "
                              f"{self.world_sizes.tolist()}, bandwidths {self.bandwidths_gbps.tolist()}")
        return int(i[0]), int(j[0])

    # -------------------------------------------------------------- answers
    def _baselines(self) -> tuple[int, int]:
        kinds = [c.kind for c in self.candidates]
        return kinds.index("syncsgd"), kinds.index("fp16_hook")

    def speedups(self) -> tuple[np.ndarray, np.ndarray]:
        """Speed-up of every candidate over syncSGD and over the fp16 baseline (their time / its time; > 1:
        faster), each ``(candidate, bandwidth, world size)``."""
        s, f = self._baselines()
        return self.time_s[s] / self.time_s, self.time_s[f] / self.time_s

    @property
    def crossover_top_gbps(self) -> float:
        """The top of :meth:`crossover_gbps`'s bandwidth grid (Gbit/s)."""
        return float(max(CROSSOVER_MAX_GBPS, 4 * float(np.max(self.bandwidths_gbps))))

    def crossover_gbps(self, world_size: int) -> np.ndarray:
        """Per candidate: the bandwidth (Gbit/s) above which it stops beating the best baseline (the faster of
        syncSGD and the fp16 baseline at each bandwidth) on ``world_size`` GPUs. Central constants, the same
        prices on a log grid of bandwidths (:data:`CROSSOVER_PER_DECADE` a decade, from
        :data:`CROSSOVER_MIN_GBPS` to :attr:`crossover_top_gbps`, plus the asked bandwidths), the last
        crossing refined by linear interpolation of the log time ratio in log bandwidth. ``inf``: it still
        beats the best baseline at the grid's top; NaN: it never does (and for the baselines)."""
        world_size = int(world_size)
        if world_size in self._crossovers:
            return self._crossovers[world_size]
        if world_size not in self.world_sizes:
            raise AdviseError(f"world size {world_size} is not on the grid: {self.world_sizes.tolist()}")
        lo, hi = math.log10(CROSSOVER_MIN_GBPS), math.log10(self.crossover_top_gbps)
        grid = np.unique(np.concatenate([np.logspace(lo, hi, int(round((hi - lo) * CROSSOVER_PER_DECADE)) + 1),
                                         self.bandwidths_gbps]))
        T = self.pricer(grid, world_size)
        s, f = self._baselines()
        best = np.fmin(T[s], T[f])
        out = np.full(len(self.candidates), np.nan)
        for k, c in enumerate(self.candidates):
            if c.kind != "compressor" or np.isnan(T[k]).all():
                continue
            r = np.log(T[k] / best)  # < 0: it pays
            pays = r < 0
            if not pays.any():
                continue
            if pays[-1]:
                out[k] = np.inf
                continue
            i = int(np.flatnonzero(pays)[-1])
            x0, x1 = np.log(grid[i]), np.log(grid[i + 1])
            out[k] = float(np.exp(x0 - r[i] * (x1 - x0) / (r[i + 1] - r[i])))
        self._crossovers[world_size] = out
        return out

    def crossover_text(self, value: float) -> str:
        """A crossover bandwidth in words: ``"18 Gbit/s"``, ``"> 1000 Gbit/s"`` (pays at the grid's top) or
        ``"never"``."""
        if np.isnan(value):
            return "never"
        if np.isinf(value):
            return f"> {self.crossover_top_gbps:g} Gbit/s"
        return f"{value:.3g} Gbit/s"

    def verdict_data(self, world_size: int, bandwidth_gbps: float) -> dict:
        """The answer at one grid point, as data. The best baseline is the faster of syncSGD and the fp16
        baseline; the winner is the fastest compressor whose interval, widened by the model's error, lies
        wholly below the best baseline's (the identity compressor ``none`` is the compression path's cost, never
        a winner); None when no compressor beats the best baseline beyond the model's error."""
        i, j = self.index(world_size, bandwidth_gbps)
        s, f = self._baselines()
        t = self.time_s[:, i, j]
        lo, hi = (a[:, i, j] for a in self._widened())
        base = s if t[s] <= t[f] else f
        comps = [int(k) for k in self.order[:, i, j] if self.candidates[k].kind == "compressor"
                 and self.candidates[k].compressor != "none" and not np.isnan(t[k])]
        clear = [k for k in comps if hi[k] < lo[base]]
        k = clear[0] if clear else (comps[0] if comps else None)
        cross = self.crossover_gbps(world_size) if k is not None else None
        out = {"world_size": int(world_size), "bandwidth_gbps": float(bandwidth_gbps), "mode": self.inputs.get("mode"),
               "best_baseline": self.candidates[base].label, "winner": self.candidates[k].label if clear else None,
               "candidate": None if k is None else self.candidates[k].label,
               "speedup_over_syncsgd": None if k is None else float(t[s] / t[k]),
               "speedup_over_fp16": None if k is None else float(t[f] / t[k]),
               "model_error": None if k is None else float(self.error[k]),
               "crossover_gbps": None if k is None or not np.isfinite(cross[k]) else float(cross[k]),
               "crossover": None if k is None else self.crossover_text(cross[k])}
        out["text"] = self._verdict_text(out)
        return out

    def _verdict_text(self, v: dict) -> str:
        where = f"On {v['world_size']} GPUs at {v['bandwidth_gbps']:g} Gbit/s, "
        if v["winner"] is not None:
            c = v["crossover_gbps"]
            tail = (f"it stops paying above {v['crossover']}" if c is not None
                    else f"it pays at every bandwidth up to {self.crossover_top_gbps:g} Gbit/s")
            return (f"{where}{v['winner']} ({MODE_WORDS.get(v['mode'], v['mode'])}) is predicted "
                    f"{_x(v['speedup_over_syncsgd'])} faster than syncSGD and {_x(v['speedup_over_fp16'])} faster "
                    f"than the fp16 baseline (+-{100 * v['model_error']:.0f} %); {tail}.")
        base = "syncSGD" if v["best_baseline"] == SYNC else "the fp16 baseline"
        text = f"{where}no compressor is predicted faster than {base} beyond the model's error; use {base}"
        if v["candidate"] is not None:
            own = v["speedup_over_syncsgd"] if v["best_baseline"] == SYNC else v["speedup_over_fp16"]
            if own > 1:
                text += f" ({v['candidate']} is predicted {_x(own)} faster, within the model's error)"
        return text + "."

    def verdict(self, world_size: int, bandwidth_gbps: float) -> str:
        """The answer at one grid point in words (:meth:`verdict_data`'s ``text``)."""
        return self.verdict_data(world_size, bandwidth_gbps)["text"]

    def verdicts(self) -> list[dict]:
        """:meth:`verdict_data` of every grid point (bandwidth-major, as the tables)."""
        return [self.verdict_data(int(p), float(b)) for b in self.bandwidths_gbps for p in self.world_sizes]

    # -------------------------------------------------------------- views
    def ranking(self, world_size: int, bandwidth_gbps: float) -> list[dict]:
        """The ranking at one grid point: one dict per ranked candidate, fastest first, with its speed-ups over
        both baselines, its crossover bandwidth (:meth:`crossover_gbps`) and its bits on the link."""
        i, j = self.index(world_size, bandwidth_gbps)
        lo, hi = self._widened()
        over_sync, over_fp16 = self.speedups()
        cross = self.crossover_gbps(world_size)
        rows, prev = [], None
        within = self.within_error_of_best[:, i, j]
        for r, c in enumerate(self.order[:, i, j]):
            if np.isnan(self.time_s[c, i, j]):
                break
            tie_prev = prev is not None and lo[c, i, j] <= hi[prev, i, j]
            cand = self.candidates[c]
            wire = self.wire.get(cand.label, {}).get(int(world_size))
            rows.append({"rank": r + 1, "candidate": cand.label, "compressor": cand.compressor,
                         "params": cand.param_dict, "kind": cand.kind,
                         "iteration_ms": 1e3 * float(self.time_s[c, i, j]),
                         "low_ms": 1e3 * float(self.low_s[c, i, j]), "high_ms": 1e3 * float(self.high_s[c, i, j]),
                         "speedup_over_syncsgd": float(over_sync[c, i, j]),
                         "speedup_over_fp16": float(over_fp16[c, i, j]),
                         "crossover_gbps": float(cross[c]) if np.isfinite(cross[c]) else None,
                         "crossover": self.crossover_text(cross[c]) if cand.kind == "compressor"
                         and cand.compressor != "none" else None,
                         "bits_per_element": None if wire is None else wire["bits_per_element"],
                         "summed_in": None if wire is None else wire["summed_in"],
                         "model_error": float(self.error[c]), "within_error_of_best": bool(within[c]),
                         "within_error_of_previous": bool(tie_prev),
                         "accuracy_evidence": self.evidence[c]["status"],
                         "evidence_note": self.evidence[c]["note"], "inputs": self.how.get(cand.label, {})})
            prev = c
        return rows

    def frame(self):
        """Tidy pandas DataFrame: one row per (candidate, bandwidth, world size), with ``rank``."""
        import pandas as pd

        ranks = np.empty_like(self.order)
        np.put_along_axis(ranks, self.order, np.arange(len(self.candidates))[:, None, None], axis=0)
        nb, npp = len(self.bandwidths_gbps), len(self.world_sizes)
        n = len(self.candidates)
        over_sync, over_fp16 = self.speedups()
        return pd.DataFrame({
            "candidate": np.repeat([c.label for c in self.candidates], nb * npp),
            "bandwidth_gbps": np.tile(np.repeat(self.bandwidths_gbps, npp), n),
            "world_size": np.tile(self.world_sizes, n * nb),
            "iteration_s": self.time_s.ravel(), "low_s": self.low_s.ravel(), "high_s": self.high_s.ravel(),
            "speedup_over_syncsgd": over_sync.ravel(), "speedup_over_fp16": over_fp16.ravel(),
            "rank": np.where(np.isnan(self.time_s), -1, ranks + 1).ravel(),
            "within_error_of_best": self.within_error_of_best.ravel(),
            "accuracy_evidence": np.repeat([e["status"] for e in self.evidence], nb * npp)})

    def to_dict(self) -> dict:
        """Everything as JSON-able data (what ``advise --json`` prints): the verdicts first."""
        return {"verdicts": self.verdicts(), "inputs": self.inputs, "exact_constants": self.exact_constants,
                "unranked": self.unranked,
                "candidates": [{"label": c.label, "kind": c.kind, "compressor": c.compressor, "params": c.param_dict,
                                "model_error": float(e), "accuracy_evidence": ev["status"],
                                "evidence_note": ev["note"], "inputs": self.how.get(c.label, {}),
                                "wire": {str(q): w for q, w in self.wire.get(c.label, {}).items()}}
                               for c, e, ev in zip(self.candidates, self.error, self.evidence)],
                "points": [{"world_size": int(p), "bandwidth_gbps": float(b),
                            "ranking": [{k: v for k, v in r.items() if k not in ("inputs", "evidence_note", "params",
                                                                                 "compressor", "kind")}
                                        for r in self.ranking(int(p), float(b))]}
                           for b in self.bandwidths_gbps for p in self.world_sizes]}

    def format(self, top: int | None = None) -> str:
        """The human answer (what ``python -m studykit advise`` prints): one verdict per (world size,
        bandwidth), the legend, then one table per point. ``top``: the first ``top`` compressors of each
        ranking, and both baselines always."""
        i = self.inputs
        errs = sorted(set(zip(self.error_groups, self.error.tolist())))
        hooks = i["mode"] == "hook"
        lines = [v["text"] for v in self.verdicts()]
        lines += ["",
                  f"{i['model']}, batch {i['batch_size']} per GPU, calibration {i['calibration']!r}, compressors "
                  + ("as DDP hooks, priced " + i["hook_terms"] if hooks else "after the backward pass (App. B)"),
                  f"time: predicted iteration time (ms) = overhead O + T_obs; O: {i.get('overhead')}"
                  + (f"; compute {i['compute_speedup']:g}x faster (T_comp, T_encode_decode divided)"
                     if i.get("compute_speedup", 1.0) != 1.0 else ""),
                  "baselines: syncSGD (Sec. 4.1) and the fp16 baseline (DDP's fp16 compress hook: Sec. 4.1 in half "
                  "precision, plus the casts)" + ("; fp16 / bf16 as hooks are priced as that hook in their dtype"
                                                  if hooks else ""),
                  "interval: the model at both ends of every calibrated interval"
                  + (f" (taken as exact: {', '.join(self.exact_constants)})" if self.exact_constants else ""),
                  f"'~' : within the model's error of the fastest; +-: the model's error ({i['model_error']}: "
                  + ", ".join(f"{'syncSGD and the all-reduce hooks' if g == SYNC else g} {100 * e:.1f} %"
                              for g, e in errs) + ")",
                  "x sync, x fp16: speed-up over syncSGD, over the fp16 baseline (> 1: faster); stops above: the "
                  "bandwidth above which the row no longer beats the best baseline on that many GPUs",
                  "none: the identity compressor through the compression path (the fp32 gradient, unchanged): "
                  "its gap to syncSGD is what the path itself costs; never the verdict",
                  "accuracy: time-to-accuracy runs in data/training/ (the kit's small tasks, not this model)"]
        scaled = sorted({h.split("scaled by parameter count from ", 1)[1].split(" (")[0]
                         for h in (v.get("t_encode_decode", "") for v in self.how.values())
                         if "scaled by parameter count from " in h})
        if scaled:  # the calibration has no profile of this model: say where its codec times come from
            lines.append(f"encode/decode: not profiled on {i['model']}: scaled by parameter count from "
                         f"{', '.join(scaled)} (python -m studykit profile --model {i['model']} measures them)")
        w = max(len(c.label) for c in self.candidates)
        for b in self.bandwidths_gbps:
            for p in self.world_sizes:
                rows = self.ranking(int(p), float(b))
                keep = {r["candidate"] for r in [r for r in rows if r["kind"] == "compressor"][:top]}
                shown = [r for r in rows if not top or r["candidate"] in keep or r["kind"] != "compressor"]
                lines += ["", f"{int(p)} GPUs, {b:g} Gbit/s",
                          f"{'rank':>4}  {'candidate':<{w}}  {'ms':>9}  {'interval ms':>19}     {'x sync':>6}  "
                          f"{'x fp16':>6}  {'stops above':>16}  accuracy evidence"]
                for r in shown:
                    lines.append(f"{r['rank']:>4}  {r['candidate']:<{w}}  {r['iteration_ms']:>9.1f}  "
                                 f"[{r['low_ms']:>8.1f}, {r['high_ms']:>8.1f}]  "
                                 f"{'~' if r['within_error_of_best'] else ' '}  {_x(r['speedup_over_syncsgd']):>6}  "
                                 f"{_x(r['speedup_over_fp16']):>6}  {r['crossover'] or '':>16}  "
                                 f"{r['accuracy_evidence']}")
                bits = [r for r in shown if r["kind"] == "compressor" and self._integer_sum(r["candidate"])]
                if bits:
                    lines.append(f"bits per element on the link at {int(p)} GPUs (an integer sum of {int(p)} "
                                 "workers needs wider fields): " + ", ".join(
                                     f"{r['candidate']} {r['bits_per_element']:.1f}"
                                     + (f" (summed in {r['summed_in']}"
                                        + (", as many as fp16)" if r["bits_per_element"] >= 16 - 1e-6 else ")")
                                        if r["summed_in"] else " (gathered)") for r in bits))
        if self.unranked:
            no_ted = [k for k, v in self.unranked.items() if "no T_encode_decode" in v]
            lines += ["", "not ranked:"]
            if no_ted:
                lines.append(f"  {', '.join(no_ted)}: calibration {i['calibration']!r} has no T_encode_decode of these "
                             f"on {i['model']}; measure them (python -m studykit profile) and fit a calibration")
            lines += [f"  {k}: {v}" for k, v in self.unranked.items() if k not in no_ted]
        return "\n".join(lines)

    def _integer_sum(self, label: str) -> bool:
        """Whether the candidate sums its payload in an integer type at some world size of the grid."""
        return any(w["summed_in"] for w in self.wire.get(label, {}).values())

    def __str__(self) -> str:
        return self.format()


# ------------------------------------------------------------------ advise
def advise(calibration: Calibration, model: str, batch_size: int, world_sizes: Sequence[int],
           bandwidths_gbps: Sequence[float] | None = None, *, candidate_list: Sequence[Candidate] | None = None,
           options: ModelOptions | None = None, mode: str = "post", model_error: float | dict | None = None,
           t_comp_s: float | None = None, overhead_s: float | None = None, alpha_s: float | None = None,
           gamma: float | None = None, compute_speedup: float = 1.0, bucket_bytes: float = DEFAULT_BUCKET_BYTES,
           evidence: bool = True, training_folder: Path | str = TRAINING, platform: str = "gpu") -> Advice:
    """Rank syncSGD, the fp16 baseline and every compressor (:func:`candidates`) by predicted iteration
    time on a (bandwidth x world size) grid (see the module docstring for intervals, error and evidence).

    ``bandwidths_gbps=None`` uses the calibration's bandwidth (and its interval); given bandwidths are
    exact. ``t_comp_s`` / ``overhead_s`` / ``alpha_s`` / ``gamma`` override the calibration's (exact);
    ``compute_speedup`` divides ``T_comp`` and ``T_encode_decode`` (``Hardware.compute_speedup``, App. D).
    ``model_error``: a fraction for every candidate, a dict per group (``syncSGD``, ``compressors (post)``,
    ``compressors (hook)``), or None for ``data/verification/summary.csv`` (``platform``, and the variant
    of ``options``: extended for :meth:`ModelOptions.extended`, else paper). ``mode="hook"`` prices the
    compressors with :func:`hook_options` and a one-round cast codec (:func:`cast_bytes_scale`) as the fp16
    baseline's equation in its own dtype. Both baselines are always priced (appended to ``candidate_list``
    when missing). Missing inputs raise :class:`AdviseError` naming them."""
    opts = options or ModelOptions()
    if mode not in MODE_WORDS:
        raise AdviseError(f"mode must be 'post' or 'hook', got {mode!r}")
    if not (isinstance(compute_speedup, (int, float)) and np.isfinite(compute_speedup) and compute_speedup > 0):
        raise AdviseError(f"compute speed-up must be a finite number > 0, got {compute_speedup!r} (--compute-speedup)")
    notes: dict[str, Any] = {"calibration": calibration.name}
    exact: list[str] = []
    p = np.asarray(sorted({int(x) for x in world_sizes}), dtype=np.int64)
    if p.size == 0 or np.any(p < 1):
        raise AdviseError(f"world sizes must be integers >= 1, got {list(world_sizes)!r} (--gpus)")
    # --- the network and the cluster's constants: (value, low, high)
    if bandwidths_gbps is None or len(bandwidths_gbps) == 0:
        if calibration.bandwidth_gbps is None:
            raise AdviseError(f"no bandwidth: calibration {calibration.name!r} has no bandwidth_gbps; "
                              "pass bandwidths (--bandwidth-gbps)")
        bw_c, bw_lo, bw_hi = _ends(calibration.bandwidth_gbps, "bandwidth_gbps", notes, exact)
        bw = np.asarray([bw_c])
        bw_scale = (1.0, bw_hi / bw_c, bw_lo / bw_c)  # the cheap corner has the most bandwidth
    else:
        bw = np.asarray(sorted({float(b) for b in bandwidths_gbps}), dtype=float)
        if np.any(~np.isfinite(bw)) or np.any(bw <= 0):
            raise AdviseError(f"bandwidths must be finite and > 0 Gbit/s, got {list(bandwidths_gbps)!r}")
        bw_scale = (1.0, 1.0, 1.0)
        notes["bandwidth_gbps"] = "given"
    ends = {}
    sync_terms = opts.sync_terms or opts.per_tensor
    for name, override in (("alpha_s", alpha_s), ("gamma", gamma)):
        if override is not None:
            ends[name] = (float(override),) * 3
            notes[name] = "given"
        elif name == "gamma" and sync_terms and calibration.gamma_extended is not None:
            ends[name] = _ends(calibration.gamma_extended, "gamma_extended", notes, exact)  # fitted with the terms
        elif getattr(calibration, name) is None:
            flag = "--alpha-s" if name == "alpha_s" else "--gamma"
            raise AdviseError(f"no {name}: calibration {calibration.name!r} has none; pass {flag}")
        else:
            ends[name] = _ends(getattr(calibration, name), name, notes, exact)
    ends["incast_coeff"] = (_ends(calibration.incast_coeff, "incast_coeff", notes, exact)
                            if calibration.incast_coeff is not None else (0.0, 0.0, 0.0))
    # the extended model's syncSGD terms (ModelOptions.sync_terms / per_tensor), where the calibration has them
    for name, on in (("sync_delta_s", opts.sync_terms), ("per_bucket_s", opts.sync_terms),
                     ("per_tensor_s", opts.per_tensor)):
        c = getattr(calibration, name)
        if on and c is not None:
            ends[name] = _ends(c, name, notes, exact)
        else:
            ends[name] = (0.0, 0.0, 0.0)
            if on:
                notes[name] = f"not in calibration {calibration.name!r}: 0 (fit records with DDP runs of several models)"
    if t_comp_s is not None:
        tc = (float(t_comp_s),) * 3
        notes["t_comp"] = "given"
    else:
        tc = _tcomp_ends(calibration, model, batch_size, notes, exact)
    if overhead_s is not None:
        oh = (float(overhead_s),) * 3
        notes["overhead"] = "given"
    else:
        found = next((c for c in calibration.overhead if c.model == model and c.batch_size == batch_size), None)
        if found is None:
            oh = (0.0, 0.0, 0.0)
            notes["overhead"] = ("unknown: 0 (iteration time = T_obs; the calibration has no forward/optimizer "
                                 "overhead for this model and batch)")
        else:
            oh = _ends(found, "overhead_s", notes, exact)
            notes["overhead"] = found.source
    # --- model error per group
    extended = opts.bucketing == "ddp" or opts.sync_terms or opts.per_tensor or opts.path_overhead or \
        opts.cpu_contention or opts.collectives == "measured" or opts.overlap == "timeline"
    variant = "extended" if extended else "paper"
    if model_error is None:
        errs = model_errors(SUMMARY_CSV, platform, variant)
        notes["model_error"] = f"{SUMMARY_CSV.relative_to(paths.ROOT)}: median |error|, {platform}, {variant} model"
    elif isinstance(model_error, dict):
        errs = dict(model_error)
        notes["model_error"] = "given per group"
    else:
        if not (np.isfinite(model_error) and 0 <= model_error < 1):
            raise AdviseError(f"model error must be a fraction in [0, 1), got {model_error!r} (--model-error)")
        errs = {}
        notes["model_error"] = f"given: {model_error:g}"
    comp_group = f"compressors ({mode})"

    cands = list(candidate_list) if candidate_list is not None else candidates()
    for base in candidates([])[:2]:  # both baselines, always
        if not any(c.kind == base.kind for c in cands):
            cands.append(base)
    try:
        work0 = Workload(model, batch_size, t_comp_s=tc[0], bucket_bytes=bucket_bytes)
    except ValueError as exc:
        raise AdviseError(f"{exc} (--model, --batch-size, --bucket-mb)") from None
    hook_opts, hook_how = hook_options(opts) if mode == "hook" else (opts, None)
    unranked: dict[str, str] = {}
    how: dict[str, dict] = {}
    teds: dict[str, tuple] = {}
    casts: dict[str, float] = {}
    wire: dict[str, dict] = {}
    for c in cands:
        if c.kind == "syncsgd":
            how[c.label] = {"equation": "Sec. 4.1"}
        elif c.kind == "fp16_hook":
            how[c.label] = {"equation": "Sec. 4.1 with every bucket in fp16 (DDP's fp16 compress hook)"}
            try:
                teds[c.label] = _ted_ends(calibration, "fp16", {}, model)
                how[c.label]["cast"] = f"fp16 T_encode_decode added: {teds[c.label][4]}"
            except ValueError:
                how[c.label]["cast"] = "no fp16 T_encode_decode in the calibration: the casts count as free"
        else:
            try:
                teds[c.label] = (_ted_ends(calibration, c.compressor, c.param_dict, model) if c.compressor != "none"
                                 else (0.0, 0.0, 0.0, 0.0, "none encodes nothing"))
            except ValueError:
                have = sorted({e.compressor for e in calibration.t_encode_decode if e.model == model})
                unranked[c.label] = (f"calibration {calibration.name!r} has no T_encode_decode of {c.compressor} on "
                                     f"{model} (has: {', '.join(have) or 'none'}); measure it with `python -m studykit "
                                     "profile` and fit a calibration")
            try:
                wire[c.label] = wire_bits(c.compressor, c.param_dict, work0, p)
                scale = cast_bytes_scale(c.compressor, c.param_dict, work0) if mode == "hook" else None
            except (ValueError, compressors.CompressorError) as exc:
                unranked.setdefault(c.label, str(exc))
                continue
            if c.label in unranked:
                continue
            if scale is not None:
                casts[c.label] = scale
                how[c.label] = {"equation": f"Sec. 4.1 with every bucket at {scale:g} of its fp32 bytes (priced as "
                                            "PyTorch's equivalent compress hook)", "cast": teds[c.label][4]}
            else:
                how[c.label] = {"equation": "App. B, collectives from plan()" if mode == "post"
                                else f"DDP hook: {hook_how}; collectives from plan()",
                                "t_encode_decode": teds[c.label][4]}
                if hook_opts.path_overhead:  # the calibration's, for this model, batch and mode (as predict finds it)
                    found = calibration.path_overhead_lookup(model, batch_size, mode)
                    how[c.label]["path_overhead"] = "none fitted" if found is None else found[1]
    timeline = mode == "hook" and hook_opts.overlap == "timeline"

    def price(bw_gbps, world, corners, failed: dict) -> np.ndarray:
        """Iteration times ``(corner, candidate, bandwidth, world size)`` at the constants' ``corners`` (0 central,
        1 cheap end, 2 dear end); a candidate ``predict`` refuses is NaN, with why in ``failed``."""
        col = lambda t: np.asarray([t[i] for i in corners], dtype=float)[:, None, None]  # noqa: E731
        hw = Hardware(bandwidth_gbps=np.asarray(bw_gbps, dtype=float)[None, :, None] * col(bw_scale),
                      alpha_s=col(ends["alpha_s"]), gamma=col(ends["gamma"]), incast_coeff=col(ends["incast_coeff"]),
                      sync_delta_s=col(ends["sync_delta_s"]), per_bucket_s=col(ends["per_bucket_s"]),
                      per_tensor_s=col(ends["per_tensor_s"]), compute_speedup=float(compute_speedup))
        work = Workload(model, batch_size, t_comp_s=col(tc), overhead_s=col(oh), bucket_bytes=bucket_bytes)
        grid_p = np.asarray(world)[None, None, :]
        T = np.full((len(corners), len(cands), len(bw_gbps), len(world)), np.nan)

        def allreduce_hook(scale: float, ted) -> np.ndarray:
            # Sec. 4.1 with every bucket at `scale` of its bytes (DDP's built-in all-reduce, or a compress hook
            # that casts), plus the casts when the calibration times them
            t = predict(work, hw, grid_p, options=opts, sync_bytes_scale=scale).sync["iteration_s"]
            return t if ted is None else t + (col(ted[:3]) + ted[3] * grid_p) / hw.compute_speedup

        for k, c in enumerate(cands):
            if c.label in failed:
                continue
            try:
                if c.kind == "syncsgd":
                    t = allreduce_hook(1.0, None)
                elif c.kind == "fp16_hook":
                    t = allreduce_hook(0.5, teds.get(c.label))
                elif c.label in casts:
                    t = allreduce_hook(casts[c.label], teds[c.label])
                else:
                    v, lo, hi, pw, _ = teds[c.label]
                    # the hook timeline takes one world size per call
                    t = np.concatenate([np.broadcast_to(
                        predict(work, hw, q, c.compressor, c.param_dict, t_encode_decode_s=col((v, lo, hi)) + pw * q,
                                options=hook_opts, mode=mode, calibration=calibration).compressed["iteration_s"],
                        T.shape[:1] + T.shape[2:3] + (np.size(q),)) for q in (world if timeline else [world])], axis=-1)
            except (ValueError, compressors.CompressorError) as exc:
                failed[c.label] = str(exc)
                continue
            T[:, k] = t
        return T

    T = price(bw, p, (0, 1, 2), unranked)
    for label in unranked:
        how.pop(label, None)
    notes.update({"model": model, "batch_size": batch_size, "mode": mode, "compute_speedup": float(compute_speedup),
                  "options": {f: getattr(opts, f) for f in opts.__dataclass_fields__},
                  "interval": "model at the cheap and the dear end of every calibrated constant's interval",
                  "time": "iteration time: overhead O (forward, optimizer step) + T_obs"})
    if mode == "hook":
        notes["hook_terms"] = hook_how
        notes["hook_options"] = {f: getattr(hook_opts, f) for f in hook_opts.__dataclass_fields__}
    notes["t_comp_s"] = tc[0]

    def err_of(c: Candidate) -> tuple[str, float]:
        g = SYNC if c.kind in ("syncsgd", "fp16_hook") or c.label in casts else comp_group
        if not isinstance(model_error, dict) and model_error is not None:
            return g, float(model_error)
        if g not in errs and g == "compressors (hook)" and "compressors (blocking hook)" in errs:
            # platforms measured only with the kit's first (blocking) hook: its error, said in the notes
            g = "compressors (blocking hook)"
            notes["model_error_hook"] = "the blocking hook's (no overlapped-hook records on this platform)"
        if g not in errs:
            raise AdviseError(f"no model error for group {g!r} (have {sorted(errs)}); pass --model-error")
        return g, errs[g]

    groups, error = zip(*(err_of(c) for c in cands))
    error = np.asarray(error, dtype=float)
    index = _index(Path(training_folder)) if evidence else None
    ev = [accuracy_evidence(c, training_folder, index=index) if evidence
          else {"status": "not checked", "note": "", "runs": []} for c in cands]
    low = np.fmin(T[1], T[2])
    high = np.fmax(T[1], T[2])

    def central(bw_gbps, world_size: int) -> np.ndarray:
        return price(np.asarray(bw_gbps, dtype=float), np.asarray([int(world_size)]), (0,), dict(unranked))[0, :, :, 0]

    return Advice(candidates=cands, world_sizes=p, bandwidths_gbps=bw, time_s=T[0], low_s=np.fmin(low, T[0]),
                  high_s=np.fmax(high, T[0]), error=error, evidence=ev, unranked=unranked, how=how, inputs=notes,
                  exact_constants=sorted(set(exact)), error_groups=list(groups), wire=wire, pricer=central)


# ------------------------------------------------------------------ the Python entry
def answer(model, *, gpus, bandwidth_gbps, calibration=None, batch_size: int | None = None, mode: str = "post",
           terms: str = "default", compressors: Sequence[str] | None = None, **kw) -> Advice:
    """``studykit.advise``: which way of synchronizing gradients is fastest for ``model`` on ``gpus`` GPUs at
    ``bandwidth_gbps`` Gbit/s? One call of :func:`advise`, set up as ``python -m studykit advise`` sets it up.

    ``model``: a model name or spec :mod:`studykit.models` knows, or a live ``torch.nn.Module`` (registered
    with ``studykit.models.register`` under its class name); ``gpus`` / ``bandwidth_gbps``: one value or
    several (``bandwidth_gbps=None``: the calibration's); ``calibration``: a :class:`Calibration`, a path to
    one, or None for the paper's V100 inputs; ``terms``: ``"default"``, ``"paper"`` or ``"extended"`` (as
    ``--terms``); ``compressors``: the names to rank (default every registered one); ``kw``: :func:`advise`'s
    keywords (``model_error``, ``t_comp_s``, ``compute_speedup``, ...). ``str(result)`` is what the command
    prints, verdicts first."""
    from studykit.perfmodel.cli import DEFAULT_CALIBRATION, TERMS

    if not isinstance(model, str):
        import torch

        if not isinstance(model, torch.nn.Module):
            raise AdviseError(f"model must be a model name, a model spec or a torch.nn.Module, "
                              f"got {type(model).__name__}")
        from studykit import models

        if not hasattr(models, "register"):
            raise AdviseError("a torch.nn.Module needs studykit.models.register, which this version lacks; "
                              f"pass a model name ({', '.join(models.available())})")
        # the class name and a digest of the parameter shapes: another architecture gets another name, so no
        # cache keyed by the model's name (its shapes, its payloads) can answer for it
        shapes = [tuple(t.shape) for t in model.parameters() if t.requires_grad]
        model = models.register(f"{type(model).__name__}_{hashlib.sha1(repr(shapes).encode()).hexdigest()[:8]}",
                                model)
    if terms not in TERMS:
        raise AdviseError(f"terms must be one of {', '.join(TERMS)}, got {terms!r}")
    if not isinstance(calibration, Calibration):
        where = DEFAULT_CALIBRATION if calibration is None else calibration
        try:
            calibration = Calibration.load(where)
        except (FileNotFoundError, ValueError) as exc:
            raise AdviseError(f"calibration: {exc}") from None
    if batch_size is None:
        batch_size = calibration.batch_size_of(model)
    gpus = [gpus] if np.ndim(gpus) == 0 else list(gpus)
    bws = None if bandwidth_gbps is None else [bandwidth_gbps] if np.ndim(bandwidth_gbps) == 0 else list(bandwidth_gbps)
    cands = None if compressors is None else candidates(compressors)
    return advise(calibration, model, batch_size, gpus, bws, candidate_list=cands, options=TERMS[terms], mode=mode,
                  **kw)
