"""``sweep``: collectives over message sizes, under torchrun (NCCL on GPUs, gloo on CPUs).

Agarwal et al. 2022, Fig. 4 compares all-reduce, all-gather and a parameter server; App. C
derives alpha from small all-reduces and BW from large ones. Bandwidths follow
the nccl-tests conventions (PERFORMANCE.md there):

* ``all_reduce``: algbw = S / t, busbw = algbw * 2(p-1)/p;
* ``all_gather``: S is each rank's input, nccl-tests' size is p*S,
  algbw = p*S / t, busbw = algbw * (p-1)/p;
* ``ps_gather`` (gather every rank's S bytes to rank 0, sum there, broadcast the
  sum) and ``ps_reduce`` (reduce to rank 0, broadcast): algbw = S / t and
  busbw = algbw (nccl-tests' factor for reduce and broadcast).

The records' ``algbw_GBps`` / ``busbw_GBps`` are GB/s (1e9 bytes per second, nccl-tests' unit); the command
prints each bandwidth in both GB/s (to compare with nccl-tests' tables) and Gbit/s (x 8, the unit of the rest of
the kit: ``--bandwidth-gbps``, calibrations). Each iteration starts after a barrier (untimed); its time is the max
over ranks.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.distributed as dist

from studykit.measure.records import RecordWriter, config_id, make_record
from studykit.measure.runtime import Dist, format_size, note, progress
from studykit.measure.timing import time_fn

__all__ = ["OPS", "bus_factor", "sizes_between", "run_sweep", "result_line"]

OPS = ("all_reduce", "all_gather", "ps_gather", "ps_reduce")


def bus_factor(op: str, world_size: int) -> float:
    """nccl-tests' busbw / algbw factor for ``op`` on ``world_size`` ranks."""
    p = world_size
    if op == "all_reduce":
        return 2 * (p - 1) / p
    if op == "all_gather":
        return (p - 1) / p
    if op in ("ps_gather", "ps_reduce"):
        return 1.0
    raise ValueError(f"unknown op {op!r}; valid: {', '.join(OPS)}")


def nccl_tests_bytes(op: str, size_bytes: int, world_size: int) -> int:
    """The message size nccl-tests reports for ``op`` (the all-gather output, else the input)."""
    return size_bytes * world_size if op == "all_gather" else size_bytes


def sizes_between(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """``min_bytes, min_bytes*factor, ...`` up to ``max_bytes`` (nccl-tests' -b/-e/-f)."""
    if min_bytes < 4 or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"need 4 <= min_bytes <= max_bytes and factor >= 2; got {min_bytes}, {max_bytes}, {factor}")
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= factor
    return out


def result_line(op: str, nbytes: int, time_us: float, algbw_gbytes_s: float, busbw_gbytes_s: float) -> str:
    """What ``sweep`` prints per measurement: op, size, mean time (us), then algbw and busbw each in GB/s
    (nccl-tests' unit, as the records hold them) and in Gbit/s (x 8, the kit's ``--bandwidth-gbps`` unit)."""
    return (f"{op:>10} {format_size(nbytes):>6} {time_us:10.1f} us  "
            f"algbw {algbw_gbytes_s:8.3f} GB/s = {8 * algbw_gbytes_s:8.2f} Gbit/s  "
            f"busbw {busbw_gbytes_s:8.3f} GB/s = {8 * busbw_gbytes_s:8.2f} Gbit/s")


def _collective(op: str, d: Dist, numel: int, dtype: torch.dtype):
    """Buffers and the one-iteration function for ``op``."""
    x = torch.zeros(numel, dtype=dtype, device=d.device)  # zeros: repeated sums never overflow
    p = d.world_size
    if op == "all_reduce":
        return lambda: dist.all_reduce(x)
    if op == "all_gather":
        out = torch.empty(p * numel, dtype=dtype, device=d.device)
        # all_gather_single is the newer name (torch >= 2.13 warns on the old one)
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(out, x)
    if op == "ps_gather":
        bufs = [torch.empty_like(x) for _ in range(p)] if d.rank == 0 else None
        acc = torch.empty_like(x)

        def ps_gather():
            dist.gather(x, gather_list=bufs, dst=0)
            if d.rank == 0:  # the server sums the workers' gradients
                acc.copy_(bufs[0])
                for b in bufs[1:]:
                    acc.add_(b)
            dist.broadcast(acc, src=0)
        return ps_gather
    if op == "ps_reduce":
        y = x.clone()

        def ps_reduce():
            dist.reduce(y, dst=0)
            dist.broadcast(y, src=0)
        return ps_reduce
    raise ValueError(f"unknown op {op!r}; valid: {', '.join(OPS)}")


def run_sweep(d: Dist, ops: Sequence[str], sizes: Sequence[int], writer: RecordWriter, *,
              dtype: torch.dtype = torch.float32, n_iter: int = 50, n_warmup: int = 10,
              budget_s: Optional[float] = None, min_iter: int = 3, verbose: bool = True) -> int:
    """Time every (op, size) not yet in the file, on every rank; rank 0 writes. Returns records written."""
    if d.world_size < 2:
        raise ValueError("sweep needs at least 2 processes: run it under torchrun --nproc-per-node N (N >= 2)")
    itemsize = torch.empty((), dtype=dtype).element_size()
    done = d.broadcast_object(writer.done() if d.is_main else None)
    todo = []
    for op in ops:
        for size in sizes:
            size = max(1, int(size) // itemsize) * itemsize  # whole elements
            cid = config_id(kind="sweep", op=op, size_bytes=size, dtype=str(dtype).replace("torch.", ""),
                            world_size=d.world_size, backend=d.backend, device_type=d.device.type)
            if cid not in done:
                todo.append((op, size, cid))
    written = 0
    for op, size, cid in progress(todo, total=len(todo), desc="sweep", enabled=verbose and d.is_main):
        numel = max(1, size // itemsize)
        fn = _collective(op, d, numel, dtype)
        t = time_fn(fn, device=d.device, setup=d.barrier, agree=d.agree_max, n_iter=n_iter, n_warmup=n_warmup,
                    budget_s=budget_s, min_iter=min_iter)
        nbytes = numel * itemsize
        algbw = nccl_tests_bytes(op, nbytes, d.world_size) / (t.ms_mean * 1e-3) / 1e9
        factor = bus_factor(op, d.world_size)
        rec = make_record("sweep", cid, device=d.device, backend=d.backend, world_size=d.world_size, timing=t,
                          op=op, size_bytes=nbytes, dtype=str(dtype).replace("torch.", ""),
                          nccl_tests_bytes=nccl_tests_bytes(op, nbytes, d.world_size), algbw_GBps=algbw,
                          bus_factor=factor, busbw_GBps=algbw * factor)
        writer.write(rec)
        written += 1
        note(result_line(op, nbytes, t.ms_mean * 1e3, algbw, algbw * factor), verbose and d.is_main)
        fn = None
    return written
