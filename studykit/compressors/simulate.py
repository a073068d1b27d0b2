"""Run a compressor protocol for ``n`` workers inside one process."""
from __future__ import annotations

import copy
import threading
from typing import Sequence

import torch

from studykit.comm import SimGroup
from studykit.compressors.base import Compressor, CompressorError
from studykit.compressors.registry import get


class Simulation:
    """``world_size`` workers, each with its own copy of the compressor (its own state,
    e.g. error-feedback memory or PowerSGD's warm start), stepped together."""

    def __init__(self, compressor: str | Compressor, world_size: int, **params):
        proto = get(compressor, **params)
        self.world_size = proto._check_world_size(world_size)
        self.workers = [copy.deepcopy(proto) for _ in range(self.world_size)]

    @property
    def name(self) -> str:
        return self.workers[0].name

    def step(self, grads: Sequence, *, key=None) -> list:
        """``grads[r]`` is worker r's gradient (a tensor or list of tensors); returns what
        every worker holds after aggregation (its estimate of the average gradient)."""
        _check_per_worker(grads, f"compressor {self.name!r}: simulate")
        if len(grads) != self.world_size:
            raise CompressorError(f"compressor {self.name!r}: simulate got {len(grads)} gradients "
                                  f"for {self.world_size} workers")
        _check_same_shapes(self.name, grads)
        group = SimGroup(self.world_size)
        results: list = [None] * self.world_size
        errors: list = [None] * self.world_size

        def run(rank: int) -> None:
            try:
                results[rank] = self.workers[rank].reduce(grads[rank], group.comm(rank), key=key)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors[rank] = exc
                group.abort()

        if self.world_size == 1:
            run(0)
        else:
            threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in range(self.world_size)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        for exc in errors:
            if exc is not None and not isinstance(exc, threading.BrokenBarrierError):
                raise exc
        if any(e is not None for e in errors):
            raise errors[0] if errors[0] is not None else RuntimeError("simulate: workers failed")
        return results


def simulate(compressor: str | Compressor, grads: Sequence, **params) -> list:
    """One aggregation step for ``len(grads)`` workers; returns every worker's result.

    >>> import torch
    >>> out = simulate("fp16", [torch.ones(4), 3 * torch.ones(4)])
    >>> out[0]
    tensor([2., 2., 2., 2.])
    """
    _check_per_worker(grads, "simulate")
    if not grads:
        raise CompressorError("simulate: got no gradients; give one per worker")
    return Simulation(compressor, len(grads), **params).step(grads)


def _check_per_worker(grads, who: str) -> None:
    if isinstance(grads, torch.Tensor) or not isinstance(grads, (list, tuple)):
        raise CompressorError(f"{who} expects a list of per-worker gradients (a tensor or a list of tensors per "
                              f"worker), got {type(grads).__name__}")


def _check_same_shapes(name: str, grads: Sequence) -> None:
    """Every worker's gradient is a tensor or a list of tensors, all of the same shapes; else a clear error."""
    def sig(rank, g):
        if isinstance(g, torch.Tensor):
            return (tuple(g.shape),)
        if not isinstance(g, (list, tuple)):
            raise CompressorError(f"compressor {name!r}: simulate: worker {rank}'s gradient expects a torch.Tensor "
                                  f"or a list of them, got {type(g).__name__}")
        for i, t in enumerate(g):
            if not isinstance(t, torch.Tensor):
                raise CompressorError(f"compressor {name!r}: simulate: worker {rank}'s gradient {i} expects a "
                                      f"torch.Tensor, got {type(t).__name__}")
        return tuple(tuple(t.shape) for t in g)

    sigs = [sig(rank, g) for rank, g in enumerate(grads)]
    if any(s != sigs[0] for s in sigs):
        raise CompressorError(f"compressor {name!r}: workers' gradients have mismatched shapes {sigs}")
