"""Which way of synchronizing gradients is fastest here? syncSGD, the fp16 baseline and every compressor,
ranked by predicted iteration time (issue 13, item 5).

One call of :func:`advise` answers it for a grid of world sizes and bandwidths, from a calibration (the
user's, or the paper's V100 inputs: Agarwal et al. 2022, https://arxiv.org/abs/2103.00543):

* every candidate is priced by :func:`studykit.perfmodel.model.predict` (one vectorized call per
  candidate; the compressors' traffic from their ``plan()``, derived once per compressor:
  :mod:`~studykit.perfmodel.payload`): syncSGD (Sec. 4.1), the fp16 baseline (DDP's fp16 compress
  hook: Sec. 4.1 with every bucket in half precision, plus the calibration's fp16 cast time when it
  has one) and each registered compressor with its main parameter swept (:data:`MAIN_PARAMETER`),
  compression after the backward pass (App. B) unless ``mode="hook"``;
* the interval of each time comes from the calibration's intervals (bootstrap intervals of a fitted
  calibration, stated ranges of the paper's): the time is monotone in every constant (more latency,
  less bandwidth, larger gamma, T_comp, T_encode_decode, overhead: never faster), so evaluating the
  model at the corner where every constant is at its cheap end, and at the one where every constant
  is at its dear end, bounds it. It is an envelope, wider than a joint bootstrap interval;
  constants without an interval count as exact (named in :attr:`Advice.exact_constants`);
* two candidates are *within the model's error* when their intervals, each widened by the model's
  median error for its kind (the committed ``data/verification/summary.csv``, or ``model_error``),
  overlap: the model cannot tell them apart;
* accuracy evidence: whether ``data/training/`` holds a time-to-accuracy run of the candidate
  (same compressor and parameters), only of other parameters, or none (:func:`accuracy_evidence`).
  Those runs are on the kit's small tasks (MNIST-1D, a synthetic set), not on the model advised on.
"""
from __future__ import annotations

import csv
import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from studykit import compressors, paths
from studykit.perfmodel.calibration import Calibration, normalize_params
from studykit.perfmodel.model import DEFAULT_BUCKET_BYTES, Hardware, ModelOptions, Workload, predict

__all__ = ["MAIN_PARAMETER", "Candidate", "candidates", "Advice", "advise", "accuracy_evidence", "model_errors",
           "AdviseError", "SUMMARY_CSV", "TRAINING"]

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


# ------------------------------------------------------------------ result
@dataclass
class Advice:
    """The ranking over a (bandwidth x world size) grid. Arrays are ``(candidate, bandwidth, world size)``.

    ``time_s`` / ``low_s`` / ``high_s``: predicted iteration time and its interval (NaN for a candidate
    the calibration cannot price: see ``unranked``); ``error``: the model's relative error used per
    candidate; ``evidence``: :func:`accuracy_evidence` per candidate.
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

    def ranking(self, world_size: int, bandwidth_gbps: float) -> list[dict]:
        """The ranking at one grid point: one dict per ranked candidate, fastest first."""
        i, j = self.index(world_size, bandwidth_gbps)
        lo, hi = self._widened()
        rows, prev = [], None
        within = self.within_error_of_best[:, i, j]
        for r, c in enumerate(self.order[:, i, j]):
            if np.isnan(self.time_s[c, i, j]):
                break
            tie_prev = prev is not None and lo[c, i, j] <= hi[prev, i, j]
            cand = self.candidates[c]
            rows.append({"rank": r + 1, "candidate": cand.label, "compressor": cand.compressor,
                         "params": cand.param_dict, "kind": cand.kind,
                         "iteration_ms": 1e3 * float(self.time_s[c, i, j]),
                         "low_ms": 1e3 * float(self.low_s[c, i, j]), "high_ms": 1e3 * float(self.high_s[c, i, j]),
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
        return pd.DataFrame({
            "candidate": np.repeat([c.label for c in self.candidates], nb * npp),
            "bandwidth_gbps": np.tile(np.repeat(self.bandwidths_gbps, npp), n),
            "world_size": np.tile(self.world_sizes, n * nb),
            "iteration_s": self.time_s.ravel(), "low_s": self.low_s.ravel(), "high_s": self.high_s.ravel(),
            "rank": np.where(np.isnan(self.time_s), -1, ranks + 1).ravel(),
            "within_error_of_best": self.within_error_of_best.ravel(),
            "accuracy_evidence": np.repeat([e["status"] for e in self.evidence], nb * npp)})

    def to_dict(self) -> dict:
        """Everything as JSON-able data (what ``advise --json`` prints)."""
        return {"inputs": self.inputs, "exact_constants": self.exact_constants,
                "unranked": self.unranked,
                "candidates": [{"label": c.label, "kind": c.kind, "compressor": c.compressor, "params": c.param_dict,
                                "model_error": float(e), "accuracy_evidence": ev["status"],
                                "evidence_note": ev["note"], "inputs": self.how.get(c.label, {})}
                               for c, e, ev in zip(self.candidates, self.error, self.evidence)],
                "points": [{"world_size": int(p), "bandwidth_gbps": float(b),
                            "ranking": [{k: v for k, v in r.items() if k not in ("inputs", "evidence_note", "params",
                                                                                 "compressor", "kind")}
                                        for r in self.ranking(int(p), float(b))]}
                           for b in self.bandwidths_gbps for p in self.world_sizes]}


# ------------------------------------------------------------------ advise
def advise(calibration: Calibration, model: str, batch_size: int, world_sizes: Sequence[int],
           bandwidths_gbps: Sequence[float] | None = None, *, candidate_list: Sequence[Candidate] | None = None,
           options: ModelOptions | None = None, mode: str = "post", model_error: float | dict | None = None,
           t_comp_s: float | None = None, overhead_s: float | None = None, alpha_s: float | None = None,
           gamma: float | None = None, bucket_bytes: float = DEFAULT_BUCKET_BYTES, evidence: bool = True,
           training_folder: Path | str = TRAINING, platform: str = "gpu") -> Advice:
    """Rank syncSGD, the fp16 baseline and every compressor (:func:`candidates`) by predicted iteration
    time on a (bandwidth x world size) grid (see the module docstring for intervals, error and evidence).

    ``bandwidths_gbps=None`` uses the calibration's bandwidth (and its interval); given bandwidths are
    exact. ``t_comp_s`` / ``overhead_s`` / ``alpha_s`` / ``gamma`` override the calibration's (exact).
    ``model_error``: a fraction for every candidate, a dict per group (``syncSGD``, ``compressors (post)``,
    ``compressors (hook)``), or None for ``data/verification/summary.csv`` (``platform``, and the variant
    of ``options``: extended for :meth:`ModelOptions.extended`, else paper). Missing inputs raise
    :class:`AdviseError` naming them."""
    opts = options or ModelOptions()
    if mode not in ("post", "hook"):
        raise AdviseError(f"mode must be 'post' or 'hook', got {mode!r}")
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
    # corners on a leading axis: 0 central, 1 cheap end, 2 dear end
    col = lambda t: np.asarray([t[0], t[1], t[2]], dtype=float)[:, None, None]  # noqa: E731
    hw = Hardware(bandwidth_gbps=bw[None, :, None] * np.asarray(bw_scale)[:, None, None],
                  alpha_s=col(ends["alpha_s"]), gamma=col(ends["gamma"]), incast_coeff=col(ends["incast_coeff"]),
                  sync_delta_s=col(ends["sync_delta_s"]), per_bucket_s=col(ends["per_bucket_s"]),
                  per_tensor_s=col(ends["per_tensor_s"]))
    grid_p = p[None, None, :]
    work = Workload(model, batch_size, t_comp_s=col(tc), overhead_s=col(oh), bucket_bytes=bucket_bytes)
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

    def err_of(c: Candidate) -> float:
        if not isinstance(model_error, dict) and model_error is not None:
            return float(model_error)
        g = SYNC if c.kind in ("syncsgd", "fp16_hook") else comp_group
        if g not in errs and g == "compressors (hook)" and "compressors (blocking hook)" in errs:
            # platforms measured only with the kit's first (blocking) hook: its error, said in the notes
            g = "compressors (blocking hook)"
            notes["model_error_hook"] = "the blocking hook's (no overlapped-hook records on this platform)"
        if g not in errs:
            raise AdviseError(f"no model error for group {g!r} (have {sorted(errs)}); pass --model-error")
        return errs[g]

    cands = list(candidate_list) if candidate_list is not None else candidates()
    shape = (len(cands), len(bw), len(p))
    T = np.full((3, *shape), np.nan)
    unranked: dict[str, str] = {}
    how: dict[str, dict] = {}
    sync_pred = None
    for k, c in enumerate(cands):
        if c.kind in ("syncsgd", "fp16_hook"):
            pr = predict(work, hw, grid_p, options=opts, sync_bytes_scale=0.5 if c.kind == "fp16_hook" else 1.0)
            t = pr.sync["iteration_s"]
            info = {"equation": "Sec. 4.1" + (" with every bucket in fp16 (DDP's fp16 compress hook)"
                                              if c.kind == "fp16_hook" else "")}
            if c.kind == "fp16_hook":
                try:
                    v, lo, hi, pw, h = _ted_ends(calibration, "fp16", {}, model)
                    cast = col((v, lo, hi)) + pw * grid_p
                    info["cast"] = f"fp16 T_encode_decode added: {h}"
                except ValueError:
                    cast = 0.0
                    info["cast"] = "no fp16 T_encode_decode in the calibration: the casts count as free"
                t = t + cast
            else:
                sync_pred = pr
            T[:, k] = np.broadcast_to(t, (3, *shape[1:]))
            how[c.label] = info
            continue
        try:
            v, lo, hi, pw, h = _ted_ends(calibration, c.compressor, c.param_dict, model) if c.compressor != "none" \
                else (0.0, 0.0, 0.0, 0.0, "none encodes nothing")
        except ValueError:
            have = sorted({e.compressor for e in calibration.t_encode_decode if e.model == model})
            unranked[c.label] = (f"calibration {calibration.name!r} has no T_encode_decode of {c.compressor} on "
                                 f"{model} (has: {', '.join(have) or 'none'}); measure it with `python -m studykit "
                                 "profile` and fit a calibration")
            continue
        ted = col((v, lo, hi)) + pw * grid_p
        try:
            # the calibration: its path overhead for this model, batch and mode (options.path_overhead)
            pr = predict(work, hw, grid_p, c.compressor, c.param_dict, t_encode_decode_s=ted, options=opts, mode=mode,
                         calibration=calibration)
        except (ValueError, compressors.CompressorError) as exc:
            unranked[c.label] = str(exc)
            continue
        T[:, k] = np.broadcast_to(pr.compressed["iteration_s"], (3, *shape[1:]))
        how[c.label] = {"equation": "App. B, collectives from plan()", "t_encode_decode": h}
        if opts.path_overhead:
            how[c.label]["path_overhead"] = pr.notes.get("path_overhead", "none fitted")
    notes.update({"model": model, "batch_size": batch_size, "mode": mode,
                  "options": {f: getattr(opts, f) for f in opts.__dataclass_fields__},
                  "interval": "model at the cheap and the dear end of every calibrated constant's interval",
                  "time": "iteration time: overhead O (forward, optimizer step) + T_obs"})
    if sync_pred is not None:
        notes["t_comp_s"] = tc[0]
    error = np.asarray([err_of(c) for c in cands], dtype=float)
    index = _index(Path(training_folder)) if evidence else None
    ev = [accuracy_evidence(c, training_folder, index=index) if evidence
          else {"status": "not checked", "note": "", "runs": []} for c in cands]
    low = np.fmin(T[1], T[2])
    high = np.fmax(T[1], T[2])
    return Advice(candidates=cands, world_sizes=p, bandwidths_gbps=bw, time_s=T[0], low_s=np.fmin(low, T[0]),
                  high_s=np.fmax(high, T[0]), error=error, evidence=ev, unranked=unranked, how=how, inputs=notes,
                  exact_constants=sorted(set(exact)))
