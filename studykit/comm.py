"""How a compressor's payloads cross workers.

Every compressor protocol is written against the tiny :class:`Communicator`
interface (``all_reduce`` sums, ``all_gather`` collects), never against
``torch.distributed`` directly. The same protocol code therefore runs

* for real under ``torchrun`` (:class:`TorchComm`: NCCL on GPUs, gloo on CPUs),
* with world size 1 for encode/decode profiling (:class:`LocalComm`),
* for ``n`` simulated workers in one process (:class:`SimGroup`, threads in lockstep),
* under :class:`RecordingComm`, which logs each collective's kind and bytes:
  exactly the communication term the performance model needs.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

__all__ = [
    "Collective", "Communicator", "LocalComm", "TorchComm", "RecordingComm", "SimGroup",
]


@dataclass(frozen=True)
class Collective:
    """One collective call: its kind and the bytes *one* worker contributes to it."""

    op: str  # "all_reduce" or "all_gather"
    numel: int
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        """Bytes this worker puts in (for all_gather: its own shard)."""
        return self.numel * _itemsize(self.dtype)

    def as_dict(self) -> dict:
        return {"op": self.op, "numel": self.numel, "dtype": str(self.dtype).replace("torch.", ""),
                "nbytes": self.nbytes}


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@runtime_checkable
class Communicator(Protocol):
    """What a compressor protocol may do with other workers."""

    rank: int
    world_size: int

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Element-wise SUM over workers; returns the summed tensor (may reuse the input)."""

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every worker's tensor, in rank order (all the same shape and dtype)."""


class LocalComm:
    """World size 1: collectives are identities (used to time encode/decode alone)."""

    rank = 0
    world_size = 1

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return [tensor]


class TorchComm:
    """``torch.distributed`` collectives on a process group (default: the world)."""

    def __init__(self, group=None):
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("TorchComm needs torch.distributed initialised "
                               "(run under torchrun and call dist.init_process_group first)")
        self._dist = dist
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.contiguous()
        self._dist.all_reduce(tensor, group=self.group)
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        # gloo wants a flat output buffer; NCCL accepts either
        out = torch.empty(self.world_size * tensor.numel(), dtype=tensor.dtype, device=tensor.device)
        # all_gather_single is the newer name of all_gather_into_tensor (torch >= 2.13 warns on the old one)
        gather = getattr(self._dist, "all_gather_single", None) or self._dist.all_gather_into_tensor
        gather(out, tensor.contiguous().reshape(-1), group=self.group)
        return list(out.view(self.world_size, *tensor.shape).unbind(0))


class RecordingComm:
    """Wraps another communicator and logs every collective (kind, numel, dtype)."""

    def __init__(self, inner: Communicator | None = None, world_size: int | None = None):
        self.inner = inner if inner is not None else LocalComm()
        self.rank = self.inner.rank
        # A recording for the model may pretend to be larger than the inner group.
        self.world_size = world_size if world_size is not None else self.inner.world_size
        self.log: list[Collective] = []

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        self.log.append(Collective("all_reduce", tensor.numel(), tensor.dtype))
        out = self.inner.all_reduce(tensor)
        if self.world_size != self.inner.world_size:  # pretend: sum of identical copies
            out = out * (self.world_size // self.inner.world_size)
        return out

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        self.log.append(Collective("all_gather", tensor.numel(), tensor.dtype))
        out = self.inner.all_gather(tensor)
        if self.world_size != self.inner.world_size:
            out = [out[i % len(out)] for i in range(self.world_size)]
        return out

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.log)


class SimGroup:
    """``world_size`` simulated workers in one process, one thread each, in lockstep.

    ``group.comm(rank)`` gives each thread its communicator. Sums are taken in rank
    order, so results are deterministic and identical on every worker.
    """

    def __init__(self, world_size: int):
        if world_size < 1:
            raise ValueError(f"SimGroup: world_size must be >= 1, got {world_size}")
        self.world_size = world_size
        self._barrier = threading.Barrier(world_size)
        self._slots: list = [None] * world_size
        self._result = None
        self._lock = threading.Lock()

    def comm(self, rank: int) -> "_SimComm":
        return _SimComm(self, rank)

    def _exchange(self, rank: int, tensor: torch.Tensor, op: str):
        self._slots[rank] = tensor.detach().clone()
        idx = self._barrier.wait()
        if idx == 0:  # one thread builds the result for all
            shapes = {(tuple(t.shape), t.dtype) for t in self._slots}
            if len(shapes) != 1:
                self._result = ValueError(f"{op}: workers passed different shapes/dtypes {sorted(map(str, shapes))}")
            elif op == "all_reduce":
                acc = self._slots[0].clone()
                for t in self._slots[1:]:
                    acc += t
                self._result = acc
            else:
                self._result = [t.clone() for t in self._slots]
        self._barrier.wait()
        result = self._result
        self._barrier.wait()  # nobody overwrites _result before all have read it
        if isinstance(result, Exception):
            raise result
        return result.clone() if op == "all_reduce" else [t.clone() for t in result]

    def abort(self):
        self._barrier.abort()


class _SimComm:
    def __init__(self, group: SimGroup, rank: int):
        self.group = group
        self.rank = rank
        self.world_size = group.world_size

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.group._exchange(self.rank, tensor, "all_reduce")

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return self.group._exchange(self.rank, tensor, "all_gather")
