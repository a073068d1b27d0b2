"""Fused kernels of THC's randomized Hadamard transform: the shared random diagonal with the padding
(:func:`thc_sign`), and the transform with two Kronecker stages per pass over memory, the diagonal fused
into the first pass of the rotation or the last of the inverse where it can be (:func:`rotate_signed`,
:func:`unrotate_signed`); :func:`~studykit.compressors._fast.common.pick` keeps whichever path is fastest
per shape; each kernel next to the function that launches it."""
from __future__ import annotations

import torch

from studykit.compressors._fast import common
from studykit.compressors._fast.common import _BLOCK, HAVE_TRITON, Seed, _launch, no_seed, tl, triton

#: the names :mod:`studykit.compressors._fast` re-exports from here
__all__ = ["thc_sign", "_H2_TILE", "HADAMARD_PRECISIONS", "_hadamard2", "_stages", "_fwht_passes",
           "_signed_fusable", "rotate", "unrotate", "rotate_signed", "unrotate_signed"]

if HAVE_TRITON:
    from studykit.compressors._fast.common import _jit_seeded, _ld, _philox_seed, _st

    # ------------------------------------------------------------------ THC's random signs
    @triton.jit
    def _thc_diag(seed, idx, size_mask):
        """THC's random diagonal at flat positions ``idx``: +-1 from (seed, position in the rotation block)."""
        return (tl.randint(seed, idx & size_mask) & 1).to(tl.float32) * 2 - 1

    @_jit_seeded
    def _sign_pad_kernel(x_ptr, out_ptr, n, n_out, size_mask, inv_sqrt, seed_ptr, seed_base, start,
                         MASKED: tl.constexpr, BLOCK: tl.constexpr):
        """out[i] = x[i] * d[i % size] / sqrt(size), d = +-1 from (seed, i % size); zero past n
        (padding); with n > n_out (the inverse) only the first n_out are written."""
        idx = start + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mo = idx < n_out
        x = _ld(x_ptr + idx, mo & (idx < n), 0.0, MASKED)
        _st(out_ptr + idx, x * (_thc_diag(_philox_seed(seed_ptr, seed_base), idx, size_mask) * inv_sqrt), mo, MASKED)


def thc_sign(x: torch.Tensor, n_in: int, n_out: int, size: int, seed: Seed) -> torch.Tensor:
    """Multiply by THC's shared random diagonal D / sqrt(size) (D from ``seed``, one sign per
    position in a rotation block): pads with zeros to ``n_out`` or, for the inverse, keeps the
    first ``n_out`` of ``x``. D is its own inverse."""
    out = torch.empty(n_out, dtype=torch.float32, device=x.device)
    _launch(_sign_pad_kernel, min(n_in, n_out), n_out, _BLOCK, x, out, n_in, n_out, size - 1, size ** -0.5, *seed,
            BLOCK=_BLOCK)
    return out


# ====================================================================== THC's Hadamard transform, two stages per pass
if HAVE_TRITON:
    @_jit_seeded
    def _hadamard2_kernel(x_ptr, ha_ptr, hb_ptr, out_ptr, R, n_lim, size_mask, inv_sqrt, seed_ptr, seed_base,
                          DIR: tl.constexpr,
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
            x = x * (_thc_diag(_philox_seed(seed_ptr, seed_base), src, size_mask) * inv_sqrt)
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
            z = z * (_thc_diag(_philox_seed(seed_ptr, seed_base), dst, size_mask) * inv_sqrt)
            tl.store(out_ptr + dst, z, mask=m & (dst < n_lim))
        else:
            tl.store(out_ptr + dst, z, mask=m)


#: elements of one program's tile in :func:`_hadamard2_kernel` (rows x DA x DB)
_H2_TILE = 8192


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

    mode, n_lim, mask, inv, seed = 0, 0, 0, 1.0, no_seed(x.device)
    length, n_out = x.numel(), x.numel()
    if sign is not None:
        numel, length, size, seed = sign
        mode, n_lim, mask, inv = (2, numel, size - 1, size ** -0.5) if inverse else (1, numel, size - 1, size ** -0.5)
        n_out = numel if inverse else length
    r = length // (da * db)
    out = torch.empty(n_out, dtype=torch.float32, device=x.device)
    br = max(1, _H2_TILE // (da * db))
    _hadamard2_kernel[(triton.cdiv(r, br),)](x, hadamard_matrix(da, x.device), hadamard_matrix(db, x.device), out, r,
                                             n_lim, mask, inv, *seed, DIR=int(inverse), BR=br, DA=da, DB=db,
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
    return fns[common.pick(("thc_rotate", x.device, rows, size), fns)]()


def unrotate(y: torch.Tensor, rows: int, size: int) -> torch.Tensor:
    """:func:`studykit.compressors.thc.unrotate`, as :func:`rotate` is ``thc.rotate``."""
    from studykit.compressors import thc

    if not any(len(st) == 2 for st in _stages(size, True)):
        return thc.unrotate(y, rows, size)
    fns = [lambda p=p: _fwht_passes(y, size, True, precision=p).view(rows, size) for p in HADAMARD_PRECISIONS] + [
        lambda: thc.unrotate(y, rows, size)]
    return fns[common.pick(("thc_unrotate", y.device, rows, size), fns)]()


def rotate_signed(flat: torch.Tensor, numel: int, padded: int, size: int, seed: Seed) -> torch.Tensor:
    """THC's encode-side transform, ``rotate(thc_sign(flat, numel, padded, size, seed).view(-1, size))``: the
    diagonal fused into the first pass where that pass is a pair of stages and the fused path is faster here
    (:func:`pick`), saving one pass over the padded gradient."""
    def apart():
        return rotate(thc_sign(flat, numel, padded, size, seed).view(-1, size))
    if not _signed_fusable(size, False):
        return apart()
    fns = [lambda p=p: _fwht_passes(flat, size, False, (numel, padded, size, seed), p).view(-1, size)
           for p in HADAMARD_PRECISIONS] + [apart]
    return fns[common.pick(("thc_rotate_signed", flat.device, numel, size), fns)]()


def unrotate_signed(z: torch.Tensor, padded: int, numel: int, size: int, seed: Seed) -> torch.Tensor:
    """THC's decode-side transform, ``thc_sign(unrotate(z, padded // size, size).reshape(-1), padded, numel, size,
    seed)``: the diagonal and the un-padding fused into the last pass where :func:`rotate_signed` could fuse
    its own (the same rule, for the inverse) and that is faster here."""
    def apart():
        return thc_sign(unrotate(z, padded // size, size).reshape(-1), padded, numel, size, seed)
    if not _signed_fusable(size, True):
        return apart()
    fns = [lambda p=p: _fwht_passes(z, size, True, (numel, padded, size, seed), p) for p in HADAMARD_PRECISIONS] + [apart]
    return fns[common.pick(("thc_unrotate_signed", z.device, numel, size), fns)]()
