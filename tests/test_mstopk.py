"""MSTopK (Shi et al. 2021, https://arxiv.org/abs/2010.10458) without host synchronisations (issue 19 item 2):
no op of one encode+decode makes the host wait for the device, exactly k entries, the threshold bracket at ties
and equal magnitudes, the band fill (a uniform random subset, as a top-k of the keys over the whole band would
pick), hostile inputs; the fused search against the reference loop (GPU, or Triton's interpreter)."""
import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from studykit import compressors as C
from studykit.comm import LocalComm
from studykit.compressors import _fast
from studykit.compressors.base import CompressorError
from studykit.compressors.fastpath import OVERRIDES, reference
from studykit.compressors.sparsification import MSTopK, index_dtype, num_selected
from tests.test_bench import _device

if _fast.HAVE_TRITON:
    from studykit.compressors._fast.mstopk import _band_candidates as fused_band

#: ops that copy a device value to the host (the host then waits for the device): a Python conversion
#: (``.item()``, ``bool(t)``, ``int(t)`` all end in ``_local_scalar_dense``) or an output shape that
#: depends on the data
SYNC_OPS = {"aten._local_scalar_dense.default", "aten.item.default", "aten.is_nonzero.default",
            "aten.nonzero.default", "aten.masked_select.default", "aten.unique_dim.default",
            "aten._unique2.default", "aten.unique_consecutive.default", "aten.repeat_interleave.Tensor",
            "aten.equal.default", "aten.allclose.default"}


class NoSync(TorchDispatchMode):
    """Raise on every op that synchronises host and device; also on boolean-mask indexing (``x[mask]``
    runs a nonzero inside the index kernel, below this mode). Records the ops it saw."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        self.seen.append(name)
        if name in SYNC_OPS:
            raise AssertionError(f"host synchronisation: {name}")
        if name.startswith(("aten.index.", "aten.index_put")):
            masks = [i for i in args[1] if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)]
            if masks:
                raise AssertionError(f"host synchronisation: {name} with a boolean mask")
        return func(*args, **(kwargs or {}))


def gaussian(n, seed=0):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


def mstopk(**params):
    return C.get("mstopk", error_feedback=False, **params)


# ---------------------------------------------------------------------------------- no host synchronisation
def test_the_sync_detector_catches_conversions_and_data_dependent_shapes():
    x = torch.arange(5.0)
    for fn in (lambda: x.sum().item(), lambda: bool((x > 2).any()), lambda: x[x > 2], lambda: torch.nonzero(x)):
        with pytest.raises(AssertionError, match="host synchronisation"), NoSync():
            fn()
    with NoSync():
        torch.nonzero_static(x, size=3)  # a static size: no sync


@pytest.mark.parametrize("x", [gaussian(50_000), torch.ones(1000), torch.zeros(3000)], ids=["gauss", "equal", "zeros"])
def test_encode_and_decode_make_no_host_synchronisation(x):
    comp = mstopk(ratio=0.01, allow_nonfinite=True)  # the finiteness check is the one sync, before the codec
    with NoSync() as mode:
        out = comp.reduce(x, LocalComm())
    assert "aten.nonzero_static.default" in mode.seen and "aten.index_add_.default" in mode.seen
    assert (out != 0).sum() <= num_selected(x.numel(), 0.01)


# ---------------------------------------------------------------------------------- exactly k
@pytest.mark.parametrize("x", [gaussian(100_000, 1), torch.ones(10_000), torch.zeros(4000),
                               torch.randint(-3, 4, (20_000,), generator=torch.Generator().manual_seed(2)).float(),
                               gaussian(30_000, 3) ** 5],
                         ids=["gauss", "equal", "zeros", "few-levels", "heavy"])
@pytest.mark.parametrize("ratio,samplings", [(0.01, 30), (0.1, 5), (0.3, 30)])
def test_exactly_k_distinct_positions_above_the_band(x, ratio, samplings):
    comp = mstopk(ratio=ratio, samplings=samplings)
    k, mag = num_selected(x.numel(), ratio), x.abs()
    values, idx = comp.select(x, [x.numel()])
    assert idx.shape == (k,) and idx.unique().numel() == k and torch.equal(values, x[idx])
    t1, c1, t2, _, _ = comp._search(mag, k, mag.mean(), mag.max(), torch.int32)
    assert torch.equal(mag[idx] >= t1, torch.arange(k) < c1)  # the c1 entries >= t1 first, then the band
    assert bool((mag[idx] >= t2).all())


# ---------------------------------------------------------------------------------- the bracket
@pytest.mark.parametrize("x", [gaussian(20_000, 4), torch.ones(500), torch.zeros(500),
                               torch.tensor([3.0] * 40 + [1.0] * 400 + [0.5] * 60), torch.tensor([2.0, -2.0, 1.0])],
                         ids=["gauss", "equal", "zeros", "tied-levels", "tiny"])
@pytest.mark.parametrize("k", [1, 2, 50, 450])
def test_the_bracket_holds_at_ties_and_equal_magnitudes(x, k):
    """t2 < t1, c1 = #(|g| >= t1) <= k < c2 = #(|g| >= t2); t1 = inf (c1 = 0) when no midpoint had at most
    k entries at or above it, t2 = 0 (c2 = numel) when none had more."""
    k = min(k, x.numel())
    mag = x.abs()
    t1, c1, t2, c2, _ = mstopk()._search(mag, k, mag.mean(), mag.max(), torch.int32)
    assert t2 < t1 and c1 <= k and (c2 > k or (t2 == 0 and c2 == x.numel()))
    assert c1 == (mag >= t1).sum() and c2 == (mag >= t2).sum()
    if bool((x == x[0]).all()) and k < x.numel():  # every magnitude equal: no threshold splits them
        assert t1 == math.inf and c1 == 0 and t2 == mag[0] and c2 == x.numel()


def test_tied_levels_send_the_top_level_and_fill_from_the_tied_one():
    x = torch.tensor([3.0] * 40 + [1.0] * 400 + [0.0] * 560)  # mean 0.52: the search runs between it and 3
    values, idx = mstopk(ratio=0.05).select(x, [1000])  # k = 50: the 40 threes, then 10 of the 400 ones
    assert sorted(values.tolist()) == [1.0] * 10 + [3.0] * 40 and idx.unique().numel() == 50


# ---------------------------------------------------------------------------------- the band fill
def _fill_by_full_topk(comp, mag, t1, t2, k):
    """The band fill as a top-k of the keys over all n entries (what MSTopK did before issue 19)."""
    keys = comp.keys(mag.numel(), mag.device)
    ranked = torch.topk(torch.where((mag >= t2) & (mag < t1), keys, -1.0), k, sorted=True)
    return torch.where(ranked.values >= 0, ranked.indices, mag.numel())


@pytest.mark.parametrize("x", [torch.ones(3000), torch.zeros(3000), gaussian(20_000, 5),
                               torch.randint(0, 3, (20_000,), generator=torch.Generator().manual_seed(6)).float()],
                         ids=["equal", "zeros", "gauss", "few-levels"])
@pytest.mark.parametrize("ratio,samplings", [(0.01, 30), (0.2, 4)])
def test_the_bounded_candidates_pick_what_a_top_k_over_the_whole_band_picks(x, ratio, samplings):
    comp = mstopk(ratio=ratio, samplings=samplings, seed=3)
    k, mag = num_selected(x.numel(), ratio), x.abs()
    t1, c1, t2, c2, _ = comp._search(mag, k, mag.mean(), mag.max(), torch.int32)
    want = int(k - c1)
    got = comp.band_fill(mag, t1, t2, k - c1, c2 - c1, k)
    full = _fill_by_full_topk(comp, mag, t1, t2, k)
    assert got.shape == (k,) and set(got[:want].tolist()) == set(full[:want].tolist())
    assert bool((got[:want] < x.numel()).all())  # all real band entries


def test_the_fill_is_uniform_over_the_band():
    """Equal magnitudes: every position is in the band; over 400 seeds each of 200 positions is picked
    binomially (400, 10/200): mean 20, sd 4.4. Bounds at 6 sd, and the spread of the counts."""
    x, counts = torch.ones(200), torch.zeros(200)
    for seed in range(400):
        _, idx = mstopk(ratio=0.05, seed=seed).select(x, [200])
        counts[idx] += 1
    assert counts.sum() == 4000 and counts.min() >= 20 - 6 * 4.4 and counts.max() <= 20 + 6 * 4.4
    assert 0.5 < counts.var().sqrt() / math.sqrt(400 * 0.05 * 0.95) < 1.5


def test_the_candidate_capacity_is_bounded_by_k_plus_margins():
    """The fill sorts at most k + 2 (8 sqrt(k) + 16) keys, however large the band (all n entries here)."""
    seen = []

    class Sorts(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if str(func).startswith(("aten.sort", "aten.topk")):
                seen.append(args[0].numel())
            return func(*args, **(kwargs or {}))

    n, k = 1_000_000, 1000
    with Sorts():
        mstopk(ratio=k / n).select(torch.ones(n), [n])
    assert seen == [k + 2 * math.ceil(8 * math.sqrt(k) + 16)]


# ---------------------------------------------------------------------------------- hostile inputs
def test_k_at_least_numel_sends_everything():
    x = gaussian(300, 7)
    values, idx = mstopk(ratio=1.0).select(x, [300])
    assert sorted(idx.tolist()) == list(range(300)) and torch.equal(values, x[idx])
    assert torch.equal(mstopk(ratio=1.0).reduce(x), x)


def test_all_zeros_send_k_zeros_at_distinct_positions():
    values, idx = mstopk(ratio=0.01).select(torch.zeros(10_000), [10_000])
    assert idx.unique().numel() == 100 and not values.any()
    assert not mstopk(ratio=0.01).reduce(torch.zeros(10_000)).any()


def test_nonfinite_gradients_raise_unless_allowed():
    x = gaussian(1000)
    x[17] = math.nan
    with pytest.raises(CompressorError, match="NaN or Inf; pass allow_nonfinite=True"):
        mstopk().reduce(x)
    values, idx = mstopk(allow_nonfinite=True).select(x, [1000])  # let through: still k slots, no crash
    assert values.shape == idx.shape == (10,)


def test_meta_tensors_plan_the_same_payload():
    plan = C.get("mstopk", ratio=0.01).plan([(25_557_032,)], world_size=2)
    assert [c.nbytes for c in plan] == [4 * 255_571, 4 * 255_571]  # fp32 values, int32 positions
    assert index_dtype(25_557_032) == torch.int32


# ---------------------------------------------------------------------------------- the fused search
CASES = {"gauss": gaussian(40_000, 8), "equal": torch.ones(3000), "zeros": torch.zeros(3000),
         "few-levels": torch.randint(-3, 4, (20_000,), generator=torch.Generator().manual_seed(9)).float(),
         "heavy": gaussian(30_000, 10) ** 5, "nan": torch.tensor([math.nan, 1.0, 2.0, 3.0] * 100),
         "inf": torch.tensor([math.inf, 1.0, 2.0] * 100)}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("ratio,rounds", [(0.01, 30), (0.2, 7), (1.0, 12), (0.05, 1)])
@pytest.mark.parametrize("bits", [_fast._MSTOPK_BITS, 4])
@pytest.mark.parametrize("keep_from", [1, 0, None])
def test_fused_search_equals_the_reference_loop_bit_for_bit(name, ratio, rounds, bits, keep_from):
    """Every pass over all of |g|, or from pass ``keep_from`` on over the entries the previous pass kept."""
    dev = _device()
    mag = CASES[name].to(dev).abs()
    k = num_selected(mag.numel(), ratio)
    comp = MSTopK(ratio=ratio, samplings=rounds, allow_nonfinite=True)
    want = reference(MSTopK, "_search")(comp, mag, k, mag.mean(), mag.max(), torch.int32)
    got = _fast.mstopk_search(mag, k, rounds, mag.mean(), mag.max(), torch.int32, bits=bits, keep_from=keep_from)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and (torch.equal(g, w) or (w.isnan() and g.isnan())), (want, got)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("ratio,rounds", [(0.01, 30), (0.2, 7), (0.05, 1)])
def test_the_fused_band_candidates_equal_the_reference_with_the_same_keys(name, ratio, rounds):
    """Count-then-compact with the keys drawn inside the passes: the positions and keys the reference gets from
    a mask over the keys of :func:`_fast.uniform_keys` (the fast ``keys``), bit for bit, the capacity cutting."""
    dev = _device()
    mag = CASES[name].to(dev).abs()
    k = num_selected(mag.numel(), ratio)
    comp = MSTopK(ratio=ratio, samplings=rounds, allow_nonfinite=True, seed=5)
    comp.step = 3
    t1, c1, t2, c2, _ = comp._search(mag, k, mag.mean(), mag.max(), torch.int32)
    for q, cap in [(1 - (k - c1 + 4) / (c2 - c1).clamp(min=1), k + 40), (torch.tensor(0.0), 7)]:
        q = q.float().to(dev)
        want = reference(MSTopK, "band_candidates")(comp, mag, t1, t2, q, cap)
        fused = fused_band(mag, t1, t2, q, _fast.seed_of(comp, mag.device), cap)
        kept = comp.band_candidates(mag, t1, t2, q, cap)  # the faster of the two on a GPU
        for got in (fused, kept):
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (name, cap)
    assert comp.random_draws == 0  # the keys came from the step on the device


@pytest.mark.gpu
def test_the_cuda_fast_path_never_synchronises():
    if not (torch.cuda.is_available() and _fast.HAVE_TRITON):
        pytest.skip("needs a CUDA GPU with triton (torch.cuda.set_sync_debug_mode)")
    x = gaussian(2_000_003).cuda()
    comp = mstopk(ratio=0.01, allow_nonfinite=True)
    comp.reduce(x, LocalComm())  # compile the kernels first
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = comp.reduce(x, LocalComm())
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert (out != 0).sum() == num_selected(x.numel(), 0.01)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["gauss", "few-levels"])
@pytest.mark.parametrize("keep_from", [1, 0])
def test_the_search_passes_with_a_masked_rest_equal_the_reference_loop(name, keep_from):
    """A size with whole programs of the histogram passes and a masked rest (one block a program): the reference
    loop's thresholds and counts, bit for bit."""
    dev = _device()
    src = CASES[name]
    mag = src.repeat(-(-100_003 // src.numel()))[:100_003].to(dev).abs()
    k = num_selected(mag.numel(), 0.01)
    comp = MSTopK(ratio=0.01, samplings=30)
    want = reference(MSTopK, "_search")(comp, mag, k, mag.mean(), mag.max(), torch.int32)
    got = _fast.mstopk_search(mag, k, 30, mag.mean(), mag.max(), torch.int32, keep_from=keep_from)
    assert all(torch.equal(g, w) for g, w in zip(got, want)), (want, got)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["gauss", "few-levels", "equal", "zeros"])
def test_the_entries_above_the_threshold_on_the_fast_path_are_the_references(name):
    """MSTopK's certain entries (``mag >= t1``, the first k by position) counted then compacted, over all of |g|
    and over the entries the fast search kept: the reference's ``torch.nonzero_static`` positions, at the search's
    own threshold and at +inf (none above)."""
    dev = _device()
    mag = CASES[name].to(dev).abs()
    k = num_selected(mag.numel(), 0.05)
    comp = MSTopK(ratio=0.05)
    t1, _, _, _, kept = comp._search(mag, k, mag.mean(), mag.max(), torch.int32)
    assert kept is not None  # the fast search kept its second pass's entries
    for t in (t1, torch.tensor(math.inf, device=dev)):
        assert OVERRIDES[(MSTopK, "_above")].when(comp, mag, t, k, kept)  # the kernels run, not the reference twice
        want = reference(MSTopK, "_above")(comp, mag, t, k)
        assert torch.equal(comp._above(mag, t, k), want)  # over all of |g|
        assert torch.equal(comp._above(mag, t, k, kept), want)  # over the entries the search kept


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_magnitudes_mean_and_maximum_in_one_pass_are_the_references(name):
    """|g| with its mean and maximum in one pass (``_fast.abs_mean_max``: the mean summed per block, then over
    the blocks; one atomic a program on the maximum's float bits): |g| and the maximum bit for bit, the mean to
    float32 rounding (NaN and inf where the reference's are), at a size with a masked rest (100,003) and at the
    case's own; the same mean on a second call (a fixed order)."""
    dev = _device()
    comp = MSTopK(ratio=0.01, allow_nonfinite=True)
    for x in (CASES[name], CASES[name].repeat(-(-100_003 // CASES[name].numel()))[:100_003]):
        x = (-x).to(dev)  # negative entries and -0.0 too
        assert OVERRIDES[(MSTopK, "_magnitudes")].when(comp, x)  # the kernel runs, not the reference twice
        got = comp._magnitudes(x)
        want = reference(MSTopK, "_magnitudes")(comp, x)
        assert torch.equal(got[0], want[0]) or torch.equal(got[0].isnan(), want[0].isnan())
        torch.testing.assert_close(got[1], want[1], rtol=1e-6, atol=0, equal_nan=True)
        assert torch.equal(got[2], want[2]) or (want[2].isnan() and got[2].isnan()), (got[2], want[2])
        assert torch.equal(comp._magnitudes(x)[1], got[1]) or got[1].isnan()


def test_abs_mean_max_refuses_an_empty_tensor():
    if not _fast.HAVE_TRITON:
        pytest.skip("needs triton")
    with pytest.raises(ValueError, match="empty"):
        _fast.abs_mean_max(torch.zeros(0))


@pytest.mark.gpu
@pytest.mark.parametrize("c1", [0, 3, 40, 50])
def test_the_assembled_payload_is_the_references(c1):
    """The payload from the certain entries and the band fill in one kernel (``_fast.mstopk_assemble``): the
    reference's values and positions bit for bit, with empty slots (position numel) in both lists, c1 from none
    to all of k."""
    dev = _device()
    n, k = 1000, 50
    flat = gaussian(n, 3).to(dev)
    gen = torch.Generator().manual_seed(4)
    above = torch.randperm(n, generator=gen)[:k].sort().values
    above[c1:] = n  # the unused slots of the certain entries
    band = torch.randperm(n, generator=gen)[:k]
    band[-5:] = n  # a band with fewer entries than slots
    above, band, c = above.to(dev), band.to(dev), torch.tensor(c1, dtype=torch.int32, device=dev)
    comp = MSTopK(ratio=k / n)
    assert OVERRIDES[(MSTopK, "_assemble")].when(comp, flat, above, c, band)  # the kernel runs
    got = comp._assemble(flat, above, c, band)
    want = reference(MSTopK, "_assemble")(comp, flat, above, c, band)
    assert all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want)), (got, want)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("ratio,rounds,keep_from", [(0.01, 30, 1), (0.2, 7, 0), (0.05, 18, 1)])
def test_the_entries_the_search_kept_are_those_at_or_above_its_bound_in_order(name, ratio, rounds, keep_from):
    """``with_kept``: the first keeping pass's entries, ascending positions and their magnitudes, are exactly those
    at or above that pass's lower bound, so they hold every entry at or above t1; the certain entries taken from
    them are the reference's (the search's own results unchanged)."""
    dev = _device()
    mag = CASES[name].to(dev).abs()
    k = num_selected(mag.numel(), ratio)
    plain = _fast.mstopk_search(mag, k, rounds, mag.mean(), mag.max(), torch.int32, keep_from=keep_from)
    *got, kept = _fast.mstopk_search(mag, k, rounds, mag.mean(), mag.max(), torch.int32, keep_from=keep_from,
                                     with_kept=True)
    assert all(torch.equal(g, w) or (g.isnan() and w.isnan()) for g, w in zip(got, plain))
    bound = mag.mean()  # the keeping pass's lower bound: t2 once a step before it has gone right, else the mean
    if keep_from:
        t2 = _fast.mstopk_search(mag, k, keep_from * _fast._MSTOPK_BITS, mag.mean(), mag.max(), torch.int32,
                                 keep_from=None)[2]
        bound = t2 if t2 > 0 else bound
    vals, pos, count = kept
    want = torch.nonzero(mag >= bound).view(-1)
    n = int(count)
    assert n == want.numel() and torch.equal(pos[:n].long(), want) and torch.equal(vals[:n], mag[want])
    t1 = got[0]
    comp = MSTopK(ratio=ratio, samplings=rounds, allow_nonfinite=True)
    assert torch.equal(_fast.above_from_kept(vals, pos, count, t1, k, mag.numel()),
                       reference(MSTopK, "_above")(comp, mag, t1, k))
