"""Every gradient compressor from the seed papers behind one API.

>>> from studykit import compressors
>>> "powersgd" in compressors.available()
True
>>> c = compressors.get("topk", ratio=0.01)

See :mod:`studykit.compressors.base` for the protocol and :mod:`studykit.comm`
for the communicators it runs on.
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
