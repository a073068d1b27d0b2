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

Importing this package does not import torch: the families (and the GPU kernels attached to them) are
imported on first use of anything that needs a class (:func:`~studykit.compressors.registry.load`); until
then the names, parameters and metadata of the built-in compressors are answered from a disk cache (see
:mod:`~studykit.compressors.registry`), so a command that only prices them starts fast.
"""
import importlib
import sys
import types

from studykit.compressors import registry
from studykit.compressors.registry import (CompressorError, Metadata, available, check, get, in_group, is_compressor,
                                          load, metadata, parameters, parse_spec, register, spec_string)

#: names this package exports from a module that imports torch: looked up (after :func:`load`) on first use
_LAZY = {"Compressor": "base", "ResidualMemory": "memory", "Simulation": "simulate", "simulate": "simulate"}
#: submodules that need the families registered and their kernels attached, as importing the package used to
_LOADING = {"base", "memory", "simulate", "fastpath", "_fast", *registry.FAMILIES}

__all__ = ["Compressor", "CompressorError", "ResidualMemory", "available", "get", "parameters", "check",
           "register", "metadata", "Metadata", "in_group", "simulate", "Simulation", "parse_spec", "spec_string",
           "is_compressor", "load"]


def __getattr__(name: str):
    if name in _LAZY:
        load()
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    if name in _LOADING:
        load()
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_LAZY, *_LOADING})


class _Package(types.ModuleType):
    """This package's module type. The submodule ``simulate`` shares its name with the function exported here,
    and the import system sets a submodule as its package's attribute when it is first imported: that must not
    replace the function."""

    def __setattr__(self, name, value):
        if name == "simulate" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
