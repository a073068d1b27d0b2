"""Host-ahead timing (studykit.measure.timing): its checks on a machine without a GPU; the GPU path itself
runs in scripts/gpu_checks.sh (phase hostahead)."""
import pytest

from studykit.measure.timing import host_was_ahead, time_fn


# ------------------------------------------------------------------ host-ahead timing (CUDA only)
def test_host_ahead_needs_cuda_and_says_so():
    with pytest.raises(ValueError, match="host-ahead timing needs a CUDA device"):
        time_fn(lambda: None, device="cpu", host_ahead=True)


def test_a_host_ahead_sample_counts_only_when_the_host_queued_the_call_inside_the_sleep():
    assert host_was_ahead(0.5, 1.0)
    assert not host_was_ahead(0.9, 1.0)   # within 20 % of the sleep's end: the GPU may have caught up
    assert not host_was_ahead(2.0, 1.0)
    assert host_was_ahead(0.9, 1.0, margin=0.95)


@pytest.mark.gpu
def test_host_ahead_removes_the_launch_gaps_of_a_launch_bound_call():
    """300 one-element kernels: alone the GPU waits for every launch; host-ahead it runs them back to back."""
    import torch
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    x = torch.zeros(16, device="cuda")

    def many():
        for _ in range(300):
            x.add_(1.0)
    alone = time_fn(many, device="cuda", n_iter=20, n_warmup=3).ms_median
    ahead = time_fn(many, device="cuda", n_iter=20, n_warmup=3, host_ahead=True).ms_median
    assert 0 < ahead < 0.7 * alone, (ahead, alone)


@pytest.mark.gpu
def test_host_ahead_refuses_a_call_that_waits_for_the_gpu():
    """A call with a host synchronisation inside (here ``.item()``) waits for the sleep before it: however long
    the sleep, the host never gets ahead. It is refused at once (CUDA's sync debug mode), not after a 1 s sleep."""
    import time

    import torch

    from studykit.measure.timing import HostSyncCall
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    x = torch.ones(1 << 20, device="cuda")
    t0 = time.perf_counter()
    with pytest.raises(HostSyncCall, match="waits for the GPU"):
        time_fn(lambda: x.sum().item(), device="cuda", n_iter=5, n_warmup=1, host_ahead=True)
    assert time.perf_counter() - t0 < 0.5


def test_bench_times_a_synchronising_call_without_the_host_ahead_and_says_so(monkeypatch):
    from studykit.measure import bench
    from studykit.measure.timing import HostSyncCall, Timing

    calls = []

    def fake_time_fn(fn, *, host_ahead=False, **kw):
        calls.append(host_ahead)
        if host_ahead:
            raise HostSyncCall("waits for the GPU")
        return Timing.from_times([1.0, 1.0, 1.0], 1)

    monkeypatch.setattr(bench.calls, "time_fn", fake_time_fn)
    t, timer = bench._time(lambda: None, "cuda:0", bench.RepPolicy(host_ahead=True))
    assert calls == [True, False] and timer == "cuda_events_host_sync" and t.ms_median == 1.0
    calls.clear()
    assert bench._time(lambda: None, "cuda:0", bench.RepPolicy())[1] == "cuda_events" and calls == [False]
