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

The modules, in the order the model is built:

* :mod:`~studykit.perfmodel.model.options`: :class:`ModelOptions` (which terms), :class:`Hardware` (their
  constants) and DDP's bucket constants;
* :mod:`~studykit.perfmodel.model.bucketing`: Sec. 4.1's buckets, DDP's real assignment, bucket readiness;
* :mod:`~studykit.perfmodel.model.workload`: :class:`Workload`, what is trained;
* :mod:`~studykit.perfmodel.model.costs`: one collective's cost (Eq. 1, App. B, measured) and the parameter
  server (Table 1);
* :mod:`~studykit.perfmodel.model.plans`: a compressor's ``plan()`` summarized, the kit's inf/NaN flag;
* :mod:`~studykit.perfmodel.model.timeline`: the per-bucket timeline and a compressor run as a DDP hook on it;
* :mod:`~studykit.perfmodel.model.syncsgd`: syncSGD with overlap (Sec. 4.1);
* :mod:`~studykit.perfmodel.model.compressed`: compressed training after the backward pass (App. B);
* :mod:`~studykit.perfmodel.model.prediction`: :func:`predict`, :class:`Prediction`, speed-ups, the required
  ratio and the crossover bandwidth.

Every public name is importable from this package (``from studykit.perfmodel.model import predict``).
"""
# also exported outside __all__ (callers use them): COLLECTIVE_COSTS, MODES, Plan, PlanSummary, compressed_plan_s,
# iteration_s, sync_terms_s
from studykit.perfmodel.calibration import Calibration, Constant, TComp, TEncodeDecode
from studykit.perfmodel.model.bucketing import (bucket_ready_fractions, buckets, ddp_bucket_sizes, ddp_buckets,
                                                paper_bucket_sizes)
from studykit.perfmodel.model.compressed import compressed_plan_s, compressed_s  # noqa: F401
from studykit.perfmodel.model.costs import allreduce_s, collective_s, parameter_server_plan_s
from studykit.perfmodel.model.options import (BUCKETING, COLLECTIVE_COSTS, DDP_FIRST_BUCKET_BYTES,  # noqa: F401
                                              DEFAULT_BUCKET_BYTES, MIB, OVERLAP, Hardware, ModelOptions)
from studykit.perfmodel.model.plans import (FINITE_FLAG, Plan, PlanSummary, guard_collectives,  # noqa: F401
                                            plan_summaries, plan_summary)
from studykit.perfmodel.model.prediction import (MODES, Prediction, crossover_bandwidth_gbps,  # noqa: F401
                                                 iteration_s, predict, required_ratio, speedup_over_sync)
from studykit.perfmodel.model.syncsgd import sync_terms_s, syncsgd_s  # noqa: F401
from studykit.perfmodel.model.timeline import bucket_timeline_s, hook_timeline_s
from studykit.perfmodel.model.workload import Workload

__all__ = [
    "MIB", "DEFAULT_BUCKET_BYTES", "ModelOptions", "Hardware", "Workload", "Calibration", "Constant", "TComp", "TEncodeDecode",
    "Prediction", "BUCKETING", "DDP_FIRST_BUCKET_BYTES", "buckets", "paper_bucket_sizes", "ddp_buckets",
    "ddp_bucket_sizes", "allreduce_s", "collective_s", "syncsgd_s", "compressed_s", "plan_summary", "predict",
    "guard_collectives", "FINITE_FLAG",
    "speedup_over_sync", "required_ratio", "plan_summaries", "crossover_bandwidth_gbps", "OVERLAP", "bucket_ready_fractions",
    "bucket_timeline_s", "hook_timeline_s", "parameter_server_plan_s",
]
