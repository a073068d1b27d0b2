"""Sparsification: each worker sends k of its n gradient entries.

* ``topk``: the exact k largest magnitudes (Aji & Heafield 2017; Stich et al. 2018).
* ``randomk``: k positions drawn from randomness shared by all workers, so only the
  values travel and they can be all-reduced (Stich et al. 2018; Wangni et al. 2018).
* ``mstopk``: approximate top-k by a threshold binary search (Shi et al. 2021).
* ``dgc``: approximate top-k from a threshold estimated on a random sample (Lin et al. 2018).
* ``topk_chunked``: top-k inside fixed-size contiguous chunks, chunk-local indices
  (Han et al. 2024, Han et al. 2024).

Everything but ``randomk`` all-gathers a fixed-size payload of k fp32 values and k
indices (Agarwal et al. 2022, Table 2: only RandomK is all-reduce compatible). Payload
sizes depend on shapes alone and nothing branches on tensor values, so
:meth:`Compressor.plan` can run the protocol on ``meta`` tensors. Error feedback is on
by default for all five: Aji & Heafield, Stich et al. (top-k and random-k "with
memory"), Shi et al. and Lin et al. (local gradient accumulation) keep the unsent
residual, and TopK-chunked is run like the TopK it replaces.

Naming: ``ratio`` here is the *density* k/n, the constructor parameter the papers call
the compression ratio (1% -> ``ratio=0.01``); dense bytes / wire bytes is
``Compressor.compression_ratio()``.
"""
from __future__ import annotations

import math
from numbers import Real
from typing import Sequence

import torch
import torch.nn.functional as F

from studykit.compressors.base import Compressor, flatten, unflatten
from studykit.compressors.registry import register

__all__ = ["num_selected", "index_dtype", "TopK", "RandomK", "MSTopK", "DGC", "TopKChunked", "TopKChunkedAllReduce"]

#: largest element count whose positions fit int32 indices
_INT32_NUMEL = 2**31
#: int16 holds chunk offsets 0 .. 32767
_INT16_CHUNK = 2**15


def num_selected(numel: int, ratio: float) -> int:
    """k = max(1, ceil(ratio * numel)), at most ``numel`` (float noise such as
    0.07 * 100 = 7.000000000000001 is rounded off before the ceiling)."""
    return min(numel, max(1, math.ceil(round(ratio * numel, 6))))


def index_dtype(numel: int) -> torch.dtype:
    """int32 indices for fewer than 2**31 elements, else int64."""
    return torch.int32 if numel < _INT32_NUMEL else torch.int64


class _Sparse(Compressor):
    """Shared parts: the ``ratio`` (density) parameter and its validation."""

    def __init__(self, *, ratio: float = 0.01, seed: int = 0, allow_nonfinite: bool = False):
        super().__init__(seed=seed, allow_nonfinite=allow_nonfinite)
        if isinstance(ratio, bool) or not isinstance(ratio, Real) or not 0 < ratio <= 1:
            raise self.error(f"ratio must be in (0, 1], got {ratio!r}")
        #: fraction k/n of the entries sent (the density)
        self.ratio = float(ratio)

    def _fraction(self, name: str, value) -> float:
        if isinstance(value, bool) or not isinstance(value, Real) or not 0 < value <= 1:
            raise self.error(f"{name} must be in (0, 1], got {value!r}")
        return float(value)


def _positions(self: _Sparse, numel: int, count: int, device: torch.device) -> torch.Tensor:
    """``count`` positions (int64) drawn uniformly with replacement from ``[0, numel)`` by the generator of
    (seed, step): the same on every worker (RandomK's and DGC's ``positions``)."""
    return torch.randint(0, numel, (count,), generator=self.generator(device), device=device)


class _GatherSparse(_Sparse):
    """All-gather sparsifiers: payload = [k fp32 values, k indices]; ``select`` picks them."""

    allreduce_compatible = False
    default_error_feedback = True

    def select(self, flat: torch.Tensor, sizes: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """k (values, int64 positions) of the flat fp32 gradient; ``sizes`` are the tensor numels.

        Padding entries (fewer than k found) carry value 0 at a valid position.
        """
        raise NotImplementedError

    def _encode(self, flat: torch.Tensor, sizes: Sequence[int]):
        values, indices = self.select(flat, sizes)
        return [values, indices.to(index_dtype(flat.numel()))], flat.numel()

    def compress(self, flat, world_size):
        return self._encode(flat, [flat.numel()])

    def decompress(self, payload, ctx):
        values, indices = payload
        # index_add_ (not index_copy_) so zero-valued padding entries may repeat a position
        return torch.zeros(ctx, dtype=torch.float32, device=values.device).index_add_(0, indices, values.float())

    def combine(self, gathered, ctx):
        out = torch.zeros(ctx, dtype=torch.float32, device=gathered[0][0].device)
        # One index_add per worker, in rank order: positions are distinct within a worker
        # (zero padding may repeat one, adding 0), so on CUDA no two atomics race on a
        # value and every worker gets bit-identical sums.
        for values, indices in gathered:
            out.index_add_(0, indices, values.float())
        # the average: only the positions sent can be nonzero, so divide those (a repeated position writes
        # the same quotient, read before any write) instead of a pass over the whole gradient
        sent = torch.cat([indices for _, indices in gathered]) if len(gathered) > 1 else gathered[0][1]
        return out.index_put_((sent,), out[sent] / len(gathered))

    def _reduce(self, tensors, comm, key, return_local):
        # As Compressor._reduce, but select() also sees the tensor boundaries (TopK's layer scope).
        flat = flatten(tensors)
        payload, ctx = self._encode(flat, [t.numel() for t in tensors])
        per_payload = [comm.all_gather(p) for p in payload]
        avg = self.combine([list(ws) for ws in zip(*per_payload)], ctx)
        local = self.decompress(payload, ctx) if return_local else None
        return unflatten(avg, tensors), (unflatten(local, tensors) if return_local else None)


# --------------------------------------------------------------------------- TopK
@register
class TopK(_GatherSparse):
    """Top-k sparsification (Aji & Heafield 2017, "Sparse communication for distributed
    gradient descent"; Stich et al. 2018, "Sparsified SGD with memory").

    Sends the k = max(1, ceil(ratio * n)) entries of largest magnitude, exactly as
    ``torch.topk(|g|, k)`` picks them, as fp32 values plus int32 positions (int64 from
    2**31 elements): 8k bytes. ``scope="global"`` selects over the whole bucket;
    ``scope="layer"`` selects k_i = max(1, ceil(ratio * numel_i)) inside every tensor
    (one topk per tensor). Both papers keep the unsent rest as a residual, hence error
    feedback by default.
    """

    name = "topk"
    family = 'sparsification'
    key_param = 'ratio'
    bench_group = 'topk'
    SCOPES = ("global", "layer")

    def __init__(self, *, ratio: float = 0.01, scope: str = "global", seed: int = 0,
                 allow_nonfinite: bool = False):
        super().__init__(ratio=ratio, seed=seed, allow_nonfinite=allow_nonfinite)
        if scope not in self.SCOPES:
            raise self.error(f"scope must be one of {', '.join(map(repr, self.SCOPES))}, got {scope!r}")
        self.scope = scope

    @property
    def partition_invariant(self):  # type: ignore[override]
        return self.scope == "global"  # layer scope selects inside every tensor

    def largest(self, flat: torch.Tensor, k: int) -> torch.Tensor:
        """Positions of the ``k`` largest ``|flat|`` (in no particular order)."""
        return torch.topk(flat.abs(), k, sorted=False).indices

    def select(self, flat, sizes):
        if self.scope == "global" or len(sizes) == 1:
            indices = self.largest(flat, num_selected(flat.numel(), self.ratio))
            return flat[indices], indices
        parts, start = [], 0
        for numel in sizes:  # layer scope: a topk per tensor (different k_i, no batched form)
            piece = flat[start:start + numel]
            parts.append(torch.topk(piece.abs(), num_selected(numel, self.ratio), sorted=False).indices + start)
            start += numel
        indices = torch.cat(parts)
        return flat[indices], indices


# ------------------------------------------------------------------------- RandomK
@register
class RandomK(_Sparse):
    """Random-k sparsification (Stich et al. 2018, "Sparsified SGD with memory";
    Wangni et al. 2018, "Gradient sparsification for communication-efficient
    distributed optimization").

    k = max(1, ceil(ratio * n)) distinct positions, uniform over all k-subsets, drawn
    from a generator seeded by (seed, step) only (see :meth:`indices`), so every worker
    draws the same positions: only the k fp32 values travel, and they are all-reduced (Agarwal et al.
    2022, Table 2: the one all-reduce compatible sparsifier). Wire: 4k bytes.

    ``unbiased=False`` (default) sends the values as they are: a contraction, the
    setting of Stich et al., run with error feedback (on by default).
    ``unbiased=True`` scales by n/k, the unbiased estimator (Wangni et al.); use it
    with ``error_feedback=False``.
    """

    name = "randomk"
    keeps_nonfinite = False  # random indices may skip an inf/NaN
    family = 'sparsification'
    key_param = 'ratio'
    bench_group = 'topk'
    allreduce_compatible = True
    default_error_feedback = True
    stochastic = True

    def __init__(self, *, ratio: float = 0.01, unbiased: bool = False, seed: int = 0,
                 allow_nonfinite: bool = False):
        super().__init__(ratio=ratio, seed=seed, allow_nonfinite=allow_nonfinite)
        if not isinstance(unbiased, bool):
            raise self.error(f"unbiased must be True or False, got {unbiased!r}")
        self.unbiased = unbiased  # instance value shadows the class flag the tests read

    positions = _positions

    def indices(self, numel: int, device: torch.device) -> torch.Tensor:
        """This step's k distinct positions (int64), identical on every worker."""
        k = num_selected(numel, self.ratio)
        if k * 16 > numel:  # dense enough that a full permutation is the simple way
            return torch.randperm(numel, generator=self.generator(device), device=device)[:k]
        # Sparse case, without a permutation of all n (on a GPU it costs many times what
        # drawing about k positions does): draw m >= k positions with replacement and keep the first
        # k distinct ones in draw order. Each new distinct draw is uniform over the unseen
        # positions, so the result is a uniform k-subset. m exceeds k by the expected number
        # of repeats (~m^2 / 2n) plus 8 standard deviations, so fewer than k distinct
        # draws (then the first draw repeats) practically never happens.
        draws = k
        for _ in range(4):
            repeats = draws * draws / (2 * numel)
            draws = k + math.ceil(repeats + 8 * math.sqrt(repeats) + 8)
        drawn = self.positions(numel, draws, device)
        ordered, order = torch.sort(drawn, stable=True)  # stable: the earliest draw of a value first
        first = torch.ones(draws, dtype=torch.bool, device=device)
        first[1:] = ordered[1:] != ordered[:-1]
        first_in_draw_order = torch.empty_like(first).scatter_(0, order, first)
        return drawn[torch.nonzero_static(first_in_draw_order, size=k, fill_value=0).view(-1)]

    def compress(self, flat, world_size):
        indices = self.indices(flat.numel(), flat.device)
        values = flat[indices]
        if self.unbiased:
            values = values * (flat.numel() / indices.numel())
        return [values], (indices, flat.numel())

    def decompress(self, payload, ctx):
        indices, numel = ctx
        values = payload[0]
        return torch.zeros(numel, dtype=torch.float32, device=values.device).index_copy_(0, indices, values.float())


# -------------------------------------------------------------------------- MSTopK
@register
class MSTopK(_GatherSparse):
    """MSTopK (Shi et al. 2021, "Towards scalable distributed training of deep learning
    on public cloud clusters", MLSys; Agarwal et al. 2022 benchmark it as the scalable
    top-k).

    Instead of a sort, ``samplings`` rounds of binary search for a magnitude threshold
    between mean(|g|) and max(|g|): each round counts the entries at or above the
    midpoint. The search keeps the lowest threshold t1 reached with at most k entries
    (count c1) and the highest t2 with more than k (count c2). All c1 entries >= t1 are
    sent, then k - c1 entries drawn at random from the c2 - c1 in [t2, t1) (Shi et al.,
    Algorithm 1: "randomly select"; uniform without replacement: the band entries with the
    largest random keys, keys from the generator of (seed, step); :meth:`band_fill`):
    exactly k values and int32 positions, 8k bytes, as in the paper.

    No host synchronisation and fixed shapes throughout (bracket, counts and thresholds stay
    0-d device tensors moved by ``torch.where``; ``torch.nonzero_static``; a sort of a bounded
    candidate set), so it is meta-safe and a GPU never waits for the host. Cost: ``samplings``
    + ~8 passes over |g| and a sort of about k random keys (the fused search of
    :mod:`studykit.compressors.fastpath` does the ``samplings`` rounds in a few passes, the later ones and
    :meth:`_above` over the entries the second kept, and its keys come from the step on the device, so a
    CUDA graph of a call replays).
    """

    name = "mstopk"
    keeps_nonfinite = False  # a sampled threshold may drop an inf/NaN
    stochastic = True  # the fill from the band is random
    family = 'sparsification'
    key_param = 'ratio'
    bench_group = 'topk'

    def __init__(self, *, ratio: float = 0.01, samplings: int = 30, seed: int = 0,
                 allow_nonfinite: bool = False):
        super().__init__(ratio=ratio, seed=seed, allow_nonfinite=allow_nonfinite)
        self.samplings = self.int_param("samplings", samplings, 1)

    def select(self, flat, sizes):
        numel = flat.numel()
        k = num_selected(numel, self.ratio)
        mag, lo, hi = self._magnitudes(flat)
        count_dtype = index_dtype(numel)  # summing bools into int32 is ~15% faster than int64
        t1, c1, t2, c2, kept = self._search(mag, k, lo, hi, count_dtype)
        idx_above = self._above(mag, t1, k, kept)
        idx_band = self.band_fill(mag, t1, t2, k - c1, c2 - c1, k)
        return self._assemble(flat, idx_above, c1, idx_band)

    def _assemble(self, flat, idx_above, c1, idx_band):
        """The payload's k (values, int64 positions): the first c1 (0-d) of ``idx_above``, then the first k - c1
        of ``idx_band``; a slot whose position is ``numel`` (no entry) sends value 0 at position 0."""
        k = idx_above.numel()
        slot = torch.arange(k, device=flat.device)
        indices = torch.where(slot < c1, idx_above, idx_band[(slot - c1).clamp(min=0)])
        return _drop_fill(flat, indices)

    def _magnitudes(self, flat):
        """|g| and the search's bracket, its mean and its maximum (0-d tensors; NaN if an entry is NaN)."""
        mag = flat.abs()
        return mag, mag.mean(), mag.max()

    def _search(self, mag, k, lo, hi, count_dtype):
        """``samplings`` rounds of binary search for the threshold (Shi et al. 2021, Algorithm 1);
        returns the 0-d tensors (t1, c1, t2, c2): c1 = #(mag >= t1) <= k < c2 = #(mag >= t2), and what the
        search kept of ``mag`` for :meth:`_above` (None here: all of it; the fast path's search keeps fewer)."""
        # t1 starts at +inf (count 0); t2 at 0, which every entry but NaN reaches (count taken as numel)
        t1 = torch.full((), math.inf, device=mag.device)
        c1 = torch.zeros((), dtype=count_dtype, device=mag.device)
        t2 = torch.zeros((), device=mag.device)
        c2 = torch.full((), mag.numel(), dtype=count_dtype, device=mag.device)
        for _ in range(self.samplings):
            mid = (lo + hi) / 2
            count = (mag >= mid).sum(dtype=count_dtype)
            few = count <= k
            hi, lo = torch.where(few, mid, hi), torch.where(few, lo, mid)
            t1, c1 = torch.where(few, mid, t1), torch.where(few, count, c1)
            t2, c2 = torch.where(few, t2, mid), torch.where(few, c2, count)
        return t1, c1, t2, c2, None

    def _above(self, mag, t1, k: int, kept=None) -> torch.Tensor:
        """The first ``k`` positions (ascending, int64) with ``mag >= t1`` (there are c1 <= k), ``numel`` in the
        unused slots. ``kept``: what :meth:`_search` kept of ``mag`` (a set holding every entry >= t1), or None
        for all of it; the reference reads all of ``mag`` either way."""
        return torch.nonzero_static(mag >= t1, size=k, fill_value=mag.numel()).view(-1)

    def keys(self, numel: int, device: torch.device) -> torch.Tensor:
        """This step's random keys of the band fill: ``numel`` float32 uniform in [0, 1) from the generator of
        (seed, step), the same on every call of a step."""
        return torch.rand(numel, generator=self.generator(device), device=device)

    def band_fill(self, mag, t1, t2, want, band_size, k: int) -> torch.Tensor:
        """Positions (int64, k slots) of the band [t2, t1) entries with the largest random keys,
        largest first: the first ``want`` (0-d tensor, at most k) are a uniform random
        ``want``-subset of the band (Shi et al. 2021, Algorithm 1's random selection); slots
        without a band entry hold ``numel``.

        Every entry draws a key (``torch.rand`` from the generator of (seed, step)); only band
        entries whose key is in the top (want + margin) / band_size fraction become candidates,
        at most ``k + 2 margin`` of them (margin = 8 sqrt(k) + 16: the candidate count is a binomial
        with mean want + margin, so fewer than ``want`` or more than the capacity lie 8 standard
        deviations out, probability below 1e-14), and the candidates are sorted by key. The
        candidates hold the band's ``want`` largest keys, so the pick is that of a top-k of the keys
        over the whole band, without a top-k over all n entries (many times the memory floor on a GPU).
        """
        numel = mag.numel()
        margin = 8 * math.sqrt(k) + 16
        capacity = min(numel, k + 2 * math.ceil(margin))
        # band_size >= want + 1 (c2 > k >= ... ) except with NaNs, where a small q only adds candidates
        q = 1 - (want + margin) / band_size.clamp(min=1)
        idx, ckeys = self.band_candidates(mag, t1, t2, q.float(), capacity)
        ordered, order = torch.sort(ckeys, descending=True)
        return torch.where(ordered >= 0, idx[order], numel)[:k]  # capacity >= k as numel >= k

    def band_candidates(self, mag, t1, t2, q, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The first ``capacity`` entries (ascending positions, int64; ``numel`` in unused slots) with
        t2 <= mag < t1 whose key (:meth:`keys`) reaches ``q`` (0-d float32), and their keys (-1 in unused slots)."""
        numel = mag.numel()
        keys = self.keys(numel, mag.device)
        candidate = (mag >= t2) & (mag < t1) & (keys >= q)
        idx = torch.nonzero_static(candidate, size=capacity, fill_value=numel).view(-1)
        return idx, torch.where(idx < numel, keys[idx.clamp(max=numel - 1)], -1.0)


def _drop_fill(flat: torch.Tensor, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Fill positions (== numel) become value 0 at position 0, so the payload keeps its size."""
    valid = indices < flat.numel()
    indices = torch.where(valid, indices, 0)
    return torch.where(valid, flat[indices], 0.0), indices


# ----------------------------------------------------------------------------- DGC
@register
class DGC(_GatherSparse):
    """Deep Gradient Compression's sparsifier (Lin et al. 2018, ICLR).

    In: the paper's sampled threshold and hierarchical selection. |g| is sampled at
    s = max(sample_ratio * n, 4096) random positions (all n when n is smaller), the
    threshold is the magnitude exceeded by 1.5k/n of the sample (top-k on the sample),
    the entries at or above it (up to 2k, first by position) are candidates, and an
    exact top-k among the candidates sends exactly k values and int32 positions (8k
    bytes; when fewer than k pass, zeros pad the payload). Aiming at 1.5k candidates
    replaces the paper's threshold re-adjustment loop, which has data-dependent shapes.
    When 2k >= n it is plain top-k. Local gradient accumulation = error feedback (on
    by default).

    Out (they belong to the optimizer, not the compressor): momentum correction,
    momentum factor masking, local gradient clipping, and the warm-up schedule of the
    sparsity.
    """

    name = "dgc"
    keeps_nonfinite = False  # a sampled threshold may drop an inf/NaN
    family = 'sparsification'
    key_param = 'ratio'
    bench_group = 'topk'
    stochastic = True
    MIN_SAMPLES = 4096  # below this the sampled threshold is too noisy
    TARGET = 1.5        # threshold aims at TARGET * k candidates ...
    CAPACITY = 2        # ... of which at most CAPACITY * k are kept

    def __init__(self, *, ratio: float = 0.01, sample_ratio: float = 0.01, seed: int = 0,
                 allow_nonfinite: bool = False):
        super().__init__(ratio=ratio, seed=seed, allow_nonfinite=allow_nonfinite)
        self.sample_ratio = self._fraction("sample_ratio", sample_ratio)

    positions = _positions

    def select(self, flat, sizes):
        numel = flat.numel()
        k = num_selected(numel, self.ratio)
        capacity = min(numel, self.CAPACITY * k)
        if capacity == numel:  # shape-only branch: candidates would be everything
            indices = torch.topk(flat.abs(), k, sorted=False).indices
            return flat[indices], indices
        samples = min(numel, max(math.ceil(self.sample_ratio * numel), self.MIN_SAMPLES))
        if samples == numel:  # exact threshold: the k-th largest magnitude
            threshold = self._kth_largest(flat, k)
        else:
            threshold = self._sample_kth(flat, samples, min(samples, math.ceil(self.TARGET * k * samples / numel)))
        cand, mags = self._candidates(flat, threshold, capacity)
        return self._take(flat, cand, self._top_candidates(mags, k))

    def _kth_largest(self, x, rank):
        """The ``rank``-th largest magnitude of ``x`` (NaN counts as the largest): the candidates' threshold."""
        return torch.topk(x.abs(), rank, sorted=False).values.min()

    def _sample_kth(self, flat, samples, rank):
        """The ``rank``-th largest magnitude of ``flat`` at ``samples`` random positions (:meth:`positions`)."""
        return self._kth_largest(flat[self.positions(flat.numel(), samples, flat.device)], rank)

    def _candidates(self, flat, threshold, capacity):
        """The first ``capacity`` positions (ascending) with ``|flat| >= threshold``, ``numel`` in the unused
        slots, and the magnitudes there, 0 in the unused slots (at or below every candidate's)."""
        cand = torch.nonzero_static(flat.abs() >= threshold, size=capacity, fill_value=flat.numel()).view(-1)
        valid = cand < flat.numel()
        return cand, torch.where(valid, flat[torch.where(valid, cand, 0)].abs(), 0.0)

    def _top_candidates(self, mags, k):
        """Slots (into the candidates) of the ``k`` largest magnitudes ``mags``."""
        return torch.topk(mags, k, sorted=False).indices

    def _take(self, flat, cand, top):
        """The payload of the candidates in slots ``top``: their values and positions (value 0 at position 0 for
        an unused slot)."""
        return _drop_fill(flat, cand[top])


# -------------------------------------------------------------------- TopK-chunked
class _Chunked(_Sparse):
    """Shared by the chunk-wise sparsifiers: the gradient cut into contiguous chunks of ``chunk`` entries."""

    def __init__(self, *, ratio: float = 0.01, chunk: int = 4096, seed: int = 0, allow_nonfinite: bool = False):
        super().__init__(ratio=ratio, seed=seed, allow_nonfinite=allow_nonfinite)
        self.chunk = self.int_param("chunk", chunk, 1, _INT32_NUMEL)

    def chunks(self, numel: int) -> tuple[int, int]:
        """(chunk length, number of chunks) for ``numel`` elements (the last chunk may be short)."""
        length = min(self.chunk, numel)
        return length, -(-numel // length)


@register
class TopKChunked(_Chunked):
    """TopK-chunked (Han et al. 2024, "Beyond throughput and compression ratios", Han et al. 2024).

    The flat gradient is cut into contiguous chunks of ``chunk`` elements (the last one
    zero-padded; one chunk of n when n < chunk) and the top k_c = max(1, ceil(ratio *
    chunk)) magnitudes of each chunk are kept: one batched ``torch.topk`` over a
    [num_chunks, chunk] view, so every selection reads one contiguous block. Positions
    travel as offsets inside the chunk, int16 for chunk <= 32768 (else int32): 6 bytes
    per kept entry instead of 8. The int16 offsets go on the wire as their bytes (a
    uint8 view of 2 bytes per entry), since NCCL and gloo have no 16-bit integer type.

    Default chunk = 4096 (16 KiB of fp32): on a GPU the batched topk gets faster as the chunk
    grows until it levels off, and 4096 is the smallest chunk on that plateau (ResNet-50's
    gradient at ratio 0.01); its k_c = 41 keeps 1.001% (chunks of 1024 keep 11, 1.07%). Error feedback by
    default, as for top-k.
    """

    name = "topk_chunked"
    family = 'sparsification'
    key_param = 'ratio'
    bench_group = 'topk'
    allreduce_compatible = False
    default_error_feedback = True

    def geometry(self, numel: int) -> tuple[int, int, int]:
        """(chunk length, number of chunks, entries kept per chunk) for ``numel`` elements."""
        length, chunks = self.chunks(numel)
        return length, chunks, num_selected(length, self.ratio)

    def compress(self, flat, world_size):
        numel = flat.numel()
        values, offsets = self.chunk_topk(flat, *self.geometry(numel))
        # int16 travels as its bytes: neither NCCL nor gloo has a 16-bit integer type
        offsets = offsets.to(self.offset_dtype(numel)).reshape(-1)
        return [values.reshape(-1), offsets.view(torch.uint8) if offsets.dtype == torch.int16 else offsets], numel

    def chunk_topk(self, flat: torch.Tensor, length: int, chunks: int, per_chunk: int):
        """The ``per_chunk`` largest ``|flat|`` of every ``length``-element chunk (the last zero-padded):
        values and in-chunk offsets, ``(chunks, per_chunk)`` each (any layout that reshapes to it)."""
        rows = F.pad(flat, (0, chunks * length - flat.numel())).view(chunks, length)
        offsets = torch.topk(rows.abs(), per_chunk, dim=1, sorted=False).indices
        return rows.gather(1, offsets), offsets

    def offset_dtype(self, numel: int) -> torch.dtype:
        """int16 when every offset fits (chunk length <= 32768), else int32."""
        return torch.int16 if self.geometry(numel)[0] <= _INT16_CHUNK else torch.int32

    def _scatter(self, out: torch.Tensor, payload) -> None:
        values, offsets = payload
        if offsets.dtype == torch.uint8:
            offsets = offsets.view(torch.int16)
        out.scatter_add_(1, offsets.long().view(out.shape[0], -1), values.float().view(out.shape[0], -1))

    def _empty(self, numel: int, device) -> torch.Tensor:
        length, chunks, _ = self.geometry(numel)
        return torch.zeros(chunks, length, dtype=torch.float32, device=device)

    def decompress(self, payload, ctx):
        out = self._empty(ctx, payload[0].device)
        self._scatter(out, payload)
        return out.view(-1)[:ctx]

    def combine(self, gathered, ctx):
        if len(gathered) == 1:
            return self.decompress(gathered[0], ctx)
        out = self._empty(ctx, gathered[0][0].device)
        for payload in gathered:  # rank order; offsets distinct within a row: deterministic
            self._scatter(out, payload)
        return out.view(-1)[:ctx].div_(len(gathered))


# ------------------------------------------------------- TopK-chunked, all-reduce compatible
@register
class TopKChunkedAllReduce(_Chunked):
    """TopK-chunked as Han et al. 2024 define it ("Beyond Throughput and Compression Ratios:
    Towards High End-to-end Utility of Gradient Compression", arXiv 2407.01378,
    https://arxiv.org/abs/2407.01378; the TopK case study): all-reduce compatible, because the
    workers *agree* on which contiguous chunks to send.

    Protocol, on the flat gradient cut into ``chunk``-element chunks (the last one zero-padded):

    1. every worker computes the squared L2 norm of each chunk; one all-reduce of those
       ``num_chunks`` fp32 numbers (``4 * ceil(n / chunk)`` bytes) gives the same summed
       norms to all;
    2. all pick the same ``K = max(1, ceil(ratio * num_chunks))`` chunks of largest summed norm
       (``torch.topk`` on identical input), copy them into one contiguous ``K * chunk`` buffer
       and all-reduce it (fp32): the sum of the workers' chunks, as dense all-reduce would give
       for those entries. The other chunks are zero in the estimate.

    Wire: ``4 * (num_chunks + K * chunk)`` bytes, about ``4 * ratio * n``: no indices travel.
    Selection reads and copies whole chunks (contiguous memory, no per-element scatter).
    Error feedback by default (the unsent chunks stay in the residual). The per-chunk
    all-gather variant (top-k inside every chunk, offsets sent) is ``topk_chunked``.
    """

    name = "topk_chunked_allreduce"
    family = "sparsification"
    key_param = "ratio"
    bench_group = "topk"
    allreduce_compatible = True
    default_error_feedback = True

    def geometry(self, numel: int) -> tuple[int, int, int]:
        """(chunk length, number of chunks, chunks sent) for ``numel`` elements."""
        length, chunks = self.chunks(numel)
        return length, chunks, num_selected(chunks, self.ratio)

    def _rows(self, flat: torch.Tensor) -> torch.Tensor:
        length, chunks, _ = self.geometry(flat.numel())
        pad = chunks * length - flat.numel()
        return (F.pad(flat, (0, pad)) if pad else flat).view(chunks, length)

    def _reduce(self, tensors, comm, key, return_local):
        flat = flatten(tensors)
        numel, world_size = flat.numel(), comm.world_size
        length, chunks, sent = self.geometry(numel)
        rows = self._rows(flat)
        # round 1: agree on the chunks (summed squared norms are identical on every worker)
        norms = comm.all_reduce(rows.pow(2).sum(1))
        chosen = torch.topk(norms, sent, sorted=False).indices
        picked = rows.index_select(0, chosen)  # a contiguous (sent, length) copy
        local = None
        if return_local:
            local = torch.zeros_like(rows).index_copy_(0, chosen, picked).view(-1)[:numel]
        # round 2: one all-reduce of the chosen chunks
        summed = comm.all_reduce(picked)
        out = torch.zeros(chunks, length, dtype=torch.float32, device=flat.device)
        out.index_copy_(0, chosen, summed if world_size == 1 else summed / world_size)
        avg = out.view(-1)[:numel]
        return unflatten(avg, tensors), (unflatten(local, tensors) if return_local else None)
