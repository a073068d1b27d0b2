"""Probes run inside a cluster: an all-reduce timing (gloo or NCCL) and an iperf-like TCP stream."""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from pathlib import Path


def append_record(path: Path | str, rec: dict) -> None:
    """Append ``rec`` to the JSON Lines file ``path`` as one flushed, fsync'ed line, after the kit's repair of a last
    line an interrupted run cut short (:func:`studykit.measure.records.repair`).

    Probe records bypass :class:`~studykit.measure.records.RecordWriter`, whose records need a ``config_id`` and a
    ``status``: a probe measures the link rather than a configuration to resume, and with a ``config_id`` the reader
    would keep only one of two probes of the same link on the same host."""
    from studykit.measure.records import repair

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    repair(path)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _stamped(rec: dict, device) -> dict:
    """A probe's record with the kit's schema version and provenance (:func:`studykit.measure.records.provenance`:
    hardware, versions, host, commit, also ``STUDYKIT_GIT_COMMIT`` on machines without ``.git``, time, network)."""
    from studykit.measure.records import SCHEMA_VERSION, provenance

    return {"schema": SCHEMA_VERSION, **provenance(device), **rec}


# ---- the probe: a self-contained gloo all-reduce timing, run inside a worker ------------------
def probe_allreduce(size_mb: float = 16.0, iters: int = 5, warmup: int = 2, timeout_s: float = 60.0,
                    backend: str = "gloo") -> dict | None:
    """Time an all-reduce of ``size_mb`` MiB of fp32 under the env:// rendezvous; rank 0 returns a record.

    ``backend`` "gloo" (CPU tensors) or "nccl" (the worker's one visible GPU). ``busbw_gbps`` =
    algbw * 2(p-1)/p (nccl-tests convention): the per-link rate a ring all-reduce needs, which is what
    a per-worker egress limit bounds. For 2 workers busbw == algbw.
    """
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be gloo or nccl, got {backend!r}")
    torch.set_num_threads(1)
    device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method="env://", timeout=timedelta(seconds=timeout_s))
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        numel = int(size_mb * 2**20) // 4
        x = torch.ones(numel, dtype=torch.float32, device=device)
        times = []
        for i in range(warmup + iters):
            dist.barrier()
            if backend == "nccl":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            if backend == "nccl":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            if i >= warmup:
                times.append(dt)
        t = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank defines each iteration
        times = t.tolist()
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    nbytes = numel * 4
    med = statistics.median(times)
    algbw = nbytes * 8 / med / 1e9
    rec = {
        "kind": "throttle_probe", "op": "all_reduce", "backend": backend, "dtype": "float32",
        "nbytes": nbytes, "world_size": world_size, "warmup": warmup, "iters": iters,
        "time_s": {"median": med, "mean": statistics.fmean(times), "min": min(times), "max": max(times)},
        "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (world_size - 1) / world_size,
    }
    return _stamped(rec, device)


#: "... NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0" -> "NET/Socket"
_VIA_RE = re.compile(r"\bvia (\w+)(?:/(\w+))?")


def nccl_transports(*logs: str) -> list[str]:
    """The transports NCCL says it connected its channels with (``NCCL_DEBUG=INFO`` output), e.g.
    ``["NET/Socket"]``; ``P2P/...``, ``SHM/...`` or ``NVLS`` mean traffic bypassed the shaped link."""
    found = set()
    for log in logs:
        for line in log.splitlines():
            if "NCCL INFO" in line and "via " in line:
                m = _VIA_RE.search(line)
                if m:
                    found.add(m.group(1) + (f"/{m.group(2)}" if m.group(2) else ""))
    return sorted(found)


def probe_stream(size_mb: float = 64.0, timeout_s: float = 60.0, pings: int = 20,
                 incast: bool = False) -> dict | None:
    """iperf-like: rank 1 streams ``size_mb`` MiB over one TCP connection to rank 0; rank 0 returns a record.

    Measures the shaped link itself (TCP goodput, at most ``payload_efficiency`` x the rate), without
    gloo's CPU work: compare with :func:`probe_allreduce` to see which one stops tracking first.
    First ``pings`` one-byte round trips (rank 1) give ``rtt_ms`` (the delay line adds 2 x latency_ms).
    ``incast``: every rank > 0 streams ``size_mb`` to rank 0 at once; the aggregate is bounded by
    rank 0's ingress (shaped on the veth and bridge topologies, not on the delay line's).
    """
    import selectors
    import socket

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]) + 1000
    nbytes = int(size_mb * 2**20)
    n_senders = world_size - 1 if incast else 1
    if rank == 0:
        with socket.create_server((addr, port), backlog=8) as srv:
            srv.settimeout(timeout_s)
            conns = {}
            while len(conns) < n_senders:
                conn, _ = srv.accept()
                conn.settimeout(timeout_s)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conns[int(conn.recv(1)[0])] = conn  # each sender first says its rank
            try:
                rtts = []
                for _ in range(pings):  # ping-pong of one byte: the round trip (latency, not bandwidth)
                    t0 = time.perf_counter()
                    conns[1].sendall(b"p")
                    conns[1].recv(1)
                    rtts.append(time.perf_counter() - t0)
                for c in conns.values():
                    c.sendall(b"g")  # go
                sel = selectors.DefaultSelector()
                for c in conns.values():
                    c.setblocking(False)
                    sel.register(c, selectors.EVENT_READ)
                buf = bytearray(1 << 20)
                total = nbytes * n_senders
                got, first, t0, half, open_conns = 0, 0, None, None, len(conns)
                deadline = time.monotonic() + timeout_s
                while got < total and open_conns and time.monotonic() < deadline:
                    for key, _ in sel.select(timeout=1.0):
                        try:
                            k = key.fileobj.recv_into(buf)
                        except BlockingIOError:
                            continue
                        if k == 0:
                            sel.unregister(key.fileobj)
                            open_conns -= 1
                            continue
                        if t0 is None:  # time from the first byte: excludes connection set-up
                            t0, first = time.perf_counter(), k
                        got += k
                        if half is None and got >= total // 2:
                            half = (time.perf_counter(), got)
                t1 = time.perf_counter()
                for c in conns.values():
                    c.setblocking(True)
                    c.sendall(b"k")
            finally:
                for c in conns.values():
                    c.close()
        if got < total:
            raise RuntimeError(f"stream: received {got} of {total} bytes")
        dt = t1 - t0
        rec = {"kind": "throttle_stream", "op": "tcp_incast" if incast else "tcp_stream",
                "senders": n_senders, "nbytes": got, "time_s": dt,
                "goodput_gbps": (got - first) * 8 / dt / 1e9,
                # second half only: TCP's window has grown by then (matters with latency)
                "goodput_2nd_half_gbps": (got - half[1]) * 8 / max(t1 - half[0], 1e-9) / 1e9 if half else None,
                "rtt_ms": {"median": statistics.median(rtts) * 1e3, "min": min(rtts) * 1e3} if rtts else None}
        return _stamped(rec, "cpu")
    if rank <= n_senders:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                conn = socket.create_connection((addr, port), timeout=timeout_s)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.sendall(bytes([rank]))
            if rank == 1:
                for _ in range(pings):
                    conn.sendall(conn.recv(1))
            conn.recv(1)  # go
            conn.sendall(bytes(nbytes))
            conn.recv(1)
    return None


def _probe_main(argv: list[str], stream: bool = False) -> int:
    ap = argparse.ArgumentParser(
        prog=f"python -m studykit.measure.throttle {'_stream' if stream else '_probe'}",
        description="one TCP stream rank 1 -> rank 0 (iperf-like)" if stream
        else "time a gloo all-reduce (run inside a throttled cluster)")
    ap.add_argument("--size-mb", type=float, default=64.0 if stream else 16.0, help="message size, MiB")
    if stream:
        ap.add_argument("--incast", action="store_true", help="every rank > 0 sends to rank 0 at once")
    else:
        ap.add_argument("--iters", type=int, default=5)
        ap.add_argument("--warmup", type=int, default=2)
        ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                        help="gloo on CPU tensors, nccl on the worker's GPU")
    ap.add_argument("--timeout-s", type=float, default=60.0, help="collective / socket timeout")
    ap.add_argument("--out", help="append the record (JSON Lines) to this file (rank 0)")
    a = ap.parse_args(argv)
    if stream:
        rec = probe_stream(a.size_mb, a.timeout_s, incast=a.incast)
    else:
        rec = probe_allreduce(a.size_mb, a.iters, a.warmup, a.timeout_s, backend=a.backend)
    if rec is not None:
        line = json.dumps(rec)
        print(line, flush=True)
        if a.out:
            append_record(a.out, rec)
    return 0
