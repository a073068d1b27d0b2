"""What the model includes and the cluster it runs on: :class:`ModelOptions` (which terms) and
:class:`Hardware` (their constants), with DDP's bucket constants and the options' valid values."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from studykit.perfmodel import collectives as col
from studykit.perfmodel.calibration import Calibration

__all__ = ["MIB", "DEFAULT_BUCKET_BYTES", "DDP_FIRST_BUCKET_BYTES", "BUCKETING", "COLLECTIVE_COSTS", "OVERLAP",
           "ModelOptions", "Hardware"]


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
