"""Error feedback as a memory beside the compressor (GRACE's ``Memory``: compensate, then update).

Error feedback (Seide et al. 2014, "1-bit SGD"; Karimireddy et al. 2019, "Error Feedback Fixes
SignSGD and other Gradient Compression Schemes", https://arxiv.org/abs/1901.09847, Alg. 2) keeps
what compression left out and adds it to the next gradient::

    p_t = g_t + e_t            compensate
    send C(p_t)
    e_{t+1} = p_t - C(p_t)     update (C(p_t): what this worker's own payload decodes to)

A compressor with error feedback is the compressor plus a :class:`ResidualMemory` in its
``memory`` attribute; :meth:`studykit.compressors.Compressor.reduce` calls the memory around the
protocol. The memory adds no collective, so ``plan()`` and the wire bytes are the compressor's.
GRACE keeps the same split (Xu et al. 2021, https://github.com/sands-lab/grace, ``grace_dl``'s
``Memory.compensate`` / ``Memory.update``).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["ResidualMemory"]


class ResidualMemory:
    """The residual ``e`` of error feedback, one list of float32 tensors per ``key`` (a DDP bucket
    index or a parameter name), shaped like the gradients last compensated under that key."""

    def __init__(self):
        #: key -> residual tensors e_t (float32), one per gradient tensor
        self.residuals: dict[Any, list[torch.Tensor]] = {}
        #: key -> whether the protocol's estimate never shares memory with the compensated gradient,
        #: so the residual buffers may hold p_t and then e_{t+1} in place (checked on a key's first update)
        self._inplace_ok: dict[Any, bool] = {}

    def __repr__(self) -> str:
        return f"ResidualMemory(keys={list(self.residuals)!r})"

    def clear(self) -> None:
        """Forget every residual (e = 0 for every key)."""
        self.residuals.clear()
        self._inplace_ok.clear()

    def forget(self, key: Any) -> None:
        """Forget the residual under ``key`` (e = 0 there; nothing happens where none is kept)."""
        self.residuals.pop(key, None)
        self._inplace_ok.pop(key, None)

    def compensate(self, tensors: Sequence[torch.Tensor], key: Any = None, *, reuse: bool = False
                   ) -> list[torch.Tensor]:
        """``p_t = g_t + e_t`` in float32 (``g_t`` itself, as float32, where no residual is kept yet).

        With ``reuse=True`` the residual buffers themselves become ``p_t`` where that is known to
        be safe (float32 throughout, and on a previous call the estimate did not share memory with
        ``p_t``): no tensor is allocated per step (two multi-tensor kernels; with 100+ tensors the
        allocations were most of error feedback's host time). :meth:`update` then finishes in place.
        """
        mem = self.residuals.get(key)
        if mem is not None and (len(mem) != len(tensors) or any(m.shape != t.shape for m, t in zip(mem, tensors))):
            mem = self.residuals[key] = self._relayout(key, mem, tensors)
        if (reuse and mem is not None and self._inplace_ok.get(key, True)
                and all(t.dtype == torch.float32 for t in tensors) and all(m.dtype == torch.float32 for m in mem)):
            torch._foreach_add_(mem, list(tensors))
            return mem
        corrected = [t.float() for t in tensors]
        return corrected if mem is None else torch._foreach_add(corrected, mem)

    def update(self, corrected: Sequence[torch.Tensor], sent: Sequence[torch.Tensor], key: Any = None, *,
               estimate: Sequence[torch.Tensor] | None = None) -> None:
        """``e_{t+1} = p_t - C(p_t)``: ``corrected`` is what :meth:`compensate` returned, ``sent``
        what this worker's payload decodes to (float32), ``estimate`` the protocol's result (only
        read on a key's first update, to learn whether later steps may work in place)."""
        if key not in self._inplace_ok and estimate is not None:
            self._inplace_ok[key] = not _any_shared(estimate, corrected)
        if corrected is self.residuals.get(key) and self._inplace_ok.get(key, False):
            torch._foreach_sub_(self.residuals[key], list(sent))
        else:
            self.residuals[key] = torch._foreach_sub(list(corrected), list(sent))

    def _relayout(self, key, mem, tensors):
        """The same gradients as one flat tensor on one side and as per-tensor pieces on the
        other (a DDP hook passes whole buckets to partition-invariant compressors and views to
        the others; a compressor swap may switch): re-cut the residual in order. Anything else
        is a real mismatch and raises."""
        from studykit.compressors.base import CompressorError

        numel = [t.numel() for t in tensors]
        if (len(mem) == 1 or len(tensors) == 1) and sum(m.numel() for m in mem) == sum(numel):
            flat = mem[0].reshape(-1) if len(mem) == 1 else torch.cat([m.reshape(-1) for m in mem])
            return [p.view(t.shape) for p, t in zip(flat.split(numel), tensors)]
        raise CompressorError(f"error-feedback memory for key {key!r} has shapes "
                              f"{[tuple(m.shape) for m in mem]}, got {[tuple(t.shape) for t in tensors]}")

    def permute(self, key: Any, old_ids: list, new_ids: list, old_shapes: Sequence | None = None) -> None:
        """The tensors under ``key`` now come in another order (``old_ids`` -> ``new_ids``, e.g. DDP
        rebuilt its buckets): reorder the residual to match, or drop it if the key now holds other
        tensors. A residual kept as one flat tensor is cut by ``old_shapes``, permuted and joined."""
        if key not in self.residuals:
            return
        if sorted(old_ids) != sorted(new_ids):
            del self.residuals[key]
            return
        pieces = self.residuals[key]
        if len(pieces) == 1 and len(old_ids) > 1 and old_shapes is not None:
            sizes = [math.prod(s) for s in old_shapes]
            by_id = dict(zip(old_ids, pieces[0].reshape(-1).split(sizes)))
            self.residuals[key] = [torch.cat([by_id[i] for i in new_ids])]
        else:
            by_id = dict(zip(old_ids, pieces))
            self.residuals[key] = [by_id[i] for i in new_ids]


def _any_shared(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> bool:
    """Whether some tensor of ``a`` shares storage with some tensor of ``b`` (True on meta)."""
    if any(t.device.type == "meta" for t in (*a, *b) if t is not None):
        return True
    ptrs = {t.untyped_storage().data_ptr() for t in b if t is not None}
    return any(t is not None and t.untyped_storage().data_ptr() in ptrs for t in a)
