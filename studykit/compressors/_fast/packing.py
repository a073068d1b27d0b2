"""Fused kernels of the codecs that send bit maps: signSGD's signs (decoded by majority vote), EF-SignSGD's
signs and scale, TernGrad's two bit maps, and natural compression's exponent bytes and sign bits; each kernel
next to the function that launches it."""
from __future__ import annotations

import torch

from studykit.compressors._fast.common import _BLOCK, _NB, HAVE_TRITON, Seed, _launch1, tl, triton

#: the names :mod:`studykit.compressors._fast` re-exports from here
__all__ = ["pack", "signs_decode", "terngrad_encode", "terngrad_decode", "natural_encode", "natural_decode"]

if HAVE_TRITON:
    from studykit.compressors._fast.common import _jit_seeded, _ld, _philox_seed, _program, _randint8, _st, _uniform8

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


# ====================================================================== signSGD family
if HAVE_TRITON:
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


def signs_decode(bits: torch.Tensor, scales: torch.Tensor | None, n: int, vote: bool) -> torch.Tensor:
    """``bits`` (W, nbytes) -> majority vote (``vote``) or mean of scale_w * sign_w, float32 (n,)."""
    bits = bits.contiguous()
    w, nbytes = bits.shape
    out = torch.empty(n, dtype=torch.float32, device=bits.device)
    scales = bits if scales is None else scales.reshape(-1).float().contiguous()
    _launch1(_signs_decode_kernel, n, n, _BLOCK, bits, scales, out, n, nbytes, W=w, MODE=0 if vote else 1,
             BLOCK=_BLOCK)
    return out


# ====================================================================== TernGrad
if HAVE_TRITON:
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
    def _terngrad_encode_kernel(x_ptr, scale_ptr, keep_ptr, neg_ptr, n, nbytes, seed_ptr, seed_base, n_full,
                                REVERSE: tl.constexpr, NB: tl.constexpr):
        pid = _program(REVERSE)
        seed = _philox_seed(seed_ptr, seed_base)
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


def terngrad_encode(x: torch.Tensor, scale: torch.Tensor, seed: Seed) -> tuple[torch.Tensor, torch.Tensor]:
    """TernGrad's two bitmaps in one pass; blocks from the end (the scale's pass just read ``x`` forward)."""
    n = x.numel()
    nbytes = -(-n // 8)
    keep = torch.empty(nbytes, dtype=torch.uint8, device=x.device)
    neg = torch.empty_like(keep)
    _launch1(_terngrad_encode_kernel, n // 8, nbytes, _NB, x, scale, keep, neg, n, nbytes, *seed, reverse=True,
             NB=_NB)
    return keep, neg


def terngrad_decode(keep: torch.Tensor, neg: torch.Tensor, scales: torch.Tensor, n: int) -> torch.Tensor:
    keep, neg = keep.contiguous(), neg.contiguous()
    w, nbytes = keep.shape
    out = torch.empty(n, dtype=torch.float32, device=keep.device)
    _launch1(_terngrad_decode_kernel, n, n, _BLOCK, keep, neg, scales.reshape(-1).float().contiguous(), out, n,
             nbytes, W=w, BLOCK=_BLOCK)
    return out


# ====================================================================== natural compression
if HAVE_TRITON:
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
    def _natural_encode_kernel(x_ptr, exp_ptr, sign_ptr, n, nbytes, seed_ptr, seed_base, n_full,
                               REVERSE: tl.constexpr, NB: tl.constexpr):
        pid = _program(REVERSE)
        seed = _philox_seed(seed_ptr, seed_base)
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


def natural_encode(x: torch.Tensor, seed: Seed) -> tuple[torch.Tensor, torch.Tensor]:
    n = x.numel()
    nbytes = -(-n // 8)
    exponent = torch.empty(n, dtype=torch.uint8, device=x.device)
    signs = torch.empty(nbytes, dtype=torch.uint8, device=x.device)
    _launch1(_natural_encode_kernel, n // 8, nbytes, _NB, x, exponent, signs, n, nbytes, *seed, NB=_NB)
    return exponent, signs


def natural_decode(exponent: torch.Tensor, signs: torch.Tensor, n: int) -> torch.Tensor:
    exponent, signs = exponent.contiguous(), signs.contiguous()
    w, nbytes = signs.shape
    out = torch.empty(n, dtype=torch.float32, device=signs.device)
    _launch1(_natural_decode_kernel, n, n, _BLOCK, exponent, signs, out, n, nbytes, W=w, BLOCK=_BLOCK)
    return out
