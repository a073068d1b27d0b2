"""Fused kernels of the top-k sparsifiers: the exact top-k of |g| (:func:`topk_abs`, choosing between a sampled
threshold, a radix select and ``torch.topk``), DGC's sample, its compaction of the entries above a threshold and
its payload (:func:`sample_abs_bits`, :func:`compact_ge`, :func:`take_slots`), the top-k inside each row of a
chunked gradient and its decoding (:func:`row_topk`, :func:`row_scatter`), and RandomK's and DGC's random
positions (:func:`uniform_positions`); each kernel next to the function that launches it (MSTopK's are in
:mod:`~studykit.compressors._fast.mstopk`)."""
from __future__ import annotations

import math

import torch

from studykit.compressors._fast import common
from studykit.compressors._fast.common import HAVE_TRITON, _launch, tl, triton

#: the names :mod:`studykit.compressors._fast` re-exports from here
__all__ = ["topk_abs", "kth_abs", "_SAMPLES", "_SAMPLE_POS", "_ROOM_ALIGN", "_sampled_threshold", "_sampled_ok",
           "_sampled_topk_nosync", "_threshold_from_sample", "_top_candidates", "COMPACT_SHAPES",
           "compact_ge", "_compact_ge", "_RADIX", "_RANK_BLOCK", "_GATED_ITERS", "_GATED_GROUP", "_radix_select",
           "_radix_topk", "row_topk_ok", "ROW_TOPK_SHAPES", "row_topk", "row_scatter",
           "_GATHER_BLOCK", "uniform_positions", "sample_abs_bits", "take_slots", "aligned"]

if HAVE_TRITON:
    from studykit.compressors._fast.common import _jit_seeded, _ld, _philox_seed, _st


def topk_abs(x: torch.Tensor, k: int) -> torch.Tensor:
    """Positions (int64) of the k largest |x| of a flat fp32 tensor. Three exact methods, none of which makes the
    host wait for the device (a DDP hook calls this from inside the backward pass), the fastest on this device and
    size kept:

    * a sampled threshold (on large tensors only, :func:`_sampled_topk_nosync`): one counting pass and one
      compacting pass over |x| keep the few entries at or above a threshold drawn from a sample, radix select
      takes the k largest of those; whether they may miss some of the top k is known on the device only, and radix
      select on everything, gated on it, runs then (its kernels return at once otherwise);
    * radix select (:func:`_radix_topk`: four histogram passes over |x|'s bits (:data:`_RADIX`) find the k-th
      largest magnitude; a counting and a compacting pass then write everything above it and the first ones
      equal to it, ascending positions; no sort);
    * ``torch.topk`` itself.

    Eager, :func:`pick` times them (key ``topk_no_sync``); under a CUDA graph capture (the DDP hook's graph runner,
    ``bench --graph``) the pick is the one an eager call with the same size made among them timed as graph replays
    (key ``topk_graph``, :func:`pick_no_sync`; eager, the sampled method pays its host's many launches: on an H200,
    ResNet-50's gradient at 1 %, 1.10 ms eager against 0.147 ms replayed, ``torch.topk`` 0.592 ms replayed:
    codec_kernels_h200/topk_eager); ``torch.topk`` where none was made. A form of the sampled method that let
    the host decide whether the sample missed (``torch.topk`` on the sample and the candidates: fewer launches
    eagerly) was removed: its one synchronisation made a hook's host wait for the GPU
    (``tests/test_host_sync.py``)."""
    fns = [lambda: _radix_topk(x, k), lambda: torch.topk(x.abs(), k, sorted=False).indices]
    if _sampled_ok(x.numel(), k):
        fns.insert(0, lambda: _sampled_topk_nosync(x, k))
    key = (x.device, x.numel(), k)
    return fns[common.pick_no_sync(("topk_no_sync",) + key, ("topk_graph",) + key, fns, x.device)]()


def kth_abs(x: torch.Tensor, k: int) -> torch.Tensor:
    """The k-th largest |x| of a flat fp32 tensor, as a 1-element tensor (NaN counts as the largest, as in
    ``torch.topk``): radix select's histogram passes (:func:`_radix_select`: about ten short kernels, the faster
    as a graph's replay) or ``torch.topk`` (fewer launches, often the faster eagerly), picked as in
    :func:`topk_abs` (:func:`pick_no_sync`, keys ``kth`` and ``kth_graph``). DGC's sampled threshold."""
    fns = [lambda: _radix_select(x, k)[:1].view(torch.float32),
           lambda: torch.topk(x.abs(), k, sorted=False).values.min().reshape(1)]
    key = (x.device, x.numel(), k)
    return fns[common.pick_no_sync(("kth",) + key, ("kth_graph",) + key, fns, x.device)]()


# ====================================================================== sampled threshold
#: |x| sampled at this many positions (fixed per size) for :func:`_sampled_topk_nosync`'s threshold
_SAMPLES = 1 << 16
_SAMPLE_POS: dict = {}
#: the candidates' room is a multiple of this: of every program size radix select takes (2048 to 16384 elements
#: per histogram program, :data:`_RANK_BLOCK` per counting and compacting program)
_ROOM_ALIGN = 16384


def aligned(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`_ROOM_ALIGN`: a buffer of that many elements is whole programs of
    radix select and the compacting passes (no masked launch for a rest)."""
    return -(-n // _ROOM_ALIGN) * _ROOM_ALIGN


def _sampled_threshold(k: int, n: int) -> tuple[int, int]:
    """``(r, capacity)`` of :func:`_sampled_topk_nosync`: the threshold is the ``r``-th largest of the sample,
    where ``e = k * s / n`` of the ``s`` samples are expected in the top k: ``r = e + 4 sqrt(e) + 4`` (four
    standard deviations of a binomial count, plus four), so the entries at or above it are very likely
    to number at least k; about ``r * n / s`` of them are expected, and room is made for 1.5 times that."""
    s = _SAMPLES
    e = k * s / n
    r = min(s, math.ceil(e + 4 * math.sqrt(e) + 4))
    return r, min(n, math.ceil(1.5 * r * n / s) + 1024)


def _sampled_ok(n: int, k: int) -> bool:
    """Whether :func:`_sampled_topk_nosync` is a candidate: at least 16 samples' worth of elements per sample, and
    room for candidates well below n."""
    return n >= 16 * _SAMPLES and 1 <= k and 2 * _sampled_threshold(k, n)[1] <= n


def _sampled_topk_nosync(x: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest |x| through a threshold estimated from a sample (the idea of Lin et al. 2018's sampled
    threshold, https://arxiv.org/abs/1712.01887, Sec. 3, made exact), without a host synchronisation (so a CUDA
    graph can hold it): |x| at ``_SAMPLES`` random positions (drawn once per size, seeded by it) gives the
    threshold (:func:`_sampled_threshold`); a counting pass and a compacting pass keep the entries at or above it,
    and their top k are written first. If fewer than k reached the threshold, or more than the room kept, the
    candidates may miss some of the top k; that is known on the device only, and radix select on all of |x|
    (:func:`_radix_topk`, gated on it) overwrites them then, its kernels returning at once otherwise. Always
    exact; a miss costs radix select's time. Magnitudes are compared as float bits, so NaN counts as the largest,
    as in ``torch.topk``."""
    t, cap = _threshold_from_sample(x, k)
    cand, cand_bits, found = compact_ge(x, t, cap)
    out = _top_candidates(cand, cand_bits, k)
    hit = ((found >= k) & (found <= cap)).to(torch.int32)
    return _radix_topk(x, k, out=out, skip=hit)


def _threshold_from_sample(x: torch.Tensor, k: int) -> tuple[torch.Tensor, int]:
    """:func:`_sampled_topk_nosync`'s threshold (float bits, a 1-element int32 tensor) and room for candidates
    (:func:`_sampled_threshold`'s, rounded up to a multiple of :data:`_ROOM_ALIGN`): the sample's r-th largest
    by radix select."""
    n, dev = x.numel(), x.device
    pos = _SAMPLE_POS.get((dev, n))
    if pos is None:
        g = torch.Generator().manual_seed(n)
        pos = _SAMPLE_POS[(dev, n)] = torch.randint(0, n, (_SAMPLES,), generator=g).to(dev)
    r, cap = _sampled_threshold(k, n)
    # room rounded up to whole programs of radix select on the candidates (no masked launch for a rest); it
    # stays within n: the sampled method needs twice the room
    room = min(n, aligned(cap))
    return _radix_select(x[pos], r)[:1], room


def _top_candidates(cand: torch.Tensor, cand_bits: torch.Tensor, k: int) -> torch.Tensor:
    """The positions of the k largest of :func:`compact_ge`'s candidates: radix select on their magnitudes' float
    bits (the unused slots hold +0.0's bits: they tie only with zeros, and come after every candidate)."""
    return cand[_radix_topk(cand_bits.view(torch.float32), k)]


# ====================================================================== entries at or above a threshold
if HAVE_TRITON:
    @triton.jit
    def _mask_ge_kernel(x_ptr, n, t_ptr, counts_ptr, words_ptr, start, MASKED: tl.constexpr, BLOCK: tl.constexpr):
        """Block p's |x| >= t (float bits, t_ptr[0]) as a bitmask: bit j of its i-th word (words[p * BLOCK // 32 +
        i]) says whether element p * BLOCK + 32 i + j reaches t; counts[p]: how many do."""
        p = start // BLOCK + tl.program_id(0)
        idx = p * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        v = _ld(x_ptr + idx, m, 0.0, MASKED).to(tl.int32, bitcast=True) & 0x7FFFFFFF
        _mark_block((v >= tl.load(t_ptr)) & m, p, counts_ptr, words_ptr, BLOCK)

    @triton.jit
    def _mark_block(keep, p, counts_ptr, words_ptr, BLOCK: tl.constexpr):
        """Block p's ``keep`` (BLOCK booleans) as ``_mask_compact_kernel`` reads them: bit j of word i (words[p *
        BLOCK // 32 + i]) for element p * BLOCK + 32 i + j, and counts[p] how many are set."""
        keep = keep.to(tl.int32)
        tl.store(counts_ptr + p, tl.sum(keep, axis=0))
        shifted = tl.reshape(keep, (BLOCK // 32, 32)) << tl.arange(0, 32)[None, :]
        tl.store(words_ptr + p * (BLOCK // 32) + tl.arange(0, BLOCK // 32), tl.xor_sum(shifted, axis=1))

    @triton.jit
    def _popcount(u):
        """Bits set in each uint32 of ``u`` (SWAR: pairs, nibbles, bytes, then the bytes' sum in the top byte)."""
        u = u - ((u >> 1) & 0x55555555)
        u = (u & 0x33333333) + ((u >> 2) & 0x33333333)
        u = (u + (u >> 4)) & 0x0F0F0F0F
        return ((u * 0x01010101) >> 24).to(tl.int32)

    @triton.jit
    def _mask_compact_kernel(x_ptr, words_ptr, nwords, ends_ptr, nblocks, pos_ptr, bits_ptr, cap,
                             BLOCK: tl.constexpr, SPAN: tl.constexpr, POS: tl.constexpr = True):
        """The positions (ascending) and |x| float bits of the elements ``_mask_ge_kernel`` marked, the first
        ``cap`` of them: program q takes the SPAN elements from q * SPAN on, SPAN // 32 words (``ends``: the
        inclusive prefix sums of the counts of its blocks of BLOCK). Each step takes every word's lowest set bit
        and clears it, until no word has one left: the work follows the marked elements, not x's size; x is
        read again only at them. POS False: the positions are not written (``pos_ptr`` unused)."""
        W: tl.constexpr = SPAN // 32
        q = tl.program_id(0)
        wi = q * W + tl.arange(0, W)
        w = tl.load(words_ptr + wi, mask=wi < nwords, other=0).to(tl.uint32, bitcast=True)
        c = _popcount(w)
        last = tl.minimum((q + 1) * (SPAN // BLOCK), nblocks) - 1
        slot = tl.load(ends_ptr + last) - tl.sum(c, axis=0) + tl.cumsum(c, axis=0) - c  # each word's first
        while tl.max(c, axis=0) > 0:
            has = c > 0
            idx = wi * 32 + _popcount(w ^ (w - 1)) - 1  # the lowest set bit's: it and the bits below it, less one
            v = tl.load(x_ptr + idx, mask=has, other=0.0).to(tl.int32, bitcast=True) & 0x7FFFFFFF
            ok = has & (slot < cap)
            if POS:
                tl.store(pos_ptr + slot, idx.to(tl.int64), mask=ok)
            tl.store(bits_ptr + slot, v, mask=ok)
            w = w & (w - 1)
            c -= has.to(tl.int32)
            slot += has.to(tl.int32)


#: ``(block, span)`` of the counting and compacting passes, the fastest kept per size (:func:`pick`): the counting
#: pass writes a bitmask and counts per block of ``block`` elements, the compacting pass walks ``span`` elements'
#: bits per program (a prefix sum over each program's elements, in one go or in rows of 32, read x again and was
#: slower in every shape timed: codec_kernels_h200/topk_bitmask)
COMPACT_SHAPES = ((1024, 1024), (1024, 4096), (4096, 4096), (2048, 8192), (4096, 16384))


def compact_ge(x: torch.Tensor, t_bits: torch.Tensor, cap: int, room: int | None = None):
    """The entries of flat fp32 ``x`` with ``|x| >= t`` (``t_bits``: a 1-element int32 tensor, t's float
    bits; NaN counts as the largest), in two passes (count per block, then compact): ``(positions, bits,
    found)``, ``positions`` (int64, ascending, ``x.numel()`` in the unused slots) and ``bits`` (|x|'s float
    bits, 0 in the unused slots: +0.0, at or below every magnitude) of the first ``cap`` of them, in buffers of
    ``room`` slots (``cap`` if None; more: the slots past ``cap`` unused), ``found`` (a 1-element int32 tensor)
    how many there are in all. For ``t >= 0`` the first ``cap`` positions are
    ``torch.nonzero_static(x.abs() >= t, size=cap, fill_value=x.numel())``'s. The program shape is one of
    :data:`COMPACT_SHAPES`."""
    room = cap if room is None else room
    if room < cap:
        raise ValueError(f"compact_ge: room {room} is smaller than cap {cap}")
    fns = [lambda s=s: _compact_ge(x, t_bits, cap, *s, room=room) for s in COMPACT_SHAPES]
    return fns[common.pick(("compact_ge", x.device, x.numel(), cap, room), fns)]()


def _compact_ge(x: torch.Tensor, t_bits: torch.Tensor, cap: int, block: int, span: int, room: int | None = None):
    """:func:`compact_ge` in one shape: the counting pass (blocks of ``block``) writes one bit per element beside
    its counts, and the compacting pass reads the bitmask (x's size / 32) and x only where a bit is set, ``span``
    elements (a multiple of ``block``) per program, its work following the set bits."""
    n, dev = x.numel(), x.device
    room = cap if room is None else room
    nblocks = triton.cdiv(n, block)
    counts = torch.empty(nblocks, dtype=torch.int32, device=dev)
    words = torch.empty(nblocks * (block // 32), dtype=torch.int32, device=dev)
    _launch(_mask_ge_kernel, n, n, block, x, n, t_bits, counts, words, BLOCK=block)
    ends = torch.cumsum(counts, 0, dtype=torch.int32)
    pos = torch.full((room,), n, dtype=torch.int64, device=dev)
    bits = torch.zeros(room, dtype=torch.int32, device=dev)
    _mask_compact_kernel[(triton.cdiv(n, span),)](x, words, words.numel(), ends, nblocks, pos, bits, cap,
                                                   BLOCK=block, SPAN=span)
    return pos, bits, ends[-1:]


# ====================================================================== radix select
if HAVE_TRITON:
    @triton.jit
    def _rank_masks(x_ptr, n, state_ptr, p, MASKED: tl.constexpr, BLOCK: tl.constexpr):
        """Block p's positions and which of its |x| are above and equal to the k-th largest magnitude's float bits
        (state[0]), as int32 0/1: ``(idx, gt, eq)``."""
        idx = p * BLOCK + tl.arange(0, BLOCK)
        m = idx < n
        v = _ld(x_ptr + idx, m, 0.0, MASKED).to(tl.int32, bitcast=True) & 0x7FFFFFFF
        t = tl.load(state_ptr)
        return idx, ((v > t) & m).to(tl.int32), ((v == t) & m).to(tl.int32)

    @triton.jit
    def _hist_kernel(x_ptr, n, state_ptr, hist_ptr, skip_ptr, start, MASKED: tl.constexpr, MATCH_SHIFT: tl.constexpr,
                     SHIFT: tl.constexpr, NBINS: tl.constexpr, FIRST: tl.constexpr, BLOCK: tl.constexpr,
                     ITERS: tl.constexpr, GATED: tl.constexpr):
        """Histogram of bits [SHIFT, SHIFT + log2 NBINS) of |x|'s float bits over the elements whose
        higher bits (>> MATCH_SHIFT) equal the prefix chosen so far (state[0]). GATED (every kernel of radix
        select): nothing done when skip_ptr[0] is not 0."""
        go = True
        if GATED:
            go = tl.load(skip_ptr) == 0
        if go:
            base = start + tl.program_id(0) * (BLOCK * ITERS)
            prefix = tl.load(state_ptr)
            acc = tl.zeros([NBINS], dtype=tl.int32)
            for it in range(ITERS):
                idx = base + it * BLOCK + tl.arange(0, BLOCK)
                m = idx < n
                v = _ld(x_ptr + idx, m, 0.0, MASKED).to(tl.int32, bitcast=True) & 0x7FFFFFFF
                if not FIRST:
                    m = m & ((v >> MATCH_SHIFT) == prefix)
                acc += tl.histogram((v >> SHIFT) & (NBINS - 1), NBINS, mask=m)
            tl.atomic_add(hist_ptr + tl.arange(0, NBINS), acc, sem="relaxed")

    @triton.jit
    def _select_bin_kernel(hist_ptr, state_ptr, skip_ptr, BITS: tl.constexpr, NBINS: tl.constexpr,
                           GATED: tl.constexpr):
        """state = [prefix, k_left]: pick the bin holding the k_left-th largest, extend the prefix,
        and leave in k_left how many of that bin are still to take."""
        go = True
        if GATED:
            go = tl.load(skip_ptr) == 0
        if go:
            prefix = tl.load(state_ptr)
            k_left = tl.load(state_ptr + 1)
            b = tl.arange(0, NBINS)
            h = tl.load(hist_ptr + b)
            at_least = tl.cumsum(h, axis=0, reverse=True)  # elements in bins >= b
            chosen = tl.max(tl.where(at_least >= k_left, b, 0), axis=0)
            above = tl.sum(tl.where(b > chosen, h, 0), axis=0)
            tl.store(state_ptr, (prefix << BITS) | chosen)
            tl.store(state_ptr + 1, k_left - above)

    @triton.jit
    def _rank_count_kernel(x_ptr, n, state_ptr, skip_ptr, counts_ptr, nblocks, start, MASKED: tl.constexpr,
                           BLOCK: tl.constexpr, GATED: tl.constexpr, GROUP: tl.constexpr):
        """counts[0, p] and counts[1, p]: how many of block p's |x| are above and equal to the k-th largest
        magnitude's float bits (state[0]); GROUP blocks per program."""
        go = True
        if GATED:
            go = tl.load(skip_ptr) == 0
        if go:
            for g in range(GROUP):
                p = start // BLOCK + tl.program_id(0) * GROUP + g
                idx, gt, eq = _rank_masks(x_ptr, n, state_ptr, p, MASKED, BLOCK)
                live = p < nblocks
                tl.store(counts_ptr + p, tl.sum(gt, axis=0), mask=live)
                tl.store(counts_ptr + nblocks + p, tl.sum(eq, axis=0), mask=live)

    @triton.jit
    def _rank_compact_kernel(x_ptr, n, state_ptr, skip_ptr, ends_ptr, nblocks, out_ptr, k, start,
                             MASKED: tl.constexpr, BLOCK: tl.constexpr, GATED: tl.constexpr, GROUP: tl.constexpr):
        """The positions of the k largest: those above the k-th largest magnitude t (k - k_left of them) in
        out[0:k - k_left], then the first k_left equal to it, each group ascending (``ends``: the inclusive
        prefix sums of ``_rank_count_kernel``'s two rows of counts, taken back to back as one); GROUP blocks per
        program."""
        go = True
        if GATED:
            go = tl.load(skip_ptr) == 0
        if go:
            # the scan runs over both rows back to back: the equal ones' sums start past all the counts above t
            n_gt_all = tl.load(ends_ptr + nblocks - 1)
            eq_first = k - tl.load(state_ptr + 1) - n_gt_all
            for g in range(GROUP):
                p = start // BLOCK + tl.program_id(0) * GROUP + g
                idx, gt, eq = _rank_masks(x_ptr, n, state_ptr, p, MASKED, BLOCK)
                live = p < nblocks
                slot_gt = tl.load(ends_ptr + p, mask=live, other=0) - tl.sum(gt, axis=0) + tl.cumsum(gt, axis=0) - 1
                slot_eq = (eq_first + tl.load(ends_ptr + nblocks + p, mask=live, other=0) - tl.sum(eq, axis=0)
                           + tl.cumsum(eq, axis=0) - 1)
                tl.store(out_ptr + slot_gt, idx.to(tl.int64), mask=gt != 0)
                tl.store(out_ptr + slot_eq, idx.to(tl.int64), mask=(eq != 0) & (slot_eq < k))


#: bits of |x| (31 significant) decided per histogram pass: 8 + 8 + 8 + 7 (an 11-bit histogram pass took 0.67 ms
#: on ResNet-50's gradient on an H200, a 9-bit one 0.14 ms)
_RADIX = (8, 8, 8, 7)
#: elements per program of radix select's counting and compacting passes
_RANK_BLOCK = 4096
#: gated on a device flag (:func:`_sampled_topk_nosync`'s fallback), radix select runs as fewer, longer programs:
#: histogram passes of this many blocks of 2048 per program, counting and compacting passes of this many blocks of
#: :data:`_RANK_BLOCK`; when the flag says skip, every program returns at once, and fewer cost less (on an H200,
#: ResNet-50's gradient, replayed: its 16 idle kernels 27 us with one block per program, codec_kernels_h200/
#: replayed_nosync; 15 us so, topk_bitmask's log); when it says run (the sample missed), longer programs are slower
_GATED_ITERS, _GATED_GROUP = 64, 16


def _radix_select(x: torch.Tensor, k: int, skip: torch.Tensor | None = None) -> torch.Tensor:
    """The k-th largest |x| of flat fp32 ``x``, found by histogram passes over |x|'s float bits (:data:`_RADIX`),
    as a 2-element int32 tensor on the device: ``(its float bits, how many equal to it belong to the k largest)``.
    No host synchronisation. ``skip``: as in :func:`_radix_topk`."""
    n = x.numel()
    dev = x.device
    gated = skip is not None
    state = torch.zeros(2, dtype=torch.int32, device=dev)  # (prefix, k still to take): no host copy
    state[1:].fill_(k)
    skip = state if skip is None else skip  # a placeholder pointer where nothing is gated
    hists = torch.zeros(sum(1 << b for b in _RADIX), dtype=torch.int32, device=dev)
    block = 2048
    # enough programs for small x (a sample, the candidates); gated, few long ones: idle, each costs a launch slot
    iters = _GATED_ITERS if gated else max(1, min(8, n // (block * 1024)))
    done, start = 0, 0
    for i, bits in enumerate(_RADIX):
        nb = 1 << bits
        shift = 31 - done - bits
        hist = hists[start:start + nb]
        _launch(_hist_kernel, n, n, block * iters, x, n, state, hist, skip, MATCH_SHIFT=shift + bits, SHIFT=shift,
                NBINS=nb, FIRST=i == 0, BLOCK=block, ITERS=iters, GATED=gated)
        _select_bin_kernel[(1,)](hist, state, skip, BITS=bits, NBINS=nb, GATED=gated)
        done += bits
        start += nb
    return state


def _radix_topk(x: torch.Tensor, k: int, out: torch.Tensor | None = None,
                skip: torch.Tensor | None = None) -> torch.Tensor:
    """Positions (int64) of the k largest |x|: :func:`_radix_select` finds the k-th largest magnitude t; a
    counting pass and a compacting pass write everything above t, then the first ones equal to it (each
    ascending) into ``out`` (new if None). No host synchronisation. ``skip`` (a 1-element int32 tensor): when it
    holds a nonzero value (known on the device only), every kernel returns at once and ``out`` keeps what it held
    (:func:`_sampled_topk_nosync`'s fallback)."""
    n = x.numel()
    dev = x.device
    out = torch.empty(k, dtype=torch.int64, device=dev) if out is None else out
    gated = skip is not None
    state = _radix_select(x, k, skip)
    skip = state if skip is None else skip
    nblocks = triton.cdiv(n, _RANK_BLOCK)
    group = _GATED_GROUP if gated else 1
    counts = torch.empty(2, nblocks, dtype=torch.int32, device=dev)
    _launch(_rank_count_kernel, n, n, _RANK_BLOCK * group, x, n, state, skip, counts, nblocks, BLOCK=_RANK_BLOCK,
            GATED=gated, GROUP=group)
    ends = torch.cumsum(counts.view(-1), 0, dtype=torch.int32)  # flat: one scan (a scan per row is slower)
    _launch(_rank_compact_kernel, n, n, _RANK_BLOCK * group, x, n, state, skip, ends, nblocks, out, k,
            BLOCK=_RANK_BLOCK, GATED=gated, GROUP=group)
    return out


# ====================================================================== top-k per row (chunked)
if HAVE_TRITON:
    @triton.jit
    def _row_topk_kernel(x_ptr, n, vals_ptr, offs_ptr, K, start, MASKED: tl.constexpr, L: tl.constexpr,
                         LP: tl.constexpr, STOP: tl.constexpr):
        """Per row of L elements (zero past n): the K largest |x| (ties: first by position), values
        and in-row offsets written in position order at row * K. The threshold t, the largest float bits
        with at least K of |x| at or above it, is built one bit a step from the top; STOP: the steps end as
        soon as exactly K reach it (every lower bit would then select the same K)."""
        row = start + tl.program_id(0)
        off = tl.arange(0, LP)
        idx = row * L + off
        m = (off < L) & (idx < n)
        v = _ld(x_ptr + idx, m, 0.0, MASKED).to(tl.int32, bitcast=True) & 0x7FFFFFFF
        if MASKED:
            v = tl.where(off < L, v, -1)  # lanes past the row never count
        t = tl.full((), 0, tl.int32)
        if STOP:
            bit = tl.full((), 30, tl.int32)
            while bit >= 0:
                cand = t | (tl.full((), 1, tl.int32) << bit)
                cnt = tl.sum((v >= cand).to(tl.int32), axis=0)
                t = tl.where(cnt >= K, cand, t)
                bit = tl.where(cnt == K, -1, bit - 1)
        else:
            for i in range(31):  # the largest t with count(v >= t) >= K
                cand = t | (1 << (30 - i))
                cnt = tl.sum((v >= cand).to(tl.int32), axis=0)
                t = tl.where(cnt >= K, cand, t)
        gt = v > t
        need = K - tl.sum(gt.to(tl.int32), axis=0)
        eq = v == t
        eq_rank = tl.cumsum(eq.to(tl.int32), axis=0)
        sel = gt | (eq & (eq_rank <= need))
        slot = tl.cumsum(sel.to(tl.int32), axis=0) - 1
        x = tl.load(x_ptr + idx, mask=sel & m, other=0.0)  # the chosen again (L1/L2): |x| alone stays live
        tl.store(vals_ptr + row * K + slot, x, mask=sel)
        tl.store(offs_ptr + row * K + slot, off, mask=sel)

    @triton.jit
    def _row_scatter_kernel(vals_ptr, offs_ptr, out_ptr, n, K, start, MASKED: tl.constexpr, L: tl.constexpr,
                            LP: tl.constexpr, KP: tl.constexpr):
        """One worker's chunked top-k payload -> dense rows: zero the row, then put the K values (rows
        from ``start``; MASKED: the row may run past n or L is not a power of two)."""
        row = start + tl.program_id(0)
        off = tl.arange(0, LP)
        idx = row * L + off
        _st(out_ptr + idx, tl.zeros([LP], dtype=tl.float32), (off < L) & (idx < n), MASKED)
        tl.debug_barrier()  # the zeros land before the values (same program, same addresses)
        j = tl.arange(0, KP)
        mj = j < K
        o = tl.load(offs_ptr + row * K + j, mask=mj, other=0).to(tl.int32)
        v = tl.load(vals_ptr + row * K + j, mask=mj, other=0.0)
        dst = row * L + o
        tl.store(out_ptr + dst, v, mask=mj & (dst < n))


def row_topk_ok(length: int, k: int) -> bool:
    """Rows the per-row kernel takes: up to 16384 elements, k < length."""
    return 2 <= length <= 16384 and 1 <= k < length


#: (stop early, warps) of the per-row kernel, the fastest kept per size (:func:`pick`): few warps per row keep the
#: counts' reductions inside a warp, many spread the row's elements over more threads. (Two bits a step, three
#: counts at once, was slower than one bit a step at every warp count on ResNet-50's and BERT-base's gradients on
#: an H200: data/measurements/codec_kernels_h200/row_topk.)
ROW_TOPK_SHAPES = tuple((stop, warps) for stop in (True, False) for warps in (8, 4, 2, 1))


def row_topk(x: torch.Tensor, length: int, k: int, shape: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k |x| inside each ``length``-element row of a flat fp32 tensor (the last row padded
    with zeros): values (rows * k,) fp32 and in-row offsets (rows * k,) int32, position order.
    Ties at the threshold: first by position. ``shape``: one of :data:`ROW_TOPK_SHAPES` (default:
    the fastest on this device and size)."""
    n = x.numel()
    rows = -(-n // length)
    vals = torch.empty(rows * k, dtype=torch.float32, device=x.device)
    offs = torch.empty(rows * k, dtype=torch.int32, device=x.device)
    lp = triton.next_power_of_2(length)
    full = n // length if lp == length else 0

    def run(stop, warps):
        if full:
            _row_topk_kernel[(full,)](x, n, vals, offs, k, 0, MASKED=False, L=length, LP=lp, STOP=stop,
                                      num_warps=warps)
        if rows > full:
            _row_topk_kernel[(rows - full,)](x, n, vals, offs, k, full, MASKED=True, L=length, LP=lp, STOP=stop,
                                             num_warps=warps)

    if shape is None:
        shape = ROW_TOPK_SHAPES[common.pick(("row_topk", x.device, n, length, k),
                                            [lambda s=s: run(*s) for s in ROW_TOPK_SHAPES])]
    run(*shape)
    return vals, offs


def row_scatter(values: torch.Tensor, offsets: torch.Tensor, n: int, length: int, k: int) -> torch.Tensor:
    """Inverse of :func:`row_topk` for one payload: a dense (n,) fp32 tensor, zeros elsewhere. The rows
    that lie inside n (when ``length`` is a power of two) are zeroed without bounds masks, so their stores
    are vectorised."""
    rows = -(-n // length)
    out = torch.empty(n, dtype=torch.float32, device=values.device)
    lp = triton.next_power_of_2(length)
    full = n // length if lp == length else 0
    meta = dict(L=length, LP=lp, KP=triton.next_power_of_2(k), num_warps=8 if lp >= 4096 else 4)
    if full:
        _row_scatter_kernel[(full,)](values, offsets, out, n, k, 0, MASKED=False, **meta)
    if rows > full:
        _row_scatter_kernel[(rows - full,)](values, offsets, out, n, k, full, MASKED=True, **meta)
    return out


# ====================================================================== RandomK's and DGC's random positions
#: elements per program of the kernels that draw positions or gather at them (a sample, a payload: about 1 % of a
#: gradient): 4096 (:data:`_BLOCK`) left an H200 under half busy on ResNet-50's 1 % (63 programs; DGC's fused sample
#: and its take 19 and 20 us, data/archive/measurements/codec_kernels_h200/dgc_fused_block4096; 13 and 6 us so,
#: codec_kernels_h200/dgc_fused)
_GATHER_BLOCK = 512

if HAVE_TRITON:
    @triton.jit
    def _philox_positions(seed_ptr, seed_base, i, numel):
        """The positions :func:`uniform_positions` draws at indices ``i``: a Philox number of (seed, i) modulo
        numel, two 32-bit words as one 63-bit integer, so the modulo's bias is below numel / 2^63."""
        r0, r1, _, _ = tl.randint4x(_philox_seed(seed_ptr, seed_base), i)
        return ((r0.to(tl.uint64) << 31) ^ r1.to(tl.uint64)).to(tl.int64) % numel

    @_jit_seeded
    def _positions_kernel(out_ptr, count, numel, seed_ptr, seed_base, BLOCK: tl.constexpr):
        """out[i] = the i-th position (:func:`_philox_positions`)."""
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + i, _philox_positions(seed_ptr, seed_base, i, numel), mask=i < count)

    @_jit_seeded
    def _sample_bits_kernel(x_ptr, out_ptr, count, room, numel, seed_ptr, seed_base, BLOCK: tl.constexpr):
        """out[i] = |x|'s float bits at the i-th position (:func:`_philox_positions`) for i < count, 0 (+0.0)
        from count to room."""
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        live = i < count
        pos = _philox_positions(seed_ptr, seed_base, i, numel)
        v = tl.load(x_ptr + pos, mask=live, other=0.0).to(tl.int32, bitcast=True) & 0x7FFFFFFF
        tl.store(out_ptr + i, v, mask=i < room)

    @triton.jit
    def _take_kernel(x_ptr, n, cand_ptr, top_ptr, k, val_ptr, idx_ptr, BLOCK: tl.constexpr):
        """val[i], idx[i] = x[p], p for p = cand[top[i]]; 0, 0 where p is n (an unused slot)."""
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < k
        p = tl.load(cand_ptr + tl.load(top_ptr + i, mask=m, other=0), mask=m, other=0)
        ok = m & (p < n)
        p = tl.where(ok, p, 0)
        tl.store(val_ptr + i, tl.load(x_ptr + p, mask=ok, other=0.0), mask=m)
        tl.store(idx_ptr + i, p, mask=m)


def uniform_positions(numel: int, count: int, seed: common.Seed, device: torch.device) -> torch.Tensor:
    """``count`` positions (int64) uniform in ``[0, numel)``, drawn with replacement from ``seed`` (one kernel)."""
    out = torch.empty(count, dtype=torch.int64, device=device)
    if count:
        _positions_kernel[(triton.cdiv(count, _GATHER_BLOCK),)](out, count, numel, *seed, BLOCK=_GATHER_BLOCK)
    return out


def sample_abs_bits(x: torch.Tensor, count: int, seed: common.Seed, room: int | None = None) -> torch.Tensor:
    """``x[uniform_positions(x.numel(), count, seed)].abs()`` as float bits (int32) in one kernel, without the
    positions in memory, in a buffer of ``room`` (``count`` if None) elements, +0.0 past ``count``: DGC's
    sample. Zeros added to a sample of magnitudes leave its r-th largest alone for r <= count."""
    room = count if room is None else room
    if room < count:
        raise ValueError(f"sample_abs_bits: room {room} is smaller than count {count}")
    out = torch.empty(room, dtype=torch.int32, device=x.device)
    if room:
        _sample_bits_kernel[(triton.cdiv(room, _GATHER_BLOCK),)](x, out, count, room, x.numel(), *seed,
                                                                 BLOCK=_GATHER_BLOCK)
    return out


def take_slots(x: torch.Tensor, cand: torch.Tensor, top: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(values, positions)`` of the candidates in slots ``top`` in one kernel: ``p = cand[top]`` (int64) and
    ``x[p]``, value 0 at position 0 where ``p`` is ``x.numel()`` (an unused slot), as DGC's reference takes
    them."""
    k = top.numel()
    vals = torch.empty(k, dtype=x.dtype, device=x.device)
    idx = torch.empty(k, dtype=torch.int64, device=x.device)
    if k:
        _take_kernel[(triton.cdiv(k, _GATHER_BLOCK),)](x, x.numel(), cand, top, k, vals, idx, BLOCK=_GATHER_BLOCK)
    return vals, idx
