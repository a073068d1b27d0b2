"""The codecs' speed targets (:data:`SPEED_TARGETS`, the one copy), the repeatability target
(:data:`AGREE_TOL`), the targets :func:`~studykit.measure.bench.summary.summarize` reports against
(:data:`TARGETS`), and which target judges a codec setting."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from studykit.measure.bench.codecs import ELEMENTWISE, TOPK_FAMILY

#: the limits the summary reports the benchmark's codec groups and DDP hooks against
TARGETS = {
    "elementwise": "encode+decode of the flat ResNet-50 gradient <= 3x the memory floor",
    "topk": "encode+decode of the flat ResNet-50 gradient <= 10x the memory floor",
    "powersgd": "PowerSGD rank 4 encode+decode on ResNet-50's matrices < 3 ms",
    "ddp_powersgd": "2-GPU DDP iteration with the kit's PowerSGD rank-4 hook <= 1.2x syncSGD (ResNet-50, batch 64)",
    "ddp_half": "kit fp16/bf16 hook no slower than PyTorch's fp16/bf16 hook",
}


@dataclass(frozen=True)
class SpeedTarget:
    """One codec speed target: encode+decode (phase ``encdec``, fused path) of ``compressors``
    on one H100/H200, at most ``limit`` in ``unit`` (``x_floor``: multiples of the memory floor;
    ``ms``). ``params``: what a record must have to be judged (e.g. PowerSGD's rank)."""

    key: str
    compressors: tuple
    limit: float
    unit: str
    text: str
    params: tuple = ()


#: the codec speed targets, on the flat ResNet-50 gradient (low-rank codecs on its real shapes): the one copy
SPEED_TARGETS = (
    SpeedTarget("elementwise", ("fp16", "bf16", "signsgd", "ef_signsgd", "qsgd", "terngrad", "natural", "quantize"),
                2.0, "x_floor", "elementwise codecs (quantize at every b) <= 2x the memory floor"),
    SpeedTarget("thc", ("thc",), 4.0, "x_floor", "THC <= 4x the floor (a fused fast Walsh-Hadamard transform per chunk)"),
    SpeedTarget("topk", ("topk", "topk_chunked", "topk_chunked_allreduce", "dgc", "randomk"), 5.0, "x_floor",
                "topk, topk_chunked (both protocols, the all-reduce one included), dgc, randomk <= 5x the floor"),
    SpeedTarget("mstopk", ("mstopk",), 10.0, "x_floor", "mstopk <= 10x the floor"),
    SpeedTarget("powersgd", ("powersgd",), 1.5, "ms", "PowerSGD rank 4 on ResNet-50's real shapes <= 1.5 ms",
                params=(("rank", 4),)),
    SpeedTarget("atomo", ("atomo",), 20.0, "ms", "ATOMO <= 20 ms (batched or randomized SVD)"),
)
#: repeatability target: two runs on the same kind of card agree within 10 % for every codec
AGREE_TOL = 0.10
#: the targets are set on this gradient, on a GPU
TARGET_MODEL = "resnet50"


def _codec_target(name: str, params: dict) -> tuple[Optional[str], Optional[float], str]:
    """(target key, limit, unit) for a codec row."""
    if name in ELEMENTWISE:
        return "elementwise", 3.0, "x_floor"
    if name in TOPK_FAMILY:
        return "topk", 10.0, "x_floor"
    if name == "powersgd" and (params or {}).get("rank") == 4:
        return "powersgd", 3.0, "ms"
    return None, None, ""


def _target_of(name: str | None, params: dict) -> SpeedTarget | None:
    for t in SPEED_TARGETS:
        if name in t.compressors and all((params or {}).get(k) == v for k, v in t.params):
            return t
    return None
