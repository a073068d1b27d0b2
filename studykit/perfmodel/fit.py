"""Fit a calibration (alpha, BW, gamma, T_comp, T_encode_decode) from measurement records.

Agarwal et al. 2022, App. C describes how the paper obtains each constant; the kit fits them
from timing records (JSON Lines, :mod:`studykit.measure.records`) instead:

* **alpha, BW** (Eq. 1): weighted least squares of all-reduce times on
  ``T = 2 alpha (p-1) + 2 b (p-1) / (p BW)`` across message sizes ``b`` and world
  sizes ``p`` (relative errors: weights ``1/T``; non-negative coefficients).
  Per world size, ``T = a(p) + b / BW_eff(p)`` is fitted too (the plot's lines).
* **incast** (beyond the paper): all-gather times against App. B's ring all-gather
  with the fitted alpha and BW: ``T - (p-1) alpha = (1 + c) (p-1) b / BW``.
* **gamma** (Sec. 4.1): measured as App. C measures it where the records hold DDP's bucket-ready
  stamps (``ddp --bucket-times``): the last bucket's device ready time over ``T_comp``
  (:func:`fit_gamma_from_stamps`). Otherwise from DDP iteration times vs ``T_comp``, only for
  records whose predicted communication is at most :data:`COMPUTE_BOUND_COMM_FRACTION` of
  ``T_comp``: ``gamma = (T_ddp - overhead - T_comm(b_last)) / T_comp``. Where neither
  determines it, gamma is 1 with a note.
* **T_comp**, **T_encode_decode**: profiles (median), per model and batch size, per
  compressor, parameters and model (linear in world size when profiled at several).

Every constant carries a bootstrap interval (2.5-97.5 %; resampling records, or a
single record's raw iteration times) and an R^2. Data that cannot determine a
constant raise :class:`ValueError` naming what is missing. Constants a prediction should
not trust (a bandwidth above the link's rate, a low R^2, a wide interval) are named in the
calibration's ``warnings``. A calibration can be composed: the single-device constants from
one set of records (one GPU), the network's from another (a sweep on the cluster).

Records may use the measurement module's schema (``kind`` = sweep / profile / tcomp
/ ddp with ``op`` / ``phase`` / ``mode``, ``status``) or the short kinds
``allreduce``, ``allgather``, ``ps``, ``encode_decode``, ``tcomp``, ``ddp``;
:func:`normalize` maps both onto the short kinds.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from studykit import paths
from studykit.perfmodel import collectives as col
from studykit.perfmodel.calibration import (Calibration, Constant, Overhead, PathOverhead, TComp, TEncodeDecode,
                                            normalize_params)
from studykit.perfmodel.model import DEFAULT_BUCKET_BYTES, MIB, Hardware, ModelOptions, Workload, predict

__all__ = ["load_records", "normalize", "AlphaBWFit", "fit_alpha_bw", "fit_incast", "fit_gamma", "fit_t_comp",
           "fit_encode_decode", "fit_calibration", "KINDS", "pool_stat", "network_of", "network_label", "Network",
           "fit_network", "RecordInputs", "SyncTerms", "fit_sync_terms", "fit_path_overhead", "fit_path_overheads",
           "fit_overhead",
           "select_network", "parse_network", "fit_sync_calibration", "sync_rows", "NETWORK_SOURCES", "GAMMA_GRID", "fit_sync_terms_curve", "fit_network_from_probe", "eq1_bandwidth_from_busbw",
           "COMPUTE_BOUND_COMM_FRACTION", "GammaUndetermined", "fit_gamma_from_stamps", "COMPUTE_KINDS", "compute_side",
           "check_one_machine", "bandwidth_warnings", "quality_warnings", "PROBE_KINDS"]

KINDS = ("allreduce", "allgather", "ps", "encode_decode", "tcomp", "ddp")
STATS = ("ms_median", "ms_mean", "ms_min", "ms_max")
_SWEEP_OPS = {"all_reduce": "allreduce", "all_gather": "allgather", "ps_gather": "ps", "ps_reduce": "ps"}


# ------------------------------------------------------------------ records
def load_records(*sources: str | Path) -> pd.DataFrame:
    """JSON Lines files (or folders searched for ``*.jsonl``) as one DataFrame, read by the kit's one
    reader (:func:`studykit.measure.records.load_records`: damaged lines warned about and skipped,
    schema checked, duplicates kept once). ``df.attrs["report"]`` is its
    :class:`~studykit.measure.records.LoadReport`; each row's ``source`` is its file."""
    from studykit.measure.records import LoadReport
    from studykit.measure.records import load_records as read

    report = LoadReport()
    rows = []
    for s in sources:
        p = Path(s)
        if not p.exists():
            raise FileNotFoundError(f"records file {p} not found")
        for f in (sorted(p.rglob("*.jsonl")) if p.is_dir() else [p]):
            for rec in read(f, report=report):
                rec.setdefault("source", str(f))
                rows.append(rec)
    if not rows:
        raise ValueError(f"no records in {report.files or list(map(str, sources))} ({report.summary()})")
    df = pd.DataFrame(rows)
    df.attrs["report"] = report
    return df


#: identity fields of DDP variants that no model term prices (A/B runs beside the defaults): a ``ddp`` record
#: with one of them set is left out of every fit and score (:func:`normalize`, :func:`unpriced_ddp`)
UNPRICED_DDP_FIELDS = {
    "hook_coalesce_mb": "a hook that coalesced buckets (the model's hook runs a protocol per bucket)",
    "broadcast_buffers": "DDP without its buffer broadcast (`ddp --no-broadcast-buffers`)",
}


def unpriced_ddp(df: pd.DataFrame) -> pd.Series:
    """Per row of a records frame: a ``ddp`` variant of :data:`UNPRICED_DDP_FIELDS` (one of the fields set),
    which fits and scores leave out (the one rule of ``normalize`` and ``verify.load_platform``)."""
    out = pd.Series(False, index=df.index)
    for f in UNPRICED_DDP_FIELDS:
        if f in df.columns:
            out |= df[f].notna()
    return out & (df["kind"].astype(str) == "ddp")


def normalize(records: pd.DataFrame | Iterable[dict]) -> pd.DataFrame:
    """Records with a canonical ``kind`` (one of :data:`KINDS`); failed/skipped records dropped.

    Maps the measurement schema: ``sweep`` + ``op`` -> allreduce / allgather / ps;
    ``profile`` with ``phase`` reduce (or none) -> encode_decode; ``tcomp`` keeps
    ``phase`` (``bwd`` is T_comp, ``fwd_bwd`` the forward+backward time); ``ddp`` with
    ``mode`` syncsgd (or none) -> ddp, other modes -> ddp_other, variants no model term prices
    (:data:`UNPRICED_DDP_FIELDS`: hooks that coalesced buckets, DDP without its buffer broadcast) ->
    ddp_unpriced.
    """
    df = records.copy() if isinstance(records, pd.DataFrame) else pd.DataFrame(list(records))
    if "kind" not in df.columns:
        raise ValueError("records lack the 'kind' column")
    if "status" in df.columns:
        df = df[df["status"].isna() | (df["status"] == "ok")]
    kind = df["kind"].astype(str).copy()
    unpriced = unpriced_ddp(df)
    if "op" in df.columns:
        sweep = kind == "sweep"
        kind[sweep] = df.loc[sweep, "op"].map(_SWEEP_OPS).fillna("sweep_other")
    if "phase" in df.columns:
        prof = kind == "profile"
        ok = prof & (df["phase"].isna() | (df["phase"] == "reduce"))
        kind[ok] = "encode_decode"
        kind[prof & ~ok] = "profile_other"
    else:
        kind[kind == "profile"] = "encode_decode"
    if "mode" in df.columns:
        other = (kind == "ddp") & df["mode"].notna() & (df["mode"] != "syncsgd")
        kind[other] = "ddp_other"
    kind[unpriced] = "ddp_unpriced"
    df = df.assign(kind=kind)
    return df.reset_index(drop=True)


def _need(df: pd.DataFrame, cols: Iterable[str], what: str) -> None:
    missing = [c for c in cols if c not in df.columns or df[c].isna().all()]
    if missing:
        raise ValueError(f"cannot fit {what}: records lack column(s) {missing}")
    bad = [c for c in cols if df[c].isna().any()]
    if bad:
        raise ValueError(f"cannot fit {what}: {int(df[bad].isna().any(axis=1).sum())} record(s) have empty {bad}")


def _times_s(df: pd.DataFrame, stat: str, what: str) -> np.ndarray:
    if stat not in STATS:
        raise ValueError(f"unknown statistic {stat!r}; valid: {list(STATS)}")
    _need(df, [stat], what)
    t = df[stat].to_numpy(dtype=float) / 1e3
    if np.any(~np.isfinite(t)) or np.any(t <= 0):
        n = int(np.sum(~np.isfinite(t) | (t <= 0)))
        raise ValueError(f"cannot fit {what}: {n} record(s) have non-positive or non-finite {stat}")
    return t


def _of_kind(df: pd.DataFrame, kind: str, what: str) -> pd.DataFrame:
    sub = df[df["kind"] == kind]
    if sub.empty:
        have = sorted(df["kind"].astype(str).unique())
        raise ValueError(f"cannot fit {what}: no records of kind {kind!r} (have kinds {have})")
    return sub


def _r2(y, yhat) -> float:
    y, yhat = np.asarray(y, float), np.asarray(yhat, float)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return float("nan") if ss_tot == 0 else 1.0 - float(np.sum((y - yhat) ** 2)) / ss_tot


def _interval(samples: list[float]) -> tuple[float | None, float | None]:
    s = np.asarray([x for x in samples if np.isfinite(x)], dtype=float)
    if len(s) < 10:
        return None, None
    return float(np.percentile(s, 2.5)), float(np.percentile(s, 97.5))


# --------------------------------------------------------------- alpha, BW
@dataclass
class AlphaBWFit:
    """Fitted Eq. 1 constants plus what the plots need."""

    alpha_s: Constant
    bandwidth_gbps: Constant
    per_world_size: pd.DataFrame  # world_size, intercept_s, bw_eff_gbps, bw_gbps, r2, n
    data: pd.DataFrame  # the records used: world_size, size_bytes, t_s, t_fit_s


def _eq1_design(size_bytes, world_size):
    p = np.asarray(world_size, dtype=float)
    b = np.asarray(size_bytes, dtype=float)
    return np.column_stack([2.0 * (p - 1.0), 2.0 * b * (p - 1.0) / p])


def _wls_nonneg(X, y):
    w = 1.0 / y  # relative errors: small messages weigh as much as large ones
    coef, _ = nnls(X * w[:, None], y * w)
    return coef


def fit_alpha_bw(records: pd.DataFrame, *, stat: str = "ms_median", n_boot: int = 200,
                 seed: int = 0) -> AlphaBWFit:
    """alpha (s) and BW (Gbit/s) of Eq. 1 (Sec. 4.1) from all-reduce records.

    Needs all-reduce records at world size >= 2 and at least two distinct message
    sizes (one size cannot separate latency from bandwidth). Records at world size 1
    move nothing and are ignored.
    """
    what = "alpha and BW (Eq. 1)"
    df = _of_kind(normalize(records), "allreduce", what)
    _need(df, ["size_bytes", "world_size"], what)
    df = df[df["world_size"].astype(float) >= 2]
    if df.empty:
        raise ValueError(f"cannot fit {what}: all all-reduce records are at world_size 1 (p=1 moves no bytes); "
                         "need records at world_size >= 2")
    if df["size_bytes"].nunique() < 2:
        raise ValueError(f"cannot fit {what}: one message size only ({int(df['size_bytes'].iloc[0])} bytes); "
                         "need at least 2 distinct size_bytes to separate latency from bandwidth")
    t = _times_s(df, stat, what)
    p = df["world_size"].to_numpy(dtype=float)
    b = df["size_bytes"].to_numpy(dtype=float)
    X = _eq1_design(b, p)
    alpha, inv_bw = _wls_nonneg(X, t)
    if inv_bw <= 0 or np.max(X[:, 1] * inv_bw / t) < 1e-6:  # the bandwidth term explains nothing
        raise ValueError(f"cannot fit {what}: times do not grow with message size; bandwidth undetermined")
    t_fit = X @ np.array([alpha, inv_bw])
    r2 = _r2(t, t_fit)
    rng = np.random.default_rng(seed)
    boot_a, boot_bw = [], []
    n = len(t)
    for _ in range(n_boot):
        i = rng.integers(0, n, n)
        if len(np.unique(b[i])) < 2:
            continue
        a_i, ib_i = _wls_nonneg(X[i], t[i])
        if ib_i > 0:
            boot_a.append(a_i)
            boot_bw.append(float(col.bytes_s_to_gbps(1.0 / ib_i)))
    bw_gbps = float(col.bytes_s_to_gbps(1.0 / inv_bw))
    a_lo, a_hi = _interval(boot_a)
    b_lo, b_hi = _interval(boot_bw)
    src = f"fit of Eq. 1 to {n} all-reduce records ({stat}), weighted least squares"
    per = []
    for q, g in df.assign(t_s=t).groupby("world_size"):
        if g["size_bytes"].nunique() < 2:
            continue
        Xq = np.column_stack([np.ones(len(g)), g["size_bytes"].to_numpy(float)])
        a_q, s_q = _wls_nonneg(Xq, g["t_s"].to_numpy(float))
        if s_q <= 0:
            continue
        bw_eff = 1.0 / s_q
        per.append({"world_size": int(q), "intercept_s": a_q, "bw_eff_gbps": float(col.bytes_s_to_gbps(bw_eff)),
                    "bw_gbps": float(col.bytes_s_to_gbps(bw_eff * 2.0 * (q - 1.0) / q)),
                    "r2": _r2(g["t_s"], Xq @ np.array([a_q, s_q])), "n": len(g)})
    data = pd.DataFrame({"world_size": p.astype(int), "size_bytes": b, "t_s": t, "t_fit_s": t_fit})
    return AlphaBWFit(
        alpha_s=Constant(float(alpha), "s", src, low=a_lo, high=a_hi, r2=r2, n=n),
        bandwidth_gbps=Constant(bw_gbps, "Gbit/s", src, low=b_lo, high=b_hi, r2=r2, n=n),
        per_world_size=pd.DataFrame(per), data=data)


def fit_incast(records: pd.DataFrame, alpha_s: float, bandwidth_gbps: float, *, stat: str = "ms_median",
               n_boot: int = 200, seed: int = 0) -> Constant:
    """All-gather congestion coefficient ``c`` (beyond the paper; App. C names the gap).

    ``T - (p-1) alpha = (1 + c) (p-1) b / BW`` over all-gather records (p >= 2),
    with alpha and BW from the all-reduce fit; ``c`` is clipped at 0. When the
    records hold the all-reduce sweep too, the bootstrap refits alpha and BW in each
    resample, so the interval carries their uncertainty.
    """
    what = "the all-gather incast coefficient"
    norm = normalize(records)
    df = _of_kind(norm, "allgather", what)
    _need(df, ["size_bytes", "world_size"], what)
    df = df[df["world_size"].astype(float) >= 2]
    if df.empty:
        raise ValueError(f"cannot fit {what}: need all-gather records at world_size >= 2")
    t = _times_s(df, stat, what)
    p = df["world_size"].to_numpy(float)
    b = df["size_bytes"].to_numpy(float)

    def slope(i, a_s, bw_gbps):
        x = (p[i] - 1.0) * b[i] / col.gbps_to_bytes_s(bw_gbps)
        y = t[i] - (p[i] - 1.0) * a_s
        w = 1.0 / t[i]
        return float(np.sum(w * w * x * y) / np.sum(w * w * x * x))

    idx = np.arange(len(t))
    s = slope(idx, alpha_s, bandwidth_gbps)
    ar = norm[(norm["kind"] == "allreduce")]
    if len(ar) and {"size_bytes", "world_size", stat} <= set(ar.columns):
        ar = ar[ar["world_size"].astype(float) >= 2]
    joint = len(ar) >= 2 and ar["size_bytes"].nunique() >= 2
    if joint:
        Xa = _eq1_design(ar["size_bytes"].to_numpy(float), ar["world_size"].to_numpy(float))
        ta = ar[stat].to_numpy(float) / 1e3
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(n_boot):
        a_s, bw_g = alpha_s, bandwidth_gbps
        if joint:
            j = rng.integers(0, len(ta), len(ta))
            a_j, ib_j = _wls_nonneg(Xa[j], ta[j])
            if ib_j <= 0:
                continue
            a_s, bw_g = a_j, float(col.bytes_s_to_gbps(1.0 / ib_j))
        boot.append(max(slope(rng.integers(0, len(t), len(t)), a_s, bw_g) - 1.0, 0.0))
    lo, hi = _interval(boot)
    x = (p - 1.0) * b / col.gbps_to_bytes_s(bandwidth_gbps)
    return Constant(max(s - 1.0, 0.0), "ratio", f"all-gather records ({len(t)}, {stat}) vs ring all-gather "
                    "with the fitted alpha/BW (beyond Agarwal et al. 2022)" + ("; bootstrap refits alpha/BW" if joint else ""),
                    low=lo, high=hi, r2=_r2(t, (p - 1.0) * alpha_s + s * x), n=len(t))


# ------------------------------------------------------- T_comp, encode/decode
def _median_interval(g: pd.DataFrame, stat: str, n_boot: int, rng) -> tuple[float, float | None, float | None, str]:
    """Median over records; interval by bootstrap over records, or over one record's raw times."""
    t = g[stat].to_numpy(float) / 1e3
    if len(t) >= 2:
        boot = [float(np.median(t[rng.integers(0, len(t), len(t))])) for _ in range(n_boot)]
        lo, hi = _interval(boot)
        return float(np.median(t)), lo, hi, f"bootstrap over {len(t)} records"
    raw = g["times_ms"].iloc[0] if "times_ms" in g.columns else None
    if isinstance(raw, (list, tuple, np.ndarray)) and len(raw) >= 2:
        r = np.asarray(raw, float) / 1e3
        fn = np.median if stat == "ms_median" else np.mean if stat == "ms_mean" else (
            np.min if stat == "ms_min" else np.max)
        boot = [float(fn(r[rng.integers(0, len(r), len(r))])) for _ in range(n_boot)]
        lo, hi = _interval(boot)
        return float(t[0]), lo, hi, f"bootstrap over {len(r)} iterations of one record"
    lo = g["ms_min"].iloc[0] / 1e3 if "ms_min" in g.columns and pd.notna(g["ms_min"].iloc[0]) else None
    hi = g["ms_max"].iloc[0] / 1e3 if "ms_max" in g.columns and pd.notna(g["ms_max"].iloc[0]) else None
    return float(t[0]), lo, hi, "one record without raw times: interval = min..max iteration"


def _tcomp_records(df: pd.DataFrame, phase: str = "bwd") -> pd.DataFrame:
    sub = df[df["kind"] == "tcomp"]
    if "phase" in sub.columns:
        sub = sub[sub["phase"].isna() | (sub["phase"] == phase)] if phase == "bwd" else sub[sub["phase"] == phase]
    elif phase != "bwd":
        return sub.iloc[0:0]
    return sub


def fit_t_comp(records: pd.DataFrame, *, stat: str = "ms_median", n_boot: int = 200, seed: int = 0) -> list[TComp]:
    """Single-GPU backward time ``T_comp`` per (model, batch size) from ``tcomp`` records (App. C).

    R^2 is that of ``T = a + s * batch`` per model when there are >= 2 batch sizes.
    """
    what = "T_comp"
    df = normalize(records)
    sub = _tcomp_records(df)
    if sub.empty:
        raise ValueError(f"cannot fit {what}: no tcomp records of phase 'bwd' (the backward pass alone)")
    _need(sub, ["model", "batch_size"], what)
    _times_s(sub, stat, what)
    rng = np.random.default_rng(seed)
    out = []
    for m, gm in sub.groupby("model"):
        r2 = None
        if gm["batch_size"].nunique() >= 2:
            x = gm["batch_size"].to_numpy(float)
            y = gm[stat].to_numpy(float)
            A = np.column_stack([np.ones_like(x), x])
            coef, *_ = np.linalg.lstsq(A, y, rcond=None)
            r2 = _r2(y, A @ coef)
        for bs, g in gm.groupby("batch_size"):
            v, lo, hi, how = _median_interval(g, stat, n_boot, rng)
            out.append(TComp(value=v, unit="s", source=f"tcomp records ({stat}); {how}", low=lo, high=hi,
                             r2=r2, n=len(g), model=str(m), batch_size=int(bs),
                             note="R^2 of T_comp linear in batch size (per model)" if r2 is not None else ""))
    return out


def fit_encode_decode(records: pd.DataFrame, *, stat: str = "ms_median", n_boot: int = 200,
                      seed: int = 0) -> list[TEncodeDecode]:
    """``T_encode_decode`` per (compressor, params, model) from profile records (App. C).

    With profiles at >= 2 (simulated) world sizes the fit is ``value + per_worker_s * p``
    (Agarwal et al. 2022 Fig. 8: SignSGD's decode grows with p), R^2 of that line; else the median.
    """
    what = "T_encode_decode"
    df = _of_kind(normalize(records), "encode_decode", what)
    _need(df, ["compressor", "model"], what)
    _times_s(df, stat, what)
    if "params" not in df.columns:
        df = df.assign(params=[{}] * len(df))
    df = df.assign(_pkey=df["params"].map(lambda p: json.dumps(normalize_params(p if isinstance(p, dict) else {}),
                                                                sort_keys=True)))
    wcol = "sim_world_size" if "sim_world_size" in df.columns and df["sim_world_size"].notna().any() else "world_size"
    rng = np.random.default_rng(seed)
    out = []
    for (c, pk, m), g in df.groupby(["compressor", "_pkey", "model"]):
        params = json.loads(pk)
        ws = g[wcol].fillna(1).to_numpy(float) if wcol in g.columns else np.ones(len(g))
        t = g[stat].to_numpy(float) / 1e3
        if len(np.unique(ws)) >= 2:
            A = np.column_stack([np.ones_like(ws), ws])
            coef, *_ = np.linalg.lstsq(A, t, rcond=None)
            boot = []
            for _ in range(n_boot):
                i = rng.integers(0, len(t), len(t))
                if len(np.unique(ws[i])) >= 2:
                    boot.append(np.linalg.lstsq(A[i], t[i], rcond=None)[0][0])
            lo, hi = _interval(boot)
            out.append(TEncodeDecode(value=float(coef[0]), unit="s", low=lo, high=hi, r2=_r2(t, A @ coef), n=len(t),
                                     source=f"profile records ({stat}); linear in {wcol}", compressor=str(c),
                                     params=params, model=str(m), per_worker_s=float(coef[1])))
        else:
            v, lo, hi, how = _median_interval(g, stat, n_boot, rng)
            out.append(TEncodeDecode(value=v, unit="s", low=lo, high=hi, n=len(g),
                                     source=f"profile records ({stat}); {how}", compressor=str(c), params=params,
                                     model=str(m)))
    return out


# ---------------------------------------------------------------- gamma
#: a DDP record gives gamma from its iteration time only when the model's communication (the overlapped buckets
#: and the last one, which is never hidden) is at most this fraction of T_comp. Why so wide a margin: whatever the
#: communication model misses is charged to gamma, and a margin against the *measured* time cannot see that miss
#: (the more communication the model misses, the more compute-bound the record looks). On a shaped link the miss
#: is large: a tc tbf token bucket lets the sweep's small messages through faster than the rate, so Eq. 1's
#: bandwidth comes out above the link's, and DDP's buckets pay costs Eq. 1 does not price. At 0.5 the overlapped
#: buckets stay hidden (gamma >= 1) even if communication takes twice what the model predicts, and a miss of
#: x % of the communication moves gamma by at most x/2 %; records closer to the crossover are left to the
#: bucket stamps.
COMPUTE_BOUND_COMM_FRACTION = 0.5


class GammaUndetermined(ValueError):
    """The records cannot determine gamma: every DDP record is communication-bound (the backward pass is hidden)."""


def sync_rows(ddp: pd.DataFrame, stat: str, alpha_s: float, bandwidth_gbps: float, t_comp: dict, *,
              options: ModelOptions | None = None, incast_coeff: float = 0.0) -> list[dict]:
    """One dict per syncSGD DDP record at world size >= 2 with the model's own communication terms:
    :func:`studykit.perfmodel.model.predict` with ``options`` (default the paper's), gamma 1 and no
    extra term gives ``overlapped_comm`` (Sec. 4.1's ``(k-1) T_comm(b)``), ``last_comm``
    (``T_comm(b_last)``), ``k`` and ``n_tensors``; plus ``key``, ``world_size``, ``T`` (s) and the raw
    ``times``. ``t_comp``: ``{(model, batch): T_comp_s}``."""
    opts = options or ModelOptions.paper()
    hw = Hardware(bandwidth_gbps=bandwidth_gbps, alpha_s=alpha_s, gamma=1.0, incast_coeff=incast_coeff)
    rows = []
    for _, r in ddp.iterrows():
        p = int(r["world_size"])
        if p < 2:
            continue
        key = (r["model"], int(r["batch_size"]))
        if key not in t_comp:
            raise ValueError(f"cannot fit gamma: no T_comp (tcomp bwd record) for model {key[0]!r} batch {key[1]}")
        bmb = r["bucket_mb"] if "bucket_mb" in ddp.columns else None
        cap = None if bmb is None or pd.isna(bmb) else float(bmb) * MIB
        w = Workload(key[0], key[1], t_comp_s=t_comp[key], bucket_bytes=DEFAULT_BUCKET_BYTES if cap is None else cap,
                     first_bucket_bytes=cap, overhead_s=0.0)
        sy = predict(w, hw, p, options=opts).sync
        rows.append({"key": key, "world_size": p, "T": float(r[stat]) / 1e3, "bucket_bytes": w.bucket_bytes,
                     "first_bucket_bytes": cap, "times": r["times_ms"] if "times_ms" in ddp.columns else None,
                     "overlapped_comm": float(sy["overlapped_comm_s"]), "last_comm": float(sy["last_comm_s"]),
                     "k": float(sy["k"]), "n_tensors": w.n_tensors})
    return rows


def _predicted_s(recs: list[dict], t_comp: dict, hw: Hardware, options: ModelOptions) -> np.ndarray:
    """The model's ``T_obs`` (s) of each :func:`sync_rows` record on ``hw`` (what a fit is scored on)."""
    out = []
    for r in recs:
        w = Workload(r["key"][0], r["key"][1], t_comp_s=t_comp[r["key"]], bucket_bytes=r["bucket_bytes"],
                     first_bucket_bytes=r["first_bucket_bytes"], overhead_s=0.0)
        out.append(float(predict(w, hw, r["world_size"], options=options).sync["total_s"]))
    return np.asarray(out)


def _sync_inputs(records: pd.DataFrame, stat: str, t_comp: list[TComp] | None, what: str):
    """The DDP records and the inputs a fit of the syncSGD terms needs: ``(ddp, tc, groups)``; refusals
    name what is missing. ``groups``: records giving ``T_comp`` (bwd), ``O`` (fwd_bwd, DDP p=1)."""
    df = normalize(records)
    ddp = _of_kind(df, "ddp", what)
    _need(ddp, ["model", "batch_size", "world_size"], what)
    _times_s(ddp, stat, what)
    if t_comp is None:
        try:
            t_comp = fit_t_comp(df, stat=stat, n_boot=0)
        except ValueError as exc:
            raise ValueError(f"cannot fit {what}: needs single-GPU backward times ({exc})") from None
    tc = {(c.model, c.batch_size): c.value for c in t_comp}
    for sub, label in ((_tcomp_records(df, "fwd_bwd"), "tcomp fwd_bwd"),
                       (ddp[ddp["world_size"].astype(int) == 1], "DDP world size 1")):
        if not sub.empty:  # the overhead O comes from them: a zero time would inflate gamma
            _times_s(sub, stat, f"{what} ({label} records)")
    groups = {"bwd": {(m, int(bs)): g for (m, bs), g in _tcomp_records(df).groupby(["model", "batch_size"])},
              "fwd_bwd": {(m, int(bs)): g for (m, bs), g in _tcomp_records(df, "fwd_bwd").groupby(["model", "batch_size"])},
              "one": {(m, int(bs)): g for (m, bs), g in
                      ddp[ddp["world_size"].astype(int) == 1].groupby(["model", "batch_size"])}}
    return ddp, tc, groups


def _sync_estimate_rows(recs, tc, groups, stat, rng=None, idx=None) -> list[dict]:
    """:func:`fit_sync_terms` rows (``s = T - O``) from :func:`sync_rows` records, optionally resampled
    (records ``idx``, each record's iterations and each group's records, by ``rng``)."""
    def stat_of(g):
        return _resample_stat(g, stat, rng) if rng is not None else float(g[stat].median()) / 1e3
    t_c = {k: stat_of(g) for k, g in groups["bwd"].items()} if rng is not None else tc
    out = []
    for r in (recs if idx is None else [recs[i] for i in idx]):
        key = r["key"]
        tck = t_c.get(key, tc[key])
        if key in groups["one"]:
            overhead = stat_of(groups["one"][key]) - tck
        elif key in groups["fwd_bwd"]:
            overhead = stat_of(groups["fwd_bwd"][key]) - tck
        else:
            overhead = 0.0
        T = r["T"] if rng is None else _resample_list(r["times"], stat, rng, r["T"])
        out.append({**r, "s": T - overhead, "t_comp": tck})
    return out


def fit_gamma(records: pd.DataFrame, alpha_s: float, bandwidth_gbps: float, *, t_comp: list[TComp] | None = None,
              stat: str = "ms_median", n_boot: int = 200, seed: int = 0, margin: float = 0.05,
              comm_fraction: float | None = COMPUTE_BOUND_COMM_FRACTION) -> Constant:
    """gamma (Sec. 4.1) from DDP (syncSGD) iteration times and single-GPU backward times.

    For each DDP record at world size >= 2 the part of the iteration that is backward
    plus synchronization is ``S = T_ddp - overhead``, where the overhead (forward,
    optimizer) is taken from a DDP record at world size 1 of the same model / batch
    (``T_ddp(1) - T_comp``), else from a ``tcomp`` forward+backward record
    (``T_fwd_bwd - T_comp``), else 0 (records then time backward + sync only).
    The communication terms are the model's own (:func:`sync_rows`: ``predict`` with the paper's
    options). Where the backward pass clearly bounds the overlap
    (``(1 + margin) (k-1) T_comm(b) <= S - T_comm(b_last)``, the margin keeping noisy
    communication-bound records out, and ``(k-1) T_comm(b) + T_comm(b_last) <= comm_fraction * T_comp``
    (:data:`COMPUTE_BOUND_COMM_FRACTION`; None: the first rule alone), which keeps out records whose
    communication the model underestimates) App. C's rule ``gamma_i = (S - T_comm(b_last)) / T_comp``
    applies; gamma is their median (:func:`fit_sync_terms`). R^2 compares ``predict``'s ``S`` at the
    fitted gamma with the observed over every record. :class:`GammaUndetermined` when no record is
    compute-bound.
    """
    what = "gamma"
    ddp, tc, groups = _sync_inputs(records, stat, t_comp, what)
    opts = ModelOptions.paper()
    recs = sync_rows(ddp, stat, alpha_s, bandwidth_gbps, tc, options=opts)
    if not recs:
        raise ValueError(f"cannot fit {what}: need DDP records at world_size >= 2")
    how = {r["key"]: "ddp world_size 1" if r["key"] in groups["one"] else
           "tcomp fwd_bwd" if r["key"] in groups["fwd_bwd"] else "none" for r in recs}

    def estimate(rng=None, idx=None) -> SyncTerms:
        return fit_sync_terms(_sync_estimate_rows(recs, tc, groups, stat, rng, idx), margin=margin,
                              comm_fraction=comm_fraction)

    terms = estimate()
    if "gamma" not in terms.fitted:
        bound = "" if comm_fraction is None else f" (predicted communication above {comm_fraction:g} T_comp)"
        raise GammaUndetermined(
            f"cannot fit {what}: every DDP record is communication-bound{bound} under alpha={alpha_s:.3g} s, "
            f"BW={bandwidth_gbps:.3g} Gbit/s (the backward pass is hidden, gamma unobservable); measure DDP's "
            "bucket-ready stamps (ddp --bucket-times), or at fewer GPUs, a larger batch or a faster link")
    rows = _sync_estimate_rows(recs, tc, groups, stat)
    pred = _predicted_s(recs, tc, Hardware(bandwidth_gbps=bandwidth_gbps, alpha_s=alpha_s, gamma=terms.gamma), opts)
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(n_boot):
        t = estimate(rng, rng.integers(0, len(recs), len(recs)))
        boot.append(t.gamma if "gamma" in t.fitted else float("nan"))
    lo, hi = _interval(boot)
    hows = ",".join(sorted(set(how.values())))
    rule = "" if comm_fraction is None else f" (predicted communication <= {comm_fraction:g} T_comp)"
    return Constant(terms.gamma, "ratio", f"{terms.n_used} compute-bound DDP records{rule} ({stat}) of {len(recs)}; "
                    f"non-backward overhead from: {hows}; bootstrap resamples records and iterations",
                    low=lo, high=hi, r2=_r2([r["s"] for r in rows], pred), n=terms.n_used)


#: the extended syncSGD constants a calibration holds (``Calibration`` field -> ``SyncTerms`` attribute)
SYNC_CONSTANTS = {"gamma_extended": "gamma", "sync_delta_s": "delta_s", "per_bucket_s": "per_bucket_s",
                  "per_tensor_s": "per_tensor_s"}
_SYNC_TERM = {"gamma_extended": "gamma", "sync_delta_s": "delta", "per_bucket_s": "per_bucket",
              "per_tensor_s": "per_tensor"}


def fit_sync_calibration(records: pd.DataFrame, alpha_s: float, bandwidth_gbps: float, *,
                         t_comp: list[TComp] | None = None, incast_coeff: float = 0.0,
                         options: ModelOptions | None = None, stat: str = "ms_median", n_boot: int = 200,
                         seed: int = 0, comm_fraction: float | None = COMPUTE_BOUND_COMM_FRACTION,
                         ) -> tuple[dict[str, Constant], dict[str, str]]:
    """The extended model's syncSGD constants (beyond the paper; ``options`` default
    :meth:`ModelOptions.extended` with Eq. 1 collectives, as ``predict --calibration X --terms extended``
    prices them): gamma fitted jointly with ``delta`` (per iteration), ``c_b`` (per extra DDP bucket)
    and, with ``options.per_tensor``, ``c_t`` (per parameter tensor) by :func:`fit_sync_terms` on the
    model's own communication terms (:func:`sync_rows`), compute-bound records only (``comm_fraction``, as
    :func:`fit_gamma`). Returns ``({field: Constant}, {field: why not
    fitted})``: each constant with its bootstrap interval (records and iterations resampled) and the
    records it came from; a term the records cannot determine is named with the reason."""
    what = "the extended syncSGD terms"
    opts = options or replace(ModelOptions.extended(), collectives="eq1")
    ddp, tc, groups = _sync_inputs(records, stat, t_comp, what)
    recs = sync_rows(ddp, stat, alpha_s, bandwidth_gbps, tc, options=opts, incast_coeff=incast_coeff)
    if not recs:
        raise ValueError(f"cannot fit {what}: need DDP records at world_size >= 2")

    def estimate(rng=None, idx=None) -> SyncTerms:
        return fit_sync_terms(_sync_estimate_rows(recs, tc, groups, stat, rng, idx), extended=True,
                              per_tensor=opts.per_tensor, comm_fraction=comm_fraction)

    terms = estimate()
    rng = np.random.default_rng(seed)
    boots = [estimate(rng, rng.integers(0, len(recs), len(recs))) for _ in range(n_boot)]
    rows = _sync_estimate_rows(recs, tc, groups, stat)
    hw = Hardware(bandwidth_gbps=bandwidth_gbps, alpha_s=alpha_s, gamma=terms.gamma, incast_coeff=incast_coeff,
                  sync_delta_s=terms.delta_s, per_bucket_s=terms.per_bucket_s, per_tensor_s=terms.per_tensor_s)
    r2 = _r2([r["s"] for r in rows], _predicted_s(recs, tc, hw, opts))
    models_used = sorted({f"{m} b{b}" for m, b in (r["key"] for r in recs)})
    src = (f"fit with gamma to {terms.n_used} compute-bound syncSGD DDP records ({stat}) of {len(recs)} "
           f"({', '.join(models_used)}); {terms.how}; bootstrap resamples records and iterations")
    reasons = {"gamma": ("the compute-bound records' backward times are less than 1.5x apart, so gamma cannot be "
                         "told from delta: gamma kept at 1, delta fitted") if "delta" in terms.fitted
               else "no compute-bound DDP record (the backward pass is hidden)",
               "delta": "no compute-bound DDP record (the backward pass is hidden)",
               "per_bucket": "the compute-bound records have one DDP bucket count only" if "delta" in terms.fitted
               else "no compute-bound DDP record (the backward pass is hidden)",
               "per_tensor": (f"the compute-bound records have fewer than {PER_TENSOR_MIN_COUNTS} parameter-tensor "
                              "counts (models)") if opts.per_tensor else "off in the options (ModelOptions.per_tensor)"}
    out, notes = {}, {}
    for name, attr in SYNC_CONSTANTS.items():
        term = _SYNC_TERM[name]
        if term not in terms.fitted:
            notes[name] = f"not fitted: {reasons[term]}"
            continue
        lo, hi = _interval([getattr(t, attr) for t in boots if term in t.fitted])
        unit = "ratio" if name == "gamma_extended" else "s"
        out[name] = Constant(float(getattr(terms, attr)), unit, src, low=lo, high=hi, r2=r2, n=terms.n_used)
    return out, notes


def _resample_list(times, stat: str, rng, fallback: float) -> float:
    if not isinstance(times, (list, tuple, np.ndarray)) or len(times) < 2:
        return fallback
    r = np.asarray(times, float)[rng.integers(0, len(times), len(times))] / 1e3
    return float({"ms_median": np.median, "ms_mean": np.mean, "ms_min": np.min, "ms_max": np.max}[stat](r))


def _resample_stat(g: pd.DataFrame, stat: str, rng) -> float:
    """One bootstrap draw of a group's statistic (s): over records, or one record's iterations."""
    t = g[stat].to_numpy(float) / 1e3
    if len(t) >= 2:
        return float(np.median(t[rng.integers(0, len(t), len(t))]))
    times = g["times_ms"].iloc[0] if "times_ms" in g.columns else None
    return _resample_list(times, stat, rng, float(t[0]))


def fit_gamma_from_stamps(records: pd.DataFrame, *, stat: str = "ms_median", n_boot: int = 200,
                          seed: int = 0) -> Constant | None:
    """gamma as the paper measures it (Agarwal et al. 2022, https://arxiv.org/abs/2103.00543, App. C: the backward
    pass's compute under overlap with communication over ``T_comp`` alone) from DDP's bucket-ready stamps
    (``buckets`` records, ``ddp --bucket-times``, device clock): :meth:`RecordInputs.measured_gamma` of every
    configuration stamped at world size >= 2 (model, batch, bucket size, world size, link rate); gamma is their
    median, the interval a bootstrap over configurations. It does not go through the communication model, so a
    slow link cannot bias it. None without device-clock stamps; ValueError when no stamped configuration has a
    ``tcomp`` backward record."""
    df = normalize(records)
    b = df[df["kind"] == "buckets"]
    if "world_size" in b.columns:
        b = b[pd.to_numeric(b["world_size"], errors="coerce") >= 2]
    if b.empty:
        return None
    net = b["network"] if "network" in b.columns else pd.Series([None] * len(b), index=b.index)
    b = b.assign(rate_gbps=net.map(lambda n: network_of(n)[0]))
    tc = _tcomp_records(df)
    tc = tc.assign(phase="bwd", network=tc["network"] if "network" in tc.columns else None)
    none = pd.DataFrame({c: pd.Series(dtype=object) for c in ("model", "batch_size", "world_size", "mode",
                                                       "bucket_mb", "phase")})
    inp = RecordInputs(tc, none, none, none, stat, buckets=b)
    if not inp.backward_end_ms:
        return None
    got = {k: inp.measured_gamma(*k) for k in inp.backward_end_ms}
    vals = np.asarray([v for v in got.values() if v is not None], dtype=float)
    if not len(vals):
        missing = sorted({f"{m} batch {bs}" for (m, bs, *_), v in got.items() if v is None})
        raise ValueError(f"cannot measure gamma from the bucket stamps: no tcomp bwd record (T_comp) for "
                         f"{', '.join(missing)}")
    rng = np.random.default_rng(seed)
    boot = [float(np.median(vals[rng.integers(0, len(vals), len(vals))])) for _ in range(n_boot)] \
        if len(vals) >= 2 else []
    lo, hi = _interval(boot)
    n_rec = sum(len(inp.backward_end_ms[k]) for k, v in got.items() if v is not None)
    return Constant(float(np.median(vals)), "ratio",
                    f"measured from DDP's bucket-ready stamps (App. C): median over {len(vals)} stamped "
                    f"configuration(s) ({n_rec} buckets record(s)) of the last bucket's device ready time over "
                    f"T_comp ({stat} of tcomp bwd), {vals.min():.3f}-{vals.max():.3f}; bootstrap over configurations",
                    low=lo, high=hi, n=len(vals))


# ------------------------------------------------------------ calibration
def default_records() -> Path:
    """The records the calibrate notebook fits by default: committed GPU records
    (``data/measurements/gpu/``), else CPU records (``cpu/``), else the synthetic demo."""
    for sub in ("gpu", "cpu"):
        folder = paths.MEASUREMENTS / sub
        if folder.is_dir() and any(folder.rglob("*.jsonl")):
            return folder
    return paths.MEASUREMENTS / "synthetic" / "demo.jsonl"


#: kinds of the link's bandwidth probe (``throttle_probe``: ``python -m studykit throttle``; ``probe``)
PROBE_KINDS = ("throttle_probe", "probe")
#: kinds whose times depend on the network (records of other kinds are kept whatever their network)
_NETWORK_KINDS = ("allreduce", "allgather", "ps", "ddp", "ddp_other", *PROBE_KINDS)


def parse_network(text: str) -> dict:
    """``rate_gbps=5,workers=2`` (or ``native``) -> the fields a record's ``network`` must match."""
    text = text.strip()
    if text in ("native", "none", "null"):
        return {}
    out = {}
    for part in text.split(","):
        if "=" not in part:
            raise ValueError(f"network selector {text!r}: expected KEY=VALUE[,KEY=VALUE] "
                             "(keys: rate_gbps, latency_ms, workers) or 'native'")
        k, v = (x.strip() for x in part.split("=", 1))
        if k not in ("rate_gbps", "latency_ms", "workers"):
            raise ValueError(f"network selector {text!r}: unknown key {k!r}; valid: rate_gbps, latency_ms, workers")
        out[k] = float(v)
    return out


def select_network(df: pd.DataFrame, network: str | dict | None = None) -> tuple[pd.DataFrame, dict | None]:
    """The records of one network: ``(records, network)``, ``network`` the records' ``network`` field (None:
    a real network). Records of kinds that do not depend on the network (``tcomp`` alone, ``profile``) are
    kept. Records on more than one network (a different ``rate_gbps``, ``latency_ms`` or ``workers``) raise
    naming them, unless ``network`` picks one (``"rate_gbps=5"``, ``"native"``, or a dict of fields)."""
    net = df["network"] if "network" in df.columns else pd.Series([None] * len(df), index=df.index)
    keys = net.map(network_of)
    dep = df["kind"].isin(_NETWORK_KINDS)
    if "world_size" in df.columns:  # world size 1 moves nothing: on no network
        dep &= ~(pd.to_numeric(df["world_size"], errors="coerce") == 1)
    found = sorted(set(keys[dep]), key=lambda t: tuple(-1 if v is None else v for v in t))
    if network is None:
        if len(found) > 1:
            raise ValueError(f"records from {len(found)} networks: {', '.join(network_label(t) for t in found)}; "
                             "fit one at a time (fit --network rate_gbps=5, or --network native)")
        chosen = found[0] if found else (None, None, None)
    else:
        want = parse_network(network) if isinstance(network, str) else dict(network)
        names = ("rate_gbps", "latency_ms", "workers")
        match = [t for t in found if (not want and all(v is None for v in t)) or
                 (want and all(dict(zip(names, t)).get(k) == v for k, v in want.items()))]
        if len(match) != 1:
            raise ValueError(f"network {network!r} matches {len(match)} of the networks in the records "
                             f"({', '.join(network_label(t) for t in found) or 'none'}); name exactly one")
        chosen = match[0]
    keep = ~dep | (keys == chosen)
    sel = None if all(v is None for v in chosen) else {k: v for k, v in zip(("rate_gbps", "latency_ms", "workers"),
                                                                           chosen) if v is not None}
    return df[keep].reset_index(drop=True), sel


def fit_overhead(records: pd.DataFrame, t_comp: list[TComp], *, stat: str = "ms_median", n_boot: int = 200,
                 seed: int = 0) -> list[Overhead]:
    """The non-backward part of an iteration ``O`` (forward, loss, optimizer step) per (model, batch):
    ``T_ddp(p=1) - T_comp`` (syncSGD DDP records at world size 1), else ``T_fwd_bwd - T_comp`` (``tcomp``
    records; no optimizer step). Interval: the two bootstrap intervals combined (``lo_1 - hi_comp``,
    ``hi_1 - lo_comp``)."""
    df = normalize(records)
    rng = np.random.default_rng(seed)
    ddp = df[df["kind"] == "ddp"]
    one = ddp[pd.to_numeric(ddp.get("world_size"), errors="coerce") == 1] if len(ddp) else ddp
    if len(one) and "bucket_mb" in one.columns:
        one = one[one["bucket_mb"].isna()]
    fwd_bwd = _tcomp_records(df, "fwd_bwd")
    for sub, label in ((one, "DDP world size 1"), (fwd_bwd, "tcomp fwd_bwd")):
        if len(sub):
            _times_s(sub, stat, f"the overhead O ({label} records)")
    out = []
    for tc in t_comp:
        if tc.batch_size is None:
            continue
        sel = lambda d: d[(d["model"] == tc.model) & (d["batch_size"] == tc.batch_size)] if len(d) else d  # noqa: E731
        g, how = sel(one), "ddp world_size 1 - T_comp"
        if g.empty:
            g, how = sel(_tcomp_records(df, "fwd_bwd")), "tcomp fwd_bwd - T_comp (no optimizer step)"
        if g.empty:
            continue
        v, lo, hi, _ = _median_interval(g, stat, n_boot, rng)
        low = None if lo is None or tc.high is None else lo - tc.high
        high = None if hi is None or tc.low is None else hi - tc.low
        out.append(Overhead(value=v - tc.value, unit="s", source=f"{how} ({stat}, {len(g)} record(s))", low=low,
                            high=high, n=len(g), model=tc.model, batch_size=tc.batch_size))
    return out


#: kinds whose constants describe one device, not the network (with DDP records at world size 1, which give the
#: overhead O): what ``fit --compute-from`` reads; ``--network-from`` gives the rest
COMPUTE_KINDS = ("tcomp", "encode_decode", "profile_other", "copy_bw", "buckets")


def compute_side(df: pd.DataFrame) -> pd.Series:
    """Per row of a :func:`normalize`-d records frame: a single-device record (:data:`COMPUTE_KINDS`, or a syncSGD
    DDP record at world size 1)."""
    ws = pd.to_numeric(df["world_size"], errors="coerce") if "world_size" in df.columns else pd.Series(
        np.nan, index=df.index)
    return df["kind"].isin(COMPUTE_KINDS) | ((df["kind"] == "ddp") & (ws == 1))


def check_one_machine(df: pd.DataFrame, allow_mixed: bool = False) -> list[str]:
    """Refuse (ValueError) records of different machines in one fit of the compute constants (``T_comp``,
    ``T_encode_decode``, the overhead O, gamma): the single-device records (:func:`compute_side`) must share one
    ``gpu`` and one ``host``, and the syncSGD DDP records that gamma may come from their ``gpu``. With
    ``allow_mixed`` the same finding is returned as a warning instead."""
    comp = df[compute_side(df)]
    sync = df[(df["kind"] == "ddp") & ~compute_side(df)]
    found = []
    for col_name, frame in (("gpu", pd.concat([comp, sync])), ("host", comp)):
        if col_name not in frame.columns:
            continue
        frame = frame[frame[col_name].notna()]
        by = frame.groupby(frame[col_name].astype(str))
        if by.ngroups > 1:
            files = {v: sorted({_rel(str(x)) for x in g["source"].dropna()}) if "source" in g.columns else []
                     for v, g in by}
            found.append(f"{col_name} " + ", ".join(f"{v!r} ({', '.join(f) or 'records given in memory'})"
                                                    for v, f in files.items()))
    if not found:
        return []
    text = ("compute constants (T_comp, T_encode_decode, overhead O, gamma) from records of different machines: "
            + "; ".join(found))
    if not allow_mixed:
        raise ValueError(text + "; fit one machine at a time, or pass --allow-mixed (allow_mixed=True) to pool them")
    return [text + " (pooled: --allow-mixed)"]


#: a fitted bandwidth this much above the link's rate (nominal, else probed) is warned about: the probe is one
#: 64 MiB all-reduce timed a few times, whose run-to-run spread is a few per cent
BANDWIDTH_TOLERANCE = 0.05
#: a fitted constant is warned about below this R^2 ...
MIN_R2 = 0.9
#: ... or when its interval is wider than this multiple of its value
MAX_INTERVAL_RATIO = 2.0


def _probe_gbps(df: pd.DataFrame, alpha_s: float) -> list[float]:
    """Eq. 1 bandwidths (Gbit/s, :func:`eq1_bandwidth_from_busbw`) of the link's probes among ``df``'s records of
    the network (kinds that :func:`select_network` selects): records of :data:`PROBE_KINDS` (``busbw_gbps``,
    ``nbytes``) and the probe that sweep and DDP records carry (``network.measured_busbw_gbps``,
    ``measured_probe_bytes``)."""
    df = df[df["kind"].isin(_NETWORK_KINDS)]
    found = set()
    if "busbw_gbps" in df.columns:
        for r in df[df["kind"].isin(PROBE_KINDS) & df["busbw_gbps"].notna()].to_dict("records"):
            found.add((float(r["busbw_gbps"]), float(r.get("nbytes") or 64 * MIB), int(r.get("world_size") or 2)))
    if "network" in df.columns:
        for n, p in zip(df["network"], df.get("world_size", pd.Series([2] * len(df), index=df.index))):
            if isinstance(n, dict) and n.get("measured_busbw_gbps") is not None and not _missing(p):
                found.add((float(n["measured_busbw_gbps"]), float(n.get("measured_probe_bytes") or 64 * MIB),
                           max(int(p), 2)))
    out = []
    for busbw, nbytes, p in sorted(found):
        try:
            out.append(eq1_bandwidth_from_busbw(busbw, nbytes, p, alpha_s))
        except ValueError:
            out.append(busbw)
    return out


def bandwidth_warnings(cal: Calibration, records: pd.DataFrame) -> list[str]:
    """A warning when ``cal``'s fitted bandwidth is above the link's rate by more than
    :data:`BANDWIDTH_TOLERANCE`: the nominal rate of its network (``cal.network["rate_gbps"]``, a shaped link)
    where stated, else the probed one (the median probe among ``records``, :func:`_probe_gbps`). A bandwidth
    the link cannot carry makes every communication-bound prediction too fast, and a gamma fitted beside it
    absorbs the difference."""
    if cal.bandwidth_gbps is None:
        return []
    bw = cal.bandwidth_gbps.value
    rate = (cal.network or {}).get("rate_gbps")
    probes = _probe_gbps(records, cal.alpha_s.value if cal.alpha_s is not None else 0.0)
    probe = float(np.median(probes)) if probes else None
    limit = rate if rate is not None else probe
    if limit is None or bw <= limit * (1.0 + BANDWIDTH_TOLERANCE):
        return []
    said = ([f"the link's nominal rate {rate:g} Gbit/s"] if rate is not None else []) + (
        [f"its probed rate {probe:.3g} Gbit/s ({len(probes)} probe(s))"] if probe is not None else [])
    return [f"bandwidth_gbps {bw:.3g} Gbit/s is above {' and '.join(said)}: the all-reduce sweep overstates the "
            "link (a shaped link's token bucket lets small messages through faster than its rate), so "
            "communication-bound predictions will be too fast; predict with --bandwidth-gbps at the link's rate"]


def quality_warnings(cal: Calibration) -> list[str]:
    """A warning per fitted constant of ``cal`` with an R^2 below :data:`MIN_R2` or an interval wider than
    :data:`MAX_INTERVAL_RATIO` times its value (one per list of constants, naming its entries)."""
    def bad(c: Constant) -> str:
        why = []
        if c.r2 is not None and np.isfinite(c.r2) and c.r2 < MIN_R2:
            why.append(f"R^2 {c.r2:.2f} < {MIN_R2:g}")
        if c.low is not None and c.high is not None and c.high - c.low > MAX_INTERVAL_RATIO * abs(c.value):
            why.append(f"interval [{c.low:.3g}, {c.high:.3g}] wider than {MAX_INTERVAL_RATIO:g}x its value "
                       f"{c.value:.3g}")
        return " and ".join(why)

    out = []
    for name in Calibration.SCALARS:
        c = getattr(cal, name)
        if c is not None and bad(c):
            out.append(f"{name} {c.value:.4g} {c.unit}: {bad(c)}; the records determine it poorly")
    for name in Calibration.LISTS:
        entries = getattr(cal, name)
        flagged = [(c, bad(c)) for c in entries if bad(c)]
        if flagged:
            def label(c):
                who = " ".join(str(x) for x in (getattr(c, "compressor", ""), getattr(c, "model", ""))
                               if x)
                bs = getattr(c, "batch_size", None)
                return f"{who}{f' b{bs}' if bs else ''}{f' {c.mode}' if isinstance(c, PathOverhead) else ''}"
            shown = "; ".join(f"{label(c)}: {why}" for c, why in flagged[:3])
            more = f"; and {len(flagged) - 3} more" if len(flagged) > 3 else ""
            out.append(f"{name}: {len(flagged)} of {len(entries)} entries determined poorly ({shown}{more})")
    return out


def fit_calibration(records: pd.DataFrame | str | Path, name: str, *, stat: str = "ms_median", n_boot: int = 200,
                    seed: int = 0, description: str = "", strict: bool = True,
                    network: str | dict | None = None, network_records: pd.DataFrame | str | Path | None = None,
                    allow_mixed: bool = False) -> Calibration:
    """Every constant the records can determine, as a :class:`Calibration`.

    Records from more than one network raise unless ``network`` selects one (:func:`select_network`).
    Kinds with no records are skipped. Kinds with records that cannot determine
    their constant raise (``strict``, the default: a half-usable file should not
    pass silently) or, with ``strict=False``, are left out and their reasons kept
    in ``provenance["not_fitted"]``.

    ``network_records`` (``fit --compute-from records --network-from network_records``): a composed calibration.
    The single-device constants (``T_comp``, ``T_encode_decode``, the overhead O, gamma from bucket stamps) come
    from ``records`` (:func:`compute_side`: one GPU, or a fast fabric), everything else (alpha, BW, incast, and
    gamma and the syncSGD terms from DDP iterations) from ``network_records`` (a sweep on the cluster).

    gamma: from bucket stamps where the records hold them (:func:`fit_gamma_from_stamps`), else from
    compute-bound DDP iterations (:func:`fit_gamma`), else, where every DDP record is communication-bound, 1 with
    a note. Records of different machines are refused (:func:`check_one_machine`) unless ``allow_mixed``.
    ``cal.warnings``: a bandwidth above the link's rate (:func:`bandwidth_warnings`), constants the records
    determine poorly (:func:`quality_warnings`), machines pooled. ``provenance["constants_from"]``: each
    constant's record files.
    """
    def frame(x):
        return load_records(x) if isinstance(x, (str, Path)) else x

    df_all = normalize(frame(records))
    if network_records is not None:
        other = normalize(frame(network_records))
        mine, theirs = compute_side(df_all), ~compute_side(other)
        for side, flag, want, what in ((mine, "records (--compute-from)", df_all, "single-device records (tcomp, "
                                        "profile, buckets, ddp at world size 1)"),
                                       (theirs, "network_records (--network-from)", other, "network records (sweep, "
                                        "probe, ddp at world size >= 2)")):
            if not side.any():
                raise ValueError(f"{flag}: no {what}; have kinds {sorted(map(str, set(want['kind'])))}")
        df_all = pd.concat([df_all[mine], other[theirs]], ignore_index=True)
    df, net = select_network(df_all, network)
    pooled = check_one_machine(df, allow_mixed)
    kinds = set(df["kind"])
    cal = Calibration(name=name, description=description or f"fitted by studykit.perfmodel.fit from {len(df)} records")
    fitted: list[str] = []
    failed: dict[str, str] = {}
    notes: dict[str, str] = {}  # constants the records cannot give, whatever the mode (said, never silent)
    gamma_from = None  # which records gave gamma: "stamps", "ddp", or "ddp_undetermined"

    def attempt(label, fn):
        try:
            return fn()
        except ValueError as exc:
            if strict:
                raise
            failed[label] = str(exc)
            return None

    def alpha_bw():
        ab = fit_alpha_bw(df, stat=stat, n_boot=n_boot, seed=seed)
        cal.alpha_s, cal.bandwidth_gbps = ab.alpha_s, ab.bandwidth_gbps
        fitted.extend(["alpha_s", "bandwidth_gbps"])
        return ab

    if "allreduce" in kinds and attempt("alpha_s, bandwidth_gbps", alpha_bw) is not None:
        if "allgather" in kinds:
            cal.incast_coeff = attempt("incast_coeff", lambda: fit_incast(
                df, cal.alpha_s.value, cal.bandwidth_gbps.value, stat=stat, n_boot=n_boot, seed=seed))
            if cal.incast_coeff is not None:
                fitted.append("incast_coeff")
    if "tcomp" in kinds and not _tcomp_records(df).empty:
        cal.t_comp = attempt("t_comp", lambda: fit_t_comp(df, stat=stat, n_boot=n_boot, seed=seed)) or []
        if cal.t_comp:
            fitted.append("t_comp")
            if "param_shapes" in df.columns:  # models given by a spec: their shapes travel with the calibration
                for m, s in df.loc[df["kind"] == "tcomp", ["model", "param_shapes"]].itertuples(index=False):
                    if isinstance(s, list) and s:
                        cal.models[str(m)] = [list(x) for x in s]
            cal.overhead = fit_overhead(df, cal.t_comp, stat=stat, n_boot=n_boot, seed=seed)
            if cal.overhead:
                fitted.append("overhead")
    if "encode_decode" in kinds:
        cal.t_encode_decode = attempt("t_encode_decode", lambda: fit_encode_decode(
            df, stat=stat, n_boot=n_boot, seed=seed)) or []
        if cal.t_encode_decode:
            fitted.append("t_encode_decode")
    if "buckets" in kinds:
        cal.gamma = attempt("gamma", lambda: fit_gamma_from_stamps(df, stat=stat, n_boot=n_boot, seed=seed))
        if cal.gamma is not None:
            fitted.append("gamma")
            gamma_from = "stamps"
    if "ddp" in kinds and (df[df["kind"] == "ddp"]["world_size"].astype(float) >= 2).any():
        def gamma():
            if cal.alpha_s is None:
                raise ValueError("cannot fit gamma: DDP records need all-reduce records too (for alpha and BW)")
            try:
                return fit_gamma(df, cal.alpha_s.value, cal.bandwidth_gbps.value, t_comp=cal.t_comp or None,
                                 stat=stat, n_boot=n_boot, seed=seed)
            except GammaUndetermined as exc:
                notes["gamma"] = f"not fitted: {str(exc).removeprefix('cannot fit gamma: ')}; gamma = 1 assumed"
                return Constant(1.0, "ratio", "assumed: the records do not determine gamma", note=(
                    "not determined: every DDP record is communication-bound, and no bucket stamps; 1 (the backward "
                    "pass not slowed by the overlap) assumed"))
        if gamma_from is None:
            cal.gamma = attempt("gamma", gamma)
            if cal.gamma is not None:
                gamma_from = "ddp_undetermined" if "gamma" in notes else "ddp"
                if gamma_from == "ddp":
                    fitted.append("gamma")
        elif cal.alpha_s is None:
            notes["gamma_extended"] = "not fitted: the DDP records need all-reduce records too (for alpha and BW)"
        if cal.alpha_s is not None and cal.gamma is not None:
            # the extended model's syncSGD terms, with gamma fitted jointly (what --terms extended uses)
            found, why = fit_sync_calibration(
                df, cal.alpha_s.value, cal.bandwidth_gbps.value, t_comp=cal.t_comp or None,
                incast_coeff=cal.incast_coeff.value if cal.incast_coeff is not None else 0.0, stat=stat,
                n_boot=n_boot, seed=seed)
            for field_name, c in found.items():
                setattr(cal, field_name, c)
                fitted.append(field_name)
            notes.update(why)
    elif "ddp" in kinds and gamma_from is None:
        # DDP records at world size 1 only: they give the overhead O, never gamma (no synchronization)
        notes["gamma"] = ("not fitted: the DDP records are all at world size 1 (they give the non-backward "
                          "overhead O, not gamma); add syncSGD DDP records at world size >= 2")
    compressed = df[(df["kind"] == "ddp_other") & df["mode"].isin(["post", "hook"])] if "mode" in df.columns else df[:0]
    if not compressed.empty:
        if cal.alpha_s is None or not cal.t_comp or not cal.t_encode_decode:
            notes["path_overhead"] = ("not fitted: compressed DDP records need all-reduce, tcomp and profile records "
                                      "too (the prediction they are compared with)")
        else:
            cal.path_overhead = attempt("path_overhead", lambda: fit_path_overheads(df, cal, stat=stat)) or []
            if cal.path_overhead:
                fitted.append("path_overhead")
    if cal.gamma is None and cal.t_comp:
        # a calibration that predicts iterations (it has T_comp) but whose records cannot give gamma: the backward
        # pass is taken as not slowed by the overlap, said in the constant and in the notes, never left unknown
        notes.setdefault("gamma", "not fitted: no bucket stamps (ddp --bucket-times) and no syncSGD DDP records at "
                                  "world size >= 2; gamma = 1 assumed")
        cal.gamma = Constant(1.0, "ratio", "assumed: the records do not determine gamma",
                             note="no bucket stamps or DDP records; 1 (the backward pass not slowed) assumed")
        gamma_from = gamma_from or "assumed"
    cal.network = net
    ws = pd.to_numeric(df.loc[df["kind"].isin(_NETWORK_KINDS), "world_size"], errors="coerce") \
        if "world_size" in df.columns else pd.Series(dtype=float)
    ws = sorted({int(w) for w in ws.dropna() if w >= 2})
    cal.world_size = ws[-1] if ws else None
    if not fitted:
        raise ValueError(f"nothing to fit: records have kinds {sorted(map(str, kinds))}; need one of {list(KINDS)}"
                         + (f"; failures: {failed}" if failed else ""))
    cal.provenance = _provenance(df, stat, n_boot, seed, fitted)
    cal.provenance["constants_from"] = _constants_from(df, cal, gamma_from)
    if network_records is not None:
        cal.provenance["composed"] = ("compute constants (T_comp, T_encode_decode, overhead, gamma from bucket "
                                      "stamps) from --compute-from, network constants (alpha, BW, incast; gamma and "
                                      "the syncSGD terms from DDP iterations) from --network-from")
    if failed or notes:
        cal.provenance["not_fitted"] = {**notes, **failed}
    cal.warnings = pooled + bandwidth_warnings(cal, df) + quality_warnings(cal)
    return cal


def _rel(path: str) -> str:
    """A record file's path relative to the repository where it is inside it."""
    try:
        return str(Path(path).resolve().relative_to(paths.ROOT.resolve()))
    except ValueError:
        return path


def _constants_from(df: pd.DataFrame, cal: Calibration, gamma_from: str | None) -> dict[str, list[str]]:
    """Each constant of ``cal`` -> the files of the records it was fitted from (empty: records given in memory)."""
    kind = df["kind"]
    ws = pd.to_numeric(df["world_size"], errors="coerce") if "world_size" in df.columns else pd.Series(
        np.nan, index=df.index)
    bwd = df.index.isin(_tcomp_records(df).index)
    sync = (kind == "ddp") & (ws >= 2)
    allreduce = kind == "allreduce"
    rows = {"alpha_s": allreduce, "bandwidth_gbps": allreduce, "incast_coeff": allreduce | (kind == "allgather"),
            "t_comp": bwd, "overhead": (kind == "tcomp") | ((kind == "ddp") & (ws == 1)),
            "t_encode_decode": kind == "encode_decode",
            "gamma": ((kind == "buckets") | bwd) if gamma_from == "stamps" else (sync | bwd | allreduce),
            "path_overhead": kind == "ddp_other"}
    for name in SYNC_CONSTANTS:
        rows[name] = sync | bwd | allreduce | (kind == "ddp")
    out = {}
    for name, sel in rows.items():
        got = getattr(cal, name, None)
        if got is None or (isinstance(got, list) and not got):
            continue
        src = df.loc[sel, "source"].dropna() if "source" in df.columns else pd.Series(dtype=object)
        out[name] = sorted({_rel(str(x)) for x in src})
    return out


def _provenance(df: pd.DataFrame, stat: str, n_boot: int, seed: int, fitted: list[str]) -> dict[str, Any]:
    def uniq(c):
        return sorted({str(v) for v in df[c].dropna()}) if c in df.columns else []

    from datetime import datetime, timezone

    return {"records": int(len(df)), "kinds": {str(k): int(v) for k, v in df["kind"].value_counts().items()},
            "sources": sorted({_rel(s) for s in uniq("source")}), "gpu": uniq("gpu"), "host": uniq("host"), "torch": uniq("torch"),
            "nccl": uniq("nccl"), "git_commit": uniq("git_commit"), "record_timestamps": uniq("timestamp")[:1] +
            uniq("timestamp")[-1:], "statistic": stat, "n_boot": n_boot, "seed": seed, "fitted": fitted,
            "fitted_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}


# ================================================================== the extended model's constants
# (ModelOptions.extended; used by studykit.perfmodel.verify and fit_calibration)
GAMMA_MARGIN = 0.05  # a record is compute-bound when (1 + margin) * overlapped comm <= compute


def pool_stat(values, stat: str) -> float:
    """Pool repeated measurements of one configuration: the minimum of ``ms_min``, else the median."""
    v = np.asarray(list(values), dtype=float)
    return float(v.min() if stat == "ms_min" else np.median(v))


def network_of(n) -> tuple:
    """``(rate_gbps, latency_ms, workers)`` of a record's ``network`` field; ``(None, None, None)`` on a
    real network (``network`` null). Records with different tuples are on different networks."""
    if isinstance(n, dict) and n:
        rate = float(n["rate_gbps"]) if n.get("rate_gbps") is not None else None
        lat = float(n["latency_ms"]) if n.get("latency_ms") is not None else None
        return (rate, lat, int(n["workers"]) if n.get("workers") is not None else None)
    return (None, None, None)


def network_label(net: tuple) -> str:
    """``native`` for a real network, else ``rate_gbps=5,workers=2`` (the fields that are set)."""
    if all(v is None for v in net):
        return "native"
    return ",".join(f"{k}={v:g}" for k, v in zip(("rate_gbps", "latency_ms", "workers"), net) if v is not None)


@dataclass
class Network:
    """Communication constants of one network at one world size: Eq. 1 alpha / BW, the all-gather
    incast coefficient, and (unless extrapolated in p) the measured collective table."""

    world_size: int
    rate_gbps: float | None
    alpha_s: float
    bandwidth_gbps: float
    incast_coeff: float
    table: Any  # studykit.perfmodel.collectives.CollectiveTable, or None when extrapolated
    r2: float = float("nan")
    #: the sweep records the constants come from (``sweep p=2 native``; ``sweep p<=2 native`` extrapolated)
    fitted_on: str = ""
    extrapolated: bool = False


def fit_network(sweep: pd.DataFrame, world_size: int, rate_gbps: float | None, stat: str,
                max_p: int | None = None, label: str | None = None) -> Network:
    """Eq. 1 alpha/BW (:func:`fit_alpha_bw`), the incast coefficient (:func:`fit_incast`) and the measured
    collective table of one network's ``sweep`` records (a ``rate_gbps`` column selects the network).

    ``max_p``: when ``world_size > max_p`` the constants are fitted on the network's sweep at world
    sizes ``2..max_p`` only and no table is kept (Eq. 1 / App. B extrapolate in p)."""
    label = label or ("native" if rate_gbps is None else (f"{rate_gbps:g}Gbps" if rate_gbps > 0 else "unshaped"))
    s = sweep[sweep["rate_gbps"].isna()] if rate_gbps is None else sweep[sweep["rate_gbps"] == rate_gbps]
    extrapolated = max_p is not None and world_size > max_p
    if extrapolated:
        s = s[(s["world_size"] >= 2) & (s["world_size"] <= max_p)]
        fitted_on = f"sweep p<={max_p} {label}"
    else:
        s = s[s["world_size"] == world_size]
        fitted_on = f"sweep p={world_size} {label}"
    if s.empty:
        raise ValueError(f"no sweep records at world size {world_size if not extrapolated else f'<= {max_p}'}, "
                         f"network {label}")
    ab = fit_alpha_bw(s, stat=stat, n_boot=0)
    try:
        inc = fit_incast(s, ab.alpha_s.value, ab.bandwidth_gbps.value, stat=stat, n_boot=0).value
    except ValueError:
        inc = 0.0
    table = None
    if not extrapolated:
        sizes, times = {}, {}
        for op, g in s.groupby("op"):
            g = g.groupby("size_bytes")[stat].agg(lambda v: pool_stat(v, stat)).sort_index()
            sizes[op], times[op] = g.index.to_numpy(float), g.to_numpy(float) / 1e3
        table = col.CollectiveTable(int(world_size), sizes, times, fitted_on)
    return Network(int(world_size), rate_gbps, ab.alpha_s.value, ab.bandwidth_gbps.value, inc, table,
                   r2=ab.alpha_s.r2 or float("nan"), fitted_on=fitted_on, extrapolated=extrapolated)


#: where :class:`RecordInputs` takes a network's constants from (``network_from``)
NETWORK_SOURCES = ("sweep", "probe", "auto")


def eq1_bandwidth_from_busbw(busbw_gbps: float, nbytes: float, world_size: int, alpha_s: float) -> float:
    """Eq. 1's BW (Gbit/s) from one all-reduce's bus bandwidth (nccl-tests convention,
    ``busbw = 2 (p-1)/p * nbytes / T``): ``T = 2 (p-1)/p * nbytes / busbw``, and Eq. 1
    ``T = 2 alpha (p-1) + 2 nbytes (p-1) / (p BW)`` solved for BW. With ``alpha = 0`` it is ``busbw``."""
    p = float(world_size)
    f = 2.0 * (p - 1.0) / p
    t = f * float(nbytes) / col.gbps_to_bytes_s(busbw_gbps)
    rest = t - 2.0 * (p - 1.0) * float(alpha_s)
    if rest <= 0:
        raise ValueError(f"probe of {nbytes:g} bytes at {busbw_gbps:g} Gbit/s is faster than Eq. 1's latency "
                         f"alone (alpha={alpha_s:g} s); cannot derive BW")
    return float(col.bytes_s_to_gbps(f * float(nbytes) / rest))


def fit_network_from_probe(sweep: pd.DataFrame, world_size: int, rate_gbps: float | None, busbw_gbps: float,
                           probe_bytes: float, stat: str, label: str | None = None) -> Network:
    """A network's constants when its bandwidth is known from one large all-reduce (a throttle
    probe, the record's ``network.measured_busbw_gbps``) rather than a full sweep (beyond the paper;
    App. C measures BW with iperf3, which is the same idea):

    * BW: :func:`eq1_bandwidth_from_busbw` of the probe;
    * alpha and the all-gather incast coefficient: the median of :func:`fit_network` over the sweeps of
      the same world size at the *other* rates of the same machine (the rate's own sweep, if any, is not
      read: leave-one-rate-out), or over every sweep of that world size on a real network;
    * no measured table: Eq. 1 / App. B price every collective.

    Why not the sweep's own Eq. 1 fit: on a ``tc tbf`` link the token bucket's burst lets messages
    below a few MB through faster than the rate, and the fit's relative weights follow those small
    messages (1 Gbit/s link: BW fitted 1.18 Gbit/s; a 64 MiB all-reduce runs at 0.98)."""
    label = label or ("native" if rate_gbps is None else f"{rate_gbps:g}Gbps")
    s = sweep[sweep["world_size"] == world_size]
    rates = sorted({None if _isnan(r) else float(r) for r in s["rate_gbps"]}, key=lambda r: -1 if r is None else r)
    others = [r for r in rates if r != rate_gbps] or rates
    fits = []
    for r in others:
        try:
            fits.append(fit_network(sweep, world_size, r, stat))
        except ValueError:
            continue
    if not fits:
        raise ValueError(f"no sweep records at world size {world_size} on this machine to fit alpha "
                         f"(network {label} has a probe only)")
    alpha = float(np.median([f.alpha_s for f in fits]))
    inc = float(np.median([f.incast_coeff for f in fits]))
    bw = eq1_bandwidth_from_busbw(busbw_gbps, probe_bytes, world_size, alpha)
    used = ",".join("native" if f.rate_gbps is None else f"{f.rate_gbps:g}" for f in fits)
    fitted_on = f"probe {busbw_gbps:.4g}Gbps {label}; alpha, incast: sweep p={world_size} at {used}"
    return Network(int(world_size), rate_gbps, alpha, bw, inc, None, fitted_on=fitted_on)


def _isnan(x) -> bool:
    return x is None or (isinstance(x, float) and np.isnan(x))


def _workers(n) -> int | None:
    return int(n["workers"]) if isinstance(n, dict) and n.get("workers") is not None else None


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _mb(bucket_mb) -> float | None:
    """A bucket size in MB as a key: None for DDP's default (missing / NaN)."""
    return None if _missing(bucket_mb) else float(bucket_mb)


def _rate_key(rate) -> float | None:
    """A link rate (Gbit/s) as a key: None for a real network (missing / NaN)."""
    return None if _missing(rate) else float(rate)


class RecordInputs:
    """The single-device constants of one platform's records, per configuration: ``T_comp`` (alone, and
    contended), the non-backward overhead ``O``, the CPU slowdown ``kappa``, ``T_encode_decode`` and the
    :class:`Network` of each (world size, rate). Repeats are pooled by :func:`pool_stat`.

    * ``O`` = ``T_ddp(p=1) - T_comp`` (the DDP record of the same model and batch at world size 1), else
      ``T_fwd_bwd - T_comp`` (``tcomp`` records; no optimizer step), else 0;
    * CPU contention: ``tcomp`` records timed inside a throttled cluster (``network.workers`` = w, every
      worker timing at once) give the contended ``T_comp`` of a w-worker run and ``kappa_w`` = contended /
      alone (median over models and batches), which the model applies to ``O`` and ``T_encode_decode``;
    * ``max_p``: networks above it are fitted on world sizes ``<= max_p`` (:func:`fit_network`) and
      contended ``tcomp`` records of more than ``max_p`` workers are ignored (``kappa`` = 1 there);
    * ``network_from`` (:data:`NETWORK_SOURCES`): ``"sweep"`` fits each network on its own sweep
      (:func:`fit_network`); ``"probe"`` takes BW from the record's probe (``network.measured_busbw_gbps``)
      and alpha / incast from the sweeps at the other rates (:func:`fit_network_from_probe`);
      ``"auto"``: the sweep where the network has one, the probe elsewhere.

    ``tcomp``, ``ddp``, ``sweep``, ``profile``: the platform's records of each kind (DataFrames with
    ``rate_gbps`` and ``params_key`` columns, as :func:`studykit.perfmodel.verify.load_platform` builds)."""

    def __init__(self, tcomp: pd.DataFrame, ddp: pd.DataFrame, sweep: pd.DataFrame, profile: pd.DataFrame,
                 stat: str, max_p: int | None = None, network_from: str = "sweep",
                 buckets: pd.DataFrame | None = None, host_ahead: bool = False, bucket_times: bool = False):
        if network_from not in NETWORK_SOURCES:
            raise ValueError(f"network_from must be one of {NETWORK_SOURCES}, got {network_from!r}")
        self.stat, self.max_p, self.sweep, self.network_from = stat, max_p, sweep, network_from
        #: encode/decode from the host-ahead profile phases (``profile --host-ahead``) where they exist
        self.host_ahead = bool(host_ahead)
        #: (model, batch, bucket_mb or None, world_size) -> [(rate, ready fractions), ...] of ``buckets`` records
        self.ready: dict = {}
        #: (model, batch, world_size) -> [(rate, host ready ms), ...] of ``buckets`` records on DDP's default buckets
        self.ready_host_ms: dict = {}
        #: (model, batch, bucket_mb or None, world_size, rate) -> [last bucket's device ready time, ms] of ``buckets``
        #: records: the backward pass's compute under syncSGD's overlap (:meth:`measured_gamma`)
        self.backward_end_ms: dict = {}
        #: per-bucket encode/decode for hooks (``verify --encode-decode-from buckets``; :meth:`bucket_costs`)
        self.bucket_times = bool(bucket_times)
        if buckets is not None and not buckets.empty:
            for r in buckets.to_dict("records"):
                fr = r.get("ready_fraction")
                if isinstance(fr, (list, tuple)) and fr:
                    self.ready.setdefault((r["model"], int(r["batch_size"]), _mb(r.get("bucket_mb")),
                                           int(r["world_size"])), []).append(
                        (r.get("rate_gbps"), tuple(float(x) for x in fr)))
                rm = r.get("ready_ms")
                if isinstance(rm, (list, tuple)) and rm and r.get("clock") == "cuda_event":
                    self.backward_end_ms.setdefault((r["model"], int(r["batch_size"]), _mb(r.get("bucket_mb")),
                                                     int(r["world_size"]), _rate_key(r.get("rate_gbps"))), []).append(
                        float(rm[-1]))
                hr = r.get("ready_host_ms")
                if isinstance(hr, (list, tuple)) and hr and _missing(r.get("bucket_mb")):
                    self.ready_host_ms.setdefault((r["model"], int(r["batch_size"]), int(r["world_size"])), []).append(
                        (r.get("rate_gbps"), tuple(float(x) for x in hr)))
        st = stat
        t = tcomp.assign(_w=tcomp["network"].map(_workers))
        if max_p is not None:
            t = t[t["_w"].isna() | (t["_w"] <= max_p)]
        alone = t[t["_w"].isna()]
        self.t_comp = {(m, int(b)): pool_stat(g[st], st) / 1e3
                       for (m, b), g in alone[alone["phase"] == "bwd"].groupby(["model", "batch_size"])}
        self.t_fb = {(m, int(b)): pool_stat(g[st], st) / 1e3
                     for (m, b), g in alone[alone["phase"] == "fwd_bwd"].groupby(["model", "batch_size"])}
        cont = t[t["_w"].notna() & (t["phase"] == "bwd")]
        self.t_comp_w = {(m, int(b), int(w)): pool_stat(g[st], st) / 1e3
                         for (m, b, w), g in cont.groupby(["model", "batch_size", "_w"])}
        ratios: dict = {}
        for (m, b, w), v in self.t_comp_w.items():
            if (m, b) in self.t_comp:
                ratios.setdefault(w, []).append(v / self.t_comp[(m, b)])
        self.kappa_w = {w: float(np.median(r)) for w, r in ratios.items()}
        one = ddp[(ddp["world_size"] == 1) & (ddp["mode"] == "syncsgd") & ddp["bucket_mb"].isna()]
        self.t_ws1 = {(m, int(b)): pool_stat(g[st], st) / 1e3 for (m, b), g in one.groupby(["model", "batch_size"])}
        self.profile = profile[profile["phase"].isin(["reduce", "reduce_buckets", "reduce_host_ahead",
                                                      "reduce_buckets_host_ahead"]) | profile["phase"].isna()]
        self._nets: dict = {}

    def kappa(self, p: int) -> float:
        """CPU slowdown of a ``p``-worker run (1 without contended ``tcomp`` records)."""
        return self.kappa_w.get(int(p), 1.0)

    def tcomp(self, model: str, bs: int, p: int, contended: bool = False) -> tuple[float, str]:
        if contended and (model, bs, p) in self.t_comp_w:
            return self.t_comp_w[(model, bs, p)], f"T_comp tcomp bwd with {p} workers timing at once"
        if (model, bs) not in self.t_comp:
            raise KeyError(f"no tcomp bwd record for {model} batch {bs}")
        return self.t_comp[(model, bs)], "T_comp tcomp bwd"

    def overhead(self, model: str, bs: int) -> tuple[float, str]:
        """``(O_s, how)`` alone (the model multiplies by kappa under contention)."""
        key = (model, bs)
        if key not in self.t_comp:
            raise KeyError(f"no tcomp bwd record for {model} batch {bs}")
        if key in self.t_ws1:
            return self.t_ws1[key] - self.t_comp[key], "O = ddp(p=1) - T_comp"
        if key in self.t_fb:
            return self.t_fb[key] - self.t_comp[key], "O = tcomp fwd_bwd - bwd (no optimizer step)"
        return 0.0, "O = 0 (no world-size-1 or fwd_bwd record)"

    def encode_decode(self, model: str, compressor: str, pkey: str, p: int,
                      phase: str = "reduce") -> tuple[float, str]:
        """``(T_encode_decode_s, how)`` alone, from ``profile`` records of ``phase`` at the nearest simulated
        world size: ``reduce`` (the whole gradient, every round, as after the backward pass) or
        ``reduce_buckets`` (bucket by bucket as a DDP hook calls it; ``profile --ddp-buckets``). Records of
        the split phases (``encode``, ``decode``) are never pooled in.

        With ``host_ahead`` (``verify --encode-decode-from host_ahead``) the same phase timed with the host
        ahead of the GPU (``<phase>_host_ahead``, ``profile --host-ahead``: device time without launch gaps,
        as in an iteration, where the backward pass keeps the host ahead) is taken first, then ``phase`` as
        profiled (where the host could not get ahead, e.g. a codec that queues more kernels than CUDA's launch
        queue holds, the time with launch gaps is what the iteration pays), then the whole gradient's
        host-ahead time (``reduce_host_ahead``), then the whole gradient as profiled."""
        if self.host_ahead:
            for ph in dict.fromkeys((phase + "_host_ahead", phase, "reduce_host_ahead")):
                try:
                    t, how = self._encode_decode(model, compressor, pkey, p, ph)
                    return t, how + ("" if ph.endswith("_host_ahead") else " (no host-ahead record)")
                except KeyError:
                    pass
            t, how = self._encode_decode(model, compressor, pkey, p, "reduce")
            return t, how + " (no host-ahead record)"
        return self._encode_decode(model, compressor, pkey, p, phase)

    def _encode_decode(self, model: str, compressor: str, pkey: str, p: int, phase: str) -> tuple[float, str]:
        prof = self.profile
        ph = prof["phase"].fillna("reduce") if "phase" in prof.columns else pd.Series("reduce", index=prof.index)
        g = prof[(prof["model"] == model) & (prof["compressor"] == compressor) & (prof["params_key"] == pkey)
                 & (ph == phase)]
        if g.empty:
            raise KeyError(f"no profile record ({phase}) for {compressor} {pkey} on {model}")
        sws = g["sim_world_size"].fillna(1).astype(int)
        exact = g[sws == p]
        st = self.stat
        if not exact.empty:
            return pool_stat(exact[st], st) / 1e3, f"profile {phase} sim_world_size={p}"
        near = int(sws.iloc[(sws - p).abs().argsort().iloc[0]])
        return pool_stat(g[sws == near][st], st) / 1e3, f"profile {phase} sim_world_size={near} (run has p={p})"

    def ready_fractions(self, model: str, batch_size: int, bucket_mb, world_size: int, rate) -> tuple[tuple | None, str]:
        """When each DDP bucket is ready, as a fraction of the backward pass (``buckets`` records of the same model,
        batch, bucket size and world size): the element-wise median over the records at the *other* rates (never
        the scored run's own record), with how it was got; ``(None, "")`` without such records or when they
        disagree on the number of buckets (the model then assumes the bytes: ``bucket_ready_fractions``)."""
        rows = [fr for x, fr in self.ready.get((model, int(batch_size), _mb(bucket_mb), int(world_size)), [])
                if _missing(rate) or _missing(x) or float(x) != float(rate)]
        if not rows or len({len(fr) for fr in rows}) != 1:
            return None, ""
        med = tuple(float(v) for v in np.median(np.asarray(rows, dtype=float), axis=0))
        return med, f"; bucket ready times measured ({len(rows)} buckets records at other rates)"

    def measured_gamma(self, model: str, batch_size: int, bucket_mb, world_size: int, rate) -> float | None:
        """gamma as the paper measures it (Agarwal et al. 2022, https://arxiv.org/abs/2103.00543, Sec. 4.1 and
        App. C: the backward pass's compute under overlap with communication over ``T_comp`` alone): the last DDP
        bucket's device ready time of the ``buckets`` records of this configuration and rate (median), over the
        ``tcomp`` backward time; None without such records."""
        v = self.backward_end_ms.get((model, int(batch_size), _mb(bucket_mb), int(world_size), _rate_key(rate)))
        if not v or (model, int(batch_size)) not in self.t_comp:
            return None
        return float(np.median(v)) / 1e3 / self.t_comp[(model, int(batch_size))]

    def ready_host(self, model: str, batch_size: int, world_size: int, rate) -> tuple[tuple | None, str]:
        """When the host reaches each DDP bucket's hook (s from the call of ``loss.backward()``, host clock;
        DDP's default buckets): the element-wise median of the ``buckets`` records' ``ready_host_ms`` at the
        *other* rates, as :meth:`ready_fractions`; ``(None, "")`` without such records."""
        rows = [hr for x, hr in self.ready_host_ms.get((model, int(batch_size), int(world_size)), [])
                if _missing(rate) or _missing(x) or float(x) != float(rate)]
        if not rows or len({len(hr) for hr in rows}) != 1:
            return None, ""
        med = tuple(float(v) / 1e3 for v in np.median(np.asarray(rows, dtype=float), axis=0))
        return med, f"; host ready times measured ({len(rows)} buckets records at other rates)"

    def bucket_costs(self, model: str, compressor: str, pkey: str) -> tuple[tuple, tuple, str]:
        """``(device_s, host_s, how)``: per DDP bucket (communication order) the protocol's device time with the
        host ahead and its host time, element-wise medians over the ``reduce_buckets`` profile records that
        hold them (``profile --ddp-buckets --bucket-times``). KeyError where none does, or where a bucket's
        device time could not be taken (``bucket_device_error``)."""
        prof = self.profile
        if "bucket_device_ms" not in prof.columns or "bucket_host_ms" not in prof.columns:
            raise KeyError("no profile record with per-bucket times (profile --bucket-times)")
        ph = prof["phase"].fillna("reduce") if "phase" in prof.columns else pd.Series("reduce", index=prof.index)
        g = prof[(prof["model"] == model) & (prof["compressor"] == compressor) & (prof["params_key"] == pkey)
                 & (ph == "reduce_buckets")]
        rows = [(d, h) for d, h in zip(g["bucket_device_ms"], g["bucket_host_ms"])
                if isinstance(d, (list, tuple)) and isinstance(h, (list, tuple)) and d and len(d) == len(h)]
        if not rows or len({len(d) for d, _ in rows}) != 1:
            raise KeyError(f"no per-bucket times for {compressor} {pkey} on {model}")
        dev = tuple(float(v) / 1e3 for v in np.median(np.asarray([d for d, _ in rows], dtype=float), axis=0))
        host = tuple(float(v) / 1e3 for v in np.median(np.asarray([h for _, h in rows], dtype=float), axis=0))
        return dev, host, f"profile --bucket-times: {len(dev)} buckets, device {sum(dev) * 1e3:.2f} ms, " \
                          f"host {sum(host) * 1e3:.2f} ms ({len(rows)} record{'s' if len(rows) > 1 else ''})"

    def network(self, p: int, rate, probe_gbps: float | None = None, probe_bytes: float | None = None) -> Network:
        """The :class:`Network` of world size ``p`` at link ``rate`` (None: a real network); ``probe_gbps``
        / ``probe_bytes``: the record's probe (used as ``network_from`` says)."""
        rate = None if _isnan(rate) else float(rate)
        probe = None if _isnan(probe_gbps) else float(probe_gbps)
        src = self.network_from
        if src == "auto":
            own = self.sweep[(self.sweep["world_size"] == p) & ((self.sweep["rate_gbps"].isna()) if rate is None
                                                                else (self.sweep["rate_gbps"] == rate))]
            src = "sweep" if len(own) or probe is None else "probe"
        if src == "probe" and not (self.max_p is not None and p > self.max_p):
            if probe is None:
                raise ValueError(f"no probe bandwidth for network {rate}Gbps at world size {p} "
                                 "(records lack network.measured_busbw_gbps)")
            key = (p, rate, probe, probe_bytes)
            if key not in self._nets:
                self._nets[key] = fit_network_from_probe(self.sweep, p, rate, probe,
                                                         float(probe_bytes or 64 * MIB), self.stat)
            return self._nets[key]
        key = (p, rate)
        if key not in self._nets:
            self._nets[key] = fit_network(self.sweep, p, rate, self.stat, max_p=self.max_p)
        return self._nets[key]


@dataclass
class SyncTerms:
    """gamma and the extended syncSGD terms (s), with how they were fitted."""

    gamma: float
    delta_s: float = 0.0
    per_bucket_s: float = 0.0
    per_tensor_s: float = 0.0
    how: str = ""
    fitted: tuple = ()  # which of "gamma", "delta", "per_bucket", "per_tensor" the records determined
    n_used: int = 0  # compute-bound records behind them


#: the per-tensor term is fitted only when the calibration records hold at least this many tensor counts
#: (with two, it is a per-model offset that a model holdout cannot test)
PER_TENSOR_MIN_COUNTS = 3


def fit_sync_terms(rows: Sequence[dict], n_train: int | None = None, *, extended: bool = False,
                   per_tensor: bool = False, margin: float | None = None,
                   comm_fraction: float | None = None) -> SyncTerms:
    """gamma (Sec. 4.1) and, ``extended``, the synchronization terms from syncSGD iterations.

    Each row is one DDP record: ``s`` (measured iteration minus ``O``, s), ``t_comp`` (s),
    ``overlapped_comm`` and ``last_comm`` (s; the model's with gamma 1 and no extra term), ``k``
    (buckets) and ``n_tensors``. Only compute-bound rows count
    (``(1 + margin) overlapped_comm <= s - last_comm``; with ``comm_fraction`` also
    ``overlapped_comm + last_comm <= comm_fraction * t_comp``, which the communication model's own error
    cannot satisfy the way it satisfies the first: :data:`COMPUTE_BOUND_COMM_FRACTION`).

    * paper (App. C's rule): ``gamma = median((s - last_comm) / t_comp)``;
    * ``extended``: least squares (relative errors, non-negative coefficients) of
      ``s - last_comm = gamma t_comp + delta + c_b (k - 1) [+ c_t n_tensors]``. ``delta`` is fitted when
      the backward times are at least 1.5x apart, ``c_b`` when there are two bucket counts, ``c_t``
      (``per_tensor``) when there are :data:`PER_TENSOR_MIN_COUNTS` tensor counts. Backward times less
      than 1.5x apart cannot tell gamma from delta: gamma stays 1 and ``delta`` (and ``c_b``) are fitted to
      ``s - last_comm - t_comp`` (a constant extrapolates as a constant, not as a multiple of the backward).

    gamma = 1 when no row is compute-bound."""
    from scipy.optimize import nnls as _nnls

    n_train = len(rows) if n_train is None else n_train
    m = GAMMA_MARGIN if margin is None else margin
    cb = [r for r in rows if (1.0 + m) * r["overlapped_comm"] <= r["s"] - r["last_comm"]
          and (comm_fraction is None or r["overlapped_comm"] + r["last_comm"] <= comm_fraction * r["t_comp"])]
    if not cb:
        return SyncTerms(1.0, how="gamma=1 (no compute-bound calibration record)")
    x = np.asarray([r["t_comp"] for r in cb])
    y = np.asarray([r["s"] - r["last_comm"] for r in cb])
    n = len(x)
    if extended and len(x) >= 2 and x.max() >= 1.5 * x.min():
        kk = np.asarray([r["k"] - 1 for r in cb], dtype=float)
        nt = np.asarray([r.get("n_tensors", 0) for r in cb], dtype=float)
        if per_tensor and len(np.unique(nt)) >= PER_TENSOR_MIN_COUNTS:
            cols = [x, np.ones_like(x)] + ([kk] if kk.max() > kk.min() else []) + [nt]
            coef, _ = _nnls(np.column_stack(cols) / y[:, None], np.ones_like(y))
            if coef[0] > 0:
                g, d = coef[0], coef[1]
                e = coef[2] if len(coef) == 4 else 0.0
                t = coef[-1]
                return SyncTerms(float(g), float(d), float(e), float(t), (
                    f"gamma={g:.3f}, delta={d * 1e3:.3f} ms + {e * 1e3:.3f} ms per extra bucket + "
                    f"{t * 1e6:.2f} us per tensor: fit to {len(x)} compute-bound of {n_train}"),
                    ("gamma", "delta") + (("per_bucket",) if len(coef) == 4 else ()) + ("per_tensor",), n)
        if kk.max() > kk.min():
            (g, d, e), _ = _nnls(np.column_stack([x, np.ones_like(x), kk]) / y[:, None], np.ones_like(y))
            if g > 0:
                return SyncTerms(float(g), float(d), float(e), 0.0, (
                    f"gamma={g:.3f}, delta={d * 1e3:.3f} ms + {e * 1e3:.3f} ms per extra bucket: "
                    f"fit to {len(x)} compute-bound of {n_train}"), ("gamma", "delta", "per_bucket"), n)
        (g, d), _ = _nnls(np.column_stack([x, np.ones_like(x)]) / y[:, None], np.ones_like(y))  # relative errors
        if g > 0:
            return SyncTerms(float(g), float(d), 0.0, 0.0, (f"gamma={g:.3f}, delta={d * 1e3:.3f} ms: line through "
                                                            f"{len(x)} compute-bound of {n_train}"), ("gamma", "delta"), n)
    if extended:
        # The backward times span less than 1.5x: a line through them cannot tell gamma from delta. The paper's
        # rule (gamma alone) would turn a per-iteration constant into a multiple of the backward pass and
        # extrapolate it so: on ResNet-50 at batches 8-32 it fitted gamma = 2.0 (Sec. 4.1 reports 1.04-1.1)
        # and missed batch 64 by 54 % (docs/verify.md section 6). Keep gamma at 1 and fit the constants.
        kk = np.asarray([r["k"] - 1 for r in cb], dtype=float)
        cols = [np.ones_like(x)] + ([kk] if kk.max() > kk.min() else [])
        coef, _ = _nnls(np.column_stack(cols) / y[:, None], (y - x) / y)
        d, e = float(coef[0]), (float(coef[1]) if len(coef) > 1 else 0.0)
        per = f" + {e * 1e3:.3f} ms per extra bucket" if len(coef) > 1 else ""
        return SyncTerms(1.0, d, e, 0.0, (f"gamma=1 (backward times less than 1.5x apart: gamma cannot be told from "
                                          f"delta), delta={d * 1e3:.3f} ms{per}: fit to {len(x)} compute-bound of "
                                          f"{n_train}"), ("delta",) + (("per_bucket",) if len(coef) > 1 else ()), n)
    g = float(np.median(y / x))
    return SyncTerms(g, how=f"gamma={g:.3f} from {len(x)} compute-bound of {n_train}", fitted=("gamma",), n_used=n)


#: gamma values tried by :func:`fit_sync_terms_curve` (the Sec. 4.1 range 1.04-1.1 and far beyond it)
GAMMA_GRID = np.round(np.arange(0.80, 3.0001, 0.005), 3)
#: :func:`fit_sync_terms_curve` fits gamma only if some calibration record's ``T_obs`` moves by at least this
#: fraction of its measured time over the whole grid: a syncSGD median moves by 1-2 % from run to run
#: (``data/measurements/bandwidth/README.md``), so a flatter curve leaves gamma to the noise
GAMMA_MIN_SENSITIVITY = 0.02


def fit_sync_terms_curve(rows: Sequence[dict], grid=GAMMA_GRID, n_train: int | None = None, *,
                         extended: bool = False, given: str | None = None) -> SyncTerms:
    """gamma (and, ``extended``, ``delta`` and the per-bucket term) when ``T_obs`` is not linear in gamma
    (``ModelOptions.overlap = "timeline"``: a bucket's ready time scales with ``gamma T_comp``).

    Each row: ``s`` (measured iteration minus ``O``, s), ``curve`` (the model's ``T_obs`` at every gamma
    of ``grid``, no extra term), ``k`` (buckets). Every row counts (communication-bound ones too: through
    the ready times they still depend on gamma). gamma minimizes the sum of squared relative errors;
    ``extended``: at each gamma, ``delta`` and ``c_b (k-1)`` by non-negative least squares of the
    relative residuals (``c_b`` only with two bucket counts).

    gamma stays 1 (and the extra terms are fitted at 1) when no row's ``T_obs`` moves by
    :data:`GAMMA_MIN_SENSITIVITY` of its measured time over the whole grid: every calibration record is
    communication-bound so deeply that the backward pass hides inside its noise (VGG19's 548 MB of
    gradients over 2.5-10 Gbit/s), and the best gamma on the grid is whatever the noise makes it. A
    hook's compressed iteration, compute-bound, would carry that arbitrary gamma in full.

    ``given``: gamma is not fitted but given as ``grid``'s single value (``verify --gamma-from buckets``), the
    text saying where it comes from; only the extra terms are fitted at it."""
    from scipy.optimize import nnls as _nnls

    n_train = len(rows) if n_train is None else n_train
    if not rows:
        return SyncTerms(1.0, how="gamma=1 (no calibration record)")
    grid = np.asarray(grid, dtype=float)
    y = np.asarray([r["s"] for r in rows], dtype=float)
    curves = np.vstack([np.broadcast_to(np.asarray(r["curve"], dtype=float), grid.shape) for r in rows])
    kk = np.asarray([r["k"] - 1.0 for r in rows])
    cols = [np.ones_like(y)] + ([kk] if kk.max() > kk.min() else [])
    best = (np.inf, 1.0, 0.0, 0.0)
    sensitivity = float(np.max((curves.max(axis=1) - curves.min(axis=1)) / y))
    if given is not None and len(grid) != 1:
        raise ValueError(f"a given gamma is one value, got a grid of {len(grid)}")
    identified = given is not None or sensitivity >= GAMMA_MIN_SENSITIVITY or not np.any(grid == 1.0)
    for j, g in enumerate(grid):
        if not identified and g != 1.0:
            continue
        res = y - curves[:, j]
        coef = np.zeros(len(cols))
        if extended:
            coef, _ = _nnls(np.column_stack(cols) / y[:, None], res / y)
        err = float(np.sum(((res - np.column_stack(cols) @ coef) / y) ** 2))
        if err < best[0]:
            best = (err, float(g), float(coef[0]) if extended else 0.0,
                    float(coef[1]) if extended and len(coef) > 1 else 0.0)
    _, g, d, e = best
    edge = " (at the grid's edge)" if identified and g in (grid[0], grid[-1]) else ""
    if given is not None:
        edge = f" {given}"
    if not identified:
        edge = (f" (not identifiable: no calibration record's T_obs moves by {GAMMA_MIN_SENSITIVITY:.0%} over gamma "
                f"{grid[0]:g}-{grid[-1]:g}, at most {sensitivity:.1%})")
    how = f"gamma={g:.3f}{edge}" + (f", delta={d * 1e3:.3f} ms + {e * 1e3:.3f} ms per extra bucket" if extended else "")
    return SyncTerms(g, d, e, 0.0, how + f": per-bucket timeline fitted to {len(rows)} of {n_train}",
                     ("gamma",) if identified and given is None else ())


def fit_path_overheads(records: pd.DataFrame, cal: Calibration, *, stat: str = "ms_median") -> list[PathOverhead]:
    """The compression path's own cost (beyond the paper) per model, batch and mode, for ``cal``: the median
    over that model's compressed DDP records (``post``; ``hook``: the kit's overlapped hook; ``hook_blocking``)
    at world size >= 2 of ``measured - predicted``, predicted as ``predict --calibration --terms extended``
    predicts them (:meth:`ModelOptions.extended`, path overhead off), with the quartiles as interval. Every
    compressor's runs count, the identity ``none`` included: over a slow link a ``none`` run is mostly
    communication, whose error would land in the overhead (``verify --path-overhead-from model`` scores this
    choice leave one rate out). Records whose compressor ``cal`` has no ``T_encode_decode`` for are skipped."""
    from studykit import compressors

    df = records[(records["kind"] == "ddp_other") & records["mode"].isin(["post", "hook"])]
    df = df[pd.to_numeric(df["world_size"], errors="coerce") >= 2]
    if df.empty:
        raise ValueError("cannot fit the path overhead: no compressed DDP record (mode post or hook) at world size >= 2")
    opts = replace(ModelOptions.extended(), path_overhead=False)
    hw = Hardware.from_calibration(cal, opts)
    res: dict[tuple, list[float]] = {}
    skipped: set = set()
    for r in df.to_dict("records"):
        mode = r["mode"] if r["mode"] != "hook" or r.get("hook_overlap") is True else "hook_blocking"
        w = Workload(r["model"], int(r["batch_size"]), bucket_bytes=DEFAULT_BUCKET_BYTES)
        params = normalize_params(r.get("params") if isinstance(r.get("params"), dict) else {})
        try:
            pr = predict(w, hw, int(r["world_size"]), r["compressor"], params, calibration=cal, options=opts, mode=mode)
        except (ValueError, KeyError, compressors.CompressorError) as exc:
            skipped.add(f"{r['compressor']} on {r['model']}: {exc}")
            continue
        res.setdefault((r["model"], int(r["batch_size"]), mode), []).append(
            float(r[stat]) / 1e3 - float(np.asarray(pr.compressed["iteration_s"]).reshape(-1)[0]))
    if not res:
        raise ValueError("cannot fit the path overhead: no compressed DDP record could be predicted ("
                         + "; ".join(sorted(skipped)[:3]) + ")")
    out = []
    for (m, bs, mode), v in sorted(res.items()):
        q1, q3 = np.percentile(v, [25, 75])
        out.append(PathOverhead(value=fit_path_overhead(v), unit="s", low=float(q1), high=float(q3), n=len(v),
                                source=f"median of measured - predicted over {len(v)} compressed '{mode}' DDP "
                                       f"record(s) ({stat}; extended terms, path overhead off)"
                                       + (f"; records of {len(skipped)} compressor/model pair(s) skipped (no "
                                          "prediction, e.g. no T_encode_decode)" if skipped else ""),
                                model=str(m), batch_size=bs, mode=mode))
    return out


def fit_path_overhead(residuals_s: Sequence[float]) -> float:
    """The compression path's overhead (s, beyond the paper): the median of ``measured - predicted`` over
    iterations (copies back into the gradients, Python per bucket, hook futures: what the profile does not
    time). ``verify`` gives it the identity compressor's (``none``) runs by default, whose encode/decode is
    empty; :func:`fit_path_overheads` and ``verify --path-overhead-from model`` every compressed run."""
    if not len(residuals_s):
        raise ValueError("cannot fit the path overhead: no identity-compressor ('none') iteration")
    return float(np.median(np.asarray(residuals_s, dtype=float)))
