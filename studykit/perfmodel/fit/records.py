"""Measurement records as the fits read them: one loader, the canonical kinds (:func:`normalize`), and the
checks and statistics every fit shares."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd


KINDS = ("allreduce", "allgather", "ps", "encode_decode", "tcomp", "ddp")
STATS = ("ms_median", "ms_mean", "ms_min", "ms_max")
_SWEEP_OPS = {"all_reduce": "allreduce", "all_gather": "allgather", "ps_gather": "ps", "ps_reduce": "ps"}


def load_frame(*sources: str | Path) -> pd.DataFrame:
    """JSON Lines files (or folders searched for ``*.jsonl`` and ``*.jsonl.gz``) as one DataFrame, read by the
    kit's one reader in one call (:func:`studykit.measure.records.load_records`: damaged lines warned about and
    skipped, schema checked, duplicates kept once across all the files). ``df.attrs["report"]`` is its
    :class:`~studykit.measure.records.LoadReport`; each row's ``source`` is its file."""
    from studykit.measure.records import LoadReport
    from studykit.measure.records import load_records as read

    for s in sources:
        if not Path(s).exists():
            raise FileNotFoundError(f"records file {s} not found")
    report = LoadReport()
    rows = list(read(*sources, report=report))
    if not rows:
        raise ValueError(f"no records in {report.files or list(map(str, sources))} ({report.summary()})")
    df = pd.DataFrame(rows)
    df.attrs["report"] = report
    return df


#: identity fields of DDP variants that no model term prices (A/B runs beside the defaults): a ``ddp`` record
#: with one of them set is left out of every fit and score (:func:`normalize`, :func:`unpriced_ddp`), except the
#: fields of :data:`DDP_BUILD_FIELDS` where every DDP of the records was built alike
UNPRICED_DDP_FIELDS = {
    "hook_coalesce_mb": "a hook that coalesced buckets (priced by the hook timeline's coalesced groups, but only "
                        "scored on request: `verify --score-coalesced`)",
    "broadcast_buffers": "DDP without its buffer broadcast (`ddp --no-broadcast-buffers`) beside DDPs with it",
    "gradient_as_bucket_view": "DDP with its gradients as views into its buckets (`ddp --gradient-as-bucket-view`) "
                               "beside DDPs without",
}
#: how DDP itself was built: where every DDP-built record (every mode but post) has the same value, the records
#: describe one platform's DDP (its syncSGD calibrates gamma and its hooks are priced on it), not an A/B beside
#: the defaults; where the values differ, the records that set the field are left out
DDP_BUILD_FIELDS = ("broadcast_buffers", "gradient_as_bucket_view")


def unpriced_ddp(df: pd.DataFrame, priced: Iterable[str] = ()) -> pd.Series:
    """Per row of a records frame: a ``ddp`` variant of :data:`UNPRICED_DDP_FIELDS` (one of the fields set),
    which fits and scores leave out (the one rule of ``normalize`` and ``verify.load_platform``); fields in
    ``priced`` are not held against a record (``verify --score-coalesced`` prices ``hook_coalesce_mb``), nor
    are the fields of :data:`DDP_BUILD_FIELDS` that every DDP-built ``ddp`` record of ``df`` shares."""
    ddp = df["kind"].astype(str) == "ddp"
    built = ddp & (df["mode"].astype(str) != "post") if "mode" in df.columns else ddp
    out = pd.Series(False, index=df.index)
    for f in set(UNPRICED_DDP_FIELDS) - set(priced):
        if f not in df.columns:
            continue
        if f in DDP_BUILD_FIELDS and df.loc[built, f].map(_value).nunique(dropna=False) <= 1:
            continue  # one platform's DDP, built alike everywhere: priced as it is
        out |= df[f].notna()
    return out & ddp


def _value(x):
    """A field's value as a hashable key (None for NaN, as records read into a frame hold absent fields)."""
    return None if x is None or (isinstance(x, float) and np.isnan(x)) else x


def normalize(records: pd.DataFrame | Iterable[dict]) -> pd.DataFrame:
    """Records with a canonical ``kind`` (one of :data:`KINDS`); failed/skipped records dropped.

    Maps the measurement schema: ``sweep`` + ``op`` -> allreduce / allgather / ps;
    ``profile`` with ``phase`` reduce (or none) -> encode_decode; ``tcomp`` keeps
    ``phase`` (``bwd`` is T_comp, ``fwd_bwd`` the forward+backward time); ``ddp`` with
    ``mode`` syncsgd (or none) -> ddp, other modes -> ddp_other, variants no model term prices
    (:data:`UNPRICED_DDP_FIELDS`: hooks that coalesced buckets, DDPs built unlike the others) -> ddp_unpriced.
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


def pool_stat(values, stat: str) -> float:
    """Pool repeated measurements of one configuration: the minimum of ``ms_min``, else the median."""
    v = np.asarray(list(values), dtype=float)
    return float(v.min() if stat == "ms_min" else np.median(v))


def _isnan(x) -> bool:
    return x is None or (isinstance(x, float) and np.isnan(x))


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))
