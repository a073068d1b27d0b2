"""Fused GPU kernels (Triton) for the codecs whose plain-PyTorch form is launch- or pass-bound.

Only a fast path: every function here has a reference in the codec's own module, which stays
the definition (and runs on CPUs, on the meta device, and wherever :func:`enabled` says no).
The kernels are attached to those references in one place, :mod:`studykit.compressors.fastpath`.
A kernel computes the same function on the same inputs, with two documented differences:

* randomness is drawn inside the kernel (Philox, :func:`triton.language.rand`) from an integer
  seed made exactly like the codec's ``torch.Generator`` seed (seed, step[, rank]), so the
  numbers differ from ``torch.rand``'s but have the same distribution, and shared randomness
  (same seed on every worker) is still shared. The kernel reads the step on the device
  (:func:`seed_of`, :meth:`~studykit.compressors.base.Compressor.device_step`), which a call
  advances there: a CUDA graph of the call replays with each later step's numbers;
* exact ties at a top-k threshold are broken by position (``torch.topk`` breaks them its own
  way); the multiset of selected magnitudes is the same;
* magnitudes are compared as float bits in the top-k selections, so a NaN reaches every threshold
  (it counts as the largest, as in ``torch.topk``; DGC's reference comparison ``|g| >= t`` leaves it out);
* EF-SignSGD's scale ``||g||_1 / d`` and MSTopK's lower bracket, the mean of ``|g|``, are summed per block
  and then over the blocks (a fixed order, so deterministic), which rounds differently from
  ``g.abs().sum()`` and ``g.abs().mean()`` in the last bits; MSTopK's search from that mean is exact.

Payloads keep the reference's wire format byte for byte (bit-packed fields as
:func:`~studykit.compressors.quantization.pack_fields` lays them out), so a payload from either
path decodes on the other (``tests/test_fast_elementwise.py``). The elementwise kernels are one
launch each (:func:`_launch1`: the bounds masks in the last program only) and draw four Philox
numbers per call (:func:`_randint8`): these codecs were launch- and Philox-bound, not only
memory-bound.

Why kernels: a codec written as PyTorch ops makes one pass over memory per op (noise tensor,
scale, floor, clamp, cast, pack...) and a launch per op; a fused kernel reads the fp32 gradient
once and writes its payload once, so encode+decode lands near the memory floor (one read and
one write of the fp32 gradient).

Switches: ``STUDYKIT_FAST=0`` turns every fast path off (reference code everywhere);
``STUDYKIT_FAST_INTERPRET=1`` together with ``TRITON_INTERPRET=1`` runs the kernels on CPU
tensors through Triton's interpreter (slow; for testing the kernels without a GPU).

Layout: one module per codec family, each kernel next to the function that launches it:
:mod:`~studykit.compressors._fast.common` (:func:`enabled`, :func:`seed_of`, :func:`pick`, the launch
helpers and the Triton helpers every kernel inlines), :mod:`~studykit.compressors._fast.precision`
(half-precision casts), :mod:`~studykit.compressors._fast.packing` (signSGD, EF-SignSGD, TernGrad, natural
compression), :mod:`~studykit.compressors._fast.quantize` (QSGD, quantize, THC's levels),
:mod:`~studykit.compressors._fast.hadamard` (THC's rotation), :mod:`~studykit.compressors._fast.topk`
(top-k, DGC's sample, compaction and payload, chunked top-k, RandomK's and DGC's random positions) and
:mod:`~studykit.compressors._fast.mstopk` (MSTopK's |g| and maximum, threshold search and band fill).

``_fast.NAME`` reads the name from the module that defines it, and setting or deleting ``_fast.NAME`` (as
``monkeypatch.setattr`` does) changes it there, where that module's functions look it up (the other modules
reach ``pick`` and ``_PICKED`` through ``common``): this package holds no copy of any name to go stale.
"""
from __future__ import annotations

import sys
import types

from studykit.compressors._fast import common, hadamard, mstopk, packing, precision, quantize, topk

__all__ = ["HAVE_TRITON", "enabled", "seed_of"]

#: the module that defines each name this package exports
_HOME = {name: module for module in (common, precision, packing, quantize, hadamard, topk, mstopk) for name in module.__all__}


def _forward(name: str, home: types.ModuleType) -> property:
    """``_fast.NAME`` as a property that reads, sets and deletes ``home.NAME``."""
    return property(lambda self: getattr(home, name), lambda self, value: setattr(home, name, value),
                    lambda self: delattr(home, name), doc=f"{home.__name__}.{name}")


class _Package(types.ModuleType):
    """This package's module type: each exported name is a property forwarding to the module that defines it
    (a data descriptor, so ``monkeypatch.setattr`` restores a patched name there instead of deleting it)."""


for _name, _home in _HOME.items():
    setattr(_Package, _name, _forward(_name, _home))
del _name, _home


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})


sys.modules[__name__].__class__ = _Package
