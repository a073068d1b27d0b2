"""How a compressor's payloads cross workers.

Every compressor protocol is written against the tiny :class:`Communicator`
interface (``all_reduce`` sums, ``all_gather`` collects), never against
``torch.distributed`` directly. The same protocol code therefore runs

* for real under ``torchrun`` (:class:`TorchComm`: NCCL on GPUs, gloo on CPUs),
* for real through one parameter server (:class:`ParameterServerComm`: every worker sends
  to one server rank, which aggregates and sends back; Agarwal et al. 2022, Sec. 2.2, Fig. 4),
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
    "COMM_KINDS", "Collective", "Communicator", "LocalComm", "TorchComm", "ParameterServerComm", "RecordingComm",
    "SimGroup", "make_comm",
]

#: how a protocol's collectives cross workers on a real process group (``make_comm``)
COMM_KINDS = {
    "collective": "the backend's own all_reduce / all_gather (TorchComm: gloo's or NCCL's ring-style algorithms, "
                  "the paper's Eq. 1 and App. B)",
    "ps": "one parameter server (ParameterServerComm: every worker sends to rank 0, which aggregates and sends "
          "back; the paper's Table 1 row \"Parameter Server\", Sec. 2.2, Fig. 4)",
}


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


def _joined(who: str, group):
    """``(torch.distributed, group, rank, world size)`` of this process in ``group`` (None: the world);
    a clear error where no process group was initialised."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(f"{who} needs torch.distributed initialised "
                           "(run under torchrun and call dist.init_process_group first)")
    return dist, group, dist.get_rank(group), dist.get_world_size(group)


class TorchComm:
    """``torch.distributed`` collectives on a process group (default: the world)."""

    def __init__(self, group=None):
        self._dist, self.group, self.rank, self.world_size = _joined("TorchComm", group)

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.contiguous()
        self._dist.all_reduce(tensor, group=self.group)
        return tensor

    def all_reduce_async(self, tensor: torch.Tensor) -> torch.futures.Future:
        """Sum ``tensor`` (contiguous) in place across the group without waiting: a future whose value is
        ``[tensor]`` once summed (on NCCL, ordered after the caller's current CUDA stream)."""
        return self._dist.all_reduce(tensor, group=self.group, async_op=True).get_future()

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        # gloo wants a flat output buffer; NCCL accepts either
        out = torch.empty(self.world_size * tensor.numel(), dtype=tensor.dtype, device=tensor.device)
        # all_gather_single is the newer name of all_gather_into_tensor (torch >= 2.13 warns on the old one)
        gather = getattr(self._dist, "all_gather_single", None) or self._dist.all_gather_into_tensor
        gather(out, tensor.contiguous().reshape(-1), group=self.group)
        return list(out.view(self.world_size, *tensor.shape).unbind(0))


class ParameterServerComm:
    """A parameter server on a process group (default: the world): Agarwal et al. 2022 (MLSys 2022,
    https://arxiv.org/abs/2103.00543), Sec. 2.2, Table 1 row "Parameter Server", the third scheme of Fig. 4.

    Every worker sends its tensor to one server rank (``server``, default 0), the server aggregates and
    sends the result back to every worker. As in the paper's setting the server is also a worker (it
    computes a gradient of its own, and adds it without sending it), so the server's link carries
    ``p - 1`` payloads in and ``p - 1`` results out per collective, the other workers' one payload each way
    (``2 alpha + 2 (p-1) b / BW`` in Table 1; :func:`studykit.perfmodel.model.parameter_server_plan_s`).

    * ``all_reduce``: the server sums the payloads in rank order (in the payload's dtype, as a ring
      all-reduce does) and sends the sum back;
    * ``all_gather``: the server cannot aggregate payloads it does not know how to decode (TopK's
      indices, SignSGD's packed signs...), so it concatenates all ``p`` payloads in rank order and sends
      the concatenation, ``p b`` bytes, to every worker: what a parameter server must do for
      non-summable payloads. The model's Table 1 row assumes an aggregate of ``b`` bytes instead (a lower
      bound here).

    Built on point-to-point ``torch.distributed.batch_isend_irecv`` on gloo and NCCL alike. Not on
    ``reduce`` + ``broadcast`` (the ``sweep`` command's ``ps_reduce``): NCCL runs those as rings or
    trees, which spread the traffic over every link instead of loading the server's; nor on ``gather``
    / ``scatter``, which NCCL lacked before torch 1.11 and which hold one output buffer per rank.

    ``Collective`` records (:class:`RecordingComm`, ``plan()``, ``bytes_sent``) count, as for every
    communicator, the bytes a worker puts in: one payload per collective, what a non-server worker sends.
    ``sent_bytes`` / ``received_bytes`` count what this rank really sent and received point-to-point
    (the server's are ``p - 1`` times larger, or ``p (p - 1)`` times for ``all_gather``'s replies).
    """

    kind = "ps"

    def __init__(self, group=None, server: int = 0):
        self._dist, self.group, self.rank, self.world_size = _joined("ParameterServerComm", group)
        if not isinstance(server, int) or isinstance(server, bool) or not 0 <= server < self.world_size:
            raise ValueError(f"ParameterServerComm: server must be a rank of the group, 0 to "
                             f"{self.world_size - 1}, got {server!r}")
        self.server = server
        self.sent_bytes = 0
        self.received_bytes = 0

    def _peer(self, group_rank: int) -> int:
        """The global rank P2POp wants (``group_peer`` is newer than the oldest torch the kit supports)."""
        return group_rank if self.group is None else self._dist.get_global_rank(self.group, group_rank)

    def _exchange(self, sends: list, recvs: list) -> None:
        """Post every (tensor, group rank) send and receive at once, then wait for all of them."""
        d = self._dist
        ops = [d.P2POp(d.isend, t, self._peer(r), self.group) for t, r in sends]
        ops += [d.P2POp(d.irecv, t, self._peer(r), self.group) for t, r in recvs]
        for work in d.batch_isend_irecv(ops):
            work.wait()
        self.sent_bytes += sum(t.numel() * t.element_size() for t, _ in sends)
        self.received_bytes += sum(t.numel() * t.element_size() for t, _ in recvs)

    def _send_then_receive(self, payload: torch.Tensor, out: torch.Tensor) -> None:
        """A worker's side: its payload to the server, then the server's reply, in two batches that mirror
        the server's two (receive everything, then send everything). One batch holding both (the server
        cannot reply before it has every payload, so nothing overlaps) failed on NCCL 2.28 over sockets
        (NET/Socket, 2 ranks on H200s): "ncclInternalError ... Message truncated"."""
        self._exchange([(payload, self.server)], [])
        self._exchange([], [(out, self.server)])

    def _others(self) -> list[int]:
        return [r for r in range(self.world_size) if r != self.server]

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        tensor = tensor.contiguous()
        if self.world_size == 1:
            return tensor
        if self.rank != self.server:
            out = torch.empty_like(tensor)
            self._send_then_receive(tensor, out)
            return out
        slots = {r: torch.empty_like(tensor) for r in self._others()}
        self._exchange([], [(t, r) for r, t in slots.items()])
        slots[self.server] = tensor
        acc = slots[0]  # the input (may be reused, as TorchComm does) or a buffer of ours
        for r in range(1, self.world_size):  # rank order: the same sum on every run
            acc += slots[r]
        self._exchange([(acc, r) for r in self._others()], [])
        return acc

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        flat = tensor.contiguous().reshape(-1)
        n, p = flat.numel(), self.world_size
        out = torch.empty(p * n, dtype=flat.dtype, device=flat.device)
        if p == 1:
            out.copy_(flat)
        elif self.rank != self.server:
            self._send_then_receive(flat, out)
        else:
            self._exchange([], [(out[r * n:(r + 1) * n], r) for r in self._others()])
            out[self.server * n:(self.server + 1) * n].copy_(flat)
            self._exchange([(out, r) for r in self._others()], [])
        return list(out.view(p, *tensor.shape).unbind(0))


def make_comm(kind: str = "collective", group=None) -> Communicator:
    """The communicator of ``kind`` (a key of :data:`COMM_KINDS`) on ``group`` (default: the world)."""
    if kind == "collective":
        return TorchComm(group)
    if kind == "ps":
        return ParameterServerComm(group)
    raise ValueError(f"unknown communicator kind {kind!r}; valid: {', '.join(COMM_KINDS)}")


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
