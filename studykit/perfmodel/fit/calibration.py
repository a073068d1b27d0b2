"""One :class:`~studykit.perfmodel.calibration.Calibration` from records (:func:`fit_calibration`): every
constant they determine, a composition of compute and network records, warnings and provenance."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from studykit import paths
from studykit.perfmodel.calibration import Calibration, Constant, PathOverhead
from studykit.perfmodel.fit.compute import _tcomp_records, fit_encode_decode, fit_overhead, fit_t_comp
from studykit.perfmodel.fit.gamma import (SYNC_CONSTANTS, GammaUndetermined, fit_gamma, fit_gamma_from_stamps,
                                          fit_sync_calibration)
from studykit.perfmodel.fit.inputs import fit_path_overheads
from studykit.perfmodel.fit.network import _NETWORK_KINDS, _probe_gbps, fit_alpha_bw, fit_incast, select_network
from studykit.perfmodel.fit.records import KINDS, load_frame, normalize


def default_records() -> Path:
    """The records the calibrate notebook fits by default: committed GPU records
    (``data/measurements/gpu/``), else CPU records (``cpu/``), else the synthetic demo."""
    for sub in ("gpu", "cpu"):
        folder = paths.MEASUREMENTS / sub
        if folder.is_dir() and any(folder.rglob("*.jsonl")):
            return folder
    return paths.MEASUREMENTS / "synthetic" / "demo.jsonl"


#: kinds whose constants describe one device, not the network (with DDP records at world size 1, which give the
#: overhead O): what ``fit --compute-from`` reads; ``--network-from`` gives the rest
COMPUTE_KINDS = ("tcomp", "encode_decode", "profile_other", "copy_bw", "buckets")


def compute_side(df: pd.DataFrame) -> pd.Series:
    """Per row of a :func:`normalize`-d records frame: a single-device record (:data:`COMPUTE_KINDS`, or a syncSGD
    DDP record at world size 1)."""
    ws = pd.to_numeric(df["world_size"], errors="coerce") if "world_size" in df.columns else pd.Series(
        np.nan, index=df.index)
    return df["kind"].isin(COMPUTE_KINDS) | ((df["kind"] == "ddp") & (ws == 1))


def check_one_machine(df: pd.DataFrame, allow_mixed: bool = False, composed: bool = False) -> list[str]:
    """Refuse (ValueError) records of different machines in one fit: every record must share one ``gpu`` (as
    ``verify --pool`` refuses folders of two card kinds), and the single-device records (:func:`compute_side`:
    ``T_comp``, ``T_encode_decode``, the overhead O) one ``host``. ``composed`` (``--compute-from`` /
    ``--network-from``): each side shares one ``gpu``, and the syncSGD DDP records that gamma may come from
    that of the single-device records. With ``allow_mixed`` the same finding is returned as a warning instead."""
    side = compute_side(df)
    comp = df[side]
    compute_text = "compute constants (T_comp, T_encode_decode, overhead O, gamma)"
    if composed:
        checks = [(compute_text, "gpu", pd.concat([comp, df[(df["kind"] == "ddp") & ~side]])),
                  ("network constants (alpha, BW, incast, gamma from DDP iterations)", "gpu", df[~side])]
    else:
        checks = [("constants", "gpu", df)]
    checks.append((compute_text, "host", comp))
    found = []
    for what, col_name, frame in checks:
        if col_name not in frame.columns:
            continue
        frame = frame[frame[col_name].notna()]
        by = frame.groupby(frame[col_name].astype(str))
        if by.ngroups > 1:
            files = {v: sorted({_rel(str(x)) for x in g["source"].dropna()}) if "source" in g.columns else []
                     for v, g in by}
            found.append(f"{what} from records of different machines: {col_name} "
                         + ", ".join(f"{v!r} ({', '.join(f) or 'records given in memory'})" for v, f in files.items()))
    if not found:
        return []
    text = "; ".join(found)
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
        return load_frame(x) if isinstance(x, (str, Path)) else x

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
    pooled = check_one_machine(df, allow_mixed, composed=network_records is not None)
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
        notes["gamma"] = notes.get("gamma", "not fitted: no bucket stamps (ddp --bucket-times) and no syncSGD DDP "
                                            "records at world size >= 2") + "; gamma = 1 assumed"
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
