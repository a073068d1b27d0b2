"""The tour notebook's computations: what data-parallel training sends, what it costs, how overlap hides it.

Everything here is a thin, tested layer over :mod:`studykit.perfmodel` (Table 1, Eq. 1, Sec. 4.1)
and the compressors' own ``plan()``, so the numbers a newcomer reads in ``notebooks/tour.ipynb``
are the ones the rest of the kit uses. :class:`Answer` shows an exercise's answer collapsed
(an HTML ``<details>`` block) so it stays hidden until clicked.
"""
from __future__ import annotations

import html
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

from studykit import compressors, models
from studykit.perfmodel import collectives as col
from studykit.perfmodel.model import DEFAULT_BUCKET_BYTES, Hardware, allreduce_s, buckets, syncsgd_s

__all__ = ["gradient_traffic", "collective_costs", "overlap_timeline", "hiding_bandwidth_gbps", "bucket_sweep", "family",
           "family_table", "speedup_table", "Answer", "FAMILIES"]

#: a compressor class's ``family`` -> its label here (the family itself is on the class)
FAMILIES = {"precision": "precision (baseline)", "quantization": "quantization",
            "sparsification": "sparsification", "low-rank": "low-rank"}


# ------------------------------------------------------------------ 1. what is sent
def gradient_traffic(model: str = "resnet50", world_size: int = 64, bucket_bytes: float = DEFAULT_BUCKET_BYTES) -> dict:
    """What one syncSGD iteration of ``model`` puts on the network, per worker (bytes, fp32 gradients).

    ``ring_sent_bytes``: each worker sends ``2 (p-1)/p n`` in a ring all-reduce (Table 1);
    ``server_link_bytes``: what a parameter server's one link carries, ``2 (p-1) n``.
    """
    numel = models.numel(model)
    n = 4.0 * numel
    p = int(world_size)
    k, b, last = buckets(n, bucket_bytes)
    return {"model": model, "world_size": p, "numel": int(numel), "gradient_bytes": n,
            "buckets": int(k), "bucket_bytes": float(b), "last_bucket_bytes": float(last),
            "ring_sent_bytes": 2.0 * (p - 1) / p * n, "server_link_bytes": 2.0 * (p - 1) * n}


# ------------------------------------------------------------------ 2. what it costs
def collective_costs(nbytes: float, world_sizes, alpha_s: float, bandwidth_gbps: float) -> pd.DataFrame:
    """Time (s) to aggregate an ``nbytes`` gradient over each world size: ring (Eq. 1, split into its
    latency and bandwidth terms), tree and parameter server (Table 1), and the bytes each ring worker sends."""
    p = np.asarray(world_sizes, dtype=float)
    bw = float(col.gbps_to_bytes_s(bandwidth_gbps))
    ring = col.ring_allreduce_s(nbytes, p, alpha_s, bw)
    latency = col.ring_allreduce_s(0.0, p, alpha_s, bw)
    return pd.DataFrame({
        "world_size": p.astype(int), "ring_s": ring, "ring_latency_s": latency, "ring_bandwidth_s": ring - latency,
        "tree_s": col.tree_allreduce_s(nbytes, p, alpha_s, bw),
        "parameter_server_s": col.parameter_server_s(nbytes, p, alpha_s, bw),
        "ring_sent_bytes": 2.0 * (p - 1.0) / p * nbytes,
        "ring_bandwidth_limit_s": 2.0 * nbytes / bw + 0 * p,  # p -> infinity
    })


# ------------------------------------------------------------------ 3. overlap and bucketing
def overlap_timeline(t_comp_s: float, total_bytes: float, world_size: int, hw: Hardware,
                     bucket_bytes: float = DEFAULT_BUCKET_BYTES, overlap: bool = True) -> pd.DataFrame:
    """One iteration's backward pass and all-reduces as segments (``lane``, ``start_s``, ``end_s``, ``what``).

    ``overlap=True`` is Sec. 4.1's model drawn in time: the backward pass runs ``gamma`` times slower;
    the first ``k-1`` buckets are all-reduced one after another while it runs (bucket ``i`` ready at
    ``i gamma T_comp / (k-1)``: the model's idealisation that gradients arrive evenly and the first
    bucket at once); the last bucket only after it. The last segment ends at exactly
    :func:`studykit.perfmodel.model.syncsgd_s`'s ``total_s``. ``overlap=False``: backward (``T_comp``),
    then every bucket (compute-then-communicate, Fig. 2's "without overlap").
    """
    p = int(world_size)
    k, b, last = (float(v) for v in buckets(total_bytes, bucket_bytes))
    k = int(k)
    t_b = float(allreduce_s(b, p, hw))
    t_last = float(allreduce_s(last, p, hw))
    t_comp = float(t_comp_s) / float(hw.compute_speedup)
    gamma = float(hw.gamma) if (overlap and p > 1) else 1.0
    compute_end = gamma * t_comp
    rows = [("backward (GPU)", 0.0, compute_end, "backward pass")]
    end = 0.0
    for i in range(k - 1):
        ready = i * compute_end / (k - 1) if overlap else compute_end
        start = max(ready, end)
        end = start + t_b
        rows.append(("all-reduce (network)", start, end, f"bucket {i + 1}"))
    start = max(compute_end, end)
    rows.append(("all-reduce (network)", start, start + t_last, f"bucket {k} (last)"))
    return pd.DataFrame(rows, columns=["lane", "start_s", "end_s", "what"])


def hiding_bandwidth_gbps(t_comp_s: float, total_bytes: float, world_size: int, hw: Hardware,
                          bucket_bytes: float = DEFAULT_BUCKET_BYTES) -> float:
    """Lowest bandwidth (Gbit/s) at which syncSGD still hides the first ``k-1`` buckets under the backward
    pass: where Sec. 4.1's ``max`` switches, ``(k-1) T_comm(b) = gamma T_comp`` with Eq. 1 (ring) solved
    for BW. ``inf`` if nothing can hide (one bucket, or the latency term alone fills the backward pass)."""
    k, b, _ = (float(v) for v in buckets(total_bytes, bucket_bytes))
    p = float(world_size)
    if k <= 1 or p <= 1:
        return math.inf if k <= 1 else 0.0
    room_s = float(hw.gamma) * float(t_comp_s) / float(hw.compute_speedup) / (k - 1) - 2 * float(hw.alpha_s) * (p - 1)
    if room_s <= 0:
        return math.inf
    return float(col.bytes_s_to_gbps(2 * b * (p - 1) / p / room_s))


def bucket_sweep(t_comp_s: float, total_bytes: float, world_size: int, hw: Hardware, bucket_mb) -> pd.DataFrame:
    """syncSGD iteration time (Sec. 4.1) as DDP's bucket size varies: few big buckets leave a long
    un-hidden last bucket; many small ones pay the latency term ``2 alpha (p-1)`` each time."""
    mb = np.asarray(bucket_mb, dtype=float)
    out = syncsgd_s(t_comp_s, total_bytes, world_size, hw, mb * 2**20)
    return pd.DataFrame({"bucket_mb": mb, "buckets": out["k"].astype(int), "total_s": out["total_s"],
                         "exposed_comm_s": out["exposed_comm_s"], "compute_s": out["compute_s"]})


# ------------------------------------------------------------------ 4. compressor families
def family(name: str) -> str:
    """The family of compressor ``name`` (precision, quantization, sparsification, low-rank)."""
    return FAMILIES.get(compressors.metadata(name).family, "other")


def family_table(specs, model: str = "resnet50", world_size: int = 64) -> pd.DataFrame:
    """Per compressor spec (``"topk:ratio=0.01"``): family, all-reduce compatibility, the collectives its
    ``plan()`` issues on ``model``'s gradients at ``world_size``, the bytes each worker contributes to them,
    the compression ratio against the fp32 all-reduce, and the bytes each worker actually sends on a ring
    (all-reduce: ``2 (p-1)/p`` of its share; all-gather: ``p-1`` shards, so it grows with ``p``)."""
    shapes = models.param_shapes(model)
    dense = 4 * sum(math.prod(s) for s in shapes)
    rows = []
    for spec in specs:
        name, params = compressors.parse_spec(spec)
        comp = compressors.get(name, **params)
        plan = comp.plan(shapes, world_size)
        sent = sum(c.nbytes for c in plan)
        ops = Counter(c.op for c in plan)
        p = int(world_size)
        on_ring = sum(c.nbytes * (2.0 * (p - 1) / p if c.op == "all_reduce" else p - 1.0) for c in plan)
        rows.append({"compressor": spec, "family": family(name), "allreduce_compatible": comp.allreduce_compatible,
                     "collectives": ", ".join(f"{n} x {op}" for op, n in sorted(ops.items())),
                     "bytes_per_worker": sent, "ratio": dense / sent, "ring_sent_bytes": on_ring})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ 5. does it pay?
def speedup_table(model_names, specs: dict, hw: Hardware, world_size: int, batch_size: int, calibration) -> pd.DataFrame:
    """Predicted speed-up over syncSGD (> 1: compression faster) and both iteration times (ms), per model and
    compressor (``specs``: label -> (name, params)), with :func:`studykit.perfmodel.predict` (Sec. 4.1, App. B)."""
    from studykit.perfmodel import Workload, predict

    rows = []
    for m in model_names:
        for label, (name, params) in specs.items():
            pr = predict(Workload(m, batch_size), hw, world_size, name, params, calibration=calibration)
            rows.append({"model": m, "compressor": label, "speedup": float(pr.speedup),
                         "sync_ms": float(pr.sync["total_s"]) * 1e3,
                         "compressed_ms": float(pr.compressed["total_s"]) * 1e3,
                         "encode_decode_ms": float(pr.compressed["encode_decode_s"]) * 1e3})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ exercises
@dataclass
class Answer:
    """An exercise's answer, shown collapsed: HTML ``<details>`` in Jupyter, nbconvert and Voila."""

    value: float
    unit: str = ""
    fmt: str = "{:,.3g}"
    note: str = ""

    @property
    def text(self) -> str:
        return f"{self.fmt.format(self.value)}{(' ' + self.unit) if self.unit else ''}"

    def _repr_html_(self) -> str:
        note = f" <span>{html.escape(self.note)}</span>" if self.note else ""
        return (f"<details class='studykit-answer'><summary>Answer (click to reveal)</summary>"
                f"<p><b>{html.escape(self.text)}</b>{note}</p></details>")

    def __repr__(self) -> str:
        return f"Answer: {self.text}" + (f" ({self.note})" if self.note else "")
