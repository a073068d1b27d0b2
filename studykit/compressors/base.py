"""The one compressor API: GRACE's shape, written against a communicator.

A compressor turns every worker's gradient tensors into an estimate of their
*average* (what DDP hands the optimizer). Single-round methods implement only
``compress``/``decompress`` (and ``combine`` for all-gather methods); multi-round
methods (PowerSGD, THC) override ``_reduce`` and issue their collectives in order.
Because the protocol is written against :class:`studykit.comm.Communicator`, the
same code serves real training, profiling (world size 1) and the performance
model (:meth:`Compressor.plan`, which records the collectives issued on ``meta``
tensors, so the model's communication term is the code's own).
"""
from __future__ import annotations

import copy
import inspect
import math
from typing import Any, ClassVar, Sequence

import torch

from studykit.comm import Collective, Communicator, LocalComm, RecordingComm

__all__ = ["Compressor", "CompressorError", "ErrorFeedback", "FLOAT_DTYPES"]

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class CompressorError(ValueError):
    """Bad input or parameter for a compressor; the message names compressor and problem."""


class Compressor:
    """Base class. Subclasses set ``name`` and ``allreduce_compatible``.

    Generic parameters (every compressor accepts them through
    :func:`studykit.compressors.get`):

    * ``seed``: base seed of the compressor's randomness (shared randomness such as
      RandomK's indices uses ``seed`` and the step; private randomness such as
      stochastic rounding also mixes in the worker's rank).
    * ``allow_nonfinite``: by default NaN/Inf gradients raise; ``True`` lets them through
      (the result is then whatever the arithmetic gives).
    """

    name: ClassVar[str] = ""
    allreduce_compatible: ClassVar[bool] = True
    #: whether ``get(name)`` wraps this compressor in :class:`ErrorFeedback` by default
    default_error_feedback: ClassVar[bool] = False
    #: whether the estimate is random (unbiasedness is then tested over seeds)
    stochastic: ClassVar[bool] = False
    #: whether the estimate is unbiased in expectation (tested for stochastic ones)
    unbiased: ClassVar[bool] = False

    def __init__(self, *, seed: int = 0, allow_nonfinite: bool = False):
        self.seed = int(seed)
        self.allow_nonfinite = bool(allow_nonfinite)
        self.step = 0
        self.state: dict[Any, Any] = {}

    # ------------------------------------------------------------------ helpers
    def error(self, msg: str) -> CompressorError:
        return CompressorError(f"compressor {self.name!r}: {msg}")

    def params(self) -> dict:
        """The constructor parameters of this instance (for records and plots)."""
        sig = inspect.signature(type(self).__init__)
        return {k: getattr(self, k) for k in sig.parameters
                if k not in ("self", "allow_nonfinite") and hasattr(self, k)}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"

    def generator(self, device: torch.device, rank: int | None = None) -> torch.Generator | None:
        """A generator seeded by (seed, step[, rank]); ``None`` on the meta device."""
        if device.type == "meta":
            return None
        g = torch.Generator(device=device)
        salt = 0 if rank is None else (rank + 1) * 1_000_003
        g.manual_seed((self.seed * 7_919 + self.step * 104_729 + salt) % (2**63 - 1))
        return g

    # --------------------------------------------------- single-round codec API
    def compress(self, flat: torch.Tensor, world_size: int) -> tuple[list[torch.Tensor], Any]:
        """Encode a 1-D float32 tensor into payload tensors (sent as they are) and a context."""
        raise NotImplementedError

    def decompress(self, payload: Sequence[torch.Tensor], ctx: Any) -> torch.Tensor:
        """Decode payload(s) to a 1-D float32 tensor. For all-reduce compatible codecs
        this is linear: decoding a *sum* of payloads gives the sum of the decodings."""
        raise NotImplementedError

    def combine(self, gathered: Sequence[Sequence[torch.Tensor]], ctx: Any) -> torch.Tensor:
        """All-gather codecs: every worker's payload (rank order) -> average estimate."""
        out = self.decompress(gathered[0], ctx).clone()
        for p in gathered[1:]:
            out += self.decompress(p, ctx)
        return out / len(gathered)

    # ----------------------------------------------------------------- protocol
    def reduce(self, tensors: torch.Tensor | Sequence[torch.Tensor], comm: Communicator | None = None,
               *, key: Any = None, return_local: bool = False):
        """Run the protocol: every worker calls this with its own gradients.

        Returns the estimate of the average gradient (same shapes and dtypes as the
        input), and with ``return_local=True`` also this worker's own decoded
        contribution (what error feedback subtracts).
        """
        comm = comm if comm is not None else LocalComm()
        single = isinstance(tensors, torch.Tensor)
        tensors = [tensors] if single else list(tensors)
        self.check(tensors)
        avg, local = self._reduce([t.detach() for t in tensors], comm, key, return_local)
        self.step += 1
        avg = [a.to(t.dtype).reshape(t.shape) for a, t in zip(avg, tensors)]
        if return_local:
            local = [a.to(t.dtype).reshape(t.shape) for a, t in zip(local, tensors)]
            return (avg[0], local[0]) if single else (avg, local)
        return avg[0] if single else avg

    def _reduce(self, tensors, comm, key, return_local):
        """Default single-round protocol on the flattened float32 gradient."""
        flat = flatten(tensors)
        payload, ctx = self.compress(flat, comm.world_size)
        if self.allreduce_compatible:
            summed = [comm.all_reduce(p.clone()) for p in payload]
            avg = self.decompress(summed, ctx) / comm.world_size
        else:
            per_payload = [comm.all_gather(p) for p in payload]
            avg = self.combine([list(ws) for ws in zip(*per_payload)], ctx)
        local = self.decompress(payload, ctx) if return_local else None
        return unflatten(avg, tensors), (unflatten(local, tensors) if return_local else None)

    # ------------------------------------------------------------- validation
    def check(self, tensors: Sequence[torch.Tensor]) -> None:
        if not tensors:
            raise self.error("got no tensors to reduce")
        for i, t in enumerate(tensors):
            if not isinstance(t, torch.Tensor):
                raise self.error(f"tensor {i} is a {type(t).__name__}, expected a torch.Tensor")
            if t.dtype not in FLOAT_DTYPES:
                raise self.error(f"tensor {i} has dtype {t.dtype}; valid dtypes are float32, float16, bfloat16")
            if t.numel() == 0:
                raise self.error(f"tensor {i} is empty (shape {tuple(t.shape)}); gradients must have elements")
        if self.allow_nonfinite or tensors[0].device.type == "meta":
            return
        # one fused pass and one host sync for all tensors (max |x| is NaN/Inf iff some x is)
        peaks = torch.stack([m.float() for m in torch._foreach_max(torch._foreach_abs(list(tensors)))])
        if not bool(torch.isfinite(peaks).all()):
            i = int((~torch.isfinite(peaks)).nonzero()[0])
            raise self.error(f"tensor {i} contains NaN or Inf; pass allow_nonfinite=True to let them through")

    # -------------------------------------------------------- wire accounting
    def plan(self, shapes: Sequence[Sequence[int]] | Sequence[int], world_size: int = 2,
             dtype: torch.dtype = torch.float32) -> list[Collective]:
        """The collectives one call of :meth:`reduce` issues for gradients of ``shapes``.

        Runs the real protocol on ``meta`` tensors (no data, no compute) under a
        :class:`RecordingComm`, so it cannot drift from what the code sends.
        """
        shapes = _as_shapes(shapes)
        clone = copy.deepcopy(self)
        clone.state = {}
        clone.allow_nonfinite = True
        rec = RecordingComm(LocalComm(), world_size=world_size)
        clone.reduce([torch.empty(s, dtype=dtype, device="meta") for s in shapes], rec)
        return rec.log

    def wire_bytes(self, shapes, world_size: int = 2, dtype: torch.dtype = torch.float32) -> int:
        """Bytes this worker puts into collectives per step (each worker's share)."""
        return sum(c.nbytes for c in self.plan(shapes, world_size, dtype))

    def ratio(self, shapes, world_size: int = 2) -> float:
        """Compression ratio against the fp32 all-reduce of the same gradients."""
        shapes = _as_shapes(shapes)
        dense = 4 * sum(math.prod(s) for s in shapes)
        return dense / self.wire_bytes(shapes, world_size)


class ErrorFeedback(Compressor):
    """Error feedback (Seide et al. 2014; Karimireddy et al. 2019), kept apart from compressors.

    Before compressing, the residual of the previous step is added to the gradient;
    afterwards, the residual becomes (corrected gradient - what this worker's payload
    decodes to). Memory is kept per ``key`` (a bucket index or parameter name).
    """

    def __init__(self, inner: Compressor):
        super().__init__(seed=inner.seed, allow_nonfinite=inner.allow_nonfinite)
        self.inner = inner
        self.memory: dict[Any, list[torch.Tensor]] = {}

    @property
    def name(self):  # type: ignore[override]
        return self.inner.name

    @property
    def allreduce_compatible(self):  # type: ignore[override]
        return self.inner.allreduce_compatible

    @property
    def stochastic(self):  # type: ignore[override]
        return self.inner.stochastic

    unbiased = False

    def params(self) -> dict:
        return {**self.inner.params(), "error_feedback": True}

    def __repr__(self) -> str:
        return f"ErrorFeedback({self.inner!r})"

    def _reduce(self, tensors, comm, key, return_local):
        mem = self.memory.get(key)
        if mem is not None and [tuple(m.shape) for m in mem] != [tuple(t.shape) for t in tensors]:
            raise self.error(f"error-feedback memory for key {key!r} has shapes "
                             f"{[tuple(m.shape) for m in mem]}, got {[tuple(t.shape) for t in tensors]}")
        corrected = [t.float() for t in tensors]
        if mem is not None:
            corrected = torch._foreach_add(corrected, mem)
        self.inner.step = self.step
        avg, local = self.inner._reduce(corrected, comm, key, True)
        self.memory[key] = torch._foreach_sub(corrected, [l.float() for l in local])
        return avg, (local if return_local else None)


def flatten(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """All tensors as one 1-D float32 tensor (copies; inputs may be non-contiguous)."""
    if len(tensors) == 1:
        return tensors[0].reshape(-1).float().clone()
    return torch.cat([t.reshape(-1).float() for t in tensors])


def unflatten(flat: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Split a 1-D tensor back into tensors shaped like ``like`` (float32)."""
    out, i = [], 0
    for t in like:
        n = t.numel()
        out.append(flat[i:i + n].reshape(t.shape))
        i += n
    return out


def _as_shapes(shapes) -> list[tuple[int, ...]]:
    if len(shapes) and isinstance(shapes[0], int):
        return [tuple(shapes)]
    return [tuple(int(d) for d in s) for s in shapes]
