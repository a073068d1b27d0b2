"""THC: Tensor Homomorphic Compression, with Han et al.'s saturation and partial rotation.

THC (Li et al., NSDI 2024) makes quantized gradients *addable*: after a randomized
Hadamard transform (RHT) every worker quantizes against the same range onto the same
integer grid, so the integers are summed by a plain all-reduce and decoded once. Seed
002 (Han et al. 2024, arXiv 2407.01378) speeds it up with *saturation* (a range narrower
than the max, so the grid is finer; outliers clip) and *partial rotation* (the Hadamard
transform within fixed-size chunks instead of over the whole padded gradient).
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from studykit.compressors.base import Compressor, flatten, unflatten
from studykit.compressors.quantization import (TINY, _check_protocol, cheaper_protocol, field_width,
                                               lane_bits, pack_fields, pack_lanes, stochastic_floor, unpack_fields,
                                               unpack_lanes)
from studykit.compressors.registry import register

__all__ = ["THC", "hadamard_matrix", "fwht", "rotate", "unrotate"]

#: largest dense Hadamard block one stage multiplies by (2^6 = 64): log2(n) / 6 stages
_MAX_RADIX_BITS = 6


@functools.lru_cache(maxsize=64)
def _hadamard_cached(size: int, device: str) -> torch.Tensor:
    i = torch.arange(size)
    # Sylvester order: H[i, j] = (-1)^popcount(i & j)
    bits = i.unsqueeze(1) & i.unsqueeze(0)
    parity = torch.zeros_like(bits)
    for b in range(max(size - 1, 1).bit_length()):
        parity ^= (bits >> b) & 1
    return (1 - 2 * parity).float().to(device)


def hadamard_matrix(size: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The dense ``size x size`` Sylvester Hadamard matrix (entries +-1, unnormalized), float32."""
    if size < 1 or size & (size - 1):
        raise ValueError(f"Hadamard size must be a power of two, got {size}")
    return _hadamard_cached(size, str(device))


def _radix_sizes(size: int) -> list[int]:
    """Split ``log2(size)`` into the fewest nearly equal stages of at most 2^6."""
    m = size.bit_length() - 1
    k = -(-m // _MAX_RADIX_BITS)
    return [1 << (m // k + (i < m % k)) for i in range(k)] if m else []


def rotate(x: torch.Tensor) -> torch.Tensor:
    """Unnormalized Walsh-Hadamard transform of every row of ``x`` ``(rows, size)``, returned
    flat in *rotated layout*: the ``(size, rows)`` transpose of the natural result.

    ``H_size = H_d1 (x) ... (x) H_dk`` (Kronecker, Sylvester order), so each stage multiplies
    one axis of ``x`` viewed as ``(rows, d1, ..., dk)`` by a dense ``H_d`` (d <= 64) and moves
    it to the front: one GEMM with a transposed operand, i.e. one pass over memory per stage,
    ``ceil(log2(size) / 6)`` stages, O(size log size) work. Elementwise consumers (quantize,
    sum) do not care about the order; :func:`unrotate` undoes both transform and layout.
    """
    rows, size = x.shape
    cur = x.reshape(-1)
    for d in reversed(_radix_sizes(size)):
        cur = stage(cur, d, inverse=False)
    return cur


def unrotate(y: torch.Tensor, rows: int, size: int) -> torch.Tensor:
    """Inverse layout of :func:`rotate` with the same unnormalized transform: rotated-layout
    ``y`` -> ``(rows, size)``; ``unrotate(rotate(x)) == size * x``."""
    cur = y.reshape(-1)
    for d in _radix_sizes(size):
        cur = stage(cur, d, inverse=True)
    return cur.view(rows, size)


def stage(cur: torch.Tensor, d: int, inverse: bool) -> torch.Tensor:
    """One Kronecker stage of :func:`rotate` on the flat ``cur``, one GEMM: ``(rest, d) -> (d, rest)``, d
    transformed (``inverse``, as :func:`unrotate`: ``(d, rest) -> (rest, d)``)."""
    if inverse:
        return (cur.view(d, -1).t() @ hadamard_matrix(d, cur.device)).reshape(-1)
    return (hadamard_matrix(d, cur.device) @ cur.view(-1, d).t()).reshape(-1)


def fwht(x: torch.Tensor) -> torch.Tensor:
    """Unnormalized fast Walsh-Hadamard transform along the last dim (a power of two):
    ``fwht(x) == x @ hadamard_matrix(n)`` and ``fwht(fwht(x)) == n * x``."""
    size = x.shape[-1]
    if size < 1 or size & (size - 1):
        raise ValueError(f"fwht needs a power-of-two last dimension, got {size}")
    rows = x.numel() // size
    return rotate(x.reshape(rows, size).float()).view(size, rows).t().reshape(x.shape)


@register
class THC(Compressor):
    """THC, Tensor Homomorphic Compression (Li et al., NSDI 2024, "THC: Accelerating distributed
    deep learning using tensor homomorphic compression"), uniform variant, with the
    saturation and partial-rotation optimizations of Han et al. 2024 (Han et al. 2024, Sec. on THC).

    Protocol per call, on the flat gradient zero-padded to the rotation size:

    1. Randomized Hadamard transform ``y = H D x / sqrt(size)`` with a random +-1 diagonal ``D``
       drawn from ``(seed, step)`` only, so every worker uses the same rotation.
       ``rotation="full"`` transforms the whole gradient when its size is a power of two, else
       it uses the largest power-of-two blocks that pad at most 1/64 of it (the next power of
       two would pad up to 100%: 31% for ResNet-50, and those zeros would travel);
       ``"partial"`` transforms each ``chunk``-element block (padding < ``chunk``), which cuts
       the padding and the work per element (log2 chunk instead of log2 n).
    2. Round 1: all-gather each worker's range ``t_w`` (one float32); all use ``M = max_w t_w``.
       ``t_w = max|y_w|`` by default; with ``saturation = s > 0``, ``t_w = min(max|y_w|, s * rms(y_w))``:
       after the RHT the coordinates are nearly Gaussian, so e.g. ``s = 3`` clips ~0.3% of
       them to +-M and makes the grid several times finer. Saturated values are clipped, so
       THC with saturation is *biased* (towards zero, on the outliers only); without it THC
       is unbiased.
    3. Round 2: each worker rounds ``(y + M) / delta``, ``delta = 2M / (2^bits - 1)``, stochastically
       (unbiased, private randomness) to an integer in ``[0, 2^bits - 1]``; the integers are
       summed by one of two protocols (``protocol``, ``"auto"`` picks the cheaper for the
       world size, :meth:`protocol_for`; see :mod:`studykit.compressors.quantization`):
       ``allgather`` of the b-bit integers bit-packed, or ``allreduce`` of packed lanes of
       ``b + ceil(log2 p)`` bits. The sum is decoded ``mean y = delta * sum / world_size - M``
       and rotated back.

    Wire: ``4 + ceil(padded_numel * bits / 8)`` bytes per worker with ``allgather`` (any p),
    ``4 + 8 * ceil(padded_numel / floor(63 / w))`` with ``allreduce``. THC's own aggregation
    (Li et al.) sums table values at a parameter server; the kit has no server path yet, so
    the two collective protocols above stand in for it.
    """

    name = "thc"
    family = 'quantization'
    key_param = 'bits'
    bench_group = 'elementwise'
    allreduce_compatible = True
    stochastic = True
    unbiased = True  # per instance: False when saturation is on

    def __init__(self, *, bits: int = 4, rotation: str = "full", chunk: int = 2**16, saturation: float = 0.0,
                 protocol: str = "auto", seed: int = 0, allow_nonfinite: bool = False):
        super().__init__(seed=seed, allow_nonfinite=allow_nonfinite)
        self.bits = self.int_param("bits", bits, 1, 16)
        self.protocol = _check_protocol(self, protocol)
        if rotation not in ("full", "partial"):
            raise self.error(f"rotation must be 'full' or 'partial', got {rotation!r}")
        self.rotation = rotation
        chunk = self.int_param("chunk", chunk, 2, 2**30)
        if chunk & (chunk - 1):
            raise self.error(f"chunk must be a power of two in [2, 2^30], got {chunk}")
        self.chunk = chunk
        if isinstance(saturation, bool) or not isinstance(saturation, (int, float)) \
                or not math.isfinite(saturation) or saturation < 0:
            raise self.error(f"saturation must be a finite number >= 0 (0 = off, range = max), got {saturation!r}")
        self.saturation = float(saturation)
        self.unbiased = self.saturation == 0

    # ------------------------------------------------------------- layout
    def rotation_size(self, numel: int) -> int:
        """Elements per Hadamard block for a gradient of ``numel`` elements."""
        full = 1 << max(numel - 1, 0).bit_length()  # next power of two
        if self.rotation == "partial":
            return min(self.chunk, full)
        size = full
        while size > 64 and -numel % size > numel // 64:  # halve until the padding is <= 1/64
            size //= 2
        return size

    def padded_numel(self, numel: int) -> int:
        size = self.rotation_size(numel)
        return -(-numel // size) * size

    def lane_width(self, world_size: int) -> int:
        """Field bits of the ``allreduce`` protocol: the sum of p integers, ``<= p (2^bits - 1)``."""
        return field_width(world_size * (2**self.bits - 1))

    def protocol_for(self, world_size: int) -> str:
        """The protocol a call with ``world_size`` workers runs (``"allgather"`` or ``"allreduce"``)."""
        if self.protocol != "auto":
            return self.protocol
        return cheaper_protocol(world_size, self.bits, lane_bits(self.lane_width(world_size)))

    def _sum(self, q: torch.Tensor, comm) -> torch.Tensor:
        """Sum of every worker's integers ``q`` (int32, ``[0, 2^bits - 1]``) by this world size's protocol."""
        numel, world_size = q.numel(), comm.world_size
        if self.protocol_for(world_size) == "allgather":
            packed = torch.stack(comm.all_gather(pack_fields(q, self.bits)))
            return unpack_fields(packed, self.bits, numel).sum(0, dtype=torch.int32)
        width = self.lane_width(world_size)
        return unpack_lanes(comm.all_reduce(pack_lanes(q, width)), width, numel).to(torch.int32)

    def _signs(self, size: int, device: torch.device) -> torch.Tensor:
        """Shared D / sqrt(size): the same for every worker (no rank) and every chunk."""
        d = torch.randint(0, 2, (size,), generator=self.generator(device), device=device)
        return (d * 2 - 1).float() * size**-0.5

    def forward(self, flat: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
        """Padded randomized Hadamard transform of the flat gradient (rotated layout)."""
        size, pad = signs.numel(), self.padded_numel(flat.numel()) - flat.numel()
        x = F.pad(flat, (0, pad)) if pad else flat
        return rotate(x.view(-1, size) * signs)

    def inverse(self, y: torch.Tensor, signs: torch.Tensor, numel: int) -> torch.Tensor:
        size = signs.numel()
        return (unrotate(y, y.numel() // size, size) * signs).reshape(-1)[:numel]

    # ----------------------------------------------------------- protocol
    def _range(self, y: torch.Tensor) -> torch.Tensor:
        """This worker's range t_w, shape (1,)."""
        amax = y.abs().amax()
        if self.saturation:
            rms = torch.linalg.vector_norm(y) * y.numel() ** -0.5
            amax = torch.minimum(amax, self.saturation * rms)
        return amax.reshape(1)

    def _reduce(self, tensors, comm, key, return_local):
        avg, local = self.reduce_flat(flatten(tensors), comm, return_local)
        return unflatten(avg, tensors), (unflatten(local, tensors) if return_local else None)

    def reduce_flat(self, flat: torch.Tensor, comm, return_local: bool):
        """Steps 1-3 on the flat float32 gradient: (average estimate, this worker's own decoding or None)."""
        numel, world_size = flat.numel(), comm.world_size
        signs = self._signs(self.rotation_size(numel), flat.device)
        y = self.forward(flat, signs)
        # round 1: the shared range
        bound = torch.cat(comm.all_gather(self._range(y))).amax().clamp_min(TINY)
        top = 2**self.bits - 1
        delta = bound * (2 / top)
        # grid index (y + M) / delta = y / delta + top / 2, rounded stochastically; clamping the
        # rounded index to [0, top] is the same as clamping y to [-M, M] first (saturation)
        q = stochastic_floor(y, self.generator(flat.device, comm.rank), 1 / delta, top / 2)
        q = q.clamp_(0, top).to(torch.int32)
        local = self.inverse(q.float() * delta - bound, signs, numel) if return_local else None
        # round 2: sum the integers
        mean_y = self._sum(q, comm).float() * (delta / world_size) - bound
        return self.inverse(mean_y, signs, numel), local
