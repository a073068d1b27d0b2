"""Fused kernels of the codecs that send b-bit levels: QSGD (bucket norms and levels), quantize (one shared
scale) and THC's quantization of the rotated gradient (its grid index), each with its levels packed in the
same pass in :func:`~studykit.compressors.quantization.pack_fields`' layout; each kernel next to the
functions that launch it."""
from __future__ import annotations

import torch

from studykit.compressors._fast.common import _BLOCK, HAVE_TRITON, Seed, _launch, _launch1, tl, triton
from studykit.compressors.base import reciprocal

#: the names :mod:`studykit.compressors._fast` re-exports from here
__all__ = ["_fields_nbytes", "_field_view", "qsgd_ok", "qsgd_encode", "qsgd_decode", "quantize_pack", "thc_pack",
           "quantize_unpack", "thc_unpack", "quantize_levels", "thc_levels", "quantize_decode", "thc_decode"]

if HAVE_TRITON:
    from studykit.compressors._fast.common import _jit_levels, _jit_seeded, _ld, _philox_seed, _program, _st, _uniform8

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

    @triton.jit
    def _load_group_fields(p_ptr, g0, nbytes, MASKED: tl.constexpr, W: tl.constexpr, G: tl.constexpr):
        """The W-bit fields of the 8 G elements of groups g0 .. g0 + G - 1 (8 elements, W bytes each) of a
        :func:`_store_fields` stream, int32 ``(8 G,)``, for W that does not divide 8: each group's W bytes
        read once, each field gathered from the (at most 3) bytes it spans."""
        WP: tl.constexpr = 4 if W <= 4 else (8 if W <= 8 else 16)
        j = tl.arange(0, WP)
        pos = (g0 + tl.arange(0, G)).to(tl.int64)[:, None] * W + j[None, :]
        ok = (j < W)[None, :]
        if MASKED:
            ok = ok & (pos < nbytes)
        b = tl.load(p_ptr + pos, mask=ok, other=0).to(tl.int32)  # (G, WP), zero past the group's W bytes
        e = tl.arange(0, 8)
        T: tl.constexpr = 2 if W <= 9 else 3  # bytes a field spans, at most (offset <= 7)
        word = tl.zeros((G, 8), dtype=tl.int32)
        for t in tl.static_range(T):
            jj = tl.broadcast_to(tl.minimum(((e * W) >> 3) + t, WP - 1)[None, :], (G, 8))
            word |= tl.gather(b, jj, axis=1) << (8 * t)
        return tl.reshape((word >> ((e * W) & 7)[None, :]) & ((1 << W) - 1), (8 * G,))


#: quantize's and THC's unpack kernel reads widths below this that do not divide 8 (3, 5, 6, 7) a group of 8
#: fields at a time (:func:`_load_group_fields`), the other widths three byte loads per field
#: (:func:`_load_fields`): the faster of the two, side by side on an H200 (benchmarks/pack_fields_odd.py, which
#: sets it to 0 and 16 to time both ways at every width)
GATHER_BELOW = 8


def _gathered(width: int) -> bool:
    """Whether the unpack kernel reads ``width``-bit fields by :func:`_load_group_fields`."""
    return 8 % width != 0 and width < GATHER_BELOW


def _fields_nbytes(n: int, width: int) -> int:
    """Bytes of ``n`` fields of ``width`` bits (:func:`~studykit.compressors.quantization.pack_fields`)."""
    return -(-n * width // 8)


def _field_view(packed: torch.Tensor, width: int) -> torch.Tensor:
    """What the field kernels address: bytes, or little-endian int16 pairs for 16-bit fields."""
    return packed.view(torch.int16) if width == 16 else packed


# ====================================================================== QSGD: levels packed in the same pass
if HAVE_TRITON:
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
    def _qsgd_encode_kernel(x_ptr, norm_ptr, out_ptr, n, n_buckets, nbytes, levels, tiny, seed_ptr, seed_base,
                            n_full, REVERSE: tl.constexpr, ROWS: tl.constexpr, BS: tl.constexpr, W: tl.constexpr,
                            WP: tl.constexpr):
        pid = _program(REVERSE)
        seed = _philox_seed(seed_ptr, seed_base)
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


def qsgd_ok(bucket_size: int) -> bool:
    """Buckets the QSGD kernels take: a power of two from 16 to 4096 elements."""
    return 16 <= bucket_size <= 4096 and bucket_size & (bucket_size - 1) == 0


def qsgd_encode(x: torch.Tensor, levels: int, bucket: int, width: int, tiny: float, seed: Seed):
    """QSGD's payload in one pass: bucket norms (fp32) and the signed levels offset by ``levels`` and
    packed in ``width``-bit fields (the bytes of ``pack_fields(q + levels, width)``)."""
    n = x.numel()
    n_buckets = -(-n // bucket)
    rows_ = max(1, _BLOCK // bucket)
    nbytes = _fields_nbytes(n, width)
    norms = torch.empty(n_buckets, dtype=torch.float32, device=x.device)
    packed = torch.empty(nbytes, dtype=torch.uint8, device=x.device)
    _launch1(_qsgd_encode_kernel, n // (rows_ * bucket) * rows_, n_buckets, rows_, x, norms, _field_view(packed, width),
             n, n_buckets, nbytes, levels, tiny, *seed, ROWS=rows_, BS=bucket, W=width,
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


# ====================================================================== quantize and THC: levels packed in one pass
if HAVE_TRITON:
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
    def _quantize_pack_kernel(x_ptr, scale_ptr, out_ptr, n, nbytes, L, mult, offset, seed_ptr, seed_base, n_full,
                              REVERSE: tl.constexpr, MODE: tl.constexpr, W: tl.constexpr, WP: tl.constexpr,
                              G: tl.constexpr):
        pid = _program(REVERSE)
        seed = _philox_seed(seed_ptr, seed_base)
        if pid < n_full:
            _quantize_pack_body(x_ptr, scale_ptr, out_ptr, n, nbytes, L, mult, offset, seed, pid, False, MODE, W, WP, G)
        else:
            _quantize_pack_body(x_ptr, scale_ptr, out_ptr, n, nbytes, L, mult, offset, seed, pid, True, MODE, W, WP, G)


def quantize_pack(x: torch.Tensor, scale: torch.Tensor, max_level: int, width: int, seed: Seed) -> torch.Tensor:
    """Quantize's all-gather payload in one pass: floor(u + x L / scale) clamped to [-L, L], offset
    by L and packed in ``width``-bit fields (the bytes of ``pack_fields(levels + L, width)``). Blocks
    from the end: the scale's pass just read ``x`` forward, so the first blocks find it in L2."""
    n = x.numel()
    nbytes = _fields_nbytes(n, width)
    packed = torch.empty(nbytes, dtype=torch.uint8, device=x.device)
    g = _BLOCK // 8
    _launch1(_quantize_pack_kernel, n // 8, -(-n // 8), g, x, scale.reshape(1).float(), _field_view(packed, width), n,
             nbytes, max_level, 1.0, 0.0, *seed, reverse=True, MODE=0, W=width, WP=triton.next_power_of_2(width), G=g)
    return packed


def thc_pack(y: torch.Tensor, bound: torch.Tensor, top: int, width: int, seed: Seed) -> torch.Tensor:
    """THC's all-gather payload in one pass: :func:`thc_levels`' grid index, packed in ``width``-bit fields
    (the bytes of ``pack_fields(levels, width)``); the noise is drawn per group of 8 as in :func:`quantize_pack`."""
    n = y.numel()
    nbytes = _fields_nbytes(n, width)
    packed = torch.empty(nbytes, dtype=torch.uint8, device=y.device)
    g = _BLOCK // 8
    _launch1(_quantize_pack_kernel, n // 8, -(-n // 8), g, y, bound.reshape(1).float(), _field_view(packed, width), n,
             nbytes, top, 2.0 / top, top / 2, *seed, reverse=True, MODE=1, W=width, WP=triton.next_power_of_2(width),
             G=g)
    return packed


if HAVE_TRITON:
    @triton.jit
    def _quantize_unpack_body(p_ptr, scale_ptr, out_ptr, n, nbytes, row, L, inv_l, inv_w, div, pid,
                              MASKED: tl.constexpr, MODE: tl.constexpr, NW: tl.constexpr, W: tl.constexpr,
                              BLOCK: tl.constexpr, GATHER: tl.constexpr):
        """MODE 0 (quantize): (sum_w field_w - NW L) * (scale * inv_l), times inv_w where NW > 1; MODE 1 (THC):
        sum_w field_w * (scale * inv_l / div) - scale (:func:`thc_decode`'s products, inv_l = 2 / top)."""
        idx = pid * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        total = tl.zeros([BLOCK], dtype=tl.int32)
        for w in range(NW):
            if GATHER:
                total += _load_group_fields(p_ptr + w * row, pid * (BLOCK // 8), nbytes, MASKED, W, BLOCK // 8)
            else:
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
                                NW: tl.constexpr, W: tl.constexpr, BLOCK: tl.constexpr, GATHER: tl.constexpr):
        pid = _program(REVERSE)
        if pid < n_full:
            _quantize_unpack_body(p_ptr, scale_ptr, out_ptr, n, nbytes, row, L, inv_l, inv_w, div, pid, False, MODE,
                                  NW, W, BLOCK, GATHER)
        else:
            _quantize_unpack_body(p_ptr, scale_ptr, out_ptr, n, nbytes, row, L, inv_l, inv_w, div, pid, True, MODE,
                                  NW, W, BLOCK, GATHER)


def quantize_unpack(packed: torch.Tensor, scale: torch.Tensor, max_level: int, width: int, n: int) -> torch.Tensor:
    """Every worker's packed levels ``(W, nbytes)`` -> ``(sum_w field_w - W L) * (scale / L)``, divided
    by W where W > 1 (the reference's integer sum, then :meth:`Quantize.decode`), float32 ``(n,)``."""
    packed = packed.contiguous()
    w, nbytes = packed.shape
    out = torch.empty(n, dtype=torch.float32, device=packed.device)
    _launch1(_quantize_unpack_kernel, n, n, _BLOCK, _field_view(packed, width), scale.reshape(1).float(), out, n,
             nbytes, n if width == 16 else nbytes, max_level, reciprocal(max_level), reciprocal(w), 1, MODE=0, NW=w,
             W=width, BLOCK=_BLOCK, GATHER=_gathered(width))
    return out


def thc_unpack(packed: torch.Tensor, bound: torch.Tensor, top: int, width: int, n: int, div: int = 1) -> torch.Tensor:
    """Every worker's packed grid indices ``(W, nbytes)`` -> ``sum_w q_w * (delta / div) - M``, float32 ``(n,)``:
    the reference's integer sum (``THC._sum``) and :func:`thc_decode` in one pass."""
    packed = packed.contiguous()
    w, nbytes = packed.shape
    out = torch.empty(n, dtype=torch.float32, device=packed.device)
    _launch1(_quantize_unpack_kernel, n, n, _BLOCK, _field_view(packed, width), bound.reshape(1).float(), out, n,
             nbytes, n if width == 16 else nbytes, top, 2.0 / top, 1.0, div, MODE=1, NW=w, W=width, BLOCK=_BLOCK,
             GATHER=_gathered(width))
    return out


# ====================================================================== quantize and THC: unpacked levels
if HAVE_TRITON:
    @_jit_seeded
    def _stochastic_levels_kernel(x_ptr, scale_ptr, out_ptr, n, seed_ptr, seed_base, mult, offset, lo, hi, start,
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
        u = tl.rand(_philox_seed(seed_ptr, seed_base), idx)
        v = tl.floor((u + offset) + x * f)
        v = tl.minimum(tl.maximum(v, lo), hi)
        _st(out_ptr + idx, v.to(out_ptr.dtype.element_ty), m, MASKED)


def quantize_levels(x: torch.Tensor, scale: torch.Tensor, max_level: int, dtype: torch.dtype, seed: Seed):
    """Quantize's encode: floor(u + x * L / scale) clamped to [-L, L], in ``dtype``."""
    n = x.numel()
    out = torch.empty(n, dtype=dtype, device=x.device)
    L = float(max_level)
    _launch(_stochastic_levels_kernel, n, n, _BLOCK, x, scale.reshape(1).float(), out, n, *seed, L, 0.0, -L, L,
            MODE=0, BLOCK=_BLOCK)
    return out


def thc_levels(y: torch.Tensor, bound: torch.Tensor, top: int, dtype: torch.dtype, seed: Seed) -> torch.Tensor:
    """THC's grid index: floor(u + top/2 + y / delta), delta = 2 M / top, clamped to [0, top]."""
    n = y.numel()
    out = torch.empty(n, dtype=dtype, device=y.device)
    _launch(_stochastic_levels_kernel, n, n, _BLOCK, y, bound.reshape(1).float(), out, n, *seed, 2.0 / top, top / 2,
            0.0, float(top), MODE=1, BLOCK=_BLOCK)
    return out


if HAVE_TRITON:
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


def quantize_decode(levels: torch.Tensor, scale: torch.Tensor, max_level: int, div: int = 1) -> torch.Tensor:
    """levels * (scale * reciprocal(L)) * reciprocal(div), float32 (:meth:`Quantize.decode`)."""
    n = levels.numel()
    out = torch.empty(n, dtype=torch.float32, device=levels.device)
    _launch(_dequant_kernel, n, n, _BLOCK, levels, scale.reshape(1).float(), out, n, reciprocal(max_level),
            reciprocal(div), MODE=0, BLOCK=_BLOCK)
    return out


def thc_decode(q: torch.Tensor, bound: torch.Tensor, top: int, div: int = 1) -> torch.Tensor:
    """q * (delta / div) - M with delta = M * 2 / top."""
    n = q.numel()
    out = torch.empty(n, dtype=torch.float32, device=q.device)
    _launch(_dequant_kernel, n, n, _BLOCK, q, bound.reshape(1).float(), out, n, 2.0 / top, div, MODE=1,
            BLOCK=_BLOCK)
    return out
