"""The single-device constants: ``T_comp``, ``T_encode_decode`` and the non-backward overhead ``O``
(Agarwal et al. 2022, https://arxiv.org/abs/2103.00543, App. C)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from studykit.perfmodel.calibration import Overhead, TComp, TEncodeDecode, normalize_params
from studykit.perfmodel.fit.records import _interval, _need, _of_kind, _r2, _times_s, normalize


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
            lo = None if lo is None else max(lo, 0.0)  # a time: resampled intercepts below 0 bound it at 0
            out.append(TEncodeDecode(value=float(coef[0]), unit="s", low=lo, high=hi, r2=_r2(t, A @ coef), n=len(t),
                                     source=f"profile records ({stat}); linear in {wcol}", compressor=str(c),
                                     params=params, model=str(m), per_worker_s=float(coef[1])))
        else:
            v, lo, hi, how = _median_interval(g, stat, n_boot, rng)
            out.append(TEncodeDecode(value=v, unit="s", low=lo, high=hi, n=len(g),
                                     source=f"profile records ({stat}); {how}", compressor=str(c), params=params,
                                     model=str(m)))
    return out


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
