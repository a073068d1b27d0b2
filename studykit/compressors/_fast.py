"""Fused GPU kernels (Triton) for the codecs whose plain-PyTorch form is launch- or pass-bound.

Only a fast path: every function here has a reference in the codec's own module, which stays
the definition (and runs on CPUs, on the meta device, and wherever :func:`enabled` says no).
The kernels are attached to those references in one place, :mod:`studykit.compressors.fastpath`.
A kernel computes the same function on the same inputs, with two documented differences:

* randomness is drawn inside the kernel (Philox, :func:`triton.language.rand`) from an integer
  seed made exactly like the codec's ``torch.Generator`` seed (seed, step[, rank]), so the
  numbers differ from ``torch.rand``'s but have the same distribution, and shared randomness
  (same seed on every worker) is still shared;
* exact ties at a top-k threshold are broken by position (``torch.topk`` breaks them its own
  way); the multiset of selected magnitudes is the same;
* magnitudes are compared as float bits in the top-k selections, so a NaN reaches every threshold
  (it counts as the largest, as in ``torch.topk``; DGC's reference comparison ``|g| >= t`` leaves it out);
* EF-SignSGD's scale ``||g||_1 / d`` is summed per block and then over the blocks (a fixed
  order, so deterministic), which rounds differently from ``g.abs().sum()`` in the last bits.

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
"""
from __future__ import annotations

import math
import os
import warnings

import torch

from studykit.compressors.base import reciprocal

try:  # triton ships with CUDA builds of torch; CPU machines usually lack it
    import triton
    import triton.language as tl
    HAVE_TRITON = True
except Exception:  # noqa: BLE001 - any import problem means: no fast path
    triton = None
    tl = None
    HAVE_TRITON = False

__all__ = ["HAVE_TRITON", "enabled", "seed_of"]

#: element counts from here on would overflow the kernels' int32 offsets
_MAX_NUMEL = 2**31 - 2**20


def _interpret_on_cpu() -> bool:
    return os.environ.get("STUDYKIT_FAST_INTERPRET") == "1" and os.environ.get("TRITON_INTERPRET") == "1"


def enabled(*tensors: torch.Tensor) -> bool:
    """Whether the fast path may run on ``tensors``: triton importable, ``STUDYKIT_FAST`` not 0,
    all tensors on a CUDA device (or on the CPU under the interpreter switches), and sizes in
    range."""
    if not HAVE_TRITON or os.environ.get("STUDYKIT_FAST", "1") == "0":
        return False
    cpu_ok = _interpret_on_cpu()
    for t in tensors:
        if not (t.is_cuda or (cpu_ok and t.device.type == "cpu")):
            return False
        if t.numel() >= _MAX_NUMEL:
            return False
    return True


def seed_of(comp, rank: int | None = None) -> int:
    """The integer a codec's :meth:`~studykit.compressors.base.Compressor.generator` is seeded
    with (seed, step and, for private randomness, the rank), for the kernels' Philox. Always in
    [2^62, 2^63), so Triton sees one argument type (int64) for every step and compiles once."""
    comp.random_draws += 1
    salt = 0 if rank is None else (rank + 1) * 1_000_003
    return ((comp.seed * 7_919 + comp.step * 104_729 + salt) % (2**62)) | (1 << 62)


_BLOCK = 4096        # elements per program for elementwise kernels
_NB = 512            # bytes (8 elements each) per program for packing kernels


def _launch(kernel, full_units: int, total_units: int, block: int, *args, **meta) -> None:
    """Launch ``kernel`` over ``total_units`` in programs of ``block`` units: the programs whose
    units are all complete (``full_units``) without bounds masks, so Triton can vectorise their
    loads and stores (a mask against an ``n`` that is not a multiple of 16 makes every access
    scalar), and at most one masked program for the rest. The kernel's last runtime argument is
    the first unit it handles."""
    bulk = full_units // block
    if bulk:
        kernel[(bulk,)](*args, 0, MASKED=False, **meta)
    rest = total_units - bulk * block
    if rest > 0:
        kernel[(triton.cdiv(rest, block),)](*args, bulk * block, MASKED=True, **meta)


if HAVE_TRITON:
    _jit_seeded = triton.jit(do_not_specialize=["seed", "levels", "L"])
    # integer arguments equal to 1 are compile-time constants to Triton unless listed here (levels = 1, L = 1)
    _jit_levels = triton.jit(do_not_specialize=["levels", "L"])

    @triton.jit
    def _ld(ptr, m, other, MASKED: tl.constexpr):
        if MASKED:
            return tl.load(ptr, mask=m, other=other)
        else:
            return tl.load(ptr)

    @triton.jit
    def _st(ptr, v, m, MASKED: tl.constexpr):
        if MASKED:
            tl.store(ptr, v, mask=m)
        else:
            tl.store(ptr, v)

    # ------------------------------------------------------------------ one launch, bounds masks in one program
    @triton.jit
    def _program(REVERSE: tl.constexpr):
        """This program's block; with REVERSE the blocks are handed out from the end, so the first
        programs to run read what a preceding forward pass over the same tensor left in L2."""
        pid = tl.program_id(0)
        if REVERSE:
            pid = tl.num_programs(0) - 1 - pid
        return pid

    # ------------------------------------------------------------------ Philox, four numbers per call
    @triton.jit
    def _randint8(seed, group, G: tl.constexpr):
        """(G,) group indices -> (G, 8) uint32 Philox numbers, element (g, k) for element 8 g + k:
        one Philox-4x32 call per 4 elements (``tl.rand`` runs one per element and keeps 1 of its 4)."""
        off = group[:, None] * 2 + tl.arange(0, 2)[None, :]
        r0, r1, r2, r3 = tl.randint4x(seed, off)
        return tl.reshape(tl.join(tl.join(r0, r1), tl.join(r2, r3)), (G, 8))

    @triton.jit
    def _uniform8(seed, group, G: tl.constexpr):
        """(G, 8) U[0, 1) float32 (see :func:`_randint8`)."""
        return tl.uint_to_uniform_float(_randint8(seed, group, G))

    # ------------------------------------------------------------------ b-bit fields (pack_fields' layout)
    @triton.jit
    def _store_fields(out_ptr, v, g0, n, nbytes, MASKED: tl.constexpr, W: tl.constexpr, WP: tl.constexpr,
                      G: tl.constexpr):
        """(G, 8) int32 fields (< 2^W) of elements 8 (g0 + g) + k -> the little-endian bit stream of
        :func:`~studykit.compressors.quantization.pack_fields` (element i on bits [i W, (i + 1) W)): a
        group of 8 elements is exactly W bytes. W = 16: ``out_ptr`` is int16 (two bytes, little-endian)."""
        if W == 16:
            idx = (g0 + tl.arange(0, G))[:, None] * 8 + tl.arange(0, 8)[None, :]
            _st(out_ptr + idx, v.to(tl.int16), idx < n, MASKED)
        elif 8 % W == 0:  # 8 / W whole fields per byte
            P: tl.constexpr = 8 // W
            f = tl.reshape(v, (G * W, P))
            byte = tl.sum(f << (tl.arange(0, P) * W)[None, :], axis=1)
            pos = g0 * W + tl.arange(0, G * W)
            _st(out_ptr + pos, byte.to(tl.uint8), pos < nbytes, MASKED)
        else:  # two int64 words of 4 fields (4 W <= 60 bits); byte j takes bits [8 j, 8 j + 8) of the pair
            k = tl.arange(0, 4)
            words = tl.sum(tl.reshape(v.to(tl.int64), (G, 2, 4)) << (k * W)[None, None, :], axis=2)
            lo, hi = tl.split(words)
            j = tl.arange(0, WP)[None, :]
            d = 4 * W - 8 * j  # where hi's bit 0 lands relative to byte j's bit 0
            byte = ((lo[:, None] >> tl.minimum(8 * j, 63))
                    | ((hi[:, None] << tl.minimum(tl.maximum(d, 0), 8)) >> tl.minimum(tl.maximum(-d, 0), 63))) & 0xFF
            pos = (g0 + tl.arange(0, G)).to(tl.int64)[:, None] * W + j
            ok = j < W
            if MASKED:
                ok = ok & (pos < nbytes)
            tl.store(out_ptr + pos, byte.to(tl.uint8), mask=ok)

    @triton.jit
    def _load_fields(p_ptr, idx, m, nbytes, MASKED: tl.constexpr, W: tl.constexpr):
        """The W-bit fields of elements ``idx`` (any shape) from a :func:`_store_fields` stream, int32.
        W = 16: ``p_ptr`` is int16."""
        if W == 16:
            return _ld(p_ptr + idx, m, 0, MASKED).to(tl.int32) & 0xFFFF
        elif 8 % W == 0:
            P: tl.constexpr = 8 // W
            b = _ld(p_ptr + idx // P, m, 0, MASKED).to(tl.int32)
            return (b >> ((idx % P) * W)) & ((1 << W) - 1)
        else:  # a field spans at most 3 bytes (W <= 15, offset <= 7)
            bit = idx.to(tl.int64) * W
            b0 = bit >> 3
            word = _ld(p_ptr + b0, m, 0, MASKED).to(tl.int32)
            word |= tl.load(p_ptr + b0 + 1, mask=m & (b0 + 1 < nbytes), other=0).to(tl.int32) << 8
            word |= tl.load(p_ptr + b0 + 2, mask=m & (b0 + 2 < nbytes), other=0).to(tl.int32) << 16
            return (word >> (bit & 7).to(tl.int32)) & ((1 << W) - 1)

    # ------------------------------------------------------------------ bit packing
    @triton.jit
    def _bits_of(x, MODE: tl.constexpr):
        if MODE == 0:      # x >= 0 (signSGD: zero counts as +1)
            return x >= 0
        elif MODE == 1:    # x < 0 (TernGrad's sign map)
            return x < 0
        else:              # float sign bit (natural compression: -0.0 is negative)
            return x.to(tl.int32, bitcast=True) < 0

    @triton.jit
    def _pack_rows(bits):
        """(NB, 8) 0/1 -> (NB,) uint8, bit j of byte i = bits[i, j]."""
        weights = 1 << tl.arange(0, 8)
        return tl.sum(bits.to(tl.int32) * weights[None, :], axis=1).to(tl.uint8)

    @triton.jit
    def _pack_body(x_ptr, out_ptr, sum_ptr, n, nbytes, pid, MASKED: tl.constexpr, MODE: tl.constexpr,
                   SUM: tl.constexpr, NB: tl.constexpr):
        byte = pid * NB + tl.arange(0, NB)
        idx = byte[:, None] * 8 + tl.arange(0, 8)[None, :]
        m = idx < n
        x = _ld(x_ptr + idx, m, 0.0, MASKED)
        bit = _bits_of(x, MODE)
        if MASKED:
            bit = bit & m
        _st(out_ptr + byte, _pack_rows(bit), byte < nbytes, MASKED)
        if SUM:  # this block's sum of |x| (padding reads 0), summed on the host side in a fixed order
            tl.store(sum_ptr + pid, tl.sum(tl.sum(tl.abs(x), axis=1), axis=0))

    @triton.jit
    def _pack_kernel(x_ptr, out_ptr, sum_ptr, n, nbytes, n_full, REVERSE: tl.constexpr, MODE: tl.constexpr,
                     SUM: tl.constexpr, NB: tl.constexpr):
        pid = _program(REVERSE)
        if pid < n_full:
            _pack_body(x_ptr, out_ptr, sum_ptr, n, nbytes, pid, False, MODE, SUM, NB)
        else:
            _pack_body(x_ptr, out_ptr, sum_ptr, n, nbytes, pid, True, MODE, SUM, NB)

    @triton.jit
    def _bit_at(bits_ptr, idx, m, MASKED: tl.constexpr):
        b = _ld(bits_ptr + (idx >> 3), m, 0, MASKED).to(tl.int32)
        return (b >> (idx & 7)) & 1

    # ------------------------------------------------------------------ half-precision casts
    @triton.jit
    def _cast_kernel(x_ptr, out_ptr, n, factor, start, MASKED: tl.constexpr, DIVIDE: tl.constexpr,
                     BLOCK: tl.constexpr):
        """out = x / factor (DIVIDE) or x * factor, computed in fp32, rounded to out's dtype."""
        idx = start + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        x = _ld(x_ptr + idx, m, 0.0, MASKED).to(tl.float32)
        if DIVIDE:
            y = x / factor
        else:
            y = x * factor
        _st(out_ptr + idx, y.to(out_ptr.dtype.element_ty), m, MASKED)

    # ------------------------------------------------------------------ signSGD family
    @triton.jit
    def _signs_decode_body(bits_ptr, scale_ptr, out_ptr, n, nbytes, pid, MASKED: tl.constexpr, W: tl.constexpr,
                           MODE: tl.constexpr, BLOCK: tl.constexpr):
        idx = pid * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for w in range(W):
            bit = _bit_at(bits_ptr + w * nbytes, idx, m, MASKED).to(tl.float32)
            if MODE == 0:
                acc += bit
            else:
                s = tl.load(scale_ptr + w)
                acc += (bit * 2 - 1) * s
        if MODE == 0:
            v = acc - W * 0.5
            out = tl.where(v > 0, 1.0, tl.where(v < 0, -1.0, 0.0))
        else:
            out = acc / W  # exact for W = 1
        _st(out_ptr + idx, out, m, MASKED)

    @triton.jit
    def _signs_decode_kernel(bits_ptr, scale_ptr, out_ptr, n, nbytes, n_full, REVERSE: tl.constexpr,
                             W: tl.constexpr, MODE: tl.constexpr, BLOCK: tl.constexpr):
        """MODE 0: majority vote sign(sum_w (2 b_w - 1)); MODE 1: mean_w scale_w (2 b_w - 1)."""
        pid = _program(REVERSE)
        if pid < n_full:
            _signs_decode_body(bits_ptr, scale_ptr, out_ptr, n, nbytes, pid, False, W, MODE, BLOCK)
        else:
            _signs_decode_body(bits_ptr, scale_ptr, out_ptr, n, nbytes, pid, True, W, MODE, BLOCK)

    # ------------------------------------------------------------------ TernGrad
    @triton.jit
    def _terngrad_encode_body(x_ptr, scale_ptr, keep_ptr, neg_ptr, n, nbytes, seed, pid, MASKED: tl.constexpr,
                              NB: tl.constexpr):
        byte = pid * NB + tl.arange(0, NB)
        idx = byte[:, None] * 8 + tl.arange(0, 8)[None, :]
        m = idx < n
        x = _ld(x_ptr + idx, m, 0.0, MASKED)
        s = tl.load(scale_ptr)
        u = _uniform8(seed, byte, NB)
        keep = u * s < tl.abs(x)  # never true for padding (|0| = 0)
        neg = x < 0
        bm = byte < nbytes
        _st(keep_ptr + byte, _pack_rows(keep), bm, MASKED)
        _st(neg_ptr + byte, _pack_rows(neg), bm, MASKED)

    @_jit_seeded
    def _terngrad_encode_kernel(x_ptr, scale_ptr, keep_ptr, neg_ptr, n, nbytes, seed, n_full, REVERSE: tl.constexpr,
                                NB: tl.constexpr):
        pid = _program(REVERSE)
        if pid < n_full:
            _terngrad_encode_body(x_ptr, scale_ptr, keep_ptr, neg_ptr, n, nbytes, seed, pid, False, NB)
        else:
            _terngrad_encode_body(x_ptr, scale_ptr, keep_ptr, neg_ptr, n, nbytes, seed, pid, True, NB)

    @triton.jit
    def _terngrad_decode_body(keep_ptr, neg_ptr, scale_ptr, out_ptr, n, nbytes, pid, MASKED: tl.constexpr,
                              W: tl.constexpr, BLOCK: tl.constexpr):
        idx = pid * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for w in range(W):
            k = _bit_at(keep_ptr + w * nbytes, idx, m, MASKED).to(tl.float32)
            g = _bit_at(neg_ptr + w * nbytes, idx, m, MASKED).to(tl.float32)
            s = tl.load(scale_ptr + w)
            acc += k * (1 - 2 * g) * s
        _st(out_ptr + idx, acc / W, m, MASKED)

    @triton.jit
    def _terngrad_decode_kernel(keep_ptr, neg_ptr, scale_ptr, out_ptr, n, nbytes, n_full, REVERSE: tl.constexpr,
                                W: tl.constexpr, BLOCK: tl.constexpr):
        pid = _program(REVERSE)
        if pid < n_full:
            _terngrad_decode_body(keep_ptr, neg_ptr, scale_ptr, out_ptr, n, nbytes, pid, False, W, BLOCK)
        else:
            _terngrad_decode_body(keep_ptr, neg_ptr, scale_ptr, out_ptr, n, nbytes, pid, True, W, BLOCK)

    # ------------------------------------------------------------------ natural compression
    @triton.jit
    def _natural_encode_body(x_ptr, exp_ptr, sign_ptr, n, nbytes, seed, pid, MASKED: tl.constexpr,
                             NB: tl.constexpr):
        byte = pid * NB + tl.arange(0, NB)
        idx = byte[:, None] * 8 + tl.arange(0, 8)[None, :]
        m = idx < n
        x = _ld(x_ptr + idx, m, 0.0, MASKED)
        bits = x.to(tl.int32, bitcast=True)
        exponent = (bits >> 23) & 0xFF
        mantissa = bits & 0x7FFFFF
        r = (_randint8(seed, byte, NB) & 0x7FFFFF).to(tl.int32)
        up = (r < mantissa) & (exponent < 254)
        _st(exp_ptr + idx, (exponent + up.to(tl.int32)).to(tl.uint8), m, MASKED)
        _st(sign_ptr + byte, _pack_rows(bits < 0), byte < nbytes, MASKED)

    @_jit_seeded
    def _natural_encode_kernel(x_ptr, exp_ptr, sign_ptr, n, nbytes, seed, n_full, REVERSE: tl.constexpr,
                               NB: tl.constexpr):
        pid = _program(REVERSE)
        if pid < n_full:
            _natural_encode_body(x_ptr, exp_ptr, sign_ptr, n, nbytes, seed, pid, False, NB)
        else:
            _natural_encode_body(x_ptr, exp_ptr, sign_ptr, n, nbytes, seed, pid, True, NB)

    @triton.jit
    def _natural_decode_body(exp_ptr, sign_ptr, out_ptr, n, nbytes, pid, MASKED: tl.constexpr, W: tl.constexpr,
                             BLOCK: tl.constexpr):
        idx = pid * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for w in range(W):
            e = _ld(exp_ptr + w * n + idx, m, 0, MASKED).to(tl.int32)
            mag = (e << 23).to(tl.float32, bitcast=True)
            neg = _bit_at(sign_ptr + w * nbytes, idx, m, MASKED)
            acc += tl.where(neg != 0, -mag, mag)
        _st(out_ptr + idx, acc / W, m, MASKED)

    @triton.jit
    def _natural_decode_kernel(exp_ptr, sign_ptr, out_ptr, n, nbytes, n_full, REVERSE: tl.constexpr,
                               W: tl.constexpr, BLOCK: tl.constexpr):
        pid = _program(REVERSE)
        if pid < n_full:
            _natural_decode_body(exp_ptr, sign_ptr, out_ptr, n, nbytes, pid, False, W, BLOCK)
        else:
            _natural_decode_body(exp_ptr, sign_ptr, out_ptr, n, nbytes, pid, True, W, BLOCK)

    # ------------------------------------------------------------------ QSGD: levels packed in the same pass
    @triton.jit
    def _qsgd_encode_body(x_ptr, norm_ptr, out_ptr, n, n_buckets, nbytes, levels, tiny, seed, pid,
                          MASKED: tl.constexpr, ROWS: tl.constexpr, BS: tl.constexpr, W: tl.constexpr,
                          WP: tl.constexpr):
        G: tl.constexpr = ROWS * BS // 8
        bucket = pid * ROWS + tl.arange(0, ROWS)
        idx = bucket[:, None] * BS + tl.arange(0, BS)[None, :]
        m = idx < n
        x = _ld(x_ptr + idx, m, 0.0, MASKED)
        norm = tl.maximum(tl.sqrt(tl.sum(x * x, axis=1)), tiny)
        lf = levels.to(tl.float32)
        scale = lf / norm
        g0 = pid * G
        u = tl.reshape(_uniform8(seed, g0 + tl.arange(0, G), G), (ROWS, BS))
        level = tl.minimum(tl.floor(u + tl.abs(x) * scale[:, None]), lf)
        field = (tl.where(x < 0, -level, level) + lf).to(tl.int32)  # offset to [0, 2 levels]
        if MASKED:
            field = tl.where(m, field, 0)  # pack_fields pads with zero fields
        _store_fields(out_ptr, tl.reshape(field, (G, 8)), g0, n, nbytes, MASKED, W, WP, G)
        _st(norm_ptr + bucket, norm, bucket < n_buckets, MASKED)

    @_jit_seeded
    def _qsgd_encode_kernel(x_ptr, norm_ptr, out_ptr, n, n_buckets, nbytes, levels, tiny, seed, n_full,
                            REVERSE: tl.constexpr, ROWS: tl.constexpr, BS: tl.constexpr, W: tl.constexpr,
                            WP: tl.constexpr):
        pid = _program(REVERSE)
        if pid < n_full:
            _qsgd_encode_body(x_ptr, norm_ptr, out_ptr, n, n_buckets, nbytes, levels, tiny, seed, pid, False,
                              ROWS, BS, W, WP)
        else:
            _qsgd_encode_body(x_ptr, norm_ptr, out_ptr, n, n_buckets, nbytes, levels, tiny, seed, pid, True,
                              ROWS, BS, W, WP)

    @triton.jit
    def _qsgd_decode_body(norm_ptr, p_ptr, out_ptr, n, n_buckets, nbytes, row, levels, inv_levels, inv_w, pid,
                          MASKED: tl.constexpr,
                          NW: tl.constexpr, ROWS: tl.constexpr, BS: tl.constexpr, W: tl.constexpr):
        bucket = pid * ROWS + tl.arange(0, ROWS)
        idx = bucket[:, None] * BS + tl.arange(0, BS)[None, :]
        m = idx < n
        bm = bucket < n_buckets
        acc = tl.zeros([ROWS, BS], dtype=tl.float32)
        for w in range(NW):
            q = (_load_fields(p_ptr + w * row, idx, m, nbytes, MASKED, W) - levels).to(tl.float32)
            norm = _ld(norm_ptr + w * n_buckets + bucket, bm, 1.0, MASKED)
            acc += q * (norm * inv_levels)[:, None]  # the reference's levels * (norm * reciprocal(s))
        if NW > 1:
            acc = acc * inv_w
        _st(out_ptr + idx, acc, m, MASKED)

    @_jit_levels
    def _qsgd_decode_kernel(norm_ptr, p_ptr, out_ptr, n, n_buckets, nbytes, row, levels, inv_levels, inv_w, n_full,
                            REVERSE: tl.constexpr, NW: tl.constexpr, ROWS: tl.constexpr, BS: tl.constexpr,
                            W: tl.constexpr):
        pid = _program(REVERSE)
        if pid < n_full:
            _qsgd_decode_body(norm_ptr, p_ptr, out_ptr, n, n_buckets, nbytes, row, levels, inv_levels, inv_w, pid, False, NW, ROWS,
                              BS, W)
        else:
            _qsgd_decode_body(norm_ptr, p_ptr, out_ptr, n, n_buckets, nbytes, row, levels, inv_levels, inv_w, pid, True, NW, ROWS,
                              BS, W)

    # ------------------------------------------------------------------ quantize: levels packed in the same pass
    @triton.jit
    def _quantize_pack_body(x_ptr, scale_ptr, out_ptr, n, nbytes, L, mult, offset, seed, pid, MASKED: tl.constexpr,
                            MODE: tl.constexpr, W: tl.constexpr, WP: tl.constexpr, G: tl.constexpr):
        """MODE 0 (quantize): floor(u + x L / scale) clamped to [-L, L], offset by L; MODE 1 (THC, L = top):
        floor(u + offset + x / (scale * mult)) clamped to [0, top] (:func:`thc_levels`' grid index)."""
        g0 = pid * G
        group = g0 + tl.arange(0, G)
        idx = group[:, None] * 8 + tl.arange(0, 8)[None, :]
        m = idx < n
        x = _ld(x_ptr + idx, m, 0.0, MASKED)
        lf = L.to(tl.float32)
        if MODE == 0:
            f = lf / tl.load(scale_ptr)
            v = tl.floor(_uniform8(seed, group, G) + x * f)
            field = (tl.minimum(tl.maximum(v, -lf), lf) + lf).to(tl.int32)  # level in [-L, L], offset to [0, 2 L]
        else:
            f = 1 / (tl.load(scale_ptr) * mult)
            v = tl.floor((_uniform8(seed, group, G) + offset) + x * f)
            field = tl.minimum(tl.maximum(v, 0.0), lf).to(tl.int32)
        if MASKED:
            field = tl.where(m, field, 0)
        _store_fields(out_ptr, field, g0, n, nbytes, MASKED, W, WP, G)

    @_jit_seeded
    def _quantize_pack_kernel(x_ptr, scale_ptr, out_ptr, n, nbytes, L, mult, offset, seed, n_full,
                              REVERSE: tl.constexpr, MODE: tl.constexpr, W: tl.constexpr, WP: tl.constexpr,
                              G: tl.constexpr):
        pid = _program(REVERSE)
        if pid < n_full:
            _quantize_pack_body(x_ptr, scale_ptr, out_ptr, n, nbytes, L, mult, offset, seed, pid, False, MODE, W, WP, G)
        else:
            _quantize_pack_body(x_ptr, scale_ptr, out_ptr, n, nbytes, L, mult, offset, seed, pid, True, MODE, W, WP, G)

    @triton.jit
    def _quantize_unpack_body(p_ptr, scale_ptr, out_ptr, n, nbytes, row, L, inv_l, inv_w, div, pid,
                              MASKED: tl.constexpr, MODE: tl.constexpr, NW: tl.constexpr, W: tl.constexpr,
                              BLOCK: tl.constexpr):
        """MODE 0 (quantize): (sum_w field_w - NW L) * (scale * inv_l), times inv_w where NW > 1; MODE 1 (THC):
        sum_w field_w * (scale * inv_l / div) - scale (:func:`thc_decode`'s products, inv_l = 2 / top)."""
        idx = pid * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        total = tl.zeros([BLOCK], dtype=tl.int32)
        for w in range(NW):
            total += _load_fields(p_ptr + w * row, idx, m, nbytes, MASKED, W)
        s = tl.load(scale_ptr)
        if MODE == 0:
            step = s * inv_l  # the reference's scale * reciprocal(L)
            out = (total - NW * L).to(tl.float32) * step
            if NW > 1:
                out = out * inv_w  # reciprocal(NW)
        else:
            out = total.to(tl.float32) * (s * inv_l / div) - s
        _st(out_ptr + idx, out, m, MASKED)

    @_jit_levels
    def _quantize_unpack_kernel(p_ptr, scale_ptr, out_ptr, n, nbytes, row, L, inv_l, inv_w, div, n_full,
                                REVERSE: tl.constexpr, MODE: tl.constexpr,
                                NW: tl.constexpr, W: tl.constexpr, BLOCK: tl.constexpr):
        pid = _program(REVERSE)
        if pid < n_full:
            _quantize_unpack_body(p_ptr, scale_ptr, out_ptr, n, nbytes, row, L, inv_l, inv_w, div, pid, False, MODE,
                                  NW, W, BLOCK)
        else:
            _quantize_unpack_body(p_ptr, scale_ptr, out_ptr, n, nbytes, row, L, inv_l, inv_w, div, pid, True, MODE,
                                  NW, W, BLOCK)

    # ------------------------------------------------------------------ shared-scale quantizers
    @_jit_seeded
    def _stochastic_levels_kernel(x_ptr, scale_ptr, out_ptr, n, seed, mult, offset, lo, hi, start,
                                  MASKED: tl.constexpr, MODE: tl.constexpr, BLOCK: tl.constexpr):
        """floor(u + offset + x * f) clamped to [lo, hi], cast to out's dtype; MODE 0 (quantize):
        f = mult / scale; MODE 1 (THC): f = 1 / (scale * mult) (scale = range M, mult = 2 / top)."""
        idx = start + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        x = _ld(x_ptr + idx, m, 0.0, MASKED)
        s = tl.load(scale_ptr)
        if MODE == 0:
            f = mult / s
        else:
            f = 1 / (s * mult)
        u = tl.rand(seed, idx)
        v = tl.floor((u + offset) + x * f)
        v = tl.minimum(tl.maximum(v, lo), hi)
        _st(out_ptr + idx, v.to(out_ptr.dtype.element_ty), m, MASKED)

    @triton.jit
    def _dequant_kernel(q_ptr, scale_ptr, out_ptr, n, mult, div, start, MASKED: tl.constexpr, MODE: tl.constexpr,
                        BLOCK: tl.constexpr):
        """MODE 0 (quantize): q * (scale * mult) * div with mult = reciprocal(L), div = reciprocal(world size)
        (:meth:`Quantize.decode`'s products); MODE 1 (THC): q * (scale * mult / div) - scale."""
        idx = start + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        q = _ld(q_ptr + idx, m, 0, MASKED).to(tl.float32)
        s = tl.load(scale_ptr)
        if MODE == 0:
            out = (q * (s * mult)) * div  # div = 1.0 (one worker): exact
        else:
            out = q * (s * mult / div) - s
        _st(out_ptr + idx, out, m, MASKED)

    # ------------------------------------------------------------------ THC's Hadamard transform, two stages per pass
    @triton.jit
    def _thc_diag(seed, idx, size_mask):
        """THC's random diagonal at flat positions ``idx``: +-1 from (seed, position in the rotation block)."""
        return (tl.randint(seed, idx & size_mask) & 1).to(tl.float32) * 2 - 1

    @_jit_seeded
    def _hadamard2_kernel(x_ptr, ha_ptr, hb_ptr, out_ptr, R, n_lim, size_mask, inv_sqrt, seed, DIR: tl.constexpr,
                          BR: tl.constexpr, DA: tl.constexpr, DB: tl.constexpr, SIGN: tl.constexpr,
                          PREC: tl.constexpr):
        """Two Kronecker stages of :func:`~studykit.compressors.thc.rotate` in one pass: ``H_DB`` along the last axis,
        then ``H_DA`` along the one before, of BR rows at a time. DIR 0 (rotate): ``(R, DA, DB)`` in, ``(DA, DB, R)``
        out; DIR 1 (unrotate): ``(DA, DB, R)`` in, ``(R, DA, DB)`` out (the transposes rotate/unrotate make).
        SIGN 1 (rotate's first pass): the input is the unpadded gradient, ``n_lim`` long, times THC's random
        diagonal / sqrt(size) (:func:`_sign_pad_kernel`'s, zero past ``n_lim``: the padding); SIGN 2 (unrotate's
        last pass): the output times the diagonal / sqrt(size), only its first ``n_lim`` written. PREC: ``tl.dot``'s
        input precision, "ieee" (fp32 FMA) or "tf32x3" (tensor cores; the Hadamard factors are exact in TF32, so
        the product keeps about fp32's accuracy: :func:`_hadamard2`)."""
        r = tl.program_id(0) * BR + tl.arange(0, BR)
        a = tl.arange(0, DA)
        b = tl.arange(0, DB)
        m = (r < R)[:, None, None]
        rows = r[:, None, None] * (DA * DB) + a[None, :, None] * DB + b[None, None, :]  # (R, DA, DB), row-major
        cols = (a[None, :, None] * DB + b[None, None, :]) * R + r[:, None, None]       # (DA, DB, R), row-major
        src = rows if DIR == 0 else cols
        if SIGN == 1:
            x = tl.load(x_ptr + src, mask=m & (src < n_lim), other=0.0)
            x = x * (_thc_diag(seed, src, size_mask) * inv_sqrt)
        else:
            x = tl.load(x_ptr + src, mask=m, other=0.0)
        hb = tl.load(hb_ptr + b[:, None] * DB + b[None, :])
        ha = tl.load(ha_ptr + a[:, None] * DA + a[None, :])
        y = tl.dot(tl.reshape(x, (BR * DA, DB)), hb, input_precision=PREC)  # H symmetric: x @ H = (H x^T)^T
        y = tl.permute(tl.reshape(y, (BR, DA, DB)), (0, 2, 1))
        z = tl.permute(tl.reshape(tl.dot(tl.reshape(y, (BR * DB, DA)), ha, input_precision=PREC), (BR, DB, DA)),
                       (0, 2, 1))
        dst = cols if DIR == 0 else rows
        if SIGN == 2:
            z = z * (_thc_diag(seed, dst, size_mask) * inv_sqrt)
            tl.store(out_ptr + dst, z, mask=m & (dst < n_lim))
        else:
            tl.store(out_ptr + dst, z, mask=m)

    # ------------------------------------------------------------------ THC's random signs
    @_jit_seeded
    def _sign_pad_kernel(x_ptr, out_ptr, n, n_out, size_mask, inv_sqrt, seed, start, MASKED: tl.constexpr,
                         BLOCK: tl.constexpr):
        """out[i] = x[i] * d[i % size] / sqrt(size), d = +-1 from (seed, i % size); zero past n
        (padding); with n > n_out (the inverse) only the first n_out are written."""
        idx = start + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mo = idx < n_out
        x = _ld(x_ptr + idx, mo & (idx < n), 0.0, MASKED)
        _st(out_ptr + idx, x * (_thc_diag(seed, idx, size_mask) * inv_sqrt), mo, MASKED)

    # ------------------------------------------------------------------ top-k selection
    @triton.jit
    def _hist_kernel(x_ptr, n, state_ptr, hist_ptr, start, MASKED: tl.constexpr, MATCH_SHIFT: tl.constexpr,
                     SHIFT: tl.constexpr, NBINS: tl.constexpr, FIRST: tl.constexpr, BLOCK: tl.constexpr,
                     ITERS: tl.constexpr):
        """Histogram of bits [SHIFT, SHIFT + log2 NBINS) of |x|'s float bits over the elements whose
        higher bits (>> MATCH_SHIFT) equal the prefix chosen so far (state[0])."""
        base = start + tl.program_id(0) * (BLOCK * ITERS)
        prefix = tl.load(state_ptr)
        acc = tl.zeros([NBINS], dtype=tl.int32)
        for it in range(ITERS):
            idx = base + it * BLOCK + tl.arange(0, BLOCK)
            m = idx < n
            v = _ld(x_ptr + idx, m, 0.0, MASKED).to(tl.int32, bitcast=True) & 0x7FFFFFFF
            if not FIRST:
                m = m & ((v >> MATCH_SHIFT) == prefix)
            acc += tl.histogram((v >> SHIFT) & (NBINS - 1), NBINS, mask=m)
        tl.atomic_add(hist_ptr + tl.arange(0, NBINS), acc, sem="relaxed")

    @triton.jit
    def _select_bin_kernel(hist_ptr, state_ptr, BITS: tl.constexpr, NBINS: tl.constexpr):
        """state = [prefix, k_left]: pick the bin holding the k_left-th largest, extend the prefix,
        and leave in k_left how many of that bin are still to take."""
        prefix = tl.load(state_ptr)
        k_left = tl.load(state_ptr + 1)
        b = tl.arange(0, NBINS)
        h = tl.load(hist_ptr + b)
        at_least = tl.cumsum(h, axis=0, reverse=True)  # elements in bins >= b
        chosen = tl.max(tl.where(at_least >= k_left, b, 0), axis=0)
        above = tl.sum(tl.where(b > chosen, h, 0), axis=0)
        tl.store(state_ptr, (prefix << BITS) | chosen)
        tl.store(state_ptr + 1, k_left - above)

    @triton.jit
    def _threshold_masks_kernel(x_ptr, n, state_ptr, gt_ptr, eq_ptr, start, MASKED: tl.constexpr,
                                BLOCK: tl.constexpr):
        idx = start + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        v = _ld(x_ptr + idx, m, 0.0, MASKED).to(tl.int32, bitcast=True) & 0x7FFFFFFF
        t = tl.load(state_ptr)
        _st(gt_ptr + idx, (v > t).to(tl.int8), m, MASKED)
        _st(eq_ptr + idx, (v == t).to(tl.int8), m, MASKED)

    @triton.jit
    def _count_ge_kernel(x_ptr, n, t_ptr, counts_ptr, start, MASKED: tl.constexpr, BLOCK: tl.constexpr):
        """counts[p] = how many of block p's |x| reach the threshold t_ptr[0], compared as float bits (so NaN
        counts as the largest, as in ``torch.topk``)."""
        p = start // BLOCK + tl.program_id(0)
        idx = p * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        v = _ld(x_ptr + idx, m, 0.0, MASKED).to(tl.int32, bitcast=True) & 0x7FFFFFFF
        tl.store(counts_ptr + p, tl.sum(((v >= tl.load(t_ptr)) & m).to(tl.int32), axis=0))

    @triton.jit
    def _compact_ge_kernel(x_ptr, n, t_ptr, ends_ptr, pos_ptr, bits_ptr, cap, start, MASKED: tl.constexpr,
                           BLOCK: tl.constexpr, ROW: tl.constexpr):
        """The positions (ascending) and |x| float bits of the elements counted by ``_count_ge_kernel``,
        the first ``cap`` of them: block p writes its own from ``ends[p]`` minus its count on (``ends``: the
        inclusive prefix sums of the counts), so the order is ``torch.nonzero``'s."""
        p = start // BLOCK + tl.program_id(0)
        idx = p * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        v = _ld(x_ptr + idx, m, 0.0, MASKED).to(tl.int32, bitcast=True) & 0x7FFFFFFF
        keep = ((v >= tl.load(t_ptr)) & m).to(tl.int32)
        if ROW == 0:  # one prefix sum over the block
            slot = tl.load(ends_ptr + p) - tl.sum(keep, axis=0) + tl.cumsum(keep, axis=0) - 1
        else:  # prefix sums inside rows of ROW, then over the rows' sums
            k2 = tl.reshape(keep, (BLOCK // ROW, ROW))
            rows = tl.sum(k2, axis=1)
            first = tl.load(ends_ptr + p) - tl.sum(rows, axis=0) + tl.cumsum(rows, axis=0) - rows
            slot = tl.reshape(first[:, None] + tl.cumsum(k2, axis=1) - 1, (BLOCK,))
        w = (keep != 0) & (slot < cap)
        tl.store(pos_ptr + slot, idx.to(tl.int64), mask=w)
        tl.store(bits_ptr + slot, v, mask=w)

    @triton.jit
    def _row_topk_kernel(x_ptr, n, vals_ptr, offs_ptr, K, start, MASKED: tl.constexpr, L: tl.constexpr,
                         LP: tl.constexpr, RADIX4: tl.constexpr):
        """Per row of L elements (zero past n): the K largest |x| (ties: first by position), values
        and in-row offsets written in position order at row * K. The K-th largest magnitude is found
        bit by bit from the top (RADIX4: two bits per step, three candidate counts at once)."""
        row = start + tl.program_id(0)
        off = tl.arange(0, LP)
        idx = row * L + off
        m = (off < L) & (idx < n)
        x = _ld(x_ptr + idx, m, 0.0, MASKED)
        v = x.to(tl.int32, bitcast=True) & 0x7FFFFFFF
        if MASKED:
            v = tl.where(off < L, v, -1)  # lanes past the row never count
        t = tl.full((), 0, tl.int32)
        if RADIX4:
            j = tl.arange(0, 4)
            for i in range(15):  # bits 30..1, two at a time
                shift = 29 - 2 * i
                cand = t | (j << shift)
                cnt = tl.sum((v[None, :] >= cand[:, None]).to(tl.int32), axis=1)
                best = tl.max(tl.where((cnt >= K) & (j > 0), j, 0), axis=0)
                t = t | (best << shift)
            cnt0 = tl.sum((v >= (t | 1)).to(tl.int32), axis=0)
            t = tl.where(cnt0 >= K, t | 1, t)
        else:
            for i in range(31):  # the largest t with count(v >= t) >= K
                cand = t | (1 << (30 - i))
                cnt = tl.sum((v >= cand).to(tl.int32), axis=0)
                t = tl.where(cnt >= K, cand, t)
        gt = v > t
        need = K - tl.sum(gt.to(tl.int32), axis=0)
        eq = v == t
        eq_rank = tl.cumsum(eq.to(tl.int32), axis=0)
        sel = gt | (eq & (eq_rank <= need))
        slot = tl.cumsum(sel.to(tl.int32), axis=0) - 1
        tl.store(vals_ptr + row * K + slot, x, mask=sel)
        tl.store(offs_ptr + row * K + slot, off, mask=sel)

    @triton.jit
    def _row_scatter_kernel(vals_ptr, offs_ptr, out_ptr, n, K, L: tl.constexpr, LP: tl.constexpr,
                            KP: tl.constexpr):
        """One worker's chunked top-k payload -> dense rows: zero the row, then put the K values."""
        row = tl.program_id(0)
        off = tl.arange(0, LP)
        idx = row * L + off
        tl.store(out_ptr + idx, tl.zeros([LP], dtype=tl.float32), mask=(off < L) & (idx < n))
        tl.debug_barrier()  # the zeros land before the values (same program, same addresses)
        j = tl.arange(0, KP)
        mj = j < K
        o = tl.load(offs_ptr + row * K + j, mask=mj, other=0).to(tl.int32)
        v = tl.load(vals_ptr + row * K + j, mask=mj, other=0.0)
        dst = row * L + o
        tl.store(out_ptr + dst, v, mask=mj & (dst < n))

    # ------------------------------------------------------------------ MSTopK's threshold search
    @triton.jit
    def _mstopk_hist_kernel(mag_ptr, n, st_ptr, hist_ptr, start, MASKED: tl.constexpr, BITS: tl.constexpr,
                            BLOCK: tl.constexpr, ITERS: tl.constexpr):
        """Histogram over the 2**BITS leaves of the binary-search tree below [lo, hi] = st[0:2]: each
        entry descends BITS levels by the same fp32 midpoints (l + h) / 2 the search computes, right
        when mag >= mid (entries below lo end in leaf 0, those at or above hi in the last leaf)."""
        lo = tl.load(st_ptr)
        hi = tl.load(st_ptr + 1)
        base = start + tl.program_id(0) * (BLOCK * ITERS)
        acc = tl.zeros([1 << BITS], dtype=tl.int32)
        for it in range(ITERS):
            idx = base + it * BLOCK + tl.arange(0, BLOCK)
            m = idx < n
            v = _ld(mag_ptr + idx, m, 0.0, MASKED)
            lo_v = tl.zeros([BLOCK], dtype=tl.float32) + lo
            hi_v = tl.zeros([BLOCK], dtype=tl.float32) + hi
            leaf = tl.zeros([BLOCK], dtype=tl.int32)
            for _ in tl.static_range(BITS):
                mid = (lo_v + hi_v) * 0.5  # == (lo + hi) / 2: halving is exact
                right = v >= mid
                lo_v = tl.where(right, mid, lo_v)
                hi_v = tl.where(right, hi_v, mid)
                leaf = leaf * 2 + right.to(tl.int32)
            if MASKED:
                acc += tl.histogram(leaf, 1 << BITS, mask=m)
            else:
                acc += tl.histogram(leaf, 1 << BITS)
        tl.atomic_add(hist_ptr + tl.arange(0, 1 << BITS), acc, sem="relaxed")

    @triton.jit
    def _mstopk_walk_kernel(st_ptr, cnt_ptr, hist_ptr, k, BITS: tl.constexpr):
        """BITS binary-search steps on st = [lo, hi, t1, t2], cnt = [c1, c2], each step's count
        #(mag >= mid) read from the leaf histogram: the entries in the leaves right of the split."""
        lo = tl.load(st_ptr)
        hi = tl.load(st_ptr + 1)
        t1 = tl.load(st_ptr + 2)
        t2 = tl.load(st_ptr + 3)
        c1 = tl.load(cnt_ptr)
        c2 = tl.load(cnt_ptr + 1)
        leaves = tl.arange(0, 1 << BITS)
        at_least = tl.cumsum(tl.load(hist_ptr + leaves), axis=0, reverse=True)  # entries in leaves >= j
        first = 0  # first leaf of the current node
        for d in tl.static_range(BITS):
            half = 1 << (BITS - 1 - d)  # d is a constexpr of static_range: so is half (Triton 3.6 refuses
            # re-binding a name annotated tl.constexpr in an unrolled loop)
            mid = (lo + hi) * 0.5
            count = tl.sum(tl.where(leaves == first + half, at_least, 0), axis=0)
            few = count <= k
            hi = tl.where(few, mid, hi)
            lo = tl.where(few, lo, mid)
            t1 = tl.where(few, mid, t1)
            c1 = tl.where(few, count, c1)
            t2 = tl.where(few, t2, mid)
            c2 = tl.where(few, c2, count)
            first = tl.where(few, first, first + half)
        tl.store(st_ptr, lo)
        tl.store(st_ptr + 1, hi)
        tl.store(st_ptr + 2, t1)
        tl.store(st_ptr + 3, t2)
        tl.store(cnt_ptr, c1)
        tl.store(cnt_ptr + 1, c2)


# ====================================================================== choosing
_PICKED: dict = {}


def pick(key, candidates) -> int:
    """Index of the fastest of ``candidates`` (callables computing the same thing) for ``key``,
    timed once per process with CUDA events (two runs each after a warm-up) and remembered: a
    guard that keeps a fused path from ever being slower than the plain-PyTorch one it replaces.
    The plain path comes last: a candidate before it that raises (a kernel this GPU or Triton cannot
    build) is left out with a warning. Without CUDA (or under the interpreter) the first is taken."""
    if key in _PICKED:
        return _PICKED[key]
    if len(candidates) == 1 or not torch.cuda.is_available() or _interpret_on_cpu():
        _PICKED[key] = 0
        return 0
    times = []
    for i, fn in enumerate(candidates):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - e.g. a tl.dot precision this GPU or Triton lacks
            if i == len(candidates) - 1:
                raise  # the last candidate is the plain-PyTorch path: its failure is a real error
            times.append(float("inf"))
            warnings.warn(f"fast path {key[0]!r}: candidate {i} failed ({type(exc).__name__}: {exc}); left out",
                          RuntimeWarning, stacklevel=2)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        fn()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    _PICKED[key] = min(range(len(times)), key=times.__getitem__)
    return _PICKED[key]


# ====================================================================== wrappers
def _launch1(kernel, full_units: int, total_units: int, block: int, *args, reverse: bool = False, **meta) -> None:
    """Launch ``kernel`` once over ``total_units`` in programs of ``block`` units: the programs whose
    units are all complete (the first ``full_units // block``, the kernel's last runtime argument)
    take a branch without bounds masks, so Triton can vectorise their loads and stores, the last
    one the masked branch (:func:`_launch` launches twice for the same effect; each Triton launch
    costs the host some 10-25 us, and these codecs are launch-bound). ``reverse``: blocks handed
    out from the end (:func:`_program`)."""
    grid = triton.cdiv(total_units, block)
    if grid:
        kernel[(grid,)](*args, full_units // block, REVERSE=reverse, **meta)


def abs_max(x: torch.Tensor) -> torch.Tensor:
    """``x.abs().amax()`` as a 1-element tensor in one reduction pass (no ``|x|`` temporary); exact."""
    return torch.linalg.vector_norm(x, float("inf")).reshape(1)


def pack(x: torch.Tensor, mode: int, *, abs_mean: bool = False):
    """Packed bits of a flat fp32 tensor, as :func:`~studykit.compressors.quantization.pack_bits`:
    mode 0: x >= 0, 1: x < 0, 2: sign bit set. ``abs_mean``: also ``mean |x|`` (1-element fp32)
    from the same pass (per-block sums, then their sum in a fixed order: deterministic, but
    rounded differently from ``x.abs().sum()``), returned as ``(bits, mean)``."""
    n = x.numel()
    nbytes = -(-n // 8)
    out = torch.empty(nbytes, dtype=torch.uint8, device=x.device)
    sums = torch.empty(triton.cdiv(nbytes, _NB) if abs_mean else 1, dtype=torch.float32, device=x.device)
    _launch1(_pack_kernel, n // 8, nbytes, _NB, x, out, sums, n, nbytes, MODE=mode, SUM=abs_mean, NB=_NB)
    if not abs_mean:
        return out
    return out, (sums.sum() / n).reshape(1)


def cast(x: torch.Tensor, dtype: torch.dtype, *, divide: float | None = None, multiply: float | None = None,
         out: torch.Tensor | None = None):
    """``(x / divide).to(dtype)`` or ``(x.float() * multiply).to(dtype)`` in one pass, computed in fp32; into
    ``out`` (flat, contiguous, ``dtype``, as many elements) when given."""
    n = x.numel()
    if out is None:
        out = torch.empty(n, dtype=dtype, device=x.device)
    elif out.dtype != dtype or out.numel() != n or not out.is_contiguous():
        raise ValueError(f"cast: out must be a contiguous {dtype} tensor of {n} elements, "
                         f"got {out.dtype} with {out.numel()} (contiguous: {out.is_contiguous()})")
    factor = float(divide if divide is not None else (multiply if multiply is not None else 1.0))
    _launch(_cast_kernel, n, n, _BLOCK, x, out, n, factor, DIVIDE=divide is not None, BLOCK=_BLOCK)
    return out


def rows(gathered, i: int) -> torch.Tensor:
    """Payload ``i`` of every worker as one ``(world_size, ...)`` tensor, without a copy where
    the workers' tensors already lie back to back in one buffer (one worker; a
    :class:`~studykit.comm.TorchComm` all-gather), else stacked (as ``quantization._stack``)."""
    first = gathered[0][i]
    if len(gathered) == 1:
        return first.unsqueeze(0)
    if first.is_contiguous():
        step = first.numel() * first.element_size()
        ptr = first.data_ptr()
        if all(p[i].is_contiguous() and p[i].dtype == first.dtype and p[i].shape == first.shape
               and p[i].device == first.device and p[i].untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
               and p[i].data_ptr() == ptr + w * step for w, p in enumerate(gathered)):
            return first.as_strided((len(gathered), *first.shape), (first.numel(), *first.stride()))
    return torch.stack([p[i] for p in gathered])


def signs_decode(bits: torch.Tensor, scales: torch.Tensor | None, n: int, vote: bool) -> torch.Tensor:
    """``bits`` (W, nbytes) -> majority vote (``vote``) or mean of scale_w * sign_w, float32 (n,)."""
    bits = bits.contiguous()
    w, nbytes = bits.shape
    out = torch.empty(n, dtype=torch.float32, device=bits.device)
    scales = bits if scales is None else scales.reshape(-1).float().contiguous()
    _launch1(_signs_decode_kernel, n, n, _BLOCK, bits, scales, out, n, nbytes, W=w, MODE=0 if vote else 1,
             BLOCK=_BLOCK)
    return out


def terngrad_encode(x: torch.Tensor, scale: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """TernGrad's two bitmaps in one pass; blocks from the end (the scale's pass just read ``x`` forward)."""
    n = x.numel()
    nbytes = -(-n // 8)
    keep = torch.empty(nbytes, dtype=torch.uint8, device=x.device)
    neg = torch.empty_like(keep)
    _launch1(_terngrad_encode_kernel, n // 8, nbytes, _NB, x, scale, keep, neg, n, nbytes, seed, reverse=True,
             NB=_NB)
    return keep, neg


def terngrad_decode(keep: torch.Tensor, neg: torch.Tensor, scales: torch.Tensor, n: int) -> torch.Tensor:
    keep, neg = keep.contiguous(), neg.contiguous()
    w, nbytes = keep.shape
    out = torch.empty(n, dtype=torch.float32, device=keep.device)
    _launch1(_terngrad_decode_kernel, n, n, _BLOCK, keep, neg, scales.reshape(-1).float().contiguous(), out, n,
             nbytes, W=w, BLOCK=_BLOCK)
    return out


def natural_encode(x: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = x.numel()
    nbytes = -(-n // 8)
    exponent = torch.empty(n, dtype=torch.uint8, device=x.device)
    signs = torch.empty(nbytes, dtype=torch.uint8, device=x.device)
    _launch1(_natural_encode_kernel, n // 8, nbytes, _NB, x, exponent, signs, n, nbytes, seed, NB=_NB)
    return exponent, signs


def natural_decode(exponent: torch.Tensor, signs: torch.Tensor, n: int) -> torch.Tensor:
    exponent, signs = exponent.contiguous(), signs.contiguous()
    w, nbytes = signs.shape
    out = torch.empty(n, dtype=torch.float32, device=signs.device)
    _launch1(_natural_decode_kernel, n, n, _BLOCK, exponent, signs, out, n, nbytes, W=w, BLOCK=_BLOCK)
    return out


def _fields_nbytes(n: int, width: int) -> int:
    """Bytes of ``n`` fields of ``width`` bits (:func:`~studykit.compressors.quantization.pack_fields`)."""
    return -(-n * width // 8)


def _field_view(packed: torch.Tensor, width: int) -> torch.Tensor:
    """What the field kernels address: bytes, or little-endian int16 pairs for 16-bit fields."""
    return packed.view(torch.int16) if width == 16 else packed


def qsgd_ok(bucket_size: int) -> bool:
    """Buckets the QSGD kernels take: a power of two from 16 to 4096 elements."""
    return 16 <= bucket_size <= 4096 and bucket_size & (bucket_size - 1) == 0


def qsgd_encode(x: torch.Tensor, levels: int, bucket: int, width: int, tiny: float, seed: int):
    """QSGD's payload in one pass: bucket norms (fp32) and the signed levels offset by ``levels`` and
    packed in ``width``-bit fields (the bytes of ``pack_fields(q + levels, width)``)."""
    n = x.numel()
    n_buckets = -(-n // bucket)
    rows_ = max(1, _BLOCK // bucket)
    nbytes = _fields_nbytes(n, width)
    norms = torch.empty(n_buckets, dtype=torch.float32, device=x.device)
    packed = torch.empty(nbytes, dtype=torch.uint8, device=x.device)
    _launch1(_qsgd_encode_kernel, n // (rows_ * bucket) * rows_, n_buckets, rows_, x, norms, _field_view(packed, width),
             n, n_buckets, nbytes, levels, tiny, seed, ROWS=rows_, BS=bucket, W=width,
             WP=triton.next_power_of_2(width))
    return norms, packed


def qsgd_decode(norms: torch.Tensor, packed: torch.Tensor, levels: int, bucket: int, width: int, n: int) -> torch.Tensor:
    """Every worker's norms ``(W, n_buckets)`` and packed levels ``(W, nbytes)`` -> the mean of their
    decodings (one worker: its decoding), float32 ``(n,)``; unpacking in the same pass."""
    norms, packed = norms.contiguous(), packed.contiguous()
    w, n_buckets = norms.shape
    nbytes = packed.shape[1]
    rows_ = max(1, _BLOCK // bucket)
    out = torch.empty(n, dtype=torch.float32, device=packed.device)
    _launch1(_qsgd_decode_kernel, n // (rows_ * bucket) * rows_, n_buckets, rows_, norms, _field_view(packed, width),
             out, n, n_buckets, nbytes, n if width == 16 else nbytes, levels, reciprocal(levels), reciprocal(w),
             NW=w, ROWS=rows_, BS=bucket,
             W=width)
    return out


def quantize_pack(x: torch.Tensor, scale: torch.Tensor, max_level: int, width: int, seed: int) -> torch.Tensor:
    """Quantize's all-gather payload in one pass: floor(u + x L / scale) clamped to [-L, L], offset
    by L and packed in ``width``-bit fields (the bytes of ``pack_fields(levels + L, width)``). Blocks
    from the end: the scale's pass just read ``x`` forward, so the first blocks find it in L2."""
    n = x.numel()
    nbytes = _fields_nbytes(n, width)
    packed = torch.empty(nbytes, dtype=torch.uint8, device=x.device)
    g = _BLOCK // 8
    _launch1(_quantize_pack_kernel, n // 8, -(-n // 8), g, x, scale.reshape(1).float(), _field_view(packed, width), n,
             nbytes, max_level, 1.0, 0.0, seed, reverse=True, MODE=0, W=width, WP=triton.next_power_of_2(width), G=g)
    return packed


def quantize_unpack(packed: torch.Tensor, scale: torch.Tensor, max_level: int, width: int, n: int) -> torch.Tensor:
    """Every worker's packed levels ``(W, nbytes)`` -> ``(sum_w field_w - W L) * (scale / L)``, divided
    by W where W > 1 (the reference's integer sum, then :meth:`Quantize.decode`), float32 ``(n,)``."""
    packed = packed.contiguous()
    w, nbytes = packed.shape
    out = torch.empty(n, dtype=torch.float32, device=packed.device)
    _launch1(_quantize_unpack_kernel, n, n, _BLOCK, _field_view(packed, width), scale.reshape(1).float(), out, n,
             nbytes, n if width == 16 else nbytes, max_level, reciprocal(max_level), reciprocal(w), 1, MODE=0, NW=w,
             W=width, BLOCK=_BLOCK)
    return out


def quantize_levels(x: torch.Tensor, scale: torch.Tensor, max_level: int, dtype: torch.dtype, seed: int):
    """Quantize's encode: floor(u + x * L / scale) clamped to [-L, L], in ``dtype``."""
    n = x.numel()
    out = torch.empty(n, dtype=dtype, device=x.device)
    L = float(max_level)
    _launch(_stochastic_levels_kernel, n, n, _BLOCK, x, scale.reshape(1).float(), out, n, seed, L, 0.0, -L, L,
            MODE=0, BLOCK=_BLOCK)
    return out


def quantize_decode(levels: torch.Tensor, scale: torch.Tensor, max_level: int, div: int = 1) -> torch.Tensor:
    """levels * (scale * reciprocal(L)) * reciprocal(div), float32 (:meth:`Quantize.decode`)."""
    n = levels.numel()
    out = torch.empty(n, dtype=torch.float32, device=levels.device)
    _launch(_dequant_kernel, n, n, _BLOCK, levels, scale.reshape(1).float(), out, n, reciprocal(max_level),
            reciprocal(div), MODE=0, BLOCK=_BLOCK)
    return out


def thc_levels(y: torch.Tensor, bound: torch.Tensor, top: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """THC's grid index: floor(u + top/2 + y / delta), delta = 2 M / top, clamped to [0, top]."""
    n = y.numel()
    out = torch.empty(n, dtype=dtype, device=y.device)
    _launch(_stochastic_levels_kernel, n, n, _BLOCK, y, bound.reshape(1).float(), out, n, seed, 2.0 / top, top / 2,
            0.0, float(top), MODE=1, BLOCK=_BLOCK)
    return out


def thc_decode(q: torch.Tensor, bound: torch.Tensor, top: int, div: int = 1) -> torch.Tensor:
    """q * (delta / div) - M with delta = M * 2 / top."""
    n = q.numel()
    out = torch.empty(n, dtype=torch.float32, device=q.device)
    _launch(_dequant_kernel, n, n, _BLOCK, q, bound.reshape(1).float(), out, n, 2.0 / top, div, MODE=1,
            BLOCK=_BLOCK)
    return out


def thc_pack(y: torch.Tensor, bound: torch.Tensor, top: int, width: int, seed: int) -> torch.Tensor:
    """THC's all-gather payload in one pass: :func:`thc_levels`' grid index, packed in ``width``-bit fields
    (the bytes of ``pack_fields(levels, width)``); the noise is drawn per group of 8 as in :func:`quantize_pack`."""
    n = y.numel()
    nbytes = _fields_nbytes(n, width)
    packed = torch.empty(nbytes, dtype=torch.uint8, device=y.device)
    g = _BLOCK // 8
    _launch1(_quantize_pack_kernel, n // 8, -(-n // 8), g, y, bound.reshape(1).float(), _field_view(packed, width), n,
             nbytes, top, 2.0 / top, top / 2, seed, reverse=True, MODE=1, W=width, WP=triton.next_power_of_2(width),
             G=g)
    return packed


def thc_unpack(packed: torch.Tensor, bound: torch.Tensor, top: int, width: int, n: int, div: int = 1) -> torch.Tensor:
    """Every worker's packed grid indices ``(W, nbytes)`` -> ``sum_w q_w * (delta / div) - M``, float32 ``(n,)``:
    the reference's integer sum (``THC._sum``) and :func:`thc_decode` in one pass."""
    packed = packed.contiguous()
    w, nbytes = packed.shape
    out = torch.empty(n, dtype=torch.float32, device=packed.device)
    _launch1(_quantize_unpack_kernel, n, n, _BLOCK, _field_view(packed, width), bound.reshape(1).float(), out, n,
             nbytes, n if width == 16 else nbytes, top, 2.0 / top, 1.0, div, MODE=1, NW=w, W=width, BLOCK=_BLOCK)
    return out


#: elements of one program's tile in :func:`_hadamard2_kernel` (rows x DA x DB)
_H2_TILE = 8192


#: the seed argument of an unsigned :func:`_hadamard2_kernel` pass: unused, but of the type every seed has
_NO_SEED = 1 << 62


#: ``tl.dot`` input precisions the Hadamard passes are tried with (:func:`pick` keeps the fastest): fp32 FMA, and
#: tensor cores with the input split in two TF32 halves ("tf32x3"; the +-1 Hadamard factors are exact in TF32, so
#: the product keeps about fp32's accuracy at a fraction of the FMA work; the FMA passes run well above the memory
#: floor)
HADAMARD_PRECISIONS = ("ieee", "tf32x3")


def _hadamard2(x: torch.Tensor, da: int, db: int, inverse: bool, sign: tuple | None = None,
               precision: str = "ieee") -> torch.Tensor:
    """One :func:`_hadamard2_kernel` pass over the flat ``x`` (``da``, ``db`` >= 16, powers of two). ``sign``
    ``(numel, padded, size, seed)`` fuses THC's random diagonal in: into the load of rotate's first pass (``x``
    the unpadded gradient, the output ``padded`` long) or the store of unrotate's last (``x`` ``padded`` long,
    the output its first ``numel``). ``precision``: one of :data:`HADAMARD_PRECISIONS`."""
    if precision not in HADAMARD_PRECISIONS:
        raise ValueError(f"precision must be one of {HADAMARD_PRECISIONS}, got {precision!r}")
    from studykit.compressors.thc import hadamard_matrix

    mode, n_lim, mask, inv, seed = 0, 0, 0, 1.0, _NO_SEED
    length, n_out = x.numel(), x.numel()
    if sign is not None:
        numel, length, size, seed = sign
        mode, n_lim, mask, inv = (2, numel, size - 1, size ** -0.5) if inverse else (1, numel, size - 1, size ** -0.5)
        n_out = numel if inverse else length
    r = length // (da * db)
    out = torch.empty(n_out, dtype=torch.float32, device=x.device)
    br = max(1, _H2_TILE // (da * db))
    _hadamard2_kernel[(triton.cdiv(r, br),)](x, hadamard_matrix(da, x.device), hadamard_matrix(db, x.device), out, r,
                                             n_lim, mask, inv, seed, DIR=int(inverse), BR=br, DA=da, DB=db,
                                             SIGN=mode, PREC=precision, num_warps=8)
    return out


def _stages(size: int, inverse: bool) -> list[tuple[int, ...]]:
    """:func:`~studykit.compressors.thc.rotate`'s Kronecker stages in the order applied, consecutive ones paired
    where both are >= 16 (``tl.dot``'s least dimension): (da, db) pairs run as one pass, (d,) stages alone."""
    from studykit.compressors.thc import _radix_sizes

    ds = _radix_sizes(size)
    order = ds if inverse else ds[::-1]
    out, i = [], 0
    while i < len(order):
        if i + 1 < len(order) and min(order[i], order[i + 1]) >= 16:
            pair = (order[i], order[i + 1]) if inverse else (order[i + 1], order[i])  # (DA, DB) as laid out
            out.append(pair)
            i += 2
        else:
            out.append((order[i],))
            i += 1
    return out


def _fwht_passes(x: torch.Tensor, size: int, inverse: bool, sign: tuple | None = None,
                 precision: str = "ieee") -> torch.Tensor:
    """The transform's passes (:func:`_stages`); ``sign`` (:func:`_hadamard2`'s) fused into the first pass of
    the rotation or the last of the inverse, which must then be a pair (:func:`_signed_fusable`); ``precision``
    the pairs' ``tl.dot`` input precision (:data:`HADAMARD_PRECISIONS`)."""
    from studykit.compressors.thc import stage

    cur = x.reshape(-1)
    stages = _stages(size, inverse)
    for i, st in enumerate(stages):
        fuse = sign if sign is not None and i == (len(stages) - 1 if inverse else 0) else None
        cur = _hadamard2(cur, *st, inverse, fuse, precision) if len(st) == 2 else stage(cur, st[0], inverse)
    return cur


def _signed_fusable(size: int, inverse: bool) -> bool:
    """Whether THC's diagonal can ride on a :func:`_hadamard2_kernel` pass: rotate's first stage, or unrotate's
    last, is a pair."""
    stages = _stages(size, inverse)
    return bool(stages) and len(stages[-1 if inverse else 0]) == 2


def rotate(x: torch.Tensor) -> torch.Tensor:
    """:func:`studykit.compressors.thc.rotate` (same layout, the same transform up to float32 rounding) with two
    stages per pass over memory where it can, or the reference's one GEMM per stage: whichever is faster for
    this shape on this device (:func:`pick`)."""
    from studykit.compressors import thc

    rows, size = x.shape
    if not any(len(st) == 2 for st in _stages(size, False)):
        return thc.rotate(x)
    fns = [lambda p=p: _fwht_passes(x, size, False, precision=p) for p in HADAMARD_PRECISIONS] + [lambda: thc.rotate(x)]
    return fns[pick(("thc_rotate", x.device, rows, size), fns)]()


def unrotate(y: torch.Tensor, rows: int, size: int) -> torch.Tensor:
    """:func:`studykit.compressors.thc.unrotate`, as :func:`rotate` is ``thc.rotate``."""
    from studykit.compressors import thc

    if not any(len(st) == 2 for st in _stages(size, True)):
        return thc.unrotate(y, rows, size)
    fns = [lambda p=p: _fwht_passes(y, size, True, precision=p).view(rows, size) for p in HADAMARD_PRECISIONS] + [
        lambda: thc.unrotate(y, rows, size)]
    return fns[pick(("thc_unrotate", y.device, rows, size), fns)]()


def rotate_signed(flat: torch.Tensor, numel: int, padded: int, size: int, seed: int) -> torch.Tensor:
    """THC's encode-side transform, ``rotate(thc_sign(flat, numel, padded, size, seed).view(-1, size))``: the
    diagonal fused into the first pass where that pass is a pair of stages and the fused path is faster here
    (:func:`pick`), saving one pass over the padded gradient."""
    def apart():
        return rotate(thc_sign(flat, numel, padded, size, seed).view(-1, size))
    if not _signed_fusable(size, False):
        return apart()
    fns = [lambda p=p: _fwht_passes(flat, size, False, (numel, padded, size, seed), p).view(-1, size)
           for p in HADAMARD_PRECISIONS] + [apart]
    return fns[pick(("thc_rotate_signed", flat.device, numel, size), fns)]()


def unrotate_signed(z: torch.Tensor, padded: int, numel: int, size: int, seed: int) -> torch.Tensor:
    """THC's decode-side transform, ``thc_sign(unrotate(z, padded // size, size).reshape(-1), padded, numel, size,
    seed)``: the diagonal and the un-padding fused into the last pass where :func:`rotate_signed` could fuse
    its own (the same rule, for the inverse) and that is faster here."""
    def apart():
        return thc_sign(unrotate(z, padded // size, size).reshape(-1), padded, numel, size, seed)
    if not _signed_fusable(size, True):
        return apart()
    fns = [lambda p=p: _fwht_passes(z, size, True, (numel, padded, size, seed), p) for p in HADAMARD_PRECISIONS] + [apart]
    return fns[pick(("thc_unrotate_signed", z.device, numel, size), fns)]()


def thc_sign(x: torch.Tensor, n_in: int, n_out: int, size: int, seed: int) -> torch.Tensor:
    """Multiply by THC's shared random diagonal D / sqrt(size) (D from ``seed``, one sign per
    position in a rotation block): pads with zeros to ``n_out`` or, for the inverse, keeps the
    first ``n_out`` of ``x``. D is its own inverse."""
    out = torch.empty(n_out, dtype=torch.float32, device=x.device)
    _launch(_sign_pad_kernel, min(n_in, n_out), n_out, _BLOCK, x, out, n_in, n_out, size - 1, size ** -0.5, seed,
            BLOCK=_BLOCK)
    return out


#: bits of |x| (31 significant) decided per histogram pass: 11 + 11 + 9
_RADIX = (11, 11, 9)


def topk_abs(x: torch.Tensor, k: int) -> torch.Tensor:
    """Positions (int64) of the k largest |x| of a flat fp32 tensor. Three exact methods, the
    fastest on this device and size kept (:func:`pick`):

    * a sampled threshold (:func:`_sampled_topk`, on large tensors only): one counting pass and one
      compacting pass over |x| keep the few entries at or above a threshold drawn from a sample, then
      ``torch.topk`` runs on those alone; one host synchronisation checks that they hold the top k
      (else ``torch.topk`` on everything);
    * radix select (:func:`_radix_topk`: three histogram passes over |x|'s bits find the k-th
      largest magnitude; then everything above it and the first ones equal to it, ascending
      positions; no sort, no host synchronisation);
    * ``torch.topk`` itself.

    Under a CUDA graph capture the sampled threshold is left out (its check waits for the device)."""
    n = x.numel()
    fns = [lambda: _radix_topk(x, k), lambda: torch.topk(x.abs(), k, sorted=False).indices]
    sampled = _sampled_ok(n, k)
    if sampled:
        fns.insert(0, lambda: _sampled_topk(x, k))
    key = ("topk", x.device, n, k)
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        # a CUDA graph capture (the DDP hook's graph runner): no host synchronisation, no timing; the picked
        # method unless it is the sampled one (radix select then, timed and compiled when the pick was made)
        i = _PICKED.get(key)
        return fns[i]() if i is not None and not (sampled and i == 0) else _radix_topk(x, k)
    return fns[pick(key, fns)]()


#: |x| sampled at this many positions (fixed per size) for :func:`_sampled_topk`'s threshold
_SAMPLES = 1 << 16
_SAMPLE_POS: dict = {}


def _sampled_threshold(k: int, n: int) -> tuple[int, int]:
    """``(r, capacity)`` of :func:`_sampled_topk`: the threshold is the ``r``-th largest of the sample,
    where ``e = k * s / n`` of the ``s`` samples are expected in the top k: ``r = e + 4 sqrt(e) + 4`` (four
    standard deviations of a binomial count, plus four), so the entries at or above it are very likely
    to number at least k; about ``r * n / s`` of them are expected, and room is made for 1.5 times that."""
    s = _SAMPLES
    e = k * s / n
    r = min(s, math.ceil(e + 4 * math.sqrt(e) + 4))
    return r, min(n, math.ceil(1.5 * r * n / s) + 1024)


def _sampled_ok(n: int, k: int) -> bool:
    """Whether :func:`_sampled_topk` is a candidate: at least 16 samples' worth of elements per sample, and
    room for candidates well below n."""
    return n >= 16 * _SAMPLES and 1 <= k and 2 * _sampled_threshold(k, n)[1] <= n


def _sampled_topk(x: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest |x| through a threshold estimated from a sample (the idea of Lin et al. 2018's
    sampled threshold, https://arxiv.org/abs/1712.01887, Sec. 3, made exact): |x| at ``_SAMPLES``
    random positions (drawn once per size, seeded by it) gives the threshold
    (:func:`_sampled_threshold`); a counting pass and a compacting pass keep the entries at or above it,
    ``torch.topk`` takes the k largest of those. If fewer than k reached the threshold, or more than
    the room kept, the candidates may miss some of the top k: then (one host synchronisation tells)
    ``torch.topk`` runs on all of |x|, so the result is always exact. Magnitudes are compared as float
    bits, so NaN counts as the largest, as in ``torch.topk``."""
    t, cap = _threshold_from_sample(x, k)
    cand, cand_bits, found = compact_ge(x, t, cap)
    chosen = cand[torch.topk(cand_bits, k, sorted=False).indices]
    if not bool((found >= k) & (found <= cap)):  # the sample missed: the exact method on everything
        return torch.topk(x.abs(), k, sorted=False).indices
    return chosen


#: (elements per program, prefix-sum rows) of the counting and compacting passes, the fastest kept per size
#: (:func:`pick`): the compacting pass takes a prefix sum over its program's elements, in one go (rows 0) or
#: inside rows of 32 and then over the rows
COMPACT_SHAPES = ((256, 0), (1024, 0), (4096, 0), (1024, 32), (4096, 32))


def _threshold_from_sample(x: torch.Tensor, k: int) -> tuple[torch.Tensor, int]:
    """:func:`_sampled_topk`'s threshold (float bits, a 1-element int32 tensor) and room for candidates."""
    n, dev = x.numel(), x.device
    pos = _SAMPLE_POS.get((dev, n))
    if pos is None:
        g = torch.Generator().manual_seed(n)
        pos = _SAMPLE_POS[(dev, n)] = torch.randint(0, n, (_SAMPLES,), generator=g).to(dev)
    r, cap = _sampled_threshold(k, n)
    t = torch.topk(x.view(torch.int32)[pos].bitwise_and_(0x7FFFFFFF), r, sorted=False).values.min().reshape(1)
    return t, cap


def compact_ge(x: torch.Tensor, t_bits: torch.Tensor, cap: int):
    """The entries of flat fp32 ``x`` with ``|x| >= t`` (``t_bits``: a 1-element int32 tensor, t's float
    bits; NaN counts as the largest), in two passes (count per block, then compact): ``(positions, bits,
    found)``, ``positions`` (int64, ascending, ``x.numel()`` in the unused slots) and ``bits`` (|x|'s float
    bits, -1 in the unused slots) of the first ``cap`` of them, ``found`` (a 1-element int32 tensor) how
    many there are in all. For ``t >= 0`` the positions are ``torch.nonzero_static(x.abs() >= t, size=cap,
    fill_value=x.numel())``'s. The program shape is one of :data:`COMPACT_SHAPES`."""
    fns = [lambda s=s: _compact_ge(x, t_bits, cap, *s) for s in COMPACT_SHAPES]
    return fns[pick(("compact_ge", x.device, x.numel(), cap), fns)]()


def _compact_ge(x: torch.Tensor, t_bits: torch.Tensor, cap: int, block: int, row: int = 0):
    n, dev = x.numel(), x.device
    counts = torch.empty(triton.cdiv(n, block), dtype=torch.int32, device=dev)
    _launch(_count_ge_kernel, n, n, block, x, n, t_bits, counts, BLOCK=block)
    ends = torch.cumsum(counts, 0, dtype=torch.int32)
    pos = torch.full((cap,), n, dtype=torch.int64, device=dev)
    bits = torch.full((cap,), -1, dtype=torch.int32, device=dev)  # below every magnitude's bits
    _launch(_compact_ge_kernel, n, n, block, x, n, t_bits, ends, pos, bits, cap, BLOCK=block, ROW=row)
    return pos, bits, ends[-1:]


def _radix_topk(x: torch.Tensor, k: int) -> torch.Tensor:
    n = x.numel()
    dev = x.device
    state = torch.zeros(2, dtype=torch.int32, device=dev)  # (prefix, k still to take): no host copy
    state[1] = k
    hists = torch.zeros(sum(1 << b for b in _RADIX), dtype=torch.int32, device=dev)
    block, iters = 2048, 8
    done, start = 0, 0
    for i, bits in enumerate(_RADIX):
        nb = 1 << bits
        shift = 31 - done - bits
        hist = hists[start:start + nb]
        _launch(_hist_kernel, n, n, block * iters, x, n, state, hist, MATCH_SHIFT=shift + bits, SHIFT=shift,
                NBINS=nb, FIRST=i == 0, BLOCK=block, ITERS=iters)
        _select_bin_kernel[(1,)](hist, state, BITS=bits, NBINS=nb)
        done += bits
        start += nb
    gt = torch.empty(n, dtype=torch.int8, device=dev)
    eq = torch.empty(n, dtype=torch.int8, device=dev)
    _launch(_threshold_masks_kernel, n, n, _BLOCK, x, n, state, gt, eq, BLOCK=_BLOCK)
    # all above the threshold (fewer than k), then the first k_left equal to it
    idx_gt = torch.nonzero_static(gt.view(torch.bool), size=k, fill_value=n).view(-1)
    idx_eq = torch.nonzero_static(eq.view(torch.bool), size=k, fill_value=n).view(-1)
    n_gt = k - state[1].long()
    slot = torch.arange(k, device=dev)
    return torch.where(slot < n_gt, idx_gt, idx_eq[(slot - n_gt).clamp(min=0)])


def row_topk_ok(length: int, k: int) -> bool:
    """Rows the per-row kernel takes: up to 16384 elements, k < length."""
    return 2 <= length <= 16384 and 1 <= k < length


def row_topk(x: torch.Tensor, length: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k |x| inside each ``length``-element row of a flat fp32 tensor (the last row padded
    with zeros): values (rows * k,) fp32 and in-row offsets (rows * k,) int32, position order.
    Ties at the threshold: first by position."""
    n = x.numel()
    rows = -(-n // length)
    vals = torch.empty(rows * k, dtype=torch.float32, device=x.device)
    offs = torch.empty(rows * k, dtype=torch.int32, device=x.device)
    lp = triton.next_power_of_2(length)
    warps = 8 if lp >= 4096 else 4
    full = n // length if lp == length else 0

    def run(radix4):
        if full:
            _row_topk_kernel[(full,)](x, n, vals, offs, k, 0, MASKED=False, L=length, LP=lp, RADIX4=radix4,
                                      num_warps=warps)
        if rows > full:
            _row_topk_kernel[(rows - full,)](x, n, vals, offs, k, full, MASKED=True, L=length, LP=lp,
                                             RADIX4=radix4, num_warps=warps)

    choice = pick(("row_topk", x.device, n, length, k), [lambda: run(True), lambda: run(False)])
    run(choice == 0)
    return vals, offs


def row_scatter(values: torch.Tensor, offsets: torch.Tensor, n: int, length: int, k: int) -> torch.Tensor:
    """Inverse of :func:`row_topk` for one payload: a dense (n,) fp32 tensor, zeros elsewhere."""
    rows = -(-n // length)
    out = torch.empty(n, dtype=torch.float32, device=values.device)
    lp = triton.next_power_of_2(length)
    _row_scatter_kernel[(rows,)](values, offsets, out, n, k, L=length, LP=lp, KP=triton.next_power_of_2(k),
                                 num_warps=8 if lp >= 4096 else 4)
    return out


#: binary-search steps MSTopK's fused search resolves per pass over |g| (a 2**10-leaf histogram)
_MSTOPK_BITS = 10


def mstopk_search(mag: torch.Tensor, k: int, rounds: int, lo: torch.Tensor, hi: torch.Tensor, count_dtype):
    """MSTopK's binary search (``rounds`` steps between ``lo`` and ``hi``) in ceil(rounds / 10)
    passes over ``mag`` and two launches a pass, instead of a pass and two launches a step: each
    pass histograms every entry into the 2**10 leaves of the next ten steps' midpoint tree, and a
    one-program kernel then takes the ten steps with the counts read from the histogram. Returns
    the 0-d tensors (t1, c1, t2, c2) of :class:`~studykit.compressors.sparsification.MSTopK`'s
    reference loop, bit for bit (the same fp32 midpoints (lo + hi) / 2, exact integer counts)."""
    n = mag.numel()
    dev = mag.device
    st = torch.stack([lo.float(), hi.float(), torch.full((), float("inf"), device=dev), torch.zeros((), device=dev)])
    cnt = torch.arange(2, dtype=torch.int32, device=dev) * n  # [c1, c2] = [0, n], made on the device
    steps = [min(_MSTOPK_BITS, rounds - i) for i in range(0, rounds, _MSTOPK_BITS)]
    hists = torch.zeros(sum(1 << b for b in steps), dtype=torch.int32, device=dev)
    block, iters, start = 1024, 8, 0
    for bits in steps:
        hist = hists[start:start + (1 << bits)]
        _launch(_mstopk_hist_kernel, n, n, block * iters, mag, n, st, hist, BITS=bits, BLOCK=block, ITERS=iters)
        _mstopk_walk_kernel[(1,)](st, cnt, hist, k, BITS=bits)
        start += 1 << bits
    return st[2], cnt[0].to(count_dtype), st[3], cnt[1].to(count_dtype)
