"""The performance model of Agarwal et al. 2022 (MLSys 2022, https://arxiv.org/abs/2103.00543), vectorized and calibratable.

* :mod:`~studykit.perfmodel.collectives`: Table 1, Eq. 1 and App. B collective costs;
* :mod:`~studykit.perfmodel.model`: syncSGD with overlap (Sec. 4.1), compressed training
  (App. B) with the communication term from each compressor's ``plan()``;
* :mod:`~studykit.perfmodel.calibration`: the constants (alpha, BW, gamma, T_comp,
  T_encode_decode) with uncertainty and source, as JSON;
* :mod:`~studykit.perfmodel.fit`: calibrations from measurement records;
* :mod:`~studykit.perfmodel.paper`: the paper's published inputs and claims (``data/paper/``);
* :mod:`~studykit.perfmodel.whatif`: the paper's what-if analyses (Figs. 3, 12, 18-21);
* :mod:`~studykit.perfmodel.verify`: ``python -m studykit verify``, a scorer that calls :func:`predict`;
* :mod:`~studykit.perfmodel.cli`: ``python -m studykit predict`` and ``fit``.
"""
from studykit.perfmodel.calibration import Calibration, Constant, TComp, TEncodeDecode
from studykit.perfmodel.model import (DEFAULT_BUCKET_BYTES, MIB, Hardware, ModelOptions, Prediction, Workload,
                                      crossover_bandwidth_gbps, predict, required_ratio, speedup_over_sync)

__all__ = ["Calibration", "Constant", "TComp", "TEncodeDecode", "Hardware", "ModelOptions", "Workload", "Prediction", "predict",
           "required_ratio", "speedup_over_sync", "crossover_bandwidth_gbps", "DEFAULT_BUCKET_BYTES", "MIB"]
