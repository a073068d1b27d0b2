"""The one timing helper: statistics, warm-up accounting, the per-configuration budget."""
import statistics
import time

import pytest

from studykit.measure import timing as T
from studykit.measure.timing import PAPER_DISCARDED, PAPER_ITERATIONS, Timing, time_fn


class FakeClock:
    """A clock that reads a script instead of time: call ``i`` (warm-up or timed) "takes" ``times(i)`` ms.
    Records what ``time_fn`` asked of it: single calls (warm-ups) and batches (timed repetitions)."""

    def __init__(self, times):
        self.times = times if callable(times) else (lambda i, v=float(times): v)
        self.calls = 0
        self.single = 0
        self.batches: list[int] = []

    def __call__(self, fn):
        fn()
        self.single += 1
        self.calls += 1
        return self.times(self.calls - 1)

    def repeat(self, fn, n, setup=None):
        self.batches.append(n)
        out = []
        for _ in range(n):
            if setup is not None:
                setup()
            fn()
            out.append(self.times(self.calls))
            self.calls += 1
        return out


def test_defaults_are_the_papers_method():
    calls = []
    t = time_fn(lambda: calls.append(1))
    assert (PAPER_ITERATIONS, PAPER_DISCARDED) == (60, 10)
    assert len(calls) == 60 and t.n_warmup == 10 and t.n_iter == 50 and len(t.times_ms) == 50


def test_sleep_statistics():
    t = time_fn(lambda: time.sleep(0.01), n_iter=5, n_warmup=1)
    assert t.n_iter == 5 and t.n_warmup == 1 and len(t.times_ms) == 5
    assert 10.0 <= t.ms_min <= t.ms_median <= t.ms_max
    assert t.ms_min <= t.ms_mean <= t.ms_max
    assert t.ms_median < 40.0  # a loaded CI machine oversleeps a little, not 4x
    assert t.ms_mean == pytest.approx(statistics.fmean(t.times_ms))
    assert t.ms_median == pytest.approx(statistics.median(t.times_ms))


def test_warmups_are_discarded_and_setup_is_untimed():
    seq = iter([0.05] + [0.0] * 10)
    t = time_fn(lambda: time.sleep(next(seq)), n_iter=4, n_warmup=1, setup=lambda: time.sleep(0.02))
    assert t.ms_max < 15.0  # neither the slow first call nor the 20 ms setup is in the timed ones


def test_from_times_and_as_dict():
    t = Timing.from_times([3.0, 1.0, 2.0, 10.0], n_warmup=2)
    assert (t.ms_median, t.ms_mean, t.ms_min, t.ms_max) == (2.5, 4.0, 1.0, 10.0)
    assert (t.ms_q25, t.ms_q75) == (1.75, 4.75)  # linear interpolation between order statistics
    d = t.as_dict()
    assert set(d) == {"ms_median", "ms_mean", "ms_min", "ms_max", "n_iter", "n_warmup", "times_ms", "ms_q25", "ms_q75"}
    assert "times_ms" not in t.as_dict(raw=False)


def test_budget_cuts_iterations_but_keeps_min_iter():
    t = time_fn(lambda: time.sleep(0.01), n_iter=50, n_warmup=10, budget_s=0.1, min_iter=2)
    # 80 ms for ~10 ms iterations -> at most 8 timed; 20 ms of warm-ups after the first -> at most 3
    assert 2 <= t.n_iter <= 8 and 1 <= t.n_warmup <= 3
    slow = time_fn(lambda: time.sleep(0.03), n_iter=50, n_warmup=10, budget_s=0.01, min_iter=2)
    assert slow.n_iter == 2 and slow.n_warmup == 2  # the second warm-up always runs (DDP's bucket rebuild)
    one = time_fn(lambda: time.sleep(0.03), n_iter=50, n_warmup=1, budget_s=0.01, min_iter=2)
    assert one.n_warmup == 1


def test_agree_makes_decisions_from_the_agreed_time():
    seen = []

    def agree(ms):  # pretend another rank was 100 ms slower
        seen.append(ms)
        return ms + 100.0

    t = time_fn(lambda: None, n_iter=50, n_warmup=5, budget_s=0.5, min_iter=3, agree=agree)
    assert t.n_iter == 3 and t.ms_min >= 100.0 and len(seen) == t.n_iter + t.n_warmup


@pytest.mark.parametrize("kw", [dict(n_iter=0), dict(n_warmup=-1), dict(budget_s=0), dict(budget_s=1, n_warmup=0)])
def test_bad_arguments(kw):
    with pytest.raises(ValueError):
        time_fn(lambda: None, **kw)


# ------------------------------------------------------------------ the repetition policy (issue 19), fake clock
def test_quartiles_match_numpys_default_percentiles():
    np = pytest.importorskip("numpy")
    xs = [5.0, 1.0, 9.0, 2.0, 2.5, 7.0, 3.0]
    q25, med, q75 = T.quartiles(xs)
    assert (q25, med, q75) == pytest.approx(tuple(np.percentile(xs, [25, 50, 75])))
    assert T.quartiles([4.0]) == (4.0, 4.0, 4.0)
    assert T.quartiles([1.0, 3.0]) == (1.5, 2.0, 2.5)
    with pytest.raises(ValueError):
        T.quartiles([])


@pytest.mark.parametrize("est_ms,expected", [
    (0.05, 20_000),   # fast codec: 1 s of timed calls is the binding rule
    (10.0, 100),      # 100 x 10 ms = 1 s exactly
    (20.0, 100),      # slow codec: the 100 repetitions bind (2 s)
    (3.0, 334),       # ceil(1000 / 3)
])
def test_reps_needed_is_100_or_1_s_whichever_is_more(est_ms, expected):
    assert T.reps_needed(est_ms, min_reps=T.MIN_REPS, min_time_s=T.MIN_TIME_S) == expected
    assert (T.MIN_REPS, T.MIN_TIME_S) == (100, 1.0)


def test_reps_needed_budget_caps_but_keeps_min_iter():
    assert T.reps_needed(550.0, min_reps=100, min_time_s=1.0, budget_s=20.0) == 36  # ATOMO-like: floor(20 / 0.55)
    assert T.reps_needed(550.0, min_reps=100, min_time_s=1.0, budget_s=1.0, min_iter=5) == 5
    assert T.reps_needed(0.05, min_reps=100, min_time_s=0.0) == 100  # min_time_s 0: repetitions only
    assert T.reps_needed(0.0, min_reps=7, min_time_s=0.0) == 7  # a call below the clock's resolution
    for bad in ({"min_reps": 0, "min_time_s": 1.0}, {"min_reps": 1, "min_time_s": -1.0}):
        with pytest.raises(ValueError):
            T.reps_needed(1.0, **bad)


def test_time_fn_with_min_time_runs_the_policy_on_the_warmup_estimate():
    # warm-ups: first call 50 ms (compilation), then 0.25 ms; timed calls 0.2 ms
    clock = FakeClock(lambda i: 50.0 if i == 0 else (0.25 if i < 5 else 0.2))
    calls = []
    t = time_fn(lambda: calls.append(1), n_iter=100, n_warmup=5, min_time_s=1.0, clock=clock)
    assert clock.single == 5 and t.n_warmup == 5
    # 1000 ms / 0.25 ms (median of the warm-ups after the first) = 4000; they took 800 ms, so 1000 more
    assert clock.batches == [4000, 1000]
    assert t.n_iter == 5000 and len(calls) == 5005 and sum(t.times_ms) == pytest.approx(1000.0)
    assert t.ms_median == t.ms_q25 == t.ms_q75 == 0.2


def test_the_top_up_stays_within_the_budget():
    slow_warmup = (lambda i: 1.0 if i < 3 else 0.5)  # warm-ups say 1 ms, timed calls take 0.5 ms
    clock = FakeClock(slow_warmup)
    t = time_fn(lambda: None, n_iter=2000, n_warmup=3, min_time_s=1.0, budget_s=1.2, clock=clock)
    # 2000 reps at the estimated 1 ms would pass the 1.2 s budget: 1200; they took 600 ms, so 800 more
    assert clock.batches == [1200, 800] and t.n_iter == 2000 and sum(t.times_ms) == pytest.approx(1000.0)
    clock = FakeClock(slow_warmup)
    t = time_fn(lambda: None, n_iter=3000, n_warmup=3, min_time_s=1.0, budget_s=1.2, clock=clock)
    assert clock.batches == [1200, 1200] and sum(t.times_ms) == pytest.approx(1200.0)  # the budget binds


def test_time_fn_with_min_time_keeps_100_reps_for_slow_calls_and_the_budget_cap():
    clock = FakeClock(30.0)
    t = time_fn(lambda: None, n_iter=100, n_warmup=3, min_time_s=1.0, clock=clock)
    assert t.n_iter == 100  # 100 x 30 ms = 3 s > 1 s: the repetitions bind
    capped = time_fn(lambda: None, n_iter=100, n_warmup=3, min_time_s=1.0, budget_s=1.5, min_iter=3,
                     clock=FakeClock(30.0))
    assert capped.n_iter == 50  # 1.5 s / 30 ms
    # warm-ups past the first stop at 20 % of the budget: 0.3 s / 100 ms -> the first + 3
    slow = FakeClock(100.0)
    t = time_fn(lambda: None, n_iter=100, n_warmup=10, min_time_s=1.0, budget_s=1.5, clock=slow)
    assert t.n_warmup == 4 and t.n_iter == 15


def test_time_fn_reports_the_iqr_of_the_timed_calls():
    seq = [9.0, 9.0] + [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 100.0]  # 2 warm-ups, 9 timed
    t = time_fn(lambda: None, n_iter=9, n_warmup=2, min_time_s=0.0, clock=FakeClock(lambda i: seq[i]))
    assert t.n_iter == 9 and t.times_ms == seq[2:]
    assert (t.ms_q25, t.ms_median, t.ms_q75) == (3.0, 5.0, 7.0)  # the outlier moves the mean, not these
    assert t.ms_mean > t.ms_q75


def test_setup_runs_before_every_repetition_outside_the_clock():
    order = []
    clock = FakeClock(1.0)
    time_fn(lambda: order.append("fn"), n_iter=3, n_warmup=1, min_time_s=0.0, setup=lambda: order.append("setup"),
            clock=clock)
    assert order == ["setup", "fn"] * 4


def test_the_cpu_clock_flushes_before_every_call(monkeypatch):
    clock = T._Clock("cpu", flush_bytes=1024)
    assert clock.cache.numel() == 1024 and clock.timer == "perf_counter"
    flushes, seen = [], []
    monkeypatch.setattr(clock, "flush", lambda: flushes.append(len(seen)))
    clock.repeat(lambda: seen.append(1), 3)
    assert flushes == [0, 1, 2]  # each before its call
    assert T._Clock("cpu").cache is None


@pytest.mark.parametrize("kw,match", [
    ({"min_time_s": -1.0}, "min_time_s"),
    ({"min_time_s": 1.0, "n_warmup": 0}, "warm-up"),
    ({"min_time_s": 1.0, "agree": lambda x: x}, "agree"),
    ({"min_time_s": 2.0, "budget_s": 1.0}, "budget_s"),
    ({"flush_bytes": -1}, "flush_bytes"),
])
def test_bad_policy_arguments_say_what_is_wrong(kw, match):
    with pytest.raises(ValueError, match=match):
        time_fn(lambda: None, clock=FakeClock(1.0), **kw)


def test_budget_reads_the_timed_iterations_not_a_slow_last_warmup():
    """A slow first call (5 s) must not skip the second warm-up (DDP rebuilds its buckets after its first iteration),
    and a second warm-up that still carries one-time costs (1 s) must not cut the timed iterations of a 50 ms
    configuration: 10 of 10 fit in 80 % of a 3 s budget. Before, both did: h200_p2j's ResNet-50 fp16 hooks."""
    clock = FakeClock(lambda i: {0: 5000.0, 1: 1000.0}.get(i, 50.0))
    t = time_fn(lambda: None, n_iter=10, n_warmup=2, budget_s=3.0, min_iter=3, clock=clock)
    assert t.n_warmup == 2 and t.n_iter == 10 and t.ms_median == 50.0
    # iterations slower than the budget allows stop as soon as the next would pass 80 % of it
    slow = time_fn(lambda: None, n_iter=10, n_warmup=2, budget_s=3.0, min_iter=3,
                   clock=FakeClock(lambda i: 5000.0 if i == 0 else 700.0))
    assert slow.n_iter == 3  # 3 x 700 = 2100 ms; a 4th would reach 2800 > 2400


def test_another_iteration_is_the_budget_rule_both_timers_share():
    assert T.another_iteration([], 10, 3, 0.001)  # below min_iter: always
    assert T.another_iteration([500.0, 500.0], 10, 3, 0.001)
    assert not T.another_iteration([50.0] * 10, 10, 3, 100.0)  # n_iter reached
    assert T.another_iteration([50.0] * 3, 10, 3, 0.2)  # 150 + 50 = 200 ms <= 200 ms
    assert not T.another_iteration([50.0] * 4, 10, 3, 0.2)  # 250 ms > 200 ms
    assert T.another_iteration([50.0] * 9, 10, 3, float("inf"))


def test_time_interleaved_times_a_round_of_every_call_per_iteration_every_other_round_reversed():
    order = []
    fns = [lambda: order.append("a"), lambda: order.append("b"), lambda: order.append("c")]
    clock = FakeClock(lambda i: float(i))  # call i takes i ms: the times say which call was timed when
    ta, tb, tc = T.time_interleaved(fns, n_iter=3, n_warmup=2, clock=clock)
    assert "".join(order) == "abc" "cba" + "abc" "cba" "abc"  # 2 warm-up rounds, then 3 timed ones
    # the timed rounds are calls 6-14: a at 6, 11, 12; b at 7, 10, 13; c at 8, 9, 14
    assert ta.times_ms == [6.0, 11.0, 12.0] and tb.times_ms == [7.0, 10.0, 13.0] and tc.times_ms == [8.0, 9.0, 14.0]
    assert ta.n_warmup == tb.n_warmup == 2 and ta.n_iter == 3


def test_time_interleaved_lets_a_slow_spell_fall_on_every_call_alike():
    """Two calls of equal cost, timed through a spell that doubles every call's time for a while: back to back
    (time_fn, one after the other) the spell falls on the second alone; interleaved, their ratio stays 1."""
    spell = lambda i: 20.0 if 30 <= i < 60 else 10.0  # noqa: E731
    first = time_fn(lambda: None, n_iter=30, n_warmup=0, clock=(c := FakeClock(spell)))
    second = time_fn(lambda: None, n_iter=30, n_warmup=0, clock=c)
    assert second.ms_median / first.ms_median == pytest.approx(2.0)
    a, b = T.time_interleaved([lambda: None, lambda: None], n_iter=30, n_warmup=0, clock=FakeClock(spell))
    assert b.ms_median / a.ms_median == pytest.approx(1.0)


def test_time_interleaved_stops_at_the_budget_but_not_before_min_iter():
    ta, tb = T.time_interleaved([lambda: None, lambda: None], n_iter=100, n_warmup=1, budget_s=1.0, min_iter=3,
                                clock=FakeClock(100.0))
    assert ta.n_iter == tb.n_iter == 8  # 8 x 100 ms = 0.8 s, 80 % of the budget; a ninth would pass it
    ta, _ = T.time_interleaved([lambda: None, lambda: None], n_iter=100, n_warmup=1, budget_s=0.05, min_iter=3,
                               clock=FakeClock(100.0))
    assert ta.n_iter == 3


@pytest.mark.parametrize("kw, match", [({"n_iter": 0}, "n_iter must be >= 1"), ({"n_warmup": -1}, "n_warmup"),
                                       ({"budget_s": 0}, "budget_s must be positive")])
def test_time_interleaved_rejects_bad_counts(kw, match):
    with pytest.raises(ValueError, match=match):
        T.time_interleaved([lambda: None], clock=FakeClock(1.0), **kw)
    with pytest.raises(ValueError, match="no calls to time"):
        T.time_interleaved([], clock=FakeClock(1.0))
