"""Fused kernels of MSTopK (Shi et al. 2021, https://arxiv.org/abs/2010.10458): |g| with its mean and maximum in
one pass (:func:`abs_mean_max`), the binary search for the threshold a few steps per pass (:func:`mstopk_search`), and
the band fill's keys and candidates (:func:`uniform_keys`, :func:`band_candidates`) and the payload from both
(:func:`mstopk_assemble`); its certain entries are compacted from the entries the search kept
(:func:`above_from_kept`) or by :func:`~studykit.compressors._fast.topk.compact_ge`. Each kernel next to the
function that launches it."""
from __future__ import annotations

import functools

import torch

from studykit.compressors._fast import common
from studykit.compressors._fast.common import _BLOCK, HAVE_TRITON, _launch, tl, triton

#: the names :mod:`studykit.compressors._fast` re-exports from here
__all__ = ["abs_mean_max", "_MSTOPK_BITS", "mstopk_search", "above_from_kept", "uniform_keys", "band_candidates",
           "mstopk_assemble"]

if HAVE_TRITON:
    from studykit.compressors._fast.common import _jit_seeded, _ld, _philox_seed, _st, _uniform8
    from studykit.compressors._fast.topk import _mark_block, _mask_compact_kernel


# ====================================================================== |g|, its mean and its maximum
if HAVE_TRITON:
    @triton.jit
    def _abs_mean_max_kernel(x_ptr, out_ptr, sums_ptr, max_ptr, n, start, MASKED: tl.constexpr,
                             BLOCK: tl.constexpr):
        """out = |x|; sums[p] = block p's sum of |x|; max_ptr[0] (int32, 0 before) = the largest |x|'s float bits
        (one atomic a program: the bits of non-negative floats order as the floats, and a NaN's lie above
        +inf's)."""
        p = start // BLOCK + tl.program_id(0)
        idx = p * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        v = tl.abs(_ld(x_ptr + idx, m, 0.0, MASKED))
        _st(out_ptr + idx, v, m, MASKED)
        tl.store(sums_ptr + p, tl.sum(v, axis=0))
        tl.atomic_max(max_ptr, tl.max(v.to(tl.int32, bitcast=True), axis=0), sem="relaxed")


def abs_mean_max(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x.abs(), mean, max)`` of a flat fp32 ``x`` in one pass over it (and a sum over one number per block of
    :data:`~studykit.compressors._fast.common._BLOCK`), the mean and the maximum 0-d tensors. The maximum is exact
    (NaN if an entry is NaN, as ``torch.max``'s); the mean is summed per block and then over the blocks, a fixed
    order (so deterministic), which rounds differently from ``x.abs().mean()`` in the last bits."""
    n = x.numel()
    if n == 0:
        raise ValueError("abs_mean_max: x is empty (no mean or maximum of nothing)")
    out = torch.empty_like(x)
    sums = torch.empty(triton.cdiv(n, _BLOCK), dtype=torch.float32, device=x.device)
    bits = torch.zeros(1, dtype=torch.int32, device=x.device)
    _launch(_abs_mean_max_kernel, n, n, _BLOCK, x, out, sums, bits, n, BLOCK=_BLOCK)
    return out, sums.sum() / n, bits.view(torch.float32).view(())


# ====================================================================== MSTopK's threshold search
if HAVE_TRITON:
    @triton.jit
    def _mstopk_leaf(v, lo, hi, BITS: tl.constexpr):
        """The leaf of the 2**BITS-leaf binary-search tree below [lo, hi] that each of ``v`` ends in: BITS levels
        by the same fp32 midpoints (l + h) / 2 the search computes, right when v >= mid (entries below lo end in
        leaf 0, those at or above hi in the last leaf, NaN in leaf 0)."""
        lo_v = tl.zeros(v.shape, dtype=tl.float32) + lo
        hi_v = tl.zeros(v.shape, dtype=tl.float32) + hi
        leaf = tl.zeros(v.shape, dtype=tl.int32)
        for _ in tl.static_range(BITS):
            mid = (lo_v + hi_v) * 0.5  # == (lo + hi) / 2: halving is exact
            right = v >= mid
            lo_v = tl.where(right, mid, lo_v)
            hi_v = tl.where(right, hi_v, mid)
            leaf = leaf * 2 + right.to(tl.int32)
        return leaf

    @triton.jit
    def _mstopk_keep(v, m, lo, keep_ptr, kept_ptr):
        """Append the entries of ``v`` (where ``m``) at or above ``lo`` to keep_ptr, in any order: one atomic
        per block on the count kept_ptr[0] (none for a block without such an entry)."""
        keep = m & (v >= lo)
        c = tl.sum(keep.to(tl.int32), axis=0)
        off = tl.atomic_add(kept_ptr, c, mask=c > 0, sem="relaxed")
        slot = off + tl.cumsum(keep.to(tl.int32), axis=0) - 1
        tl.store(keep_ptr + slot, v, mask=keep)

    @triton.jit
    def _mstopk_hist_kernel(mag_ptr, n, st_ptr, hist_ptr, counts_ptr, words_ptr, start, MASKED: tl.constexpr,
                            BITS: tl.constexpr, BLOCK: tl.constexpr, ITERS: tl.constexpr, MARK: tl.constexpr):
        """Histogram over the 2**BITS leaves of the binary-search tree below [lo, hi] = st[0:2]
        (:func:`_mstopk_leaf`); MARK: which entries are at or above lo, as ``_mask_ge_kernel``'s bitmask and
        counts per block of BLOCK (block p's bit j of word i: entry p * BLOCK + 32 i + j), for
        ``_mask_compact_kernel`` to compact in order."""
        lo = tl.load(st_ptr)
        hi = tl.load(st_ptr + 1)
        first = start // BLOCK + tl.program_id(0) * ITERS  # this program's first block
        acc = tl.zeros([1 << BITS], dtype=tl.int32)
        for it in range(ITERS):
            idx = (first + it) * BLOCK + tl.arange(0, BLOCK)
            m = idx < n
            v = _ld(mag_ptr + idx, m, 0.0, MASKED)
            leaf = _mstopk_leaf(v, lo, hi, BITS)
            # every leaf counted (leaving out leaf 0, never read, made the pass 1.5x slower on an H200: its mask
            # costs more than the bins it spares; archive/measurements/codec_kernels_h200/mstopk_leaf0)
            if MASKED:
                acc += tl.histogram(leaf, 1 << BITS, mask=m)
            else:
                acc += tl.histogram(leaf, 1 << BITS)
            if MARK:
                _mark_block((v >= lo) & m, first + it, counts_ptr, words_ptr, BLOCK)
        tl.atomic_add(hist_ptr + tl.arange(0, 1 << BITS), acc, sem="relaxed")

    @triton.jit
    def _mstopk_kept_hist_kernel(src_ptr, n_ptr, st_ptr, hist_ptr, keep_ptr, kept_ptr, BITS: tl.constexpr,
                                 BLOCK: tl.constexpr, KEEP: tl.constexpr):
        """:func:`_mstopk_hist_kernel` over the n_ptr[0] entries a previous pass kept (a count on the device):
        each program strides over blocks of BLOCK."""
        lo = tl.load(st_ptr)
        hi = tl.load(st_ptr + 1)
        n = tl.load(n_ptr)
        acc = tl.zeros([1 << BITS], dtype=tl.int32)
        b = tl.program_id(0) * BLOCK
        while b < n:
            idx = b + tl.arange(0, BLOCK)
            m = idx < n
            v = tl.load(src_ptr + idx, mask=m, other=0.0)
            acc += tl.histogram(_mstopk_leaf(v, lo, hi, BITS), 1 << BITS, mask=m)
            if KEEP:
                _mstopk_keep(v, m, lo, keep_ptr, kept_ptr)
            b += tl.num_programs(0) * BLOCK
        tl.atomic_add(hist_ptr + tl.arange(0, 1 << BITS), acc, sem="relaxed")

    @triton.jit
    def _mstopk_walk_kernel(st_ptr, cnt_ptr, hist_ptr, k, BITS: tl.constexpr):
        """BITS binary-search steps on st = [lo, hi, t1, t2], cnt = [c1, c2], each step's count
        #(mag >= mid) read from the leaf histogram: the entries in the leaves right of the split (leaf 0 is
        never read, so entries below lo need not be counted)."""
        lo = tl.load(st_ptr)
        hi = tl.load(st_ptr + 1)
        t1 = tl.load(st_ptr + 2)
        t2 = tl.load(st_ptr + 3)
        c1 = tl.load(cnt_ptr)
        c2 = tl.load(cnt_ptr + 1)
        leaves = tl.arange(0, 1 << BITS)
        at_least = tl.cumsum(tl.load(hist_ptr + leaves), axis=0, reverse=True)  # entries in leaves >= j
        first = 0  # first leaf of the current node
        for d in tl.static_range(BITS):
            half = 1 << (BITS - 1 - d)  # d is a constexpr of static_range: so is half (Triton 3.6 refuses
            # re-binding a name annotated tl.constexpr in an unrolled loop)
            mid = (lo + hi) * 0.5
            count = tl.sum(tl.where(leaves == first + half, at_least, 0), axis=0)
            few = count <= k
            hi = tl.where(few, mid, hi)
            lo = tl.where(few, lo, mid)
            t1 = tl.where(few, mid, t1)
            c1 = tl.where(few, count, c1)
            t2 = tl.where(few, t2, mid)
            c2 = tl.where(few, c2, count)
            first = tl.where(few, first, first + half)
        tl.store(st_ptr, lo)
        tl.store(st_ptr + 1, hi)
        tl.store(st_ptr + 2, t1)
        tl.store(st_ptr + 3, t2)
        tl.store(cnt_ptr, c1)
        tl.store(cnt_ptr + 1, c2)


#: binary-search steps MSTopK's fused search resolves per pass over |g| (a 2**6-leaf histogram, 5 passes for
#: MSTopK's 30 steps): on an H200 the search took 0.39 ms on ResNet-50's gradient and 1.20 ms on BERT-base's,
#: 0.25x and 0.20x its time at 10 bits (data/measurements/codec_kernels_h200/mstopk_bits)
_MSTOPK_BITS = 6

#: programs per multiprocessor of the passes over the kept entries (each strides over blocks of 1024)
_KEPT_PROGRAMS_PER_SM = 4


@functools.lru_cache(maxsize=None)
def _kept_programs(device: torch.device) -> int:
    """How many programs the passes over the kept entries launch: enough to fill the GPU (8 on the CPU)."""
    if device.type != "cuda":
        return 8
    return _KEPT_PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count


def mstopk_search(mag: torch.Tensor, k: int, rounds: int, lo: torch.Tensor, hi: torch.Tensor, count_dtype,
                  bits: int = _MSTOPK_BITS, keep_from: int | None = 1, with_kept: bool = False):
    """MSTopK's binary search (``rounds`` steps between ``lo`` and ``hi``) in ceil(rounds / bits)
    passes and two launches a pass, instead of a pass over ``mag`` and two launches a step: each
    pass histograms every entry into the 2**bits leaves of the next ``bits`` steps' midpoint tree, and a
    one-program kernel then takes those steps with the counts read from the histogram. Returns
    the 0-d tensors (t1, c1, t2, c2) of :class:`~studykit.compressors.sparsification.MSTopK`'s
    reference loop, bit for bit (the same fp32 midpoints (lo + hi) / 2, exact integer counts), at any
    ``bits`` (1 to 10): fewer leaves cost more passes and less per pass (``benchmarks/mstopk_bits.py``).

    ``keep_from``: from this pass on (0 the first; None never), each pass but the last also keeps the entries
    at or above its lower bound ``lo`` (in a buffer as large as ``mag``), and the next pass reads only those: an
    entry below ``lo`` ends in leaf 0 of every later pass, which no step reads, and a histogram does not depend
    on the order. The first pass that keeps reads all of ``mag``: it marks its entries in a bitmask, which
    ``_mask_compact_kernel`` then compacts in order (appending each block's with an atomic made the pass about
    twice as long on an H200: archive/measurements/codec_kernels_h200/mstopk_atomic_keep); later ones, over a few
    per cent of the entries, append theirs in any order, one atomic a block. The first pass's
    ``lo`` is the mean, which over half of a Gaussian's entries reach; later ones keep a few per cent.
    ``with_kept``: a fifth value, ``(magnitudes, positions, count)`` of the entries the first keeping pass kept, in
    ascending position order (buffers as large as ``mag``, ``count`` a 1-element int32 tensor), which hold every
    entry at or above t1 (:func:`above_from_kept`); None when no pass kept.
    The entries past whole programs run masked, one block a program (one masked program for all of them took
    10 us a pass on ResNet-50's gradient on an H200, codec_kernels_h200/replayed_bands; 3 us so,
    codec_kernels_h200/mstopk_shapes, where five other program shapes were no faster)."""
    if not (isinstance(bits, int) and 1 <= bits <= 10):
        raise ValueError(f"bits must be an integer in [1, 10], got {bits!r}")
    if keep_from is not None and not (isinstance(keep_from, int) and keep_from >= 0):
        raise ValueError(f"keep_from must be None or an integer >= 0, got {keep_from!r}")
    n = mag.numel()
    dev = mag.device
    st = torch.stack([lo.float(), hi.float(), torch.full((), float("inf"), device=dev), torch.zeros((), device=dev)])
    cnt = torch.arange(2, dtype=torch.int32, device=dev) * n  # [c1, c2] = [0, n], made on the device
    steps = [min(bits, rounds - i) for i in range(0, rounds, bits)]
    stores = [keep_from is not None and keep_from <= i < len(steps) - 1 for i in range(len(steps))]
    hists = torch.zeros(sum(1 << b for b in steps) + len(steps), dtype=torch.int32, device=dev)
    kept = hists[-len(steps):]  # kept[i]: how many entries pass i kept (the passes after the first that keeps)
    # the kept entries: the first keeping pass's in bufs[0], the later ones' alternating in the others (with_kept:
    # bufs[0] is returned, so no later pass may write there)
    later = sum(stores) - 1
    nbufs = min(sum(stores), 1 + min(2, later) if with_kept else 2)
    bufs = [torch.empty(n, dtype=torch.float32, device=dev) for _ in range(nbufs)]
    block, iters, span = 1024, 8, 4096
    nblocks = triton.cdiv(n, block)
    bulk = n // (block * iters)
    rest = triton.cdiv(n - bulk * block * iters, block)
    src, src_n, start = None, None, 0  # the entries the previous pass kept and their count (None: all of mag)
    first_kept = None  # (magnitudes, positions, count) of the first pass that keeps
    for i, b in enumerate(steps):
        hist = hists[start:start + (1 << b)]
        j = sum(stores[:i])  # how many passes kept before this one
        dst = (bufs[0] if j == 0 else bufs[1 + (j - 1) % (len(bufs) - 1)] if with_kept else bufs[j % len(bufs)]) \
            if stores[i] else None
        if src is None:
            mark = dst is not None
            counts = torch.empty(nblocks if mark else 1, dtype=torch.int32, device=dev)
            words = torch.empty(nblocks * (block // 32) if mark else 1, dtype=torch.int32, device=dev)
            if bulk:
                _mstopk_hist_kernel[(bulk,)](mag, n, st, hist, counts, words, 0, MASKED=False, BITS=b, BLOCK=block,
                                             ITERS=iters, MARK=mark)
            if rest:
                _mstopk_hist_kernel[(rest,)](mag, n, st, hist, counts, words, bulk * block * iters, MASKED=True,
                                             BITS=b, BLOCK=block, ITERS=1, MARK=mark)
            if mark:
                ends = torch.cumsum(counts, 0, dtype=torch.int32)
                first_pos = torch.empty(n if with_kept else 1, dtype=torch.int32 if n < 2**31 else torch.int64,
                                        device=dev)
                _mask_compact_kernel[(triton.cdiv(n, span),)](mag, words, words.numel(), ends, nblocks, first_pos,
                                                               dst.view(torch.int32), n, BLOCK=block, SPAN=span,
                                                               POS=with_kept)
                src, src_n = dst, ends[-1:]
                first_kept = (dst, first_pos, src_n)
        else:
            _mstopk_kept_hist_kernel[(_kept_programs(dev),)](src, src_n, st, hist, dst if stores[i] else src,
                                                             kept[i:], BITS=b, BLOCK=block, KEEP=stores[i])
            if stores[i]:
                src, src_n = dst, kept[i:i + 1]
        _mstopk_walk_kernel[(1,)](st, cnt, hist, k, BITS=b)
        start += 1 << b
    out = st[2], cnt[0].to(count_dtype), st[3], cnt[1].to(count_dtype)
    return (*out, first_kept) if with_kept else out


# ====================================================================== the certain entries, from the kept ones
if HAVE_TRITON:
    @triton.jit
    def _kept_ge(x_ptr, b, n, t, BLOCK: tl.constexpr):
        """Block b of the first n entries of x (>= 0): their indices and which reach t (float bits)."""
        idx = b * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        v = tl.load(x_ptr + idx, mask=m, other=0.0).to(tl.int32, bitcast=True)
        return idx, ((v >= t) & m).to(tl.int32)

    @triton.jit
    def _kept_count_kernel(x_ptr, n_ptr, t_ptr, counts_ptr, BLOCK: tl.constexpr):
        """counts[b] = how many of block b of the first n_ptr[0] entries of x reach t_ptr[0] (float bits), for
        the blocks that hold entries; each program strides over them."""
        n = tl.load(n_ptr)
        t = tl.load(t_ptr)
        b = tl.program_id(0)
        while b * BLOCK < n:
            _, keep = _kept_ge(x_ptr, b, n, t, BLOCK)
            tl.store(counts_ptr + b, tl.sum(keep, axis=0))
            b += tl.num_programs(0)

    @triton.jit
    def _kept_take_kernel(x_ptr, pos_ptr, n_ptr, t_ptr, ends_ptr, out_ptr, cap, BLOCK: tl.constexpr):
        """out[slot] = pos[i] for the entries i (in order) that ``_kept_count_kernel`` counted, the first ``cap``
        (``ends``: the inclusive prefix sums of its counts); each program strides over the blocks."""
        n = tl.load(n_ptr)
        t = tl.load(t_ptr)
        b = tl.program_id(0)
        while b * BLOCK < n:
            idx, keep = _kept_ge(x_ptr, b, n, t, BLOCK)
            slot = tl.load(ends_ptr + b) - tl.sum(keep, axis=0) + tl.cumsum(keep, axis=0) - 1
            ok = (keep != 0) & (slot < cap)
            tl.store(out_ptr + slot, tl.load(pos_ptr + idx, mask=ok, other=0).to(tl.int64), mask=ok)
            b += tl.num_programs(0)


def above_from_kept(vals: torch.Tensor, pos: torch.Tensor, count: torch.Tensor, t1: torch.Tensor, k: int,
                    numel: int) -> torch.Tensor:
    """:meth:`~studykit.compressors.sparsification.MSTopK._above` from the entries a search kept
    (:func:`mstopk_search`'s ``with_kept``: magnitudes ``vals`` and ascending positions ``pos``, the first
    ``count`` valid), which hold every entry at or above ``t1``: the first ``k`` positions (int64, ascending,
    ``numel`` in the unused slots) whose magnitude reaches t1, bit for bit the reference's. A counting pass and a
    taking pass over the kept entries alone (a few per cent of |g|), each a fixed number of programs striding over
    the count on the device, instead of over all of |g|. The kept entries lie packed, so a prefix sum per block
    places them: :func:`~studykit.compressors._fast.topk.compact_ge`'s walk of set bits suits scattered entries,
    and a bitmask over the whole buffer costs as much as one over |g| (codec_kernels_h200/mstopk_kept_walk in the
    archive)."""
    block = 1024
    nblocks = max(1, triton.cdiv(vals.numel(), block))
    t = t1.float().reshape(1).view(torch.int32)
    counts = torch.zeros(nblocks, dtype=torch.int32, device=vals.device)  # blocks past the count stay 0
    grid = (_kept_programs(vals.device),)
    _kept_count_kernel[grid](vals, count, t, counts, BLOCK=block)
    ends = torch.cumsum(counts, 0, dtype=torch.int32)
    out = torch.full((k,), numel, dtype=torch.int64, device=vals.device)
    _kept_take_kernel[grid](vals, pos, count, t, ends, out, k, BLOCK=block)
    return out


# ====================================================================== MSTopK's band fill: keys and candidates
if HAVE_TRITON:
    @triton.jit
    def _band_keep(x_ptr, n, th_ptr, p, BLOCK: tl.constexpr):
        """Block p's positions and which of its entries are in the band th[0] <= x < th[1] (NaN never is)."""
        idx = p * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        v = tl.load(x_ptr + idx, mask=m, other=float("nan"))
        return idx, (v >= tl.load(th_ptr)) & (v < tl.load(th_ptr + 1)) & m

    @triton.jit
    def _block_keys(seed, p, BLOCK: tl.constexpr):
        """Block p's keys, element for element those of :func:`uniform_keys` (:func:`common._uniform8` by group)."""
        group = p * (BLOCK // 8) + tl.arange(0, BLOCK // 8)
        return tl.reshape(_uniform8(seed, group, BLOCK // 8), (BLOCK,))

    @_jit_seeded
    def _keys_kernel(out_ptr, numel, seed_ptr, seed_base, BLOCK: tl.constexpr):
        """out[i] = U[0, 1), the Philox numbers of (seed, i // 8) (:func:`_block_keys`)."""
        p = tl.program_id(0)
        idx = p * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + idx, _block_keys(_philox_seed(seed_ptr, seed_base), p, BLOCK), mask=idx < numel)

    @_jit_seeded
    def _band_count_kernel(x_ptr, n, th_ptr, counts_ptr, seed_ptr, seed_base, BLOCK: tl.constexpr):
        """counts[p] = how many of block p's entries are in the band with a key reaching th[2]."""
        p = tl.program_id(0)
        idx, band = _band_keep(x_ptr, n, th_ptr, p, BLOCK)
        count = tl.sum(band.to(tl.int32), axis=0)
        if count > 0:  # the band is a few entries: most blocks draw no keys
            u = _block_keys(_philox_seed(seed_ptr, seed_base), p, BLOCK)
            count = tl.sum((band & (u >= tl.load(th_ptr + 2))).to(tl.int32), axis=0)
        tl.store(counts_ptr + p, count)

    @_jit_seeded
    def _band_compact_kernel(x_ptr, n, th_ptr, ends_ptr, pos_ptr, keys_ptr, cap, seed_ptr, seed_base,
                             BLOCK: tl.constexpr):
        """The positions (ascending) and keys of the entries ``_band_count_kernel`` counted, the first ``cap``:
        block p writes its own from ``ends[p]`` minus its count on, so the order is ``torch.nonzero``'s."""
        p = tl.program_id(0)
        idx, band = _band_keep(x_ptr, n, th_ptr, p, BLOCK)
        if tl.sum(band.to(tl.int32), axis=0) > 0:
            u = _block_keys(_philox_seed(seed_ptr, seed_base), p, BLOCK)
            keep = (band & (u >= tl.load(th_ptr + 2))).to(tl.int32)
            slot = tl.load(ends_ptr + p) - tl.sum(keep, axis=0) + tl.cumsum(keep, axis=0) - 1
            w = (keep != 0) & (slot < cap)
            tl.store(pos_ptr + slot, idx.to(tl.int64), mask=w)
            tl.store(keys_ptr + slot, u, mask=w)


#: elements per program of the band passes (a multiple of 8: the keys come in groups of 8)
_BAND_BLOCK = 1024


def uniform_keys(numel: int, seed: common.Seed, device: torch.device) -> torch.Tensor:
    """``numel`` float32 keys uniform in [0, 1), drawn from ``seed`` (one kernel, the step read on the device):
    MSTopK's band-fill keys, the ones :func:`band_candidates` draws inside its passes."""
    out = torch.empty(numel, dtype=torch.float32, device=device)
    if numel:
        _keys_kernel[(triton.cdiv(numel, _BLOCK),)](out, numel, *seed, BLOCK=_BLOCK)
    return out


def band_candidates(mag: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor, q: torch.Tensor, seed: common.Seed,
                    cap: int, unfused) -> tuple[torch.Tensor, torch.Tensor]:
    """:meth:`~studykit.compressors.sparsification.MSTopK.band_candidates` in two passes over ``mag`` (count per
    block, then compact), the keys drawn from ``seed`` inside them (those of :func:`uniform_keys`) and only in
    blocks with a band entry: no key tensor, no mask; the same positions and keys, bit for bit. ``unfused`` (no
    arguments) computes the same from a key tensor and a mask: of the two, the faster on this device and size is
    kept (:func:`common.pick`; under a CUDA graph capture, the one picked before, else the fused one)."""
    fns = [lambda: _band_candidates(mag, t1, t2, q, seed, cap), unfused]
    key = ("band_candidates", mag.device, mag.numel(), cap)
    if mag.is_cuda and torch.cuda.is_current_stream_capturing():
        return fns[common._PICKED.get(key, 0)]()
    return fns[common.pick(key, fns)]()


def _band_candidates(mag, t1, t2, q, seed, cap):
    n, dev = mag.numel(), mag.device
    th = torch.stack([t2.float(), t1.float(), q.float()])
    grid = (triton.cdiv(n, _BAND_BLOCK),)
    counts = torch.empty(grid[0], dtype=torch.int32, device=dev)
    _band_count_kernel[grid](mag, n, th, counts, *seed, BLOCK=_BAND_BLOCK)
    ends = torch.cumsum(counts, 0, dtype=torch.int32)
    pos = torch.full((cap,), n, dtype=torch.int64, device=dev)
    keys = torch.full((cap,), -1.0, dtype=torch.float32, device=dev)
    _band_compact_kernel[grid](mag, n, th, ends, pos, keys, cap, *seed, BLOCK=_BAND_BLOCK)
    return pos, keys


# ====================================================================== the payload
if HAVE_TRITON:
    @triton.jit
    def _assemble_kernel(x_ptr, n, above_ptr, band_ptr, c1_ptr, k, val_ptr, idx_ptr, BLOCK: tl.constexpr):
        """Slot s < k: position above[s] if s < c1, else band[s - c1]; a position n (no entry) sends 0 at 0."""
        s = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = s < k
        c1 = tl.load(c1_ptr).to(tl.int64)
        first = s < c1
        a = tl.load(above_ptr + s, mask=m & first, other=0)
        b = tl.load(band_ptr + (s - c1), mask=m & (s >= c1), other=0)
        pos = tl.where(first, a, b)
        valid = m & (pos < n)
        tl.store(val_ptr + s, tl.load(x_ptr + pos, mask=valid, other=0.0), mask=m)
        tl.store(idx_ptr + s, tl.where(valid, pos, 0), mask=m)


#: slots per program of :func:`mstopk_assemble` (gathers, as RandomK's and DGC's: a few per cent of a gradient)
_ASSEMBLE_BLOCK = 512


def mstopk_assemble(flat: torch.Tensor, idx_above: torch.Tensor, c1: torch.Tensor, idx_band: torch.Tensor):
    """:meth:`~studykit.compressors.sparsification.MSTopK._assemble` in one kernel: the k (values, int64
    positions) of the payload, bit for bit the reference's."""
    k, n = idx_above.numel(), flat.numel()
    vals = torch.empty(k, dtype=torch.float32, device=flat.device)
    idx = torch.empty(k, dtype=torch.int64, device=flat.device)
    if k:
        _assemble_kernel[(triton.cdiv(k, _ASSEMBLE_BLOCK),)](flat, n, idx_above, idx_band, c1.reshape(1), k, vals, idx,
                                                             BLOCK=_ASSEMBLE_BLOCK)
    return vals, idx
