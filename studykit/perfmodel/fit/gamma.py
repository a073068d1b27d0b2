"""gamma (Agarwal et al. 2022, https://arxiv.org/abs/2103.00543, Sec. 4.1) from DDP iteration times or DDP's
bucket-ready stamps, and the extended model's syncSGD constants fitted with it."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from studykit.perfmodel.calibration import Constant, TComp
from studykit.perfmodel.fit.compute import _tcomp_records, fit_t_comp
from studykit.perfmodel.fit.inputs import PER_TENSOR_MIN_COUNTS, RecordInputs, SyncTerms, fit_sync_terms
from studykit.perfmodel.fit.network import network_of
from studykit.perfmodel.fit.records import _interval, _need, _of_kind, _r2, _times_s, normalize
from studykit.perfmodel.model import DEFAULT_BUCKET_BYTES, MIB, Hardware, ModelOptions, Workload, predict


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
