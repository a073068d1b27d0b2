"""``profile``: encode/decode time of compressors on a model's real gradient shapes.

Agarwal et al. 2022, Tables 2-3 and App. C: T_encode-decode is the time to compress and
decompress one step's gradients (the paper: 60 iterations, first 10 discarded).
Gradients are random fp32 tensors with the model's parameter shapes on the
device; the timed call is ``compressor.reduce(grads, comm)`` with a world-size-1
communicator (collectives are identities), so it is encode + decode alone.

Each record also carries the memory-bandwidth floor: a codec must at least read
the fp32 gradient once and write its output once (8 bytes per element), which at
the device copy bandwidth measured in the same run (a ``copy_bw`` record) takes
``floor_ms``; ``x_floor = ms_mean / floor_ms``.

Compressors are built with ``allow_nonfinite=True``: the finite check in
``Compressor.check`` costs a pass over the gradients and a host synchronisation,
a cost of the kit's input validation, not of the codec (App. C times the
computation only).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from studykit import compressors as C
from studykit import models as M
from studykit.comm import LocalComm, RecordingComm
from studykit.compressors.base import Compressor, flatten
from studykit.measure.records import RecordWriter, config_id, make_record
from studykit.measure.runtime import CompressorSpec, note, progress
from studykit.measure.timing import Timing, host_clock, host_ms, time_fn

__all__ = ["PAPER_SPECS", "paper_specs", "effective_params", "single_round", "measure_copy_bandwidth",
           "ddp_bucket_grads", "memory_floor_ms", "run_profile"]

#: Tables 2-3 of Agarwal et al. 2022 as (compressor, params): MS-TopK/DGC/TopK/RandomK 1%, MS-TopK 0.1%,
#: SignSGD, QSGD 2-bit (read as levels=1: sign + one magnitude level, values {-1, 0, 1} x norm),
#: TernGrad, PowerSGD rank 4/8/16, ATOMO rank 4. Parameter names follow the kit's
#: compressors; a spec the registry rejects is skipped by :func:`paper_specs`.
PAPER_SPECS: list[tuple[str, dict]] = [
    ("mstopk", {"ratio": 0.01}), ("mstopk", {"ratio": 0.001}), ("dgc", {"ratio": 0.01}),
    ("topk", {"ratio": 0.01}), ("randomk", {"ratio": 0.01}), ("signsgd", {}), ("qsgd", {"levels": 1}),
    ("terngrad", {}), ("powersgd", {"rank": 4}), ("powersgd", {"rank": 8}), ("powersgd", {"rank": 16}),
    ("atomo", {"rank": 4}),
]


def paper_specs() -> list[CompressorSpec]:
    """The :data:`PAPER_SPECS` the registry accepts (names and parameters)."""
    out = []
    for name, params in PAPER_SPECS:
        try:
            C.get(name, **params)
        except (ValueError, TypeError):
            continue
        out.append(CompressorSpec(name, tuple(sorted(params.items()))))
    return out


def effective_params(comp: Compressor) -> dict:
    """The compressor's full parameters (defaults included, seed dropped): records are self-describing."""
    params = dict(comp.params())
    params.pop("seed", None)
    return params


def single_round(comp: Compressor) -> bool:
    """Whether encode and decode can be timed apart: the default one-round protocol, no error feedback."""
    return not comp.error_feedback and type(comp)._reduce is Compressor._reduce


def measure_copy_bandwidth(device, size_bytes: int, **timing_kw) -> tuple[Timing, float]:
    """Time ``dst.copy_(src)`` of ``size_bytes``; returns (timing, GB/s counting bytes read + written)."""
    n = max(1, size_bytes // 4)
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    t = time_fn(lambda: dst.copy_(src), device=device, **timing_kw)
    gbps = 2 * n * 4 / (t.ms_median * 1e-3) / 1e9
    del src, dst
    return t, gbps


def memory_floor_ms(numel: int, copy_gbps: float) -> float:
    """The memory floor of a codec on ``numel`` fp32 elements, ms: one read of the gradient and one
    write of as much again (8 bytes per element) at the device copy bandwidth ``copy_gbps``
    (GB/s counting bytes read + written, :func:`measure_copy_bandwidth`)."""
    if not copy_gbps > 0:
        raise ValueError(f"memory_floor_ms: copy bandwidth must be > 0 GB/s, got {copy_gbps}")
    return 8 * numel / (copy_gbps * 1e9) * 1e3


@dataclass
class _Config:
    model: str
    spec: CompressorSpec
    phase: str
    params: dict
    cid: str


def _plan(comp: Compressor, shapes) -> tuple[Optional[int], Optional[float]]:
    try:
        wire = comp.wire_bytes(shapes, world_size=2)
        return wire, (4 * sum(math.prod(s) for s in shapes)) / wire if wire else None
    except Exception:  # noqa: BLE001 - a compressor without meta-tensor support: bytes unknown
        return None, None


def ddp_bucket_grads(grads: list[torch.Tensor]) -> list[tuple[torch.Tensor, list[torch.Tensor]]]:
    """``grads`` (forward order) laid out as DDP's buckets at its default caps, in communication order:
    per bucket its flat buffer and the per-parameter views into it (what a DDP comm hook gets)."""
    from studykit.compressors.base import views
    from studykit.perfmodel.model import ddp_buckets

    out, rest = [], list(reversed(grads))
    for group in ddp_buckets([tuple(g.shape) for g in grads]):
        mine, rest = rest[:len(group)], rest[len(group):]
        buf = torch.cat([g.reshape(-1) for g in mine])
        out.append((buf, views(buf, [g.shape for g in mine])))
    return out


def bucket_calls(comp: Compressor, grads: list[torch.Tensor], comm) -> list:
    """One function per DDP bucket of ``grads`` (communication order): the protocol on that bucket as the
    kit's DDP hook calls it (the flat bucket for partition-invariant codecs, the per-parameter views and a
    copy back otherwise), each with its own state key."""
    from studykit.compressors.base import copy_back

    def call(i, buf, views):
        if comp.partition_invariant:
            return lambda: comp.reduce(buf, comm, key=i)
        return lambda: copy_back(views, comp.reduce(views, comm, key=i))
    return [call(i, buf, views) for i, (buf, views) in enumerate(ddp_bucket_grads(grads))]


def bucket_times(calls: Sequence, device, reps: int = 10) -> dict:
    """Per bucket (communication order) what a DDP hook's protocol costs the host and the GPU (BEYOND THE
    PAPER; the inputs of the hook model's host chain, :func:`studykit.perfmodel.model.bucket_timeline_s`):

    * ``bucket_host_ms``: the host's time inside each bucket's call, the buckets called back to back
      without a synchronisation between them, the GPU idle at the first (median over ``reps`` rounds):
      Python, dispatch and kernel launches, as the hook's thread spends them. A call that fills CUDA's
      launch queue waits for the GPU there, as it would in the hook.
    * ``bucket_device_ms`` (CUDA only): each bucket's device time with the host ahead of the GPU
      (:func:`studykit.measure.timing.time_fn` ``host_ahead``, median), one bucket at a time: a bucket fits
      the launch queue where a whole iteration's buckets may not (PowerSGD rank 32 with Gram-Schmidt on
      VGG19). ``None`` where a bucket cannot be timed so (a call that waits for the GPU), with the reason
      in ``bucket_device_error``.
    """
    if reps < 1:
        raise ValueError(f"bucket_times: reps must be >= 1, got {reps}")
    device = torch.device(device)
    cuda = device.type == "cuda"
    for call in calls:  # warm-up round (state, caches, a fused path's one-time choice)
        call()
    host = [[] for _ in calls]
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize(device)
        for i, call in enumerate(calls):
            t0 = host_clock()
            call()
            host[i].append(host_ms(t0, host_clock()))
    if cuda:
        torch.cuda.synchronize(device)
    out = {"bucket_host_ms": [statistics.median(h) for h in host], "bucket_reps": reps,
           "bucket_device_ms": None, "bucket_device_error": None}
    if cuda:
        try:
            out["bucket_device_ms"] = [time_fn(call, device=device, host_ahead=True, n_iter=reps, n_warmup=1).ms_median
                                       for call in calls]
        except RuntimeError as exc:  # HostSyncCall or a bucket longer than the launch queue
            out["bucket_device_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def _timed_call(comp: Compressor, phase: str, grads: list[torch.Tensor], sim_world_size: int):
    """The function one timed iteration calls for ``phase``: ``reduce`` (the whole gradient, as after the
    backward pass), ``reduce_buckets`` (bucket by bucket, as the kit's DDP hook calls the protocol: the
    flat bucket for partition-invariant codecs, the per-parameter views and a copy back otherwise),
    ``encode`` or ``decode`` (single-round codecs, on the flattened gradient)."""
    comm = LocalComm() if sim_world_size == 1 else RecordingComm(LocalComm(), world_size=sim_world_size)
    if phase == "reduce":
        return lambda: comp.reduce(grads, comm, key=0)
    if phase == "reduce_buckets":
        calls = bucket_calls(comp, grads, comm)

        def per_bucket():
            for call in calls:
                call()
        per_bucket.calls = calls
        return per_bucket
    flat = flatten(grads)
    if phase == "encode":
        return lambda: comp.compress(flat, sim_world_size)
    payload, ctx = comp.compress(flat, sim_world_size)
    if comp.allreduce_compatible:
        return lambda: comp.decompress(payload, ctx)
    gathered = [payload] * sim_world_size
    return lambda: comp.combine(gathered, ctx)


def run_profile(model_names: Sequence[str], specs: Sequence[CompressorSpec], writer: RecordWriter, *,
                device: torch.device, n_iter: int = 50, n_warmup: int = 10, budget_s: Optional[float] = None,
                min_iter: int = 3, split: bool = True, sim_world_size: int = 1,
                copy_bytes: Optional[int] = None, ddp_buckets: bool = False, host_ahead: bool = False,
                bucket_reps: int = 0, verbose: bool = True) -> int:
    """Profile every (model, compressor spec[, phase]) not yet in ``writer``'s file; returns records written.
    ``ddp_buckets`` adds phase ``reduce_buckets`` (the protocol bucket by bucket, as a DDP hook runs it);
    with ``bucket_reps`` its records also hold each bucket's host and device time (:func:`bucket_times`).

    ``host_ahead`` (CUDA only): time each call's device work with the host ahead of the GPU
    (:func:`studykit.measure.timing.time_fn`), as inside a training iteration, instead of alone with
    every kernel-launch gap; the phases are recorded as ``<phase>_host_ahead`` (``reduce_host_ahead``,
    ...), so the model's inputs, which read ``reduce`` and ``reduce_buckets``, never take them by accident."""
    device = torch.device(device)
    if host_ahead and device.type != "cuda":
        raise ValueError(f"profile --host-ahead needs a CUDA device, got {device}")
    suffix = "_host_ahead" if host_ahead else ""
    done = writer.done()
    timing_kw = dict(n_iter=n_iter, n_warmup=n_warmup, budget_s=budget_s, min_iter=min_iter)
    from studykit.measure.bench.calls import RepPolicy, time_call  # (bench imports this module)

    # the codec timer bench uses: n_iter timed calls (no minimum of seconds), no L2 flush, after two settling
    # calls and max(1, n_warmup) warm-up calls
    policy = RepPolicy(min_reps=n_iter, min_time_s=0.0, budget_s=budget_s, n_warmup=max(1, n_warmup),
                       flush_bytes=0, host_ahead=host_ahead, min_iter=min_iter)
    written = 0

    # -- the device copy bandwidth behind the memory floor (reused from the file on resume)
    copy_bytes = copy_bytes or (256 * 2**20 if device.type == "cuda" else 64 * 2**20)
    cid = config_id(kind="copy_bw", size_bytes=copy_bytes, device_type=device.type)
    copy_gbps = measured_copy_gbps(writer, cid)
    if copy_gbps is None:
        t, copy_gbps = measure_copy_bandwidth(device, copy_bytes, **timing_kw)
        writer.write(make_record("copy_bw", cid, device=device, timing=t, size_bytes=copy_bytes,
                                 copy_GBps=copy_gbps))
        written += 1
    note(f"device copy bandwidth {copy_gbps:.1f} GB/s ({device})", verbose)

    # -- the list of configurations, so the bar knows its length
    configs: list[_Config] = []
    for model in model_names:
        for spec in specs:
            comp = C.get(spec.name, allow_nonfinite=True, **spec.kwargs)
            params = effective_params(comp)
            phases = (["reduce"] + (["reduce_buckets"] if ddp_buckets else [])
                      + (["encode", "decode"] if split and single_round(comp) else []))
            for phase in phases:
                cid = config_id(kind="profile", model=model, compressor=spec.name, params=params, world_size=1,
                                sim_world_size=sim_world_size, phase=phase + suffix, device_type=device.type)
                if cid not in done:  # (a spec equal to another's defaults is measured once)
                    done.add(cid)
                    configs.append(_Config(model, spec, phase, params, cid))
    if not configs:
        note("profile: every configuration is already in the file; nothing to do", verbose)
        return written

    grads, grads_model = None, None
    bar = progress(configs, total=len(configs), desc="profile", enabled=verbose)
    for cfg in bar:
        if grads_model != cfg.model:
            grads = None
            gen = torch.Generator(device=device).manual_seed(0)
            grads = [torch.randn(s, generator=gen, device=device) for s in M.param_shapes(cfg.model)]
            grads_model = cfg.model
            shapes = [tuple(g.shape) for g in grads]
            numel = sum(g.numel() for g in grads)
        comp = C.get(cfg.spec.name, allow_nonfinite=True, **cfg.spec.kwargs)
        wire, ratio = _plan(comp, shapes)
        floor_bytes = 8 * numel
        floor_ms = memory_floor_ms(numel, copy_gbps)
        fields = dict(model=cfg.model, compressor=cfg.spec.name, params=cfg.params, phase=cfg.phase + suffix,
                      sim_world_size=sim_world_size, numel=numel, grad_bytes=4 * numel, wire_bytes=wire,
                      ratio=ratio, allreduce_compatible=bool(comp.allreduce_compatible), floor_bytes=floor_bytes,
                      copy_GBps=copy_gbps, floor_ms=floor_ms)
        fn = None
        try:
            fn = _timed_call(comp, cfg.phase, grads, sim_world_size)
            ct = time_call(fn, device, policy)
            t = ct.timing
            per = (bucket_times(fn.calls, device, reps=bucket_reps)
                   if cfg.phase == "reduce_buckets" and bucket_reps else {})
            rec = make_record("profile", cfg.cid, device=device, timing=t, x_floor=t.ms_mean / floor_ms,
                              host_ahead=host_ahead, timer=ct.timer, host_ms=ct.host_ms, **fields, **per)
        except Exception as exc:  # noqa: BLE001 - one codec failing (OOM, unsupported op) must not stop a sweep
            if device.type == "cuda":
                torch.cuda.empty_cache()
            rec = make_record("profile", cfg.cid, device=device, status="error",
                              reason=f"{type(exc).__name__}: {exc}"[:500], **fields)
        fn = None  # frees the codec's buffers before the next configuration
        writer.write(rec)
        written += 1
        if rec["status"] == "ok":
            note(f"{cfg.model:>10} {str(cfg.spec):<28} {cfg.phase:<7} {rec['ms_mean']:9.3f} ms "
                 f"(x{rec['x_floor']:.1f} floor, n={rec['n_iter']})", verbose)
        else:
            note(f"{cfg.model:>10} {str(cfg.spec):<28} {cfg.phase:<7} ERROR {rec['reason'][:80]}", verbose)
    return written


def measured_copy_gbps(writer: RecordWriter, cid: str) -> Optional[float]:
    """The device copy bandwidth (GB/s) a ``copy_bw`` record of ``writer``'s file holds under ``cid`` (a resumed or
    split run measured it already), or None."""
    from studykit.measure.records import load_records

    prior = [r for r in load_records(writer.path, kind="copy_bw", missing_ok=True, quiet=True)
             if r.get("config_id") == cid and r.get("status") == "ok"]
    return float(prior[-1]["copy_GBps"]) if prior else None
