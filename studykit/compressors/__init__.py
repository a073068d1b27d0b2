"""Every gradient compressor from the seed papers behind one API.

>>> from studykit import compressors
>>> "powersgd" in compressors.available()
True
>>> c = compressors.get("topk", ratio=0.01)

See :mod:`studykit.compressors.base` for the protocol and :mod:`studykit.comm`
for the communicators it runs on. Error feedback is a memory beside the compressor
(:mod:`~studykit.compressors.memory`); fused GPU kernels are overrides of the reference
codecs (:mod:`~studykit.compressors.fastpath`).

Adding a compressor is one class plus one test:

1. In its family module (``precision``, ``quantization``, ``sparsification``, ``lowrank``),
   a ``@register`` subclass of :class:`Compressor` whose docstring cites the paper and equation.
2. Class metadata: ``name``, ``family``, ``key_param``, ``bench_group``, ``allreduce_compatible``
   (and ``stochastic``, ``unbiased``, ``default_error_feedback`` where they hold).
3. Keyword-only parameters passed on with ``super().__init__(seed=seed, allow_nonfinite=allow_nonfinite)``.
4. ``compress``/``decompress`` (``combine`` for all-gather codecs), or ``_reduce`` for several rounds.
5. One test against a dense reference in ``tests/test_<family>.py``; the contract tests in
   ``tests/test_compressors_api.py`` (plan vs. collectives issued, dtypes, error feedback,
   metadata) cover it the moment it is registered. A fused kernel, if any: ``fastpath.override``.
"""
from studykit.compressors.base import Compressor, CompressorError
from studykit.compressors.memory import ResidualMemory
from studykit.compressors.registry import (Metadata, available, get, in_group, metadata, parameters, parse_spec,
                                          register, spec_string)
from studykit.compressors.simulate import Simulation, simulate

# Families register themselves on import; then the GPU kernels attach to their reference codecs.
from studykit.compressors import lowrank, precision, quantization, sparsification, thc  # noqa: F401,E402
from studykit.compressors import fastpath  # noqa: F401  (after the families it attaches to)

__all__ = ["Compressor", "CompressorError", "ResidualMemory", "available", "get", "parameters",
           "register", "metadata", "Metadata", "in_group", "simulate", "Simulation", "parse_spec", "spec_string"]
