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
