"""The kit's one timing helper (docs/STYLE.md item 6), and the one place that says which clock times what.

**Clocks.** Every duration the kit records is read from one of these clocks, chosen by what is measured:

* *a call's time* (:func:`time_fn`: codecs in ``bench`` and ``profile``, DDP iterations, ``tcomp``'s backward
  pass, ``sweep``'s collectives): CUDA events on the current stream after a ``synchronize``. A GPU call returns
  before its kernels run, so the host clock would time the launches, not the work. On CPU :data:`host_clock`:
  CPU ops are synchronous.
* *a call's device work with the host ahead* (``time_fn(host_ahead=True)``, ``profile``'s
  ``bucket_device_ms``): CUDA events behind a GPU sleep (:class:`_Clock`); the host clock only checks that
  the host queued the whole call before the sleep ended.
* *the host's side of a call* (``bench``'s ``host_ms``, ``profile``'s ``bucket_host_ms``): :data:`host_clock`
  with no synchronisation inside: Python, dispatch and launches, what a hook's thread pays for a codec (a call
  that fills CUDA's launch queue waits there, as it would in the hook).
* *stamps inside one backward pass* (``ddp --hook-times``, the ``buckets`` records' ready times):
  :class:`StampClock`, a CUDA event on the stream that reaches the stamp (device time since an event recorded
  just before ``loss.backward()``), the host clock on CPU; the host-clock stamps beside them (``*_host_ms``)
  say when the host got there.
* *whole training iterations* (:mod:`studykit.train.loop`): CUDA events with no synchronisation between
  iterations (the host runs ahead, as in training); the host clock on CPU. Its profiled iterations split
  the phases on the host clock with the device synchronised around each, which is why they are never
  counted as training.
* *deadlines, timeouts and the supervision of worker processes* (throttle, the notebook runner, ``train``'s
  launcher): ``time.monotonic``. Never a measurement, only "has this long passed".
* *when a record was written*: the UTC date (:mod:`studykit.measure.records`): provenance, never subtracted.

:data:`host_clock` is ``time.perf_counter`` (monotonic, the finest resolution the OS offers); a span on it is
read with :func:`host_ms`. The throttle's link probes time the network on the same clock.

**Statistics** (:func:`time_fn`). Agarwal et al. 2022, Sec. 3 "Methodology" and App. C: "we run 60
iterations for each setup and discard the first 10 ... the mean of the remaining 50", error bars = min/max.
:func:`time_fn` does exactly that by default (``n_warmup=10``, ``n_iter=50``) and
reports median, mean, min and max in milliseconds plus the raw list.

* On a CUDA device each iteration is bracketed by CUDA events on the current
  stream, after a ``synchronize`` so iterations never overlap; the elapsed event
  time is read after the end event completes.
* Elsewhere (CPU) each iteration is timed with :data:`host_clock`; CPU ops are
  synchronous, so no explicit synchronisation is needed.

``setup`` runs before every iteration (warm-up and timed) *outside* the timed
region (e.g. the forward pass when only the backward is timed).

``budget_s`` bounds the time spent on one configuration (GPU sweeps on a clock):
the first warm-up iteration (one-time costs: allocator, cuDNN, lazy init) is not
counted, a second always runs (when ``n_warmup >= 2``), further warm-ups stop at 20% of the budget and the timed iterations stop
once the next would pass the remaining 80% at their median so far (never below ``min_iter``). In a process group,
pass ``agree`` (e.g. max over ranks) so every rank takes the same decisions and
runs the same number of iterations (otherwise collectives would hang).

**Repetition policy** (``min_time_s`` given; what ``python -m studykit bench`` uses):
the paper's 50 iterations are too few for a stable median of a sub-millisecond codec (its
median can move widely between two such runs on the same card).
With ``min_time_s`` the timed repetitions are at least ``n_iter`` *and* at least ``min_time_s``
seconds of timed calls, whichever is more (:func:`reps_needed`; the per-call estimate is the
median of the warm-ups after the first, and a short top-up follows if the timed calls ran
faster than that), capped by ``budget_s`` seconds of timed calls (never below ``min_iter``). Before every repetition a buffer of ``flush_bytes`` is written, outside
the timed region, so each call starts with a cold cache, as ``triton.testing.do_bench`` does
(256 MiB, :data:`L2_FLUSH_BYTES`, more than any GPU's L2). On CUDA the repetitions are queued
back to back on the stream with a pair of CUDA events around each call and one synchronisation
at the end (do_bench's method): the host's launch latency of the first kernel is hidden
behind the flush, so the events time what the device does. The result carries the
interquartile range (``ms_q25``, ``ms_q75``) beside median, mean, min and max.

**Side by side** (:func:`time_interleaved`): several calls timed a round at a time, one call of each per round
(every other round in reverse order), each on the clock and with the statistics above. Two back-to-back runs of
:func:`time_fn` let a slow spell of a shared machine fall on one of them alone; interleaved, it falls on all
(``ddp --pair-hook-post iterations``). On a quiet machine both give the same ratios
(``data/measurements/hook_runner/h200_p1c/``); through a spell, neither does.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional, Sequence

import torch

__all__ = ["Timing", "HostSyncCall", "time_fn", "time_interleaved", "reps_needed", "quartiles", "PAPER_ITERATIONS", "PAPER_DISCARDED", "MIN_REPS",
           "MIN_TIME_S", "L2_FLUSH_BYTES", "host_clock", "host_ms", "StampClock"]

#: Agarwal et al. 2022, Sec. 3: 60 iterations per setup, the first 10 discarded
PAPER_ITERATIONS = 60
PAPER_DISCARDED = 10
#: a stable median needs at least 100 repetitions or 1 s of timed calls, whichever is more
MIN_REPS = 100
MIN_TIME_S = 1.0
#: the cache-flush buffer of ``triton.testing.do_bench`` (256 MB); more than the L2 of any GPU to date
#: (H100 50 MiB, H200 60 MiB, B200 126 MiB)
L2_FLUSH_BYTES = 256 * 2**20
#: rounds of extra repetitions when the timed calls were faster than the warm-ups said
_TOP_UPS = 3

#: the host clock of every host-side span and stamp (seconds, arbitrary origin): ``time.perf_counter``
host_clock = time.perf_counter


def host_ms(t0: float, t1: float) -> float:
    """Milliseconds from host-clock reading ``t0`` to ``t1`` (:data:`host_clock` values).

    Read the end first and pass it (``host_ms(t0, host_clock())``): the clock is read before this call, so
    the call's own overhead stays outside the span."""
    return (t1 - t0) * 1e3


class StampClock:
    """Time stamps on one clock: a CUDA event (``enable_timing``) recorded on the calling thread's current
    stream on GPUs (device time: when that stream reaches the stamp), :data:`host_clock` on CPU."""

    def __init__(self, cuda: bool):
        self.cuda = cuda

    def now(self):
        if not self.cuda:
            return host_clock()
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def span_ms(self, a, b) -> float:
        """ms from stamp ``a`` to stamp ``b`` (on CUDA once both events have completed)."""
        return a.elapsed_time(b) if self.cuda else host_ms(a, b)


def quartiles(times_ms: list[float]) -> tuple[float, float, float]:
    """(q25, median, q75) of ``times_ms``, linear interpolation between order statistics
    (``numpy.percentile``'s default; ``statistics.quantiles(method="inclusive")``)."""
    times = [float(t) for t in times_ms]
    if not times:
        raise ValueError("quartiles of no times")
    if len(times) == 1:
        return times[0], times[0], times[0]
    q25, _, q75 = statistics.quantiles(times, n=4, method="inclusive")
    return q25, statistics.median(times), q75


def reps_needed(est_ms: float, *, min_reps: int, min_time_s: float, budget_s: float | None = None,
                min_iter: int = 3) -> int:
    """Timed repetitions for a call of about ``est_ms``: at least ``min_reps`` and at least
    ``min_time_s`` seconds of timed calls, whichever is more; with ``budget_s``, no more than
    fit in ``budget_s`` seconds, but never fewer than ``min_iter``."""
    if min_reps < 1:
        raise ValueError(f"reps_needed: min_reps must be >= 1, got {min_reps}")
    if not min_time_s >= 0:
        raise ValueError(f"reps_needed: min_time_s must be >= 0, got {min_time_s}")
    est = max(float(est_ms), 1e-6)  # a call too fast for the clock: 1 ns
    n = max(int(min_reps), math.ceil(min_time_s * 1e3 / est))
    if budget_s is not None:
        n = min(n, max(int(min_iter), math.floor(budget_s * 1e3 / est)))
    return max(1, n)


@dataclass
class Timing:
    """Statistics of the timed iterations (milliseconds); warm-ups excluded."""

    ms_median: float
    ms_mean: float
    ms_min: float
    ms_max: float
    n_iter: int  # timed iterations (the ones in times_ms)
    n_warmup: int  # discarded warm-up iterations actually run
    times_ms: list[float] = field(default_factory=list)
    ms_q25: float | None = None  # first quartile, ms (interquartile range: ms_q25 .. ms_q75)
    ms_q75: float | None = None  # third quartile, ms

    @classmethod
    def from_times(cls, times_ms: list[float], n_warmup: int) -> "Timing":
        if not times_ms:
            raise ValueError("Timing needs at least one timed iteration")
        times = [float(t) for t in times_ms]
        q25, median, q75 = quartiles(times)
        return cls(ms_median=median, ms_mean=statistics.fmean(times),
                   ms_min=min(times), ms_max=max(times), n_iter=len(times), n_warmup=int(n_warmup),
                   times_ms=times, ms_q25=q25, ms_q75=q75)

    def as_dict(self, raw: bool = True) -> dict:
        d = asdict(self)
        if not raw:
            d.pop("times_ms")
        return d


def _is_cuda(device) -> bool:
    if device is None:
        return False
    return torch.device(device).type == "cuda"


#: host-ahead timing: start with this many GPU clock cycles of ``torch.cuda._sleep`` (about 0.5 ms at 2 GHz),
#: doubled until the host has queued the whole call before the GPU leaves the sleep, at most HOST_AHEAD_MAX_CYCLES
HOST_AHEAD_CYCLES = 1_000_000
HOST_AHEAD_MAX_CYCLES = 2_000_000_000


def host_was_ahead(enqueue_ms: float, sleep_ms: float, margin: float = 0.8) -> bool:
    """Whether a host-ahead sample is valid: the host queued the call (``enqueue_ms``, host clock from the
    end of the sleep's launch to the end event's) in less than ``margin`` of the sleep the GPU ran first
    (``sleep_ms``, device clock), so the GPU never waited for a launch inside the timed region."""
    return enqueue_ms < margin * sleep_ms


class HostSyncCall(RuntimeError):
    """A call that waits for the GPU (a host synchronisation inside it): the host cannot run ahead of it,
    so host-ahead timing cannot measure it (raised by :meth:`_Clock.check_no_sync` before any timed call)."""


class _Clock:
    """Times calls of ``fn`` in ms: CUDA events on a GPU, :data:`host_clock` on CPU. With
    ``flush_bytes``, a buffer that large is written before every call, outside the timed region.

    ``host_ahead`` (CUDA only): the *device* time of a call, without the gaps in which the GPU waits for
    the host to launch the next kernel. Before the start event the GPU runs a busy-wait
    (``torch.cuda._sleep``) long enough for the host to queue the whole call behind it, so the call's
    kernels run back to back, as they do in a training iteration where the host runs ahead of the GPU.
    The sleep doubles (and the sample is taken again) until :func:`host_was_ahead` holds."""

    def __init__(self, device, flush_bytes: int = 0, host_ahead: bool = False):
        self.cuda = _is_cuda(device)
        if host_ahead and not self.cuda:
            raise ValueError(f"host-ahead timing needs a CUDA device (the GPU runs ahead of nothing on {device!r})")
        self.device = torch.device(device) if self.cuda else None
        self.host_ahead = bool(host_ahead)
        self.sleep_cycles = HOST_AHEAD_CYCLES
        self.timer = ("cuda_events_host_ahead" if self.host_ahead else "cuda_events") if self.cuda else "perf_counter"
        self.cache = (torch.empty(int(flush_bytes), dtype=torch.int8, device=device if self.cuda else "cpu")
                      if flush_bytes > 0 else None)

    def _ahead(self, fn: Callable[[], object]) -> float:
        """One host-ahead call (see the class docstring), ms of device time."""
        while True:
            torch.cuda.synchronize(self.device)
            before, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            before.record()
            torch.cuda._sleep(self.sleep_cycles)
            t0 = host_clock()
            start.record()
            fn()
            end.record()
            enqueue_ms = host_ms(t0, host_clock())
            end.synchronize()
            if host_was_ahead(enqueue_ms, float(before.elapsed_time(start))):
                return float(start.elapsed_time(end))
            if self.sleep_cycles >= HOST_AHEAD_MAX_CYCLES:
                raise RuntimeError(f"host-ahead timing: the host needs {enqueue_ms:.1f} ms to queue one call, more "
                                   f"than a GPU sleep of {HOST_AHEAD_MAX_CYCLES} cycles: the call launches more "
                                   f"kernels than CUDA's launch queue holds behind a busy GPU (PowerSGD rank 32 "
                                   f"bucket by bucket), so its launches wait for the GPU")
            self.sleep_cycles *= 2

    def check_no_sync(self, fn: Callable[[], object], setup: Callable[[], object] | None = None) -> None:
        """One untimed call with CUDA's sync debug mode at "error": a call that waits for the GPU (``.item()``,
        a solver's status check) can never have the host ahead of it, however long the sleep before it:
        :class:`HostSyncCall` instead of sleeps doubled up to a second. A first untimed call goes before it,
        so that one-time work of a first call (a fused path timing its candidates once, ``_fast.pick``) is
        not taken for the call's own. ``setup`` runs before each of the two calls, as before a timed one."""
        if setup is not None:
            setup()
        fn()
        if setup is not None:
            setup()
        mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            fn()
        except RuntimeError as exc:
            if "synchroniz" not in str(exc):
                raise
            raise HostSyncCall(f"host-ahead timing: the call waits for the GPU ({exc}), so the host cannot run "
                               f"ahead of it") from None
        finally:
            torch.cuda.set_sync_debug_mode(mode)
            torch.cuda.synchronize(self.device)

    def flush(self) -> None:
        if self.cache is not None:
            self.cache.zero_()

    def __call__(self, fn: Callable[[], object]) -> float:
        """One call, alone: the device is synchronised before it (iterations never overlap)."""
        self.flush()
        if self.host_ahead:
            return self._ahead(fn)
        if self.cuda:
            torch.cuda.synchronize(self.device)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end))
        t0 = host_clock()
        fn()
        return host_ms(t0, host_clock())

    def repeat(self, fn: Callable[[], object], n: int, setup: Callable[[], object] | None = None) -> list[float]:
        """``n`` calls, each after ``setup`` and the cache flush (both untimed). On CUDA the calls are
        queued back to back, an event pair around each, one synchronisation at the end
        (``triton.testing.do_bench``)."""
        if self.host_ahead:  # one call at a time, each behind its own sleep
            out = []
            for _ in range(n):
                if setup is not None:
                    setup()
                self.flush()
                out.append(self._ahead(fn))
            return out
        if not self.cuda:
            out = []
            for _ in range(n):
                if setup is not None:
                    setup()
                self.flush()
                t0 = host_clock()
                fn()
                out.append(host_ms(t0, host_clock()))
            return out
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        torch.cuda.synchronize(self.device)
        for start, end in zip(starts, ends):
            if setup is not None:
                setup()
            self.flush()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(self.device)
        return [float(a.elapsed_time(b)) for a, b in zip(starts, ends)]


def time_fn(fn: Callable[[], object], *, n_iter: int = PAPER_ITERATIONS - PAPER_DISCARDED,
            n_warmup: int = PAPER_DISCARDED, device=None, setup: Optional[Callable[[], object]] = None,
            budget_s: Optional[float] = None, min_iter: int = 3,
            agree: Optional[Callable[[float], float]] = None, min_time_s: float | None = None,
            flush_bytes: int = 0, clock=None, host_ahead: bool = False) -> Timing:
    """Warm up ``n_warmup`` times, then time ``n_iter`` calls of ``fn`` (ms statistics).

    ``device``: where ``fn`` runs (``"cuda:0"`` -> CUDA events; ``None``/``"cpu"`` ->
    perf_counter). ``agree(x) -> x'`` makes a per-iteration time identical on all
    ranks (max over ranks); with it the returned times are the agreed ones.
    ``min_time_s``: the repetition policy of the module docstring (``n_iter`` becomes the
    minimum number of repetitions, ``budget_s`` the cap on seconds of timed calls).
    ``flush_bytes``: bytes written before every timed call, outside the timed region (L2 flush).
    ``host_ahead``: time the calls' device work with the host ahead of the GPU (:class:`_Clock`), as in a
    training iteration, instead of alone with every launch gap (CUDA only); a call that waits for the GPU
    cannot be timed so and raises :class:`HostSyncCall` (one untimed call under CUDA's sync debug mode first).
    ``clock``: the timer (default: CUDA events or perf_counter for ``device``; tests pass a fake
    one with ``__call__(fn) -> ms`` and ``repeat(fn, n, setup) -> [ms]``).
    """
    if n_iter < 1:
        raise ValueError(f"time_fn: n_iter must be >= 1, got {n_iter}")
    if n_warmup < 0:
        raise ValueError(f"time_fn: n_warmup must be >= 0, got {n_warmup}")
    if flush_bytes < 0:
        raise ValueError(f"time_fn: flush_bytes must be >= 0, got {flush_bytes}")
    if budget_s is not None:
        if budget_s <= 0:
            raise ValueError(f"time_fn: budget_s must be positive, got {budget_s}")
        if n_warmup < 1:
            raise ValueError("time_fn: budget_s needs at least one warm-up iteration (n_warmup >= 1) "
                             "to estimate the time per iteration")
    if min_time_s is not None:
        if not min_time_s >= 0:
            raise ValueError(f"time_fn: min_time_s must be >= 0, got {min_time_s}")
        if n_warmup < 1:
            raise ValueError("time_fn: min_time_s needs at least one warm-up iteration (n_warmup >= 1) "
                             "to estimate the time per call")
        if agree is not None:
            raise ValueError("time_fn: min_time_s (a repetition count from this rank's own estimate) cannot be "
                             "combined with agree (ranks must run the same iterations); use n_iter/budget_s")
        if budget_s is not None and budget_s < min_time_s:
            raise ValueError(f"time_fn: budget_s ({budget_s}) caps the timed seconds and must be >= "
                             f"min_time_s ({min_time_s})")
    min_iter = max(1, min(int(min_iter), n_iter))
    if clock is None:
        clock = _Clock(device, flush_bytes, host_ahead=True) if host_ahead else _Clock(device, flush_bytes)
        if host_ahead:
            clock.check_no_sync(fn, setup)

    def once() -> float:
        if setup is not None:
            setup()
        ms = clock(fn)
        return agree(ms) if agree is not None else ms

    warm: list[float] = []
    if budget_s is None:
        for _ in range(n_warmup):
            warm.append(once())
    else:
        budget_ms = budget_s * 1e3
        warm.append(once())  # first call: one-time costs, not charged to the budget
        spent = 0.0
        if n_warmup >= 2:  # a second, always: the first call's time says nothing of it (DDP rebuilds its buckets after
            warm.append(once())  # its first iteration; skipping this put that rebuild in the first timed iteration)
            spent += warm[-1]
        while len(warm) < n_warmup and spent + warm[-1] <= 0.2 * budget_ms:
            warm.append(once())  # agreed value: every rank takes the same branch
            spent += warm[-1]
    if min_time_s is not None:
        est = statistics.median(warm[1:] or warm)  # the first call carries one-time costs
        n = reps_needed(est, min_reps=n_iter, min_time_s=min_time_s, budget_s=budget_s, min_iter=min_iter)
        times = clock.repeat(fn, n, setup)
        # the warm-ups' estimate may be high (calls get faster once caches and clocks settle): top up to
        # n_iter repetitions and min_time_s with the measured median, within the budget (a few rounds)
        goal_ms = min_time_s * 1e3
        for _ in range(_TOP_UPS):
            spent, per = math.fsum(times), max(statistics.median(times), 1e-6)
            want = max(n_iter - len(times), math.ceil((goal_ms * (1 - 1e-9) - spent) / per))
            if budget_s is not None:
                want = min(want, math.floor((budget_s * 1e3 - spent) / per))
            if want < 1:
                break
            times += clock.repeat(fn, want, setup)
        return Timing.from_times(times, len(warm))
    if budget_s is None:
        return Timing.from_times([once() for _ in range(n_iter)], len(warm))
    # up to n_iter timed iterations while they fit in 80 % of the budget (never fewer than min_iter), judged on the
    # iterations already timed: the last warm-up alone may still carry one-time costs (a DDP hook's first call on
    # the buckets DDP rebuilt after its first iteration can be slow enough to cut a run to a few iterations)
    times: list[float] = []
    while another_iteration(times, n_iter, min_iter, 0.8 * budget_s):
        times.append(once())  # agreed values: every rank takes the same branch
    return Timing.from_times(times, len(warm))


def time_interleaved(fns: Sequence[Callable[[], object]], *, n_iter: int = PAPER_ITERATIONS - PAPER_DISCARDED,
                     n_warmup: int = PAPER_DISCARDED, device=None, budget_s: Optional[float] = None,
                     min_iter: int = 3, agree: Optional[Callable[[float], float]] = None, clock=None) -> list[Timing]:
    """:func:`time_fn` for several calls at once, iteration by iteration: ``n_warmup`` rounds, then up to
    ``n_iter`` timed rounds, each round calling every ``fn`` once (every other round in reverse order, so no call
    always follows the same one). A slow spell that lasts several rounds then falls on every call alike, where
    two back-to-back runs of :func:`time_fn` would put it on one of them (spells of a shared GPU machine that
    come and go within rounds still move a ratio: ``data/measurements/hook_runner/h200_p1c/``). Each call is timed
    alone on the clock of :func:`time_fn` (synchronised before it). ``budget_s``: no further round once one more
    would take any call past 80 % of it (:func:`another_iteration`; never fewer than ``min_iter`` rounds); the
    warm-up rounds always all run. Returns one :class:`Timing` per ``fn``, in order."""
    fns = list(fns)
    if not fns:
        raise ValueError("time_interleaved: no calls to time")
    if n_iter < 1:
        raise ValueError(f"time_interleaved: n_iter must be >= 1, got {n_iter}")
    if n_warmup < 0:
        raise ValueError(f"time_interleaved: n_warmup must be >= 0, got {n_warmup}")
    if budget_s is not None and budget_s <= 0:
        raise ValueError(f"time_interleaved: budget_s must be positive, got {budget_s}")
    min_iter = max(1, min(int(min_iter), n_iter))
    clock = clock if clock is not None else _Clock(device, 0)

    def one_round(out: list[list[float]], r: int) -> None:
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            ms = clock(fns[i])
            out[i].append(agree(ms) if agree is not None else ms)

    warm: list[list[float]] = [[] for _ in fns]
    for r in range(n_warmup):
        one_round(warm, r)
    times: list[list[float]] = [[] for _ in fns]
    cap = math.inf if budget_s is None else 0.8 * budget_s
    r = n_warmup
    while all(another_iteration(t, n_iter, min_iter, cap) for t in times):
        one_round(times, r)  # agreed values: every rank takes the same branch
        r += 1
    return [Timing.from_times(t, n_warmup) for t in times]


def another_iteration(times_ms: list[float], n_iter: int, min_iter: int, budget_s: float) -> bool:
    """Whether to time one more iteration after ``times_ms``: fewer than ``n_iter`` so far, and either fewer than
    ``min_iter`` or one more at their median still fits in ``budget_s`` (the rule of :func:`time_fn`'s budget, and
    of :func:`studykit.measure.hook_times.measure_hook_times`; pass agreed times in a process group)."""
    if len(times_ms) >= n_iter:
        return False
    return len(times_ms) < min_iter or math.fsum(times_ms) + statistics.median(times_ms) <= budget_s * 1e3
