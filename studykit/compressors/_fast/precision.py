"""Fused kernel of the half-precision casts (fp16, bf16): divide or multiply and round in one pass."""
from __future__ import annotations

import torch

from studykit.compressors._fast.common import _BLOCK, HAVE_TRITON, _launch, tl, triton

#: the names :mod:`studykit.compressors._fast` re-exports from here
__all__ = ["cast"]

if HAVE_TRITON:
    from studykit.compressors._fast.common import _ld, _st

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
