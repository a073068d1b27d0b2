"""Fused GPU kernels registered as overrides of the reference codecs: the one place fast paths are chosen.

Every codec in the family modules is plain PyTorch, the definition (it runs on CPUs, on the
``meta`` device, and is what the tests check against dense references). A Triton kernel of
:mod:`studykit.compressors._fast` that computes the same function is attached here to the
method it replaces::

    @override(SignSGD, "decompress", when=lambda self, payload, ctx: _fast.enabled(payload[0]))
    def _(self, payload, ctx):
        return _fast.signs_decode(payload[0].view(1, -1), None, ctx, vote=True)

:func:`override` swaps the class's method for a dispatcher that runs the kernel where ``when``
holds (CUDA tensors, triton importable, ``STUDYKIT_FAST`` not 0, sizes in range: see
:func:`studykit.compressors._fast.enabled`) and the reference otherwise. :data:`OVERRIDES`
lists them by (class, method); :func:`reference` gives back the plain method. The kernels'
documented differences (in-kernel Philox noise, ties broken by position, EF-SignSGD's scale
summed in another order) are in :mod:`studykit.compressors._fast`; ``tests/test_bench.py`` and
``tests/test_fast_elementwise.py`` compare each kernel with its reference on a GPU (or on the CPU
through Triton's interpreter), the bit-packed payloads byte for byte.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from studykit.compressors import _fast
from studykit.compressors.precision import _Cast
from studykit.compressors.quantization import (
    QSGD,
    TINY,
    EFSignSGD,
    Natural,
    Quantize,
    SignSGD,
    TernGrad,
    _Signs,
)
from studykit.compressors.sparsification import DGC, MSTopK, RandomK, TopK, TopKChunked
from studykit.compressors.thc import THC

__all__ = ["OVERRIDES", "Override", "accelerated", "override", "reference"]


@dataclass(frozen=True)
class Override:
    """A fast implementation of one method: ``fast`` runs where ``when`` holds, else ``reference``."""

    reference: Callable
    fast: Callable
    when: Callable[..., bool]


#: (class, method name) -> its override
OVERRIDES: dict[tuple[type, str], Override] = {}


def override(cls: type | tuple[type, ...], method: str, *, when: Callable[..., bool]):
    """Decorator: ``fast(self, *args)`` replaces ``cls.method`` wherever ``when(self, *args)`` is true.

    ``method`` must be defined on ``cls`` itself (subclasses inherit the dispatcher); one override
    per (class, method). ``when`` and ``fast`` take the method's own arguments.
    """
    classes = cls if isinstance(cls, tuple) else (cls,)

    def install(fast: Callable) -> Callable:
        for c in classes:
            ref = c.__dict__.get(method)
            if not callable(ref) or isinstance(ref, staticmethod):
                raise TypeError(f"override: {c.__name__} defines no method {method!r} of its own "
                                f"(override the class that defines it)")
            if (c, method) in OVERRIDES:
                raise TypeError(f"override: {c.__name__}.{method} has an override already")
            setattr(c, method, _dispatcher(ref, fast, when))
            OVERRIDES[(c, method)] = Override(ref, fast, when)
        return fast

    return install


def _dispatcher(ref: Callable, fast: Callable, when: Callable[..., bool]) -> Callable:
    @functools.wraps(ref)  # name, docstring and signature of the reference (__wrapped__ = ref)
    def dispatch(self, *args, **kwargs):
        return fast(self, *args, **kwargs) if when(self, *args, **kwargs) else ref(self, *args, **kwargs)

    return dispatch


def accelerated() -> tuple[str, ...]:
    """Names of the registered compressors with a fused kernel (an override on their class or a base), sorted."""
    from studykit.compressors.registry import _REGISTRY

    return tuple(n for n, cls in sorted(_REGISTRY.items()) if any(c in cls.__mro__ for c, _ in OVERRIDES))


def reference(cls: type, method: str) -> Callable:
    """The plain-PyTorch ``cls.method`` (itself when no override is registered)."""
    hit = OVERRIDES.get((cls, method))
    return hit.reference if hit is not None else getattr(cls, method)


# ------------------------------------------------------------------ precision: one vectorised cast
@override(_Cast, "compress", when=lambda self, flat, world_size: _fast.enabled(flat))
def _(self, flat, world_size):  # PyTorch's dtype-converting kernels are not vectorised
    return [_fast.cast(flat, self.wire_dtype, divide=world_size)], world_size


@override(_Cast, "decompress", when=lambda self, payload, ctx: _fast.enabled(payload[0]))
def _(self, payload, ctx):
    return _fast.cast(payload[0], torch.float32, multiply=ctx)


@override(_Cast, "decompress_mean",
          when=lambda self, summed, ctx, world_size: ctx == world_size and _fast.enabled(summed[0]))
def _(self, summed, ctx, world_size):
    return _fast.cast(summed[0], torch.float32)


@override(_Cast, "decompress_mean_into",
          when=lambda self, summed, ctx, world_size, out: (ctx == world_size and _fast.enabled(summed[0])
                                                           and out.is_contiguous() and out.dtype == torch.float32))
def _(self, summed, ctx, world_size, out):
    _fast.cast(summed[0], torch.float32, out=out.view(-1))
    return out


# ------------------------------------------------------------------ sign codecs: read fp32, write bits
# Decoding takes every worker's payload as one (world_size, ...) tensor: _fast.rows makes it without a
# copy where the payloads already lie back to back (one worker; TorchComm's all-gather buffer).
@override(_Signs, "sign_bits", when=lambda self, flat: _fast.enabled(flat))
def _(self, flat):
    return _fast.pack(flat, 0)


@override(SignSGD, "decompress", when=lambda self, payload, ctx: _fast.enabled(payload[0]))
def _(self, payload, ctx):
    return _fast.signs_decode(payload[0].view(1, -1), None, ctx, vote=True)  # one vote = own sign


@override(SignSGD, "combine", when=lambda self, gathered, ctx: _fast.enabled(gathered[0][0]))
def _(self, gathered, ctx):
    return _fast.signs_decode(_fast.rows(gathered, 0), None, ctx, vote=True)


@override(EFSignSGD, "compress", when=lambda self, flat, world_size: _fast.enabled(flat))
def _(self, flat, world_size):  # the signs and the scale ||p||_1 / d from one pass
    bits, scale = _fast.pack(flat, 0, abs_mean=True)
    return [bits, scale], flat.numel()


@override(EFSignSGD, "decompress", when=lambda self, payload, ctx: _fast.enabled(payload[0]))
def _(self, payload, ctx):
    return _fast.signs_decode(payload[0].view(1, -1), payload[1], ctx, vote=False)


@override(EFSignSGD, "combine", when=lambda self, gathered, ctx: _fast.enabled(gathered[0][0]))
def _(self, gathered, ctx):
    return _fast.signs_decode(_fast.rows(gathered, 0), _fast.rows(gathered, 1), ctx, vote=False)


# ------------------------------------------------------------------ QSGD: levels packed (and unpacked) in the pass
def _qsgd_ok(self: QSGD, t: torch.Tensor, numel: int) -> bool:
    return _fast.qsgd_ok(self._buckets(numel)[1]) and _fast.enabled(t)


@override(QSGD, "compress", when=lambda self, flat, world_size: _qsgd_ok(self, flat, flat.numel()))
def _(self, flat, world_size):  # norm, noise, level, offset and bit fields in one pass per bucket
    norms, packed = _fast.qsgd_encode(flat, self.levels, self._buckets(flat.numel())[1], self.bits, TINY,
                                      _fast.seed_of(self, flat.device, self._rank))
    return [norms, packed], flat.numel()


@override(QSGD, "decompress", when=lambda self, payload, ctx: _qsgd_ok(self, payload[1], ctx))
def _(self, payload, ctx):  # unpack and decode in one pass
    return _fast.qsgd_decode(payload[0].view(1, -1), payload[1].view(1, -1), self.levels, self._buckets(ctx)[1],
                             self.bits, ctx)


@override(QSGD, "combine", when=lambda self, gathered, ctx: _qsgd_ok(self, gathered[0][1], ctx))
def _(self, gathered, ctx):
    return _fast.qsgd_decode(_fast.rows(gathered, 0), _fast.rows(gathered, 1), self.levels, self._buckets(ctx)[1],
                             self.bits, ctx)


# ------------------------------------------------------------------ TernGrad: noise drawn in the kernel
@override((TernGrad, Quantize), "peak", when=lambda self, flat: _fast.enabled(flat))
def _(self, flat):  # one reduction pass, no |g| temporary
    return _fast.abs_max(flat)


@override(TernGrad, "bitmaps", when=lambda self, flat, scale: _fast.enabled(flat))
def _(self, flat, scale):  # one pass, two bitmaps out
    return _fast.terngrad_encode(flat, scale, _fast.seed_of(self, flat.device, self._rank))


@override(TernGrad, "decompress", when=lambda self, payload, ctx: _fast.enabled(payload[1]))
def _(self, payload, ctx):
    return _fast.terngrad_decode(payload[1].view(1, -1), payload[2].view(1, -1), payload[0], ctx)


@override(TernGrad, "combine", when=lambda self, gathered, ctx: _fast.enabled(gathered[0][1]))
def _(self, gathered, ctx):
    return _fast.terngrad_decode(_fast.rows(gathered, 1), _fast.rows(gathered, 2), _fast.rows(gathered, 0), ctx)


# ------------------------------------------------------------------ natural compression
@override(Natural, "compress", when=lambda self, flat, world_size: _fast.enabled(flat))
def _(self, flat, world_size):
    exponent, signs = _fast.natural_encode(flat, _fast.seed_of(self, flat.device, self._rank))
    return [exponent, signs], flat.numel()


@override(Natural, "decompress", when=lambda self, payload, ctx: _fast.enabled(payload[0]))
def _(self, payload, ctx):
    return _fast.natural_decode(payload[0].view(1, -1), payload[1].view(1, -1), ctx)


@override(Natural, "combine", when=lambda self, gathered, ctx: _fast.enabled(gathered[0][0]))
def _(self, gathered, ctx):
    return _fast.natural_decode(_fast.rows(gathered, 0), _fast.rows(gathered, 1), ctx)


# ------------------------------------------------------------------ quantize: noise, scale, floor, clamp, offset, pack
@override(Quantize, "encode", when=lambda self, flat, scale, world_size, rank=0: _fast.enabled(flat))
def _(self, flat, scale, world_size, rank=0):  # the all-reduce protocol's levels
    return _fast.quantize_levels(flat, scale, self.max_level, torch.int32, _fast.seed_of(self, flat.device, rank))


@override(Quantize, "decode", when=lambda self, levels, scale, world_size=1: _fast.enabled(levels))
def _(self, levels, scale, world_size=1):
    return _fast.quantize_decode(levels, scale, self.max_level, world_size)


@override(Quantize, "encode_packed", when=lambda self, flat, scale, rank=0: _fast.enabled(flat))
def _(self, flat, scale, rank=0):  # the all-gather protocol's payload: one pass, fp32 in, b-bit fields out
    return _fast.quantize_pack(flat, scale, self.max_level, self.bits, _fast.seed_of(self, flat.device, rank))


@override(Quantize, "decode_gathered", when=lambda self, packed, scale, numel: _fast.enabled(packed[0]))
def _(self, packed, scale, numel):  # unpack, integer sum over workers and scale in one pass
    return _fast.quantize_unpack(_fast.rows([[p] for p in packed], 0), scale, self.max_level, self.bits, numel)


# ------------------------------------------------------------------ THC: the diagonal and the levels in kernels
@override(THC, "reduce_flat", when=lambda self, flat, comm, return_local: _fast.enabled(flat))
def _(self, flat, comm, return_local):
    """The same protocol with fused GPU kernels around the rotation: the random diagonal is
    drawn inside the kernel that pads (and, inverted, inside the one that un-pads); the range is
    one reduction pass; quantization / dequantization are one pass each with in-kernel noise, and
    with the all-gather protocol the levels are packed in the pass that draws them and the workers'
    fields unpacked, summed and decoded in one (the wire bytes are ``pack_fields``'). The transform
    is :func:`~studykit.compressors.thc.rotate` / ``unrotate``'s, two Kronecker stages per pass where that is
    faster, with the diagonal in the first pass of the rotation and the last of the inverse where those are such
    passes (:func:`studykit.compressors._fast.rotate_signed`, ``unrotate_signed``)."""
    numel, world_size = flat.numel(), comm.world_size
    size, padded = self.rotation_size(numel), self.padded_numel(numel)
    shared = _fast.seed_of(self, flat.device)  # the diagonal: same on every worker
    y = _fast.rotate_signed(flat, numel, padded, size, shared)
    t = self._range(y) if self.saturation else _fast.abs_max(y)  # max |y| in one pass (no |y| temporary)
    bound = torch.cat(comm.all_gather(t)).amax().clamp_min(TINY)
    top = 2**self.bits - 1
    seed = _fast.seed_of(self, flat.device, comm.rank)

    def inverse(z):
        return _fast.unrotate_signed(z, padded, numel, size, shared)

    if self.protocol_for(world_size) == "allgather":  # levels packed in the pass that draws them; unpack + sum + decode
        packed = _fast.thc_pack(y, bound, top, self.bits, seed)
        gathered = _fast.rows([[g] for g in comm.all_gather(packed)], 0)
        local = inverse(_fast.thc_unpack(packed.view(1, -1), bound, top, self.bits, padded)) if return_local else None
        return inverse(_fast.thc_unpack(gathered, bound, top, self.bits, padded, world_size)), local
    q = _fast.thc_levels(y, bound, top, torch.int32, seed)
    local = inverse(_fast.thc_decode(q, bound, top)) if return_local else None
    return inverse(_fast.thc_decode(self._sum(q, comm), bound, top, world_size)), local


# ------------------------------------------------------------------ sparsifiers: selection without a sort
@override((RandomK, DGC), "positions", when=lambda self, numel, count, device: _fast.enabled_for(device, numel))
def _(self, numel, count, device):  # Philox from the step on the device, one kernel: a CUDA graph replays it
    return _fast.uniform_positions(numel, count, _fast.seed_of(self, device), device)


@override(TopK, "largest", when=lambda self, flat, k: k < flat.numel() and _fast.enabled(flat))
def _(self, flat, k):  # sampled threshold, radix select or torch.topk: the fastest here (one host sync for the first)
    return _fast.topk_abs(flat, k)


@override(MSTopK, "_magnitudes",
          when=lambda self, flat: flat.dtype == torch.float32 and flat.numel() > 0 and _fast.enabled(flat))
def _(self, flat):  # |g|, its mean and maximum in one pass (the mean summed per block, then over the blocks)
    mag, lo, hi = _fast.abs_mean_max(flat.reshape(-1))
    return mag.view_as(flat), lo, hi


@override(MSTopK, "_search", when=lambda self, mag, k, lo, hi, count_dtype: _fast.enabled(mag))
def _(self, mag, k, lo, hi, count_dtype):  # the same search, _fast._MSTOPK_BITS steps a pass, later passes over
    # the entries the second kept, which _above then reads instead of all of |g|
    return _fast.mstopk_search(mag, k, self.samplings, lo, hi, count_dtype, with_kept=True)


@override(MSTopK, "_above",
          when=lambda self, mag, t1, k, kept=None: mag.dtype == torch.float32 and _fast.enabled(mag))
def _(self, mag, t1, k, kept=None):  # count, then compact (a bitmask pass and a walk of it) instead of a mask and
    # nonzero: over the entries the search kept where it kept some, else over all of |g|
    if kept is not None:
        return _fast.above_from_kept(*kept, t1, k, mag.numel())
    return _fast.compact_ge(mag, t1.reshape(1).view(torch.int32), k)[0]


@override(MSTopK, "keys", when=lambda self, numel, device: _fast.enabled_for(device, numel))
def _(self, numel, device):  # Philox from the step on the device, one kernel: a CUDA graph replays it
    return _fast.uniform_keys(numel, _fast.seed_of(self, device), device)


@override(MSTopK, "band_candidates", when=lambda self, mag, t1, t2, q, capacity: _fast.enabled(mag))
def _(self, mag, t1, t2, q, capacity):  # count, then compact, the keys drawn in the passes (the faster kept)
    return _fast.band_candidates(mag, t1, t2, q, _fast.seed_of(self, mag.device), capacity,
                                 lambda: reference(MSTopK, "band_candidates")(self, mag, t1, t2, q, capacity))


@override(MSTopK, "_assemble", when=lambda self, flat, idx_above, c1, idx_band:
          flat.dtype == torch.float32 and _fast.enabled(flat))
def _(self, flat, idx_above, c1, idx_band):  # one kernel instead of a dozen small ones over k slots
    return _fast.mstopk_assemble(flat, idx_above, c1, idx_band)


@override(DGC, "_kth_largest", when=lambda self, x, rank: x.dtype == torch.float32 and _fast.enabled(x))
def _(self, x, rank):  # radix select's histogram passes or torch.topk, whichever is faster here (eager or replayed)
    return _fast.kth_abs(x, rank).view(())


@override(DGC, "_sample_kth", when=lambda self, flat, samples, rank:
          flat.dtype == torch.float32 and _fast.enabled(flat))
def _(self, flat, samples, rank):
    # the positions' Philox numbers and the gather in one kernel (no positions in memory), into a buffer of whole
    # radix select programs whose zeros past the sample leave its rank-th largest alone
    bits = _fast.sample_abs_bits(flat, samples, _fast.seed_of(self, flat.device), _fast.aligned(samples))
    return _fast.kth_abs(bits.view(torch.float32), rank).view(())


@override(DGC, "_candidates", when=lambda self, flat, threshold, capacity:
          flat.dtype == torch.float32 and _fast.enabled(flat))
def _(self, flat, threshold, capacity):
    # count, then compact: the same positions, the magnitudes beside them (no |g| or mask tensor), in buffers of
    # whole radix select programs (unused slots past capacity: position numel, magnitude 0, as the reference's)
    pos, bits, _ = _fast.compact_ge(flat, threshold.reshape(1).view(torch.int32), capacity, _fast.aligned(capacity))
    return pos, bits.view(torch.float32)


@override(DGC, "_top_candidates", when=lambda self, mags, k: _fast.enabled(mags) and k < mags.numel())
def _(self, mags, k):  # radix select (or torch.topk, whichever is faster here) on the candidates' magnitudes
    return _fast.topk_abs(mags, k)


@override(DGC, "_take", when=lambda self, flat, cand, top: _fast.enabled(flat, cand))
def _(self, flat, cand, top):  # the slots' positions and values in one kernel
    return _fast.take_slots(flat, cand, top)


def _row_ok(self: TopKChunked, numel: int) -> bool:
    length, _, per_chunk = self.geometry(numel)
    return _fast.row_topk_ok(length, per_chunk)


@override(TopKChunked, "chunk_topk", when=lambda self, flat, length, chunks, per_chunk:
          _fast.row_topk_ok(length, per_chunk) and _fast.enabled(flat))
def _(self, flat, length, chunks, per_chunk):  # one program per chunk
    return _fast.row_topk(flat, length, per_chunk)


@override(TopKChunked, "decompress", when=lambda self, payload, ctx: _row_ok(self, ctx) and _fast.enabled(payload[0]))
def _(self, payload, ctx):  # one kernel: zero and scatter per chunk
    values, offsets = payload
    length, _, per_chunk = self.geometry(ctx)
    if offsets.dtype == torch.uint8:
        offsets = offsets.view(torch.int16)
    return _fast.row_scatter(values.float().contiguous(), offsets.contiguous(), ctx, length, per_chunk)
