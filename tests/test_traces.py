"""studykit.measure.traces: a profiler trace reduced to where an iteration's time goes (hand-made traces)."""
import gzip
import json

import pytest

from studykit.measure.traces import summarize_trace, traces_markdown


def _k(stream, ts, dur, name="gemm"):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": stream,
            "args": {"stream": stream}}


def _trace(iterations=1):
    """One iteration: compute stream 7 busy 0-100 us with a 20 us gap (40-60), a side stream 20 busy 30-70 us,
    NCCL on stream 30 at 70-90 us; a host thread with nested operators and two launches."""
    ev = [_k(7, 0, 40), _k(7, 60, 40), _k(20, 30, 20, "powersgd"), _k(20, 50, 20, "orth"),
          _k(30, 70, 20, "ncclDevKernel_AllReduce"),
          {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 50, "pid": 1, "tid": 11},
          {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 10, "dur": 20, "pid": 1, "tid": 11},
          {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 0, "dur": 5, "pid": 1, "tid": 12},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1, "dur": 1, "pid": 1, "tid": 11},
          {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 2, "dur": 1, "pid": 1, "tid": 11}]
    return ev


def test_a_hand_made_trace_is_reduced_to_its_known_figures():
    s = summarize_trace(_trace(), iterations=1)
    assert s["span_ms"] == pytest.approx(0.1)
    assert s["compute_busy_ms"] == pytest.approx(0.08) and s["compute_idle_ms"] == pytest.approx(0.02)
    assert s["side_busy_ms"] == pytest.approx(0.04)
    assert s["side_during_compute_ms"] == pytest.approx(0.02)  # 30-40 and 60-70 us
    assert s["nccl_busy_ms"] == pytest.approx(0.02)
    assert {v["role"] for v in s["streams"].values()} == {"compute", "side", "nccl"}
    assert s["threads"][0]["tid"] == 11 and s["threads"][0]["busy_ms"] == pytest.approx(0.05)  # nested: once
    assert s["threads"][0]["launches"] == 2


def test_iterations_divide_and_a_gzipped_file_reads(tmp_path):
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": _trace()}).encode()))
    s = summarize_trace(path, iterations=2)
    assert s["span_ms"] == pytest.approx(0.05) and s["streams"]["20"]["kernels"] == pytest.approx(1.0)
    md = traces_markdown({"post": s, "hook": summarize_trace(_trace(), iterations=1)})
    assert "| span of device activity | 0.05 | 0.10 |" in md


@pytest.mark.parametrize("content, match", [
    (b"not json", "not a Chrome trace"),
    (json.dumps({"x": 1}).encode(), "no traceEvents list"),
    (json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": 0, "dur": 1}]}).encode(), "no device activity"),
])
def test_bad_traces_are_clear_errors(tmp_path, content, match):
    path = tmp_path / "t.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=match):
        summarize_trace(path)


def test_iterations_must_be_a_positive_integer():
    with pytest.raises(ValueError, match="iterations must be an integer >= 1"):
        summarize_trace(_trace(), iterations=0)


def test_device_activity_is_what_a_trace_without_kernels_lacks(tmp_path):
    from studykit.measure.traces import has_device_activity

    assert has_device_activity(_trace())
    host_only = [e for e in _trace() if e["cat"] not in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert not has_device_activity(host_only)
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": host_only}).encode()))
    assert not has_device_activity(path)


class _Profile:
    """Stands in for torch.profiler.profile: the n-th profile exports ``traces[n]`` (hand-made events)."""

    def __init__(self, traces):
        self.traces, self.n = traces, 0

    def __call__(self, activities=None):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.n += 1
        return False

    def export_chrome_trace(self, path):
        with gzip.open(path, "wt") as f:
            json.dump({"traceEvents": self.traces[self.n - 1]}, f)


def _run_trace(monkeypatch, tmp_path, traces, device="cuda:0"):
    """``studykit.measure.ddp._trace`` with a stand-in profiler and one rank on ``device``: (steps, trace dir)."""
    import types

    import torch

    from studykit.measure import ddp as mddp

    prof = _Profile(traces)
    monkeypatch.setattr(torch.profiler, "profile", prof)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    steps = []
    d = types.SimpleNamespace(device=torch.device(device), is_main=True, agree_max=lambda x: x)
    cfg = types.SimpleNamespace(model="resnet50", batch_size=64, mode="hook", compressor="bf16",
                                hook_coalesce_mb=None, hook_runner="graph")
    mddp._trace(lambda: steps.append(1), d, cfg, str(tmp_path / "tr"))
    return len(steps), tmp_path / "tr"


def test_a_gpu_trace_the_profiler_left_empty_is_profiled_again(monkeypatch, tmp_path):
    """``ddp --trace-dir``: a profile on a GPU that recorded no device work (seen on an H200) is taken again."""
    from studykit.measure.traces import has_device_activity

    host_only = [e for e in _trace() if e["cat"] != "kernel"]
    steps, folder = _run_trace(monkeypatch, tmp_path, [host_only, _trace()])
    assert steps == 6  # two profiles of 3 iterations
    assert has_device_activity(folder / "resnet50_b64_hook_bf16_graph.json.gz")


def test_a_gpu_trace_empty_every_time_is_not_written_and_is_named(monkeypatch, tmp_path, capsys):
    from studykit.measure.ddp import TRACE_TRIES

    host_only = [e for e in _trace() if e["cat"] != "kernel"]
    steps, folder = _run_trace(monkeypatch, tmp_path, [host_only] * TRACE_TRIES)
    assert steps == 3 * TRACE_TRIES and list(folder.iterdir()) == []
    err = capsys.readouterr().err
    assert "no device activity for resnet50_b64_hook_bf16_graph" in err and "not written" in err


def test_a_cpu_trace_has_no_device_work_to_miss(monkeypatch, tmp_path):
    host_only = [e for e in _trace() if e["cat"] != "kernel"]
    steps, folder = _run_trace(monkeypatch, tmp_path, [host_only], device="cpu")
    assert steps == 3 and [p.name for p in folder.iterdir()] == ["resnet50_b64_hook_bf16_graph.json.gz"]
