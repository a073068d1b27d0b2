"""The iteration-time model of seed 000: syncSGD with overlap (Sec. 4.1) and compression (App. B).

Both models time the backward pass plus gradient synchronization of one
iteration (the paper's ``T_obs``; the forward pass is left out, as in Figs. 6-11).

* syncSGD (PyTorch DDP, Sec. 4.1): gradients go out in ``k`` buckets as the
  backward pass produces them, overlapped with it::

      T_obs = max(gamma T_comp, (k-1) T_comm(b)) + T_comm(b_last)

* compressed training (App. B, compression after the backward pass)::

      T_obs = T_comp + T_encode_decode + sum over collectives c of T_comm(c)

  where the collectives are exactly those the compressor's real protocol issues:
  :meth:`studykit.compressors.base.Compressor.plan` on ``meta`` tensors (PowerSGD:
  all-reduces of P and Q; TopK: all-gathers of values and indices; ...).

Bucketing (:class:`Workload` ``bucketing``): ``"paper"`` (default) is Sec. 4.1's
``k = ceil(G / b)`` equal buckets, which reproduces the paper's equations; ``"ddp"`` is
PyTorch DDP's real assignment (:func:`ddp_buckets`: whole parameter tensors, reverse order,
a smaller first bucket), which differs whenever one tensor is large against the cap
(VGG19's 411 MB fc1 is one bucket at any cap; a small model is one or two buckets, not
``ceil(G/b)``).

Everything broadcasts over numpy arrays: hardware fields and ``world_size`` may be
arrays, and a (bandwidth x GPUs) grid is one :func:`predict` call.
"""
from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from studykit import compressors, models
from studykit.perfmodel import collectives as col
from studykit.perfmodel.calibration import Calibration, Constant, TComp, TEncodeDecode, normalize_params

__all__ = [
    "MIB", "DEFAULT_BUCKET_BYTES", "Hardware", "Workload", "Calibration", "Constant", "TComp", "TEncodeDecode",
    "Prediction", "BUCKETING", "DDP_FIRST_BUCKET_BYTES", "buckets", "paper_bucket_sizes", "ddp_buckets",
    "ddp_bucket_sizes", "allreduce_s", "syncsgd_s", "compressed_s", "plan_summary", "predict",
    "speedup_over_sync", "required_ratio", "crossover_bandwidth_gbps",
]

MIB = 2**20
#: PyTorch DDP's default ``bucket_cap_mb=25`` (seed 000, Sec. 2.2 "Bucketing Gradients": "25 MB by default")
DEFAULT_BUCKET_BYTES = 25 * MIB
#: PyTorch DDP's first bucket (``dist._DEFAULT_FIRST_BUCKET_BYTES``) when ``bucket_cap_mb`` is left at its default
DDP_FIRST_BUCKET_BYTES = 1 * MIB
#: :class:`Workload` bucketing options: Sec. 4.1's equal buckets, or DDP's real assignment
BUCKETING = ("paper", "ddp")


@dataclass(frozen=True)
class Hardware:
    """The cluster, as the model sees it. Any numeric field may be a numpy array (broadcast).

    Defaults are the paper's V100 setting; ``data/calibrations/paper_v100.json`` holds
    them with uncertainties (see ``data/paper/README.md`` for the alpha discussion).
    """

    bandwidth_gbps: Any = 10.0  # seed 000 Sec. 3: p3.8xlarge "around 10Gbps"
    alpha_s: Any = 4e-6  # Eq. 1 latency per ring step; Sec. 2.2 + App. C, see data/paper/README.md
    gamma: Any = 1.07  # Sec. 4.1: "We observe gamma to between 1.04 to 1.1" (midpoint)
    compute_speedup: Any = 1.0  # App. D "Effect of faster compute": divides T_comp and T_encode_decode
    incast_coeff: Any = 0.0  # beyond the paper: all-gather bandwidth-term inflation (App. C names the gap)
    allreduce: str = "ring"  # "ring" (Eq. 1, the paper's choice: NCCL_TREE_THRESHOLD=0) or "tree" (Table 1)

    def __post_init__(self):
        if self.allreduce not in ("ring", "tree"):
            raise ValueError(f"Hardware.allreduce must be 'ring' or 'tree', got {self.allreduce!r}")
        for name in ("bandwidth_gbps", "gamma", "compute_speedup"):
            if np.any(np.asarray(getattr(self, name), dtype=float) <= 0):
                raise ValueError(f"Hardware.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("alpha_s", "incast_coeff"):
            if np.any(np.asarray(getattr(self, name), dtype=float) < 0):
                raise ValueError(f"Hardware.{name} must be >= 0, got {getattr(self, name)!r}")

    @property
    def bandwidth_bytes_s(self):
        """Bandwidth in bytes per second."""
        return col.gbps_to_bytes_s(self.bandwidth_gbps)

    @classmethod
    def from_calibration(cls, cal: Calibration, **overrides) -> "Hardware":
        """The calibration's alpha, bandwidth, gamma (and incast, if fitted); ``overrides`` win."""
        kw: dict[str, Any] = {}
        for name in ("alpha_s", "bandwidth_gbps", "gamma", "incast_coeff"):
            c = getattr(cal, name)
            if c is not None:
                kw[name] = c.value
        kw.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**kw)


@dataclass(frozen=True)
class Workload:
    """What is trained: a model (by name, or its parameter shapes), batch size per worker,
    the single-GPU backward time ``t_comp_s`` (``None``: from the calibration) and DDP's bucket size.

    ``bucketing`` says how the gradient is split into DDP buckets (:meth:`buckets`):

    * ``"paper"`` (default; seed 000 Sec. 4.1): ``k = ceil(G / b)`` buckets of ``b`` bytes and
      a smaller last one, as if DDP could cut tensors;
    * ``"ddp"``: PyTorch DDP's assignment (:func:`ddp_buckets`): whole parameter tensors in
      reverse order, a bucket closes once it holds ``>= bucket_bytes``; the first bucket closes
      at ``first_bucket_bytes``. ``first_bucket_bytes=None`` follows DDP: 1 MiB
      (:data:`DDP_FIRST_BUCKET_BYTES`) when ``bucket_bytes`` is the default 25 MiB (DDP's
      ``bucket_cap_mb=None``), ``bucket_bytes`` otherwise. (DDP given ``bucket_cap_mb=25``
      explicitly uses a 25 MiB first bucket: pass ``first_bucket_bytes=25 * MIB`` for that.)
    """

    model: str | None = "resnet50"
    batch_size: int = 64
    t_comp_s: float | None = None  # single-GPU backward pass (s); seed 000 App. C
    bucket_bytes: Any = DEFAULT_BUCKET_BYTES
    param_shapes: tuple | None = None  # overrides ``model``'s shapes when given
    bucketing: str = "paper"  # "paper" (Sec. 4.1, k = ceil(G/b)) or "ddp" (PyTorch's real assignment)
    first_bucket_bytes: float | None = None  # "ddp" only; None: DDP's rule (see the class docstring)

    def __post_init__(self):
        if self.bucketing not in BUCKETING:
            raise ValueError(f"Workload.bucketing must be one of {BUCKETING}, got {self.bucketing!r}")
        if self.first_bucket_bytes is not None and self.first_bucket_bytes <= 0:
            raise ValueError(f"Workload.first_bucket_bytes must be > 0, got {self.first_bucket_bytes!r}")
        if self.model is None and self.param_shapes is None:
            raise ValueError("Workload needs a model name or param_shapes")
        if self.model is not None and self.param_shapes is None and self.model not in models.available():
            raise ValueError(f"unknown model {self.model!r}; available: {', '.join(models.available())}")
        if self.batch_size < 1:
            raise ValueError(f"Workload.batch_size must be >= 1, got {self.batch_size}")
        if np.any(np.asarray(self.bucket_bytes, dtype=float) <= 0):
            raise ValueError(f"Workload.bucket_bytes must be > 0, got {self.bucket_bytes!r}")
        if self.t_comp_s is not None and self.t_comp_s <= 0:
            raise ValueError(f"Workload.t_comp_s must be > 0, got {self.t_comp_s}")
        if self.param_shapes is not None:
            object.__setattr__(self, "param_shapes", tuple(tuple(int(d) for d in s) for s in self.param_shapes))

    def shapes(self) -> tuple:
        """Parameter shapes (forward order)."""
        return self.param_shapes if self.param_shapes is not None else _model_shapes(self.model)

    @property
    def gradient_bytes(self) -> int:
        """fp32 gradient size (bytes): what syncSGD all-reduces."""
        return 4 * sum(math.prod(s) for s in self.shapes())

    def buckets(self):
        """``(k, b, b_last)`` of this workload's bucketing (broadcast over ``bucket_bytes``):
        ``k`` buckets, the last of ``b_last`` bytes, the other ``k-1`` of ``b`` bytes on average.

        ``"paper"``: :func:`buckets`. ``"ddp"``: from :func:`ddp_bucket_sizes`; ``b`` is the mean
        of the ``k-1`` overlapped buckets, exact for Eq. 1 and the tree (costs affine in bytes:
        ``(k-1) T_comm(b)`` is the sum over those buckets). With ``k = 1``, ``b = b_last``."""
        if self.bucketing == "paper":
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
            return float(self.t_comp_s), "given"
        if calibration is None:
            raise ValueError("T_comp unknown: set Workload.t_comp_s or pass a calibration")
        if self.model is None:
            raise ValueError("T_comp unknown: a Workload given by param_shapes needs t_comp_s")
        return calibration.t_comp_s(self.model, self.batch_size)


@functools.lru_cache(maxsize=None)
def _model_shapes(name: str) -> tuple:
    return tuple(tuple(s) for s in models.param_shapes(name))


# ------------------------------------------------------------------ equations
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


def allreduce_s(nbytes, world_size, hw: Hardware):
    """All-reduce time (s) on ``hw``: Eq. 1 ring (default) or Table 1 tree."""
    fn = col.ring_allreduce_s if hw.allreduce == "ring" else col.tree_allreduce_s
    return fn(nbytes, world_size, hw.alpha_s, hw.bandwidth_bytes_s)


def syncsgd_s(t_comp_s, total_bytes, world_size, hw: Hardware, bucket_bytes=DEFAULT_BUCKET_BYTES,
              split=None) -> dict:
    """syncSGD (DDP with overlap) iteration time, Sec. 4.1:

    ``T_obs = max(gamma T_comp, (k-1) T_comm(b, p, BW)) + T_comm(b_last, p, BW)``

    with ``T_comm`` from Eq. 1. ``T_comp`` is divided by ``hw.compute_speedup``.
    The buckets are Sec. 4.1's ``buckets(total_bytes, bucket_bytes)`` unless ``split``
    gives ``(k, b, b_last)`` (e.g. :meth:`Workload.buckets` with ``bucketing="ddp"``).
    Returns arrays: ``compute_s`` (gamma T_comp), ``comm_s`` (all buckets),
    ``exposed_comm_s`` (``T_obs - gamma T_comp``), ``total_s``, ``k``.
    """
    t_comp = np.asarray(t_comp_s, dtype=float) / hw.compute_speedup
    k, b, last = buckets(total_bytes, bucket_bytes) if split is None else (np.asarray(v, dtype=float) for v in split)
    t_b = allreduce_s(b, world_size, hw)
    t_last = allreduce_s(last, world_size, hw)
    p = np.asarray(world_size, dtype=float)
    single = p <= 1  # one worker: no synchronization, no overlap slowdown
    compute = np.where(single, t_comp, hw.gamma * t_comp)
    overlapped = np.maximum(compute, (k - 1.0) * t_b)
    total = np.where(single, t_comp, overlapped + t_last)
    comm = np.where(single, 0.0, (k - 1.0) * t_b + t_last)
    return {"compute_s": compute + 0 * total, "comm_s": comm + 0 * total, "exposed_comm_s": total - compute,
            "total_s": total, "k": k + 0 * total}


@dataclass(frozen=True)
class PlanSummary:
    """What one call of a compressor's protocol sends, per collective kind: count and bytes per worker."""

    allreduce_count: int
    allreduce_bytes: int
    allgather_count: int
    allgather_bytes: int
    collectives: tuple  # the plan itself, as dicts

    @property
    def wire_bytes(self) -> int:
        return self.allreduce_bytes + self.allgather_bytes


def _plan_key(compressor, params) -> tuple:
    if isinstance(compressor, compressors.Compressor):
        if params:
            raise ValueError("pass either a compressor instance or a name with params, not both")
        return ("instance", compressor.name, repr(compressor))
    return ("name", compressor, json.dumps(normalize_params(params, compressor), sort_keys=True, default=str))


_PLAN_CACHE: dict[tuple, PlanSummary] = {}
_INSTANCES: dict[tuple, Any] = {}


def plan_summary(compressor, params: dict | None, shapes: Sequence, world_size: int,
                 shapes_key: Any = None) -> PlanSummary:
    """Summarize ``compressor.plan(shapes, world_size)`` (cached per compressor, params, shapes, p).

    The plan for a given ``p`` is fixed, and each collective's cost is affine in its
    bytes, so count and total bytes per kind are all the model needs.
    """
    key = (_plan_key(compressor, params), shapes_key if shapes_key is not None else tuple(map(tuple, shapes)),
           int(world_size))
    hit = _PLAN_CACHE.get(key)
    if hit is not None:
        return hit
    ckey = key[0]
    comp = _INSTANCES.get(ckey)
    if comp is None:
        comp = compressor if isinstance(compressor, compressors.Compressor) else \
            compressors.get(compressor, **(params or {}))
        _INSTANCES[ckey] = comp
    plan = comp.plan([tuple(s) for s in shapes], int(world_size))
    ar = [c for c in plan if c.op == "all_reduce"]
    ag = [c for c in plan if c.op == "all_gather"]
    other = sorted({c.op for c in plan} - {"all_reduce", "all_gather"})
    if other:
        raise ValueError(f"compressor {comp.name!r} issues collectives {other} the model has no cost for")
    out = PlanSummary(len(ar), sum(c.nbytes for c in ar), len(ag), sum(c.nbytes for c in ag),
                      tuple(c.as_dict() for c in plan))
    _PLAN_CACHE[key] = out
    return out


def _per_p(compressor, params, workload: Workload, world_size):
    """Vectorized plan summary: arrays (shaped like ``world_size``) of counts and bytes per kind."""
    p = np.asarray(world_size)
    if np.any(p != np.round(p)) or np.any(p < 1):
        raise ValueError(f"world_size must be positive integers, got {world_size!r}")
    uniq, inv = np.unique(p.astype(np.int64), return_inverse=True)
    skey = workload.model if workload.param_shapes is None else workload.param_shapes
    sums = [plan_summary(compressor, params, workload.shapes(), int(q), shapes_key=skey) for q in uniq]
    fields = np.array([[s.allreduce_count, s.allreduce_bytes, s.allgather_count, s.allgather_bytes]
                       for s in sums], dtype=float)
    per = fields[inv.reshape(-1)].reshape(*p.shape, 4)
    return per[..., 0], per[..., 1], per[..., 2], per[..., 3], sums


def compressed_s(t_comp_s, t_encode_decode_s, ar_count, ar_bytes, ag_count, ag_bytes, world_size,
                 hw: Hardware, bytes_scale=1.0) -> dict:
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
        col.allgather_incast_s(ag_b, p, 0.0, bw, hw.incast_coeff)
    comp = np.asarray(t_comp_s, dtype=float) / hw.compute_speedup
    enc = np.asarray(t_encode_decode_s, dtype=float) / hw.compute_speedup
    comm = t_ar + t_ag
    total = comp + enc + comm
    z = 0 * total
    return {"compute_s": comp + z, "encode_decode_s": enc + z, "allreduce_s": t_ar + z, "allgather_s": t_ag + z,
            "comm_s": comm + z, "total_s": total}


# ------------------------------------------------------------------ predict
@dataclass
class Prediction:
    """Predicted iteration times (s), arrays broadcast over the inputs' grid.

    ``sync`` and ``compressed`` are dicts of arrays (see :func:`syncsgd_s` and
    :func:`compressed_s`); ``compressed`` is ``None`` without a compressor.
    ``linear_s`` is the ideal (linear scaling) time: ``T_comp`` alone.
    """

    world_size: np.ndarray
    bandwidth_gbps: np.ndarray
    linear_s: np.ndarray
    sync: dict
    compressed: dict | None = None
    compressor: str | None = None
    params: dict = field(default_factory=dict)
    wire_bytes: np.ndarray | None = None
    plans: dict = field(default_factory=dict)  # world_size -> list of collectives (dicts)
    notes: dict = field(default_factory=dict)  # how each input was obtained

    @property
    def speedup(self):
        """syncSGD time / compressed time (> 1: the compressor is faster)."""
        if self.compressed is None:
            raise ValueError("no compressor in this prediction")
        return self.sync["total_s"] / self.compressed["total_s"]

    def scaling_speedup(self, which: str = "sync"):
        """Speed-up over one GPU under weak scaling: ``p T_comp / T_obs`` (linear = p)."""
        t = (self.sync if which == "sync" else self.compressed)["total_s"]
        return self.world_size * self.linear_s / t

    def to_records(self) -> list[dict]:
        """One dict per grid point (for JSON / DataFrames)."""
        shape = np.broadcast_shapes(self.sync["total_s"].shape,
                                    () if self.compressed is None else self.compressed["total_s"].shape)
        cols = {"world_size": self.world_size, "bandwidth_gbps": self.bandwidth_gbps, "linear_s": self.linear_s}
        cols.update({f"sync_{k}": v for k, v in self.sync.items()})
        if self.compressed is not None:
            cols.update({f"compressed_{k}": v for k, v in self.compressed.items()})
            cols["speedup"] = self.speedup
            cols["wire_bytes"] = self.wire_bytes
        flat = {k: np.broadcast_to(np.asarray(v, dtype=float), shape).ravel() for k, v in cols.items()}
        n = int(np.prod(shape)) if shape else 1
        out = []
        for i in range(n):
            r = {k: float(v[i]) for k, v in flat.items()}
            r["world_size"] = int(r["world_size"])
            out.append(r)
        return out

    def frame(self):
        """The grid as a pandas DataFrame (one row per point)."""
        import pandas as pd

        return pd.DataFrame(self.to_records())


def predict(workload: Workload, hardware: Hardware, world_size, compressor=None, params: dict | None = None, *,
            calibration: Calibration | None = None, t_encode_decode_s=None, bytes_scale=1.0,
            encode_decode_scale=1.0) -> Prediction:
    """Predict syncSGD (Sec. 4.1) and, with ``compressor``, compressed training (App. B).

    ``world_size`` and any :class:`Hardware` field may be arrays; the result
    broadcasts them (e.g. ``bandwidth_gbps=bw[:, None]``, ``world_size=p[None, :]``).
    ``compressor`` is a name from :func:`studykit.compressors.available` (with
    ``params``) or an instance; its communication term comes from its ``plan()``.
    ``T_comp`` comes from the workload or the calibration; ``T_encode_decode`` from
    ``t_encode_decode_s`` or the calibration (``"none"`` encodes nothing: 0 s).
    ``bytes_scale`` / ``encode_decode_scale`` multiply the compressor's bytes and
    encode/decode time (App. D trade-off, Fig. 21).
    """
    p = np.asarray(world_size)
    if p.size == 0 or np.any(p != np.round(p)) or np.any(p < 1):
        raise ValueError(f"world_size must be positive integers, got {world_size!r}")
    t_comp, how_comp = workload.resolve_t_comp(calibration)
    notes = {"t_comp_s": t_comp, "t_comp": how_comp}
    total_bytes = workload.gradient_bytes
    sync = syncsgd_s(t_comp, total_bytes, p, hardware, workload.bucket_bytes, split=workload.buckets())
    notes["bucketing"] = workload.bucketing
    bw = np.asarray(hardware.bandwidth_gbps, dtype=float)
    pred = Prediction(world_size=p, bandwidth_gbps=bw, linear_s=np.asarray(t_comp / hardware.compute_speedup),
                      sync=sync, notes=notes)
    if compressor is None:
        return pred
    name = compressor.name if isinstance(compressor, compressors.Compressor) else compressor
    eff_params = compressor.params() if isinstance(compressor, compressors.Compressor) else dict(params or {})
    ar_n, ar_b, ag_n, ag_b, sums = _per_p(compressor, params, workload, p)
    # T_encode_decode: explicit > calibration > 0 for "none"
    if t_encode_decode_s is not None:
        t_ed = np.asarray(t_encode_decode_s, dtype=float)
        notes["t_encode_decode"] = "given"
    elif name == "none":
        t_ed = np.asarray(0.0)
        notes["t_encode_decode"] = "none encodes nothing"
    else:
        if calibration is None:
            raise ValueError(f"T_encode_decode of {name!r} unknown: pass t_encode_decode_s or a calibration")
        if workload.model is None:
            raise ValueError("T_encode_decode unknown: a Workload given by param_shapes needs t_encode_decode_s")
        base, per_worker, how = calibration.t_encode_decode_s(name, eff_params, workload.model)
        t_ed = base + per_worker * p.astype(float)
        notes["t_encode_decode"] = how
    t_ed = t_ed * encode_decode_scale
    notes["t_encode_decode_s"] = float(np.max(t_ed))
    comp = compressed_s(t_comp, t_ed, ar_n, ar_b, ag_n, ag_b, p, hardware, bytes_scale)
    pred.compressed = comp
    pred.compressor = name
    pred.params = normalize_params(eff_params)
    pred.wire_bytes = (ar_b + ag_b) * bytes_scale
    pred.plans = {int(q): list(s.collectives) for q, s in zip(np.unique(p.astype(np.int64)), sums)}
    return pred


def speedup_over_sync(workload: Workload, hardware: Hardware, world_size, compressor, params=None, **kw):
    """syncSGD time / compressed time (array); > 1 means compression pays off."""
    return predict(workload, hardware, world_size, compressor, params, **kw).speedup


def required_ratio(workload: Workload, hardware: Hardware, world_size, *, calibration: Calibration | None = None,
                   slack=0.0, include_last_bucket: bool = False):
    """Smallest compression ratio for near-linear scaling (Sec. 4.2 Fig. 12, App. D Fig. 18).

    The hypothetical compressor is ideal except for its ratio ``c``: free to encode,
    all-reduce compatible, and applied per DDP bucket, so it keeps syncSGD's overlap
    (every bucket shrinks ``c``-fold). The paper does not define "near linear"; the
    kit's default is the point where the overlapped communication fits under the
    backward pass, i.e. the ``max`` of Sec. 4.1 switches to compute::

        (k-1) T_comm(b / c) <= (1 + slack) gamma T_comp

    leaving only the last bucket's tail exposed. ``include_last_bucket=True`` asks for
    the stricter ``T_obs <= (1 + slack) gamma T_comp`` (the tail counted too). Each
    ``T_comm`` is affine in ``1/c`` (Eq. 1), so ``c`` has a closed form. Returns
    ``c >= 1`` (1: syncSGD already scales) and ``inf`` where latency alone breaks
    the budget. Broadcasts over ``world_size`` and hardware arrays.
    """
    t_comp, _ = workload.resolve_t_comp(calibration)
    t = np.asarray(t_comp, dtype=float) / hardware.compute_speedup
    budget = (1.0 + slack) * hardware.gamma * t
    k, b, last = workload.buckets()
    p = np.asarray(world_size, dtype=float)
    lat = allreduce_s(0.0, p, hardware)  # latency part of one all-reduce
    no_lat = replace(hardware, alpha_s=0.0)
    per_b = allreduce_s(b, p, no_lat)
    per_last = allreduce_s(last, p, no_lat)
    with np.errstate(divide="ignore", invalid="ignore"):
        if include_last_bucket:
            # tail after compute: lat + per_last / c <= slack gamma T; all buckets: k lat + (...)/c <= budget
            room1 = slack * hardware.gamma * t - lat
            c1 = np.where(room1 > 0, per_last / room1, np.inf)
            room2 = budget - k * lat
            c2 = np.where(room2 > 0, ((k - 1.0) * per_b + per_last) / room2, np.inf)
            c = np.maximum(c1, c2)
        else:
            room = budget - (k - 1.0) * lat
            c = np.where(room > 0, (k - 1.0) * per_b / room, np.inf)
            c = np.where(k <= 1, 1.0, c)  # one bucket: nothing to overlap, nothing to hide
    c = np.maximum(c, 1.0)
    return np.where(p <= 1, 1.0, c)


def crossover_bandwidth_gbps(workload: Workload, hardware: Hardware, world_size, compressor, params=None, *,
                             lo_gbps=0.1, hi_gbps=400.0, n=4000, **kw) -> float:
    """Bandwidth (Gbit/s) where the compressor and syncSGD take equal time (Fig. 3, Fig. 19).

    Found on a log grid (one vectorized :func:`predict`) and refined by linear
    interpolation of log time ratio. ``nan`` if they never cross in ``[lo, hi]``;
    the first crossing from below if they cross more than once.
    """
    bw = np.geomspace(lo_gbps, hi_gbps, n)
    pred = predict(workload, replace(hardware, bandwidth_gbps=bw), world_size, compressor, params, **kw)
    r = np.log(np.broadcast_to(pred.speedup, bw.shape))  # > 0: compressor faster
    idx = np.nonzero(np.sign(r[:-1]) != np.sign(r[1:]))[0]
    if len(idx) == 0:
        return float("nan")
    i = idx[0]
    x0, x1 = np.log(bw[i]), np.log(bw[i + 1])
    return float(np.exp(x0 - r[i] * (x1 - x0) / (r[i + 1] - r[i])))
