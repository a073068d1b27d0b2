"""What a ``torch.profiler`` trace of DDP iterations says about where the time goes (``ddp --trace-dir`` writes
them: rank 0, a few iterations per configuration, Chrome trace format, gzipped).

:func:`summarize_trace` reduces one trace to per-iteration figures, ms: the span of GPU activity, each CUDA
stream's busy time (the union of its kernels and copies) and kernel count, which stream is the compute stream (the
busiest), which run NCCL's kernels and which run the rest (a DDP hook's side stream: the codec), how long the
compute stream and the side streams were busy at the same time, and per host thread the busy time of its operators
and its kernel launches. :func:`traces_markdown` sets several traces side by side (post against the hook, one runner
against another). A hook whose codec competes with the backward pass for the GPU shows as side-stream time
overlapping the compute stream while the compute stream's own busy time grows; a host-bound one as a host thread
busy for most of the span while the streams idle.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Iterable, Sequence

__all__ = ["has_device_activity", "load_trace", "summarize_trace", "traces_markdown"]

#: Chrome-trace categories of device work
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
#: name prefixes of NCCL's kernels
NCCL_PREFIXES = ("ncclKernel", "ncclDevKernel", "nccl")
#: the runtime calls that launch device work (counted per host thread)
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch",
            "cudaMemcpyAsync", "cudaMemsetAsync")


def load_trace(path: str | Path) -> list[dict]:
    """The events of a Chrome trace file (``.json`` or ``.json.gz``); a clear error for anything else."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such trace file (ddp --trace-dir writes <config>.json.gz)")
    try:
        raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
        data = json.loads(raw)
    except (OSError, EOFError, ValueError) as exc:
        raise ValueError(f"{path}: not a Chrome trace (JSON, optionally gzipped): {exc}") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ValueError(f"{path}: no traceEvents list (a torch.profiler export_chrome_trace file has one)")
    return [e for e in events if isinstance(e, dict)]


def has_device_activity(events: list[dict] | str | Path) -> bool:
    """Whether a trace (events, or a file :func:`load_trace` reads) holds any device work (kernel, memcpy,
    memset): a profile on a GPU whose CUPTI recorded nothing has none, and :func:`summarize_trace` refuses it."""
    if not isinstance(events, list):
        events = load_trace(events)
    return any(e.get("cat", "") in DEVICE_CATS for e in events)


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _length(intervals: Sequence[tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def _overlap(x: Sequence[tuple[float, float]], y: Sequence[tuple[float, float]]) -> float:
    """Length of the intersection of two sorted, disjoint interval lists."""
    i = j = 0
    total = 0.0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if b > a:
            total += b - a
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


def summarize_trace(events: list[dict] | str | Path, iterations: int = 3) -> dict:
    """Per-iteration figures (ms) of a trace of ``iterations`` DDP iterations (``ddp --trace-dir`` profiles 3):
    ``span_ms`` (first to last device activity), ``streams`` (per CUDA stream: ``busy_ms``, ``kernels``,
    ``role`` compute / nccl / side), ``compute_busy_ms``, ``side_busy_ms``, ``nccl_busy_ms``,
    ``side_during_compute_ms`` (side streams busy while the compute stream is), ``compute_idle_ms`` (the span
    minus the compute stream's busy time) and ``threads`` (per host thread: ``busy_ms`` of its top-level operators,
    ``launches``), busiest first."""
    if not isinstance(events, list):
        events = load_trace(events)
    if not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be an integer >= 1 (the iterations the trace holds), got {iterations!r}")
    dev: dict = {}
    names: dict = {}
    host: dict = {}
    launches: dict = {}
    for e in events:
        if e.get("ph") != "X" or "ts" not in e or "dur" not in e:
            continue
        ts, dur = float(e["ts"]), float(e["dur"])
        cat = e.get("cat", "")
        if cat in DEVICE_CATS:
            stream = (e.get("args") or {}).get("stream", e.get("tid"))
            dev.setdefault(stream, []).append((ts, ts + dur))
            if cat == "kernel":
                names.setdefault(stream, []).append(str(e.get("name", "")))
        elif cat == "cpu_op":
            host.setdefault((e.get("pid"), e.get("tid")), []).append((ts, ts + dur))
        elif cat == "cuda_runtime" and str(e.get("name", "")) in LAUNCHES:
            key = (e.get("pid"), e.get("tid"))
            launches[key] = launches.get(key, 0) + 1
    if not dev:
        raise ValueError("the trace has no device activity (kernel, memcpy, memset events): was it recorded with "
                         "ProfilerActivity.CUDA on a GPU?")
    per = {s: _union(iv) for s, iv in dev.items()}
    start = min(iv[0][0] for iv in per.values())
    end = max(iv[-1][1] for iv in per.values())
    nccl = {s for s, ns in names.items() if ns and sum(n.startswith(NCCL_PREFIXES) for n in ns) > len(ns) / 2}
    others = [s for s in per if s not in nccl]
    compute = max(others or per, key=lambda s: _length(per[s]))
    side = [s for s in per if s != compute and s not in nccl]
    side_u = _union(iv for s in side for iv in per[s])
    nccl_u = _union(iv for s in nccl for iv in per[s])
    k = 1e-3 / iterations  # us in the trace, ms per iteration out
    streams = {str(s): {"role": "compute" if s == compute else ("nccl" if s in nccl else "side"),
                        "busy_ms": _length(iv) * k, "kernels": len(names.get(s, [])) / iterations}
               for s, iv in sorted(per.items(), key=lambda kv: -_length(kv[1]))}
    threads = []
    for key, iv in host.items():
        top = _union(iv)  # nested operators count once
        threads.append({"pid": key[0], "tid": key[1], "busy_ms": _length(top) * k,
                        "launches": launches.get(key, 0) / iterations})
    threads.sort(key=lambda t: -t["busy_ms"])
    return {"iterations": iterations, "span_ms": (end - start) * k, "streams": streams,
            "compute_busy_ms": _length(per[compute]) * k, "compute_idle_ms": (end - start - _length(per[compute])) * k,
            "side_busy_ms": _length(side_u) * k, "nccl_busy_ms": _length(nccl_u) * k,
            "side_during_compute_ms": _overlap(per[compute], side_u) * k, "threads": threads}


def traces_markdown(summaries: dict[str, dict]) -> str:
    """Several :func:`summarize_trace` results side by side, one column per trace (its label), ms per iteration."""
    if not summaries:
        raise ValueError("traces_markdown: no traces to set side by side")
    labels = list(summaries)
    rows = [("span of device activity", "span_ms"), ("compute stream busy", "compute_busy_ms"),
            ("compute stream idle within the span", "compute_idle_ms"), ("side streams busy (codec)", "side_busy_ms"),
            ("side streams busy while the compute stream is", "side_during_compute_ms"),
            ("NCCL streams busy", "nccl_busy_ms")]
    lines = ["| ms per iteration | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    for text, key in rows:
        lines.append(f"| {text} | " + " | ".join(f"{summaries[x][key]:.2f}" for x in labels) + " |")
    lines.append("| compute stream kernels | " + " | ".join(
        f"{next(v['kernels'] for v in summaries[x]['streams'].values() if v['role'] == 'compute'):.0f}"
        for x in labels) + " |")
    lines.append("| side stream kernels | " + " | ".join(
        f"{sum(v['kernels'] for v in summaries[x]['streams'].values() if v['role'] == 'side'):.0f}"
        for x in labels) + " |")
    for i in range(2):
        lines.append(f"| host thread {i + 1}{' (busiest)' if i == 0 else ''}: operators busy / launches | " + " | ".join(
            (f"{summaries[x]['threads'][i]['busy_ms']:.2f} / {summaries[x]['threads'][i]['launches']:.0f}"
             if len(summaries[x]["threads"]) > i else "") for x in labels) + " |")
    return "\n".join(lines) + "\n"
