"""Predicting and scoring DDP records for ``verify``: one record through the model
(:func:`_predict_record`), gamma and the extended terms fitted leave-one-out (:func:`fit_gamma_loo`,
:func:`leave_one_out`), the path overhead (:func:`_extended_compressed`) and a platform's scored rows
(:func:`verify_platform`)."""
from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Callable, Iterable, Sequence

import numpy as np
import pandas as pd

from studykit.perfmodel.fit import RecordInputs, SyncTerms, fit_path_overhead, fit_sync_terms, pool_stat
from studykit.perfmodel.model import DEFAULT_BUCKET_BYTES, Hardware, ModelOptions, Workload, plan_summary, predict
from studykit.perfmodel.verify.platform import Platform, _inputs, _isnull, _label, _net_label, _network

#: columns every predictions CSV has (what a reader needs to check a prediction; there are more)
REQUIRED_COLUMNS = ("config", "predicted_ms", "measured_ms", "rel_error", "calibrated_on")
VARIANTS = ("paper", "extended")
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



def paper_buckets(total_bytes: float, bucket_bytes: float) -> list[float]:
    """Sec. 4.1's bucketing: ``k = ceil(G / b)`` buckets, ``k-1`` of ``b`` bytes and the rest last
    (:func:`studykit.perfmodel.model.paper_bucket_sizes`)."""
    from studykit.perfmodel.model import paper_bucket_sizes

    return paper_bucket_sizes(total_bytes, bucket_bytes)


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



# ------------------------------------------------------------------ one record -> the model's predict
def _kk(k: float) -> str:
    return f" x kappa {k:.2f}" if k != 1.0 else ""


def _predict_record(r, inp: RecordInputs, variant: str, terms: SyncTerms | None = None,
                    path_overhead_s: float = 0.0, opts: ModelOptions | None = None, curve=None,
                    ed_scale: tuple[float, str] = (1.0, ""), timeline: bool = False) -> dict:
    """One DDP record predicted by :func:`studykit.perfmodel.model.predict` with the ``variant`` preset
    (:meth:`ModelOptions.paper` / :meth:`ModelOptions.extended`) and the record's inputs; the row's terms.
    ``timeline``: a hook on the per-bucket timeline also returns each bucket's moments as ``_buckets``
    (:attr:`~studykit.perfmodel.model.Prediction.buckets`)."""
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
    coalesce = r.get("hook_coalesce_mb")
    if coalesce is not None and not pd.isna(coalesce) and r["mode"] == "hook" and opts.overlap == "timeline":
        per_bucket["hook_coalesce_mb"] = float(coalesce)
        how_ed += f"; buckets coalesced to {float(coalesce):g} MB"
    pr = predict(w, hw, p, r["compressor"], _clean_params(r["params"]), t_encode_decode_s=ed, options=opts,
                 mode=r["mode"], bytes_scale=scale, **per_bucket)
    c = {k: float(np.asarray(v)) for k, v in pr.compressed.items()}
    return {**({"_buckets": pr.buckets} if timeline else {}),
            "t_comp_ms": tc * 1e3, "overhead_ms": (o * kappa + pr.notes["path_overhead_s"]) * 1e3,
            "t_obs_ms": c["total_s"] * 1e3, "t_comm_ms": c["comm_s"] * 1e3,
            "t_encode_decode_ms": c["encode_decode_s"] * 1e3, "gamma": float("nan"),
            "k_buckets": int(c.get("k", 1)), "bound": "", "predicted_ms": c["iteration_s"] * 1e3,
            "inputs": f"{how_o}; {how_tc}; {how_ed}; {where} incast={net.incast_coeff:.2f} ({net.fitted_on}"
                      f"{', Eq. 1 / App. B at p=%d' % p if net.extrapolated else ''}){how_wire}{how_ready}"}


def _bucket_costs(inp: RecordInputs, r, w: Workload, ed: float, how_ed: str):
    """A hook record's per-bucket inputs (``verify --encode-decode-from buckets``): each bucket's device and host
    time (:meth:`RecordInputs.bucket_costs`) and when the host reaches each hook (:meth:`RecordInputs.ready_host`),
    as ``(predict kwargs, T_encode_decode, how, workload)``; a hook of the graph runner (``hook_runner`` graph: each
    bucket's protocol replayed as a CUDA graph from DDP's callback) has no host chain, only the device times. Where
    an input is missing or the bucket counts disagree, the record keeps its whole-gradient input
    (``({}, ed, how_ed + why, w)``)."""
    try:
        dev, host, how = inp.bucket_costs(r["model"], r["compressor"], r["params_key"])
    except KeyError as exc:
        return {}, ed, f"{how_ed} (no per-bucket times: {exc.args[0]})", w
    k = len(w.ddp_bucket_shapes())
    if r.get("hook_runner") == "graph":  # replayed from DDP's callback: no host work per bucket to chain
        if len(dev) != k:
            return {}, ed, f"{how_ed} (no per-bucket times: {len(dev)} profiled buckets, {k} DDP buckets)", w
        return {"bucket_encode_decode_s": dev}, float(sum(dev)), f"{how}, graph runner: no host chain", w
    ready, how_ready = inp.ready_host(r["model"], int(r["batch_size"]), int(r["world_size"]), r.get("rate_gbps"))
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


def _bucket_rows(row: dict, buckets: dict, config_id) -> list[dict]:
    """One dict per bucket of a prediction's ``buckets`` moments (seconds) as ms, named by ``row`` and the record's
    ``config_id``."""
    n = len(buckets["ready_s"])
    return [{"platform": row["platform"], "variant": row["variant"], "config": row["config"], "config_id": config_id,
             "bucket": i,
             **{k[:-2] + "_ms": float(np.asarray(v[i])) * 1e3 for k, v in buckets.items()}} for i in range(n)]


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
                    encode_decode_from: str = "profile", path_overhead_from: str = "identity",
                    timelines: list | None = None) -> pd.DataFrame:
    """Every scorable DDP record of ``plat``: one row per (record, variant).

    ``timelines``: a list that gets, for every hook row priced on the per-bucket timeline (``overlap="timeline"``),
    one dict per DDP bucket with the row's ``platform``, ``variant``, ``config`` and record ``config_id``, the ``bucket`` index and that
    bucket's moments in ms since the start of the backward pass (:func:`bucket_timeline_s`'s ``buckets``, each
    ``<moment>_s`` as ``<moment>_ms``).

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
                                            ed_scale_of=scale_of, same_model=path_overhead_from == "model",
                                            timelines=timelines)
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
                         ed_scale_of: Callable | None = None, same_model: bool = False,
                         timelines: list | None = None) -> list[dict]:
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
    slow link its residual is mostly communication error; the compressors' own runs move little. ``timelines``: as
    for :func:`verify_platform`."""
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
                ks = sorted({k for _, k in map(residual, cal_g)})
                said = (f"{mode}: no identity-compressor ('none') record, so the path overhead is one constant per "
                        f"DDP bucket fitted on records of {ks[0]} to {ks[-1]} buckets or groups; that form misses far "
                        f"where hooks differ in their buckets or groups (coalesced or graph hooks: "
                        f"data/verification/hook_runner/README.md); --path-overhead-from model fits one per iteration "
                        f"on the same model's records")
                notes = getattr(plat, "notes", None)  # once per mode: each held-out group has its own range
                if len(ks) > 1 and notes is not None and not any(n.startswith(said[:60]) for n in notes):
                    notes.append(said)
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
        want = timelines is not None and mode == "hook" and opts.overlap == "timeline"
        pr = _predict_record(r, inp, "extended", terms=terms, path_overhead_s=h, opts=opts, ed_scale=scale,
                             **({"timeline": True} if want else {}))
        buckets = pr.pop("_buckets", None)
        if buckets:
            timelines += _bucket_rows(out, buckets, r.get("config_id"))
        out.update(pr)
        out["inputs"] += f"; {how_h}" + (f"; {terms.how}" if terms is not None else "")
        if terms is not None:
            out["gamma"] = terms.gamma
        out["calibrated_on"] = "; ".join(sorted({n["config"] for n in cal} | set(t_cal)))
        out["holdout"] = "identity compressor" + (" at other networks" if multi_net and not by_pool else "")
        rows.append(out)
    return rows

