"""Fit a calibration (alpha, BW, gamma, T_comp, T_encode_decode) from measurement records.

Agarwal et al. 2022, App. C describes how the paper obtains each constant; the kit fits them
from timing records (JSON Lines, :mod:`studykit.measure.records`) instead:

* **alpha, BW** (Eq. 1): weighted least squares of all-reduce times on
  ``T = 2 alpha (p-1) + 2 b (p-1) / (p BW)`` across message sizes ``b`` and world
  sizes ``p`` (relative errors: weights ``1/T``; non-negative coefficients).
  Per world size, ``T = a(p) + b / BW_eff(p)`` is fitted too (the plot's lines).
* **incast** (beyond the paper): all-gather times against App. B's ring all-gather
  with the fitted alpha and BW: ``T - (p-1) alpha = (1 + c) (p-1) b / BW``.
* **gamma** (Sec. 4.1): measured as App. C measures it where the records hold DDP's bucket-ready
  stamps (``ddp --bucket-times``): the last bucket's device ready time over ``T_comp``
  (:func:`fit_gamma_from_stamps`). Otherwise from DDP iteration times vs ``T_comp``, only for
  records whose predicted communication is at most :data:`COMPUTE_BOUND_COMM_FRACTION` of
  ``T_comp``: ``gamma = (T_ddp - overhead - T_comm(b_last)) / T_comp``. Where neither
  determines it, gamma is 1 with a note.
* **T_comp**, **T_encode_decode**: profiles (median), per model and batch size, per
  compressor, parameters and model (linear in world size when profiled at several).

Every constant carries a bootstrap interval (2.5-97.5 %; resampling records, or a
single record's raw iteration times) and an R^2. Data that cannot determine a
constant raise :class:`ValueError` naming what is missing. Constants a prediction should
not trust (a bandwidth above the link's rate, a low R^2, a wide interval) are named in the
calibration's ``warnings``. A calibration can be composed: the single-device constants from
one set of records (one GPU), the network's from another (a sweep on the cluster).

Records may use the measurement module's schema (``kind`` = sweep / profile / tcomp
/ ddp with ``op`` / ``phase`` / ``mode``, ``status``) or the short kinds
``allreduce``, ``allgather``, ``ps``, ``encode_decode``, ``tcomp``, ``ddp``;
:func:`normalize` maps both onto the short kinds.

The package holds one module per job: :mod:`.records` (loading, canonical kinds), :mod:`.network` (alpha, BW,
incast, probes, :class:`Network`), :mod:`.compute` (``T_comp``, ``T_encode_decode``, the overhead ``O``),
:mod:`.gamma` (gamma and the syncSGD terms), :mod:`.inputs` (the extended model's :class:`RecordInputs` and
fits), :mod:`.calibration` (:func:`fit_calibration`, its composition, warnings and provenance) and :mod:`.report`
(what ``python -m studykit fit`` prints about it).
"""
from studykit.perfmodel.fit.calibration import (BANDWIDTH_TOLERANCE, COMPUTE_KINDS, MAX_INTERVAL_RATIO, MIN_R2,
                                                bandwidth_warnings, check_one_machine, compute_side, default_records,
                                                fit_calibration, quality_warnings)
from studykit.perfmodel.fit.compute import fit_encode_decode, fit_overhead, fit_t_comp
from studykit.perfmodel.fit.gamma import (COMPUTE_BOUND_COMM_FRACTION, SYNC_CONSTANTS, GammaUndetermined, fit_gamma,
                                          fit_gamma_from_stamps, fit_sync_calibration, sync_rows)
from studykit.perfmodel.fit.inputs import (GAMMA_GRID, GAMMA_MARGIN, GAMMA_MIN_SENSITIVITY, PER_TENSOR_MIN_COUNTS,
                                           RecordInputs, SyncTerms, fit_path_overhead, fit_path_overheads,
                                           fit_sync_terms, fit_sync_terms_curve)
from studykit.perfmodel.fit.network import (NETWORK_SOURCES, PROBE_KINDS, AlphaBWFit, Network,
                                            eq1_bandwidth_from_busbw, fit_alpha_bw, fit_incast, fit_network,
                                            fit_network_from_probe, network_label, network_of, parse_network,
                                            select_network)
from studykit.perfmodel.fit.records import (KINDS, STATS, UNPRICED_DDP_FIELDS, load_frame, normalize, pool_stat,
                                            unpriced_ddp)
from studykit.perfmodel.model import Hardware  # re-exported: callers reach it as fit.Hardware

__all__ = ["load_frame", "normalize", "AlphaBWFit", "fit_alpha_bw", "fit_incast", "fit_gamma", "fit_t_comp",
           "fit_encode_decode", "fit_calibration", "KINDS", "pool_stat", "network_of", "network_label", "Network",
           "fit_network", "RecordInputs", "SyncTerms", "fit_sync_terms", "fit_path_overhead", "fit_path_overheads",
           "fit_overhead",
           "select_network", "parse_network", "fit_sync_calibration", "sync_rows", "NETWORK_SOURCES", "GAMMA_GRID", "fit_sync_terms_curve", "fit_network_from_probe", "eq1_bandwidth_from_busbw",
           "COMPUTE_BOUND_COMM_FRACTION", "GammaUndetermined", "fit_gamma_from_stamps", "COMPUTE_KINDS", "compute_side",
           "check_one_machine", "bandwidth_warnings", "quality_warnings", "PROBE_KINDS"]
