"""The per-bucket overlap of a DDP iteration (beyond the paper): :func:`bucket_timeline_s`, and a compressor
run as a DDP hook bucket by bucket on it (:func:`hook_timeline_s`)."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from studykit.perfmodel.model.bucketing import bucket_ready_fractions, coalesce_groups
from studykit.perfmodel.model.costs import collective_s
from studykit.perfmodel.model.options import Hardware, ModelOptions
from studykit.perfmodel.model.plans import _nbytes, guard_collectives, plan_summary
from studykit.perfmodel.model.workload import Workload

__all__ = ["bucket_timeline_s", "hook_timeline_s"]


def bucket_timeline_s(t_compute_s, ready_fractions, comm_s: Sequence, encode_s: Sequence | None = None,
                      decode_s: Sequence | None = None, host_ready_s: Sequence | None = None,
                      host_s: Sequence | None = None) -> dict:
    """Per-bucket overlap of a DDP iteration (BEYOND THE PAPER; Sec. 4.1 assumes every bucket but the
    last can be sent from the start of the backward pass).

    The backward pass (``C = t_compute_s``, i.e. ``gamma T_comp``) makes bucket ``i`` ready at
    ``f_i C`` (``ready_fractions``, communication order). A DDP hook then encodes it on the GPU
    (``e_i``, delaying the rest of the backward pass: same stream), sends it once the link is free
    (``c_i``: the sum of its collectives), and decodes it after its collectives (``d_i``)::

        g_i = f_i C + sum_{j<=i} e_j                  (bucket i encoded)
        F_i = max(g_i, F_{i-1}) + c_i                 (its collectives done; F_0 = 0)
        D_i = max(F_i, D_{i-1}) + d_i                 (decoded; D_0 = 0)
        T_obs = max(C + sum e + sum d, D_k)

    syncSGD is ``e = d = 0``: ``T_obs = max(C, F_k)``. Broadcasts over arrays (``t_compute_s`` and each
    ``c_i`` may be arrays, e.g. a grid of gamma or bandwidth). Returns ``total_s``, ``compute_s``
    (``C + sum e + sum d``: the GPU's busy time), ``comm_s`` (``sum c``), ``exposed_s``
    (``T_obs - compute_s``: what does not hide under the backward pass) and ``last_ready_s`` (``g_k``).

    **The host chain** (with ``host_ready_s`` ``r_i`` and ``host_s`` ``h_i``): the hook's host work (Python,
    dispatch, kernel launches) runs on one thread, bucket after bucket, from the moment the host reaches
    the bucket's hook (``r_i``, the host clock of the backward pass, which runs ahead of the GPU). Half of it
    issues the bucket's collectives; the other half runs once they are done, as the kit's hook chains a
    protocol's rounds on the collectives' futures (the same half-and-half split as ``e_i`` / ``d_i``)::

        P_i = max(r_i, H_{i-1}) + h_i / 2             (the host has issued bucket i's collectives; H_0 = 0)
        g_i = max(g_i, P_i)                           (they start no earlier)
        H_i = max(P_i, F_i) + h_i / 2                 (the rest, after them: bucket i launched)
        D_i = max(D_i, H_i)                           (no kernel finishes before it is launched)

    A codec whose launches take longer than its kernels (PowerSGD rank 32 with Gram-Schmidt, bucket by
    bucket) ends when its host does, not when its device work would; one whose kernels take longer is
    unchanged. Returned as ``host_end_s`` (``H_k``; 0 without the chain).

    ``buckets``: each bucket's moments (s since the start of the backward pass, one entry per bucket, in
    communication order): ``ready_s`` (``f_i C + sum_{j<i} e_j``), ``encode_end_s`` (``g_i``),
    ``comm_start_s`` (``max(g_i, F_{i-1})``), ``comm_end_s`` (``F_i``), ``decode_start_s`` (``max(F_i, D_{i-1})``),
    ``decode_end_s`` (``D_i``) and, with the host chain, ``host_ready_s`` (``r_i``), ``host_start_s``
    (``max(r_i, H_{i-1})``), ``host_issue_s`` (``P_i``) and ``host_done_s`` (``H_i``)."""
    f = np.asarray(ready_fractions, dtype=float)
    k = len(comm_s)
    if len(f) != k:
        raise ValueError(f"{len(f)} ready fractions for {k} buckets")
    e = [0.0] * k if encode_s is None else list(encode_s)
    d = [0.0] * k if decode_s is None else list(decode_s)
    chain = host_ready_s is not None and host_s is not None
    if chain and not (len(host_ready_s) == len(host_s) == k):
        raise ValueError(f"the host chain needs one host ready time and one host time per bucket ({k}), "
                         f"got {len(host_ready_s)} and {len(host_s)}")
    C = np.asarray(t_compute_s, dtype=float)
    F = D = H = 0.0 * C
    enc = 0.0 * C
    comm = 0.0 * C
    g = C
    keys = ("ready_s", "encode_end_s", "comm_start_s", "comm_end_s", "decode_start_s", "decode_end_s")
    per: dict = {name: [] for name in keys + (("host_ready_s", "host_start_s", "host_issue_s", "host_done_s")
                                               if chain else ())}
    for i in range(k):
        per["ready_s"].append(f[i] * C + enc)
        enc = enc + e[i]
        g = f[i] * C + enc
        if chain:
            h = np.asarray(host_s[i], dtype=float)  # may be an array (e.g. a grid of CPU slowdowns)
            per["host_ready_s"].append(float(host_ready_s[i]) + 0 * C)
            per["host_start_s"].append(np.maximum(float(host_ready_s[i]), H))
            pre = np.maximum(float(host_ready_s[i]), H) + h / 2
            g = np.maximum(g, pre)
            per["host_issue_s"].append(pre)
        per["encode_end_s"].append(g)
        per["comm_start_s"].append(np.maximum(g, F))
        F = np.maximum(g, F) + comm_s[i]
        per["comm_end_s"].append(F)
        per["decode_start_s"].append(np.maximum(F, D))
        D = np.maximum(F, D) + d[i]
        if chain:
            H = np.maximum(pre, F) + h / 2
            D = np.maximum(D, H)
            per["host_done_s"].append(H)
        per["decode_end_s"].append(D)
        comm = comm + comm_s[i]
    busy = C + enc + sum(np.asarray(x, dtype=float) for x in d)
    total = np.maximum(busy, D)
    return {"total_s": total, "compute_s": busy, "comm_s": comm, "exposed_s": total - busy, "last_ready_s": g,
            "host_end_s": H, "buckets": per}


def hook_timeline_s(t_comp_s, t_encode_decode_s, workload: Workload, compressor, params, world_size: int,
                    hw: Hardware, options: ModelOptions, bytes_scale=1.0, bucket_encode_decode_s=None,
                    bucket_host_s=None, coalesce_bytes: float | None = None) -> dict:
    """A compressor run as a DDP communication hook, bucket by bucket (BEYOND THE PAPER; App. A only
    shows hooks are slower): :func:`bucket_timeline_s` with

    * ``C = gamma T_comp`` (the backward pass overlapped with communication, as for syncSGD; ``T_comp`` with
      ``options.hook_gamma`` False);
    * per DDP bucket ``i`` (:meth:`Workload.ddp_bucket_shapes`), its collectives ``c_i`` from the
      compressor's ``plan()`` of that bucket's shapes, each priced by :func:`collective_s`;
    * ``e_i = d_i = T_encode_decode * s_i / (2 G)``: the profiled encode + decode of the whole gradient
      shared among buckets by bytes, half before the collectives and half after (the profile times them
      together: an assumption); with ``bucket_encode_decode_s`` (each bucket's device time, ``profile
      --bucket-times``) shared in those proportions instead;
    * with ``bucket_host_s`` (each bucket's host time) and the workload's ``bucket_ready_host_s``, the host
      chain of :func:`bucket_timeline_s`;
    * with ``coalesce_bytes`` (a hook that coalesces buckets, ``register(..., coalesce_mb=)``), the buckets of
      each :func:`coalesce_groups` group as one: ready when its last bucket is, its collectives from ``plan()``
      of all their shapes at once, its encode/decode and host time the sum of its buckets'.

    Same keys as :func:`compressed_s`, plus ``k``, ``exposed_s`` (the part not hidden under the
    backward pass), ``host_end_s`` and ``buckets`` (each bucket's, or coalesced group's, moments:
    :func:`bucket_timeline_s`)."""
    groups = workload.ddp_bucket_shapes()
    sizes = np.asarray([4.0 * sum(math.prod(s) for s in g) for g in groups])
    fr = workload.ready_fractions("ddp")
    if len(fr) != len(groups):
        fr = bucket_ready_fractions(sizes)
    merge = coalesce_groups(sizes, coalesce_bytes)
    t_ar, t_ag, per = 0.0, 0.0, []
    merged = [[shape for i in m for shape in groups[i]] for m in merge]
    for g in merged:
        ci = 0.0
        for c in plan_summary(compressor, params, g, world_size).collectives + guard_collectives(compressor, options):
            t = np.asarray(collective_s(c["op"], _nbytes(c, bytes_scale), world_size, hw, options), dtype=float)
            ci = ci + t
            if c["op"] == "all_reduce":
                t_ar = t_ar + t
            else:
                t_ag = t_ag + t
        per.append(ci)
    ed = np.asarray(t_encode_decode_s, dtype=float) / hw.compute_speedup
    share = sizes
    if bucket_encode_decode_s is not None:
        share = np.asarray(bucket_encode_decode_s, dtype=float)
        if len(share) != len(groups) or share.sum() <= 0:
            raise ValueError(f"bucket_encode_decode_s: one positive time per DDP bucket ({len(groups)}) expected, "
                             f"got {list(bucket_encode_decode_s)}")
    half = [ed * (sum(share[i] for i in m) / share.sum()) / 2.0 for m in merge]
    fr = [fr[m[-1]] for m in merge]
    host_ready, host = None, None
    if bucket_host_s is not None:
        if workload.bucket_ready_host_s is None:
            raise ValueError("bucket_host_s needs the workload's bucket_ready_host_s (when the host reaches each hook)")
        if not (len(bucket_host_s) == len(workload.bucket_ready_host_s) == len(groups)):
            raise ValueError(f"the host chain needs one host time and one host ready time per DDP bucket "
                             f"({len(groups)}), got {len(bucket_host_s)} and {len(workload.bucket_ready_host_s)}")
        host_ready = [workload.bucket_ready_host_s[m[-1]] for m in merge]
        host = [sum(np.asarray(bucket_host_s[i], dtype=float) for i in m) for m in merge]
    comp = np.asarray(t_comp_s, dtype=float) / hw.compute_speedup
    gamma = hw.gamma if options.hook_gamma else 1.0
    tl = bucket_timeline_s(gamma * comp, fr, per, half, half, host_ready, host)
    z = 0 * tl["total_s"]
    return {"compute_s": gamma * comp + z, "encode_decode_s": ed + z, "allreduce_s": np.asarray(t_ar) + z,
            "allgather_s": np.asarray(t_ag) + z, "comm_s": tl["comm_s"] + z, "exposed_s": tl["exposed_s"] + z,
            "total_s": tl["total_s"], "k": np.asarray(float(len(merge))), "host_end_s": tl["host_end_s"] + z,
            "buckets": tl["buckets"]}
