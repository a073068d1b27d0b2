"""Plumbing shared by the measurement commands: devices, process groups, progress, argument parsing."""
from __future__ import annotations

import gc
import os
import re
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Iterable, Optional

import torch
import torch.distributed as dist

from studykit.compressors.registry import setting_label

__all__ = ["Dist", "init_dist", "finish_dist", "pick_device", "progress", "parse_size", "format_size",
           "CompressorSpec", "parse_compressor_specs"]


def pick_device(name: Optional[str] = None, local_rank: int = 0) -> torch.device:
    """``name`` if given (``cuda`` -> ``cuda:LOCAL_RANK``), else the local GPU if any, else CPU."""
    if name in (None, "auto"):
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except (RuntimeError, TypeError):
        raise ValueError(f"device {name!r} is not a device; valid: auto, cpu, cuda, cuda:N") from None
    if dev.type not in ("cpu", "cuda"):  # meta, mps, ...: nothing is measured or trained there
        raise ValueError(f"device {name!r} is not supported; valid: auto, cpu, cuda, cuda:N")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("device cuda requested but torch.cuda.is_available() is False; use --device cpu")
        if dev.index is None:
            dev = torch.device("cuda", local_rank)
        if dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return dev


@dataclass
class Dist:
    """This process's place in the group (world size 1 without torchrun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str = "none"
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    initialized_here: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def agree_max(self, x: float) -> float:
        """Max of ``x`` over ranks (identity without a group)."""
        if self.world_size == 1 or not dist.is_initialized():
            return x
        t = torch.tensor([float(x)], dtype=torch.float64 if self.backend != "nccl" else torch.float32,
                         device=self.device if self.backend == "nccl" else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def barrier(self) -> None:
        if self.world_size > 1 and dist.is_initialized():
            if self.backend == "nccl":
                dist.barrier(device_ids=[self.device.index])
            else:
                dist.barrier()

    def broadcast_object(self, obj):
        """Rank 0's ``obj`` on every rank."""
        if self.world_size == 1 or not dist.is_initialized():
            return obj
        box = [obj if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def init_dist(backend: str = "auto", device: Optional[str] = None, *, require_group: bool = False,
              timeout_s: float = 300.0) -> Dist:
    """Join the torchrun group (env://) if there is one, else a group of one when ``require_group``.

    ``backend='auto'``: NCCL when CUDA is available, else gloo. On NCCL each rank
    uses ``cuda:LOCAL_RANK``. ``timeout_s`` bounds a stuck collective.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if backend not in ("auto", "nccl", "gloo"):
        raise ValueError(f"unknown backend {backend!r}; valid: auto, nccl, gloo")
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and (device is None or "cuda" in str(device)) else "gloo"
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise ValueError("backend nccl needs CUDA; use --backend gloo on CPUs")
        dev = pick_device(device or "cuda", local_rank)
        torch.cuda.set_device(dev)
    else:
        dev = pick_device(device or "cpu", local_rank)
    d = Dist(rank=rank, world_size=world_size, local_rank=local_rank, backend=backend, device=dev)
    if dist.is_available() and dist.is_initialized():
        d.rank, d.world_size = dist.get_rank(), dist.get_world_size()
        return d
    timeout = timedelta(seconds=timeout_s)
    if world_size > 1 or "MASTER_ADDR" in os.environ:
        dist.init_process_group(backend, timeout=timeout)  # env:// from torchrun
        d.initialized_here = True
    elif require_group:  # a group of one, so DDP runs without torchrun
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
        d.initialized_here = True
    else:
        d.backend = "none"
    if d.initialized_here:
        d.rank, d.world_size = dist.get_rank(), dist.get_world_size()
    return d


def finish_dist(d: Dist, ok: bool = True) -> None:
    """Tear down cleanly (MACHINE-NOTES: gc, barrier, then destroy, or gloo may abort at exit)."""
    gc.collect()
    if d.initialized_here and dist.is_initialized():
        if ok:
            d.barrier()
        dist.destroy_process_group()


def progress(iterable: Iterable, *, total: Optional[int] = None, desc: str = "", enabled: bool = True):
    """A tqdm bar on rank 0 when tqdm is installed; the bare iterable otherwise."""
    if enabled:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return iterable
        # disable=None: no bar when stderr is not a terminal (logs keep the per-record lines)
        return tqdm(iterable, total=total, desc=desc, mininterval=1.0, dynamic_ncols=True, file=sys.stderr,
                    disable=None)
    return iterable


def note(msg: str, enabled: bool = True) -> None:
    """One line of log that does not break a tqdm bar."""
    if not enabled:
        return
    try:
        from tqdm.auto import tqdm
        tqdm.write(msg, file=sys.stdout)
    except ImportError:
        print(msg, flush=True)


_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20, "MIB": 2**20,
          "G": 2**30, "GB": 2**30, "GIB": 2**30}


def parse_size(text: str | int) -> int:
    """``"64K"`` -> 65536 (binary units: K, M, G; plain integers are bytes)."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError(f"bad size {text!r}; write bytes as e.g. 4096, 64K, 32M, 1G")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def format_size(n: int) -> str:
    for unit, k in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= k and n % k == 0:
            return f"{n // k}{unit}"
    return f"{n}B"


@dataclass(frozen=True)
class CompressorSpec:
    """A compressor name with parameters, written ``name`` or ``name:key=value,key=value``."""

    name: str
    params: tuple = ()

    @property
    def kwargs(self) -> dict:
        return dict(self.params)

    def __str__(self) -> str:
        return setting_label(self.name, self.kwargs, "spec")


def parse_compressor_specs(texts: Optional[list[str]]) -> list[CompressorSpec]:
    """Parse and validate ``name[:k=v,...]`` specs against the registry (all compressors if empty).

    Raises ``ValueError`` naming the valid compressors or parameters.
    """
    from studykit import compressors as C

    if not texts or texts == ["all"]:
        return [CompressorSpec(n) for n in C.available()]
    specs = []
    for text in texts:
        try:
            name, params = C.parse_spec(text)
        except C.CompressorError as exc:
            raise ValueError(str(exc)) from None
        spec = CompressorSpec(name, tuple(params.items()))
        specs.append(spec)
    return specs
