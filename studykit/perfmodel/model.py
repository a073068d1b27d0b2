"""The iteration-time model of Agarwal et al. 2022: syncSGD with overlap (Sec. 4.1) and compression (App. B).

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

What the model includes is one :class:`ModelOptions`: :meth:`ModelOptions.paper` is the model
as published; :meth:`ModelOptions.extended` adds every term this kit found missing (beyond the
paper, each named in :class:`ModelOptions`): measured collective tables, DDP's real buckets,
synchronization, per-bucket and per-tensor CPU costs, the compression path's overhead, CPU
contention, the all-gather incast term. ``predict`` also returns the *iteration* time a user
measures: ``O + T_obs``, ``O`` the non-backward overhead (forward, optimizer step).

Bucketing (:class:`ModelOptions` ``bucketing``): ``"paper"`` (default) is Sec. 4.1's
``k = ceil(G / b)`` equal buckets, which reproduces the paper's equations; ``"ddp"`` is
PyTorch DDP's real assignment (:func:`ddp_buckets`: whole parameter tensors, reverse order,
a smaller first bucket), which differs whenever one tensor is large against the cap
(VGG19's 411 MB fc1 is one bucket at any cap; a small model is one or two buckets, not
``ceil(G/b)``).

Everything broadcasts over numpy arrays: hardware fields and ``world_size`` may be
arrays, and a (bandwidth x GPUs) grid is one :func:`predict` call.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from studykit import compressors, models
from studykit.perfmodel import collectives as col
from studykit.perfmodel.calibration import Calibration, Constant, TComp, TEncodeDecode, normalize_params

__all__ = [
    "MIB", "DEFAULT_BUCKET_BYTES", "ModelOptions", "Hardware", "Workload", "Calibration", "Constant", "TComp", "TEncodeDecode",
    "Prediction", "BUCKETING", "DDP_FIRST_BUCKET_BYTES", "buckets", "paper_bucket_sizes", "ddp_buckets",
    "ddp_bucket_sizes", "allreduce_s", "collective_s", "syncsgd_s", "compressed_s", "plan_summary", "predict",
    "guard_collectives", "FINITE_FLAG",
    "speedup_over_sync", "required_ratio", "plan_summaries", "crossover_bandwidth_gbps", "OVERLAP", "bucket_ready_fractions",
    "bucket_timeline_s", "hook_timeline_s", "parameter_server_plan_s",
]

MIB = 2**20
#: PyTorch DDP's default ``bucket_cap_mb=25`` (Agarwal et al. 2022, Sec. 2.2 "Bucketing Gradients": "25 MB by default")
DEFAULT_BUCKET_BYTES = 25 * MIB
#: PyTorch DDP's first bucket (``dist._DEFAULT_FIRST_BUCKET_BYTES``) when ``bucket_cap_mb`` is left at its default
DDP_FIRST_BUCKET_BYTES = 1 * MIB
#: :class:`Workload` bucketing options: Sec. 4.1's equal buckets, or DDP's real assignment
BUCKETING = ("paper", "ddp")
#: :class:`ModelOptions` collective costs: Eq. 1 / App. B, or a measured :class:`~studykit.perfmodel.collectives.CollectiveTable`
COLLECTIVE_COSTS = ("eq1", "measured")
#: :class:`ModelOptions` overlap: Sec. 4.1's ``max`` or the per-bucket timeline (:func:`bucket_timeline_s`)
OVERLAP = ("sec41", "timeline")


@dataclass(frozen=True)
class ModelOptions:
    """Which terms the iteration model includes. The constants of each term live in
    :class:`Hardware` (cluster-wide) or come with the workload; an option switches the term on.

    * ``collectives``: ``"eq1"`` (Eq. 1 all-reduce, App. B ring all-gather) or ``"measured"``
      (beyond the paper: read ``Hardware.collective_table``, :func:`~studykit.perfmodel.collectives.measured_collective_s`);
    * ``bucketing``: ``"paper"`` (Sec. 4.1, ``k = ceil(G/b)``) or ``"ddp"`` (PyTorch's assignment, :func:`ddp_buckets`);
    * ``incast``: add ``Hardware.incast_coeff`` to every all-gather (beyond the paper; App. C names the gap);
    * ``sync_terms``: syncSGD pays ``Hardware.sync_delta_s`` per iteration and ``Hardware.per_bucket_s``
      per extra DDP bucket (beyond the paper: the slowest rank, launches, autograd hooks, bucket copies);
    * ``per_tensor``: ``Hardware.per_tensor_s`` per parameter tensor (beyond the paper: per-tensor CPU
      work, kernel launches; what the small-batch regime is made of);
    * ``path_overhead``: compressed training pays the workload's ``path_overhead_s`` (framework work of
      the compression path the profile does not time; calibrated on the identity compressor);
    * ``cpu_contention``: ``Hardware.cpu_slowdown`` multiplies the non-backward overhead,
      ``T_encode_decode`` and a hook's per-bucket host times (``predict``'s ``bucket_host_s``) (workers sharing
      CPU cores; the contended ``T_comp`` is an input);
    * ``hook_buckets``: a compressor run as a DDP hook issues its protocol per DDP bucket;
    * ``overlap``: ``"sec41"`` (Sec. 4.1: every bucket but the last overlaps the whole backward pass,
      ``max(gamma T_comp, (k-1) T_comm(b)) + T_comm(b_last)``) or ``"timeline"`` (beyond the paper:
      each DDP bucket is sent once its gradients are ready and the link is free, and a DDP hook's
      encode / decode run per bucket on the GPU: :func:`bucket_timeline_s`). Needs a scalar ``bucket_bytes``;
    * ``hook_gamma``: a DDP hook's backward pass runs at ``T_comp`` (False, the default; ``verify --hook-gamma
      one``: the kit's hooks issue their collectives from a thread of their own, on a side stream), or is slowed
      by ``Hardware.gamma`` as syncSGD's is (True; ``--hook-gamma fitted``). gamma is fitted on syncSGD records
      only, and where communication dominates them it is barely identifiable (0.8-2.2 on one campaign's rates);
      gamma 1 scores better or equal on most hook campaigns (data/verification/bandwidth/README.md);
    * ``finite_flag``: the kit's hook and post-backward reducer send, after the protocol of a compressor that may
      drop inf/NaN (``keeps_nonfinite`` False: random or sampled selection, an SVD, signs), a one-element
      all-reduce flag per protocol run (:class:`studykit.ddp.NonFinite`; beyond the paper, whose implementations
      send none): :func:`guard_collectives`. Off in both presets, which fit and score records of hooks that
      predate the flag (they checked on the host instead); ``advise --mode hook`` prices the kit's hook as it is
      now, flag included.
    """

    collectives: str = "eq1"
    bucketing: str = "paper"
    incast: bool = True  # the paper's model has incast_coeff = 0 anyway: Hardware's default
    sync_terms: bool = False
    per_tensor: bool = False
    path_overhead: bool = False
    cpu_contention: bool = False
    hook_buckets: bool = False
    overlap: str = "sec41"
    hook_gamma: bool = False
    finite_flag: bool = False

    def __post_init__(self):
        if self.overlap not in OVERLAP:
            raise ValueError(f"ModelOptions.overlap must be one of {OVERLAP}, got {self.overlap!r}")
        if self.collectives not in COLLECTIVE_COSTS:
            raise ValueError(f"ModelOptions.collectives must be one of {COLLECTIVE_COSTS}, got {self.collectives!r}")
        if self.bucketing not in BUCKETING:
            raise ValueError(f"ModelOptions.bucketing must be one of {BUCKETING}, got {self.bucketing!r}")

    @classmethod
    def paper(cls) -> "ModelOptions":
        """The model as published (Agarwal et al. 2022 Sec. 4.1 Eq. 1, App. B): Eq. 1 collectives, ``k = ceil(G/b)``, no other term."""
        return cls(collectives="eq1", bucketing="paper", incast=False)

    @classmethod
    def extended(cls) -> "ModelOptions":
        """Every term the kit fits (beyond the paper): the model ``verify`` scores best."""
        return cls(collectives="measured", bucketing="ddp", incast=True, sync_terms=True, per_tensor=False,
                   path_overhead=True, cpu_contention=True, hook_buckets=True)

    @classmethod
    def named(cls, name: str) -> "ModelOptions":
        """``"paper"`` or ``"extended"``."""
        presets = {"paper": cls.paper, "extended": cls.extended}
        if name not in presets:
            raise ValueError(f"unknown model preset {name!r}; valid: {sorted(presets)}")
        return presets[name]()


@dataclass(frozen=True)
class Hardware:
    """The cluster, as the model sees it. Any numeric field may be a numpy array (broadcast).

    Defaults are the paper's V100 setting; ``data/calibrations/paper_v100.json`` holds
    them with uncertainties (see ``data/paper/README.md`` for the alpha discussion).
    """

    bandwidth_gbps: Any = 10.0  # Agarwal et al. 2022 Sec. 3: p3.8xlarge "around 10Gbps"
    alpha_s: Any = 4e-6  # Eq. 1 latency per ring step; Sec. 2.2 + App. C, see data/paper/README.md
    gamma: Any = 1.07  # Sec. 4.1: "We observe gamma to between 1.04 to 1.1" (midpoint)
    compute_speedup: Any = 1.0  # App. D "Effect of faster compute": divides T_comp and T_encode_decode
    incast_coeff: Any = 0.0  # beyond the paper: all-gather bandwidth-term inflation (App. C names the gap)
    allreduce: str = "ring"  # "ring" (Eq. 1, the paper's choice: NCCL_TREE_THRESHOLD=0) or "tree" (Table 1)
    # beyond the paper, each used only when its ModelOptions term is on (fitted: studykit.perfmodel.fit)
    sync_delta_s: Any = 0.0  # syncSGD per iteration: slowest rank, collective launch (ModelOptions.sync_terms)
    per_bucket_s: Any = 0.0  # syncSGD per extra DDP bucket: autograd hook, bucket copies (ModelOptions.sync_terms)
    per_tensor_s: Any = 0.0  # per parameter tensor: per-tensor CPU work (ModelOptions.per_tensor)
    cpu_slowdown: Any = 1.0  # kappa: workers sharing CPU cores slow O and T_encode_decode (ModelOptions.cpu_contention)
    collective_table: Any = None  # a measured CollectiveTable of this network (ModelOptions.collectives="measured")

    def __post_init__(self):
        if self.allreduce not in ("ring", "tree"):
            raise ValueError(f"Hardware.allreduce must be 'ring' or 'tree', got {self.allreduce!r}")
        for name in ("bandwidth_gbps", "gamma", "compute_speedup", "cpu_slowdown"):
            if np.any(np.asarray(getattr(self, name), dtype=float) <= 0):
                raise ValueError(f"Hardware.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("alpha_s", "incast_coeff", "sync_delta_s", "per_bucket_s", "per_tensor_s"):
            if np.any(np.asarray(getattr(self, name), dtype=float) < 0):
                raise ValueError(f"Hardware.{name} must be >= 0, got {getattr(self, name)!r}")

    @property
    def bandwidth_bytes_s(self):
        """Bandwidth in bytes per second."""
        return col.gbps_to_bytes_s(self.bandwidth_gbps)

    @classmethod
    def from_calibration(cls, cal: Calibration, options: ModelOptions | None = None, **overrides) -> "Hardware":
        """The calibration's alpha, bandwidth, gamma (and incast and the extended terms, if fitted);
        ``overrides`` win. With ``options`` that switch the syncSGD terms on (``sync_terms`` or
        ``per_tensor``), gamma is the one fitted jointly with them (``cal.gamma_extended``) where the
        calibration has it."""
        kw: dict[str, Any] = {}
        for name in ("alpha_s", "bandwidth_gbps", "gamma", "incast_coeff", "sync_delta_s", "per_bucket_s",
                     "per_tensor_s"):
            c = getattr(cal, name, None)
            if c is not None:
                kw[name] = c.value
        if options is not None and (options.sync_terms or options.per_tensor) and cal.gamma_extended is not None:
            kw["gamma"] = cal.gamma_extended.value
        kw.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**kw)


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


def allreduce_s(nbytes, world_size, hw: Hardware, options: ModelOptions | None = None):
    """All-reduce time (s) on ``hw``: Eq. 1 ring (default) or Table 1 tree; with
    ``options.collectives == "measured"``, the measured table (:func:`collective_s`)."""
    if options is not None and options.collectives == "measured":
        return collective_s("all_reduce", nbytes, world_size, hw, options)
    fn = col.ring_allreduce_s if hw.allreduce == "ring" else col.tree_allreduce_s
    return fn(nbytes, world_size, hw.alpha_s, hw.bandwidth_bytes_s)


def _table_for(hw: Hardware, world_size, options: ModelOptions | None):
    """The measured table to use, or None (Eq. 1). Raise when a table is asked for at another p."""
    if options is None or options.collectives != "measured" or hw.collective_table is None:
        return None
    t = hw.collective_table
    if np.any(np.asarray(world_size) != t.world_size):
        raise ValueError(f"the measured collective table is for world size {t.world_size}, asked for {world_size!r}; "
                         "use ModelOptions(collectives='eq1') to extrapolate in p")
    return t


def collective_s(op: str, nbytes, world_size, hw: Hardware, options: ModelOptions | None = None):
    """One collective's time (s): ``all_reduce`` by Eq. 1 (or Table 1 tree), ``all_gather`` by App. B's
    ring all-gather (with ``hw.incast_coeff`` when ``options.incast``); or, with
    ``options.collectives == "measured"`` and a ``hw.collective_table``, read from the measured sweep
    (Eq. 1 / App. B incast-free beyond it; :func:`~studykit.perfmodel.collectives.measured_collective_s`).
    With measured collectives and no table (e.g. a world size never swept), Eq. 1 / App. B with incast."""
    opts = options or ModelOptions()
    bw = hw.bandwidth_bytes_s
    if op == "all_reduce":
        def eq1(n):
            fn = col.ring_allreduce_s if hw.allreduce == "ring" else col.tree_allreduce_s
            return fn(n, world_size, hw.alpha_s, bw)
        with_incast = eq1
    elif op == "all_gather":
        def eq1(n):
            return col.ring_allgather_s(n, world_size, hw.alpha_s, bw)

        def with_incast(n):
            return col.allgather_incast_s(n, world_size, hw.alpha_s, bw, hw.incast_coeff)
    else:
        raise ValueError(f"no cost model for collective {op!r} (all_reduce, all_gather)")
    table = _table_for(hw, world_size, opts)
    if table is not None:
        return col.measured_collective_s(op, nbytes, table, eq1)
    return with_incast(nbytes) if opts.incast else eq1(nbytes)


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
    unchanged. Returned as ``host_end_s`` (``H_k``; 0 without the chain)."""
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
    for i in range(k):
        enc = enc + e[i]
        g = f[i] * C + enc
        if chain:
            h = np.asarray(host_s[i], dtype=float)  # may be an array (e.g. a grid of CPU slowdowns)
            pre = np.maximum(float(host_ready_s[i]), H) + h / 2
            g = np.maximum(g, pre)
        F = np.maximum(g, F) + comm_s[i]
        D = np.maximum(F, D) + d[i]
        if chain:
            H = np.maximum(pre, F) + h / 2
            D = np.maximum(D, H)
        comm = comm + comm_s[i]
    busy = C + enc + sum(np.asarray(x, dtype=float) for x in d)
    total = np.maximum(busy, D)
    return {"total_s": total, "compute_s": busy, "comm_s": comm, "exposed_s": total - busy, "last_ready_s": g,
            "host_end_s": H}


Plan = tuple  # (op, numel, dtype, nbytes) per collective, in order


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


def _summary(plan) -> PlanSummary:
    """A :class:`PlanSummary` of a plan given as ``(op, numel, dtype, nbytes)`` tuples."""
    ar = [c for c in plan if c[0] == "all_reduce"]
    ag = [c for c in plan if c[0] == "all_gather"]
    return PlanSummary(len(ar), sum(c[3] for c in ar), len(ag), sum(c[3] for c in ag),
                       tuple({"op": c[0], "numel": c[1], "dtype": c[2], "nbytes": c[3]} for c in plan))


def _checked(compressor, plan) -> PlanSummary:
    other = sorted({c[0] for c in plan} - {"all_reduce", "all_gather"})
    if other:
        name = compressor.name if isinstance(compressor, compressors.Compressor) else compressor
        raise ValueError(f"compressor {name!r} issues collectives {other} the model has no cost for")
    return _summary(plan)


def _law(compressor, params, shapes, shapes_key):
    from studykit.perfmodel import payload

    skey = shapes_key if shapes_key is not None else tuple(map(tuple, shapes))
    return payload.law(compressor, params, shapes, (_plan_key(compressor, params), skey))


def plan_summary(compressor, params: dict | None, shapes: Sequence, world_size: int,
                 shapes_key: Any = None) -> PlanSummary:
    """Summarize ``compressor.plan(shapes, world_size)`` (derived once per compressor, params and shapes:
    :class:`~studykit.perfmodel.payload.PayloadLaw`).

    The plan for a given ``p`` is fixed, and each collective's cost is affine in its
    bytes, so count and total bytes per kind are all the model needs.
    """
    plan = _law(compressor, params, shapes, shapes_key).plans([int(world_size)])[int(world_size)]
    return _checked(compressor, plan)


def plan_summaries(compressor, params: dict | None, shapes: Sequence, world_sizes,
                   shapes_key: Any = None) -> dict[int, PlanSummary]:
    """:func:`plan_summary` for every distinct world size of ``world_sizes`` (one ``plan()`` per step
    of the payload in ``p``, not one per ``p``: :class:`~studykit.perfmodel.payload.PayloadLaw`)."""
    plans = _law(compressor, params, shapes, shapes_key).plans(world_sizes)
    done: dict[Plan, PlanSummary] = {}
    out = {}
    for q, pl in plans.items():
        if pl not in done:
            done[pl] = _checked(compressor, pl)
        out[q] = done[pl]
    return out


#: the kit's inf/NaN flag (:class:`studykit.ddp.NonFinite`) as a plan entry: 4 bytes whatever the compression
FINITE_FLAG = {"op": "all_reduce", "numel": 1, "dtype": "float32", "nbytes": 4, "scaled": False}


def guard_collectives(compressor, options: "ModelOptions") -> tuple:
    """What the kit's hook and post-backward reducer add to one protocol run of ``compressor`` (a name or an
    instance) under ``options``: :data:`FINITE_FLAG` where ``options.finite_flag`` is set and the compressor may drop
    inf/NaN (``keeps_nonfinite`` False), else nothing."""
    if not options.finite_flag or compressors.metadata(compressor).keeps_nonfinite:
        return ()
    return (FINITE_FLAG,)


def _nbytes(c: dict, bytes_scale):
    """A plan entry's bytes, times ``bytes_scale`` unless the entry is not compressed payload (``scaled`` False)."""
    return float(c["nbytes"]) * (bytes_scale if c.get("scaled", True) else 1.0)


def _per_p(compressor, params, workload: Workload, world_size):
    """Vectorized plan summary: arrays (shaped like ``world_size``) of counts and bytes per kind."""
    p = np.asarray(world_size)
    if np.any(p != np.round(p)) or np.any(p < 1):
        raise ValueError(f"world_size must be positive integers, got {world_size!r}")
    uniq, inv = np.unique(p.astype(np.int64), return_inverse=True)
    skey = workload.model if workload.param_shapes is None else workload.param_shapes
    by_p = plan_summaries(compressor, params, workload.shapes(), uniq.tolist(), shapes_key=skey)
    sums = [by_p[int(q)] for q in uniq]
    fields = np.array([[s.allreduce_count, s.allreduce_bytes, s.allgather_count, s.allgather_bytes]
                       for s in sums], dtype=float)
    per = fields[inv.reshape(-1)].reshape(*p.shape, 4)
    return per[..., 0], per[..., 1], per[..., 2], per[..., 3], sums


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


def hook_timeline_s(t_comp_s, t_encode_decode_s, workload: Workload, compressor, params, world_size: int,
                    hw: Hardware, options: ModelOptions, bytes_scale=1.0, bucket_encode_decode_s=None,
                    bucket_host_s=None) -> dict:
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
      chain of :func:`bucket_timeline_s`.

    Same keys as :func:`compressed_s`, plus ``k``, ``exposed_s`` (the part not hidden under the
    backward pass) and ``host_end_s``."""
    groups = workload.ddp_bucket_shapes()
    sizes = np.asarray([4.0 * sum(math.prod(s) for s in g) for g in groups])
    fr = workload.ready_fractions("ddp")
    if len(fr) != len(groups):
        fr = bucket_ready_fractions(sizes)
    t_ar, t_ag, per = 0.0, 0.0, []
    for g in groups:
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
    half = [ed * (s / share.sum()) / 2.0 for s in share]
    host_ready, host = None, None
    if bucket_host_s is not None:
        if workload.bucket_ready_host_s is None:
            raise ValueError("bucket_host_s needs the workload's bucket_ready_host_s (when the host reaches each hook)")
        if not (len(bucket_host_s) == len(workload.bucket_ready_host_s) == len(groups)):
            raise ValueError(f"the host chain needs one host time and one host ready time per DDP bucket "
                             f"({len(groups)}), got {len(bucket_host_s)} and {len(workload.bucket_ready_host_s)}")
        host_ready, host = workload.bucket_ready_host_s, bucket_host_s
    comp = np.asarray(t_comp_s, dtype=float) / hw.compute_speedup
    gamma = hw.gamma if options.hook_gamma else 1.0
    tl = bucket_timeline_s(gamma * comp, fr, per, half, half, host_ready, host)
    z = 0 * tl["total_s"]
    return {"compute_s": gamma * comp + z, "encode_decode_s": ed + z, "allreduce_s": np.asarray(t_ar) + z,
            "allgather_s": np.asarray(t_ag) + z, "comm_s": tl["comm_s"] + z, "exposed_s": tl["exposed_s"] + z,
            "total_s": tl["total_s"], "k": np.asarray(float(len(groups))), "host_end_s": tl["host_end_s"] + z}


def iteration_s(overhead_s, t_obs_s, hw: Hardware, options: ModelOptions | None = None, path_overhead_s=0.0):
    """The iteration time a user measures (s): ``O [x kappa] + T_obs [+ path overhead]``.

    ``O`` (forward, loss, optimizer step, DDP bookkeeping) is what the paper's ``T_obs`` leaves out
    (Figs. 6-11 time backward + synchronization only). ``kappa = hw.cpu_slowdown`` with
    ``options.cpu_contention``; ``path_overhead_s`` with ``options.path_overhead`` (both beyond the paper).
    """
    opts = options or ModelOptions()
    k = hw.cpu_slowdown if opts.cpu_contention else 1.0
    extra = path_overhead_s if opts.path_overhead else 0.0
    return np.asarray(overhead_s, dtype=float) * k + np.asarray(t_obs_s, dtype=float) + extra


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


#: how a compressor runs in DDP (:func:`predict`'s ``mode``)
MODES = ("post", "hook", "hook_blocking")


def predict(workload: Workload, hardware: Hardware, world_size, compressor=None, params: dict | None = None, *,
            calibration: Calibration | None = None, t_encode_decode_s=None, bytes_scale=1.0,
            encode_decode_scale=1.0, options: ModelOptions | None = None, mode: str = "post",
            sync_bytes_scale: float = 1.0, bucket_encode_decode_s=None, bucket_host_s=None) -> Prediction:
    """Predict syncSGD (Sec. 4.1) and, with ``compressor``, compressed training (App. B).

    ``world_size`` and any :class:`Hardware` field may be arrays; the result
    broadcasts them (e.g. ``bandwidth_gbps=bw[:, None]``, ``world_size=p[None, :]``).
    ``compressor`` is a name from :func:`studykit.compressors.available` (with
    ``params``) or an instance; its communication term comes from its ``plan()``.
    ``T_comp`` comes from the workload or the calibration; ``T_encode_decode`` from
    ``t_encode_decode_s`` or the calibration (``"none"`` encodes nothing: 0 s).
    ``bytes_scale`` / ``encode_decode_scale`` multiply the compressor's bytes and
    encode/decode time (App. D trade-off, Fig. 21). ``sync_bytes_scale`` multiplies what syncSGD
    all-reduces, bucket by bucket (0.5: DDP's fp16 / bf16 compress hook, which sends each bucket in
    half precision and keeps the overlap of Sec. 4.1; the casts are not in ``sync``).
    ``bucket_encode_decode_s`` / ``bucket_host_s`` (``mode="hook"`` with the timeline overlap): each DDP
    bucket's device and host time of the protocol (``profile --bucket-times``), for
    :func:`hook_timeline_s`'s per-bucket shares and host chain (the host times, like ``T_encode_decode``, times
    ``hardware.cpu_slowdown`` under ``options.cpu_contention``).

    ``options`` (default :class:`ModelOptions`: the paper's model plus ``hardware.incast_coeff``)
    chooses the terms; ``mode`` is how the compressor runs (``"post"``: after the backward pass,
    App. B; ``"hook"``: as a DDP communication hook, per bucket with ``options.hook_buckets``, overlapped
    with the backward pass with ``options.overlap == "timeline"``; ``"hook_blocking"``: a hook that runs
    each bucket's protocol inside DDP's callback, so the backward pass waits for it: App. B per DDP
    bucket, ``T_comp + T_encode_decode + sum over buckets of their collectives``, whatever the overlap).
    Every dict of the result holds ``total_s`` (``T_obs``) and ``iteration_s`` (:func:`iteration_s`,
    with the workload's or calibration's non-backward overhead ``O``).
    """
    opts = options or ModelOptions()
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    p = np.asarray(world_size)
    if p.size == 0 or np.any(p != np.round(p)) or np.any(p < 1):
        raise ValueError(f"world_size must be positive integers, got {world_size!r}")
    t_comp, how_comp = workload.resolve_t_comp(calibration)
    overhead, how_o = workload.resolve_overhead(calibration)
    notes = {"t_comp_s": t_comp, "t_comp": how_comp, "overhead_s": overhead, "overhead": how_o}
    if not (np.isfinite(sync_bytes_scale) and sync_bytes_scale > 0):
        raise ValueError(f"sync_bytes_scale must be > 0, got {sync_bytes_scale!r}")
    sb = float(sync_bytes_scale)
    total_bytes = workload.gradient_bytes * sb
    if opts.overlap == "timeline":
        sync = syncsgd_s(t_comp, total_bytes, p, hardware, options=opts, n_tensors=workload.n_tensors,
                         bucket_sizes=[b * sb for b in workload.bucket_sizes(opts.bucketing)],
                         ready_fractions=workload.ready_fractions(opts.bucketing))
    elif opts.collectives == "measured" and hardware.collective_table is not None:
        sync = syncsgd_s(t_comp, total_bytes, p, hardware, options=opts, n_tensors=workload.n_tensors,
                         bucket_sizes=[b * sb for b in workload.bucket_sizes(opts.bucketing)])
    else:
        k, b, last = workload.buckets(opts.bucketing)
        sync = syncsgd_s(t_comp, total_bytes, p, hardware, workload.bucket_bytes, split=(k, b * sb, last * sb),
                         options=opts, n_tensors=workload.n_tensors)
    sync["iteration_s"] = iteration_s(overhead, sync["total_s"], hardware, opts)
    notes["bucketing"] = opts.bucketing
    notes["options"] = {k: getattr(opts, k) for k in opts.__dataclass_fields__}
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
    if opts.cpu_contention:
        t_ed = t_ed * hardware.cpu_slowdown
    notes["t_encode_decode_s"] = float(np.max(t_ed))
    if (bucket_encode_decode_s is not None or bucket_host_s is not None) and not (
            mode == "hook" and opts.overlap == "timeline"):
        raise ValueError("bucket_encode_decode_s and bucket_host_s are inputs of the hook timeline: they need "
                         f"mode='hook' and ModelOptions.overlap='timeline', got mode={mode!r}, overlap={opts.overlap!r}")
    per_bucket = mode == "hook_blocking" or (mode == "hook" and (opts.hook_buckets or opts.overlap == "timeline"))
    measured = opts.collectives == "measured" and hardware.collective_table is not None
    if mode == "hook" and opts.overlap == "timeline":
        if p.size != 1:
            raise ValueError("the per-bucket timeline needs one world size per call")
        q = int(p.reshape(-1)[0])
        host_s = bucket_host_s
        if host_s is not None and opts.cpu_contention:  # the hook thread's work slows as T_encode_decode does
            host_s = [np.asarray(h, dtype=float) * hardware.cpu_slowdown for h in host_s]
        comp = hook_timeline_s(t_comp, t_ed, workload, compressor, params, q, hardware, opts, bytes_scale,
                               bucket_encode_decode_s, host_s)
        notes["compressed_plans"] = "per DDP bucket, timeline"
    elif per_bucket or measured:
        if p.size != 1:
            raise ValueError("measured collectives and per-bucket hook plans need one world size per call")
        q = int(p.reshape(-1)[0])
        groups = workload.ddp_bucket_shapes() if per_bucket else [list(workload.shapes())]
        guard = guard_collectives(compressor, opts)
        plans = [plan_summary(compressor, params, g, q).collectives + guard for g in groups]
        comp = compressed_plan_s(t_comp, t_ed, plans, q, hardware, opts, bytes_scale)
        comp["k"] = np.asarray(float(len(groups)))
        notes["compressed_plans"] = "per DDP bucket" if per_bucket else "whole gradient"
    else:
        guard = guard_collectives(compressor, opts)  # its 4 bytes scale with the payload here: a negligible 4 x scale
        comp = compressed_s(t_comp, t_ed, ar_n + len(guard), ar_b + sum(c["nbytes"] for c in guard), ag_n, ag_b, p,
                            hardware, bytes_scale, incast=opts.incast)
    path = workload.path_overhead_s
    if opts.path_overhead and path is None and calibration is not None and workload.model is not None:
        found = calibration.path_overhead_lookup(workload.model, workload.batch_size, mode)
        path = None if found is None else found[0]
        notes["path_overhead"] = "none fitted" if found is None else found[1]
    comp["iteration_s"] = iteration_s(overhead, comp["total_s"], hardware, opts, path or 0.0)
    notes["path_overhead_s"] = float(path or 0.0) if opts.path_overhead else 0.0
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
                   slack=0.0, include_last_bucket: bool = False, options: ModelOptions | None = None):
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
    k, b, last = workload.buckets((options or ModelOptions()).bucketing)
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


def parameter_server_plan_s(plan: Sequence[dict], world_size, hw: Hardware):
    """A compressor's protocol routed through one parameter server (s): Agarwal et al. 2022 Table 1 row
    "Parameter Server" (Sec. 2.2), the third scheme of Sec. 3's Fig. 4.

    Every collective of ``plan`` (dicts with ``nbytes`` per worker, as :func:`plan_summary` gives) becomes
    the server receiving the ``p-1`` other workers' payloads, aggregating them and sending the aggregate
    back: ``2 alpha + 2 (p-1) b / BW`` per collective (:func:`~studykit.perfmodel.collectives.parameter_server_s`).
    The aggregate is assumed as large as one payload: exact for sums and SignSGD's majority vote, a lower
    bound for sparse payloads (TopK's union grows with p). Broadcasts over ``world_size`` and ``hw`` arrays.
    """
    out = 0.0
    for c in plan:
        out = out + col.parameter_server_s(float(c["nbytes"]), world_size, hw.alpha_s, hw.bandwidth_bytes_s)
    return np.asarray(out, dtype=float)
