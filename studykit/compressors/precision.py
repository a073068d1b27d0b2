"""Dense baselines: fp32 all-reduce (``none``) and half-precision casts (``fp16``, ``bf16``).

Seed 002 (Han et al.) argues FP16 is the baseline a compressor has to beat: half
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
        # (PyTorch's fp16 hook does the same).
        return [(flat / world_size).to(self.wire_dtype)], world_size

    def decompress(self, payload, ctx):
        return payload[0].float() * ctx


@register
class FP16(_Cast):
    """Cast to IEEE half precision, all-reduce in fp16 (2 bytes per element)."""

    name = "fp16"
    wire_dtype = torch.float16


@register
class BF16(_Cast):
    """Cast to bfloat16, all-reduce in bf16 (2 bytes per element)."""

    name = "bf16"
    wire_dtype = torch.bfloat16
