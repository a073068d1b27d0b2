"""How the kit times and profiles one codec call (``bench`` and ``profile`` alike, :func:`time_call`): the
repetition policy (:class:`RepPolicy`, over :func:`studykit.measure.timing.time_fn`), the settling calls before timing, the host-side time of a call,
the fused kernels switched on or off (``STUDYKIT_FAST``), and the device kernels of a call from
``torch.profiler`` (their count, and each kernel's device time: :func:`kernel_times`)."""
from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

from studykit.compressors._fast.common import settle_generators
from studykit.measure.timing import (L2_FLUSH_BYTES, MIN_REPS, MIN_TIME_S, HostSyncCall, Timing, host_clock, host_ms,
                                    time_fn)

#: seconds of timed calls one codec configuration may take at most (ATOMO's exact SVD is slow enough to need a cap)
BUDGET_S = 30.0


@dataclass(frozen=True)
class RepPolicy:
    """How many times, and how, each codec is timed: ``n_warmup`` untimed calls,
    then at least ``min_reps`` repetitions and at least ``min_time_s`` seconds of timed calls,
    whichever is more, at most ``budget_s`` seconds; ``flush_bytes`` written before each repetition
    (None: :data:`~studykit.measure.timing.L2_FLUSH_BYTES` on CUDA, none on CPU). ``host_ahead``
    (CUDA only): each repetition's *device* time with the host ahead of the GPU
    (:class:`studykit.measure.timing._Clock`): without it, a codec whose host needs longer to launch
    its kernels than the GPU needs to run them is timed by the host's launch gaps, which vary from run
    to run on a shared machine. ``graph`` (CUDA only): each call captured once as a CUDA graph and its replays
    timed with plain events, as the DDP hook's graph runner calls it (:func:`time_call`)."""

    min_reps: int = MIN_REPS
    min_time_s: float = MIN_TIME_S
    budget_s: float | None = BUDGET_S
    n_warmup: int = 10
    flush_bytes: int | None = None
    host_ahead: bool = False
    min_iter: int = 3
    graph: bool = False

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
        if self.min_iter < 1:
            raise ValueError(f"RepPolicy: min_iter must be >= 1 (timed calls kept under the budget), got {self.min_iter}")
        if self.graph and self.host_ahead:
            raise ValueError("RepPolicy: graph and host_ahead exclude each other (a replay's host work is a single "
                             "launch: there is nothing for the host to get ahead of)")
        if self.flush_bytes is not None and self.flush_bytes < 0:
            raise ValueError(f"RepPolicy: flush_bytes must be >= 0, got {self.flush_bytes}")

    def flush_for(self, device) -> int:
        if self.flush_bytes is not None:
            return int(self.flush_bytes)
        return L2_FLUSH_BYTES if torch.device(device).type == "cuda" else 0

    def timing_kw(self, device) -> dict:
        """Keyword arguments of :func:`~studykit.measure.timing.time_fn` for this policy."""
        return {"n_iter": self.min_reps, "n_warmup": self.n_warmup, "budget_s": self.budget_s,
                "min_time_s": self.min_time_s, "flush_bytes": self.flush_for(device), "min_iter": self.min_iter,
                "host_ahead": self.host_ahead}

    def fields(self, device) -> dict:
        """The policy as record fields."""
        return {"min_reps": self.min_reps, "min_time_s": self.min_time_s, "budget_s": self.budget_s,
                "l2_flush_bytes": self.flush_for(device),
                "timer": self.timer(device)}

    def timer(self, device) -> str:
        """The record's ``timer``: ``cuda_events``, ``cuda_events_host_ahead``, ``cuda_graph`` or ``perf_counter``."""
        if torch.device(device).type != "cuda":
            return "perf_counter"
        return "cuda_events_host_ahead" if self.host_ahead else "cuda_graph" if self.graph else "cuda_events"

    def capped(self, timing) -> bool:
        """Whether ``timing`` stopped short of the policy (the budget bound it)."""
        return bool(timing.n_iter < self.min_reps or math.fsum(timing.times_ms) < self.min_time_s * 1e3 * (1 - 1e-9))


def policy_text(record: dict) -> str:
    """The repetition policy a record was timed under, as the generated tables state it."""
    return (f"at least {record['min_reps']} repetitions and {record['min_time_s']:g} s of timed calls, "
            f"at most {record['budget_s']:g} s, timer {record['timer']}")


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
    """Mean host-clock time of a call *without* synchronising: the host's side (Python, dispatch,
    launches). On a GPU, a codec whose host time is close to its device time is launch-bound."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = host_clock()
    for _ in range(reps):
        fn()
    ms = host_ms(t0, host_clock()) / reps
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
        return (time_fn(fn, device=device, **dict(policy.timing_kw(device), host_ahead=False)),
                "cuda_events_host_sync")


@dataclass(frozen=True)
class CallTiming:
    """What :func:`time_call` measured: the timing, the record's ``timer`` and the host's side of a call in ms."""

    timing: Timing
    timer: str
    host_ms: float


def time_call(fn: Callable[[], object], device, policy: RepPolicy,
              fingerprint: Callable[[], object] | None = None) -> CallTiming:
    """The kit's one codec timer (``bench`` and ``profile`` both time through it): two settling calls, the
    calls timed by ``policy`` (a call that waits for the GPU falls back from host-ahead to plain CUDA events,
    its ``timer`` says so), then the host's side of a call without synchronising (:func:`_host_ms`).

    With ``policy.graph``: the call captured once as a CUDA graph (:func:`capture_call`), then its replays timed,
    host side included, as the DDP hook's graph runner pays them. A call that cannot be replayed (it waits for the
    device, draws host-seeded random numbers or replaces its state: ``fingerprint``, e.g.
    :func:`studykit.ddp.hook.replay_fingerprint`, changed) is what the graph runner runs eagerly on its thread:
    timed so with plain events, ``timer`` ``cuda_events_eager``."""
    device = torch.device(device)
    _settle(fn, device)
    timer = None
    if policy.graph:
        graph = capture_call(fn, device, fingerprint)
        fn, timer = (fn, "cuda_events_eager") if graph is None else (graph.replay, "cuda_graph")
    t, how = _time(fn, device, policy)
    host = _host_ms(fn, device, reps=max(2, min(20, int(200 / max(t.ms_median, 0.01)))))
    return CallTiming(t, timer or how, host)


def capture_call(fn: Callable[[], object], device, fingerprint: Callable[[], object] | None = None):
    """``fn``'s call captured as a CUDA graph (the capture runs the call once), or None where a replay would not be
    its next call: the capture failed (the call waits for the device), or ``fingerprint()`` (taken before and after)
    changed: the call drew host-seeded random numbers or replaced its state tensors."""
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"capture_call needs a CUDA device (CUDA graphs), got {device}")
    before = fingerprint() if fingerprint is not None else None
    torch.cuda.current_blas_handle()  # cuBLAS's handle cannot be made inside a capture
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            fn()
    except RuntimeError:
        settle_generators(device)
        return None
    torch.cuda.synchronize(device)
    if fingerprint is not None and fingerprint() != before:
        return None
    return graph


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
    kernel, one call) -> per kernel of the call, in the first call's order: ``{"name", "us_median", "us_min"}``.
    Kernels a CUDA graph runs concurrently (branches without a dependency between them) may start in another
    order from call to call: a kernel is matched across calls by its name and how many kernels of that name
    started before it in its call. A memset is named "Memset" (the profiler calls the same one "Memset
    (Unknown)" in one call and "Memset (Device)" in another)."""
    import statistics

    ev = sorted(events)
    if not ev or len(ev) % reps:
        raise ValueError(f"split_calls: {len(ev)} device events are not {reps} equal rounds of a flush and a call")
    per = len(ev) // reps
    rounds = [_by_occurrence(ev[i * per:(i + 1) * per]) for i in range(reps)]
    for i, r in enumerate(rounds[1:], 2):
        if sorted(r) != sorted(rounds[0]):
            only = [f"{name[:60]} #{j + 1} in call {c}" for c, a, b in ((1, rounds[0], r), (i, r, rounds[0]))
                    for name, j in sorted(set(a) - set(b))][:4]
            raise ValueError(f"split_calls: call {i} launched other kernels than call 1 (a codec whose calls "
                             f"differ cannot be split into per-kernel times): {'; '.join(only)}")
    keys = list(rounds[0])[1:]  # position 0: the flush
    return [{"name": key[0], "us_median": statistics.median(r[key] for r in rounds),
             "us_min": min(r[key] for r in rounds)} for key in keys]


def _by_occurrence(events: Sequence[tuple]) -> dict:
    """``{(name, j): duration_us}`` of one round's events in start order, ``j`` counting earlier ones named so."""
    seen: dict = {}
    out = {}
    for _, us, name in events:
        if name.startswith("Memset ("):  # the profiler names one memset "Memset (Unknown)" or "Memset (Device)"
            name = "Memset"
        j = seen[name] = seen.get(name, -1) + 1
        out[(name, j)] = us
    return out
