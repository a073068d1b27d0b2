"""``python -m studykit bench``: compressors against the memory floor, DDP hooks against PyTorch's.

Usage (codecs on one card, DDP on two)::

    python -m studykit bench --overwrite-committed --out-dir data/benchmarks/h200          # codecs only, one GPU
    torchrun --standalone --nproc-per-node 2 -m studykit bench --ddp --overwrite-committed --out-dir data/benchmarks/h200x2 --overwrite

Codecs (rank 0, one card): every registered compressor's encode+decode on the *flat*
ResNet-50 gradient (25.6M fp32 elements, one tensor) beside the memory floor -- one read and
one write of that fp32 gradient at the copy bandwidth measured in the same run
(:func:`studykit.measure.profile.measure_copy_bandwidth`). Phases (all at world size 1, so
collectives are identities and only compute is timed):

* ``encdec``: ``compressor.reduce(flat)`` with error feedback off: the whole codec protocol
  (encode, decode, the protocol's own passes); the number the targets are judged on;
* ``encode`` / ``decode``: the two halves apart, for single-round codecs
  (:func:`studykit.measure.profile.single_round`);
* ``default``: the registered default (error feedback on where the method's convention is),
  i.e. what a training run pays;
* low-rank methods (PowerSGD, ATOMO) are timed on the model's real parameter shapes
  (``layout`` ``per_tensor``): on one flat vector they would have no matrix to factor.

With ``--reference`` every codec is timed again with ``STUDYKIT_FAST=0`` (plain PyTorch, the
fused GPU kernels of :mod:`studykit.compressors._fast` off): before/after in one run. Each
record also has ``host_ms`` (Python + launch time per call, no synchronisation: when it is
close to ``ms_median`` the codec is launch-bound) and ``kernels`` (device kernels per call,
from the profiler), the two numbers behind "kernel count x launch overhead". Records are
written as each codec is timed (a run cut by a deadline keeps them); the profiler runs after
all timings, so the kernel counts follow as records of kind ``kernels`` (``of_config`` names
the timing record; :func:`attach_kernels`; older records carry ``kernels`` inline).

How each codec is timed (:class:`RepPolicy`; the repetition policy of
:mod:`studykit.measure.timing`): ``--warmup`` untimed calls (after two settling calls), then
at least ``--min-reps`` repetitions (100) *and* at least ``--min-time-s`` seconds (1 s) of timed
calls, whichever is more, capped at ``--budget-s`` seconds (30) per configuration; before each
repetition a 256 MiB buffer is written (``--l2-flush-mib``; L2 flushed, as
``triton.testing.do_bench`` does; on CPU no flush by default: ``--l2-flush-mib 64`` flushes a
buffer larger than the last-level cache, at about 10 ms of untimed work per repetition); CUDA
events on a GPU; with ``--host-ahead`` each repetition's device time with the host ahead of the
GPU (:class:`RepPolicy`: the event timing of a host-bound codec is its host's launch gaps).
Records carry the median, the interquartile range (``ms_q25``, ``ms_q75``),
``n_iter``, the policy (``min_reps``, ``min_time_s``, ``budget_s``, ``l2_flush_bytes``,
``timer``), ``reps_capped`` (true where the budget stopped it short of the policy),
``loadavg_1m`` (the machine's load when it was timed: a busy shared CPU explains noise), the memory
floor of the codec's input (``floor_ms``) and ``x_floor``. The kit's commit is stamped from
``git`` or, in a checkout without ``.git``, from ``STUDYKIT_GIT_COMMIT`` (pass it in; the run
warns when neither is there). Records written before this policy (3-50 iterations, no flush, no
quartiles) stay readable: the new fields are simply absent.

The codecs' speed targets (:data:`SPEED_TARGETS`) are judged by :func:`speed_targets` on
:func:`compare_runs` of one or two runs (``benchmarks/codec_repeat.py`` times every codec twice
in one process and prints both medians, their ratio and the verdicts).

DDP (``--ddp``; every rank): iteration time of syncSGD, the kit's hooks and PyTorch's
built-in hooks for each model through :func:`studykit.measure.ddp.run_ddp` (the same code
as ``python -m studykit ddp``): ``--ddp-warmup`` discarded and ``--ddp-iters`` timed iterations per
configuration (5 + 20 by default: about 2.5 minutes for the four models on two GPUs).

Records (JSON Lines, provenance-stamped by :mod:`studykit.measure.records`) go to
``OUT_DIR/codecs.jsonl`` and ``OUT_DIR/ddp.jsonl``; ``OUT_DIR/summary.csv`` and
``OUT_DIR/summary.md`` hold :func:`summarize`, which also reads the committed
``data/measurements/gpu/*.jsonl`` (``python -m studykit bench --summary FILES``).
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Optional, Sequence

import torch

from studykit import compressors as C
from studykit import models as M
from studykit import argtypes, paths
from studykit.comm import LocalComm
from studykit.compressors import _fast, fastpath
from studykit.measure.profile import (_plan, _timed_call, effective_params, measure_copy_bandwidth, memory_floor_ms,
                                      single_round)
from studykit.measure.records import (RecordError, RecordWriter, config_id, load_records, loadavg_1m, make_record,
                                      provenance)
from studykit.measure.runtime import CompressorSpec, note, parse_compressor_specs
from studykit.measure.timing import L2_FLUSH_BYTES, MIN_REPS, MIN_TIME_S, HostSyncCall, time_fn

if TYPE_CHECKING:  # pandas is imported where a table is built
    import pandas

__all__ = ["TARGETS", "ELEMENTWISE", "TOPK_FAMILY", "PHASES", "RepPolicy", "SpeedTarget", "SPEED_TARGETS",
           "AGREE_TOL", "attach_kernels", "count_kernels", "summarize", "run_codecs", "split_repeats", "compare_runs",
           "compare_markdown", "speed_targets", "speed_targets_markdown", "start", "records_of", "write_report",
           "add_json_output_args", "json_output_from_args", "write_json", "main"]

#: the benchmark's codec groups and the limits it reports them against
ELEMENTWISE, TOPK_FAMILY, LOW_RANK = (C.in_group(g) for g in ("elementwise", "topk", "lowrank"))  # class metadata
TARGETS = {
    "elementwise": "encode+decode of the flat ResNet-50 gradient <= 3x the memory floor",
    "topk": "encode+decode of the flat ResNet-50 gradient <= 10x the memory floor",
    "powersgd": "PowerSGD rank 4 encode+decode on ResNet-50's matrices < 3 ms",
    "ddp_powersgd": "2-GPU DDP iteration with the kit's PowerSGD rank-4 hook <= 1.2x syncSGD (ResNet-50, batch 64)",
    "ddp_half": "kit fp16/bf16 hook no slower than PyTorch's fp16/bf16 hook",
}
#: ddp hooks timed by default (the targets' ones); --ddp-compressors all adds the rest
DDP_SPECS = ("none", "fp16", "bf16", "powersgd:rank=4")
DDP_MODELS = ("resnet50", "resnet101", "bert_base", "vgg19")
#: codec phases (see the module docstring); --phases picks some
PHASES = ("encdec", "encode", "decode", "default")
#: seconds of timed calls one codec configuration may take at most (ATOMO's exact SVD is slow enough to need a cap)
BUDGET_S = 30.0
#: raw per-repetition times kept in a record up to this many (a 0.05 ms codec runs 20,000 repetitions
#: in its second; their statistics are in the record, the list itself would be 400 kB a line)
RAW_TIMES_MAX = 1000


@dataclass(frozen=True)
class RepPolicy:
    """How many times, and how, each codec is timed: ``n_warmup`` untimed calls,
    then at least ``min_reps`` repetitions and at least ``min_time_s`` seconds of timed calls,
    whichever is more, at most ``budget_s`` seconds; ``flush_bytes`` written before each repetition
    (None: :data:`~studykit.measure.timing.L2_FLUSH_BYTES` on CUDA, none on CPU). ``host_ahead``
    (CUDA only): each repetition's *device* time with the host ahead of the GPU
    (:class:`studykit.measure.timing._Clock`): without it, a codec whose host needs longer to launch
    its kernels than the GPU needs to run them is timed by the host's launch gaps, which vary from run
    to run on a shared machine."""

    min_reps: int = MIN_REPS
    min_time_s: float = MIN_TIME_S
    budget_s: float | None = BUDGET_S
    n_warmup: int = 10
    flush_bytes: int | None = None
    host_ahead: bool = False

    def __post_init__(self):
        if self.min_reps < 1:
            raise ValueError(f"RepPolicy: min_reps must be >= 1, got {self.min_reps}")
        if not self.min_time_s >= 0:
            raise ValueError(f"RepPolicy: min_time_s must be >= 0, got {self.min_time_s}")
        if self.budget_s is not None and not self.budget_s >= self.min_time_s:
            raise ValueError(f"RepPolicy: budget_s ({self.budget_s}) caps the timed seconds of a configuration "
                             f"and must be >= min_time_s ({self.min_time_s})")
        if self.n_warmup < 1:
            raise ValueError(f"RepPolicy: n_warmup must be >= 1 (the per-call estimate), got {self.n_warmup}")
        if self.flush_bytes is not None and self.flush_bytes < 0:
            raise ValueError(f"RepPolicy: flush_bytes must be >= 0, got {self.flush_bytes}")

    def flush_for(self, device) -> int:
        if self.flush_bytes is not None:
            return int(self.flush_bytes)
        return L2_FLUSH_BYTES if torch.device(device).type == "cuda" else 0

    def timing_kw(self, device) -> dict:
        """Keyword arguments of :func:`~studykit.measure.timing.time_fn` for this policy."""
        return {"n_iter": self.min_reps, "n_warmup": self.n_warmup, "budget_s": self.budget_s,
                "min_time_s": self.min_time_s, "flush_bytes": self.flush_for(device), "min_iter": 3,
                "host_ahead": self.host_ahead}

    def fields(self, device) -> dict:
        """The policy as record fields."""
        return {"min_reps": self.min_reps, "min_time_s": self.min_time_s, "budget_s": self.budget_s,
                "l2_flush_bytes": self.flush_for(device),
                "timer": self.timer(device)}

    def timer(self, device) -> str:
        """The record's ``timer``: ``cuda_events``, ``cuda_events_host_ahead`` or ``perf_counter``."""
        if torch.device(device).type != "cuda":
            return "perf_counter"
        return "cuda_events_host_ahead" if self.host_ahead else "cuda_events"

    def capped(self, timing) -> bool:
        """Whether ``timing`` stopped short of the policy (the budget bound it)."""
        return bool(timing.n_iter < self.min_reps or math.fsum(timing.times_ms) < self.min_time_s * 1e3 * (1 - 1e-9))


@dataclass(frozen=True)
class SpeedTarget:
    """One codec speed target: encode+decode (phase ``encdec``, fused path) of ``compressors``
    on one H100/H200, at most ``limit`` in ``unit`` (``x_floor``: multiples of the memory floor;
    ``ms``). ``params``: what a record must have to be judged (e.g. PowerSGD's rank)."""

    key: str
    compressors: tuple
    limit: float
    unit: str
    text: str
    params: tuple = ()


#: the codec speed targets, on the flat ResNet-50 gradient (low-rank codecs on its real shapes): the one copy
SPEED_TARGETS = (
    SpeedTarget("elementwise", ("fp16", "bf16", "signsgd", "ef_signsgd", "qsgd", "terngrad", "natural", "quantize"),
                2.0, "x_floor", "elementwise codecs (quantize at every b) <= 2x the memory floor"),
    SpeedTarget("thc", ("thc",), 4.0, "x_floor", "THC <= 4x the floor (a fused fast Walsh-Hadamard transform per chunk)"),
    SpeedTarget("topk", ("topk", "topk_chunked", "topk_chunked_allreduce", "dgc", "randomk"), 5.0, "x_floor",
                "topk, topk_chunked (both protocols, the all-reduce one included), dgc, randomk <= 5x the floor"),
    SpeedTarget("mstopk", ("mstopk",), 10.0, "x_floor", "mstopk <= 10x the floor"),
    SpeedTarget("powersgd", ("powersgd",), 1.5, "ms", "PowerSGD rank 4 on ResNet-50's real shapes <= 1.5 ms",
                params=(("rank", 4),)),
    SpeedTarget("atomo", ("atomo",), 20.0, "ms", "ATOMO <= 20 ms (batched or randomized SVD)"),
)
#: repeatability target: two runs on the same kind of card agree within 10 % for every codec
AGREE_TOL = 0.10
#: the targets are set on this gradient, on a GPU
TARGET_MODEL = "resnet50"


# ====================================================================== codecs
def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)


@contextlib.contextmanager
def _fast_paths(on: bool):
    """``STUDYKIT_FAST`` set for the block (the fused kernels read it on every call)."""
    old = os.environ.get("STUDYKIT_FAST")
    os.environ["STUDYKIT_FAST"] = "1" if on else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("STUDYKIT_FAST", None)
        else:
            os.environ["STUDYKIT_FAST"] = old


def _host_ms(fn, device: torch.device, reps: int = 20) -> float:
    """Mean wall time of a call *without* synchronising: the host's side (Python, dispatch,
    launches). On a GPU, a codec whose host time is close to its device time is launch-bound."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    ms = (time.perf_counter() - t0) / reps * 1e3
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return ms


def _settle(fn, device: torch.device) -> None:
    """Two untimed calls before timing: Triton compiles a kernel on its first launch and
    :func:`studykit.compressors._fast.pick` times its candidates once, both far longer than a
    call; left in, they would make ``time_fn``'s per-call estimate far too high."""
    for _ in range(2):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn, device: torch.device, policy: RepPolicy):
    """``(timing, timer)``: ``fn`` timed by ``policy``. With ``host_ahead``, a call that waits for the GPU
    (:class:`~studykit.measure.timing.HostSyncCall`: the fused radix top-k reads a count back) cannot have
    the host ahead of it; it is timed with plain CUDA events instead, and its ``timer`` says so."""
    try:
        return time_fn(fn, device=device, **policy.timing_kw(device)), policy.timer(device)
    except HostSyncCall:
        return time_fn(fn, device=device, **dict(policy.timing_kw(device), host_ahead=False)), "cuda_events_host_sync"


def _kernels(fn, device: torch.device) -> Optional[int]:
    """Device kernels (and memsets/copies) one call launches, from torch.profiler; None on CPU."""
    if device.type != "cuda":
        return None
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize(device)
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    except Exception:  # noqa: BLE001 - a profiler problem must not stop the benchmark
        return None


def _group(name: str) -> str:
    return C.metadata(name).bench_group if name in C.available() else "dense"


def _codec_plan(specs: Sequence[CompressorSpec], split: bool,
                phases: Sequence[str] = PHASES) -> list[tuple[CompressorSpec, str, str]]:
    """(spec, phase, layout) to time, in order (only ``phases``; encode/decode only with ``split``)."""
    bad = sorted(set(phases) - set(PHASES))
    if bad:
        raise ValueError(f"phases {bad} are not bench phases; valid: {', '.join(PHASES)}")
    out = []
    for spec in specs:
        layout = "per_tensor" if spec.name in LOW_RANK else "flat"
        plain = C.get(spec.name, allow_nonfinite=True, **_no_ef(spec))
        if "encdec" in phases:
            out.append((spec, "encdec", layout))
        if split and layout == "flat" and single_round(plain):
            out += [(spec, ph, layout) for ph in ("encode", "decode") if ph in phases]
        if "default" in phases and C.get(spec.name, allow_nonfinite=True, **spec.kwargs).error_feedback:
            out.append((spec, "default", layout))
    return out


def _no_ef(spec: CompressorSpec) -> dict:
    """The spec's parameters with error feedback off (a generic parameter of every compressor)."""
    return dict(spec.kwargs, error_feedback=False)


#: codecs with a fused-kernel path (the others run the same code with --reference): read from the overrides
FAST_CODECS = fastpath.accelerated()


def codec_inputs(shapes: Sequence[tuple], device) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The gradient every codec is timed on: ``(flat, per_tensor)``, one fp32 vector of the shapes' elements
    (seeded normal values) and the same values as separate tensors of ``shapes`` (the low-rank codecs' layout)."""
    numel = sum(math.prod(s) for s in shapes)
    gen = torch.Generator(device=device).manual_seed(0)
    flat = torch.randn(numel, generator=gen, device=device)
    per_tensor = list(flat.split([math.prod(s) for s in shapes]))
    return flat, [p.view(s).clone() for p, s in zip(per_tensor, shapes)]  # separate tensors, like real grads


def encdec_call(spec: CompressorSpec, flat: torch.Tensor, per_tensor: list[torch.Tensor]):
    """``(compressor, layout, fn)``: the call the ``encdec`` phase times, ``compressor.reduce`` of the flat
    gradient (of ``per_tensor`` for the low-rank codecs) at world size 1, error feedback off."""
    layout = "per_tensor" if spec.name in LOW_RANK else "flat"
    comp = C.get(spec.name, allow_nonfinite=True, **_no_ef(spec))
    return comp, layout, _reduce_call(comp, [flat] if layout == "flat" else per_tensor)


def _reduce_call(comp, grads: list[torch.Tensor]) -> Callable[[], object]:
    """One ``comp.reduce`` of ``grads`` at world size 1 (a :class:`LocalComm` of its own), as timed and profiled."""
    comm = LocalComm()
    return lambda: comp.reduce(grads, comm, key=0)


def kernel_times(fn: Callable[[], object], device, *, reps: int = 20, flush_bytes: int = L2_FLUSH_BYTES) -> list[dict]:
    """What each device kernel of one call of ``fn`` costs: ``reps`` calls under ``torch.profiler`` (CUDA
    activity), each after a write of ``flush_bytes`` (L2 flushed, as the timings do); per kernel of the call,
    in launch order, its name and its median and minimum device time over the calls (``us_median``,
    ``us_min``). The sum of the medians is what the kernels alone cost: a bound below the timed call, whose
    excess is launch gaps and waits. Memsets and copies count as kernels. CUDA only; raises ValueError
    when the calls do not launch the same kernels in the same order (a codec that alternates, e.g. PowerSGD
    with ``reuse``). Profile after every timing: the profiler slows every later launch (see
    :func:`run_codecs`)."""
    from torch.profiler import ProfilerActivity, profile

    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"kernel_times needs a CUDA device (the profiler's device times), got {device}")
    if reps < 1:
        raise ValueError(f"kernel_times: reps must be >= 1, got {reps}")
    flush = torch.empty(max(1, flush_bytes // 4), dtype=torch.int32, device=device)
    _settle(fn, device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            flush.fill_(1)
            fn()
        torch.cuda.synchronize(device)
    events = [(e.time_range.start, e.time_range.elapsed_us(), e.name) for e in prof.events()
              if e.device_type == torch.autograd.DeviceType.CUDA]
    return split_calls(events, reps)


def split_calls(events: Sequence[tuple], reps: int) -> list[dict]:
    """:func:`kernel_times`' device events ``(start_us, duration_us, name)`` of ``reps`` rounds of (one flush
    kernel, one call) -> per kernel of the call, in order: ``{"name", "us_median", "us_min"}``."""
    import statistics

    ev = sorted(events)
    if not ev or len(ev) % reps:
        raise ValueError(f"split_calls: {len(ev)} device events are not {reps} equal rounds of a flush and a call")
    per = len(ev) // reps
    rounds = [ev[i * per:(i + 1) * per] for i in range(reps)]
    names = [e[2] for e in rounds[0]]
    for i, r in enumerate(rounds[1:], 2):
        if [e[2] for e in r] != names:
            raise ValueError(f"split_calls: call {i} launched other kernels than call 1 (a codec whose calls "
                             f"differ cannot be split into per-kernel times)")
    return [{"name": names[j], "us_median": statistics.median(r[j][1] for r in rounds),
             "us_min": min(r[j][1] for r in rounds)} for j in range(1, per)]  # position 0: the flush


def run_codecs(specs: Sequence[CompressorSpec], writer: RecordWriter, *, device: torch.device,
               model: str = "resnet50", policy: RepPolicy | None = None,
               reference: bool = False, split: bool = True, extras: bool = True, phases: Sequence[str] = PHASES,
               copy_bytes: int | None = None, repeat: int | None = None, kernels: bool | None = None,
               deferred: list | None = None, verbose: bool = True) -> int:
    """Time every codec of ``specs`` on ``model``'s flat gradient (low-rank ones on its real
    shapes) beside the memory floor, each by ``policy`` (:class:`RepPolicy`); returns records
    written. Resumes: configurations whose ``config_id`` is in ``writer``'s file are skipped.
    ``repeat`` (1, 2, ...) tags a repeated run of the same configurations in one file (part of
    the ``config_id``; ``benchmarks/codec_repeat.py``). ``kernels``: count each codec's device
    kernels with the profiler after all timings (default: on CUDA only). ``deferred``: a list that
    collects the calls to count instead, for :func:`count_kernels` after *every* timing of a caller
    that calls this function more than once (the profiler slows every later launch: see below)."""
    device = torch.device(device)
    policy = policy if policy is not None else RepPolicy()
    timing_kw = policy.timing_kw(device)
    done = writer.done()
    written = 0
    dev_type = device.type
    want_counts = dev_type == "cuda" if kernels is None else kernels
    if provenance(device)["git_commit"] == "unknown":
        print("bench: WARNING the kit's commit is unknown (no .git here): records will say git_commit 'unknown'; "
              "set STUDYKIT_GIT_COMMIT=<sha> to stamp them", file=sys.stderr, flush=True)

    copy_bytes = copy_bytes or (256 * 2**20 if dev_type == "cuda" else 64 * 2**20)
    if policy.host_ahead and dev_type != "cuda":
        raise ValueError(f"host-ahead timing needs a CUDA device, got {device} (drop --host-ahead on a CPU)")
    ahead = policy.timer(device) if policy.host_ahead else None  # in the config_id: another timing, another config
    copy_cid = config_id(kind="copy_bw", size_bytes=copy_bytes, device_type=dev_type, repeat=repeat, timer=ahead)
    earlier = [r for r in load_records(writer.path, kind="copy_bw", missing_ok=True, quiet=True)
               if r.get("config_id") == copy_cid and r.get("status") == "ok"] if copy_cid in done else []
    if earlier:  # a resumed (or split) run: the floor of this repeat was measured already, in this file
        copy_gbps = float(earlier[0]["copy_GBps"])
    else:
        t, copy_gbps = measure_copy_bandwidth(device, copy_bytes, **timing_kw)
        copy_rec = make_record("copy_bw", copy_cid, device=device, timing=t, size_bytes=copy_bytes,
                               copy_GBps=copy_gbps, repeat=repeat, reps_capped=policy.capped(t), **policy.fields(device))
        if t.n_iter > RAW_TIMES_MAX:
            copy_rec["times_ms"] = None
        writer.write(copy_rec)
        written += 1
    shapes = [tuple(s) for s in M.param_shapes(model)]
    numel = sum(math.prod(s) for s in shapes)
    floor_ms = memory_floor_ms(numel, copy_gbps)
    note(f"bench: copy bandwidth {copy_gbps:.0f} GB/s -> floor for {model} ({numel} fp32) {floor_ms:.4f} ms; "
         f"fused kernels {'available' if _fast.HAVE_TRITON and dev_type == 'cuda' else 'not available'}; "
         f">= {policy.min_reps} reps and >= {policy.min_time_s:g} s per codec (budget {policy.budget_s} s), "
         f"flush {policy.flush_for(device) / 2**20:g} MiB before each", verbose)

    flat, per_tensor = codec_inputs(shapes, device)

    variants = [True, False] if reference else [True]
    pending: list = []  # (record, fast, function): kernels are counted after all timings
    base = dict(model=model, numel=numel, grad_bytes=4 * numel, floor_bytes=8 * numel, copy_GBps=copy_gbps,
                floor_ms=floor_ms, sim_world_size=1, repeat=repeat, **policy.fields(device))
    for fast in variants:
        for spec, phase, layout in _codec_plan(specs, split, phases):
            if not fast and (spec.name not in FAST_CODECS or phase in ("encode", "decode")):
                continue  # nothing to compare: no fused path
            kwargs = spec.kwargs if phase == "default" else _no_ef(spec)
            comp = C.get(spec.name, allow_nonfinite=True, **kwargs)
            params = effective_params(comp)
            mode = f"{layout}:{'fast' if fast else 'reference'}"
            cid = config_id(kind="bench", model=model, compressor=spec.name, params=params, phase=phase,
                            mode=mode, device_type=dev_type, repeat=repeat, timer=ahead)
            if cid in done:
                continue
            grads = [flat] if layout == "flat" else per_tensor
            wire, ratio = _plan(comp, [flat.shape] if layout == "flat" else shapes)
            fields = dict(base, compressor=spec.name, params=params, phase=phase, layout=layout, mode=mode,
                          fast=bool(fast and _fast.HAVE_TRITON and dev_type == "cuda"), group=_group(spec.name),
                          wire_bytes=wire, ratio=ratio, allreduce_compatible=bool(comp.allreduce_compatible))
            fn = None
            try:
                with _fast_paths(fast):
                    if phase in ("encdec", "default"):
                        fn = _reduce_call(comp, grads)
                    else:
                        fn = _timed_call(comp, phase, grads, 1)
                    _settle(fn, device)  # kernel compilation and the fast paths' one-time choices
                    t, timer = _time(fn, device, policy)
                    host = _host_ms(fn, device, reps=max(2, min(20, int(200 / max(t.ms_median, 0.01)))))
                rec = _bench_record(cid, device=device, timing=t, policy=policy, host_ms=host, kernels=None,
                                    **dict(fields, timer=timer))
            except Exception as exc:  # noqa: BLE001 - one codec failing must not stop the run
                if dev_type == "cuda":
                    torch.cuda.empty_cache()
                rec = make_record("bench", cid, device=device, status="error",
                                  reason=f"{type(exc).__name__}: {exc}"[:500], **fields)
            writer.write(rec)  # streamed: a run cut by a deadline keeps every codec it timed
            written += 1
            if rec["status"] == "ok" and want_counts:
                pending.append((rec, fast, fn))
            fn = None
            if dev_type == "cuda":  # every codec starts from the same allocator state, not the last one's leftovers
                torch.cuda.empty_cache()
            if rec["status"] == "ok":
                note(f"{spec.name:>13} {phase:<8} {mode:<21} {_stats(rec)}  x{rec['x_floor']:6.1f} floor"
                     f"  host {rec['host_ms']:.3f} ms", verbose)
            else:
                note(f"{spec.name:>13} {phase:<8} {mode:<21} ERROR {rec['reason'][:100]}", verbose)
    comps = _components(flat, device, base, policy, done, writer, verbose) if extras else []
    written += len(comps)
    # The profiler goes last: once CUPTI is attached, every later launch costs more host time,
    # which would inflate the timings of launch-bound codecs measured after it (PyTorch does not
    # detach CUPTI when a profile ends: https://github.com/pytorch/pytorch/issues/144455; a timing
    # pass after a profiled one runs launch-bound codecs such as PowerSGD markedly slower).
    # Its counts are records of their own (kind "kernels"),
    # attached to the timings by attach_kernels.
    todo = pending + (comps if want_counts else [])
    if deferred is not None:
        deferred.extend((item, device) for item in todo)
        return written
    return written + count_kernels([(item, device) for item in todo], writer)


def count_kernels(items: Sequence, writer: RecordWriter) -> int:
    """Write one ``kernels`` record per ``((record, fast, fn), device)`` of ``items`` (the calls
    :func:`run_codecs` timed, or collected in its ``deferred``): the device kernels one call of
    ``fn`` launches, counted with the profiler. Call it after every timing: see :func:`run_codecs`."""
    written = 0
    for (rec, fast, fn), device in items:
        with _fast_paths(fast):
            n = _kernels(fn, device)
        ident = {k: rec.get(k) for k in ("model", "compressor", "params", "phase", "mode", "repeat")}
        writer.write(make_record("kernels", config_id(kind="kernels", device_type=torch.device(device).type, **ident),
                                 device=device, kernels=n, of_config=rec["config_id"], **ident))
        written += 1
    return written


def attach_kernels(records: Iterable[dict]) -> list[dict]:
    """The records with each bench record's ``kernels`` filled from the ``kernels`` record of its
    configuration (``of_config``; the profiler runs after all timings, so the counts come last)."""
    records = list(records)
    counts = {r.get("of_config"): r.get("kernels") for r in records if r.get("kind") == "kernels"}
    out = []
    for r in records:
        if r.get("kind") == "bench" and r.get("kernels") is None and r.get("config_id") in counts:
            r = dict(r, kernels=counts[r["config_id"]])
        out.append(r)
    return out


def _bench_record(cid: str, *, device, timing, policy: RepPolicy, **fields) -> dict:
    """A bench record: ``timing``'s statistics, the policy and whether it was met, ``x_floor``; the
    raw times only up to :data:`RAW_TIMES_MAX` repetitions (``times_ms`` null beyond)."""
    rec = make_record("bench", cid, device=device, timing=timing, x_floor=timing.ms_median / fields["floor_ms"],
                      reps_capped=policy.capped(timing), loadavg_1m=loadavg_1m(), **fields)
    if timing.n_iter > RAW_TIMES_MAX:
        rec["times_ms"] = None
    return rec


def _stats(rec: dict) -> str:
    """``median ms [q25-q75] n=N`` of a record (the IQR where the record has one)."""
    iqr = f" [{rec['ms_q25']:.4f}-{rec['ms_q75']:.4f}]" if rec.get("ms_q25") is not None else ""
    return f"{rec['ms_median']:8.4f} ms{iqr} n={rec['n_iter']}"


def _components(flat, device, base, policy, done, writer, verbose) -> list:
    """Building blocks behind the explanations: torch.topk alone, one MSTopK counting pass,
    a plain elementwise pass (x * 2), max |g| (one read, reduced) and an empty launch; written as timed, returns
    (record, True, function) for the kernel counts."""
    numel = flat.numel()
    k = max(1, math.ceil(0.01 * numel))
    mag = flat.abs()
    mid = mag.mean()
    chunks = -(-numel // 4096)
    rows = torch.nn.functional.pad(flat, (0, chunks * 4096 - numel)).view(chunks, 4096).abs()
    tiny = torch.zeros(1, device=device)
    from studykit.compressors.thc import rotate, unrotate

    size = 1 << max(numel - 1, 0).bit_length()  # THC's full rotation: the next power of two
    padded = torch.nn.functional.pad(flat, (0, size - numel)).view(1, size)
    parts = {
        "THC rotate (full, 2^k padded)": lambda: rotate(padded),
        "THC rotate + unrotate (full)": lambda: unrotate(rotate(padded), 1, size),
        "torch.topk(|g|, 1%)": lambda: torch.topk(mag, k, sorted=False),
        "torch.topk rows 4096, k=41": lambda: torch.topk(rows, 41, dim=1, sorted=False),
        "one count pass (|g| >= t).sum()": lambda: (mag >= mid).sum(dtype=torch.int32),
        "elementwise pass g * 2": lambda: flat * 2,
        # quantize's and TernGrad's round 1 (their fast path's _fast.abs_max): one read of g, reduced
        "max |g|, torch.linalg.vector_norm(g, inf)": lambda: torch.linalg.vector_norm(flat, float("inf")),
        "fused-kernel radix select top-k (1%)": (lambda: _fast._radix_topk(flat, k)) if _fast.enabled(flat) else None,
        "empty launch (1-element add)": lambda: tiny.add_(1),
    }
    out = []
    for label, fn in parts.items():
        if fn is None:
            continue
        cid = config_id(kind="bench", model=base["model"], compressor=None, phase="component:" + label,
                        device_type=device.type, repeat=base["repeat"],
                        timer=policy.timer(device) if policy.host_ahead else None)
        if cid in done:
            continue
        _settle(fn, device)
        t, timer = _time(fn, device, policy)
        rec = _bench_record(cid, device=device, timing=t, policy=policy, host_ms=_host_ms(fn, device), kernels=None,
                            **dict(base, phase="component:" + label, layout="flat", group="component", timer=timer))
        writer.write(rec)
        out.append((rec, True, fn))
        note(f"{'component':>13} {label:<34} {_stats(rec)}  x{rec['x_floor']:6.1f} floor", verbose)
    return out


# ====================================================================== summary
def _params_str(p) -> str:
    if not p:
        return ""
    if isinstance(p, str):
        return p
    return ",".join(f"{k}={v}" for k, v in sorted(p.items()))


def _is_default(name: str, params: dict) -> bool:
    """Whether ``params`` are the registered defaults of ``name`` (error_feedback aside)."""
    try:
        ref = effective_params(C.get(name))
    except Exception:  # noqa: BLE001
        return False
    a = {k: v for k, v in (params or {}).items() if k != "error_feedback"}
    b = {k: v for k, v in ref.items() if k != "error_feedback" and k in a}  # parameters added since: default
    return a == b


def _codec_target(name: str, params: dict) -> tuple[Optional[str], Optional[float], str]:
    """(target key, limit, unit) for a codec row."""
    if name in ELEMENTWISE:
        return "elementwise", 3.0, "x_floor"
    if name in TOPK_FAMILY:
        return "topk", 10.0, "x_floor"
    if name == "powersgd" and (params or {}).get("rank") == 4:
        return "powersgd", 3.0, "ms"
    return None, None, ""


def summarize(records: Iterable[dict]) -> pandas.DataFrame:
    """One row per measured codec or DDP configuration, with the ratios the targets use and
    pass/fail per target.

    Reads bench records (``kind`` bench: codecs on the flat gradient; ddp) and the committed
    measurement records (``kind`` profile: per-tensor ``reduce``/``encode``/``decode`` with
    ``floor_ms``; ddp), so ``summarize(load_records("data/measurements/gpu"))`` works too.
    Columns: ``section`` (codec | ddp), ``source``, ``model``, ``compressor``, ``params``,
    ``phase``, ``layout``, ``impl`` (fast | reference | kit for older records), ``ms``
    (median), ``floor_ms``, ``x_floor`` (ms / floor), ``host_ms``, ``kernels``; for DDP
    ``world_size``, ``batch_size``, ``mode``, ``syncsgd_ms``, ``x_syncsgd`` (ms / syncSGD of
    the same model, batch and world size), ``peer``, ``peer_ms``, ``x_peer`` (kit hook / the
    PyTorch hook it competes with); then ``target``, ``limit`` and ``passed`` (None where no
    target applies or it cannot be judged).
    """
    import pandas as pd

    records = [r for r in attach_kernels(records) if r.get("status") == "ok"]
    rows = []
    for r in records:
        kind = r.get("kind")
        if kind not in ("bench", "profile"):
            continue
        phase = r.get("phase") or ""
        layout = r.get("layout") or ("per_tensor" if kind == "profile" else "flat")
        mode = r.get("mode") or ""
        impl = mode.split(":")[1] if ":" in mode else "kit"
        name = r.get("compressor")
        params = r.get("params") or {}
        row = dict(section="codec", source=kind, gpu=r.get("gpu"), torch=r.get("torch"), model=r.get("model"),
                   compressor=name, params=_params_str(params), phase=phase, layout=layout, impl=impl,
                   ms=r.get("ms_median"), floor_ms=r.get("floor_ms"), host_ms=r.get("host_ms"),
                   kernels=r.get("kernels"), target=None, limit=None, passed=None)
        row["x_floor"] = row["ms"] / row["floor_ms"] if row["ms"] is not None and row["floor_ms"] else None
        key, limit, unit = _codec_target(name or "", params)
        judged = (name and r.get("model") == "resnet50" and phase == ("encdec" if kind == "bench" else "reduce")
                  and (kind == "bench" or r.get("sim_world_size", 1) == 1) and _is_default(name, params))
        if kind == "bench" and key == "powersgd" and phase == "default":
            judged = bool(name and r.get("model") == "resnet50" and _is_default(name, params))
        judged = judged and impl != "reference"  # the plain-PyTorch rows are for comparison
        if key == "powersgd":
            judged = judged and layout == "per_tensor"
        elif key is not None:
            judged = judged and (layout == "flat" or kind == "profile")
        if key is not None and judged:
            row.update(target=TARGETS[key], limit=limit)
            value = row["x_floor"] if unit == "x_floor" else row["ms"]
            row["passed"] = bool(value is not None and value <= limit) if unit == "x_floor" else \
                bool(value is not None and value < limit)
        rows.append(row)

    ddp = [r for r in records if r.get("kind") == "ddp"]
    base = {}
    for r in ddp:
        if r.get("mode") == "syncsgd" and r.get("bucket_mb") is None:
            base[(r.get("model"), r.get("batch_size"), r.get("world_size"), r.get("source"))] = r["ms_median"]
    peers = {}
    for r in ddp:
        if r.get("mode") == "builtin":
            peers[(r.get("model"), r.get("batch_size"), r.get("world_size"), r.get("source"), r.get("compressor"))] = \
                r["ms_median"]
    for r in ddp:
        if r.get("bucket_mb") is not None:
            continue
        k = (r.get("model"), r.get("batch_size"), r.get("world_size"), r.get("source"))
        sync = base.get(k)
        params = r.get("params") or {}
        name, mode = r.get("compressor"), r.get("mode")
        row = dict(section="ddp", source="ddp", gpu=r.get("gpu"), torch=r.get("torch"), model=r.get("model"),
                   compressor=name or "syncsgd", params=_params_str(params), phase="iteration",
                   layout=None, impl=mode, mode=mode, world_size=r.get("world_size"),
                   batch_size=r.get("batch_size"), ms=r["ms_median"], syncsgd_ms=sync,
                   x_syncsgd=r["ms_median"] / sync if sync else None, peer=None, peer_ms=None, x_peer=None,
                   target=None, limit=None, passed=None)
        multi = (r.get("world_size") or 1) >= 2
        if mode == "hook" and name == "powersgd" and params.get("rank") == 4 and _is_default(name, params):
            row.update(target=TARGETS["ddp_powersgd"] + ("" if r.get("model") == "resnet50" else " (reported)"),
                       limit=1.2)
            if multi and row["x_syncsgd"] is not None and r.get("model") == "resnet50":
                row["passed"] = bool(row["x_syncsgd"] <= 1.2)
        if mode == "hook" and name in ("fp16", "bf16"):
            peer = "torch_" + name
            pm = peers.get(k + (peer,))
            row.update(peer=peer, peer_ms=pm, x_peer=r["ms_median"] / pm if pm else None,
                       target=TARGETS["ddp_half"], limit=1.0)
            if multi and pm:
                row["passed"] = bool(r["ms_median"] <= pm)
        rows.append(row)
    cols = ["section", "source", "gpu", "torch", "model", "compressor", "params", "phase", "layout", "impl",
            "world_size", "batch_size", "ms", "floor_ms", "x_floor", "host_ms", "kernels", "syncsgd_ms",
            "x_syncsgd", "peer", "peer_ms", "x_peer", "target", "limit", "passed"]
    df = pd.DataFrame(rows)
    for c in cols:
        if c not in df:
            df[c] = None
    return df[cols]


def summary_markdown(df) -> str:
    """The target rows of :func:`summarize` as a Markdown table (plus the counts)."""
    t = df[df["target"].notna()]
    lines = ["| model | compressor | phase / mode | impl | ms | x floor | x syncSGD | x PyTorch hook | limit | passed |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def f(x, d=3):
        return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"

    for _, r in t.iterrows():
        lines.append(f"| {r['model']} | {r['compressor']} {r['params']} | {r['phase']}"
                     f"{'' if r['section'] == 'codec' else ' ws' + str(int(r['world_size']))} | {r['impl']} | {f(r['ms'])} | "
                     f"{f(r['x_floor'], 1)} | {f(r['x_syncsgd'], 3)} | {f(r['x_peer'], 3)} | {r['limit']} | "
                     f"{'' if r['passed'] is None else ('yes' if r['passed'] else 'NO')} |")
    judged = t[t["passed"].notna()]
    lines.append("")
    lines.append(f"{int(judged['passed'].sum())} of {len(judged)} judged target rows pass.")
    return "\n".join(lines)


# ====================================================================== runs compared, the speed targets
def split_repeats(records: Iterable[dict]) -> list[list[dict]]:
    """The bench records of a file, one list per ``repeat`` (1, 2, ...; records without one form one run)."""
    runs: dict = {}
    for r in records:
        if r.get("kind") == "bench":
            runs.setdefault(r.get("repeat"), []).append(r)
    return [runs[k] for k in sorted(runs, key=lambda k: (k is not None, k or 0))]


def _run_key(r: dict) -> tuple:
    return (r.get("model"), r.get("compressor"), _params_str(r.get("params")), r.get("phase"), r.get("layout"),
            r.get("mode"), r.get("device"))


def compare_runs(runs: Sequence[Iterable[dict]]) -> pandas.DataFrame:
    """One row per codec configuration (model, compressor, params, phase, layout, mode, device)
    measured ``ok`` in the first run: per run ``i`` (1-based) ``ms_i`` (median), ``q25_i``, ``q75_i``,
    ``n_i``, ``x_floor_i`` (ms / the memory floor of that run), ``capped_i``; with two runs
    ``ratio`` (``ms_2 / ms_1``) and ``agree`` (the two medians within :data:`AGREE_TOL` of each
    other: ``max(ratio, 1 / ratio) <= 1 + AGREE_TOL``). Records of other kinds are ignored."""
    import pandas as pd

    if not runs:
        raise ValueError("compare_runs: no runs given (a list of one or two runs' records)")
    tables = []
    for recs in runs:
        table = {}
        for r in recs:
            if r.get("kind") == "bench" and r.get("status") == "ok":
                table[_run_key(r)] = r  # the latest record of a configuration
        tables.append(table)
    rows = []
    for key, first in tables[0].items():
        row = {"model": first.get("model"), "compressor": first.get("compressor"), "params": key[2],
               "params_obj": first.get("params") or {}, "phase": first.get("phase"), "layout": first.get("layout"),
               "mode": first.get("mode"), "device": first.get("device"), "gpu": first.get("gpu"),
               "floor_ms": first.get("floor_ms"), "git_commit": first.get("git_commit")}
        for i, table in enumerate(tables, 1):
            r = table.get(key) or {}
            ms, floor = r.get("ms_median"), r.get("floor_ms")
            row.update({f"ms_{i}": ms, f"q25_{i}": r.get("ms_q25"), f"q75_{i}": r.get("ms_q75"),
                        f"n_{i}": r.get("n_iter"), f"x_floor_{i}": ms / floor if ms is not None and floor else None,
                        f"capped_{i}": r.get("reps_capped")})
        if len(tables) >= 2:
            a, b = row["ms_1"], row["ms_2"]
            row["ratio"] = b / a if a and b is not None else None
            row["agree"] = (None if row["ratio"] is None or row["ratio"] <= 0
                            else bool(max(row["ratio"], 1 / row["ratio"]) <= 1 + AGREE_TOL + 1e-12))
        rows.append(row)
    return pd.DataFrame(rows)


def _target_of(name: str | None, params: dict) -> SpeedTarget | None:
    for t in SPEED_TARGETS:
        if name in t.compressors and all((params or {}).get(k) == v for k, v in t.params):
            return t
    return None


def speed_targets(compared: pandas.DataFrame) -> pandas.DataFrame:
    """The speed-target table from :func:`compare_runs`: one row per judged codec setting
    (phase ``encdec``, not the plain-PyTorch ``reference`` mode) with ``target``, ``limit``,
    ``unit``, ``value`` (the worst run: largest ``x_floor`` or ms) and ``verdict``: PASS or MISS
    on ``resnet50`` on a GPU, ``n/a (...)`` elsewhere (the targets are set there), and a row
    ``NOT MEASURED`` for each target codec no run measured."""
    import pandas as pd

    runs = sorted(int(c[3:]) for c in compared.columns if c.startswith("ms_")) if len(compared) else [1]
    rows = []
    seen = set()
    for _, r in compared.iterrows():
        if r["phase"] != "encdec" or str(r["mode"]).endswith(":reference"):
            continue
        t = _target_of(r["compressor"], r["params_obj"])
        if t is None:
            continue
        seen.add(r["compressor"])
        col = "x_floor" if t.unit == "x_floor" else "ms"
        vals = [r[f"{col}_{i}"] for i in runs if r.get(f"{col}_{i}") is not None and not pd.isna(r[f"{col}_{i}"])]
        value = max(vals) if vals else None
        if value is None:
            verdict = "NOT MEASURED"
        elif r["model"] != TARGET_MODEL:
            verdict = f"n/a ({r['model']}: targets are on {TARGET_MODEL})"
        elif not str(r["device"]).startswith("cuda"):
            verdict = "n/a (CPU: targets are on one H100/H200)"
        else:
            verdict = "PASS" if value <= t.limit else "MISS"
        rows.append(dict(r.drop(labels=["params_obj"]), target=t.key, target_text=t.text, limit=t.limit,
                         unit=t.unit, value=value, verdict=verdict))
    for t in SPEED_TARGETS:
        for name in t.compressors:
            if name not in seen:
                rows.append({"compressor": name, "params": ",".join(f"{k}={v}" for k, v in t.params),
                             "phase": "encdec", "target": t.key, "target_text": t.text, "limit": t.limit,
                             "unit": t.unit, "value": None, "verdict": "NOT MEASURED"})
    return pd.DataFrame(rows)


def _f(x, d: int = 4) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"


def _ms_cell(r, i: int) -> str:
    ms = r.get(f"ms_{i}")
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "—"
    q25, q75, n = r.get(f"q25_{i}"), r.get(f"q75_{i}"), r.get(f"n_{i}")
    iqr = f" [{_f(q25)}-{_f(q75)}]" if q25 is not None and not (isinstance(q25, float) and math.isnan(q25)) else ""
    return f"{_f(ms)}{iqr} n={int(n)}" if n is not None and not math.isnan(n) else f"{_f(ms)}{iqr}"


def compare_markdown(compared: pandas.DataFrame) -> str:
    """:func:`compare_runs` as a Markdown table: both medians (IQR, n), their ratio, agreement."""
    two = "ratio" in compared.columns
    head = "| codec | params | phase | mode | run 1 ms [q25-q75] | x floor |"
    head += " run 2 ms [q25-q75] | run 2 / run 1 | within 10 % |" if two else ""
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for _, r in compared.iterrows():
        line = (f"| {r['compressor'] or r['phase']} | {r['params']} | {r['phase']} | {r['mode'] or ''} | "
                f"{_ms_cell(r, 1)} | {_f(r.get('x_floor_1'), 1)} |")
        if two:
            agree = r.get("agree")
            line += (f" {_ms_cell(r, 2)} | {_f(r.get('ratio'), 3)} | "
                     f"{'' if agree is None or (isinstance(agree, float) and math.isnan(agree)) else ('yes' if agree else 'NO')} |")
        lines.append(line)
    if two and len(compared):
        judged = compared["agree"].dropna()
        lines += ["", (f"{int(judged.sum())} of {len(judged)} configurations measured twice agree within "
                       f"{AGREE_TOL:.0%} (the larger median at most {1 + AGREE_TOL:g}x the smaller).")]
    return "\n".join(lines)


def speed_targets_markdown(table: pandas.DataFrame) -> str:
    """:func:`speed_targets` as a Markdown table with PASS/MISS, and the count."""
    lines = ["| target | codec | params | run 1 ms | run 2 ms | x floor (worst) | limit | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        r = r.to_dict()
        limit = f"{r['limit']:g}x floor" if r["unit"] == "x_floor" else f"{r['limit']:g} ms"
        xs = [r.get(f"x_floor_{i}") for i in (1, 2)]
        xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
        lines.append(f"| {r['target']} | {r['compressor']} | {r.get('params') or ''} | {_ms_cell(r, 1)} | "
                     f"{_ms_cell(r, 2)} | {_f(max(xs), 1) if xs else ''} | {limit} | {r['verdict']} |")
    v = table["verdict"] if len(table) else []
    n_pass, n_judged = int((v == "PASS").sum()), int(v.isin(["PASS", "MISS"]).sum()) if len(table) else 0
    lines += ["", (f"{n_pass} of {n_judged} judged target rows PASS (the worst of the runs is judged); "
                   f"{int((v == 'NOT MEASURED').sum()) if len(table) else 0} not measured.")]
    return "\n".join(lines)


# ====================================================================== CLI
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m studykit bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default=str(paths.REPORTS / "benchmarks" / "run"),
                    help="folder for codecs.jsonl, ddp.jsonl, summary.csv, summary.md (default reports/benchmarks/run; "
                         f"inside the committed data/ only with {paths.OVERWRITE_FLAG})")
    ap.add_argument(paths.OVERWRITE_FLAG, action="store_true",
                    help="allow --out-dir inside the repository's committed data/ (refused otherwise)")
    ap.add_argument("--retry-errors", action="store_true",
                    help="measure again the configurations whose records in --out-dir are errors")
    ap.add_argument("--overwrite", action="store_true", help="start the record files afresh (else: resume)")
    ap.add_argument("--model", default="resnet50", type=argtypes.model_spec, metavar="MODEL",
                    help=f"gradient for the codecs: {argtypes.MODEL_HELP}")
    ap.add_argument("--compressors", nargs="*", default=None, metavar="NAME[:k=v,...]",
                    help="codecs to time (default: every registered one)")
    ap.add_argument("--no-codecs", action="store_true", help="skip the codec part")
    ap.add_argument("--reference", action="store_true",
                    help="also time every codec with the fused kernels off (STUDYKIT_FAST=0): before/after")
    ap.add_argument("--no-split", action="store_true", help="skip the separate encode/decode timings")
    ap.add_argument("--phases", nargs="+", default=list(PHASES), choices=PHASES, metavar="PHASE",
                    help=f"codec phases to time (default: all of {' '.join(PHASES)}; the targets judge encdec)")
    ap.add_argument("--no-components", action="store_true",
                    help="skip the building blocks (torch.topk alone, THC's rotation, an elementwise pass, ...)")
    add_policy_args(ap)
    ap.add_argument("--ddp", action="store_true",
                    help="also time DDP iterations (every rank; under torchrun for 2+ GPUs)")
    ap.add_argument("--ddp-models", nargs="+", default=list(DDP_MODELS), type=argtypes.model_spec, metavar="MODEL",
                    help=f"models of the DDP part, each {argtypes.MODEL_HELP}")
    ap.add_argument("--ddp-compressors", nargs="*", default=list(DDP_SPECS), metavar="NAME[:k=v,...]",
                    help=f"kit hooks to time (default: {' '.join(DDP_SPECS)}; 'all' for every compressor)")
    ap.add_argument("--ddp-iters", type=argtypes.positive_int, default=20, help="timed DDP iterations per configuration (default 20)")
    ap.add_argument("--ddp-warmup", type=argtypes.nonneg_int, default=5,
                    help="discarded DDP iterations first (default 5; the first one builds DDP's buckets)")
    ap.add_argument("--ddp-budget-s", type=argtypes.positive_float, default=None,
                    help="cap seconds per DDP configuration (default: none, exactly --ddp-iters; a budget "
                         "estimates from the first, slow iteration and may cut a run to 5 iterations)")
    ap.add_argument("--device", default="auto", help="codec device: auto (GPU if any), cpu, cuda, cuda:N")
    ap.add_argument("--summary", nargs="+", default=None, metavar="FILE_OR_DIR",
                    help="only summarize these record files/folders (e.g. data/measurements/gpu) and exit")
    ap.add_argument("--quiet", action="store_true")
    return ap


def add_policy_args(ap: argparse.ArgumentParser) -> None:
    """The repetition-policy options (:class:`RepPolicy`), shared by ``bench`` and ``benchmarks/codec_repeat.py``."""
    ap.add_argument("--min-reps", "--iters", dest="min_reps", type=argtypes.positive_int, default=MIN_REPS,
                    help=f"at least this many timed repetitions per codec (default {MIN_REPS}; --iters is the old name)")
    ap.add_argument("--min-time-s", type=argtypes.nonneg_float, default=MIN_TIME_S,
                    help=f"and at least this many seconds of timed calls, whichever is more (default {MIN_TIME_S:g})")
    ap.add_argument("--budget-s", type=argtypes.positive_float, default=BUDGET_S,
                    help=f"at most this many seconds of timed calls per codec configuration (default {BUDGET_S:g}; "
                         "a record whose policy it cut says reps_capped)")
    ap.add_argument("--warmup", type=argtypes.positive_int, default=10,
                    help="untimed calls before timing, after two settling calls (default 10)")
    ap.add_argument("--l2-flush-mib", type=argtypes.nonneg_float, default=None,
                    help=f"MiB written before every repetition, untimed (default: {L2_FLUSH_BYTES // 2**20} on CUDA, "
                         "as triton.testing.do_bench; 0 on CPU; more than the last-level cache, e.g. 64, flushes it there)")
    ap.add_argument("--host-ahead", action="store_true",
                    help="CUDA only: time each repetition's device work with the host ahead of the GPU (a GPU sleep "
                         "before it lets the host queue the whole call), not the host's launch gaps; records say "
                         "timer cuda_events_host_ahead")


def policy_from_args(ap: argparse.ArgumentParser, args) -> RepPolicy:
    """The :class:`RepPolicy` of parsed :func:`add_policy_args` options (a bad combination: ``ap.error``)."""
    try:
        return RepPolicy(min_reps=args.min_reps, min_time_s=args.min_time_s, budget_s=args.budget_s,
                         n_warmup=args.warmup, host_ahead=bool(getattr(args, "host_ahead", False)),
                         flush_bytes=None if args.l2_flush_mib is None else int(args.l2_flush_mib * 2**20))
    except ValueError as exc:
        ap.error(str(exc).replace("RepPolicy: ", "").replace("budget_s", "--budget-s")
                 .replace("min_time_s", "--min-time-s"))


def policy_text(record: dict) -> str:
    """The repetition policy a record was timed under, as the generated tables state it."""
    return (f"at least {record['min_reps']} repetitions and {record['min_time_s']:g} s of timed calls, "
            f"at most {record['budget_s']:g} s, timer {record['timer']}")


def add_output_args(ap: argparse.ArgumentParser, default_name: str, what: str) -> None:
    """The record-file options of a benchmark script that writes one ``.jsonl`` and its generated ``.md`` beside
    it (``benchmarks/codec_repeat.py``, ``benchmarks/pack_fields.py``): ``--out``, the overwrite flags,
    ``--report-only``, ``--quiet``. ``what``: what the ``.md`` holds ("tables", "table")."""
    ap.add_argument("--out", default=str(paths.REPORTS / "benchmarks" / default_name),
                    help=f"records, JSON Lines (default reports/benchmarks/{default_name}); the {what} go(es) beside "
                         f"it as .md; inside the committed data/ only with {paths.OVERWRITE_FLAG}")
    ap.add_argument(paths.OVERWRITE_FLAG, action="store_true", help="allow --out inside the committed data/")
    ap.add_argument("--overwrite", action="store_true", help="start --out afresh (else: resume)")
    ap.add_argument("--report-only", action="store_true", help=f"only print and write the {what} of --out")
    ap.add_argument("--quiet", action="store_true", help=f"no per-configuration lines (the {what} still printed)")


def add_json_output_args(ap: argparse.ArgumentParser, default_name: str) -> None:
    """The options of a benchmark script that writes one JSON result (``benchmarks/advise_sweep.py``,
    ``benchmarks/perfmodel_sweep.py``): ``--out``, ``--no-write`` and the overwrite flag."""
    ap.add_argument("--out", default=str(paths.REPORTS / "benchmarks" / default_name),
                    help=f"the result, JSON (default reports/benchmarks/{default_name}); inside the committed data/ "
                         f"only with {paths.OVERWRITE_FLAG}")
    ap.add_argument(paths.OVERWRITE_FLAG, action="store_true", help="allow --out inside the committed data/")
    ap.add_argument("--no-write", action="store_true", help="print only")


def json_output_from_args(ap: argparse.ArgumentParser, args) -> Optional[Path]:
    """The checked ``--out`` of :func:`add_json_output_args`, before anything is timed (refusals: ``ap.error``);
    None with ``--no-write``."""
    if args.no_write:
        return None
    try:
        return paths.check_writable_output(args.out, args.overwrite_committed, what="--out", file=True)
    except paths.OutputError as exc:
        ap.error(str(exc))


def write_json(out: Optional[Path], result: dict) -> None:
    """``result`` into ``out`` (:func:`json_output_from_args`; nothing when None), said on stdout."""
    if out is None:
        return
    import json

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


def output_from_args(ap: argparse.ArgumentParser, args, report: Callable[[Path], object]) -> Optional[Path]:
    """The checked ``--out`` of :func:`add_output_args` (refusals: ``ap.error``), ready to write (``--overwrite``
    applied); None when ``--report-only`` has done its job (``report(out)`` ran)."""
    try:
        out = paths.check_writable_output(args.out, args.overwrite_committed, what="--out", file=True)
        paths.check_writable_output(out.with_suffix(".md"), args.overwrite_committed, what="--out", file=True)
    except paths.OutputError as exc:
        ap.error(str(exc))
    if out.suffix != ".jsonl":
        ap.error(f"--out {args.out}: give a .jsonl file (the generated tables are written beside it as .md)")
    if args.report_only:
        if not out.exists():
            ap.error(f"--report-only: no records at {out}")
        try:
            report(out)
        except RecordError as exc:
            ap.error(str(exc))
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.overwrite:
        out.unlink(missing_ok=True)
    return out


def start(ap: argparse.ArgumentParser, argv: Optional[list[str]], report: Callable[[Path], object]):
    """A benchmark script's start: ``(args, policy, out)`` from its parser (:func:`add_policy_args`,
    :func:`add_output_args`); ``out`` None when ``--report-only`` has done its job."""
    args = ap.parse_args(argv)
    policy = policy_from_args(ap, args)
    return args, policy, output_from_args(ap, args, report)


def add_candidates_args(ap: argparse.ArgumentParser) -> None:
    """The options of a script that times a fast path's candidates side by side on one GPU
    (``benchmarks/thc_signed.py``, ``benchmarks/topk_select.py``): the repetition policy (:func:`add_policy_args`)
    and ``--out`` (records appended; inside the committed data/ only with the overwrite flag)."""
    add_policy_args(ap)
    ap.add_argument("--out", type=Path, default=None, help="records (jsonl); appended to; inside the committed data/ "
                                                           f"only with {paths.OVERWRITE_FLAG}")
    ap.add_argument(paths.OVERWRITE_FLAG, action="store_true", help="allow --out inside the committed data/")


def start_candidates(ap: argparse.ArgumentParser, argv: Optional[list[str]]):
    """``(args, policy, writer or None)`` of :func:`add_candidates_args` options, refused (``ap.error``) without
    CUDA and Triton, with ``--host-ahead`` (a candidate may synchronise with the host: these scripts time with
    plain events) and with an ``--out`` that may not be written."""
    from studykit.compressors import _fast

    args = ap.parse_args(argv)
    policy = policy_from_args(ap, args)
    if args.host_ahead:
        ap.error("--host-ahead: the candidates are timed with plain CUDA events (a candidate may wait for the GPU)")
    out = None
    if args.out is not None:
        try:
            out = paths.check_writable_output(args.out, args.overwrite_committed, file=True)
        except paths.OutputError as exc:
            ap.error(str(exc))
    if not torch.cuda.is_available() or not _fast.HAVE_TRITON:
        ap.error("needs a CUDA GPU and Triton (the fused kernels)")
    return args, policy, (RecordWriter(out) if out is not None else None)


def records_of(out: Path, kind: str, script: str) -> list[dict]:
    """The records of ``kind`` in ``out`` (a benchmark's report); :class:`RecordError` naming ``script``
    when there are none."""
    records = [r for r in load_records(out, quiet=True) if r.get("kind") == kind]
    if not records:
        raise RecordError(f"{out}: no {kind} records (written by {script})")
    return records


def write_report(out: Path, text: str, verbose: bool = True) -> str:
    """``text`` (a benchmark's Markdown tables) written beside ``out`` as ``.md``, printed if ``verbose``."""
    out.with_suffix(".md").write_text(text, encoding="utf-8")
    if verbose:
        print(text)
    return text


def _write_summary(records: list[dict], out_dir: Optional[Path], verbose: bool) -> pandas.DataFrame:
    df = summarize(records)
    md = summary_markdown(df)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        df.to_csv(out_dir / "summary.csv", index=False)
        (out_dir / "summary.md").write_text(md + "\n", encoding="utf-8")
    if verbose:
        print(md)
    return df


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        argv = argv[1:]
    ap = build_parser()
    args = ap.parse_args(argv)
    verbose = not args.quiet
    if args.summary:
        try:
            records = load_records(*args.summary)
        except ValueError as exc:  # a missing file or folder, another schema
            ap.error(str(exc))
        if not records:
            ap.error(f"--summary: no records in {' '.join(args.summary)} (*.jsonl files written by bench)")
        _write_summary(records, None, verbose)
        return 0
    policy = policy_from_args(ap, args)
    try:
        out_dir = paths.check_writable_output(args.out_dir, args.overwrite_committed, what="--out-dir")
        for p in (out_dir / "codecs.jsonl", out_dir / "ddp.jsonl"):
            paths.check_writable_output(p, True, what="--out-dir", file=True)
    except paths.OutputError as exc:
        ap.error(str(exc))

    from studykit.measure.runtime import finish_dist, init_dist, pick_device

    world = int(os.environ.get("WORLD_SIZE", "1"))
    d = None
    if args.ddp or world > 1:
        d = init_dist("auto", None, require_group=True)
    rank = d.rank if d is not None else 0
    main_rank = rank == 0
    codecs_path, ddp_path = out_dir / "codecs.jsonl", out_dir / "ddp.jsonl"
    if main_rank:
        out_dir.mkdir(parents=True, exist_ok=True)
        if args.overwrite:
            for p in (codecs_path, ddp_path):
                p.unlink(missing_ok=True)
    ok = False
    try:
        if d is not None:
            d.barrier()
        # with DDP iterations to time after the codecs, the codecs' kernel counts wait until after them: the
        # profiler leaves CUPTI attached, which slows every later launch (run_codecs)
        deferred: list | None = [] if (args.ddp or world > 1) else None
        codec_writer = None
        if not args.no_codecs and main_rank:
            device = d.device if d is not None else pick_device(args.device)
            if policy.host_ahead and torch.device(device).type != "cuda":
                ap.error(f"--host-ahead needs a CUDA device, got {device}")
            specs = parse_compressor_specs(args.compressors)
            codec_writer = RecordWriter(codecs_path, retry_errors=args.retry_errors)
            run_codecs(specs, codec_writer, device=device,
                       model=args.model, policy=policy, reference=args.reference, split=not args.no_split,
                       phases=args.phases, extras=not args.no_components, deferred=deferred, verbose=verbose)
        if d is not None:
            d.barrier()
        if args.ddp or world > 1:
            from studykit.measure.ddp import run_ddp

            specs = parse_compressor_specs(None if args.ddp_compressors == ["all"] else args.ddp_compressors) \
                if args.ddp_compressors else []
            gc_writer = RecordWriter(ddp_path, enabled=main_rank, retry_errors=args.retry_errors)
            run_ddp(d, args.ddp_models, specs, gc_writer, modes=("syncsgd", "builtin", "hook"),
                    n_iter=args.ddp_iters, n_warmup=args.ddp_warmup, budget_s=args.ddp_budget_s, min_iter=5,
                    verbose=verbose)
        if deferred and codec_writer is not None:
            count_kernels(deferred, codec_writer)
        ok = True
    finally:
        if d is not None:
            finish_dist(d, ok)
    if main_rank:
        records = load_records(*(p for p in (codecs_path, ddp_path) if p.exists()))
        _write_summary(records, out_dir, verbose)
        if verbose:
            print(f"bench: records in {out_dir}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
