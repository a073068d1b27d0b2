"""The one timing helper: statistics, warm-up accounting, the per-configuration budget."""
import statistics
import time

import pytest

from studykit.measure.timing import PAPER_DISCARDED, PAPER_ITERATIONS, Timing, time_fn


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
    d = t.as_dict()
    assert set(d) == {"ms_median", "ms_mean", "ms_min", "ms_max", "n_iter", "n_warmup", "times_ms"}
    assert "times_ms" not in t.as_dict(raw=False)


def test_budget_cuts_iterations_but_keeps_min_iter():
    t = time_fn(lambda: time.sleep(0.01), n_iter=50, n_warmup=10, budget_s=0.1, min_iter=2)
    # 80 ms for ~10 ms iterations -> at most 8 timed; 20 ms of warm-ups after the first -> at most 3
    assert 2 <= t.n_iter <= 8 and 1 <= t.n_warmup <= 3
    slow = time_fn(lambda: time.sleep(0.03), n_iter=50, n_warmup=10, budget_s=0.01, min_iter=2)
    assert slow.n_iter == 2 and slow.n_warmup == 1


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
