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
    wire_dtype: torch.dtype

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
    """Cast to IEEE half precision, all-reduce in fp16 (2 bytes per element)."""

    name = "fp16"
    bench_group = 'elementwise'
    wire_dtype = torch.float16


@register
class BF16(_Cast):
    """Cast to bfloat16, all-reduce in bf16 (2 bytes per element)."""

    name = "bf16"
    bench_group = 'elementwise'
    wire_dtype = torch.bfloat16
