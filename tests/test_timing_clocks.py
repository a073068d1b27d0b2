"""The clocks of ``studykit.measure.timing``: the host clock, spans read on it, and the stamp clock."""
import time

import pytest

from studykit.measure import timing as T


def test_host_clock_is_perf_counter_and_host_ms_reads_a_span():
    assert T.host_clock is time.perf_counter
    assert T.host_ms(1.5, 1.75) == pytest.approx(250.0)
    t0 = T.host_clock()
    assert T.host_ms(t0, T.host_clock()) >= 0.0


def test_stamp_clock_on_cpu_reads_the_host_clock():
    clock = T.StampClock(cuda=False)
    a = clock.now()
    b = clock.now()
    assert isinstance(a, float) and b >= a
    assert clock.span_ms(a, b) == pytest.approx(T.host_ms(a, b))
    assert clock.span_ms(2.0, 2.5) == pytest.approx(500.0)


def test_cpu_clock_times_calls_on_the_host_clock(monkeypatch):
    ticks = iter([10.0, 10.002, 20.0, 20.004, 30.0, 30.001])
    monkeypatch.setattr(T, "host_clock", lambda: next(ticks))
    clock = T._Clock("cpu")
    assert clock(lambda: None) == pytest.approx(2.0)
    assert clock.repeat(lambda: None, 2) == pytest.approx([4.0, 1.0])
