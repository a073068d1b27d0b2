"""``python -m studykit verify``: score the performance model against measured iterations.

Agarwal et al. 2022 checks its model by predicting iteration times and comparing them with
runs (Sec. 4.1 "Verifying Performance Model", Fig. 11: median 1.8 %, max 13.7 % for
syncSGD; App. C, Fig. 17: up to 9.1 % for all-reduce schemes and 19.1 % for
SignSGD's all-gather; App. D, Fig. 19: tc-throttled bandwidths). This package does the
same from the kit's measurement records (:mod:`studykit.measure`), one *platform*
(a records folder: ``data/measurements/gpu``, ``data/measurements/throttle``, ...) at a time.

What is predicted
-----------------
A DDP record times a whole iteration: forward + backward + synchronization +
optimizer step. The model's ``T_obs`` covers backward + synchronization only, so::

    predicted iteration = O + T_obs

* ``O``, the non-backward part (forward, loss, optimizer step, DDP's own
  bookkeeping), is **measured at world size 1**: the platform's DDP record of the
  same model and batch at world size 1 minus its single-device backward time
  ``T_comp`` (``O = T_ddp(p=1) - T_comp``). Those world-size-1 records move no
  bytes and are never scored. Without one, ``O`` falls back to the forward time
  from ``tcomp`` records (``T_fwd_bwd - T_comp``; the step is then missing).
* syncSGD (Sec. 4.1)::

      T_obs = max(gamma T_comp, (k-1) T_comm(b)) + T_comm(b_last)

* compression after the backward pass (App. B, the paper's choice; ``mode`` post)::

      T_obs = T_comp + T_encode_decode + sum_c T_comm(c)

  with the collectives ``c`` of the compressor's real protocol (its ``plan()``).
* compression as a DDP hook (``mode`` hook, overlapped): the paper gives no model
  (App. A only shows it is slower). The ``paper`` variant applies App. B's formula
  anyway (compression blocks the backward pass, App. A Fig. 13).

Where each input comes from (App. C)
------------------------------------
* ``T_comp``: ``tcomp`` records, phase ``bwd`` (backward alone, one device);
* ``alpha``, ``BW``: Eq. 1 fitted to the ``sweep`` all-reduce records of the same
  network (:func:`studykit.perfmodel.fit.fit_alpha_bw`); throttled records carry
  their rate in ``network``, and each (rate, workers) is its own network;
* ``T_encode_decode``: ``profile`` records, phase ``reduce`` (encode + decode incl.
  flattening), at the simulated world size matching the run when profiled;
* ``gamma`` (the only constant fitted on DDP iterations): **leave-one-out**. For
  each scored record, gamma is fitted on syncSGD records of the *other* holdout
  groups only (``--holdout``: other models by default; other networks when the
  platform has one model), by App. C's rule: over records where the backward pass
  bounds the overlap, ``gamma_i = (T - O - T_comm(b_last)) / T_comp``; gamma is
  their median (1.0 when no calibration record is compute-bound, said in
  ``calibrated_on``). Every output row names what it was calibrated on, and
  :func:`check_disjoint` asserts that no row is scored on a point it was fitted to.

Two variants
------------
``paper``: exactly the above (Eq. 1 for every collective, Sec. 4.1's bucketing
``k = ceil(G / b)``, no incast term).

``extended`` (beyond the paper; each term named where the paper's model misses):

* **DDP's real buckets** (:func:`studykit.perfmodel.model.ddp_buckets`, the model's
  ``Workload(bucketing="ddp")``): parameters in reverse order, a bucket closes once it
  reaches the cap, the first bucket capped at 1 MiB under the default 25 MB
  (PyTorch's ``first_bucket_bytes``). A single huge tensor (VGG19's 411 MB fc1,
  a 64 KB layer of ``mlp_small``, the 4 MiB one of ``mlp_large``) is one bucket however
  small the cap;
* **measured collectives**: ``T_comm`` interpolated (log-log) in the same network's
  sweep (all-reduce for all-reduce, all-gather for all-gather) instead of Eq. 1.
  This carries small-message latency (gloo's per-call cost is not Eq. 1's
  ``2 alpha (p-1)``) and all-gather incast/inefficiency into the prediction;
  Eq. 1 with the fitted constants beyond the swept sizes;
* **compression-path overhead**: the post-backward and hook paths add framework
  work the profile does not time (copying back decoded gradients, Python per
  bucket, DDP hook futures). It is calibrated on the identity compressor
  ``none`` of the same model and batch (measured minus predicted), on *other*
  networks when the platform has several, and scored on every other compressor;
  the ``none`` records used are named in ``calibrated_on`` and not scored against it;
* **synchronization terms** in syncSGD: ``T_obs = max(gamma T_comp, overlapped comm) +
  T_comm(b_last) + delta + c (k - 1)``, with ``delta`` (per iteration: the slowest rank sets the
  iteration, launch costs) and ``c`` (per extra DDP bucket: autograd hook, bucket copies, future)
  fitted together with gamma on the same leave-one-out calibration records
  (:func:`fit_gamma_loo`); the output's ``delta_ms`` is ``delta + c (k - 1)``;
* **CPU contention**: ``T_comp`` from ``tcomp`` records of w processes timing at once (their
  ``network.workers`` = w) for a w-worker run, and the same slowdown applied to ``O`` and
  ``T_encode_decode`` (see :class:`~studykit.perfmodel.fit.RecordInputs`);
* hook mode: the protocol's collectives are issued per DDP bucket (latency per
  bucket), from the bucket's own parameter shapes.

Repeated records of one configuration (several passes over the same rates) are pooled: the
minimum of ``ms_min``, the median of any other statistic (:func:`_pool`,
:func:`~studykit.perfmodel.fit.pool_stat`).

The package holds one module per job: :mod:`.platform` (a records folder read into a :class:`Platform`),
:mod:`.scoring` (one record through the model, leave-one-out calibration, :func:`verify_platform`),
:mod:`.tables` (summaries and Markdown tables of the outputs), :mod:`.files` (the gzipped predictions file,
``predictions.csv.gz``: :func:`read_predictions`) and :mod:`.cli` (:func:`verify` over platforms, the command's
parser and :func:`main`).
"""
# every name that other modules, tests and notebooks read from here (a few underscore helpers included)
from studykit.perfmodel.verify.cli import build_parser, default_sources, main, verify
from studykit.perfmodel.verify.files import PREDICTIONS, read_predictions, write_predictions
from studykit.perfmodel.verify.platform import STATS, Platform, load_platform
from studykit.perfmodel.verify.scoring import (CALIBRATE_MAX_P, DDP_DEFAULT_BUCKET_MB, ENCODE_DECODE_SOURCES,
                                               GAMMA_SOURCES, GROUPS, HOOK_GAMMA_SOURCES, MIB,
                                               PATH_OVERHEAD_SOURCES, REQUIRED_COLUMNS, VARIANTS, WIRE_TOLERANCE,
                                               _bucket_bytes, _ed_scales, _encode_decode, _extended_compressed,
                                               _predict_record, check_disjoint, check_world_size_holdout,
                                               fit_gamma_loo, leave_one_out, paper_buckets,
                                               rel_error, verify_platform)
from studykit.perfmodel.verify.tables import (SMALL_BATCH, TARGETS, by_batch_size, coalesce_picks,
                                              coalesce_picks_markdown, implied_encode_decode,
                                              implied_encode_decode_markdown, noise_floor, repeatability,
                                              small_batch_table, summarize, summary_markdown)

__all__ = ["REQUIRED_COLUMNS", "VARIANTS", "TARGETS", "rel_error", "summarize", "summary_markdown", "by_batch_size",
           "implied_encode_decode", "implied_encode_decode_markdown", "coalesce_picks", "coalesce_picks_markdown",
           "small_batch_table", "SMALL_BATCH", "load_platform",
           "paper_buckets", "noise_floor", "repeatability", "leave_one_out",
           "check_disjoint", "check_world_size_holdout", "fit_gamma_loo", "verify_platform", "verify", "default_sources", "main",
           "PREDICTIONS", "read_predictions", "write_predictions"]
