"""Compressed training, compression after the backward pass (App. B): by count and bytes per collective
kind (:func:`compressed_s`) or collective by collective (:func:`compressed_plan_s`)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from studykit.perfmodel import collectives as col
from studykit.perfmodel.model.costs import collective_s
from studykit.perfmodel.model.options import Hardware, ModelOptions
from studykit.perfmodel.model.plans import _nbytes

__all__ = ["compressed_s", "compressed_plan_s"]


def compressed_s(t_comp_s, t_encode_decode_s, ar_count, ar_bytes, ag_count, ag_bytes, world_size,
                 hw: Hardware, bytes_scale=1.0, incast: bool = True) -> dict:
    """Compressed training, compression after the backward pass (App. B):

    ``T_obs = T_comp + T_encode_decode + sum_c T_comm(c)``

    The collectives enter as count and total bytes per kind (each cost is affine in
    bytes): all-reduces by Eq. 1 (or Table 1 tree), all-gathers by App. B's ring
    all-gather (plus the optional incast term). ``bytes_scale`` multiplies the bytes
    (App. D "Tradeoff between encode-decode time and compression ratio").
    Compute and encode/decode are divided by ``hw.compute_speedup`` (App. D).
    """
    p = np.asarray(world_size, dtype=float)
    bw = hw.bandwidth_bytes_s
    ar_b = np.asarray(ar_bytes, dtype=float) * bytes_scale
    ag_b = np.asarray(ag_bytes, dtype=float) * bytes_scale
    # sum of affine costs = count * latency + total bytes * per-byte cost
    if hw.allreduce == "ring":
        t_ar = ar_count * col.ring_allreduce_s(0.0, p, hw.alpha_s, bw) + col.ring_allreduce_s(ar_b, p, 0.0, bw)
    else:
        t_ar = ar_count * col.tree_allreduce_s(0.0, p, hw.alpha_s, bw) + col.tree_allreduce_s(ar_b, p, 0.0, bw)
    t_ag = ag_count * col.ring_allgather_s(0.0, p, hw.alpha_s, bw) + \
        col.allgather_incast_s(ag_b, p, 0.0, bw, hw.incast_coeff if incast else 0.0)
    return _compressed_total(t_comp_s, t_encode_decode_s, t_ar, t_ag, hw)


def _compressed_total(t_comp_s, t_encode_decode_s, t_ar, t_ag, hw: Hardware) -> dict:
    comp = np.asarray(t_comp_s, dtype=float) / hw.compute_speedup
    enc = np.asarray(t_encode_decode_s, dtype=float) / hw.compute_speedup
    comm = t_ar + t_ag
    total = comp + enc + comm
    z = 0 * total
    return {"compute_s": comp + z, "encode_decode_s": enc + z, "allreduce_s": t_ar + z, "allgather_s": t_ag + z,
            "comm_s": comm + z, "total_s": total}


def compressed_plan_s(t_comp_s, t_encode_decode_s, plans: Sequence[Sequence[dict]], world_size: int, hw: Hardware,
                      options: ModelOptions | None = None, bytes_scale=1.0) -> dict:
    """App. B, collective by collective: ``T_obs = T_comp + T_encode_decode + sum_c T_comm(c)``

    over every collective ``c`` of ``plans`` (one plan per DDP bucket for a hook, ``options.hook_buckets``;
    one plan of the whole gradient otherwise), each priced by :func:`collective_s` (measured
    collectives are not affine in bytes, so each is priced alone). Scalar ``world_size``; broadcasts
    over hardware arrays. Same keys as :func:`compressed_s`.
    """
    t_ar, t_ag = 0.0, 0.0
    for plan in plans:
        for c in plan:
            t = collective_s(c["op"], _nbytes(c, bytes_scale), world_size, hw, options)
            if c["op"] == "all_reduce":
                t_ar = t_ar + t
            else:
                t_ag = t_ag + t
    return _compressed_total(t_comp_s, t_encode_decode_s, np.asarray(t_ar, dtype=float),
                             np.asarray(t_ag, dtype=float), hw)
