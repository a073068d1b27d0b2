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
hook that stamps its entry (the host clock, and a CUDA event on GPUs: :mod:`studykit.measure.timing`)
relative to the start of ``loss.backward()`` and then all-reduces as DDP does (:func:`measure_bucket_times`).
The performance model reads them as the buckets' ready fractions
(``studykit.perfmodel.model.Workload.bucket_ready``, ``ModelOptions.overlap = "timeline"``).

With ``hook_times`` (``--hook-times``) every hook configuration (overlapped and blocking) also writes a
record of kind ``hook_times``: the kit's hook wrapped from outside (``studykit/ddp/`` is untouched) and
stamped bucket by bucket, when each bucket was ready, encoded, communicated and decoded and when the
backward pass ended (:mod:`studykit.measure.hook_times`), the measured side of
``studykit.perfmodel.model.bucket_timeline_s``; ``hook_timeline_table`` there reads them, one row per bucket.

Each configuration starts from a fresh copy of the same initial model with a
fresh SGD (momentum 0.9) optimizer. The hook and the reducer run as :mod:`studykit.ddp` builds them by
default: no finite check (it would add a pass and a host synchronisation per bucket), inf/NaN passed through.
"""
from __future__ import annotations

import copy
import gc
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from studykit import compressors as C
from studykit import ddp as sk_ddp
from studykit import models as M
from studykit.comm import COMM_KINDS
from studykit.compressors import _fast
from studykit.measure.hook_times import measure_hook_times
from studykit.measure.profile import effective_params
from studykit.measure.records import RecordWriter, _network, config_id, done_ids, make_record
from studykit.measure.runtime import CompressorSpec, Dist, note, progress
from studykit.measure.timing import StampClock, host_clock, host_ms, time_fn, time_interleaved

__all__ = ["BUILTIN_HOOKS", "MODES", "measure_bucket_times", "run_ddp"]

MODES = ("syncsgd", "builtin", "hook", "post", "hook_blocking")
#: the modes that run the model inside DistributedDataParallel (post runs the plain model)
DDP_MODES = ("syncsgd", "builtin", "hook")
#: how ``run_ddp(pair_hook_post=...)`` times a compressor's hooks beside its post: not at all, one configuration
#: right after the other, or iteration by iteration
PAIRINGS = ("off", "configs", "iterations")
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
    hook_coalesce_mb: Optional[float] = None  # overlapped hooks: buckets run together (studykit.ddp.register)
    broadcast_buffers: Optional[bool] = None  # False: DDP(broadcast_buffers=False) (--no-broadcast-buffers)
    hook_runner: Optional[str] = None  # overlapped hooks: studykit.ddp.register's runner (None: "thread")
    bucket_view: Optional[bool] = None  # True: DDP(gradient_as_bucket_view=True) (--gradient-as-bucket-view)
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
                 comms: Sequence[str] = ("collective",), switch_interval_ms: Optional[float] = None,
                 hook_coalesce_mbs: Sequence[Optional[float]] = (None,),
                 broadcast_buffers: bool = True, hook_runners: Sequence[str] = ("thread",),
                 bucket_view: bool = False, pair_hook_post: bool = False) -> list[_Config]:
    """Every configuration, most important first *across models*, so a run cut short by a
    deadline still has syncSGD and post-backward compression for every model: syncSGD at
    DDP's default bucket, other buckets, PyTorch's hooks, each compressor after the backward,
    each compressor as a hook; hook and post once per communicator of ``comms``. ``pair_hook_post``:
    each compressor's hooks right after its post instead (a slow spell of a shared machine then falls on
    both sides of a hook / post ratio, not on the hooks alone; a deadline may cut some compressors' post)."""
    bad = [c for c in comms if c not in COMM_KINDS]
    if bad or not comms:
        what = f"unknown communicator kind {bad[0]!r}" if bad else "no communicator kind given"
        raise ValueError(f"{what}; valid: {', '.join(COMM_KINDS)}")
    comm_ids = [None if c == "collective" else c for c in dict.fromkeys(comms)]  # the default keeps old ids
    groups: list[list[_Config]] = [[] for _ in range(5)]
    seen: set[str] = set()
    for model in model_names:
        for bs in batch_sizes or [M.default_batch(model)]:
            sl = M.seq_len_of(model, seq_len)

            def add(group, mode, compressor=None, params=None, bucket_mb=None, spec=None, hook_overlap=None,
                    comm=None, coalesce=None, runner=None):
                params = params or {}
                ident = {"kind": "ddp", "model": model, "batch_size": bs, "mode": mode, "compressor": compressor,
                         "params": params, "bucket_mb": bucket_mb, "seq_len": sl, "world_size": d.world_size,
                         "backend": d.backend, "device_type": d.device.type, "hook_overlap": hook_overlap,
                         "comm": comm, "switch_interval_ms": switch_interval_ms, "hook_coalesce_mb": coalesce,
                         "hook_runner": runner}
                nobuf = False if mode in DDP_MODES and not broadcast_buffers else None  # the default keeps old ids
                ident["broadcast_buffers"] = nobuf
                view = True if mode in DDP_MODES and bucket_view else None  # the default keeps old ids
                ident["gradient_as_bucket_view"] = view
                cid = config_id(**ident)
                if cid not in seen:  # a spec equal to another's defaults runs once
                    seen.add(cid)
                    groups[group].append(_Config(model, bs, mode, compressor, params, bucket_mb, spec, cid,
                                                 hook_overlap, comm, switch_interval_ms, coalesce, nobuf, runner, view, ident))

            if "syncsgd" in modes:
                add(0, "syncsgd")
                for mb in bucket_mbs:
                    add(1, "syncsgd", bucket_mb=mb)
            if "builtin" in modes:
                for name in builtins:
                    add(2, "builtin", name, BUILTIN_HOOKS[name])
            for spec in specs:
                params = effective_params(C.get(spec.name, allow_nonfinite=True, **spec.kwargs))
                hooks = 3 if pair_hook_post else 4  # paired: in post's group, right after it
                for comm in comm_ids:
                    if "post" in modes:
                        add(3, "post", spec.name, params, spec=spec, comm=comm)
                    if "hook" in modes:
                        for mb in hook_coalesce_mbs:
                            for runner in hook_runners:
                                add(hooks, "hook", spec.name, params, spec=spec, hook_overlap=True, comm=comm,
                                    coalesce=mb, runner=None if runner == "thread" else runner)
                    if "hook_blocking" in modes:
                        add(hooks, "hook", spec.name, params, spec=spec, hook_overlap=False, comm=comm)
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


@dataclass
class _Built:
    """A configuration ready to time: its training step and what the step's records read afterwards."""
    step: Callable[[], None]
    state: object  # the hook's or reducer's state (bytes sent), None for syncSGD and PyTorch's hooks
    steps: list  # [iterations run so far]
    primed: int  # iterations run before any warm-up (PyTorch's PowerSGD starts compressing at iteration 2)


def _build(cfg: _Config, d: Dist, base: torch.nn.Module, batch) -> _Built:
    """The configuration's model, optimizer and hook, from a fresh copy of ``base``."""
    net = copy.deepcopy(base)
    fwd, reducer, state = net, None, None
    if cfg.mode in DDP_MODES:
        kw = {} if cfg.bucket_mb is None else {"bucket_cap_mb": cfg.bucket_mb}
        if cfg.broadcast_buffers is False:
            kw["broadcast_buffers"] = False
        if cfg.bucket_view:
            kw["gradient_as_bucket_view"] = True
        fwd = DDP(net, device_ids=[d.device.index] if d.device.type == "cuda" else None, **kw)
        if cfg.mode == "builtin":
            hook_state, hook = _builtin_hook(cfg.compressor)
            fwd.register_comm_hook(hook_state, hook)
        elif cfg.mode == "hook":
            comp = C.get(cfg.spec.name, **cfg.spec.kwargs)
            state = sk_ddp.register(fwd, comp, overlap=cfg.hook_overlap is not False, comm_kind=cfg.comm or "collective",
                                    coalesce_mb=cfg.hook_coalesce_mb, runner=cfg.hook_runner or "thread")
    else:  # post: the plain model and one bucket
        comp = C.get(cfg.spec.name, **cfg.spec.kwargs)
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
    return _Built(step, state, steps, primed)


def _fields(built: _Built, t) -> dict:
    """A timed configuration's result fields: the timing's statistics, its warm-ups and its bytes sent."""
    fields = t.as_dict()
    fields["n_warmup"] += built.primed
    state, steps = built.state, built.steps[0]
    fields["wire_bytes_per_iter"] = state.bytes_sent / steps if state is not None and steps else None
    return fields


def _measure(cfg: _Config, d: Dist, base: torch.nn.Module, batch, timing_kw, trace_dir: Optional[str] = None) -> dict:
    """Build the configuration's model/optimizer/hook, time its iterations; returns result fields.
    ``trace_dir``: then 3 more iterations under ``torch.profiler``, rank 0's trace written there (gzipped
    Chrome trace JSON named after the configuration; a diagnosis aid, not a record)."""
    built = _build(cfg, d, base, batch)
    t = time_fn(built.step, device=d.device, agree=d.agree_max, **timing_kw)
    if trace_dir is not None:
        _trace(built.step, d, cfg, trace_dir)
    return _fields(built, t)


def _measure_together(cfgs: list[_Config], d: Dist, bases: dict, seq_len: int, timing_kw,
                      trace_dir: Optional[str] = None) -> list[dict]:
    """:func:`_measure` for several configurations built side by side and timed iteration by iteration
    (:func:`studykit.measure.timing.time_interleaved`): one compressor's post and hooks under
    ``pair_hook_post="iterations"``. Each result names the configurations it was timed with (``timed_with``)."""
    built = [_build(c, d, *_base(bases, c, d, seq_len)) for c in cfgs]
    ts = time_interleaved([b.step for b in built], device=d.device, agree=d.agree_max, **timing_kw)
    out = []
    for cfg, b, t in zip(cfgs, built, ts):
        if trace_dir is not None:
            _trace(b.step, d, cfg, trace_dir)
        out.append({**_fields(b, t), "timed_with": [c.cid for c in cfgs if c is not cfg]})
    return out


def _together(todo: list[_Config], done: set, pair: str) -> list[list[_Config]]:
    """The run's configurations in the units they are timed in: one each, or under ``pair == "iterations"``
    each compressor's post and hooks (same model, batch size, parameters and communicator) as one unit, where
    its first member stood, with PyTorch's built-in hook of the same codec (``torch_fp16`` beside ``fp16``,
    ``torch_powersgd`` beside ``powersgd`` of its rank) in the first unit it matches. A configuration already timed
    (only its ``hook_times`` record missing) stays alone."""
    if pair != "iterations":
        return [[c] for c in todo]
    units: list[list[_Config]] = []
    at: dict = {}
    for c in todo:
        if c.mode not in ("post", "hook") or c.cid in done:
            units.append([c])
            continue
        key = (c.model, c.batch_size, c.compressor, json.dumps(c.params, sort_keys=True, default=str), c.comm)
        if key in at:
            at[key].append(c)
        else:
            at[key] = [c]
            units.append(at[key])
    for b in [c for c in todo if c.mode == "builtin" and c.cid not in done]:
        unit = next((u for u in at.values() if _builtin_peer(b, u[0])), None)
        if unit is not None:
            units = [u for u in units if u != [b]]
            unit.append(b)
    return units


def _builtin_peer(builtin: _Config, cfg: _Config) -> bool:
    """Whether PyTorch's built-in hook ``builtin`` runs the codec of the kit's configuration ``cfg`` (post or hook,
    through the backend's collectives): ``torch_<name>`` for the kit's ``<name>``, the parameters it records
    (PowerSGD's rank) equal where the kit's configuration has them."""
    return (builtin.compressor == f"torch_{cfg.compressor}" and cfg.comm is None
            and (builtin.model, builtin.batch_size) == (cfg.model, cfg.batch_size)
            and all(cfg.params.get(k, v) == v for k, v in builtin.params.items()))


#: profiles of a configuration tried before its trace is given up: CUPTI at times records no device activity at
#: all (seen on one H200 under torch 2.11, several profiles in one process), and such a trace cannot be read
TRACE_TRIES = 3


def _trace(step: Callable[[], None], d: Dist, cfg: _Config, trace_dir: str) -> None:
    """3 iterations of ``step`` under ``torch.profiler`` (CPU and, on GPUs, CUDA activity); rank 0 writes
    ``<trace_dir>/<model>_b<batch>_<mode>_<compressor>[_c<coalesce MB>][_<rate>G].json.gz``.

    A trace on a GPU that holds no device activity (the profiler at times records none) is profiled again, every
    rank together, up to :data:`TRACE_TRIES` times; after the last it is removed and a warning names it.

    The next configurations are timed after this profile. PyTorch leaves CUPTI attached when a profile
    ends unless ``TEARDOWN_CUPTI=1`` (https://github.com/pytorch/pytorch/issues/144455), and an attached
    CUPTI slows every later kernel launch, which launch-bound codecs such as PowerSGD feel most
    (``benchmarks/profiler_aftereffect.py`` measures it with the variable set when the process starts). So it
    is set here, before the process's first profile, unless the environment says otherwise. Set this late it
    still works: configurations timed after a traced one are not slower than in a run without traces (the GPU
    runs that check it are indexed in ``data/campaigns.toml``)."""
    import os

    from studykit.measure.traces import has_device_activity

    os.environ.setdefault("TEARDOWN_CUPTI", "1")
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if d.device.type == "cuda" else [])
    rate = (_network() or {}).get("rate_gbps")
    name = (f"{cfg.model}_b{cfg.batch_size}_{cfg.mode}_{cfg.compressor or 'dense'}"
            + ("" if cfg.hook_coalesce_mb is None else f"_c{cfg.hook_coalesce_mb:g}")
            + ("" if cfg.hook_runner is None else f"_{cfg.hook_runner}")
            + ("" if rate is None else f"_{rate:g}G"))
    path = os.path.join(trace_dir, name + ".json.gz")  # gzipped by the profiler (.gz)
    for attempt in range(1, TRACE_TRIES + 1):
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(3):
                step()
            if d.device.type == "cuda":
                torch.cuda.synchronize(d.device)
        empty = 0.0
        if d.is_main:
            os.makedirs(trace_dir, exist_ok=True)
            prof.export_chrome_trace(path)
            empty = float(d.device.type == "cuda" and not has_device_activity(path))
        if not d.agree_max(empty):  # every rank profiles again, or none does
            return
        if d.is_main and attempt == TRACE_TRIES:
            os.remove(path)
            print(f"ddp: warning: the profiler recorded no device activity for {name} in {TRACE_TRIES} tries; "
                  f"its trace is not written", file=sys.stderr, flush=True)


def measure_bucket_times(cfg: _Config, d: Dist, base: torch.nn.Module, batch, *, n_iter: int = 5,
                         n_warmup: int = 2) -> dict:
    """Per-bucket ready times of one syncSGD configuration (the fields of a ``buckets`` record).

    A DDP comm hook stamps each bucket at hook entry, i.e. when DDP hands the bucket over because all
    its gradients are ready (and every earlier bucket has been handed over), relative to the call of
    ``loss.backward()``: the host clock, and a CUDA event on the current stream on GPUs (the device clock: the
    host runs ahead of the kernels; :class:`~studykit.measure.timing.StampClock`), then all-reduces the bucket
    as DDP's default hook does. ``n_warmup`` iterations first (DDP rebuilds its buckets after the first), then
    ``n_iter`` timed ones; each list holds the per-bucket median over them, in bucket index order
    (communication order). ``ready_fraction`` is ``ready / ready of the last bucket`` on the device
    clock where there is one (the last bucket is ready when the backward pass's compute ends)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    cuda = d.device.type == "cuda"
    net = copy.deepcopy(base)
    kw = {} if cfg.bucket_mb is None else {"bucket_cap_mb": cfg.bucket_mb}
    fwd = DDP(net, device_ids=[d.device.index] if cuda else None, **kw)
    st = {"t0": 0.0, "ev0": None, "marks": []}
    device_clock = StampClock(cuda=True)

    def hook(_state, bucket):
        t = host_ms(st["t0"], host_clock())
        ev = device_clock.now() if cuda else None
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
            st["ev0"] = device_clock.now()
        st["t0"] = host_clock()
        loss.backward()
        if cuda:
            torch.cuda.synchronize(d.device)
        bwd_ms.append(host_ms(st["t0"], host_clock())) if it >= n_warmup else None
        opt.step()
        if it < n_warmup:
            continue
        for idx, t, ev, nb in st["marks"]:
            host.setdefault(idx, []).append(t)
            nbytes[idx] = nb
            if ev is not None:
                dev.setdefault(idx, []).append(device_clock.span_ms(st["ev0"], ev))
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


def run_ddp(d: Dist, model_names: Sequence[str], specs: Sequence[CompressorSpec], writer: RecordWriter, *,
            batch_sizes: Optional[Sequence[int]] = None, modes: Sequence[str] = MODES,
            bucket_mbs: Sequence[float] = (), builtins: Sequence[str] = tuple(BUILTIN_HOOKS),
            seq_len: int = M.BERT_SEQ_LEN, n_iter: int = 50, n_warmup: int = 10, budget_s: Optional[float] = None,
            min_iter: int = 3, verbose: bool = True, bucket_times: bool = False,
            comms: Sequence[str] = ("collective",), switch_interval_ms: Optional[float] = None,
            hook_times: bool = False, hook_coalesce_mbs: Sequence[Optional[float]] = (None,),
            trace_dir: Optional[str] = None, broadcast_buffers: bool = True,
            hook_runners: Sequence[str] = ("thread",), bucket_view: bool = False,
            pair_hook_post: bool | str = False) -> int:
    """Time every configuration not yet in the file on every rank; rank 0 writes. Returns records written.
    ``bucket_times``: each syncSGD configuration also writes a ``buckets`` record (:func:`measure_bucket_times`);
    ``hook_times``: each hook configuration (overlapped and blocking) also writes a ``hook_times`` record
    (:func:`measure_hook_times`), also for a hook configuration timed by an earlier run without it;
    ``comms``: the communicators of the hook and post modes (module docstring). ``switch_interval_ms``:
    Python's GIL switch interval for the whole run (``sys.setswitchinterval``; None keeps Python's 5 ms).
    The hook's communication thread and the autograd thread that calls the hook share the GIL, so how
    often it changes hands may delay the hook's start on every bucket: this is the knob for an A/B.
    ``hook_coalesce_mbs``: each overlapped hook configuration once per value (None: a protocol per bucket;
    a number: :func:`studykit.ddp.register`'s ``coalesce_mb``); coalesced hooks write no ``hook_times``.
    ``hook_runners``: each overlapped, uncoalesced hook configuration once per runner (:func:`studykit.ddp.register`'s
    ``runner``; "thread", the default, keeps the identity of records written before runners existed).
    ``broadcast_buffers=False``: DDP without its buffer broadcast at every forward (``DDP(broadcast_buffers=
    False)``) in the syncSGD, built-in and hook configurations, each then a configuration of its own
    (``broadcast_buffers: false`` in its identity; post runs the plain model and does not change): the A/B of
    what DDP's forward costs the hooks beside post. BatchNorm statistics then stay per rank; ``buckets``
    records keep DDP's default, and such hooks are not stamped (``hook_times``). ``bucket_view=True`` likewise builds
    those configurations with ``DDP(gradient_as_bucket_view=True)`` (the gradients are views into DDP's buckets:
    no copy of the buckets' averages into them), ``gradient_as_bucket_view: true`` in their identity.
    ``pair_hook_post``: True or "configs", the order of :func:`plan_configs` (each compressor's hooks right after
    its post); "iterations", that order with each compressor's post and hooks also built side by side and timed
    iteration by iteration (:func:`_measure_together`: a slow spell longer than one configuration's run still falls
    on both sides of a hook / post ratio; the records name each other in ``timed_with``); False or "off": neither.
    Each ``ddp`` record names the fast path's choices rank 0 had made by its end (``picked``,
    :func:`studykit.compressors._fast.picks_since`): which method a codec's call, and so a captured hook, runs."""
    pair = {False: "off", True: "configs"}.get(pair_hook_post, pair_hook_post)
    if pair not in PAIRINGS:
        raise ValueError(f"pair_hook_post must be one of {', '.join(PAIRINGS)} (or a bool), got {pair_hook_post!r}")
    if switch_interval_ms is not None:
        if not 0 < switch_interval_ms <= 1000:
            raise ValueError(f"switch_interval_ms must be in (0, 1000] ms, got {switch_interval_ms}")
        sys.setswitchinterval(switch_interval_ms / 1e3)
    timing_kw = dict(n_iter=n_iter, n_warmup=n_warmup, budget_s=budget_s, min_iter=min_iter)
    done = d.broadcast_object(writer.done() if d.is_main else None)
    todo = [c for c in plan_configs(d, model_names, batch_sizes, specs, modes, bucket_mbs, builtins, seq_len, comms,
                                    switch_interval_ms, hook_coalesce_mbs, broadcast_buffers, hook_runners, bucket_view,
                                    pair != "off")
            if c.cid not in done or (hook_times and _stamped(c) and _hook_times_cid(c) not in done)]
    written = 0
    bases: dict = {}  # (model, batch size) -> (initial model, batch): every model stays resident
    main = verbose and d.is_main
    units = _together(todo, done, pair)
    for unit in progress(units, total=len(units), desc="ddp", enabled=main):
        if len(unit) == 1 and unit[0].cid in done:  # timed by an earlier run: only its hook_times record is missing
            written += _write_hook_times(unit[0], d, writer, bases, seq_len, timing_kw, main)
            continue
        for cfg, rec in zip(unit, _time_unit(unit, d, writer, bases, seq_len, timing_kw, trace_dir)):
            written += _written(cfg, rec, d, writer, bases, seq_len, timing_kw, main, done, bucket_times, hook_times)
    return written


def _time_unit(unit: list[_Config], d: Dist, writer: RecordWriter, bases: dict, seq_len: int, timing_kw: dict,
               trace_dir: Optional[str]) -> list[dict]:
    """The ``ddp`` records of a unit of :func:`_together` (ok, skipped or error; a unit fails as a whole)."""
    def rec(cfg, **kw):
        return make_record("ddp", cfg.cid, device=d.device, backend=d.backend, world_size=d.world_size,
                           **_record_fields(cfg, seq_len), **kw)

    if len(unit) == 1 and unit[0].mode == "builtin" and d.backend != "nccl":
        return [rec(unit[0], status="skipped", reason=BUILTIN_SKIP_REASON)]
    try:
        if len(unit) == 1:
            results = [_measure(unit[0], d, *_base(bases, unit[0], d, seq_len), timing_kw, trace_dir)]
        else:
            results = _measure_together(unit, d, bases, seq_len, timing_kw, trace_dir)
        picked = _fast.picks_since(set())
        return [rec(cfg, **result, picked=picked) for cfg, result in zip(unit, results)]
    except ModuleNotFoundError as exc:  # torchvision/transformers missing (same on every rank)
        return [rec(cfg, status="skipped", reason=str(exc)) for cfg in unit]
    except Exception as exc:  # noqa: BLE001
        out = [rec(cfg, status="error", reason=f"rank {d.rank}: {type(exc).__name__}: {exc}"[:500]) for cfg in unit]
        for cfg, r in zip(unit, out):
            _failed(writer, d, r, f"{cfg.model} {cfg.mode} {cfg.compressor}")
        return out


def _written(cfg: _Config, rec: dict, d: Dist, writer: RecordWriter, bases: dict, seq_len: int, timing_kw: dict,
             main: bool, done: set, bucket_times: bool, hook_times: bool) -> int:
    """Write ``cfg``'s ``ddp`` record ``rec``, report it, and add its ``buckets`` and ``hook_times`` records where
    asked for. Returns the records written."""
    written = 0
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
    if hook_times and _stamped(cfg) and rec["status"] == "ok" and _hook_times_cid(cfg) not in done:
        written += _write_hook_times(cfg, d, writer, bases, seq_len, timing_kw, main)
    return written


def _stamped(cfg: _Config) -> bool:
    """Whether ``--hook-times`` stamps ``cfg`` bucket by bucket (hooks that run a protocol per bucket, in DDP as
    it comes, on the communication thread: the stamping run keeps DDP's buffer broadcast)."""
    return (cfg.mode == "hook" and cfg.hook_coalesce_mb is None and cfg.broadcast_buffers is None
            and cfg.hook_runner is None and cfg.bucket_view is None)


def _record_fields(cfg: _Config, seq_len: int) -> dict:
    """The fields a ``ddp`` record (and its ``hook_times`` record) carries about its configuration."""
    return {"model": cfg.model, "batch_size": cfg.batch_size, "mode": cfg.mode, "compressor": cfg.compressor,
            "params": cfg.params, "bucket_mb": cfg.bucket_mb, "seq_len": M.seq_len_of(cfg.model, seq_len),
            "optimizer": OPTIMIZER, "hook_overlap": cfg.hook_overlap, "comm": cfg.comm,
            "hook_coalesce_mb": cfg.hook_coalesce_mb, "broadcast_buffers": cfg.broadcast_buffers,
            "hook_runner": cfg.hook_runner, "gradient_as_bucket_view": cfg.bucket_view,
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
