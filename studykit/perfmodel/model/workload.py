"""What is trained: :class:`Workload` (model, batch size, ``T_comp``, overhead, DDP's buckets)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from studykit import models
from studykit.perfmodel.calibration import Calibration
from studykit.perfmodel.model.bucketing import (bucket_ready_fractions, buckets, ddp_bucket_sizes, ddp_buckets,
                                                paper_bucket_sizes)
from studykit.perfmodel.model.options import BUCKETING, DDP_FIRST_BUCKET_BYTES, DEFAULT_BUCKET_BYTES

__all__ = ["Workload"]


@dataclass(frozen=True)
class Workload:
    """What is trained: a model (by name, or its parameter shapes), batch size per worker,
    the single-GPU backward time ``t_comp_s`` (``None``: from the calibration), the non-backward
    overhead ``overhead_s`` (forward + optimizer step; ``None``: from the calibration, else 0) and
    DDP's bucket size.

    :class:`ModelOptions` ``bucketing`` says how the gradient is split into DDP buckets (:meth:`buckets`):

    * ``"paper"`` (default; Agarwal et al. 2022 Sec. 4.1): ``k = ceil(G / b)`` buckets of ``b`` bytes and
      a smaller last one, as if DDP could cut tensors;
    * ``"ddp"``: PyTorch DDP's assignment (:func:`ddp_buckets`): whole parameter tensors in
      reverse order, a bucket closes once it holds ``>= bucket_bytes``; the first bucket closes
      at ``first_bucket_bytes``. ``first_bucket_bytes=None`` follows DDP: 1 MiB
      (:data:`DDP_FIRST_BUCKET_BYTES`) when ``bucket_bytes`` is the default 25 MiB (DDP's
      ``bucket_cap_mb=None``), ``bucket_bytes`` otherwise. (DDP given ``bucket_cap_mb=25``
      explicitly uses a 25 MiB first bucket: pass ``first_bucket_bytes=25 * MIB`` for that.)
    """

    model: str | None = "resnet50"  # a built-in name or a spec (studykit.models: FILE.py:FUNC, torchvision:NAME, ...)
    batch_size: int = 64
    t_comp_s: Any = None  # single-GPU backward pass (s); Agarwal et al. 2022 App. C (an array: a grid, e.g. an interval's ends)
    bucket_bytes: Any = DEFAULT_BUCKET_BYTES
    param_shapes: tuple | None = None  # overrides ``model``'s shapes when given
    first_bucket_bytes: float | None = None  # "ddp" only; None: DDP's rule (see the class docstring)
    overhead_s: Any = None  # non-backward part of an iteration (s): forward, optimizer step
    path_overhead_s: float | None = None  # compression path's untimed framework work (s); ModelOptions.path_overhead
    #: measured fraction of the backward pass done when each DDP bucket is ready (communication order;
    #: ``buckets`` records of ``python -m studykit ddp --bucket-times``); None: :func:`bucket_ready_fractions`
    bucket_ready: tuple | None = None
    #: host-clock time (s) from the call of ``loss.backward()`` at which DDP calls the hook of each bucket
    #: (communication order; ``ready_host_ms`` of the same ``buckets`` records): the host's side of the
    #: backward pass, which a hook's host work (``predict``'s ``bucket_host_s``) queues behind
    bucket_ready_host_s: tuple | None = None

    def __post_init__(self):
        for name in ("overhead_s", "path_overhead_s"):
            v = getattr(self, name)
            if v is not None and not np.all(np.isfinite(np.asarray(v, dtype=float))):
                raise ValueError(f"Workload.{name} must be finite, got {v!r}")
        if self.first_bucket_bytes is not None and self.first_bucket_bytes <= 0:
            raise ValueError(f"Workload.first_bucket_bytes must be > 0, got {self.first_bucket_bytes!r}")
        if self.model is None and self.param_shapes is None:
            raise ValueError("Workload needs a model name or param_shapes")
        if self.model is not None and self.param_shapes is None:
            models.check(self.model)  # a built-in name or a spec (studykit.models); the error says what is valid
        if self.batch_size < 1:
            raise ValueError(f"Workload.batch_size must be >= 1, got {self.batch_size}")
        if np.any(np.asarray(self.bucket_bytes, dtype=float) <= 0):
            raise ValueError(f"Workload.bucket_bytes must be > 0, got {self.bucket_bytes!r}")
        if self.t_comp_s is not None and (np.any(np.asarray(self.t_comp_s, dtype=float) <= 0)
                                          or not np.all(np.isfinite(np.asarray(self.t_comp_s, dtype=float)))):
            raise ValueError(f"Workload.t_comp_s must be > 0, got {self.t_comp_s}")
        if self.param_shapes is not None:
            object.__setattr__(self, "param_shapes", tuple(tuple(int(d) for d in s) for s in self.param_shapes))

    def shapes(self) -> tuple:
        """Parameter shapes (forward order)."""
        return self.param_shapes if self.param_shapes is not None else _model_shapes(self.model)

    @property
    def n_tensors(self) -> int:
        """Number of parameter tensors (what per-tensor CPU costs scale with)."""
        return len(self.shapes())

    @property
    def gradient_bytes(self) -> int:
        """fp32 gradient size (bytes): what syncSGD all-reduces."""
        return 4 * sum(math.prod(s) for s in self.shapes())

    def bucket_sizes(self, bucketing: str = "paper") -> list[float]:
        """Bytes of each bucket in communication order (scalar ``bucket_bytes`` only)."""
        cap = np.asarray(self.bucket_bytes, dtype=float)
        if cap.ndim:
            raise ValueError("Workload.bucket_sizes needs a scalar bucket_bytes")
        if bucketing == "paper":
            return paper_bucket_sizes(self.gradient_bytes, float(cap))
        f = self.first_bucket_bytes
        f = f if f is not None else (DDP_FIRST_BUCKET_BYTES if float(cap) == DEFAULT_BUCKET_BYTES else float(cap))
        return ddp_bucket_sizes(self.shapes(), float(cap), f)

    def ready_fractions(self, bucketing: str = "paper") -> np.ndarray:
        """Fraction of the backward pass done when each bucket is ready (communication order): the
        workload's measured ``bucket_ready`` if given (and of the right length), else
        :func:`bucket_ready_fractions` of :meth:`bucket_sizes` (the bytes assumption)."""
        sizes = self.bucket_sizes(bucketing)
        if self.bucket_ready is not None and len(self.bucket_ready) == len(sizes):
            return np.clip(np.asarray(self.bucket_ready, dtype=float), 0.0, 1.0)
        return bucket_ready_fractions(sizes)

    def ddp_bucket_shapes(self) -> list[list[tuple]]:
        """DDP's buckets as lists of parameter shapes (:func:`ddp_buckets`; scalar ``bucket_bytes``)."""
        cap = float(np.asarray(self.bucket_bytes, dtype=float))
        f = self.first_bucket_bytes
        return ddp_buckets(self.shapes(), None if cap == DEFAULT_BUCKET_BYTES and f is None else cap, f)

    def buckets(self, bucketing: str = "paper"):
        """``(k, b, b_last)`` of ``bucketing`` (broadcast over ``bucket_bytes``):
        ``k`` buckets, the last of ``b_last`` bytes, the other ``k-1`` of ``b`` bytes on average.

        ``"paper"``: :func:`buckets`. ``"ddp"``: from :func:`ddp_bucket_sizes`; ``b`` is the mean
        of the ``k-1`` overlapped buckets, exact for Eq. 1 and the tree (costs affine in bytes:
        ``(k-1) T_comm(b)`` is the sum over those buckets). With ``k = 1``, ``b = b_last``."""
        if bucketing not in BUCKETING:
            raise ValueError(f"bucketing must be one of {BUCKETING}, got {bucketing!r}")
        if bucketing == "paper":
            return buckets(self.gradient_bytes, self.bucket_bytes)
        shapes = self.shapes()
        first = self.first_bucket_bytes

        def one(cap):
            f = first if first is not None else (DDP_FIRST_BUCKET_BYTES if cap == DEFAULT_BUCKET_BYTES else cap)
            sizes = ddp_bucket_sizes(shapes, cap, f)
            k = len(sizes)
            return float(k), (sum(sizes[:-1]) / (k - 1) if k > 1 else sizes[-1]), sizes[-1]

        cap = np.asarray(self.bucket_bytes, dtype=float)
        flat = [one(float(c)) for c in cap.ravel()]
        k, b, last = (np.array([t[i] for t in flat], dtype=float).reshape(cap.shape) for i in range(3))
        return k, b, last

    def resolve_t_comp(self, calibration: Calibration | None) -> tuple[float, str]:
        """``(T_comp_s, how)``: the workload's own value, else the calibration's."""
        if self.t_comp_s is not None:
            t = np.asarray(self.t_comp_s, dtype=float)
            return (float(t) if t.ndim == 0 else t), "given"
        if calibration is None:
            raise ValueError("T_comp unknown: set Workload.t_comp_s or pass a calibration")
        if self.model is None:
            raise ValueError("T_comp unknown: a Workload given by param_shapes needs t_comp_s")
        return calibration.t_comp_s(self.model, self.batch_size)

    def resolve_overhead(self, calibration: Calibration | None) -> tuple[float, str]:
        """``(O_s, how)``: the non-backward overhead (forward, optimizer step): the workload's own
        value, else the calibration's, else 0 (the iteration time is then ``T_obs`` alone)."""
        if self.overhead_s is not None:
            o = np.asarray(self.overhead_s, dtype=float)
            return (float(o) if o.ndim == 0 else o), "given"
        if calibration is not None and self.model is not None:
            found = calibration.overhead_lookup(self.model, self.batch_size)
            if found is not None:
                return found
        return 0.0, "unknown: 0 (iteration time = T_obs; fit records with tcomp fwd_bwd or ddp p=1 to know it)"


def _model_shapes(name: str) -> tuple:
    return tuple(models.param_shapes(name))  # cached there, per spec (a re-registered name is re-read)
