"""``ddp``: DDP iteration time (forward + backward + optimizer step) under torchrun.

Agarwal et al. 2022, Sec. 3.1 / App. A compare compression overlapped with the backward pass
(a DDP communication hook) against compression after it (the paper's faster
choice), and both against optimized syncSGD (PyTorch DDP). Per model and batch
size this times, on every rank (the record holds the max over ranks per iteration):

* ``syncsgd``: plain DDP at its default bucket size and at each ``bucket_mb``;
* ``builtin``: PyTorch's own hooks as peers (``fp16_compress_hook``,
  ``bf16_compress_hook``, PowerSGD rank 4 from iteration 2). Only on NCCL: on
  gloo the bf16 hook is refused and PowerSGD deadlocks with several buckets
  (MACHINE-NOTES), so a ``skipped`` record says so instead of hanging;
* ``hook``: every compressor through :func:`studykit.ddp.register` (DDP's buckets), its
  protocol on the communication thread, overlapped with the backward pass (``hook_overlap``
  true); ``hook_blocking``: the same with ``overlap=False`` (the protocol runs inside the hook,
  as every hook record before the field ``hook_overlap`` existed did), recorded as mode
  ``hook`` with ``hook_overlap`` false;
* ``post``: every compressor through :class:`studykit.ddp.PostBackwardReducer`
  on the plain model, one bucket (the paper's non-overlapped implementation).

``comms`` (``--comm collective ps``) runs the modes hook, hook_blocking and post once per
communicator: ``collective`` (the backend's all-reduce / all-gather, records' ``comm`` null, as in
every record written before the field existed) and ``ps``, one parameter server on rank 0
(:class:`studykit.comm.ParameterServerComm`; Sec. 2.2, Fig. 4's third scheme; records' ``comm``
"ps"). syncSGD and PyTorch's hooks use DDP's own all-reduce and run once.

With ``bucket_times`` (``--bucket-times``) every syncSGD configuration also writes a record of
kind ``buckets``: when each DDP bucket became ready during the backward pass, measured by a comm
hook that stamps its entry (``time.perf_counter()`` on the host, and a CUDA event on GPUs) relative
to the start of ``loss.backward()`` and then all-reduces as DDP does (:func:`measure_bucket_times`).
The performance model reads them as the buckets' ready fractions
(``studykit.perfmodel.model.Workload.bucket_ready``, ``ModelOptions.overlap = "timeline"``).

With ``hook_times`` (``--hook-times``) every hook configuration (overlapped and blocking) also writes a
record of kind ``hook_times``: the kit's hook wrapped from outside (``studykit/ddp.py`` is untouched) and
stamped bucket by bucket, when each bucket was ready, encoded, communicated and decoded and when the
backward pass ended (:func:`measure_hook_times`), the measured side of
``studykit.perfmodel.model.bucket_timeline_s``; :func:`hook_timeline_table` reads them, one row per bucket.

Each configuration starts from a fresh copy of the same initial model with a
fresh SGD (momentum 0.9) optimizer. Compressors run with ``allow_nonfinite=True``
(no finite check: it adds a pass and a host synchronisation per call).
"""
from __future__ import annotations

import copy
import gc
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional, Sequence

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from studykit import compressors as C
from studykit import ddp as sk_ddp
from studykit import models as M
from studykit.comm import COMM_KINDS, make_comm
from studykit.measure.profile import effective_params
from studykit.measure.records import RecordWriter, config_id, done_ids, make_record
from studykit.measure.runtime import CompressorSpec, Dist, note, progress
from studykit.measure.timing import time_fn

if TYPE_CHECKING:  # pandas is imported where the table is built
    import pandas as pd

__all__ = ["MODES", "BUILTIN_HOOKS", "run_ddp", "measure_bucket_times", "measure_hook_times",
           "hook_timeline_table"]

MODES = ("syncsgd", "builtin", "hook", "post", "hook_blocking")
#: PyTorch's built-in hooks timed as peers: name -> params recorded
BUILTIN_HOOKS = {"torch_fp16": {}, "torch_bf16": {}, "torch_powersgd": {"rank": 4, "start_iter": 2}}
BUILTIN_SKIP_REASON = ("PyTorch's built-in DDP comm hooks are run on NCCL only: on gloo bf16_compress_hook "
                       "is refused and powerSGD_hook deadlocks with more than one bucket (MACHINE-NOTES.md)")
OPTIMIZER = "sgd(lr=0.01,momentum=0.9)"


@dataclass
class _Config:
    model: str
    batch_size: int
    mode: str
    compressor: Optional[str]
    params: dict
    bucket_mb: Optional[float]
    spec: Optional[CompressorSpec]
    cid: str
    hook_overlap: Optional[bool] = None
    comm: str | None = None  # "ps": through a parameter server; None: the backend's collectives
    switch_interval_ms: Optional[float] = None  # set by --switch-interval-ms (None: Python's default)
    ident: dict = field(default_factory=dict)  # the identifying fields behind ``cid`` (records.config_id)


def _builtin_hook(name: str):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if name == "torch_fp16":
        return None, default_hooks.fp16_compress_hook
    if name == "torch_bf16":
        return None, default_hooks.bf16_compress_hook
    if name == "torch_powersgd":
        p = BUILTIN_HOOKS[name]
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=p["rank"],
                                            start_powerSGD_iter=p["start_iter"])
        return state, powerSGD_hook.powerSGD_hook
    raise ValueError(f"unknown built-in hook {name!r}; valid: {', '.join(BUILTIN_HOOKS)}")


def plan_configs(d: Dist, model_names, batch_sizes, specs, modes, bucket_mbs, builtins, seq_len,
                 comms: Sequence[str] = ("collective",), switch_interval_ms: Optional[float] = None) -> list[_Config]:
    """Every configuration, most important first *across models*, so a run cut short by a
    deadline still has syncSGD and post-backward compression for every model: syncSGD at
    DDP's default bucket, other buckets, PyTorch's hooks, each compressor after the backward,
    each compressor as a hook; hook and post once per communicator of ``comms``."""
    bad = [c for c in comms if c not in COMM_KINDS]
    if bad or not comms:
        what = f"unknown communicator kind {bad[0]!r}" if bad else "no communicator kind given"
        raise ValueError(f"{what}; valid: {', '.join(COMM_KINDS)}")
    comm_ids = [None if c == "collective" else c for c in dict.fromkeys(comms)]  # the default keeps old ids
    groups: list[list[_Config]] = [[] for _ in range(5)]
    seen: set[str] = set()
    for model in model_names:
        for bs in batch_sizes or [M.DEFAULT_BATCH.get(model, 32)]:
            sl = M.seq_len_of(model, seq_len)

            def add(group, mode, compressor=None, params=None, bucket_mb=None, spec=None, hook_overlap=None,
                    comm=None):
                params = params or {}
                ident = {"kind": "ddp", "model": model, "batch_size": bs, "mode": mode, "compressor": compressor,
                         "params": params, "bucket_mb": bucket_mb, "seq_len": sl, "world_size": d.world_size,
                         "backend": d.backend, "device_type": d.device.type, "hook_overlap": hook_overlap,
                         "comm": comm, "switch_interval_ms": switch_interval_ms}
                cid = config_id(**ident)
                if cid not in seen:  # a spec equal to another's defaults runs once
                    seen.add(cid)
                    groups[group].append(_Config(model, bs, mode, compressor, params, bucket_mb, spec, cid,
                                                 hook_overlap, comm, switch_interval_ms, ident))

            if "syncsgd" in modes:
                add(0, "syncsgd")
                for mb in bucket_mbs:
                    add(1, "syncsgd", bucket_mb=mb)
            if "builtin" in modes:
                for name in builtins:
                    add(2, "builtin", name, BUILTIN_HOOKS[name])
            for spec in specs:
                params = effective_params(C.get(spec.name, allow_nonfinite=True, **spec.kwargs))
                for comm in comm_ids:
                    if "post" in modes:
                        add(3, "post", spec.name, params, spec=spec, comm=comm)
                    if "hook" in modes:
                        add(4, "hook", spec.name, params, spec=spec, hook_overlap=True, comm=comm)
                    if "hook_blocking" in modes:
                        add(4, "hook", spec.name, params, spec=spec, hook_overlap=False, comm=comm)
    # within a group: configuration by configuration, every model in turn
    order = {m: i for i, m in enumerate(model_names)}
    out = []
    for g in groups:
        keyed = [(i, c) for i, c in enumerate(g)]
        keyed.sort(key=lambda ic: (_rank_in_model(g, ic[1]), order[ic[1].model], ic[1].batch_size))
        out += [c for _, c in keyed]
    return out


def _rank_in_model(group: list[_Config], cfg: _Config) -> int:
    """Position of ``cfg`` among its model's (and batch size's) configurations in ``group``."""
    same = [c for c in group if (c.model, c.batch_size) == (cfg.model, cfg.batch_size)]
    return same.index(cfg)


def _measure(cfg: _Config, d: Dist, base: torch.nn.Module, batch, timing_kw) -> dict:
    """Build the configuration's model/optimizer/hook, time its iterations; returns result fields."""
    net = copy.deepcopy(base)
    fwd, reducer, state = net, None, None
    if cfg.mode in ("syncsgd", "builtin", "hook"):
        kw = {} if cfg.bucket_mb is None else {"bucket_cap_mb": cfg.bucket_mb}
        fwd = DDP(net, device_ids=[d.device.index] if d.device.type == "cuda" else None, **kw)
        if cfg.mode == "builtin":
            hook_state, hook = _builtin_hook(cfg.compressor)
            fwd.register_comm_hook(hook_state, hook)
        elif cfg.mode == "hook":
            comp = C.get(cfg.spec.name, allow_nonfinite=True, **cfg.spec.kwargs)
            state = sk_ddp.register(fwd, comp, overlap=cfg.hook_overlap is not False, comm_kind=cfg.comm or "collective")
    else:  # post: the plain model and one bucket
        comp = C.get(cfg.spec.name, allow_nonfinite=True, **cfg.spec.kwargs)
        state = reducer = sk_ddp.PostBackwardReducer(net, comp, bucket_bytes=None, comm_kind=cfg.comm or "collective")
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    steps = [0]

    def step():
        opt.zero_grad(set_to_none=True)
        M.loss(cfg.model, fwd, batch).backward()
        if reducer is not None:
            reducer.reduce()
        opt.step()
        steps[0] += 1

    primed = 0
    if cfg.compressor == "torch_powersgd":  # PowerSGD starts compressing at iteration 2
        for _ in range(BUILTIN_HOOKS["torch_powersgd"]["start_iter"]):
            step()
            primed += 1
    t = time_fn(step, device=d.device, agree=d.agree_max, **timing_kw)
    fields = t.as_dict()
    fields["n_warmup"] += primed
    fields["wire_bytes_per_iter"] = state.bytes_sent / steps[0] if state is not None and steps[0] else None
    del fwd, net, opt, reducer, state, step
    return fields


def measure_bucket_times(cfg: _Config, d: Dist, base: torch.nn.Module, batch, *, n_iter: int = 5,
                         n_warmup: int = 2) -> dict:
    """Per-bucket ready times of one syncSGD configuration (the fields of a ``buckets`` record).

    A DDP comm hook stamps each bucket at hook entry, i.e. when DDP hands the bucket over because all
    its gradients are ready (and every earlier bucket has been handed over), relative to the call of
    ``loss.backward()``: ``time.perf_counter()`` on the host, a CUDA event on the current stream on
    GPUs (the device clock: the host runs ahead of the kernels), then all-reduces the bucket as DDP's
    default hook does. ``n_warmup`` iterations first (DDP rebuilds its buckets after the first), then
    ``n_iter`` timed ones; each list holds the per-bucket median over them, in bucket index order
    (communication order). ``ready_fraction`` is ``ready / ready of the last bucket`` on the device
    clock where there is one (the last bucket is ready when the backward pass's compute ends)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    cuda = d.device.type == "cuda"
    net = copy.deepcopy(base)
    kw = {} if cfg.bucket_mb is None else {"bucket_cap_mb": cfg.bucket_mb}
    fwd = DDP(net, device_ids=[d.device.index] if cuda else None, **kw)
    st = {"t0": 0.0, "ev0": None, "marks": []}

    def hook(_state, bucket):
        t = time.perf_counter() - st["t0"]
        ev = None
        if cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
        buf = bucket.buffer()
        st["marks"].append((bucket.index(), t, ev, buf.numel() * buf.element_size()))
        return default_hooks.allreduce_hook(None, bucket)

    fwd.register_comm_hook(None, hook)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    host: dict = {}
    dev: dict = {}
    nbytes: dict = {}
    bwd_ms = []
    for it in range(n_warmup + n_iter):
        opt.zero_grad(set_to_none=True)
        loss = M.loss(cfg.model, fwd, batch)
        st["marks"] = []
        if cuda:
            st["ev0"] = torch.cuda.Event(enable_timing=True)
            st["ev0"].record()
        st["t0"] = time.perf_counter()
        loss.backward()
        if cuda:
            torch.cuda.synchronize(d.device)
        bwd_ms.append((time.perf_counter() - st["t0"]) * 1e3) if it >= n_warmup else None
        opt.step()
        if it < n_warmup:
            continue
        for idx, t, ev, nb in st["marks"]:
            host.setdefault(idx, []).append(t * 1e3)
            nbytes[idx] = nb
            if ev is not None:
                dev.setdefault(idx, []).append(st["ev0"].elapsed_time(ev))
    order = sorted(host)
    ready_host = [statistics.median(host[i]) for i in order]
    ready_dev = [statistics.median(dev[i]) for i in order] if cuda and dev else None
    ref = ready_dev if ready_dev is not None else ready_host
    last = ref[-1] if ref and ref[-1] > 0 else None
    del fwd, net, opt
    return {"bucket_index": order, "bucket_bytes": [int(nbytes[i]) for i in order], "ready_ms": ref,
            "ready_host_ms": ready_host, "ready_fraction": [r / last for r in ref] if last else None,
            "clock": "cuda_event" if ready_dev is not None else "perf_counter",
            "backward_ms": statistics.median(bwd_ms) if bwd_ms else None, "n_iter": n_iter, "n_warmup": n_warmup,
            "ms_median": statistics.median(bwd_ms) if bwd_ms else None}


# ------------------------------------------------------------------ hook_times: per-bucket stamps of the kit's hook
#: per-bucket lists of a ``hook_times`` record (besides ``bucket_index`` and ``bucket_bytes``), in bucket index order
HOOK_TIMES_STAMPS = ("ready_ms", "encode_end_ms", "comm_ms", "decode_end_ms", "n_collectives")


class _Clock:
    """Time stamps on one clock: a CUDA event (``enable_timing``) recorded on the calling thread's current
    stream on GPUs (device time: when that stream reaches the stamp), ``time.perf_counter()`` on CPU."""

    def __init__(self, cuda: bool):
        self.cuda = cuda

    def now(self):
        if not self.cuda:
            return time.perf_counter()
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def span_ms(self, a, b) -> float:
        """ms from stamp ``a`` to stamp ``b`` (on CUDA once both events have completed)."""
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3


class _StampComm:
    """A communicator around the hook's own (``TorchComm``, ``ParameterServerComm``) that stamps every
    collective's start and end and files them under the bucket whose protocol issued it (:class:`_HookTimer`).

    Synchronous collectives (``all_reduce``, ``all_gather``) are bracketed on the issuing thread: on GPUs by
    events on its current stream (the hook's side stream when overlapped, the backward pass's stream when
    blocking). NCCL runs the collective on a stream of its own that first waits for the issuing stream and
    makes the issuing stream wait for its end, so the bracket is the time the collective holds up the
    protocol's stream (including any wait for NCCL's stream, e.g. behind another bucket's collective).
    ``all_reduce_async`` (the hook's one-round path: fp16, bf16, none) exists only where the inner
    communicator has it, as the hook asks for it by ``hasattr``; its end is stamped in a callback on the
    returned future, which torch runs on a pool stream made to wait for the collective's work
    (``torch.futures.Future.then``): the device time the sum was done."""

    def __init__(self, inner, timer: _HookTimer):
        self.inner, self.rank, self.world_size = inner, inner.rank, inner.world_size
        self._timer = timer
        if hasattr(inner, "all_reduce_async"):
            self.all_reduce_async = self._all_reduce_async

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return self._bracket(self.inner.all_reduce, tensor)

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return self._bracket(self.inner.all_gather, tensor)

    def _bracket(self, op, tensor):
        t = self._timer
        pos, start = t.position(), t.clock.now()
        out = op(tensor)
        t.collective(pos, start, t.clock.now())
        return out

    def _all_reduce_async(self, tensor: torch.Tensor) -> torch.futures.Future:
        t = self._timer
        pos, start = t.position(), t.clock.now()
        fut = self.inner.all_reduce_async(tensor)
        # added before the hook's own decode callback: torch runs a future's callbacks in the order added
        t.pending.append(fut.then(lambda _: t.collective(pos, start, t.clock.now())))
        return fut


class _HookTimer:
    """Per-bucket time stamps of :func:`studykit.ddp.compressor_hook` in one backward pass, taken from
    outside the hook (:func:`measure_hook_times` says what each stamp means).

    :meth:`hook` wraps the kit's hook; :class:`_StampComm` brackets the collectives. A collective belongs
    to the bucket at position ``state.calls - calls at the start of the backward pass`` in hook-call order:
    ``HookState.calls`` counts the buckets whose protocol has issued all its collectives, and every path of
    the hook (communication thread, blocking, one-round async) runs the buckets' protocols one after the
    other in the order DDP calls the hook."""

    def __init__(self, cuda: bool):
        self.clock = _Clock(cuda)
        self.state: sk_ddp.HookState | None = None  # whose ``calls`` place the collectives (set once built)
        self.buckets: list[dict] = []
        self.pending: list = []

    def start(self) -> None:
        """Just before ``loss.backward()``: forget the last pass and stamp its zero (on the main stream)."""
        self.buckets: list[dict] = []
        self.pending: list = []
        self.backward_end = None
        self._calls0 = self.state.calls
        self.zero = self.clock.now()

    def position(self) -> int:
        return self.state.calls - self._calls0

    def collective(self, pos: int, start, end) -> None:
        if not 0 <= pos < len(self.buckets):
            raise RuntimeError(f"hook_times: a collective of bucket position {pos}, but the hook has been called "
                               f"for {len(self.buckets)} buckets in this backward pass")
        self.buckets[pos]["colls"].append((start, end))

    def hook(self, state, bucket):  # no annotations: DDP compares them with real types, these are strings here
        """The DDP comm hook: stamp *ready*, run :func:`studykit.ddp.compressor_hook`, stamp *done* in a
        callback on its future (DDP gets that future itself, so it waits for nothing extra)."""
        ready = self.clock.now()
        if not self.buckets:  # runs when the autograd engine has run every node, before DDP's own wait
            torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
        buf = bucket.buffer()
        b = {"index": bucket.index(), "bytes": buf.numel() * buf.element_size(), "ready": ready, "done": None,
             "colls": []}
        self.buckets.append(b)
        fut = sk_ddp.compressor_hook(state, bucket)
        self.pending.append(fut.then(lambda _: b.__setitem__("done", self.clock.now())))
        return fut

    def _end_of_backward(self) -> None:
        self.backward_end = self.clock.now()

    def finish(self, device: torch.device) -> dict:
        """After ``loss.backward()``: wait for every stamp, then the pass in ms since its zero."""
        for f in self.pending:
            f.wait()
        if self.clock.cuda:
            torch.cuda.synchronize(device)
        ms = lambda s: None if s is None else self.clock.span_ms(self.zero, s)
        out = {}
        for b in self.buckets:
            colls = b["colls"]
            out[b["index"]] = {"bytes": b["bytes"], "ready_ms": ms(b["ready"]), "decode_end_ms": ms(b["done"]),
                               "encode_end_ms": ms(colls[0][0]) if colls else None,
                               "comm_ms": sum(self.clock.span_ms(s, e) for s, e in colls) if colls else None,
                               "n_collectives": len(colls)}
        return {"buckets": out, "backward_end_ms": ms(self.backward_end)}


def _median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def measure_hook_times(cfg: _Config, d: Dist, base: torch.nn.Module, batch, *, n_iter: int = 10,
                       n_warmup: int = 2, budget_s: float | None = None, min_iter: int = 3) -> dict:
    """Per-bucket time line of one ``hook`` configuration (the fields of a ``hook_times`` record): what
    :func:`studykit.perfmodel.model.bucket_timeline_s` models (``f_i C``, ``g_i``, ``c_i``, ``D_i``; BEYOND
    THE PAPER, whose App. A only shows that hooks are slower), measured.

    The configuration's compressor is registered on a fresh DDP model through the kit's own hook,
    wrapped from outside (:class:`_HookTimer`, :class:`_StampComm`); ``n_warmup`` iterations (DDP rebuilds
    its buckets after the first), then ``n_iter`` stamped ones, fewer (never below ``min_iter``) where they
    would take more than ``budget_s`` at the slowest rank's last warm-up pace. Every stamp is in ms since
    the start of ``loss.backward()``: on GPUs the time from a CUDA event recorded on the main stream just
    before it to an event recorded as below (device time); on CPU ``time.perf_counter()`` (``clock``). Per
    bucket, in bucket index order (DDP's, the communication order), the median over the stamped iterations of

    * ``ready_ms``: DDP calls the hook (all the bucket's gradients are computed and every earlier bucket
      has been handed over); the event is on the stream that calls the hook (the backward pass's);
    * ``encode_end_ms``: the bucket's first collective is issued (its encode is done; on the
      communication thread it also waited for the earlier buckets' protocols); the event is on the
      stream that issues it (the hook's side stream when overlapped, the backward pass's otherwise);
    * ``comm_ms``: the sum of the bucket's collectives' durations, each bracketed on the stream that
      issues it (:class:`_StampComm`: a collective waiting for NCCL's stream counts);
    * ``decode_end_ms``: the bucket's future is done (decode finished): a callback on the hook's future,
      which torch runs on a pool stream made to wait for the events the future's producer recorded, so
      on GPUs the device time the decoded bucket was complete (or later, should that pool stream be busy);
    * ``n_collectives``: the collectives stamped (0: none, so ``encode_end_ms`` and ``comm_ms`` are null).

    ``backward_end_ms``: the autograd engine has run every node of the backward pass (a final callback queued
    at the first hook call, which runs before DDP's own, on the caller's stream after it waited for the
    backward's streams): what the backward's compute and the hook's inline work took; ``sync_end_ms``:
    ``loss.backward()`` returned (DDP has waited for every bucket's future and copied the averages into the
    gradients). What ends after ``backward_end_ms`` is not hidden under the backward pass
    (:func:`hook_timeline_table`'s ``exposed_ms``). ``iteration_ms``: the whole stamped iteration (zero_grad,
    forward, backward, SGD step) with the stamps' own overhead; the ``ddp`` record holds the unstamped times.
    Rank 0's stamps (every rank runs the same iterations). Medians keep the order of stamps that are ordered
    in every iteration (``ready <= encode_end <= decode_end``) but sums and differences of medians need not
    match any one iteration: ``stamps_ms`` keeps every stamped iteration's own.

    On CPU the *done* stamp is taken when the callback runs, on the thread that completed the future
    (the communication thread, or gloo's for the async all-reduce) after torch has woken the future's
    waiters: a GIL hand-over may put it a little after ``sync_end_ms``. On gloo several async all-reduces
    may run at once (its worker threads), so a small bucket can be decoded before a large earlier one."""
    cuda = d.device.type == "cuda"
    net = copy.deepcopy(base)
    fwd = DDP(net, device_ids=[d.device.index] if cuda else None)
    comp = C.get(cfg.spec.name, allow_nonfinite=True, **cfg.spec.kwargs)
    timer = _HookTimer(cuda)
    state = timer.state = sk_ddp.HookState(comp, comm=_StampComm(make_comm(cfg.comm or "collective"), timer),
                                           overlap=cfg.hook_overlap is not False)
    fwd.register_comm_hook(state, timer.hook)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    passes, ends, syncs, iters = [], [], [], []

    def iteration() -> float:
        if cuda:
            torch.cuda.synchronize(d.device)
        t_it = timer.clock.now()
        opt.zero_grad(set_to_none=True)
        loss = M.loss(cfg.model, fwd, batch)
        timer.start()
        loss.backward()
        t_sync = timer.clock.now()
        opt.step()
        t_end = timer.clock.now()
        got = timer.finish(d.device)
        passes.append(got["buckets"])
        ends.append(got["backward_end_ms"])
        syncs.append(timer.clock.span_ms(timer.zero, t_sync))
        iters.append(timer.clock.span_ms(t_it, t_end))
        return iters[-1]

    try:
        warm_ms = [iteration() for _ in range(n_warmup)]
        if budget_s is not None and warm_ms:  # every rank must run as many iterations: the slowest decides
            n_iter = max(min_iter, min(n_iter, int(budget_s * 1e3 / max(d.agree_max(warm_ms[-1]), 1e-3))))
        del passes[:], ends[:], syncs[:], iters[:]
        for _ in range(n_iter):
            iteration()
    finally:
        state.close()
    order = sorted({i for p in passes for i in p})
    per = {k: [_median(p[i][k] for p in passes if i in p) for i in order] for k in HOOK_TIMES_STAMPS}
    per["n_collectives"] = [None if n is None else round(n) for n in per["n_collectives"]]
    nbytes = {i: p[i]["bytes"] for p in passes for i in p}
    # every iteration's own stamps: one consistent time line each (the medians above come from different ones)
    raw = {k: [[p[i][k] if i in p else None for i in order] for p in passes] for k in HOOK_TIMES_STAMPS[:4]}
    timer.state = None  # no cycle state -> comm -> timer -> state (freed on return)
    return {"bucket_index": order, "bucket_bytes": [int(nbytes[i]) for i in order], **per,
            "backward_end_ms": _median(ends), "sync_end_ms": _median(syncs), "iteration_ms": _median(iters),
            "stamps_ms": {**raw, "backward_end_ms": ends, "sync_end_ms": syncs},
            "clock": "cuda_event" if cuda else "perf_counter", "n_iter": n_iter, "n_warmup": n_warmup,
            "ms_median": _median(iters), "times_ms": iters}


def hook_timeline_table(records) -> pd.DataFrame:
    """``hook_times`` records (dicts, or a DataFrame of them, e.g. ``report.load_frame``) as one row per
    bucket: the measured counterpart of :func:`studykit.perfmodel.model.bucket_timeline_s`.

    Columns: the configuration (``model``, ``batch_size``, ``compressor``, ``params`` as sorted JSON,
    ``hook_overlap``, ``comm``, ``world_size``, ``rate_gbps`` of an emulated network or NaN), ``bucket``,
    ``bucket_bytes``, the stamps (``ready_ms``, ``encode_end_ms``, ``decode_end_ms``, ``backward_end_ms``,
    ms since the start of the backward pass) and durations, ms:

    * ``encode_ms = encode_end - ready`` (waiting for the protocol's turn, then encode);
    * ``comm_ms``: the collectives (the record's);
    * ``decode_ms = decode_end - encode_end - comm`` (between and after the collectives: decode);
    * ``exposed_ms = max(0, decode_end_i - max(backward_end, decode_end_j for j < i))``: the part of the
      bucket's time line that ends after the backward pass and after every earlier bucket, so that the
      buckets' ``exposed_ms`` add up to ``max(0, last decode_end - backward_end)``, the time the iteration
      waits for communication (``exposed_s`` of :func:`~studykit.perfmodel.model.bucket_timeline_s`).

    Only ``ok`` records, the latest per ``config_id``; NaN where a stamp is missing."""
    import json
    import math

    import pandas as pd

    if isinstance(records, pd.DataFrame):
        records = records.to_dict("records")
    latest: dict = {}
    for r in records:
        if r.get("kind") == "hook_times" and r.get("status") == "ok":
            latest[r["config_id"]] = r
    nan = float("nan")
    f = lambda x: nan if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)
    rows = []
    for r in latest.values():
        idx = list(r["bucket_index"])
        for k in ("bucket_bytes", "ready_ms", "encode_end_ms", "comm_ms", "decode_end_ms"):
            if len(r[k]) != len(idx):
                raise ValueError(f"hook_times record {r['config_id']}: {k} has {len(r[k])} entries for "
                                 f"{len(idx)} buckets; every per-bucket list must have one per bucket_index")
        net = r.get("network")
        rate = net.get("rate_gbps") if isinstance(net, dict) else None
        end = f(r.get("backward_end_ms"))
        done_before = end
        for j in sorted(range(len(idx)), key=lambda j: idx[j]):
            ready, enc, comm, dec = (f(r[k][j]) for k in ("ready_ms", "encode_end_ms", "comm_ms", "decode_end_ms"))
            exposed = max(0.0, dec - done_before) if not (math.isnan(dec) or math.isnan(done_before)) else nan
            if not math.isnan(dec):
                done_before = max(done_before, dec)
            rows.append({"model": r.get("model"), "batch_size": r.get("batch_size"), "compressor": r.get("compressor"),
                         "params": json.dumps(r["params"] if isinstance(r.get("params"), dict) else {}, sort_keys=True),
                         "hook_overlap": r.get("hook_overlap"), "comm": r.get("comm"),
                         "world_size": r.get("world_size"), "rate_gbps": f(rate), "bucket": int(idx[j]),
                         "bucket_bytes": int(r["bucket_bytes"][j]), "ready_ms": ready, "encode_end_ms": enc,
                         "decode_end_ms": dec, "backward_end_ms": end, "encode_ms": enc - ready, "comm_ms": comm,
                         "decode_ms": dec - enc - comm, "exposed_ms": exposed})
    cols = ["model", "batch_size", "compressor", "params", "hook_overlap", "comm", "world_size", "rate_gbps", "bucket",
            "bucket_bytes", "ready_ms", "encode_end_ms", "decode_end_ms", "backward_end_ms", "encode_ms", "comm_ms",
            "decode_ms", "exposed_ms"]
    return pd.DataFrame(rows, columns=cols)


def run_ddp(d: Dist, model_names: Sequence[str], specs: Sequence[CompressorSpec], writer: RecordWriter, *,
            batch_sizes: Optional[Sequence[int]] = None, modes: Sequence[str] = MODES,
            bucket_mbs: Sequence[float] = (), builtins: Sequence[str] = tuple(BUILTIN_HOOKS),
            seq_len: int = M.BERT_SEQ_LEN, n_iter: int = 50, n_warmup: int = 10, budget_s: Optional[float] = None,
            min_iter: int = 3, verbose: bool = True, bucket_times: bool = False,
            comms: Sequence[str] = ("collective",), switch_interval_ms: Optional[float] = None,
            hook_times: bool = False) -> int:
    """Time every configuration not yet in the file on every rank; rank 0 writes. Returns records written.
    ``bucket_times``: each syncSGD configuration also writes a ``buckets`` record (:func:`measure_bucket_times`);
    ``hook_times``: each hook configuration (overlapped and blocking) also writes a ``hook_times`` record
    (:func:`measure_hook_times`), also for a hook configuration timed by an earlier run without it;
    ``comms``: the communicators of the hook and post modes (module docstring). ``switch_interval_ms``:
    Python's GIL switch interval for the whole run (``sys.setswitchinterval``; None keeps Python's 5 ms).
    The hook's communication thread and the autograd thread that calls the hook share the GIL, so how
    often it changes hands may delay the hook's start on every bucket: this is the knob for an A/B."""
    if switch_interval_ms is not None:
        if not 0 < switch_interval_ms <= 1000:
            raise ValueError(f"switch_interval_ms must be in (0, 1000] ms, got {switch_interval_ms}")
        sys.setswitchinterval(switch_interval_ms / 1e3)
    timing_kw = dict(n_iter=n_iter, n_warmup=n_warmup, budget_s=budget_s, min_iter=min_iter)
    done = d.broadcast_object(writer.done() if d.is_main else None)
    todo = [c for c in plan_configs(d, model_names, batch_sizes, specs, modes, bucket_mbs, builtins, seq_len, comms,
                                    switch_interval_ms)
            if c.cid not in done or (hook_times and c.mode == "hook" and _hook_times_cid(c) not in done)]
    written = 0
    bases: dict = {}  # (model, batch size) -> (initial model, batch): every model stays resident
    main = verbose and d.is_main
    for cfg in progress(todo, total=len(todo), desc="ddp", enabled=main):
        if cfg.cid in done:  # timed by an earlier run: only its hook_times record is missing
            written += _write_hook_times(cfg, d, writer, bases, seq_len, timing_kw, main)
            continue
        fields = _record_fields(cfg, seq_len)
        if cfg.mode == "builtin" and d.backend != "nccl":
            rec = make_record("ddp", cfg.cid, device=d.device, backend=d.backend, world_size=d.world_size,
                              status="skipped", reason=BUILTIN_SKIP_REASON, **fields)
        else:
            try:
                result = _measure(cfg, d, *_base(bases, cfg, d, seq_len), timing_kw)
                rec = make_record("ddp", cfg.cid, device=d.device, backend=d.backend, world_size=d.world_size,
                                  **fields, **result)
            except ModuleNotFoundError as exc:  # torchvision/transformers missing (same on every rank)
                rec = make_record("ddp", cfg.cid, device=d.device, backend=d.backend, world_size=d.world_size,
                                  status="skipped", reason=str(exc), **fields)
            except Exception as exc:  # noqa: BLE001
                rec = make_record("ddp", cfg.cid, device=d.device, backend=d.backend, world_size=d.world_size,
                                  status="error", reason=f"rank {d.rank}: {type(exc).__name__}: {exc}"[:500], **fields)
                _failed(writer, d, rec, f"{cfg.model} {cfg.mode} {cfg.compressor}")
        gc.collect()
        if d.device.type == "cuda":
            torch.cuda.empty_cache()
        writer.write(rec)
        written += 1
        label = f"{cfg.model:>10} b{cfg.batch_size:<3} {cfg.mode + (' ps' if cfg.comm else ''):<10} {cfg.compressor or '':<16} " \
                f"{'' if cfg.bucket_mb is None else f'{cfg.bucket_mb:g}MB':<6}"
        msg = f"{rec['ms_mean']:9.2f} ms (n={rec['n_iter']})" if rec["status"] == "ok" else \
            f"{rec['status'].upper()} {str(rec['reason'])[:70]}"
        note(f"{label} {msg}", main)
        d.barrier()
        if bucket_times and cfg.mode == "syncsgd" and rec["status"] == "ok":
            bcid = config_id(kind="buckets", model=cfg.model, batch_size=cfg.batch_size, mode=cfg.mode,
                             bucket_mb=cfg.bucket_mb, seq_len=M.seq_len_of(cfg.model, seq_len),
                             world_size=d.world_size, backend=d.backend, device_type=d.device.type)
            if bcid not in done:
                res = measure_bucket_times(cfg, d, *bases[(cfg.model, cfg.batch_size)], **_extra_counts(timing_kw))
                writer.write(make_record("buckets", bcid, device=d.device, backend=d.backend,
                                         world_size=d.world_size, model=cfg.model, batch_size=cfg.batch_size,
                                         mode=cfg.mode, bucket_mb=cfg.bucket_mb,
                                         seq_len=M.seq_len_of(cfg.model, seq_len), **res))
                written += 1
                note(f"{cfg.model:>10} b{cfg.batch_size:<3} buckets ready at "
                     + ", ".join(f"{x:.2f}" for x in res["ready_ms"]) + f" ms ({res['clock']})", main)
            d.barrier()
        if hook_times and cfg.mode == "hook" and rec["status"] == "ok" and _hook_times_cid(cfg) not in done:
            written += _write_hook_times(cfg, d, writer, bases, seq_len, timing_kw, main)
    return written


def _record_fields(cfg: _Config, seq_len: int) -> dict:
    """The fields a ``ddp`` record (and its ``hook_times`` record) carries about its configuration."""
    return {"model": cfg.model, "batch_size": cfg.batch_size, "mode": cfg.mode, "compressor": cfg.compressor,
            "params": cfg.params, "bucket_mb": cfg.bucket_mb, "seq_len": M.seq_len_of(cfg.model, seq_len),
            "optimizer": OPTIMIZER, "hook_overlap": cfg.hook_overlap, "comm": cfg.comm,
            "switch_interval_ms": sys.getswitchinterval() * 1e3}


def _base(bases: dict, cfg: _Config, d: Dist, seq_len: int) -> tuple:
    """(initial model, batch) of ``cfg``'s model and batch size, built once (every model stays resident)."""
    key = (cfg.model, cfg.batch_size)
    if key not in bases:
        torch.manual_seed(0)  # the same initial model on every rank
        bases[key] = (M.build(cfg.model).to(d.device).train(),
                      M.example_batch(cfg.model, cfg.batch_size, d.device, seq_len=seq_len))
    return bases[key]


def _extra_counts(timing_kw: dict) -> dict:
    """Warm-up and stamped iterations of the extra per-bucket measurements (``buckets``, ``hook_times``):
    at most 10 stamped (never below ``min_iter``), 2 or 3 warm-ups (DDP rebuilds its buckets after the first)."""
    return {"n_iter": max(timing_kw["min_iter"], min(timing_kw["n_iter"], 10)),
            "n_warmup": max(2, min(timing_kw["n_warmup"], 3))}


def _failed(writer: RecordWriter, d: Dist, rec: dict, what: str) -> None:
    """Report a configuration that raised. Its record is written by whichever rank failed (the others may
    be blocked in a collective until the group's timeout), so a rerun skips it."""
    print(f"ddp: rank {d.rank} {what}: {rec['reason']}", file=sys.stderr)
    if not d.is_main:  # unless rank 0 failed too and wrote it (then it is there by now)
        time.sleep(1.0)
        if rec["config_id"] not in done_ids(writer.path):
            RecordWriter(writer.path, enabled=True, repair=False).write(rec)


def _hook_times_cid(cfg: _Config) -> str:
    """The ``hook_times`` record's identity: its ``ddp`` record's identifying fields, with kind ``hook_times``."""
    return config_id(**{**cfg.ident, "kind": "hook_times"})


def _write_hook_times(cfg: _Config, d: Dist, writer: RecordWriter, bases: dict, seq_len: int, timing_kw: dict,
                      main: bool) -> int:
    """Measure hook configuration ``cfg``'s per-bucket stamps (:func:`measure_hook_times`) and write its
    ``hook_times`` record (or a skipped / error record). Returns 1 (records written)."""
    hcid, fields = _hook_times_cid(cfg), _record_fields(cfg, seq_len)
    common = {"device": d.device, "backend": d.backend, "world_size": d.world_size}
    try:
        res = measure_hook_times(cfg, d, *_base(bases, cfg, d, seq_len), budget_s=timing_kw["budget_s"],
                                 min_iter=timing_kw["min_iter"], **_extra_counts(timing_kw))
        rec = make_record("hook_times", hcid, **common, **fields, **res)
    except ModuleNotFoundError as exc:  # torchvision/transformers missing (same on every rank)
        rec = make_record("hook_times", hcid, **common, status="skipped", reason=str(exc), **fields)
    except Exception as exc:  # noqa: BLE001
        rec = make_record("hook_times", hcid, **common, status="error",
                          reason=f"rank {d.rank}: {type(exc).__name__}: {exc}"[:500], **fields)
        _failed(writer, d, rec, f"{cfg.model} hook_times {cfg.compressor}")
    gc.collect()
    if d.device.type == "cuda":
        torch.cuda.empty_cache()
    writer.write(rec)
    what = f"{cfg.model:>10} b{cfg.batch_size:<3} hook_times {'' if cfg.hook_overlap else 'blocking '}{cfg.compressor}"
    if rec["status"] == "ok":
        note(f"{what}: decoded at " + ", ".join("-" if x is None else f"{x:.2f}" for x in rec["decode_end_ms"])
             + f" ms, backward ends at {rec['backward_end_ms']:.2f} ms ({rec['clock']})", main)
    else:
        note(f"{what}: {rec['status'].upper()} {str(rec['reason'])[:70]}", main)
    d.barrier()
    return 1
