"""Which way of synchronizing gradients is fastest here? syncSGD, the fp16 baseline and every compressor,
ranked by predicted iteration time, with a verdict in words.

One call of :func:`advise` answers it for a grid of world sizes and bandwidths, from a calibration (the
user's, or the paper's V100 inputs: Agarwal et al. 2022, https://arxiv.org/abs/2103.00543);
:func:`answer` (``studykit.advise``) is the same call for a model name, spec or live module:

* every candidate is priced by :func:`studykit.perfmodel.model.predict` (the compressors' traffic from
  their ``plan()``, derived once per compressor: :mod:`~studykit.perfmodel.payload`): syncSGD (Sec. 4.1),
  the fp16 baseline (DDP's fp16 compress hook: Sec. 4.1 with every bucket in half precision, plus the
  calibration's fp16 cast time when it has one) and each registered compressor with its main parameter
  swept (:data:`MAIN_PARAMETER`), compression after the backward pass (App. B) or, with ``mode="hook"``,
  as a DDP hook (:func:`hook_options`; fp16 and bf16 hooks priced as the fp16 baseline in their dtype);
* the interval of each time comes from the calibration's intervals (bootstrap intervals of a fitted
  calibration, stated ranges of the paper's): the time is monotone in every constant (more latency,
  less bandwidth, larger gamma, T_comp, T_encode_decode, overhead: never faster), so evaluating the
  model at the corner where every constant is at its cheap end, and at the one where every constant
  is at its dear end, bounds it. It is an envelope, wider than a joint bootstrap interval;
  constants without an interval count as exact (named in :attr:`Advice.exact_constants`);
* two candidates are *within the model's error* when their intervals, each widened by the model's
  median error for its kind (the committed ``data/verification/summary.csv``; for compressors priced as
  hooks, the largest median error of the hook campaigns in ``data/verification/hook_runner/``:
  :func:`hook_model_error`; or ``model_error``), overlap: the model cannot tell them apart;
* the verdict (:meth:`Advice.verdict`): the fastest compressor that beats the better baseline beyond
  the model's error, its speed-ups over both baselines and the bandwidth above which it stops paying
  (:meth:`Advice.crossover_gbps`); or, when none does, which baseline to use;
* accuracy evidence: whether ``data/training/`` holds a time-to-accuracy run of the candidate
  (same compressor and parameters), only of other parameters, or none (:func:`accuracy_evidence`).
  Those runs are on the kit's small tasks (MNIST-1D, a synthetic set), not on the model advised on.

The modules, in the order the answer is built:

* :mod:`~studykit.perfmodel.advise.candidates`: what is ranked (:func:`candidates`, :class:`Candidate`)
  and the names shared by the rest (:class:`AdviseError`, the baselines' labels, :data:`MODE_WORDS`);
* :mod:`~studykit.perfmodel.advise.evidence`: accuracy evidence from ``data/training/`` and the model's
  error from ``verify``'s summary;
* :mod:`~studykit.perfmodel.advise.inputs`: the calibration's constants at both ends of their intervals,
  the DDP-hook terms, the bits a compressor puts on the link;
* :mod:`~studykit.perfmodel.advise.pricing`: :func:`advise`, every candidate priced over the grid;
* :mod:`~studykit.perfmodel.advise.verdicts`: :class:`Advice`, the result: rankings, crossovers, verdicts,
  tidy views;
* :mod:`~studykit.perfmodel.advise.text`: what ``python -m studykit advise`` prints;
* :mod:`~studykit.perfmodel.advise.entry`: :func:`answer`, the call behind ``studykit.advise``.

Every public name is importable from this package (``from studykit.perfmodel.advise import advise``).
"""
# outside __all__ but used by callers: the kit's folders (advise.paths), the baselines' labels, _main_parameter
from studykit import paths  # noqa: F401
from studykit.perfmodel.advise.candidates import FP16, SYNC, _main_parameter  # noqa: F401
from studykit.perfmodel.advise.candidates import MAIN_PARAMETER, MODE_WORDS, AdviseError, Candidate, candidates
from studykit.perfmodel.advise.entry import answer
from studykit.perfmodel.advise.evidence import (HOOK_VERIFICATION, SUMMARY_CSV, TRAINING, accuracy_evidence,
                                                hook_model_error, model_errors)
from studykit.perfmodel.advise.inputs import cast_bytes_scale, hook_options, wire_bits
from studykit.perfmodel.advise.pricing import advise
from studykit.perfmodel.advise.verdicts import (CROSSOVER_MAX_GBPS, CROSSOVER_MIN_GBPS, CROSSOVER_PER_DECADE,
                                                Advice)

__all__ = ["MAIN_PARAMETER", "Candidate", "candidates", "Advice", "advise", "answer", "hook_options", "wire_bits",
           "cast_bytes_scale", "accuracy_evidence", "model_errors", "hook_model_error", "AdviseError", "SUMMARY_CSV",
           "HOOK_VERIFICATION", "TRAINING",
           "MODE_WORDS", "CROSSOVER_MIN_GBPS", "CROSSOVER_MAX_GBPS", "CROSSOVER_PER_DECADE"]
