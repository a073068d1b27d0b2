"""``python -m studykit verify``: score the performance model against measured iterations.

Agarwal et al. 2022 checks its model by predicting iteration times and comparing them with
runs (Sec. 4.1 "Verifying Performance Model", Fig. 11: median 1.8 %, max 13.7 % for
syncSGD; App. C, Fig. 17: up to 9.1 % for all-reduce schemes and 19.1 % for
SignSGD's all-gather; App. D, Fig. 19: tc-throttled bandwidths). This module does the
same from the kit's measurement records (:mod:`studykit.measure`), one *platform*
(a records folder: ``data/measurements/gpu``, ``data/measurements/throttle``, ...) at a time.

What is predicted
-----------------
A DDP record times a whole iteration: forward + backward + synchronization +
optimizer step. The model's ``T_obs`` covers backward + synchronization only, so::

    predicted iteration = O + T_obs

* ``O``, the non-backward part (forward, loss, optimizer step, DDP's own
  bookkeeping), is **measured at world size 1**: the platform's DDP record of the
  same model and batch at world size 1 minus its single-device backward time
  ``T_comp`` (``O = T_ddp(p=1) - T_comp``). Those world-size-1 records move no
  bytes and are never scored. Without one, ``O`` falls back to the forward time
  from ``tcomp`` records (``T_fwd_bwd - T_comp``; the step is then missing).
* syncSGD (Sec. 4.1)::

      T_obs = max(gamma T_comp, (k-1) T_comm(b)) + T_comm(b_last)

* compression after the backward pass (App. B, the paper's choice; ``mode`` post)::

      T_obs = T_comp + T_encode_decode + sum_c T_comm(c)

  with the collectives ``c`` of the compressor's real protocol (its ``plan()``).
* compression as a DDP hook (``mode`` hook, overlapped): the paper gives no model
  (App. A only shows it is slower). The ``paper`` variant applies App. B's formula
  anyway (compression blocks the backward pass, App. A Fig. 13).

Where each input comes from (App. C)
------------------------------------
* ``T_comp``: ``tcomp`` records, phase ``bwd`` (backward alone, one device);
* ``alpha``, ``BW``: Eq. 1 fitted to the ``sweep`` all-reduce records of the same
  network (:func:`studykit.perfmodel.fit.fit_alpha_bw`); throttled records carry
  their rate in ``network``, and each (rate, workers) is its own network;
* ``T_encode_decode``: ``profile`` records, phase ``reduce`` (encode + decode incl.
  flattening), at the simulated world size matching the run when profiled;
* ``gamma`` (the only constant fitted on DDP iterations): **leave-one-out**. For
  each scored record, gamma is fitted on syncSGD records of the *other* holdout
  groups only (``--holdout``: other models by default; other networks when the
  platform has one model), by App. C's rule: over records where the backward pass
  bounds the overlap, ``gamma_i = (T - O - T_comm(b_last)) / T_comp``; gamma is
  their median (1.0 when no calibration record is compute-bound, said in
  ``calibrated_on``). Every output row names what it was calibrated on, and
  :func:`check_disjoint` asserts that no row is scored on a point it was fitted to.

Two variants
------------
``paper``: exactly the above (Eq. 1 for every collective, Sec. 4.1's bucketing
``k = ceil(G / b)``, no incast term).

``extended`` (beyond the paper; each term named where the paper's model misses):

* **DDP's real buckets** (:func:`studykit.perfmodel.model.ddp_buckets`, the model's
  ``Workload(bucketing="ddp")``): parameters in reverse order, a bucket closes once it
  reaches the cap, the first bucket capped at 1 MiB under the default 25 MB
  (PyTorch's ``first_bucket_bytes``). A single huge tensor (VGG19's 411 MB fc1,
  a 64 KB layer of ``mlp_small``, the 4 MiB one of ``mlp_large``) is one bucket however
  small the cap;
* **measured collectives**: ``T_comm`` interpolated (log-log) in the same network's
  sweep (all-reduce for all-reduce, all-gather for all-gather) instead of Eq. 1.
  This carries small-message latency (gloo's per-call cost is not Eq. 1's
  ``2 alpha (p-1)``) and all-gather incast/inefficiency into the prediction;
  Eq. 1 with the fitted constants beyond the swept sizes;
* **compression-path overhead**: the post-backward and hook paths add framework
  work the profile does not time (copying back decoded gradients, Python per
  bucket, DDP hook futures). It is calibrated on the identity compressor
  ``none`` of the same model and batch (measured minus predicted), on *other*
  networks when the platform has several, and scored on every other compressor;
  the ``none`` records used are named in ``calibrated_on`` and not scored against it;
* **synchronization terms** in syncSGD: ``T_obs = max(gamma T_comp, overlapped comm) +
  T_comm(b_last) + delta + c (k - 1)``, with ``delta`` (per iteration: the slowest rank sets the
  iteration, launch costs) and ``c`` (per extra DDP bucket: autograd hook, bucket copies, future)
  fitted together with gamma on the same leave-one-out calibration records
  (:func:`fit_gamma_loo`); the output's ``delta_ms`` is ``delta + c (k - 1)``;
* **CPU contention**: ``T_comp`` from ``tcomp`` records of w processes timing at once (their
  ``network.workers`` = w) for a w-worker run, and the same slowdown applied to ``O`` and
  ``T_encode_decode`` (see :class:`~studykit.perfmodel.fit.RecordInputs`);
* hook mode: the protocol's collectives are issued per DDP bucket (latency per
  bucket), from the bucket's own parameter shapes.

Repeated records of one configuration (several passes over the same rates) are pooled: the
minimum of ``ms_min``, the median of any other statistic (:func:`_pool`,
:func:`~studykit.perfmodel.fit.pool_stat`).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from studykit import paths
from studykit.perfmodel.fit import (RecordInputs, SyncTerms, fit_path_overhead, fit_sync_terms, pool_stat,
                                    unpriced_ddp)
from studykit.perfmodel.model import DEFAULT_BUCKET_BYTES, Hardware, ModelOptions, Workload, plan_summary, predict

__all__ = ["REQUIRED_COLUMNS", "VARIANTS", "TARGETS", "rel_error", "summarize", "summary_markdown", "by_batch_size",
           "implied_encode_decode", "implied_encode_decode_markdown",
           "small_batch_table", "SMALL_BATCH", "load_platform", "ddp_buckets",
           "paper_buckets", "noise_floor", "repeatability", "leave_one_out",
           "check_disjoint", "check_world_size_holdout", "fit_gamma_loo", "verify_platform", "verify", "default_sources", "main"]

#: columns every predictions CSV has (what a reader needs to check a prediction; there are more)
REQUIRED_COLUMNS = ("config", "predicted_ms", "measured_ms", "rel_error", "calibrated_on")
VARIANTS = ("paper", "extended")
STATS = ("ms_median", "ms_mean", "ms_min")
#: where encode/decode comes from (verify --encode-decode-from; verify_platform)
ENCODE_DECODE_SOURCES = ("profile", "iterations", "host_ahead", "buckets")
#: the extended variant's gamma for hooks (verify --hook-gamma; ModelOptions.hook_gamma): syncSGD's fitted one, or 1
HOOK_GAMMA_SOURCES = ("fitted", "one")
#: where syncSGD's gamma comes from (verify --gamma-from; fit_gamma_loo): fitted to the calibration records' iteration
#: times, or measured from their buckets records as the paper measures it
GAMMA_SOURCES = ("fit", "buckets")
#: where the extended variant's path overhead comes from (verify --path-overhead-from; _extended_compressed)
PATH_OVERHEAD_SOURCES = ("identity", "model")
MIB = 2**20
#: PyTorch DDP: bucket_cap_mb default 25 MB (the bucket assignment itself: studykit.perfmodel.model.ddp_buckets)
DDP_DEFAULT_BUCKET_MB = 25.0


# ------------------------------------------------------------------ small pure helpers
def rel_error(predicted, measured):
    """Relative error ``(predicted - measured) / measured`` (signed; > 0: the model is slow)."""
    p = np.asarray(predicted, dtype=float)
    m = np.asarray(measured, dtype=float)
    if np.any(m <= 0):
        raise ValueError("measured times must be > 0")
    out = (p - m) / m
    return float(out) if out.ndim == 0 else out


#: the error targets of the bandwidth verification (median, max |relative error|) per group
TARGETS = {"syncSGD": (0.03, 0.10), "compressors (post)": (0.03, 0.10), "compressors (hook)": (0.05, 0.15),
           "compressors (blocking hook)": (0.05, 0.15)}


def implied_encode_decode(predictions: pd.DataFrame, *, variant: str = "extended", mode: str = "post",
                          worst: int | None = None) -> pd.DataFrame:
    """The encode/decode time the measured iterations leave room for, beside the profiled one the model used.

    For a post-backward configuration the model's iteration is ``O + T_comp + T_comm + T_encode_decode``
    (Eq. 1 of Agarwal et al. 2022, https://arxiv.org/abs/2103.00543, Sec. 4.1, with the extended model's
    overhead ``O``; nothing overlaps after the backward pass), so ``measured - O - T_comp - T_comm`` is the
    encode/decode the iteration actually paid, if every other term is right. One row per model and
    compressor configuration of ``predictions`` (a ``verify`` ``predictions.csv``): how many rates, the
    profiled ``T_encode_decode`` (ms, median), the implied one (ms, median over the rates), their ratio and
    the largest |relative error| of the iteration time. ``worst``: keep only that many rows, largest error
    first (default: all, same order)."""
    need = {"variant", "mode", "model", "compressor", "params", "measured_ms", "overhead_ms", "t_comp_ms",
            "t_comm_ms", "t_encode_decode_ms", "rel_error"}
    missing = need - set(predictions.columns)
    if missing:
        raise ValueError(f"implied_encode_decode: predictions lack column(s) {sorted(missing)}")
    e = predictions[(predictions["variant"] == variant) & (predictions["mode"] == mode)].copy()
    e["implied"] = e["measured_ms"] - e["overhead_ms"] - e["t_comp_ms"] - e["t_comm_ms"]
    e["abs_err"] = e["rel_error"].abs()
    g = (e.groupby(["model", "compressor", "params"], dropna=False)
         .agg(n=("implied", "size"), profiled_ms=("t_encode_decode_ms", "median"), implied_ms=("implied", "median"),
              max_abs_rel_error=("abs_err", "max")).reset_index())
    g["implied_over_profiled"] = g["implied_ms"] / g["profiled_ms"]
    g = g.sort_values("max_abs_rel_error", ascending=False, kind="stable").reset_index(drop=True)
    return g if worst is None else g.head(worst)


def implied_encode_decode_markdown(table: pd.DataFrame) -> str:
    """:func:`implied_encode_decode` as a Markdown table (ms, two decimals; params shortened to their values)."""
    import json

    def short(params) -> str:
        try:
            p = json.loads(params) if isinstance(params, str) else {}
        except ValueError:
            return str(params)
        keep = {k: v for k, v in p.items() if k in ("rank", "ratio", "bits", "levels", "orthogonalize", "chunk")}
        return ", ".join(f"{k} {v}" for k, v in keep.items())

    lines = ["| model | compressor | params | rates | profiled encode/decode (ms) | implied by the iterations (ms) | "
             "implied / profiled | max error |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in table.itertuples():
        lines.append(f"| {r.model} | {r.compressor} | {short(r.params)} | {r.n} | {r.profiled_ms:.2f} | "
                     f"{r.implied_ms:.2f} | {r.implied_over_profiled:.2f} | {100 * r.max_abs_rel_error:.1f} % |")
    return "\n".join(lines) + "\n"


def summary_markdown(folders: dict[str, Path | str], targets: dict | None = TARGETS) -> str:
    """Committed ``summary.csv`` files as one Markdown table: one row per (folder, group), the paper and
    extended variants' median / max |error| side by side and, with ``targets`` (default :data:`TARGETS`),
    the target and whether the extended variant meets it. ``folders``: row label -> a ``verify --out``
    folder. The READMEs under ``data/verification/`` hold exactly this (tests/test_verify.py checks it)."""
    def pct(x):
        return f"{100 * x:.1f} %"

    head = "| records, holdout | group | n | paper: median / max | extended: median / max |"
    rule = "|---|---|---:|---:|---:|"
    if targets is not None:
        head, rule = head + " target | met |", rule + "---:|---|"
    lines = [head, rule]
    for label, folder in folders.items():
        s = pd.read_csv(Path(folder) / "summary.csv")
        for group, g in s.groupby(["platform", "group"], sort=False):
            v = g.set_index("variant")
            cells = {k: f"{pct(v.loc[k, 'median_abs_rel_error'])} / {pct(v.loc[k, 'max_abs_rel_error'])}"
                     if k in v.index else "" for k in ("paper", "extended")}
            name = label if s["platform"].nunique() == 1 else f"{label}: {group[0]}"
            row = f"| {name} | {group[1]} | {int(v['n'].max())} | {cells['paper']} | {cells['extended']} |"
            if targets is not None:
                t = targets.get(group[1])
                met = ""
                if t is not None and "extended" in v.index:
                    ok = (v.loc["extended", "median_abs_rel_error"] <= t[0],
                          v.loc["extended", "max_abs_rel_error"] <= t[1])
                    met = "yes" if all(ok) else ("median only" if ok[0] else "no")
                row += f" {'' if t is None else f'{pct(t[0])} / {pct(t[1])}'} | {met} |"
            lines.append(row)
    return "\n".join(lines) + "\n"


def summarize(df: pd.DataFrame, by: Sequence[str] = ("platform", "group", "variant")) -> pd.DataFrame:
    """Per group: number of configurations, median and maximum |relative error|, mean signed error."""
    if df.empty:
        return pd.DataFrame(columns=[*by, "n", "median_abs_rel_error", "max_abs_rel_error", "mean_rel_error"])
    a = df.assign(_abs=df["rel_error"].abs())
    g = a.groupby(list(by), sort=False)
    out = pd.DataFrame({"n": g.size(), "median_abs_rel_error": g["_abs"].median(),
                        "max_abs_rel_error": g["_abs"].max(), "mean_rel_error": g["rel_error"].mean()})
    worst = a.loc[g["_abs"].idxmax(), [*by, "config"]].set_index(list(by))["config"]
    out["worst_config"] = worst
    return out.reset_index()


def by_batch_size(df: pd.DataFrame) -> pd.DataFrame:
    """:func:`summarize` per batch size too: where the small-batch regime (per-tensor CPU work that
    neither gamma nor a per-bucket constant represents) shows up as a larger error."""
    return summarize(df, by=("platform", "group", "variant", "batch_size"))


#: where the small-batch comparison lives (``verify --records data/measurements/gpu`` without and with
#: ``--per-tensor``; docs/verify.md section 6 is generated from it by :func:`small_batch_table`)
SMALL_BATCH = paths.DATA / "verification" / "small_batch"


def small_batch_table(without: pd.DataFrame, with_per_tensor: pd.DataFrame | None = None,
                      group: str = "syncSGD") -> str:
    """Markdown table of the error per batch size of ``group`` (two :func:`by_batch_size` frames: the
    extended preset without and with the per-tensor CPU term, ``ModelOptions.per_tensor``), paper
    variant beside them, one row per (platform, batch size): how much of the small-batch error the
    per-tensor term removes.
    Without ``with_per_tensor``: the paper and extended columns and the extended variant's worst row."""
    def rows(df, variant):
        d = df[(df["group"] == group) & (df["variant"] == variant)]
        return {(r.platform, int(r.batch_size)): r for r in d.itertuples()}

    paper, off = rows(without, "paper"), rows(without, "extended")
    on = None if with_per_tensor is None else rows(with_per_tensor, "extended")
    if not off or (on is not None and set(off) != set(on)):
        raise ValueError(f"small_batch_table: the two frames must hold the same (platform, batch) rows of {group!r} "
                         f"extended; got {sorted(off)} and {sorted(on or {})}")
    def pct(r) -> str:
        return f"{r.median_abs_rel_error:.1%} / {r.max_abs_rel_error:.1%}"

    if on is None:
        lines = ["| platform | batch | n | paper | extended | worst (extended) |", "|---|---:|---:|---|---|---|"]
    else:
        lines = ["| platform | batch | n | paper | extended | extended + per-tensor | worst with per-tensor |",
                 "|---|---:|---:|---|---|---|---|"]
    for key in sorted(off, key=lambda k: (k[0], k[1])):
        a, b = paper.get(key), off[key]
        last = [b.worst_config] if on is None else [pct(on[key]), on[key].worst_config]
        lines.append(" | ".join([f"| {key[0]}", str(key[1]), str(b.n), pct(a) if a is not None else "-", pct(b),
                                 *last]) + " |")
    return "\n".join(lines)


def paper_buckets(total_bytes: float, bucket_bytes: float) -> list[float]:
    """Sec. 4.1's bucketing: ``k = ceil(G / b)`` buckets, ``k-1`` of ``b`` bytes and the rest last
    (:func:`studykit.perfmodel.model.paper_bucket_sizes`)."""
    from studykit.perfmodel.model import paper_bucket_sizes

    return paper_bucket_sizes(total_bytes, bucket_bytes)


def ddp_buckets(shapes: Sequence[Sequence[int]], bucket_mb: float | None = None,
                bytes_per_param: int = 4) -> list[list[tuple]]:
    """PyTorch DDP's bucket assignment with the cap in MB as DDP's ``bucket_cap_mb`` (``None``: DDP's
    default, 25 MiB with a 1 MiB first bucket): :func:`studykit.perfmodel.model.ddp_buckets`.
    Returns the buckets (lists of shapes) in the order they are communicated."""
    from studykit.perfmodel.model import ddp_buckets as _ddp

    return _ddp(shapes, None if bucket_mb is None else float(bucket_mb) * MIB, bytes_per_param=bytes_per_param)


def _bucket_bytes(bucket: Sequence[tuple], bytes_per_param: int = 4) -> float:
    return float(sum(math.prod(s) for s in bucket) * bytes_per_param)


# ------------------------------------------------------------------ leave-one-out machinery
def leave_one_out(items: Sequence, group_of: Callable, fit: Callable, predict: Callable,
                  name_of: Callable = str, pool: Sequence | None = None) -> list[dict]:
    """Generic leave-one-group-out: for each holdout group ``g``, ``fit`` sees only the items
    of ``pool`` (default ``items``) whose group differs from ``g``; ``predict(item, fitted)``
    scores each item of ``g``. Returns one dict per scored item with ``calibrated_on`` (the
    names of the fitting items) added; raises if a scored item is among them."""
    pool = list(items if pool is None else pool)
    rows = []
    for g in dict.fromkeys(group_of(x) for x in items):
        train = [x for x in pool if group_of(x) != g]
        fitted = fit(train)
        names = sorted({name_of(x) for x in train})
        for x in (x for x in items if group_of(x) == g):
            row = dict(predict(x, fitted))
            row["calibrated_on"] = "; ".join(names)
            row["config"] = row.get("config", name_of(x))
            rows.append(row)
    check_disjoint(rows)
    return rows


def check_disjoint(rows: Iterable[dict] | pd.DataFrame) -> None:
    """Raise if a row's configuration is among the configurations it was calibrated on."""
    it = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else rows
    for r in it:
        cal = {c.strip() for c in str(r.get("calibrated_on") or "").split(";")}
        if r["config"] in cal:
            raise AssertionError(f"configuration {r['config']!r} is scored on a prediction fitted to itself")


# ------------------------------------------------------------------ records -> platform
def _pkey(params) -> str:
    from studykit.perfmodel.calibration import normalize_params

    return json.dumps(normalize_params(params if isinstance(params, dict) else {}), sort_keys=True)


def _net(n) -> tuple:
    """(rate_gbps or None, workers) of a record's ``network`` field; (None, None) on a real network."""
    if isinstance(n, dict) and n:
        return (float(n["rate_gbps"]) if n.get("rate_gbps") is not None else None, n.get("workers"))
    return (None, None)


def _net_label(rate, world_size) -> str:
    return "native" if rate is None else (f"{rate:g}Gbps" if rate > 0 else "unshaped")


@dataclass
class Platform:
    """The records of one platform (folder), split by kind, with the statistic chosen."""

    name: str
    stat: str
    tcomp: pd.DataFrame
    ddp: pd.DataFrame
    sweep: pd.DataFrame
    profile: pd.DataFrame
    device: str = ""
    #: ``buckets`` records (``ddp --bucket-times``): when each DDP bucket was ready in the backward pass
    buckets: pd.DataFrame = field(default_factory=pd.DataFrame)
    notes: list = field(default_factory=list)


def load_platform(source: str | Path | Sequence[str | Path], stat: str = "ms_median", name: str | None = None,
                  sweep_from: str | Path | None = None,
                  inputs_from: Sequence[str | Path] | None = None) -> Platform:
    """Read a records folder (or file) into a :class:`Platform` (ok records only).

    ``source`` may be several folders of one machine kind (campaigns of the same cards, world size and
    link method, e.g. models measured in different sessions): they form one platform, named ``name``
    (required then); refused when their GPUs differ.
    ``sweep_from``: another folder whose collective sweeps stand in for this one's (a campaign that ran
    no sweep of its own, on the same card kind and shaped-link method); refused when ``source`` has
    sweeps of its own or the two folders' GPUs differ.
    ``inputs_from``: folders whose single-device records (``tcomp``, ``profile``, ``copy_bw``) stand in for
    this one's (a campaign that measured only DDP iterations, e.g. ``LOCAL=0``, or only its hooks' per-bucket
    times, ``gpu_bandwidth.sh``'s ``HOOK_PROFILE``); where ``source`` measured a configuration itself (the same
    ``config_id``), its own records are kept and the borrowed ones skipped, as the notes say; refused when a
    folder's GPUs differ."""
    from studykit.measure.records import load_records

    if stat not in STATS:
        raise ValueError(f"unknown statistic {stat!r}; valid: {list(STATS)}")
    many = not isinstance(source, (str, Path))
    srcs = [Path(x) for x in source] if many else [Path(source)]
    if many and not name:
        raise ValueError("several record folders form one platform only with a name for it (verify --pool NAME)")
    if many:
        kinds = {str(x): sorted({str(r["gpu"]) for r in load_records(x, quiet=True) if r.get("gpu")}) for x in srcs}
        if len({tuple(v) for v in kinds.values()}) > 1:
            raise ValueError("folders pooled into one platform must come from one card kind: "
                             + "; ".join(f"{k}: {v or 'no GPU'}" for k, v in kinds.items()))
    src = srcs[0]
    loaded = load_records(*srcs, quiet=True)  # damaged lines, duplicates: reported in the notes, not hidden
    recs = [r for r in loaded if r.get("status", "ok") == "ok" and r.get(stat) is not None]
    if not recs:
        raise ValueError(f"no usable records in {', '.join(map(str, srcs))}")
    borrowed = []
    if sweep_from is not None:
        borrowed += _borrow(recs, src, [sweep_from], ("sweep",), "--sweep-from", "sweep", "collective sweeps", stat)
    if inputs_from:
        borrowed += _borrow(recs, src, inputs_from, ("tcomp", "profile", "copy_bw"), "--inputs-from",
                            "tcomp, profile or copy_bw", "single-device records", stat, fill=True)
    df = pd.DataFrame(recs)
    for c in ("network", "mode", "bucket_mb", "phase", "op", "compressor", "params", "sim_world_size", "size_bytes",
              "batch_size", "model", "times_ms", "n_iter", "gpu", "device"):
        if c not in df.columns:
            df[c] = None
    net = df["network"].map(_net)
    df["rate_gbps"] = net.map(lambda t: t[0])
    df["probe_gbps"] = df["network"].map(lambda n: n.get("measured_busbw_gbps") if isinstance(n, dict) else None)
    df["probe_bytes"] = df["network"].map(lambda n: n.get("measured_probe_bytes") if isinstance(n, dict) else None)
    df["params_key"] = df["params"].map(_pkey)
    # a hook that ran its protocol inside DDP's callback (``hook_overlap`` false, or absent: the kit's first
    # hook) blocks the backward pass: its own mode, model and scores (``hook_blocking``)
    ov = df["hook_overlap"] if "hook_overlap" in df.columns else pd.Series([None] * len(df), index=df.index)
    df.loc[(df["mode"] == "hook") & (ov != True), "mode"] = "hook_blocking"  # noqa: E712 (None/NaN are not True)
    if "comm" in df.columns:  # the model prices the backend's collectives; a parameter server's runs are not scored
        df = df[df["comm"].isna() | (df["kind"] != "ddp")]
    df = df[~unpriced_ddp(df)]  # variants no model term prices (coalesced hooks, no buffer broadcast): not scored
    dev = sorted({str(g) for g in df["gpu"].dropna()})
    return Platform(name=name or (src.name if src.is_dir() else src.stem), stat=stat,
                    tcomp=df[df["kind"] == "tcomp"].copy(), ddp=df[df["kind"] == "ddp"].copy(),
                    sweep=df[df["kind"] == "sweep"].copy(), profile=df[df["kind"] == "profile"].copy(),
                    device=", ".join(dev[:2]), notes=_read_notes(loaded.report) + borrowed,
                    buckets=df[df["kind"] == "buckets"].copy())


def _borrow(recs: list[dict], src: Path, folders: Sequence[str | Path], kinds: tuple, flag: str, kinds_text: str,
            what: str, stat: str, fill: bool = False) -> list[str]:
    """Append to ``recs`` the ok records of ``kinds`` in each of ``folders`` (``--sweep-from``, ``--inputs-from``);
    the notes saying so. Refused when a folder has none, or its records come from another card kind. Where
    ``recs`` has records of those kinds already: refused, or with ``fill`` the borrowed records of a
    configuration ``recs`` measured itself (the same ``config_id``) are skipped (the folder's own measurement of
    a configuration is never pooled with another machine's)."""
    from studykit.measure.records import load_records

    own = sorted({r.get("kind") for r in recs if r.get("kind") in kinds})
    if own and not fill:
        raise ValueError(f"{src} has {what} of its own ({', '.join(own)} records): {flag} would mix two sets")
    own_ids = {r.get("config_id") for r in recs if r.get("kind") in kinds}
    mine = {str(r["gpu"]) for r in recs if r.get("gpu")}
    notes = []
    for folder in folders:
        other = [r for r in load_records(Path(folder), quiet=True)
                 if r.get("kind") in kinds and r.get("status", "ok") == "ok" and r.get(stat) is not None]
        if not other:
            raise ValueError(f"{flag} {folder}: no {kinds_text} records there")
        theirs = {str(r["gpu"]) for r in other if r.get("gpu")}
        if theirs != mine:
            raise ValueError(f"{flag} {folder}: its records ran on {sorted(theirs) or 'no GPU'}, {src}'s on "
                             f"{sorted(mine) or 'no GPU'}; borrow only from the same card kind")
        taken = [r for r in other if r.get("config_id") not in own_ids]
        recs += taken
        skipped = len(other) - len(taken)
        notes.append(f"{what} borrowed from {folder} ({len(taken)} records"
                     + (f"; {skipped} skipped: {src} measured those configurations itself" if skipped else "") + ")")
    return notes


def _read_notes(rep) -> list[str]:
    """What the reader skipped or dropped, for verify's notes (file and line of each damaged line)."""
    notes = [f"skipped a damaged line: {f}:{line} ({why})" for f, line, why in rep.damaged]
    if rep.n_duplicates:
        notes.append(f"dropped {rep.n_duplicates} duplicate record(s) (same configuration, network and machine)")
    return notes


# ------------------------------------------------------------------ per-configuration names
def _label(r) -> str:
    """A configuration's name, unique within a platform."""
    parts = [str(r["model"]), f"b{int(r['batch_size'])}", str(r["mode"])]
    if r["mode"] == "syncsgd":
        parts.append("bucket=" + ("default" if _isnull(r["bucket_mb"]) else f"{float(r['bucket_mb']):g}MB"))
    else:
        parts.append(str(r["compressor"]))
        pk = r.get("params_key", "{}")
        if pk not in ("{}", None):
            parts.append(pk.replace('"', "").replace(" ", ""))
    parts.append(f"p={int(r['world_size'])}")
    parts.append(_net_label(r.get("rate_gbps"), r["world_size"]) if not _isnull(r.get("rate_gbps")) else "native")
    return " ".join(parts)


def _isnull(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _inputs(plat: Platform, max_p: int | None = None, network_from: str = "sweep",
            host_ahead: bool = False, bucket_times: bool = False) -> RecordInputs:
    """The platform's single-device constants and networks (:class:`studykit.perfmodel.fit.RecordInputs`)."""
    return RecordInputs(plat.tcomp, plat.ddp, plat.sweep, plat.profile, plat.stat, max_p=max_p,
                        network_from=network_from, buckets=plat.buckets, host_ahead=host_ahead,
                        bucket_times=bucket_times)


def _network(inp: RecordInputs, r):
    """The :class:`~studykit.perfmodel.fit.Network` a DDP record ran on (its probe, if any, passed along)."""
    return inp.network(int(r["world_size"]), r["rate_gbps"], r.get("probe_gbps"), r.get("probe_bytes"))


# ------------------------------------------------------------------ one record -> the model's predict
def _kk(k: float) -> str:
    return f" x kappa {k:.2f}" if k != 1.0 else ""


def _predict_record(r, inp: RecordInputs, variant: str, terms: SyncTerms | None = None,
                    path_overhead_s: float = 0.0, opts: ModelOptions | None = None, curve=None,
                    ed_scale: tuple[float, str] = (1.0, "")) -> dict:
    """One DDP record predicted by :func:`studykit.perfmodel.model.predict` with the ``variant`` preset
    (:meth:`ModelOptions.paper` / :meth:`ModelOptions.extended`) and the record's inputs; the row's terms."""
    opts = opts or ModelOptions.named(variant)
    m, bs, p = r["model"], int(r["batch_size"]), int(r["world_size"])
    tc, how_tc = inp.tcomp(m, bs, p, contended=opts.cpu_contention)
    o, how_o = inp.overhead(m, bs)
    kappa = inp.kappa(p) if opts.cpu_contention else 1.0
    net = _network(inp, r)
    terms = terms or SyncTerms(1.0)
    if curve is not None:  # T_obs at every gamma of the grid (fit_gamma_loo, overlap="timeline")
        terms = SyncTerms(curve)
    hw = Hardware(bandwidth_gbps=net.bandwidth_gbps, alpha_s=net.alpha_s, gamma=terms.gamma,
                  incast_coeff=net.incast_coeff, sync_delta_s=terms.delta_s, per_bucket_s=terms.per_bucket_s,
                  per_tensor_s=terms.per_tensor_s, cpu_slowdown=kappa, collective_table=net.table)
    cap = None if _isnull(r["bucket_mb"]) else float(r["bucket_mb"]) * MIB
    ready, how_ready = (None, "")
    if opts.overlap == "timeline" and r["mode"] in ("syncsgd", "hook"):  # a hook runs on DDP's default buckets
        ready, how_ready = inp.ready_fractions(m, bs, r["bucket_mb"] if r["mode"] == "syncsgd" else None, p,
                                               r.get("rate_gbps"))
    w = Workload(m, bs, t_comp_s=tc, bucket_bytes=DEFAULT_BUCKET_BYTES if cap is None else cap,
                 first_bucket_bytes=cap, overhead_s=o, path_overhead_s=path_overhead_s, bucket_ready=ready)
    how_o += _kk(kappa)
    where = f"alpha={net.alpha_s * 1e6:.1f}us BW={net.bandwidth_gbps:.3g}Gbps"
    if r["mode"] == "syncsgd":
        pr = predict(w, hw, p, options=opts)
        if curve is not None:
            return {"_curve": np.asarray(pr.sync["total_s"], dtype=float), "_s": float(o * kappa),
                    "_k": float(np.asarray(pr.sync["k"]).reshape(-1)[0])}
        sy = {k: float(np.asarray(v)) for k, v in pr.sync.items()}
        return {"t_comp_ms": tc * 1e3, "overhead_ms": o * kappa * 1e3, "t_obs_ms": sy["total_s"] * 1e3,
                "t_comm_ms": sy["comm_s"] * 1e3, "t_encode_decode_ms": 0.0, "gamma": terms.gamma,
                "delta_ms": sy["extra_s"] * 1e3, "k_buckets": int(sy["k"]),
                "bound": "compute" if sy["compute_s"] >= sy["overlapped_comm_s"] else "communication",
                "predicted_ms": sy["iteration_s"] * 1e3,
                "_s": sy["iteration_s"] - sy["total_s"], "_overlapped": sy["overlapped_comm_s"],
                "_last": sy["last_comm_s"], "_k": sy["k"], "_t_comp": tc, "_n_tensors": w.n_tensors,
                "inputs": f"{how_o}; {how_tc}; {where} ({net.fitted_on}"
                          f"{', Eq. 1 at p=%d' % p if net.extrapolated else ''}){how_ready}"}
    ed, how_ed = _encode_decode(inp, r, p)
    per_bucket = {}
    if inp.bucket_times and r["mode"] == "hook" and opts.overlap == "timeline":
        per_bucket, ed, how_ed, w = _bucket_costs(inp, r, w, ed, how_ed)
    if ed_scale[0] != 1.0:  # the codec's in-iteration cost, calibrated on post-backward iterations
        ed, how_ed = ed * ed_scale[0], f"{how_ed} {ed_scale[1]}"
    how_ed += _kk(kappa)
    if r["mode"] == "hook" and opts.overlap == "timeline" and not opts.hook_gamma:
        how_ed += "; backward pass at gamma 1 (--hook-gamma one, the default)"
    scale, how_wire = _wire_scale(r, w)
    pr = predict(w, hw, p, r["compressor"], _clean_params(r["params"]), t_encode_decode_s=ed, options=opts,
                 mode=r["mode"], bytes_scale=scale, **per_bucket)
    c = {k: float(np.asarray(v)) for k, v in pr.compressed.items()}
    return {"t_comp_ms": tc * 1e3, "overhead_ms": (o * kappa + pr.notes["path_overhead_s"]) * 1e3,
            "t_obs_ms": c["total_s"] * 1e3, "t_comm_ms": c["comm_s"] * 1e3,
            "t_encode_decode_ms": c["encode_decode_s"] * 1e3, "gamma": float("nan"),
            "k_buckets": int(c.get("k", 1)), "bound": "", "predicted_ms": c["iteration_s"] * 1e3,
            "inputs": f"{how_o}; {how_tc}; {how_ed}; {where} incast={net.incast_coeff:.2f} ({net.fitted_on}"
                      f"{', Eq. 1 / App. B at p=%d' % p if net.extrapolated else ''}){how_wire}{how_ready}"}


def _bucket_costs(inp: RecordInputs, r, w: Workload, ed: float, how_ed: str):
    """A hook record's per-bucket inputs (``verify --encode-decode-from buckets``): each bucket's device and host
    time (:meth:`RecordInputs.bucket_costs`) and when the host reaches each hook (:meth:`RecordInputs.ready_host`),
    as ``(predict kwargs, T_encode_decode, how, workload)``; where either is missing or the bucket counts
    disagree, the record keeps its whole-gradient input (``({}, ed, how_ed + why, w)``)."""
    try:
        dev, host, how = inp.bucket_costs(r["model"], r["compressor"], r["params_key"])
    except KeyError as exc:
        return {}, ed, f"{how_ed} (no per-bucket times: {exc.args[0]})", w
    ready, how_ready = inp.ready_host(r["model"], int(r["batch_size"]), int(r["world_size"]), r.get("rate_gbps"))
    k = len(w.ddp_bucket_shapes())
    if ready is None or not (len(ready) == len(dev) == k):
        return {}, ed, f"{how_ed} (no per-bucket times: {len(dev)} profiled buckets, " \
                       f"{'no' if ready is None else len(ready)} host ready times, {k} DDP buckets)", w
    w = replace(w, bucket_ready_host_s=ready)
    return ({"bucket_encode_decode_s": dev, "bucket_host_s": host}, float(sum(dev)),
            f"{how}, host chain{how_ready}", w)


def _encode_decode(inp: RecordInputs, r, p: int) -> tuple[float, str]:
    """A hook's encode/decode profiled bucket by bucket as the hook calls it (``profile --ddp-buckets``)
    where the platform has it, else the whole gradient's (phase ``reduce``, as after the backward pass).
    The identity compressor ``none`` encodes nothing: 0 where it has no profile record at all (its runs
    calibrate the hook and post paths' own cost, the path overhead)."""
    if r["mode"] in ("hook", "hook_blocking"):
        try:
            return inp.encode_decode(r["model"], r["compressor"], r["params_key"], p, phase="reduce_buckets")
        except KeyError:
            pass
    try:
        return inp.encode_decode(r["model"], r["compressor"], r["params_key"], p)
    except KeyError:
        if r["compressor"] != "none":
            raise
        return 0.0, "no encode/decode (identity compressor, no profile record)"


#: a record's measured wire bytes that differ from today's plan() by more than this are priced as measured
WIRE_TOLERANCE = 0.01


def _wire_scale(r, w: Workload) -> tuple[float, str]:
    """``(bytes_scale, note)``: what the record's run really sent against what the compressor's
    ``plan()`` sends today (per DDP bucket for hooks, the whole gradient after the backward pass).
    Records taken before a wire format changed (e.g. quantizers before bit packing) carry the old
    traffic in ``wire_bytes_per_iter``; the model prices that, and the row says so."""
    sent = r.get("wire_bytes_per_iter")
    if _isnull(sent) or not sent:
        return 1.0, ""
    p, params = int(r["world_size"]), _clean_params(r["params"])
    groups = w.ddp_bucket_shapes() if r["mode"] in ("hook", "hook_blocking") else [list(w.shapes())]
    planned = 0
    for g in groups:
        s = plan_summary(r["compressor"], params, g, p)
        planned += s.allreduce_bytes + s.allgather_bytes
    if planned <= 0 or abs(float(sent) / planned - 1.0) <= WIRE_TOLERANCE:
        return 1.0, ""
    scale = float(sent) / planned
    return scale, f"; wire bytes x{scale:.3f}: the record sent {float(sent) / MIB:.2f} MiB, plan() today {planned / MIB:.2f}"


def _public(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith("_")}


def _clean_params(params) -> dict:
    from studykit.perfmodel.calibration import normalize_params

    return normalize_params(params if isinstance(params, dict) else {})


def _base_row(r, plat: Platform, variant: str, group: str) -> dict:
    times = r.get("times_ms")
    iqr = float("nan")
    if isinstance(times, (list, tuple)) and len(times) >= 4:
        q1, q3 = np.percentile(times, [25, 75])
        iqr = float((q3 - q1) / np.median(times))
    return {"platform": plat.name, "group": group, "variant": variant, "config": _label(r), "model": r["model"],
            "batch_size": int(r["batch_size"]), "mode": r["mode"],
            "compressor": "" if _isnull(r["compressor"]) else r["compressor"],
            "params": r["params_key"], "bucket_mb": r["bucket_mb"], "world_size": int(r["world_size"]),
            "rate_gbps": r["rate_gbps"], "measured_ms": float(r["measured_ms"]), "n_iter": r.get("n_iter"),
            "n_records": r.get("n_records", 1), "meas_iqr_rel": iqr}


# ------------------------------------------------------------------ gamma, leave-one-out
def fit_gamma_loo(train: Sequence[dict], inp: RecordInputs, variant: str, cache: dict | None = None,
                  opts: ModelOptions | None = None, gamma_from: str = "fit") -> SyncTerms:
    """gamma (and, ``extended``, the synchronization, per-bucket and per-tensor terms) from syncSGD
    calibration records: each record predicted with gamma 1 and no extra term (the model's overlapped
    and last-bucket communication), then :func:`studykit.perfmodel.fit.fit_sync_terms`.

    ``gamma_from="buckets"`` (extended variant on the timeline; ``verify --gamma-from buckets``): gamma measured
    as the paper measures it, not fitted: the median over the calibration records of
    :meth:`RecordInputs.measured_gamma` (the backward pass's compute under overlap over ``T_comp``), rounded to
    the fitting grid; the extra terms are then fitted at that gamma. Calibration records without ``buckets``
    records leave the fit as it was (said in ``how``)."""
    if gamma_from not in GAMMA_SOURCES:
        raise ValueError(f"gamma_from must be one of {GAMMA_SOURCES}, got {gamma_from!r}")
    opts = opts or ModelOptions.named(variant)
    cache = {} if cache is None else cache
    rows = []
    if opts.overlap == "timeline":
        from studykit.perfmodel.fit import GAMMA_GRID, fit_sync_terms_curve

        for r in train:
            key = (r["config"], variant, "curve")
            if key not in cache:
                cache[key] = _predict_record(r, inp, variant, opts=opts, curve=GAMMA_GRID)
            b = cache[key]
            rows.append({"s": float(r["measured_ms"]) / 1e3 - b["_s"], "curve": b["_curve"], "k": b["_k"]})
        if gamma_from == "buckets" and variant != "paper":
            g = [inp.measured_gamma(r["model"], r["batch_size"], r["bucket_mb"], r["world_size"], r["rate_gbps"])
                 for r in train]
            g = [x for x in g if x is not None]
            if not g:
                t = fit_sync_terms_curve(rows, GAMMA_GRID, len(train), extended=True)
                return replace(t, how=t.how + " (--gamma-from buckets: no buckets record of the calibration runs)")
            j = int(np.argmin(np.abs(GAMMA_GRID - float(np.median(g)))))
            one = [{**x, "curve": np.asarray(x["curve"], dtype=float)[j]} for x in rows]
            return fit_sync_terms_curve(one, GAMMA_GRID[j:j + 1], len(train), extended=True,
                                        given=f"measured (median last-bucket ready / T_comp of {len(g)} buckets "
                                              f"record(s), {min(g):.3f}-{max(g):.3f})")
        return fit_sync_terms_curve(rows, GAMMA_GRID, len(train), extended=variant != "paper")
    for r in train:
        key = (r["config"], variant)
        if key not in cache:
            cache[key] = _predict_record(r, inp, variant, opts=opts)
        b = cache[key]
        rows.append({"s": float(r["measured_ms"]) / 1e3 - b["_s"], "t_comp": b["_t_comp"],
                     "overlapped_comm": b["_overlapped"], "last_comm": b["_last"], "k": b["_k"],
                     "n_tensors": b["_n_tensors"]})
    return fit_sync_terms(rows, len(train), extended=variant != "paper", per_tensor=opts.per_tensor)


def _holdout_fn(kind: str, records: pd.DataFrame) -> tuple[Callable, str]:
    if kind == "world_size":
        return (lambda r: int(r["world_size"])), "world_size"
    if kind == "auto":
        kind = "model" if records["model"].nunique() > 1 else (
            "network" if records["rate_gbps"].nunique(dropna=False) > 1 else "record")
    fns = {"model": lambda r: r["model"],
           "network": lambda r: (_net_label(r["rate_gbps"], r["world_size"]), int(r["world_size"])),
           "bucket": lambda r: "default" if _isnull(r["bucket_mb"]) else float(r["bucket_mb"]),
           "record": lambda r: r["config"]}
    if kind not in fns:
        raise ValueError(f"unknown holdout {kind!r}; valid: auto, {', '.join(fns)}, world_size")
    return fns[kind], kind


GROUPS = {"syncsgd": "syncSGD", "post": "compressors (post)", "hook": "compressors (hook)",
          "hook_blocking": "compressors (blocking hook)"}


#: ``--holdout world_size`` calibrates every constant on world sizes up to this one by default
CALIBRATE_MAX_P = 2
_P_RE = re.compile(r"(?:^|\s)p(<=|=)(\d+)(?:\s|$)")


def check_world_size_holdout(rows: Iterable[dict] | pd.DataFrame, max_p: int) -> None:
    """Raise unless every row is scored at a world size above ``max_p`` and every entry of its
    ``calibrated_on`` (DDP configurations and sweeps, each naming ``p=N`` or ``p<=N``) is at
    ``p <= max_p`` (``--holdout world_size``)."""
    it = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else rows
    for r in it:
        if int(r["world_size"]) <= max_p:
            raise AssertionError(f"{r['config']!r} is at p={int(r['world_size'])}, inside the calibration range "
                                 f"p<={max_p}")
        for c in (c.strip() for c in str(r.get("calibrated_on") or "").split(";")):
            if not c:
                continue
            m = _P_RE.search(c)
            if m is None or int(m.group(2)) > max_p:
                raise AssertionError(f"{r['config']!r} is calibrated on {c!r}, not on p<={max_p}")


def verify_platform(plat: Platform, *, variants: Sequence[str] = VARIANTS, holdout: str = "auto",
                    include_hook: bool = True, calibrate_max_p: int = CALIBRATE_MAX_P,
                    per_tensor: bool = False, network_from: str = "sweep", overlap: str | None = None,
                    hook_gamma: str = "one", gamma_from: str = "fit",
                    encode_decode_from: str = "profile", path_overhead_from: str = "identity") -> pd.DataFrame:
    """Every scorable DDP record of ``plat``: one row per (record, variant).

    ``holdout="world_size"``: extrapolation in p. Every constant is calibrated on world sizes
    ``<= calibrate_max_p`` (alpha/BW/incast on those sweeps, gamma and the extended terms on those DDP
    records, the path overhead on those ``none`` records; ``T_comp``, ``O`` and ``T_encode_decode``
    are single-device anyway), and only records at ``p > calibrate_max_p`` are scored; their
    collectives come from Eq. 1 / App. B with the fitted constants (no measured sweep interpolation,
    in either variant). Each row's ``calibrated_on`` names the DDP configurations and the sweep.

    ``network_from``: where each network's alpha / BW come from
    (:class:`studykit.perfmodel.fit.RecordInputs`: ``sweep``, ``probe`` or ``auto``).

    ``encode_decode_from="iterations"`` (extended variant): each compressor's profiled encode/decode is
    scaled by what post-backward iterations of the same compressor and parameters leave room for
    (:func:`_ed_scales`), fitted on the other holdout groups, for the post and hook rows alike.
    ``encode_decode_from="host_ahead"`` (both variants): the profile timed with the host ahead of the GPU
    (``profile --host-ahead``) where the platform has it (:meth:`RecordInputs.encode_decode`).
    ``encode_decode_from="buckets"``: as ``host_ahead``, and a hook's encode/decode bucket by bucket from
    ``profile --bucket-times`` records where the platform has them: each bucket's device time, and each
    bucket's host time queued behind the host's side of the backward pass (the host chain of
    :func:`studykit.perfmodel.model.bucket_timeline_s`; the ``ready_host_ms`` of ``buckets`` records)."""
    if encode_decode_from not in ENCODE_DECODE_SOURCES:
        raise ValueError(f"encode_decode_from must be one of {ENCODE_DECODE_SOURCES}, got {encode_decode_from!r}")
    if path_overhead_from not in PATH_OVERHEAD_SOURCES:
        raise ValueError(f"path_overhead_from must be one of {PATH_OVERHEAD_SOURCES}, got {path_overhead_from!r}")
    if hook_gamma not in HOOK_GAMMA_SOURCES:
        raise ValueError(f"hook_gamma must be one of {HOOK_GAMMA_SOURCES}, got {hook_gamma!r}")
    if gamma_from not in GAMMA_SOURCES:
        raise ValueError(f"gamma_from must be one of {GAMMA_SOURCES}, got {gamma_from!r}")
    by_p = holdout == "world_size"
    max_p = int(calibrate_max_p) if by_p else None
    if by_p and max_p < 2:
        raise ValueError("--calibrate-max-p must be >= 2 (world size 1 moves no bytes)")
    inp = _inputs(plat, max_p=max_p, network_from=network_from,
                  host_ahead=encode_decode_from in ("host_ahead", "buckets"),
                  bucket_times=encode_decode_from == "buckets")
    d = plat.ddp[plat.ddp["world_size"] >= 2].copy()
    modes = ["syncsgd", "post"] + (["hook", "hook_blocking"] if include_hook else [])
    d = d[d["mode"].isin(modes)]
    d["config"] = [_label(r) for r in d.to_dict("records")]
    ok = []
    for r in _pool(d, plat.stat):  # scorable: inputs exist
        try:
            inp.tcomp(r["model"], int(r["batch_size"]), int(r["world_size"]))
            _network(inp, r)
            if r["mode"] != "syncsgd":
                _encode_decode(inp, r, int(r["world_size"]))
            ok.append(r)
        except (KeyError, ValueError) as exc:
            plat.notes.append(f"not scored: {_label(r)}: {exc}")
    recs = ok
    cal_recs: list[dict] | None = None
    sweep_cal = ""
    if by_p:  # score above the limit only; calibrate below it
        cal_recs = [r for r in ok if int(r["world_size"]) <= max_p]
        recs = [r for r in ok if int(r["world_size"]) > max_p]
        nets = sorted({_net_label(r["rate_gbps"], r["world_size"]) for r in recs})
        sweep_cal = "; ".join(f"sweep p<={max_p} {n}" for n in nets)
        if not recs:
            plat.notes.append(f"--holdout world_size: no DDP record at p > {max_p} to score")
    if not recs:
        return pd.DataFrame(columns=list(REQUIRED_COLUMNS))
    hd = pd.DataFrame(recs)
    group_of, how = _holdout_fn(holdout, hd)
    if by_p:
        how = f"world_size (calibrated on p<={max_p})"
    rows: list[dict] = []
    sync = [r for r in recs if r["mode"] == "syncsgd"]
    sync_pool = None if cal_recs is None else [r for r in cal_recs if r["mode"] == "syncsgd"]
    cache: dict = {}
    ext = replace(ModelOptions.extended(), per_tensor=per_tensor)
    if overlap is not None:
        ext = replace(ext, overlap=overlap)
    ext = replace(ext, hook_gamma=hook_gamma == "fitted")
    presets = {"paper": ModelOptions.paper(), "extended": ext}
    for variant in variants:
        # syncSGD: gamma fitted on the other holdout groups' syncSGD records
        def fit(train, variant=variant):
            return fit_gamma_loo(train, inp, variant, cache, opts=presets[variant], gamma_from=gamma_from)

        def pred(r, fitted, variant=variant):
            out = _base_row(r, plat, variant, "syncSGD")
            out.update(_public(_predict_record(r, inp, variant, terms=fitted, opts=presets[variant])))
            out["inputs"] += f"; {fitted.how}"
            return out

        if sync:
            part = leave_one_out(sync, group_of, fit, pred, name_of=lambda r: r["config"], pool=sync_pool)
            for x in part:
                x["holdout"] = how
                if by_p:
                    x["calibrated_on"] = "; ".join(c for c in (x["calibrated_on"], sweep_cal) if c)
            rows += part
        # compressors
        for mode in ("post", "hook", "hook_blocking"):
            comp = [r for r in recs if r["mode"] == mode]
            if not comp:
                continue
            if variant == "paper":
                for r in comp:
                    out = _base_row(r, plat, variant, GROUPS[mode])
                    out.update(_predict_record(r, inp, variant))
                    out["calibrated_on"] = sweep_cal
                    out["holdout"] = how if by_p else "none fitted"
                    rows.append(out)
            else:
                pool = None if cal_recs is None else [r for r in cal_recs if r["mode"] == mode]
                hook_terms = None
                if mode == "hook" and presets[variant].overlap == "timeline" and sync:
                    # the hook timeline's gamma: fitted on the syncSGD records of the other holdout groups
                    spool = sync if sync_pool is None else sync_pool
                    tcache: dict = {}

                    def hook_terms(r, variant=variant, spool=spool, tcache=tcache):
                        g = group_of(r)
                        if g not in tcache:
                            train = [x for x in spool if group_of(x) != g]
                            tcache[g] = (fit(train), sorted(x["config"] for x in train))
                        return tcache[g]
                scale_of = None
                if encode_decode_from == "iterations":
                    posts = [x for x in (recs if cal_recs is None else cal_recs) if x["mode"] == "post"]
                    scale_of = _ed_scales(posts, inp, presets[variant], None if by_p else group_of)
                part = _extended_compressed(comp, inp, plat, mode, pool=pool, opts=presets[variant],
                                            terms_of=hook_terms, group_of=None if by_p else group_of,
                                            ed_scale_of=scale_of, same_model=path_overhead_from == "model")
                if by_p:
                    for x in part:
                        x["holdout"] = how
                        x["calibrated_on"] = "; ".join(c for c in (x["calibrated_on"], sweep_cal) if c)
                rows += part
    if not rows:
        return pd.DataFrame(columns=list(REQUIRED_COLUMNS))
    out = pd.DataFrame(rows)
    out["rel_error"] = rel_error(out["predicted_ms"], out["measured_ms"])
    out["abs_rel_error"] = out["rel_error"].abs()
    check_disjoint(out)
    if by_p:
        check_world_size_holdout(out, max_p)
    return out


def _pool(d: pd.DataFrame, stat: str) -> list[dict]:
    """One dict per configuration; repeated records (e.g. a second pass over the rates) pooled:
    ``measured_ms`` by :func:`studykit.perfmodel.fit.pool_stat`, iterations concatenated, ``n_records`` counted."""
    out = []
    for _, g in d.groupby("config", sort=False):
        r = dict(g.iloc[0])
        r["measured_ms"] = pool_stat(g[stat], stat)
        r["n_records"] = len(g)
        r["n_iter"] = int(pd.to_numeric(g["n_iter"], errors="coerce").fillna(0).sum())
        times = [t for ts in g["times_ms"] if isinstance(ts, (list, tuple)) for t in ts]
        r["times_ms"] = times or None
        out.append(r)
    return out


def _ed_scales(posts: list[dict], inp: RecordInputs, opts: ModelOptions, group_of: Callable | None) -> Callable:
    """``scale_of(r) -> ((scale, how), calibration configs)``: the factor on ``r``'s profiled encode/decode.

    In a post-backward iteration nothing overlaps, so ``measured - (predicted - T_encode_decode)`` is the
    encode/decode the iteration paid (:func:`implied_encode_decode`); the factor is the median of its ratio
    to the profiled one over the post records of the same model, batch, compressor and parameters in the
    *other* holdout groups (``group_of``; all but ``r`` itself where ``None``), or, where there are none
    (e.g. the model is held out), over the same compressor and parameters on other models. Without any, 1.
    The profile times a codec alone with the device synchronised around each call; in an iteration the host
    launches the codec's kernels while the GPU still runs the backward pass (PowerSGD launches hundreds)."""
    cache: dict = {}
    ratio_cache: dict = {}

    def ratio(x) -> float | None:
        if x["config"] not in ratio_cache:
            px = _predict_record(x, inp, "extended", opts=opts)
            ed = px["t_encode_decode_ms"]
            ratio_cache[x["config"]] = ((float(x["measured_ms"]) - (px["predicted_ms"] - ed)) / ed
                                        if ed > 0 else None)
        return ratio_cache[x["config"]]

    def scale_of(r):
        g = group_of(r) if group_of is not None else None
        key = (r["model"], int(r["batch_size"]), r["compressor"], r["params_key"], g,
               None if group_of is not None else r["config"])
        if key not in cache:
            train = [x for x in posts if x["config"] != r["config"] and (group_of is None or group_of(x) != g)]
            same = [x for x in train if (x["model"], int(x["batch_size"]), x["compressor"], x["params_key"])
                    == key[:4]]
            where = "same model"
            if not same:
                same = [x for x in train if (x["compressor"], x["params_key"]) == key[2:4] and x["model"] != r["model"]]
                where = "other models"
            rs = [v for v in (ratio(x) for x in same) if v is not None]
            if rs:
                s = max(0.0, float(np.median(rs)))
                cache[key] = ((s, f"x {s:.2f} (implied by {len(rs)} post iterations, {where})"),
                              sorted({x["config"] for x in same}))
            else:
                cache[key] = ((1.0, "(no post iteration to calibrate on: as profiled)"), [])
        return cache[key]

    return scale_of


def _extended_compressed(comp: list[dict], inp: RecordInputs, plat: Platform, mode: str,
                         pool: list[dict] | None = None, opts: ModelOptions | None = None,
                         terms_of: Callable | None = None, group_of: Callable | None = None,
                         ed_scale_of: Callable | None = None, same_model: bool = False) -> list[dict]:
    """Extended variant for one mode: path overhead calibrated on the identity compressor ``none``
    of the same model and batch (other networks when there are several), scored on the rest.
    With ``pool`` (``--holdout world_size``) the ``none`` records come from ``pool`` only (the same
    model, batch and link rate at the calibration world sizes) and every record of ``comp`` is scored,
    ``none`` included. Where the records hold no ``none`` run at all, the path overhead is fitted per DDP
    bucket (``h_b k``: a hook's per-bucket host work) on the same mode's records of the *other* holdout
    groups (``group_of``; median of ``(measured - predicted) / k``), else 0 (said in ``inputs``). ``terms_of(r)``: ``(SyncTerms, calibration configs)`` for a record (the hook timeline's
    gamma, fitted on syncSGD records of other holdout groups).

    ``same_model`` (``verify --path-overhead-from model``): where the same model and batch has records of this
    mode in other holdout groups (e.g. the other rates), the path overhead is the median of their residuals,
    one constant per iteration, before any of the above. ``none`` moves the whole fp32 gradient, so over a
    slow link its residual is mostly communication error; the compressors' own runs move little."""
    rows = []
    per_bucket_cache: dict = {}
    residual_cache: dict = {}

    def residual(x) -> tuple[float, int]:
        """``(measured - predicted without path overhead (s), DDP buckets)`` of record ``x``, computed once."""
        if x["config"] not in residual_cache:
            px = _predict_record(x, inp, "extended", terms=terms_of(x)[0] if terms_of else None, opts=opts,
                                 ed_scale=ed_scale_of(x)[0])
            residual_cache[x["config"]] = ((float(x["measured_ms"]) - px["predicted_ms"]) / 1e3,
                                           max(px["k_buckets"], 1))
        return residual_cache[x["config"]]
    opts = opts or ModelOptions.extended()
    no_scale = lambda x: ((1.0, ""), [])  # noqa: E731
    ed_scale_of = ed_scale_of or no_scale
    by_pool = pool is not None
    nones = [r for r in (pool if by_pool else comp) if r["compressor"] == "none"]
    multi_net = len({(r["rate_gbps"], r["world_size"]) for r in comp}) > 1
    for r in comp:
        key = (r["model"], int(r["batch_size"]))
        cal = [n for n in nones if (n["model"], int(n["batch_size"])) == key and n["config"] != r["config"]]
        if by_pool:
            cal = [n for n in cal if _isnull(n["rate_gbps"]) == _isnull(r["rate_gbps"])
                   and (_isnull(r["rate_gbps"]) or n["rate_gbps"] == r["rate_gbps"])]
        elif multi_net:
            cal = [n for n in cal if (n["rate_gbps"], n["world_size"]) != (r["rate_gbps"], r["world_size"])]
        terms, t_cal = terms_of(r) if terms_of is not None else (None, [])
        same = [] if not same_model or by_pool or group_of is None else [
            x for x in comp if (x["model"], int(x["batch_size"])) == key and group_of(x) != group_of(r)]
        if same:  # the same model's records of this mode in the other holdout groups: one constant per iteration
            h = fit_path_overhead([residual(x)[0] for x in same])
            groups = sorted({str(group_of(x)) for x in same})
            how_h = (f"path overhead {h * 1e3:+.3f} ms from {len(same)} '{mode}' records of {r['model']} in holdout "
                     f"groups {', '.join(groups)}")
            cal, t_cal = [], list(t_cal) + [f"{len(same)} '{mode}' records of {r['model']} b{key[1]} in holdout "
                                             f"groups " + ", ".join(groups)]
        elif not cal and nones:  # nothing to calibrate on (e.g. the only 'none' record itself): not scored here
            continue
        elif cal:
            h = fit_path_overhead([float(n["measured_ms"]) / 1e3 - _predict_record(
                n, inp, "extended", terms=terms, opts=opts, ed_scale=ed_scale_of(n)[0])["predicted_ms"] / 1e3
                for n in cal])
            how_h = f"path overhead {h * 1e3:+.3f} ms from {len(cal)} '{mode} none' record(s)"
        elif group_of is not None and len({group_of(x) for x in comp}) > 1:
            g = group_of(r)
            if g not in per_bucket_cache:
                cal_g = [x for x in comp if group_of(x) != g]
                res = [e / k for e, k in map(residual, cal_g)]
                groups = sorted({str(group_of(x)) for x in cal_g})
                # named by holdout group, not by configuration (hundreds per row): every one differs from r's
                per_bucket_cache[g] = (fit_path_overhead(res), [f"{len(cal_g)} '{mode}' records of holdout groups "
                                                                + ", ".join(groups)])
            hb, cal_names = per_bucket_cache[g]
            pr0 = _predict_record(r, inp, "extended", terms=terms, opts=opts, ed_scale=ed_scale_of(r)[0])
            h = hb * max(pr0["k_buckets"], 1)
            how_h = (f"path overhead {hb * 1e3:+.3f} ms per bucket x {pr0['k_buckets']} from {cal_names[0]} "
                     "(no identity-compressor record)")
            t_cal = list(t_cal) + cal_names
        else:
            h, how_h = 0.0, "path overhead 0 (no identity-compressor record on this platform)"
        scale, scale_cal = ed_scale_of(r)
        t_cal = list(t_cal) + list(scale_cal)
        out = _base_row(r, plat, "extended", GROUPS[mode])
        out.update(_predict_record(r, inp, "extended", terms=terms, path_overhead_s=h, opts=opts, ed_scale=scale))
        out["inputs"] += f"; {how_h}" + (f"; {terms.how}" if terms is not None else "")
        if terms is not None:
            out["gamma"] = terms.gamma
        out["calibrated_on"] = "; ".join(sorted({n["config"] for n in cal} | set(t_cal)))
        out["holdout"] = "identity compressor" + (" at other networks" if multi_net and not by_pool else "")
        rows.append(out)
    return rows


def noise_floor(pred: pd.DataFrame, variant: str = "extended") -> pd.DataFrame:
    """How much syncSGD iterations of one model differ across bucket sizes, measured and predicted.

    On a fast network the model predicts nearly the same time for every bucket size, so the
    measured spread is (mostly) run-to-run noise: a floor under the achievable error."""
    s = pred[(pred["group"] == "syncSGD") & (pred["variant"] == variant)]
    rows = []
    for key, g in s.groupby(["platform", "model", "batch_size", "world_size", "rate_gbps"], dropna=False):
        if len(g) < 2:
            continue
        rows.append(dict(zip(["platform", "model", "batch_size", "world_size", "rate_gbps"], key),
                         n=len(g), measured_spread=g["measured_ms"].max() / g["measured_ms"].min() - 1.0,
                         predicted_spread=g["predicted_ms"].max() / g["predicted_ms"].min() - 1.0,
                         max_dev_from_median=(g["measured_ms"] / g["measured_ms"].median() - 1.0).abs().max()))
    return pd.DataFrame(rows)


def repeatability(source: str | Path, stat: str = "ms_median") -> pd.DataFrame:
    """DDP configurations measured more than once in ``source`` (e.g. a second pass over the
    rates): each record's statistic, and the relative spread ``max/min - 1`` among them. A model
    cannot be expected to predict a configuration more closely than it reproduces itself."""
    plat = load_platform(source, stat)
    d = plat.ddp[plat.ddp["world_size"] >= 2].copy()
    if d.empty:
        return pd.DataFrame(columns=["config", "n_records", "spread"])
    d["config"] = [_label(r) for r in d.to_dict("records")]
    rows = []
    for cfg, g in d.groupby("config", sort=False):
        if len(g) >= 2:
            v = g[stat].to_numpy(float)
            rows.append({"platform": plat.name, "config": cfg, "mode": g["mode"].iloc[0], "n_records": len(g),
                         "values_ms": "; ".join(f"{x:.3f}" for x in v), "spread": float(v.max() / v.min() - 1.0)})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ all platforms
def default_sources() -> list[Path]:
    """The committed records verified by default: GPU (2xH200) and throttled CPU, where present."""
    out = []
    for sub in ("gpu", "throttle"):
        f = paths.MEASUREMENTS / sub
        if f.is_dir() and any(f.glob("*.jsonl")):
            out.append(f)
    return out


def verify(sources: Sequence[str | Path] | None = None, *, stat: str = "ms_median", holdout: str = "auto",
           variants: Sequence[str] = VARIANTS, include_hook: bool = True,
           calibrate_max_p: int = CALIBRATE_MAX_P, per_tensor: bool = False,
           network_from: str = "sweep", overlap: str | None = None, hook_gamma: str = "one",
           gamma_from: str = "fit", sweep_from: str | Path | None = None, pool: str | None = None,
           encode_decode_from: str = "profile", inputs_from: Sequence[str | Path] | None = None,
           path_overhead_from: str = "identity") -> tuple[pd.DataFrame, pd.DataFrame, list]:
    """``(predictions, networks, notes)`` over the platforms in ``sources`` (default: :func:`default_sources`).

    With ``holdout="world_size"`` the networks table holds, per network above ``calibrate_max_p``, the
    constants used (``fitted_on`` = ``sweep p<=2 ...``, ``used`` True) and, for comparison only, those
    its own sweep would give (``used`` False). ``sweep_from``, ``inputs_from``: see :func:`load_platform`. ``pool``: every
    source is one platform of that name (folders of one machine kind, :func:`load_platform`)."""
    sources = [Path(s) for s in (sources or default_sources())]
    if not sources:
        raise ValueError("no records to verify: give --records folders")
    frames, nets, notes = [], [], []
    for s in ([sources] if pool else sources):
        plat = load_platform(s, stat, name=pool, sweep_from=sweep_from, inputs_from=inputs_from)
        frames.append(verify_platform(plat, variants=variants, holdout=holdout, include_hook=include_hook,
                                      calibrate_max_p=calibrate_max_p, per_tensor=per_tensor,
                                      network_from=network_from, overlap=overlap, hook_gamma=hook_gamma,
                                      gamma_from=gamma_from, encode_decode_from=encode_decode_from,
                                      path_overhead_from=path_overhead_from))
        by_p = holdout == "world_size"
        inps = [(_inputs(plat, max_p=int(calibrate_max_p) if by_p else None, network_from=network_from), True)]
        if by_p:
            inps.append((_inputs(plat), False))  # each network's own sweep: for comparison only
        keys = {(int(w), None if _isnull(x) else float(x), None, None) for w, x in
                plat.sweep[["world_size", "rate_gbps"]].itertuples(index=False) if int(w) >= 2}
        if network_from != "sweep":  # every network a DDP record ran on, with its probe
            d = plat.ddp[plat.ddp["world_size"] >= 2]
            keys = {(int(w), None if _isnull(x) else float(x), None if _isnull(g) else float(g),
                     None if _isnull(b) else float(b))
                    for w, x, g, b in d[["world_size", "rate_gbps", "probe_gbps", "probe_bytes"]].itertuples(index=False)}
        for (p, rate, probe, probe_b) in sorted(keys, key=lambda t: (t[0], t[1] or 0, t[2] or 0)):
            for inp, used in inps:
                if not used and p <= calibrate_max_p:
                    continue
                try:
                    n = inp.network(p, rate, probe, probe_b)
                except ValueError as exc:
                    notes.append(f"{plat.name}: {exc}")
                    continue
                if any(x["fitted_on"] == n.fitted_on and x["used"] == used for x in nets if x["platform"] == plat.name):
                    continue
                nets.append({"platform": plat.name, "world_size": p, "rate_gbps": rate, "alpha_us": n.alpha_s * 1e6,
                             "bandwidth_gbps": n.bandwidth_gbps, "incast_coeff": n.incast_coeff, "eq1_r2": n.r2,
                             "fitted_on": n.fitted_on, "used": used})
        notes += [f"{plat.name}: {x}" for x in plat.notes]
    frames = [f for f in frames if not f.empty]
    pred = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return pred, pd.DataFrame(nets), notes


def _fmt_summary(s: pd.DataFrame) -> str:
    lines = [f"{'platform':<10} {'group':<20} {'variant':<9} {'n':>4} {'median|e|':>10} {'max|e|':>8}  worst"]
    for r in s.itertuples():
        lines.append(f"{r.platform:<10} {r.group:<20} {r.variant:<9} {r.n:>4} {r.median_abs_rel_error:>9.1%} "
                     f"{r.max_abs_rel_error:>8.1%}  {r.worst_config}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """``python -m studykit verify``'s options."""
    ap = argparse.ArgumentParser(prog="python -m studykit verify",
                                 description="Predicted vs measured iteration time (Agarwal et al. 2022 Sec. 4.1, App. B-D) "
                                             "from measurement records, leave-one-out.")
    ap.add_argument("--records", nargs="+", default=None,
                    help="record folders, one platform each (default: data/measurements/gpu and .../throttle)")
    ap.add_argument("--out", default=str(paths.REPORTS / "verification"),
                    help="output folder for the CSVs (default reports/verification; the committed "
                         f"data/verification only with {paths.OVERWRITE_FLAG})")
    ap.add_argument(paths.OVERWRITE_FLAG, action="store_true",
                    help="allow --out inside the repository's committed data/ (refused otherwise)")
    ap.add_argument("--stat", default="ms_median", choices=STATS, help="statistic of every record (default median)")
    ap.add_argument("--holdout", default="auto", choices=["auto", "model", "network", "bucket", "record", "world_size"],
                    help="what gamma's calibration leaves out when scoring a syncSGD record "
                         "(auto: the model; the network when a platform has one model). world_size: "
                         "extrapolation in p: every constant calibrated on p <= --calibrate-max-p, "
                         "only larger world sizes scored, their collectives from Eq. 1 / App. B")
    ap.add_argument("--calibrate-max-p", type=int, default=CALIBRATE_MAX_P,
                    help=f"with --holdout world_size: the largest calibration world size (default {CALIBRATE_MAX_P})")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--no-hook", action="store_true", help="skip compression as a DDP hook (mode hook)")
    ap.add_argument("--per-tensor", action="store_true",
                    help="extended: fit and use the per-tensor CPU term (ModelOptions.per_tensor; off by default: "
                         "on the committed GPU records it does not carry across models, see by_batch.csv)")
    ap.add_argument("--network-from", default="sweep", choices=["sweep", "probe", "auto"],
                    help="where each network's alpha and BW come from: its own collective sweep (default); "
                         "'probe': BW from the record's 64 MiB all-reduce probe (network.measured_busbw_gbps), "
                         "alpha and incast from the sweeps at the machine's other rates; 'auto': the sweep "
                         "where the network has one, the probe elsewhere")
    ap.add_argument("--overlap", default=None, choices=["sec41", "timeline"],
                    help="extended variant's overlap of communication with the backward pass (ModelOptions.overlap; "
                         "default: the preset's): Sec. 4.1's max, or the per-bucket timeline")
    ap.add_argument("--hook-gamma", default="one", choices=list(HOOK_GAMMA_SOURCES),
                    help="extended variant, hooks on the timeline: the backward pass at T_comp ('one', default) "
                         "or slowed by syncSGD's fitted gamma ('fitted'; ModelOptions.hook_gamma)")
    ap.add_argument("--gamma-from", default="fit", choices=list(GAMMA_SOURCES),
                    help="extended variant on the timeline: syncSGD's gamma fitted to the calibration records' "
                         "iteration times (default), or measured as the paper measures it ('buckets': the backward "
                         "pass's compute under overlap, the last bucket's ready time of the buckets records, over "
                         "T_comp; the extra terms fitted at it)")
    ap.add_argument("--encode-decode-from", default="profile", choices=list(ENCODE_DECODE_SOURCES),
                    help="encode/decode: as profiled (the codec timed alone; default); 'iterations' (extended "
                         "variant): the profile scaled by what post-backward iterations of the same compressor "
                         "leave room for, fitted on the other holdout groups; 'host_ahead': the profile timed with "
                         "the host ahead of the GPU (profile --host-ahead) where there is one; 'buckets': as "
                         "host_ahead, and hooks bucket by bucket with the host chain where profile --bucket-times "
                         "records are among the inputs (verify_platform)")
    ap.add_argument("--pool", default=None, metavar="NAME",
                    help="score every --records folder as ONE platform called NAME (campaigns of one card kind, "
                         "world size and link method, e.g. models measured in different sessions)")
    ap.add_argument("--sweep-from", default=None, metavar="FOLDER",
                    help="a folder whose collective sweeps stand in for those of --records (a campaign without "
                         "a sweep, on the same card kind and link method; refused otherwise)")
    ap.add_argument("--path-overhead-from", default="identity", choices=list(PATH_OVERHEAD_SOURCES),
                    help="extended variant's path overhead (the hook and post paths' own cost): 'identity' (default) "
                         "from the identity compressor's runs (none) of the same model at the other networks, else per "
                         "bucket from the other holdout groups; 'model': the median residual of the same model's records "
                         "of that mode in the other holdout groups (e.g. the other rates), one constant per iteration")
    ap.add_argument("--inputs-from", nargs="+", default=None, metavar="FOLDER",
                    help="folders whose single-device records (tcomp, profile, copy_bw) fill in for those --records "
                         "lacks (a campaign that measured only DDP iterations, or only its hooks' profiles); a "
                         "configuration --records measured itself keeps its own record; same card kind only")
    ap.add_argument("--quiet", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "verify":
        argv = argv[1:]
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        paths.check_writable_output(args.out, args.overwrite_committed)
    except paths.OutputError as exc:
        ap.error(str(exc))
    try:
        pred, nets, notes = verify(args.records, stat=args.stat, holdout=args.holdout, variants=args.variants,
                                   include_hook=not args.no_hook, calibrate_max_p=args.calibrate_max_p,
                                   per_tensor=args.per_tensor, network_from=args.network_from,
                                   overlap=args.overlap, hook_gamma=args.hook_gamma, gamma_from=args.gamma_from,
                                   sweep_from=args.sweep_from, pool=args.pool,
                                   encode_decode_from=args.encode_decode_from, inputs_from=args.inputs_from,
                                   path_overhead_from=args.path_overhead_from)
    except (ValueError, FileNotFoundError) as exc:
        print(f"verify: {exc}", file=sys.stderr)
        return 2
    if pred.empty:
        print("verify: no DDP record could be scored (need ddp, tcomp, sweep and profile records; a campaign "
              "without a sweep can borrow one: --sweep-from FOLDER)", file=sys.stderr)
        for n in notes[:5]:
            print(f"  {n}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cols = ["platform", "group", "variant", "config", "predicted_ms", "measured_ms", "rel_error", "abs_rel_error",
            "calibrated_on", "holdout", "model", "batch_size", "mode", "compressor", "params", "bucket_mb",
            "world_size", "rate_gbps", "overhead_ms", "t_comp_ms", "t_obs_ms", "t_comm_ms", "t_encode_decode_ms",
            "gamma", "delta_ms", "k_buckets", "bound", "n_iter", "n_records", "meas_iqr_rel", "inputs"]
    pred = pred[[c for c in cols if c in pred.columns]]
    pred.to_csv(out / "predictions.csv", index=False, float_format="%.6g")
    summ = summarize(pred)
    summ.to_csv(out / "summary.csv", index=False, float_format="%.6g")
    nets.to_csv(out / "networks.csv", index=False, float_format="%.6g")
    by_batch_size(pred).to_csv(out / "by_batch.csv", index=False, float_format="%.6g")
    if not args.quiet:
        print(_fmt_summary(summ))
        for n in notes[:20]:
            print("note:", n)
        if len(notes) > 20:
            print(f"note: ... {len(notes) - 20} more")
        shown = out.resolve()
        try:
            shown = shown.relative_to(Path.cwd())
        except ValueError:
            pass
        print(f"wrote {shown / 'predictions.csv'} ({len(pred)} rows), summary.csv, by_batch.csv, networks.csv")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
