"""Quantizers: signSGD, EF-SignSGD, QSGD, TernGrad, natural compression, b-bit ``quantize``.

Table 2 of Agarwal et al. 2022 (MLSys 2022) lists SignSGD, QSGD and TernGrad as the
quantization methods; all of them are all-gather methods (their aggregation is not a sum
of payloads). ``quantize`` is Tirupati et al.'s fixed b-bit building block, written to be
all-reduce compatible: a shared scale makes integer levels of different workers addable.

Everything works on the flat float32 gradient and is meta-safe: payload shapes depend
only on ``numel`` and ``world_size``, never on values (see :meth:`Compressor.plan`).

Bits on the wire are the bits the method promises: every integer payload is bit-packed
(:func:`pack_fields`), b bits per element plus the scales. Summing b-bit values needs
headroom, so the all-reduce compatible quantizers (``quantize``, ``thc``) choose between two
protocols per world size p (:func:`cheaper_protocol`, visible in ``plan()`` as the kind of the
big collective):

* ``allgather``: every worker all-gathers its packed b-bit payload and the sum is taken
  locally; each worker puts exactly b bits per element on the wire, and a ring all-gather
  moves ``(p - 1)`` shards to each worker (Agarwal et al. 2022, App. B).
* ``allreduce``: the b-bit values, offset to be non-negative, travel in fields of
  ``w = b + ceil(log2 p)`` bits packed ``floor(63 / w)`` per int64 word ("packed lanes"): the
  sum of p workers cannot carry out of its field, so one ordinary integer all-reduce (NCCL
  and gloo both sum int64) adds every field at once. The widening is the sum's headroom and
  nothing else; a ring all-reduce moves ``2 (p - 1) / p`` buffers (Eq. 1).

``protocol="auto"`` takes the one that moves fewer bytes: all-gather iff ``p * b <= 2 * w'``
(``w'`` the packed lane bits per element), i.e. at p <= 2 for every b.
"""
from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from studykit.compressors.base import Compressor, flatten, reciprocal, unflatten
from studykit.compressors.registry import register

__all__ = ["pack_bits", "unpack_bits", "integer_sum_dtype", "field_width", "pack_fields", "unpack_fields",
           "MAX_FIELD_WIDTH",
           "pack_lanes", "unpack_lanes", "lane_bits", "cheaper_protocol", "PROTOCOLS",
           "SignSGD", "EFSignSGD", "QSGD", "TernGrad", "Natural", "Quantize"]

#: smallest scale a quantizer divides by (an all-zero gradient then encodes as zeros)
TINY = 1e-30
_EXACT_FP16_INT = 2048  # float16 holds every integer in [-2^11, 2^11] exactly
_PACK_MAGIC = 0x0102040810204080  # sum_j 2^(56 - 7j), j = 0..7


# ------------------------------------------------------------------ bit packing
def pack_bits(bits: torch.Tensor) -> torch.Tensor:
    """Pack a 1-D bool (or 0/1 uint8) tensor into ``ceil(numel / 8)`` uint8, 8 bits per byte,
    bit ``i % 8`` of byte ``i // 8`` (little-endian, as ``numpy.packbits(bitorder="little")``).

    Fast path: eight 0/1 bytes read as one int64 ``sum_i b_i 2^(8i)``; multiplying by
    ``sum_j 2^(56 - 7j)`` lands ``b_i`` on bit ``56 + i`` and every other partial product on a
    distinct lower bit (no carries), so ``>> 56`` is the packed byte: one multiply per 8 signs
    instead of a reduction.
    """
    bits = bits.reshape(-1)
    bits = bits.view(torch.uint8) if bits.dtype == torch.bool else bits.to(torch.uint8)  # bool -> uint8 is free
    pad = -bits.numel() % 8
    if pad:
        bits = F.pad(bits, (0, pad))
    if bits.storage_offset() % 8:  # an int64 view needs 8-byte alignment
        bits = bits.clone()
    lanes = bits.view(torch.int64)
    return ((lanes * _PACK_MAGIC) >> 56).to(torch.uint8)  # the cast keeps the low byte


def unpack_bits(packed: torch.Tensor, numel: int) -> torch.Tensor:
    """Inverse of :func:`pack_bits` on the last dim: ``(..., nbytes)`` uint8 -> ``(..., numel)`` uint8 0/1."""
    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    bits = (packed.unsqueeze(-1) >> shifts) & 1
    return bits.reshape(*packed.shape[:-1], -1)[..., :numel]


def field_width(max_value: int) -> int:
    """Bits of an unsigned field that holds every integer in ``[0, max_value]``."""
    return max(1, int(max_value).bit_length())


#: widest field :func:`pack_fields` / :func:`unpack_fields` take (unpacked values are int32; at width 32
#: the int32 with those 32 bits)
MAX_FIELD_WIDTH = 32


def _check_width(width, where: str) -> int:
    if isinstance(width, bool) or not isinstance(width, numbers.Integral) or not 1 <= width <= MAX_FIELD_WIDTH:
        raise ValueError(f"{where}: width must be an integer in [1, {MAX_FIELD_WIDTH}] (bits per field), "
                         f"got {width!r}")
    return int(width)


def _group_size(width: int) -> int:
    """Consecutive fields folded into one integer by :func:`_pack_rows`: 8 (a row), or the largest
    power of two whose fields fit 64 bits."""
    g = 1
    while g < 8 and 2 * g * width <= 64:
        g *= 2
    return g


def _mask(bits: int) -> int:
    """The low ``bits`` bits set, as an int64 constant (all 64: -1)."""
    return -1 if bits >= 64 else (1 << bits) - 1


def _pack_rows(v: torch.Tensor, width: int) -> torch.Tensor:
    """Rows of 8 fields (``v``: ``8 * rows`` non-negative integers ``< 2^width``) -> ``(rows, width)`` uint8,
    the packed layout, without a per-bit tensor.

    8 consecutive fields fill exactly ``width`` bytes. Pairs of neighbours are folded into one integer
    (``lo | hi << G``, int32 while it fits 31 bits, else int64) until a group holds 8 fields or the next
    fold would pass 64 bits; then each 64-bit little-endian word of a row is its groups shifted into
    place (a group that crosses a word boundary contributes its high bits to the next word; the bits
    are disjoint, so OR is the sum) and the row's bytes are the first ``width`` bytes of its words."""
    g, x = 1, v
    while g < _group_size(width):
        dtype = torch.int32 if 2 * g * width <= 31 else torch.int64
        x = x.view(-1, 2)
        hi = x[:, 1].to(dtype) << (g * width)
        hi |= x[:, 0]  # promoted in place (values >= 0)
        x, g = hi, 2 * g
    rows, n_groups, group_bits = v.numel() // 8, 8 // g, g * width
    n_words = -(-width // 8)
    if n_groups == 1:  # 8 * width <= 64: the group is the row's word
        words = x.to(torch.int64).view(rows, 1)
    else:
        x = x.view(rows, n_groups)
        words = torch.zeros(rows, n_words, dtype=torch.int64, device=v.device)
        for k in range(n_groups):
            first, shift = divmod(k * group_bits, 64)
            words[:, first] |= x[:, k] << shift if shift else x[:, k]  # bits past 63 fall off
            if shift + group_bits > 64:  # the rest goes to the next word (group_bits < 64: x >= 0)
                words[:, first + 1] |= x[:, k] >> (64 - shift)
    return words.view(torch.uint8)[:, :width]


def _unpack_rows(rows_bytes: torch.Tensor, width: int) -> torch.Tensor:
    """Inverse of :func:`_pack_rows` on ``(..., rows, width)`` uint8 -> ``(..., rows * 8)`` int32: the bytes
    of a row zero-padded to whole int64 words, each group of :func:`_group_size` fields cut from the
    (one or two) words it lies on, groups wider than 31 bits halved into int32 ones, and the fields
    shifted out of their group."""
    lead, rows = rows_bytes.shape[:-2], rows_bytes.shape[-2]
    g = _group_size(width)
    n_groups, group_bits = 8 // g, g * width
    n_words = -(-width // 8)
    words = F.pad(rows_bytes, (0, 8 * n_words - width)).view(torch.int64)  # F.pad: a fresh, aligned tensor
    if n_groups == 1:  # the padding bytes are zero: no mask
        groups = words
    else:
        groups = torch.empty(*lead, rows, n_groups, dtype=torch.int64, device=words.device)
        for k in range(n_groups):
            first, shift = divmod(k * group_bits, 64)
            col = words[..., first] >> shift if shift else words[..., first]
            if shift + group_bits > 64:  # its high bits are the next word's low bits
                col = (col & _mask(64 - shift)) | (words[..., first + 1] << (64 - shift))
            groups[..., k] = col & _mask(group_bits) if group_bits < 64 else col
    while g > 1 and group_bits > 31:  # halve: int64 groups -> int32 as soon as they fit (32 bits: the int32 bit pattern)
        half, g = group_bits // 2, g // 2
        halves = torch.empty(*groups.shape[:-1], 2 * groups.shape[-1], device=groups.device,
                             dtype=torch.int32 if half <= 32 else torch.int64)
        halves[..., 0::2] = groups & _mask(half)
        halves[..., 1::2] = (groups >> half) & _mask(half)
        groups, group_bits = halves, half
    groups = groups.to(torch.int32)
    if g > 1:
        groups = groups.unsqueeze(-1) >> torch.arange(0, group_bits, width, dtype=torch.int32, device=groups.device)
        groups &= _mask(width)
    return groups.reshape(*lead, rows * 8)


def _pack_words(values: torch.Tensor, width: int) -> torch.Tensor:
    """:func:`pack_fields` for any width by :func:`_pack_rows`; the last, partial row padded alone."""
    numel = values.numel()
    full = numel - numel % 8
    if width == MAX_FIELD_WIDTH and values.dtype in (torch.int32, torch.int16, torch.int8):
        values = values.to(torch.int64) & _mask(32)  # a signed bit pattern: its sign bit is the field's top bit
    out = torch.empty(-(-numel * width // 8), dtype=torch.uint8, device=values.device)
    if full:
        out[:full // 8 * width].view(-1, width).copy_(_pack_rows(values[:full], width))
    if numel > full:
        last = _pack_rows(F.pad(values[full:].to(torch.int64), (0, 8 - (numel - full))), width)
        out[full // 8 * width:] = last.reshape(-1)[:out.numel() - full // 8 * width]
    return out


def _unpack_words(packed: torch.Tensor, width: int, numel: int) -> torch.Tensor:
    """:func:`unpack_fields` for any width by :func:`_unpack_rows` (a partial last row zero-padded)."""
    lead = packed.shape[:-1]
    rows = -(-numel // 8)
    p = packed[..., :-(-numel * width // 8)]
    if p.shape[-1] < rows * width:
        p = F.pad(p, (0, rows * width - p.shape[-1]))
    return _unpack_rows(p.reshape(*lead, rows, width), width)[..., :numel]


def pack_fields(values: torch.Tensor, width: int) -> torch.Tensor:
    """Pack non-negative integers ``< 2^width`` (any shape, flattened; any integer dtype or bool) into
    ``ceil(numel * width / 8)`` uint8: value ``i`` on bits ``[i * width, (i + 1) * width)`` of the
    little-endian bit stream (as :func:`pack_bits` for ``width = 1``), ``width`` in 1..32. Values are
    not checked (that would cost a pass and a host sync): one outside ``[0, 2^width)`` corrupts its
    neighbours. The b-bit payloads of the quantizers and of THC's all-gather protocol: part of the
    encode-decode cost that Agarwal et al. 2022 (https://arxiv.org/abs/2103.00543), Sec. 3 and Table 2,
    find decisive."""
    width = _check_width(width, "pack_fields")
    if values.dtype.is_floating_point or values.dtype.is_complex:
        raise TypeError(f"pack_fields: values must be integers (any integer dtype or bool), got {values.dtype}")
    values = values.reshape(-1)
    if width == 8:
        return values.to(torch.uint8)
    if 8 % width == 0:  # whole fields per byte: shift and add
        per = 8 // width
        v = values.to(torch.uint8)
        pad = -v.numel() % per
        if pad:
            v = F.pad(v, (0, pad))
        shifts = torch.arange(0, 8, width, dtype=torch.uint8, device=v.device)
        return (v.view(-1, per) << shifts).sum(-1, dtype=torch.uint8)
    if width == 16:  # two bytes, little-endian
        return (values.to(torch.int32) - (values.to(torch.int32) >= 2**15).int() * 2**16).to(torch.int16).view(
            torch.uint8)
    return _pack_words(values, width)


def unpack_fields(packed: torch.Tensor, width: int, numel: int) -> torch.Tensor:
    """Inverse of :func:`pack_fields` on the last dim: ``(..., nbytes)`` uint8 -> ``(..., numel)`` int32
    (bytes past ``ceil(numel * width / 8)`` are ignored)."""
    width = _check_width(width, "unpack_fields")
    if packed.dtype != torch.uint8:
        raise TypeError(f"unpack_fields: packed must be uint8 (pack_fields' bytes), got {packed.dtype}")
    if isinstance(numel, bool) or not isinstance(numel, numbers.Integral) or numel < 0:
        raise ValueError(f"unpack_fields: numel must be an integer >= 0, got {numel!r}")
    if packed.dim() < 1:
        raise ValueError("unpack_fields: packed must have at least one dimension (its last one holds the bytes), "
                         "got a 0-d tensor")
    need = -(-numel * width // 8)
    if packed.shape[-1] < need:
        raise ValueError(f"unpack_fields: {numel} values of {width} bits need {need} bytes on the last dim, "
                         f"packed has {packed.shape[-1]}")
    if width == 8:
        return packed[..., :numel].to(torch.int32)
    if 8 % width == 0:
        shifts = torch.arange(0, 8, width, dtype=torch.uint8, device=packed.device)
        out = (packed.unsqueeze(-1) >> shifts) & ((1 << width) - 1)
        return out.reshape(*packed.shape[:-1], -1)[..., :numel].to(torch.int32)
    if width == 16:
        p = packed[..., :2 * numel]
        if p.storage_offset() % 2 or not p.is_contiguous():  # the int16 view needs 2-byte alignment
            p = p.clone(memory_format=torch.contiguous_format)
        return p.view(torch.int16).to(torch.int32) & 0xFFFF
    return _unpack_words(packed, width, int(numel))


#: usable bits of an int64 lane word (the sign bit stays clear, so no backend ever overflows)
_LANE_WORD_BITS = 63


def lane_bits(width: int) -> float:
    """Wire bits per element of :func:`pack_lanes` with fields of ``width`` bits."""
    return 64 / (_LANE_WORD_BITS // width)


def pack_lanes(values: torch.Tensor, width: int) -> torch.Tensor:
    """Non-negative integers (1-D) in fields of ``width`` bits, ``floor(63 / width)`` per int64 word.
    Fields sum independently under an integer all-reduce as long as no field's sum reaches
    ``2^width`` (the caller sizes ``width`` for the world size)."""
    per = _LANE_WORD_BITS // width
    v = values.reshape(-1).to(torch.int64)
    pad = -v.numel() % per
    if pad:
        v = F.pad(v, (0, pad))
    shifts = torch.arange(0, per * width, width, dtype=torch.int64, device=v.device)
    return (v.view(-1, per) << shifts).sum(-1)


def unpack_lanes(words: torch.Tensor, width: int, numel: int) -> torch.Tensor:
    """Inverse of :func:`pack_lanes`: int64 words -> ``(numel,)`` int64 field values."""
    per = _LANE_WORD_BITS // width
    shifts = torch.arange(0, per * width, width, dtype=torch.int64, device=words.device)
    return ((words.unsqueeze(-1) >> shifts) & ((1 << width) - 1)).reshape(-1)[:numel]


PROTOCOLS = ("auto", "allgather", "allreduce")


def cheaper_protocol(world_size: int, gather_bits: float, reduce_bits: float) -> str:
    """``"allgather"`` when a ring all-gather of ``gather_bits`` per element moves no more than a
    ring all-reduce of ``reduce_bits`` per element: ``(p - 1) g <= 2 (p - 1) / p r`` (Agarwal et
    al. 2022, arXiv 2103.00543, Eq. 1 and App. B), else ``"allreduce"``."""
    return "allgather" if world_size * gather_bits <= 2 * reduce_bits else "allreduce"


def _check_protocol(comp: Compressor, protocol) -> str:
    if protocol not in PROTOCOLS:
        raise comp.error(f"protocol must be one of {', '.join(map(repr, PROTOCOLS))}, got {protocol!r}")
    return protocol


def integer_sum_dtype(max_abs_sum: int, signed: bool) -> torch.dtype:
    """Smallest wire dtype that NCCL and gloo can all-reduce and that holds every integer sum
    of magnitude <= ``max_abs_sum`` exactly: int8/uint8, then float16 (exact integers up to
    2048; int16 is not supported by either backend), then int32."""
    if max_abs_sum <= (127 if signed else 255):
        return torch.int8 if signed else torch.uint8
    if max_abs_sum <= _EXACT_FP16_INT:
        return torch.float16
    if max_abs_sum <= 2**31 - 1:
        return torch.int32
    raise ValueError(f"integer sums up to {max_abs_sum} do not fit int32")


def stochastic_floor(x: torch.Tensor, generator: torch.Generator | None,
                     scale: torch.Tensor | float = 1.0, offset: float = 0.0) -> torch.Tensor:
    """``floor(x * scale + offset + u)``, u ~ U[0, 1): an integer-valued float32 tensor whose
    expectation is ``x * scale + offset`` (stochastic rounding to a neighbouring integer).
    ``scale`` may be a tensor broadcastable to ``x``; computed in place on the noise (few passes)."""
    v = torch.rand(x.shape, generator=generator, device=x.device)
    if offset:
        v.add_(offset)
    if isinstance(scale, torch.Tensor):
        v.addcmul_(x, scale)
    else:
        v.add_(x, alpha=scale)
    return v.floor_()


class _PrivateRandomness(Compressor):
    """Single-round codecs with per-worker randomness: remembers ``comm.rank`` for ``compress``."""

    _rank = 0  # direct compress() calls (profiling) act as worker 0

    def _reduce(self, tensors, comm, key, return_local):
        self._rank = comm.rank
        return super()._reduce(tensors, comm, key, return_local)

    def private_generator(self, device: torch.device) -> torch.Generator | None:
        return self.generator(device, self._rank)


def _stack(gathered, i: int) -> torch.Tensor:
    """Payload ``i`` of every worker, stacked in rank order: ``(world_size, ...)``."""
    return torch.stack([p[i] for p in gathered])


def _weighted_mean(values: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """``mean_w scales[w] * values[w]`` for values ``(world_size, numel)``, scales ``(world_size, 1)``.

    Broadcast and sum rather than ``scales @ values``: a GEMM with k = world_size runs a slow
    degenerate kernel on CUDA (~15x a memory pass at k = 1).
    """
    if values.shape[0] == 1:
        return values[0] * scales[0]
    return (values * scales).sum(0) / values.shape[0]


def _mean0(values: torch.Tensor) -> torch.Tensor:
    """Mean over the leading (worker) dim; no reduction kernel for one worker."""
    return values[0] if values.shape[0] == 1 else values.sum(0) / values.shape[0]


# ------------------------------------------------------------------- signSGD
class _Signs(Compressor):
    """Codecs that send one sign bit per element."""

    def sign_bits(self, flat: torch.Tensor) -> torch.Tensor:
        """``flat >= 0`` (zero counts as +1) packed 8 per byte, ``ceil(numel / 8)`` uint8."""
        return pack_bits(flat >= 0)


@register
class SignSGD(_Signs):
    """signSGD with majority vote (Bernstein et al., ICLR 2019, "signSGD with majority vote is
    communication efficient and fault tolerant"; Algorithm 1).

    Each worker sends ``sign(g)`` as 1 bit per element, packed 8 per byte (``ceil(numel/8)``
    bytes; ``g >= 0``, including zeros, is sent as +1). The server's vote ``sign(sum_w sign(g_w))``
    is what every worker gets back: the estimate is the plain majority sign (entries in
    {-1, 0, +1}), since signSGD uses the sign itself as the update direction and lets the
    learning rate set the step size. A tie (possible for an even world size) gives 0, i.e.
    ``sign(0) = 0``: that coordinate is not updated. Majority vote is not a sum, so the
    packed signs are all-gathered.
    """

    name = "signsgd"
    keeps_nonfinite = False  # sign(inf) is 1
    family = 'quantization'
    key_param = None
    bench_group = 'elementwise'
    allreduce_compatible = False

    def compress(self, flat, world_size):
        return [self.sign_bits(flat)], flat.numel()

    def decompress(self, payload, ctx):
        return unpack_bits(payload[0], ctx).float() * 2 - 1

    def combine(self, gathered, ctx):
        bits = unpack_bits(_stack(gathered, 0), ctx)
        # sum of the +-1 signs = 2 * positives - world_size; float32 counts are exact below 2^24
        positives = bits[0].float() if len(gathered) == 1 else bits.sum(0, dtype=torch.float32)
        return positives.sub_(len(gathered) / 2).sign_()


@register
class EFSignSGD(_Signs):
    """Scaled sign compression with error feedback (Karimireddy et al., ICML 2019, "Error
    feedback fixes SignSGD and other gradient compression schemes"; Algorithm 1, EF-SIGNSGD).

    ``C(p) = (||p||_1 / d) * sign(p)``: each worker sends packed signs (``g >= 0`` -> +1) plus
    one float32 scale, ``ceil(numel/8) + 4`` bytes, all-gathered; the estimate is the average
    of the workers' ``scale * sign``. Error feedback is on by default (``get`` gives it a memory).
    """

    name = "ef_signsgd"
    family = 'quantization'
    key_param = None
    bench_group = 'elementwise'
    allreduce_compatible = False
    default_error_feedback = True

    def compress(self, flat, world_size):
        scale = (flat.abs().sum() / flat.numel()).reshape(1)
        return [self.sign_bits(flat), scale], flat.numel()

    def decompress(self, payload, ctx):
        return (unpack_bits(payload[0], ctx).float() * 2 - 1) * payload[1]

    def combine(self, gathered, ctx):
        signs = unpack_bits(_stack(gathered, 0), ctx).float() * 2 - 1  # (world_size, numel)
        return _weighted_mean(signs, _stack(gathered, 1))


# ---------------------------------------------------------------------- QSGD
@register
class QSGD(_PrivateRandomness):
    """QSGD (Alistarh et al., NeurIPS 2017, "QSGD: Communication-efficient SGD via gradient
    quantization and encoding"; Sec. 3.1, Eq. for Q_s).

    Per bucket of ``bucket_size`` elements (0: the whole gradient is one bucket),
    ``Q_s(v_i) = ||v||_2 * sign(v_i) * xi_i`` where ``xi_i`` is ``|v_i| / ||v||_2`` rounded
    stochastically to one of its two neighbouring levels in ``{0, 1/s, ..., 1}``: unbiased.
    Wire: one float32 norm per bucket plus the signed level per element, offset to
    ``[0, 2s]`` and bit-packed in ``b = ceil(log2(2s + 1))`` bits (:func:`pack_fields`; 2 bits
    for s = 1, 4 bits for s = 4, 8 bits for s = 127), i.e.
    ``ceil(numel * b / 8) + 4 * ceil(numel / bucket_size)`` bytes; all-gathered (no Elias
    coding: the paper's variable-length code would make payload sizes data-dependent; the
    fixed-width packing is the paper's "b bits per level" baseline, Sec. 3.1). ``levels=4``
    (9 values, 4 bits) and 512-element buckets follow the paper's bucketed low-bit
    experiments.
    """

    name = "qsgd"
    keeps_nonfinite = False  # its fused GPU kernel may drop a NaN
    family = 'quantization'
    key_param = 'levels'
    bench_group = 'elementwise'
    allreduce_compatible = False
    stochastic = True
    unbiased = True

    def __init__(self, *, levels: int = 4, bucket_size: int = 512, seed: int = 0, allow_nonfinite: bool = False):
        super().__init__(seed=seed, allow_nonfinite=allow_nonfinite)
        self.levels = self.int_param("levels", levels, 1, 127)
        self.bucket_size = self.int_param("bucket_size", bucket_size, 0)

    def _buckets(self, numel: int) -> tuple[int, int]:
        size = self.bucket_size or numel
        return -(-numel // size), size

    @property
    def bits(self) -> int:
        """Packed bits per element: the signed level offset to ``[0, 2 * levels]``."""
        return field_width(2 * self.levels)

    def _pack(self, q: torch.Tensor) -> torch.Tensor:
        return pack_fields(q.to(torch.int32) + self.levels, self.bits)

    def _unpack(self, packed: torch.Tensor, numel: int) -> torch.Tensor:
        """Packed levels ``(..., nbytes)`` -> signed levels ``(..., numel)`` int8."""
        return (unpack_fields(packed, self.bits, numel) - self.levels).to(torch.int8)

    def compress(self, flat, world_size):
        numel = flat.numel()
        n_buckets, size = self._buckets(numel)
        x = F.pad(flat, (0, n_buckets * size - numel)).view(n_buckets, size)
        norms = torch.linalg.vector_norm(x, dim=1).clamp_min(TINY)
        # |x| / norm * s in [0, s], rounded stochastically to an integer level
        level = stochastic_floor(x.abs(), self.private_generator(flat.device), (self.levels / norms).unsqueeze(1))
        q = level.clamp_max_(self.levels).copysign_(x).reshape(-1)[:numel].to(torch.int8)
        return [norms, self._pack(q)], numel

    def _decode(self, norms, q, numel):
        """norms ``(..., n_buckets)``, q ``(..., numel)`` -> decoded ``(..., numel)`` float32."""
        n_buckets, size = self._buckets(numel)
        levels = F.pad(q.float(), (0, n_buckets * size - numel)).view(*q.shape[:-1], n_buckets, size)
        out = levels * (norms * reciprocal(self.levels)).unsqueeze(-1)
        return out.reshape(*q.shape[:-1], -1)[..., :numel]

    def decompress(self, payload, ctx):
        return self._decode(payload[0], self._unpack(payload[1], ctx), ctx)

    def _decode_mean(self, norms, q, numel):
        """Every worker's norms ``(world_size, n_buckets)`` and levels ``(world_size, numel)`` -> their
        mean decoding ``(numel,)``."""
        return _mean0(self._decode(norms, q, numel))

    def combine(self, gathered, ctx):
        return self._decode_mean(_stack(gathered, 0), self._unpack(_stack(gathered, 1), ctx), ctx)


# ------------------------------------------------------------------ TernGrad
@register
class TernGrad(_PrivateRandomness):
    """TernGrad (Wen et al., NeurIPS 2017, "TernGrad: Ternary gradients to reduce communication
    in distributed deep learning"; Eq. 2-3).

    ``g~ = s * sign(g) * b`` with ``s = max|g|`` and ``b_i ~ Bernoulli(|g_i| / s)``: unbiased.
    The scaler is per worker and per call (one bucket / flat gradient; the paper's layer-wise
    scalers and its optional gradient clipping are not applied). Wire, 2 bits per element:
    one float32 scaler plus two packed bitmaps, ``b`` and the sign (``g < 0``):
    ``4 + 2 * ceil(numel / 8)`` bytes, all-gathered.
    """

    name = "terngrad"
    family = 'quantization'
    key_param = None
    bench_group = 'elementwise'
    allreduce_compatible = False
    stochastic = True
    unbiased = True

    def compress(self, flat, world_size):
        scale = self.peak(flat)
        return [scale, *self.bitmaps(flat, scale)], flat.numel()

    def peak(self, flat: torch.Tensor) -> torch.Tensor:
        """The scaler ``s = max|g|`` (Eq. 2), a 1-element float32 tensor."""
        return flat.abs().amax().reshape(1)

    def bitmaps(self, flat: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The packed bitmaps ``b`` (``b_i ~ Bernoulli(|g_i| / s)``) and ``g < 0``."""
        u = torch.rand(flat.shape, generator=self.private_generator(flat.device), device=flat.device)
        keep = u * scale < flat.abs()  # P = |g| / s; never true when s = 0
        return pack_bits(keep), pack_bits(flat < 0)

    @staticmethod
    def _ternary(keep, negative, numel):
        """Packed bitmaps -> float32 values in {-1, 0, 1} (any leading dims)."""
        return unpack_bits(keep, numel).float() * (1 - 2 * unpack_bits(negative, numel).float())

    def decompress(self, payload, ctx):
        return self._ternary(payload[1], payload[2], ctx) * payload[0]

    def combine(self, gathered, ctx):
        ternary = self._ternary(_stack(gathered, 1), _stack(gathered, 2), ctx)  # (world_size, numel)
        return _weighted_mean(ternary, _stack(gathered, 0))


# ------------------------------------------------------------------- natural
@register
class Natural(_PrivateRandomness):
    """Natural compression (Horvath et al., MSML 2022 / arXiv:1905.10988, "Natural compression
    for distributed deep learning"; Eq. 3, C_nat).

    Each value ``t`` with ``2^a <= |t| < 2^(a+1)`` becomes ``sign(t) 2^a`` with probability
    ``(2^(a+1) - |t|) / 2^a`` and ``sign(t) 2^(a+1)`` otherwise: unbiased. On float32 bits this
    is "round the exponent up with probability mantissa / 2^23", which also treats zero and
    subnormals correctly (they round to 0 or 2^-126). Values whose rounding would overflow
    to infinity (>= 2^127) are rounded down instead (finite, slightly biased there).
    Wire, 9 bits per element: the biased float32 exponent as one uint8 per element plus the
    sign bits packed 8 per byte, ``numel + ceil(numel / 8)`` bytes, all-gathered.
    """

    name = "natural"
    family = 'quantization'
    key_param = None
    bench_group = 'elementwise'
    allreduce_compatible = False
    stochastic = True
    unbiased = True

    def compress(self, flat, world_size):
        bits = flat.view(torch.int32)
        exponent = (bits >> 23) & 0xFF
        mantissa = bits & 0x7FFFFF
        r = torch.randint(0, 1 << 23, flat.shape, generator=self.private_generator(flat.device),
                          dtype=torch.int32, device=flat.device)
        up = (r < mantissa) & (exponent < 254)  # 254 + 1 would be inf (and 255 is inf/nan)
        return [(exponent + up).to(torch.uint8), pack_bits(bits < 0)], flat.numel()

    @staticmethod
    def _decode(exponent, packed_signs, numel):
        magnitude = (exponent.to(torch.int32) << 23).view(torch.float32)
        return torch.where(unpack_bits(packed_signs, numel).bool(), -magnitude, magnitude)

    def decompress(self, payload, ctx):
        return self._decode(payload[0], payload[1], ctx)

    def combine(self, gathered, ctx):
        return _mean0(self._decode(_stack(gathered, 0), _stack(gathered, 1), ctx))


# ------------------------------------------------------------------ quantize
@register
class Quantize(Compressor):
    """Fixed b-bit uniform stochastic quantization, all-reduce compatible (the building block of
    Tirupati et al., Tirupati et al., "Distributed model training with dynamic gradient compression":
    static 8-bit and dynamic 4-16-bit quantization of the all-reduced gradients).

    Protocol (two rounds): (1) every worker all-gathers its ``max|g|`` (4 bytes) and all take
    the maximum ``M``, a scale shared by all; (2) each worker rounds ``g * L / M`` stochastically
    (unbiased) to an integer level in ``[-L, L]``, ``L = 2^(bits-1) - 1``, offsets it to
    ``[0, 2L]`` (b bits) and the levels are summed by one of the module's two protocols
    (``protocol``; ``"auto"`` picks the cheaper for the world size, :meth:`protocol_for`):

    * ``allgather``: packed b-bit levels, ``ceil(numel * b / 8) + 4`` bytes per worker at any p;
    * ``allreduce``: packed lanes of ``b + ceil(log2 p)`` bits (:func:`pack_lanes`),
      ``8 * ceil(numel / floor(63 / w)) + 4`` bytes.

    The average is ``(sum - p L) * M / (L * p)``. At p = 2 (Tirupati et al.'s two GPUs) 8 bits
    therefore send 1 byte per element, half of fp16's 2.
    """

    name = "quantize"
    family = 'quantization'
    key_param = 'bits'
    bench_group = 'elementwise'
    allreduce_compatible = True
    stochastic = True
    unbiased = True

    def __init__(self, *, bits: int = 8, protocol: str = "auto", seed: int = 0, allow_nonfinite: bool = False):
        super().__init__(seed=seed, allow_nonfinite=allow_nonfinite)
        self.bits = self.int_param("bits", bits, 2, 16)
        self.protocol = _check_protocol(self, protocol)

    @property
    def max_level(self) -> int:
        """L: levels are the integers in [-L, L]."""
        return 2 ** (self.bits - 1) - 1

    def lane_width(self, world_size: int) -> int:
        """Field bits of the ``allreduce`` protocol: the sum of p offset levels, ``<= 2 L p``."""
        return field_width(2 * self.max_level * world_size)

    def protocol_for(self, world_size: int) -> str:
        """The protocol a call with ``world_size`` workers runs (``"allgather"`` or ``"allreduce"``)."""
        if self.protocol != "auto":
            return self.protocol
        return cheaper_protocol(world_size, self.bits, lane_bits(self.lane_width(world_size)))

    def encode(self, flat: torch.Tensor, scale: torch.Tensor, world_size: int, rank: int = 0) -> torch.Tensor:
        """Integer levels in ``[-L, L]`` of ``flat`` against the shared ``scale`` (>= max|flat|), int32."""
        L = self.max_level
        level = stochastic_floor(flat, self.generator(flat.device, rank), L / scale).clamp_(-L, L)
        return level.to(torch.int32)

    def decode(self, levels: torch.Tensor, scale: torch.Tensor, world_size: int = 1) -> torch.Tensor:
        """(Summed) levels -> (summed) float32 values divided by ``world_size``; linear in ``levels``.
        Divisions as products with :func:`~studykit.compressors.base.reciprocal` (the same bits on every
        device and in the fused kernel)."""
        out = levels.float() * (scale * reciprocal(self.max_level))
        return out if world_size == 1 else out * reciprocal(world_size)

    def peak(self, flat: torch.Tensor) -> torch.Tensor:
        """This worker's ``max|g|`` (round 1 of the protocol), a 1-element float32 tensor."""
        return flat.abs().amax().reshape(1)

    def encode_packed(self, flat: torch.Tensor, scale: torch.Tensor, rank: int = 0) -> torch.Tensor:
        """The ``allgather`` protocol's payload: :meth:`encode`'s levels offset to ``[0, 2L]`` and packed
        in ``bits``-bit fields (:func:`pack_fields`), ``ceil(numel * bits / 8)`` uint8."""
        return pack_fields(self.encode(flat, scale, 1, rank) + self.max_level, self.bits)

    def decode_gathered(self, packed: Sequence[torch.Tensor], scale: torch.Tensor, numel: int) -> torch.Tensor:
        """Every worker's :meth:`encode_packed` payload (rank order) -> the average: the integer sum of
        the levels, then :meth:`decode`. One payload: that worker's own decoding."""
        world_size = len(packed)
        total = unpack_fields(torch.stack(list(packed)), self.bits, numel).sum(0, dtype=torch.int32)
        return self.decode(total - world_size * self.max_level, scale, world_size)

    def _reduce(self, tensors, comm, key, return_local):
        flat = flatten(tensors)
        world_size = comm.world_size
        scale = torch.cat(comm.all_gather(self.peak(flat))).amax().clamp_min(TINY)
        L, numel = self.max_level, flat.numel()
        if self.protocol_for(world_size) == "allgather":
            packed = self.encode_packed(flat, scale, comm.rank)
            local = self.decode_gathered([packed], scale, numel) if return_local else None
            avg = self.decode_gathered(comm.all_gather(packed), scale, numel)
            return unflatten(avg, tensors), (unflatten(local, tensors) if return_local else None)
        q = self.encode(flat, scale, world_size, comm.rank)
        local = self.decode(q, scale) if return_local else None
        width = self.lane_width(world_size)
        total = unpack_lanes(comm.all_reduce(pack_lanes(q + L, width)), width, numel).to(torch.int32)
        avg = self.decode(total - world_size * L, scale, world_size)
        return unflatten(avg, tensors), (unflatten(local, tensors) if return_local else None)

