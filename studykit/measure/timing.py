"""The kit's one timing helper (docs/STYLE.md item 6).

Agarwal et al. 2022, Sec. 3 "Methodology" and App. C: "we run 60 iterations for each setup
and discard the first 10 ... the mean of the remaining 50", error bars = min/max.
:func:`time_fn` does exactly that by default (``n_warmup=10``, ``n_iter=50``) and
reports median, mean, min and max in milliseconds plus the raw list.

* On a CUDA device each iteration is bracketed by CUDA events on the current
  stream, after a ``synchronize`` so iterations never overlap; the elapsed event
  time is read after the end event completes.
* Elsewhere (CPU) each iteration is timed with ``time.perf_counter``; CPU ops are
  synchronous, so no explicit synchronisation is needed.

``setup`` runs before every iteration (warm-up and timed) *outside* the timed
region (e.g. the forward pass when only the backward is timed).

``budget_s`` bounds the time spent on one configuration (GPU sweeps on a clock):
the first warm-up iteration (one-time costs: allocator, cuDNN, lazy init) is not
counted; further warm-ups stop at 20% of the budget and the timed iterations are
cut to fit the remaining 80% (never below ``min_iter``). In a process group,
pass ``agree`` (e.g. max over ranks) so every rank takes the same decisions and
runs the same number of iterations (otherwise collectives would hang).
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

import torch

__all__ = ["Timing", "time_fn", "PAPER_ITERATIONS", "PAPER_DISCARDED"]

#: Agarwal et al. 2022, Sec. 3: 60 iterations per setup, the first 10 discarded
PAPER_ITERATIONS = 60
PAPER_DISCARDED = 10


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

    @classmethod
    def from_times(cls, times_ms: list[float], n_warmup: int) -> "Timing":
        if not times_ms:
            raise ValueError("Timing needs at least one timed iteration")
        times = [float(t) for t in times_ms]
        return cls(ms_median=statistics.median(times), ms_mean=statistics.fmean(times),
                   ms_min=min(times), ms_max=max(times), n_iter=len(times), n_warmup=int(n_warmup),
                   times_ms=times)

    def as_dict(self, raw: bool = True) -> dict:
        d = asdict(self)
        if not raw:
            d.pop("times_ms")
        return d


def _is_cuda(device) -> bool:
    if device is None:
        return False
    return torch.device(device).type == "cuda"


class _Clock:
    """Times one call of ``fn`` in ms: CUDA events on a GPU, perf_counter on CPU."""

    def __init__(self, device):
        self.cuda = _is_cuda(device)
        self.device = torch.device(device) if self.cuda else None

    def __call__(self, fn: Callable[[], object]) -> float:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end))
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3


def time_fn(fn: Callable[[], object], *, n_iter: int = PAPER_ITERATIONS - PAPER_DISCARDED,
            n_warmup: int = PAPER_DISCARDED, device=None, setup: Optional[Callable[[], object]] = None,
            budget_s: Optional[float] = None, min_iter: int = 3,
            agree: Optional[Callable[[float], float]] = None) -> Timing:
    """Warm up ``n_warmup`` times, then time ``n_iter`` calls of ``fn`` (ms statistics).

    ``device``: where ``fn`` runs (``"cuda:0"`` -> CUDA events; ``None``/``"cpu"`` ->
    perf_counter). ``agree(x) -> x'`` makes a per-iteration time identical on all
    ranks (max over ranks); with it the returned times are the agreed ones.
    """
    if n_iter < 1:
        raise ValueError(f"time_fn: n_iter must be >= 1, got {n_iter}")
    if n_warmup < 0:
        raise ValueError(f"time_fn: n_warmup must be >= 0, got {n_warmup}")
    if budget_s is not None:
        if budget_s <= 0:
            raise ValueError(f"time_fn: budget_s must be positive, got {budget_s}")
        if n_warmup < 1:
            raise ValueError("time_fn: budget_s needs at least one warm-up iteration (n_warmup >= 1) "
                             "to estimate the time per iteration")
    min_iter = max(1, min(int(min_iter), n_iter))
    clock = _Clock(device)

    def once() -> float:
        if setup is not None:
            setup()
        ms = clock(fn)
        return agree(ms) if agree is not None else ms

    warm = 0
    if budget_s is None:
        for _ in range(n_warmup):
            once()
            warm += 1
    else:
        budget_ms = budget_s * 1e3
        est = once()  # first call: one-time costs, not charged to the budget
        warm, spent = 1, 0.0
        while warm < n_warmup and spent + est <= 0.2 * budget_ms:
            est = once()  # agreed value: every rank takes the same branch
            spent += est
            warm += 1
        n_iter = max(min_iter, min(n_iter, math.floor(0.8 * budget_ms / max(est, 1e-6))))
    times = [once() for _ in range(n_iter)]
    return Timing.from_times(times, warm)
