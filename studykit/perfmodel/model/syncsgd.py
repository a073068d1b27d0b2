"""syncSGD, PyTorch DDP with overlap (Sec. 4.1): :func:`syncsgd_s`, with the terms beyond the paper
(:func:`sync_terms_s`)."""
from __future__ import annotations

import numpy as np

from studykit.perfmodel.model.bucketing import buckets
from studykit.perfmodel.model.costs import allreduce_s
from studykit.perfmodel.model.options import DEFAULT_BUCKET_BYTES, Hardware, ModelOptions
from studykit.perfmodel.model.timeline import bucket_timeline_s

__all__ = ["sync_terms_s", "syncsgd_s"]


def sync_terms_s(k, n_tensors, hw: Hardware, options: ModelOptions | None = None):
    """syncSGD's terms beyond the overlap (s), BEYOND THE PAPER:

    ``delta + c_b (k - 1) + c_t n_tensors``

    ``delta = hw.sync_delta_s`` per iteration and ``c_b = hw.per_bucket_s`` per extra DDP bucket
    (``options.sync_terms``); ``c_t = hw.per_tensor_s`` per parameter tensor (``options.per_tensor``):
    CPU work that neither gamma nor the collectives represent, which dominates at small batches."""
    opts = options or ModelOptions()
    k = np.asarray(k, dtype=float)
    out = 0.0 * k
    if opts.sync_terms:
        out = out + hw.sync_delta_s + hw.per_bucket_s * (k - 1.0)
    if opts.per_tensor:
        out = out + hw.per_tensor_s * float(n_tensors)
    return out


def syncsgd_s(t_comp_s, total_bytes, world_size, hw: Hardware, bucket_bytes=DEFAULT_BUCKET_BYTES,
              split=None, *, options: ModelOptions | None = None, bucket_sizes=None, n_tensors: int = 0,
              ready_fractions=None) -> dict:
    """syncSGD (DDP with overlap) iteration time, Sec. 4.1:

    ``T_obs = max(gamma T_comp, (k-1) T_comm(b, p, BW)) + T_comm(b_last, p, BW) [+ extra]``

    with ``T_comm`` from Eq. 1 (or the measured table, :func:`collective_s`). ``T_comp`` is divided
    by ``hw.compute_speedup``. The buckets are Sec. 4.1's ``buckets(total_bytes, bucket_bytes)``
    unless ``split`` gives ``(k, b, b_last)`` (e.g. :meth:`Workload.buckets` with ``"ddp"``), or
    ``bucket_sizes`` lists every bucket (needed by measured collectives, not affine in bytes:
    ``(k-1) T_comm`` is then the sum over the first ``k-1`` buckets). ``extra`` is
    :func:`sync_terms_s` (0 in the paper's model). With ``ready_fractions`` (and ``bucket_sizes``) the
    ``max`` is replaced by the per-bucket timeline (:func:`bucket_timeline_s`, ``ModelOptions.overlap``);
    ``overlapped_comm_s`` is then the timeline's exposed communication minus the last bucket's.
    Returns arrays: ``compute_s`` (gamma T_comp),
    ``comm_s`` (all buckets), ``overlapped_comm_s`` (all but the last), ``last_comm_s``,
    ``extra_s``, ``exposed_comm_s`` (``T_obs - gamma T_comp``), ``total_s``, ``k``.
    """
    t_comp = np.asarray(t_comp_s, dtype=float) / hw.compute_speedup
    per = None
    if ready_fractions is not None:
        if bucket_sizes is None:
            raise ValueError("the per-bucket timeline needs bucket_sizes")
        per = [np.asarray(allreduce_s(float(b), world_size, hw, options), dtype=float) for b in bucket_sizes]
        k = np.asarray(float(len(per)))
        ov_comm, t_last = sum(per[:-1]) + 0.0 * per[-1], per[-1]
    elif bucket_sizes is not None:
        sizes = np.asarray(bucket_sizes, dtype=float)
        t = np.asarray(allreduce_s(sizes, world_size, hw, options), dtype=float)
        k = np.asarray(float(len(sizes)))
        ov_comm, t_last = np.asarray(float(np.sum(t[:-1]))), np.asarray(float(t[-1]))
    else:
        k, b, last = buckets(total_bytes, bucket_bytes) if split is None else (np.asarray(v, dtype=float)
                                                                               for v in split)
        ov_comm = (k - 1.0) * allreduce_s(b, world_size, hw, options)
        t_last = allreduce_s(last, world_size, hw, options)
    p = np.asarray(world_size, dtype=float)
    single = p <= 1  # one worker: no synchronization, no overlap slowdown
    compute = np.where(single, t_comp, hw.gamma * t_comp)
    extra = np.where(single, 0.0, sync_terms_s(k, n_tensors, hw, options))
    if per is not None:
        tl = bucket_timeline_s(compute, ready_fractions, per)
        overlapped = tl["total_s"] - t_last  # so that total = overlapped + last + extra, as in Sec. 4.1
        ov_comm = np.maximum(tl["total_s"] - compute - t_last, 0.0)  # exposed communication, less the last bucket
    else:
        overlapped = np.maximum(compute, ov_comm)
    total = np.where(single, t_comp, overlapped + t_last + extra)
    comm = np.where(single, 0.0, ov_comm + t_last)
    z = 0 * total
    return {"compute_s": compute + z, "comm_s": comm + z, "overlapped_comm_s": np.where(single, 0.0, ov_comm) + z,
            "last_comm_s": np.where(single, 0.0, t_last) + z, "extra_s": extra + z,
            "exposed_comm_s": total - compute, "total_s": total, "k": k + z}
