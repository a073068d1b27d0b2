"""Dense baselines: fp32 all-reduce (``none``) and half-precision casts (``fp16``, ``bf16``).

Han et al. 2024 (Han et al.) argues FP16 is the baseline a compressor has to beat: half
the bytes of fp32, all-reduce compatible, negligible accuracy loss.
"""
from __future__ import annotations

import torch

from studykit.compressors.base import Compressor
from studykit.compressors.registry import register


@register
class NoCompression(Compressor):
    """Plain fp32 all-reduce: what DDP does by default (syncSGD)."""

    name = "none"
    allreduce_compatible = True

    def compress(self, flat, world_size):
        return [flat], None

    def decompress(self, payload, ctx):
        return payload[0]


class _Cast(Compressor):
    """Divide by the world size, cast to ``wire_dtype``, all-reduce, cast back.

    A finite gradient whose magnitude over the world size exceeds the wire dtype's range arrives as inf. By
    default (``allow_nonfinite=False``, the standalone API: :meth:`reduce`, :func:`~studykit.compressors.simulate`)
    that raises, as an inf/NaN in the input does (:meth:`check`, from the per-tensor peaks it computed already: no
    second pass over the gradient). With ``allow_nonfinite=True`` (:mod:`studykit.ddp`'s hook unless
    ``check_finite=True``) it passes through, as in PyTorch's fp16 hook: ``torch.amp.GradScaler`` then skips the
    step and lowers its scale. Workers' payloads that each fit but whose sum (the average) does not are not caught
    here: the average arrives as inf.
    """

    wire_dtype: torch.dtype

    def check(self, tensors, world_size=None):
        """:meth:`Compressor.check`, and with ``world_size`` known, refuse a finite tensor whose largest magnitude
        over ``world_size`` rounds to inf in ``wire_dtype`` (the payload would carry inf)."""
        peaks = super().check(tensors, world_size)
        if peaks is None or world_size is None:
            return peaks
        over = torch.isinf((peaks / world_size).to(self.wire_dtype))  # what compress computes, at the peak
        if bool(over.any()):
            i = int(over.nonzero()[0])
            wire = str(self.wire_dtype).removeprefix("torch.")
            bf16 = "use bf16 (float32's range in 2 bytes), " if self.wire_dtype == torch.float16 else ""
            raise self.error(f"tensor {i} holds a finite value of magnitude {float(peaks[i]):.6g}, which divided by "
                             f"the world size {world_size} overflows {wire} and would arrive as inf ({wire}'s largest "
                             f"finite value is {torch.finfo(self.wire_dtype).max:.6g}); {bf16}scale the loss down "
                             f"(torch.amp.GradScaler), or pass allow_nonfinite=True to let the inf through")
        return peaks

    def compress(self, flat, world_size):
        # Divide before the cast so the sum over workers cannot overflow fp16
        # (PyTorch's fp16 hook does the same). One kernel: divided in fp32, rounded on store.
        out = torch.empty(flat.shape, dtype=self.wire_dtype, device=flat.device)
        return [torch.div(flat, world_size, out=out)], world_size

    def decompress(self, payload, ctx):
        return payload[0].float() * ctx

    def decompress_mean(self, summed, ctx, world_size):
        # the payloads were divided by the world size already: the sum is the mean (one cast)
        if ctx == world_size:
            return summed[0].float()
        return super().decompress_mean(summed, ctx, world_size)

    def decompress_mean_into(self, summed, ctx, world_size, out):
        if ctx == world_size:  # one cast, straight into the bucket
            return out.copy_(summed[0].reshape(out.shape))
        return super().decompress_mean_into(summed, ctx, world_size, out)


@register
class FP16(_Cast):
    """Cast to IEEE half precision, all-reduce in fp16 (2 bytes per element).

    fp16's largest finite value is 65504: a gradient element that, divided by the world size, rounds past it
    (65520 and above) raises by default and arrives as inf with ``allow_nonfinite=True`` (:class:`_Cast` says
    when which); bf16 keeps float32's range."""

    name = "fp16"
    bench_group = 'elementwise'
    wire_dtype = torch.float16


@register
class BF16(_Cast):
    """Cast to bfloat16, all-reduce in bf16 (2 bytes per element)."""

    name = "bf16"
    bench_group = 'elementwise'
    wire_dtype = torch.bfloat16
