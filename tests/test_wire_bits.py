"""Bits on the wire are the bits each quantizer promises (issue 14, item 1), at p = 2, 16, 64, 256.

``wire_bytes`` is what one worker puts into collectives. Every quantizer bit-packs: b bits per
element plus its scales. For the all-reduce compatible ones (``quantize``, ``thc``) the packed
b-bit all-gather keeps exactly that at every p; the packed-lane all-reduce widens each field by
the sum's headroom ``ceil(log2 p)`` bits, and ``protocol="auto"`` runs whichever moves fewer bytes.
"""
import math

import pytest
import torch

from studykit import compressors as C
from studykit.compressors.quantization import (cheaper_protocol, lane_bits, pack_fields, pack_lanes, unpack_fields,
                                               unpack_lanes)

WORLD_SIZES = (2, 16, 64, 256)
N = 2**16 + 3  # odd: packing must round up, not truncate


def _bits_per_element(comp, world_size, numel=N):
    return comp.wire_bytes([(numel,)], world_size) * 8 / numel


def _close(got_bytes, promised_bits, numel=N, scale_bytes=0):
    """Within 1% of ``promised_bits`` per element plus the scales."""
    promised = promised_bits * numel / 8 + scale_bytes
    return promised <= got_bytes <= 1.01 * promised + 1


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_signsgd_sends_one_bit(world_size):
    assert _close(C.get("signsgd").wire_bytes([(N,)], world_size), 1)
    assert _close(C.get("ef_signsgd").wire_bytes([(N,)], world_size), 1, scale_bytes=4)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_terngrad_sends_two_bits(world_size):
    assert _close(C.get("terngrad").wire_bytes([(N,)], world_size), 2, scale_bytes=4)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_natural_sends_nine_bits(world_size):
    assert _close(C.get("natural").wire_bytes([(N,)], world_size), 9)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("levels,bits", [(1, 2), (4, 4), (7, 4), (8, 5), (127, 8)])
def test_qsgd_packs_its_levels(world_size, levels, bits):
    comp = C.get("qsgd", levels=levels)
    assert comp.bits == bits
    assert _close(comp.wire_bytes([(N,)], world_size), bits, scale_bytes=4 * math.ceil(N / 512))


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("bits", range(2, 17))
def test_quantize_allgather_sends_b_bits(world_size, bits):
    comp = C.get("quantize", bits=bits, protocol="allgather")
    assert _close(comp.wire_bytes([(N,)], world_size), bits, scale_bytes=4)


@pytest.mark.parametrize("name", ["quantize", "thc"])
@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("bits", [2, 4, 8, 16])
def test_auto_protocol_is_the_cheaper_and_shows_in_the_plan(name, world_size, bits):
    comp = C.get(name, bits=bits)
    numel = comp.padded_numel(N) if name == "thc" else N
    proto = comp.protocol_for(world_size)
    width = comp.lane_width(world_size)
    assert world_size * 2 ** (bits - 1 if name == "quantize" else bits) <= 2**width  # the sum fits its field
    assert proto == cheaper_protocol(world_size, bits, lane_bits(width))
    assert proto == ("allgather" if world_size == 2 else "allreduce")
    big = comp.plan([(N,)], world_size)[-1]
    assert big.op == proto.replace("all", "all_")
    if proto == "allgather":  # b bits per element exactly
        assert _close(comp.wire_bytes([(N,)], world_size), bits, numel=numel, scale_bytes=4)
    else:  # b + ceil(log2 p) bits per field, floor(63 / w) fields per int64 word
        assert big.nbytes == 8 * math.ceil(numel / (63 // width))
        ring_ag = (world_size - 1) * math.ceil(numel * bits / 8)
        ring_ar = 2 * (world_size - 1) / world_size * big.nbytes
        assert ring_ar < ring_ag


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_thc_allgather_sends_b_bits_of_little_padding(world_size):
    comp = C.get("thc", bits=4, protocol="allgather")
    assert comp.padded_numel(N) <= N * (1 + 1 / 64)
    assert _close(comp.wire_bytes([(N,)], world_size), 4 * comp.padded_numel(N) / N, scale_bytes=4)


def test_tirupatis_static_8_bit_beats_fp16_at_two_gpus():
    shapes = [(25_557_032,)]  # ResNet-50's gradient
    assert C.get("quantize", bits=8).wire_bytes(shapes, 2) * 2 <= C.get("fp16").wire_bytes(shapes, 2) + 8


# ------------------------------------------------------------------ packing
@pytest.mark.parametrize("width", [1, 2, 3, 4, 5, 7, 8, 9, 12, 16])
@pytest.mark.parametrize("numel", [1, 7, 8, 33, 1000])
def test_pack_fields_round_trip(width, numel):
    g = torch.Generator().manual_seed(width * 1000 + numel)
    v = torch.randint(0, 2**width, (numel,), generator=g)
    packed = pack_fields(v, width)
    assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(numel * width / 8)
    assert torch.equal(unpack_fields(packed, width, numel), v.int())
    both = unpack_fields(torch.stack([packed, packed]), width, numel)  # (workers, nbytes) at once
    assert torch.equal(both[1], v.int())


@pytest.mark.parametrize("width,workers", [(3, 2), (9, 2), (12, 16), (24, 256), (31, 2)])
def test_packed_lanes_add_fieldwise(width, workers):
    top = (2**width - 1) // workers
    g = torch.Generator().manual_seed(width)
    vs = [torch.randint(0, top + 1, (101,), generator=g) for _ in range(workers)]
    words = sum(pack_lanes(v, width) for v in vs)
    assert torch.equal(unpack_lanes(words, width, 101), sum(vs))


# ------------------------------------------------------------------ the protocols agree
@pytest.mark.parametrize("name,params", [("quantize", {"bits": 4}), ("quantize", {"bits": 16}), ("thc", {}),
                                         ("thc", {"bits": 8, "rotation": "partial", "chunk": 64})])
@pytest.mark.parametrize("world_size", [2, 3])
def test_allgather_and_allreduce_give_the_same_numbers(name, params, world_size):
    grads = [torch.randn(300, generator=torch.Generator().manual_seed(r)) for r in range(world_size)]
    a = C.simulate(name, grads, protocol="allgather", **params)
    b = C.simulate(name, grads, protocol="allreduce", **params)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


@pytest.mark.parametrize("name,params", [("quantize", {"bits": 2}), ("thc", {"bits": 2})])
@pytest.mark.parametrize("protocol", ["allgather", "allreduce"])
@pytest.mark.slow
def test_unbiased_under_both_protocols(name, params, protocol):
    grads = [torch.randn(200, generator=torch.Generator().manual_seed(r)) for r in range(3)]
    mean = sum(grads) / 3
    seeds = 200
    acc = sum(C.simulate(name, grads, protocol=protocol, seed=s, **params)[0] for s in range(seeds)) / seeds
    one = C.simulate(name, grads, protocol=protocol, seed=0, **params)[0]
    assert (acc - mean).norm() < 3 * (one - mean).norm() / math.sqrt(seeds)
