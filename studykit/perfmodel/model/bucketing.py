"""How the gradient is split into DDP buckets: Sec. 4.1's equal buckets (:func:`buckets`), PyTorch DDP's
real assignment (:func:`ddp_buckets`) and when each bucket is ready (:func:`bucket_ready_fractions`)."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from studykit.perfmodel.model.options import DDP_FIRST_BUCKET_BYTES, DEFAULT_BUCKET_BYTES

__all__ = ["buckets", "paper_bucket_sizes", "ddp_buckets", "ddp_bucket_sizes", "bucket_ready_fractions",
           "coalesce_groups"]


def buckets(total_bytes, bucket_bytes):
    """``(k, b, b_last)``: DDP's bucketing as Sec. 4.1 models it.

    ``k = ceil(total / b)`` buckets; the first ``k-1`` hold ``b`` bytes, the last
    ``b_last = total - (k-1) b <= b``. Broadcasts.
    """
    total = np.asarray(total_bytes, dtype=float)
    b = np.asarray(bucket_bytes, dtype=float)
    k = np.maximum(np.ceil(total / b - 1e-12), 1.0)
    b_full = np.minimum(b, total)
    last = total - (k - 1.0) * b_full
    return k, b_full, last


def paper_bucket_sizes(total_bytes: float, bucket_bytes: float) -> list[float]:
    """Sec. 4.1's buckets as a list (scalar :func:`buckets`): ``k-1`` of ``b`` bytes, then the rest."""
    k, b, last = (float(v) for v in buckets(total_bytes, bucket_bytes))
    return [b] * (int(k) - 1) + [last]


def ddp_buckets(shapes: Sequence[Sequence[int]], bucket_bytes: float | None = None,
                first_bucket_bytes: float | None = None, bytes_per_param: int = 4) -> list[list[tuple]]:
    """PyTorch DDP's bucket assignment (torch >= 1.8, one dtype, after the first iteration's
    rebuild): the parameter shapes (given in forward order) taken in *reverse* order (the
    gradients of the last layers are ready first), a bucket closing as soon as it holds
    ``>= limit`` bytes: ``first_bucket_bytes`` for the first bucket, ``bucket_bytes`` for the
    others. A tensor is never split, so one tensor larger than the cap is a bucket of its own.

    ``bucket_bytes=None`` is DDP's default (``bucket_cap_mb=None``): 25 MiB with a 1 MiB first
    bucket. ``first_bucket_bytes=None`` is DDP's rule: 1 MiB under the default cap, the cap
    itself when one is given (torch ``_BucketCapacityConfig``). Caps are truncated to whole
    bytes as DDP does (``int(bucket_cap_mb * 2**20)``). Returns the buckets in the order they
    are communicated, each a list of shapes (the last one holds the first layers and can only
    start once the backward pass is done)."""
    if bucket_bytes is None:
        cap = DEFAULT_BUCKET_BYTES
        first = DDP_FIRST_BUCKET_BYTES if first_bucket_bytes is None else first_bucket_bytes
    else:
        cap = bucket_bytes
        first = cap if first_bucket_bytes is None else first_bucket_bytes
    cap, first = int(cap), int(first)
    if cap <= 0 or first <= 0:
        raise ValueError(f"bucket sizes must be >= 1 byte, got cap {bucket_bytes!r}, first {first_bucket_bytes!r}")
    out: list[list[tuple]] = []
    cur: list[tuple] = []
    size = 0
    for s in reversed([tuple(int(d) for d in s) for s in shapes]):
        cur.append(s)
        size += math.prod(s) * bytes_per_param
        if size >= (first if not out else cap):
            out.append(cur)
            cur, size = [], 0
    if cur:
        out.append(cur)
    return out


def ddp_bucket_sizes(shapes: Sequence[Sequence[int]], bucket_bytes: float | None = None,
                     first_bucket_bytes: float | None = None, bytes_per_param: int = 4) -> list[float]:
    """Bytes of each bucket of :func:`ddp_buckets`, in communication order."""
    return [float(sum(math.prod(s) for s in b) * bytes_per_param)
            for b in ddp_buckets(shapes, bucket_bytes, first_bucket_bytes, bytes_per_param)]


def bucket_ready_fractions(bucket_sizes: Sequence[float]) -> np.ndarray:
    """When each bucket's gradients are all ready, as a fraction of the backward pass (BEYOND THE PAPER).

    Assumption (the kit's, checkable with ``buckets`` records, ``ddp --bucket-times``): the backward
    pass produces gradient bytes at a constant rate in DDP's (reverse) parameter order, so bucket ``i``
    (communication order) is ready once the bytes of buckets ``1..i`` are done:
    ``f_i = sum_{j<=i} s_j / sum_j s_j``; the last bucket is ready when the backward pass ends (1).
    Layers with many FLOPs per byte (convolutions early in a CNN) make the real fractions later."""
    sz = np.asarray(bucket_sizes, dtype=float)
    if sz.size == 0 or np.any(sz < 0) or sz.sum() <= 0:
        raise ValueError(f"bucket sizes must be >= 0 with a positive sum, got {bucket_sizes!r}")
    return np.cumsum(sz) / sz.sum()


def coalesce_groups(bucket_bytes: Sequence[float], coalesce_bytes: float | None) -> list[list[int]]:
    """Which DDP buckets (indices, in communication order) a hook that coalesces them (``register(...,
    coalesce_mb=)``) runs its protocol over at once: buckets wait until those waiting hold at least
    ``coalesce_bytes`` (``> 0``), or until the last bucket arrives; ``0`` puts every bucket of the iteration in one
    group; ``None`` leaves each bucket alone."""
    n = len(bucket_bytes)
    if coalesce_bytes is None:
        return [[i] for i in range(n)]
    if not (isinstance(coalesce_bytes, (int, float)) and math.isfinite(coalesce_bytes) and coalesce_bytes >= 0):
        raise ValueError(f"coalesce_bytes must be None or a finite number >= 0, got {coalesce_bytes!r}")
    groups, waiting, size = [], [], 0.0
    for i, b in enumerate(bucket_bytes):
        waiting.append(i)
        size += float(b)
        if i == n - 1 or 0 < coalesce_bytes <= size:
            groups.append(waiting)
            waiting, size = [], 0.0
    return groups
