""":func:`predict`, the one entry point every command calls (syncSGD, Sec. 4.1; compressed training, App. B),
its result :class:`Prediction`, and what is derived from it: speed-ups, the ratio needed for near-linear
scaling (Sec. 4.2) and the crossover bandwidth (Fig. 3)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from studykit import compressors
from studykit.perfmodel.calibration import Calibration, normalize_params
from studykit.perfmodel.model.compressed import compressed_plan_s, compressed_s
from studykit.perfmodel.model.costs import allreduce_s
from studykit.perfmodel.model.options import Hardware, ModelOptions
from studykit.perfmodel.model.plans import _per_p, guard_collectives, plan_summary
from studykit.perfmodel.model.syncsgd import syncsgd_s
from studykit.perfmodel.model.timeline import hook_timeline_s
from studykit.perfmodel.model.workload import Workload

__all__ = ["iteration_s", "Prediction", "MODES", "predict", "speedup_over_sync", "required_ratio",
           "crossover_bandwidth_gbps"]


def iteration_s(overhead_s, t_obs_s, hw: Hardware, options: ModelOptions | None = None, path_overhead_s=0.0):
    """The iteration time a user measures (s): ``O [x kappa] + T_obs [+ path overhead]``.

    ``O`` (forward, loss, optimizer step, DDP bookkeeping) is what the paper's ``T_obs`` leaves out
    (Figs. 6-11 time backward + synchronization only). ``kappa = hw.cpu_slowdown`` with
    ``options.cpu_contention``; ``path_overhead_s`` with ``options.path_overhead`` (both beyond the paper).
    """
    opts = options or ModelOptions()
    k = hw.cpu_slowdown if opts.cpu_contention else 1.0
    extra = path_overhead_s if opts.path_overhead else 0.0
    return np.asarray(overhead_s, dtype=float) * k + np.asarray(t_obs_s, dtype=float) + extra


@dataclass
class Prediction:
    """Predicted iteration times (s), arrays broadcast over the inputs' grid.

    ``sync`` and ``compressed`` are dicts of arrays (see :func:`syncsgd_s` and
    :func:`compressed_s`); ``compressed`` is ``None`` without a compressor.
    ``linear_s`` is the ideal (linear scaling) time: ``T_comp`` alone.
    """

    world_size: np.ndarray
    bandwidth_gbps: np.ndarray
    linear_s: np.ndarray
    sync: dict
    compressed: dict | None = None
    compressor: str | None = None
    params: dict = field(default_factory=dict)
    wire_bytes: np.ndarray | None = None
    plans: dict = field(default_factory=dict)  # world_size -> list of collectives (dicts)
    notes: dict = field(default_factory=dict)  # how each input was obtained
    #: ``mode="hook"`` on the timeline: each DDP bucket's moments (s; ``buckets`` of :func:`hook_timeline_s`)
    buckets: dict | None = None

    @property
    def speedup(self):
        """syncSGD time / compressed time (> 1: the compressor is faster)."""
        if self.compressed is None:
            raise ValueError("no compressor in this prediction")
        return self.sync["total_s"] / self.compressed["total_s"]

    def scaling_speedup(self, which: str = "sync"):
        """Speed-up over one GPU under weak scaling: ``p T_comp / T_obs`` (linear = p)."""
        t = (self.sync if which == "sync" else self.compressed)["total_s"]
        return self.world_size * self.linear_s / t

    def to_records(self) -> list[dict]:
        """One dict per grid point (for JSON / DataFrames)."""
        shape = np.broadcast_shapes(self.sync["total_s"].shape,
                                    () if self.compressed is None else self.compressed["total_s"].shape)
        cols = {"world_size": self.world_size, "bandwidth_gbps": self.bandwidth_gbps, "linear_s": self.linear_s}
        cols.update({f"sync_{k}": v for k, v in self.sync.items()})
        if self.compressed is not None:
            cols.update({f"compressed_{k}": v for k, v in self.compressed.items()})
            cols["speedup"] = self.speedup
            cols["wire_bytes"] = self.wire_bytes
        flat = {k: np.broadcast_to(np.asarray(v, dtype=float), shape).ravel() for k, v in cols.items()}
        n = int(np.prod(shape)) if shape else 1
        out = []
        for i in range(n):
            r = {k: float(v[i]) for k, v in flat.items()}
            r["world_size"] = int(r["world_size"])
            out.append(r)
        return out

    def frame(self):
        """The grid as a pandas DataFrame (one row per point)."""
        import pandas as pd

        return pd.DataFrame(self.to_records())


#: how a compressor runs in DDP (:func:`predict`'s ``mode``)
MODES = ("post", "hook", "hook_blocking")


def predict(workload: Workload, hardware: Hardware, world_size, compressor=None, params: dict | None = None, *,
            calibration: Calibration | None = None, t_encode_decode_s=None, bytes_scale=1.0,
            encode_decode_scale=1.0, options: ModelOptions | None = None, mode: str = "post",
            sync_bytes_scale: float = 1.0, bucket_encode_decode_s=None, bucket_host_s=None,
            hook_coalesce_mb: float | None = None) -> Prediction:
    """Predict syncSGD (Sec. 4.1) and, with ``compressor``, compressed training (App. B).

    ``world_size`` and any :class:`Hardware` field may be arrays; the result
    broadcasts them (e.g. ``bandwidth_gbps=bw[:, None]``, ``world_size=p[None, :]``).
    ``compressor`` is a name from :func:`studykit.compressors.available` (with
    ``params``) or an instance; its communication term comes from its ``plan()``.
    ``T_comp`` comes from the workload or the calibration; ``T_encode_decode`` from
    ``t_encode_decode_s`` or the calibration (``"none"`` encodes nothing: 0 s).
    ``bytes_scale`` / ``encode_decode_scale`` multiply the compressor's bytes and
    encode/decode time (App. D trade-off, Fig. 21). ``sync_bytes_scale`` multiplies what syncSGD
    all-reduces, bucket by bucket (0.5: DDP's fp16 / bf16 compress hook, which sends each bucket in
    half precision and keeps the overlap of Sec. 4.1; the casts are not in ``sync``).
    ``bucket_encode_decode_s`` / ``bucket_host_s`` (``mode="hook"`` with the timeline overlap): each DDP
    bucket's device and host time of the protocol (``profile --bucket-times``), for
    :func:`hook_timeline_s`'s per-bucket shares and host chain (the host times, like ``T_encode_decode``, times
    ``hardware.cpu_slowdown`` under ``options.cpu_contention``). ``hook_coalesce_mb`` (``mode="hook"`` with the
    timeline overlap): the hook coalesces buckets (``register(..., coalesce_mb=)``; :func:`hook_timeline_s`).

    ``options`` (default :class:`ModelOptions`: the paper's model plus ``hardware.incast_coeff``)
    chooses the terms; ``mode`` is how the compressor runs (``"post"``: after the backward pass,
    App. B; ``"hook"``: as a DDP communication hook, per bucket with ``options.hook_buckets``, overlapped
    with the backward pass with ``options.overlap == "timeline"``; ``"hook_blocking"``: a hook that runs
    each bucket's protocol inside DDP's callback, so the backward pass waits for it: App. B per DDP
    bucket, ``T_comp + T_encode_decode + sum over buckets of their collectives``, whatever the overlap).
    Every dict of the result holds ``total_s`` (``T_obs``) and ``iteration_s`` (:func:`iteration_s`,
    with the workload's or calibration's non-backward overhead ``O``).
    """
    opts = options or ModelOptions()
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    p = np.asarray(world_size)
    if p.size == 0 or np.any(p != np.round(p)) or np.any(p < 1):
        raise ValueError(f"world_size must be positive integers, got {world_size!r}")
    t_comp, how_comp = workload.resolve_t_comp(calibration)
    overhead, how_o = workload.resolve_overhead(calibration)
    notes = {"t_comp_s": t_comp, "t_comp": how_comp, "overhead_s": overhead, "overhead": how_o}
    if not (np.isfinite(sync_bytes_scale) and sync_bytes_scale > 0):
        raise ValueError(f"sync_bytes_scale must be > 0, got {sync_bytes_scale!r}")
    sb = float(sync_bytes_scale)
    total_bytes = workload.gradient_bytes * sb
    if opts.overlap == "timeline":
        sync = syncsgd_s(t_comp, total_bytes, p, hardware, options=opts, n_tensors=workload.n_tensors,
                         bucket_sizes=[b * sb for b in workload.bucket_sizes(opts.bucketing)],
                         ready_fractions=workload.ready_fractions(opts.bucketing))
    elif opts.collectives == "measured" and hardware.collective_table is not None:
        sync = syncsgd_s(t_comp, total_bytes, p, hardware, options=opts, n_tensors=workload.n_tensors,
                         bucket_sizes=[b * sb for b in workload.bucket_sizes(opts.bucketing)])
    else:
        k, b, last = workload.buckets(opts.bucketing)
        sync = syncsgd_s(t_comp, total_bytes, p, hardware, workload.bucket_bytes, split=(k, b * sb, last * sb),
                         options=opts, n_tensors=workload.n_tensors)
    sync["iteration_s"] = iteration_s(overhead, sync["total_s"], hardware, opts)
    notes["bucketing"] = opts.bucketing
    notes["options"] = {k: getattr(opts, k) for k in opts.__dataclass_fields__}
    bw = np.asarray(hardware.bandwidth_gbps, dtype=float)
    pred = Prediction(world_size=p, bandwidth_gbps=bw, linear_s=np.asarray(t_comp / hardware.compute_speedup),
                      sync=sync, notes=notes)
    if compressor is None:
        return pred
    name = compressor.name if compressors.is_compressor(compressor) else compressor
    eff_params = compressor.params() if compressors.is_compressor(compressor) else dict(params or {})
    ar_n, ar_b, ag_n, ag_b, sums = _per_p(compressor, params, workload, p)
    # T_encode_decode: explicit > calibration > 0 for "none"
    if t_encode_decode_s is not None:
        t_ed = np.asarray(t_encode_decode_s, dtype=float)
        notes["t_encode_decode"] = "given"
    elif name == "none":
        t_ed = np.asarray(0.0)
        notes["t_encode_decode"] = "none encodes nothing"
    else:
        if calibration is None:
            raise ValueError(f"T_encode_decode of {name!r} unknown: pass t_encode_decode_s or a calibration")
        if workload.model is None:
            raise ValueError("T_encode_decode unknown: a Workload given by param_shapes needs t_encode_decode_s")
        base, per_worker, how = calibration.t_encode_decode_s(name, eff_params, workload.model)
        t_ed = base + per_worker * p.astype(float)
        notes["t_encode_decode"] = how
    t_ed = t_ed * encode_decode_scale
    if opts.cpu_contention:
        t_ed = t_ed * hardware.cpu_slowdown
    notes["t_encode_decode_s"] = float(np.max(t_ed))
    if (bucket_encode_decode_s is not None or bucket_host_s is not None) and not (
            mode == "hook" and opts.overlap == "timeline"):
        raise ValueError("bucket_encode_decode_s and bucket_host_s are inputs of the hook timeline: they need "
                         f"mode='hook' and ModelOptions.overlap='timeline', got mode={mode!r}, overlap={opts.overlap!r}")
    if hook_coalesce_mb is not None and not (mode == "hook" and opts.overlap == "timeline"):
        raise ValueError("hook_coalesce_mb prices a coalescing hook on the per-bucket timeline: it needs mode='hook' "
                         f"and ModelOptions.overlap='timeline', got mode={mode!r}, overlap={opts.overlap!r}")
    per_bucket = mode == "hook_blocking" or (mode == "hook" and (opts.hook_buckets or opts.overlap == "timeline"))
    measured = opts.collectives == "measured" and hardware.collective_table is not None
    if mode == "hook" and opts.overlap == "timeline":
        if p.size != 1:
            raise ValueError("the per-bucket timeline needs one world size per call")
        q = int(p.reshape(-1)[0])
        host_s = bucket_host_s
        if host_s is not None and opts.cpu_contention:  # the hook thread's work slows as T_encode_decode does
            host_s = [np.asarray(h, dtype=float) * hardware.cpu_slowdown for h in host_s]
        comp = hook_timeline_s(t_comp, t_ed, workload, compressor, params, q, hardware, opts, bytes_scale,
                               bucket_encode_decode_s, host_s,
                               None if hook_coalesce_mb is None else float(hook_coalesce_mb) * 2**20)
        notes["compressed_plans"] = "per DDP bucket, timeline"
        pred.buckets = comp.pop("buckets")  # lists per bucket: kept apart from the grid of totals
    elif per_bucket or measured:
        if p.size != 1:
            raise ValueError("measured collectives and per-bucket hook plans need one world size per call")
        q = int(p.reshape(-1)[0])
        groups = workload.ddp_bucket_shapes() if per_bucket else [list(workload.shapes())]
        guard = guard_collectives(compressor, opts)
        plans = [plan_summary(compressor, params, g, q).collectives + guard for g in groups]
        comp = compressed_plan_s(t_comp, t_ed, plans, q, hardware, opts, bytes_scale)
        comp["k"] = np.asarray(float(len(groups)))
        notes["compressed_plans"] = "per DDP bucket" if per_bucket else "whole gradient"
    else:
        guard = guard_collectives(compressor, opts)  # its 4 bytes scale with the payload here: a negligible 4 x scale
        comp = compressed_s(t_comp, t_ed, ar_n + len(guard), ar_b + sum(c["nbytes"] for c in guard), ag_n, ag_b, p,
                            hardware, bytes_scale, incast=opts.incast)
    path = workload.path_overhead_s
    if opts.path_overhead and path is None and calibration is not None and workload.model is not None:
        found = calibration.path_overhead_lookup(workload.model, workload.batch_size, mode)
        path = None if found is None else found[0]
        notes["path_overhead"] = "none fitted" if found is None else found[1]
    comp["iteration_s"] = iteration_s(overhead, comp["total_s"], hardware, opts, path or 0.0)
    notes["path_overhead_s"] = float(path or 0.0) if opts.path_overhead else 0.0
    pred.compressed = comp
    pred.compressor = name
    pred.params = normalize_params(eff_params)
    pred.wire_bytes = (ar_b + ag_b) * bytes_scale
    pred.plans = {int(q): list(s.collectives) for q, s in zip(np.unique(p.astype(np.int64)), sums)}
    return pred


def speedup_over_sync(workload: Workload, hardware: Hardware, world_size, compressor, params=None, **kw):
    """syncSGD time / compressed time (array); > 1 means compression pays off."""
    return predict(workload, hardware, world_size, compressor, params, **kw).speedup


def required_ratio(workload: Workload, hardware: Hardware, world_size, *, calibration: Calibration | None = None,
                   slack=0.0, include_last_bucket: bool = False, options: ModelOptions | None = None):
    """Smallest compression ratio for near-linear scaling (Sec. 4.2 Fig. 12, App. D Fig. 18).

    The hypothetical compressor is ideal except for its ratio ``c``: free to encode,
    all-reduce compatible, and applied per DDP bucket, so it keeps syncSGD's overlap
    (every bucket shrinks ``c``-fold). The paper does not define "near linear"; the
    kit's default is the point where the overlapped communication fits under the
    backward pass, i.e. the ``max`` of Sec. 4.1 switches to compute::

        (k-1) T_comm(b / c) <= (1 + slack) gamma T_comp

    leaving only the last bucket's tail exposed. ``include_last_bucket=True`` asks for
    the stricter ``T_obs <= (1 + slack) gamma T_comp`` (the tail counted too). Each
    ``T_comm`` is affine in ``1/c`` (Eq. 1), so ``c`` has a closed form. Returns
    ``c >= 1`` (1: syncSGD already scales) and ``inf`` where latency alone breaks
    the budget. Broadcasts over ``world_size`` and hardware arrays.
    """
    t_comp, _ = workload.resolve_t_comp(calibration)
    t = np.asarray(t_comp, dtype=float) / hardware.compute_speedup
    budget = (1.0 + slack) * hardware.gamma * t
    k, b, last = workload.buckets((options or ModelOptions()).bucketing)
    p = np.asarray(world_size, dtype=float)
    lat = allreduce_s(0.0, p, hardware)  # latency part of one all-reduce
    no_lat = replace(hardware, alpha_s=0.0)
    per_b = allreduce_s(b, p, no_lat)
    per_last = allreduce_s(last, p, no_lat)
    with np.errstate(divide="ignore", invalid="ignore"):
        if include_last_bucket:
            # tail after compute: lat + per_last / c <= slack gamma T; all buckets: k lat + (...)/c <= budget
            room1 = slack * hardware.gamma * t - lat
            c1 = np.where(room1 > 0, per_last / room1, np.inf)
            room2 = budget - k * lat
            c2 = np.where(room2 > 0, ((k - 1.0) * per_b + per_last) / room2, np.inf)
            c = np.maximum(c1, c2)
        else:
            room = budget - (k - 1.0) * lat
            c = np.where(room > 0, (k - 1.0) * per_b / room, np.inf)
            c = np.where(k <= 1, 1.0, c)  # one bucket: nothing to overlap, nothing to hide
    c = np.maximum(c, 1.0)
    return np.where(p <= 1, 1.0, c)


def crossover_bandwidth_gbps(workload: Workload, hardware: Hardware, world_size, compressor, params=None, *,
                             lo_gbps=0.1, hi_gbps=400.0, n=4000, **kw) -> float:
    """Bandwidth (Gbit/s) where the compressor and syncSGD take equal time (Fig. 3, Fig. 19).

    Found on a log grid (one vectorized :func:`predict`) and refined by linear
    interpolation of log time ratio. ``nan`` if they never cross in ``[lo, hi]``;
    the first crossing from below if they cross more than once.
    """
    bw = np.geomspace(lo_gbps, hi_gbps, n)
    pred = predict(workload, replace(hardware, bandwidth_gbps=bw), world_size, compressor, params, **kw)
    r = np.log(np.broadcast_to(pred.speedup, bw.shape))  # > 0: compressor faster
    idx = np.nonzero(np.sign(r[:-1]) != np.sign(r[1:]))[0]
    if len(idx) == 0:
        return float("nan")
    i = idx[0]
    x0, x1 = np.log(bw[i]), np.log(bw[i + 1])
    return float(np.exp(x0 - r[i] * (x1 - x0) / (r[i + 1] - r[i])))
