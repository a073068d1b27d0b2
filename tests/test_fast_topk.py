"""The sampled-threshold top-k of :mod:`studykit.compressors._fast` (``_sampled_topk_nosync``, a candidate
``topk_abs`` picks from): exact on any input, the fallback when the sample misses (decided on the device, also
inside a CUDA graph's replay), and its constants by hand.
The kernel tests need a CUDA GPU with triton, or Triton's interpreter on the CPU::

    TRITON_INTERPRET=1 STUDYKIT_FAST_INTERPRET=1 python -m pytest -q tests/test_fast_topk.py

Without either they skip (CI); the constants' test runs everywhere.
"""
# ruff: noqa: F811
import math

import pytest
import torch

from studykit.compressors import _fast

# dev: a GPU, or the CPU under Triton's interpreter; else skip (as a parameter it shadows the import: F811)
from tests.test_bench import dev  # noqa: F401

N = 2**20 + 3  # the smallest sizes the sampled method takes are 16 samples' worth (2**20)


def test_sampled_threshold_constants_by_hand():
    # k = 1000 of n = 2**24: e = 1000 * 65536 / 2**24 = 3.90625 samples expected in the top k;
    # r = ceil(3.90625 + 4 * 1.976424 + 4) = ceil(15.8120) = 16; room = ceil(1.5 * 16 * 256) + 1024 = 7168
    assert _fast._SAMPLES == 65536
    assert _fast._sampled_threshold(1000, 2**24) == (16, 7168)
    # k = 1 % of ResNet-50's 25,557,032: e = 655.36, r = ceil(655.36 + 102.40 + 4) = 762,
    # room = ceil(1.5 * 762 * 25557032 / 65536) + 1024 = ceil(1143 * 389.9694) + 1024 = 445735 + 1024 = 446759
    e = 255_571 * 65536 / 25_557_032
    assert math.ceil(e + 4 * math.sqrt(e) + 4) == 762
    assert _fast._sampled_threshold(255_571, 25_557_032) == (762, 446_759)
    assert _fast._sampled_ok(25_557_032, 255_571)
    assert not _fast._sampled_ok(2**20 - 1, 10)  # too small to sample
    # k = 400,000 of 2**20: r = ceil(25000 + 632.5 + 4) = 25637, room = 1.5 * 25637 * 16 + 1024 = 616312 > n / 2
    assert _fast._sampled_threshold(400_000, 2**20) == (25_637, 616_312)
    assert not _fast._sampled_ok(2**20, 400_000)


def _same_selection(x, idx, k):
    assert idx.numel() == k and idx.unique().numel() == k
    assert torch.equal(x[idx].abs().sort(descending=True).values, torch.topk(x.abs(), k).values)


class _Spy:
    """Records the sizes ``torch.topk`` is called on (the sampled method never calls it) and those radix select
    runs on, with whether it was gated on a device flag (the sampled method selects from the sample and from the
    candidates with it; its fallback on everything is gated)."""

    def __init__(self, monkeypatch):
        self.sizes, self.radix = [], []
        real, real_radix = torch.topk, _fast.topk._radix_select

        def spy(t, *a, **kw):
            self.sizes.append(t.numel())
            return real(t, *a, **kw)

        def spy_radix(x, k, skip=None):
            self.radix.append((x.numel(), skip is not None))
            return real_radix(x, k, skip)

        monkeypatch.setattr(torch, "topk", spy)
        monkeypatch.setattr(_fast.topk, "_radix_select", spy_radix)


@pytest.mark.gpu
@pytest.mark.parametrize("k", [1, 1_000, 10_486, 50_000])
def test_sampled_topk_is_exact_and_never_sorts_everything_on_ordinary_gradients(dev, monkeypatch, k):
    x = torch.randn(N, generator=torch.Generator().manual_seed(k)).to(dev) * torch.linspace(0.1, 3, N).to(dev)
    spy = _Spy(monkeypatch)
    idx = _fast._sampled_topk_nosync(x, k)
    cap = -(-_fast._sampled_threshold(k, N)[1] // _fast._ROOM_ALIGN) * _fast._ROOM_ALIGN  # whole programs
    # no torch.topk at all: radix select on the sample and the candidates, then (gated) on everything
    assert spy.sizes == [] and spy.radix == [(_fast._SAMPLES, False), (cap, False), (N, True)]
    _same_selection(x, idx, k)  # distinct positions, the top k magnitudes


@pytest.mark.gpu
def test_sampled_topk_falls_back_when_the_sample_finds_too_many(dev, monkeypatch):
    """Zeros at every sampled position: the threshold is 0, every element reaches it, far more than the room
    kept (the candidates are then the first positions, holding few of the top k); the result must still be the
    top k (by the fallback on everything: radix select, decided on the device)."""
    k = 1_000
    x = torch.zeros(N)
    x[torch.randperm(N, generator=torch.Generator().manual_seed(1))[:5_000]] = torch.rand(5_000) + 1
    zeros = torch.zeros(N).to(dev)
    _fast._threshold_from_sample(zeros, 1)  # draw the sample positions for this size
    pos = _fast._SAMPLE_POS[(zeros.device, N)].cpu()
    x[pos] = 0.0
    x = x.to(dev)
    spy = _Spy(monkeypatch)
    idx = _fast._sampled_topk_nosync(x, k)
    assert spy.sizes == [] and spy.radix[-1] == (N, True)  # the gated fallback launched (that it ran: exact below)
    _same_selection(x, idx, k)


@pytest.mark.gpu
def test_sampled_topk_falls_back_when_the_sample_finds_too_few(dev, monkeypatch):
    """Huge magnitudes exactly at the sampled positions: the threshold is huge and only those (at most
    65,536) reach it, fewer than k = 100,000."""
    k = 100_000
    x = torch.rand(N, generator=torch.Generator().manual_seed(2))
    zeros = torch.zeros(N).to(dev)
    _fast._threshold_from_sample(zeros, 1)
    pos = _fast._SAMPLE_POS[(zeros.device, N)].cpu()
    x[pos] = 1e6 + torch.arange(pos.numel(), dtype=torch.float32)
    x = x.to(dev)
    spy = _Spy(monkeypatch)
    idx = _fast._sampled_topk_nosync(x, k)
    assert spy.sizes == [] and spy.radix[-1] == (N, True)
    _same_selection(x, idx, k)  # the candidates alone would hold n (unused room) among the positions


@pytest.mark.gpu
def test_sampled_topk_counts_nan_and_inf_as_torch_topk_does(dev):
    x = torch.randn(N, generator=torch.Generator().manual_seed(3))
    x[[5, 77_777, N - 1]] = torch.tensor([float("nan"), float("-inf"), float("inf")])
    x = x.to(dev)
    k = 2_000
    idx = _fast._sampled_topk_nosync(x, k)
    ref = torch.topk(x.abs(), k).indices
    assert set(idx.tolist()) >= {5, 77_777, N - 1} and set(ref.tolist()) >= {5, 77_777, N - 1}
    finite = x[idx].isfinite()
    assert finite.sum() == k - 3
    assert torch.equal(x[idx][finite].abs().sort(descending=True).values,
                       x[ref][x[ref].isfinite()].abs().sort(descending=True).values)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", _fast.COMPACT_SHAPES)
@pytest.mark.parametrize("cap", [5_000, 100_003])
def test_compact_ge_bitmask_walks_full_words(dev, cap, shape):
    """Threshold 0: every element is kept (every word of the bitmask full, zeros included); the positions are
    the first ``cap``, the magnitudes' bits beside them."""
    n = 100_003
    x = torch.randn(n, generator=torch.Generator().manual_seed(9)).to(dev)
    x[::7] = 0.0
    pos, bits, found = _fast._compact_ge(x, torch.zeros(1, dtype=torch.int32, device=dev), cap, *shape)
    assert torch.equal(pos, torch.arange(cap, device=dev)) and found.item() == n
    assert torch.equal(bits, x[:cap].abs().view(torch.int32))


@pytest.mark.gpu
@pytest.mark.parametrize("which", [0, 1])  # radix select's histogram passes, torch.topk
@pytest.mark.parametrize("k", [1, 777, 40_000])
def test_kth_abs_is_the_kth_largest_magnitude_by_either_method(dev, monkeypatch, which, k):
    """DGC's threshold: few distinct magnitudes (ties everywhere, zeros, infinities), both methods ``kth_abs``
    picks between give the k-th largest |x| exactly, as a 1-element tensor."""
    monkeypatch.setattr(_fast, "pick", lambda key, fns: which)
    monkeypatch.setattr(_fast, "pick_replayed", lambda key, fns: which)
    x = torch.randint(-50, 51, (65_536,), generator=torch.Generator().manual_seed(k)) * 0.5
    x[[3, 9]] = torch.tensor([float("inf"), float("-inf")])
    x = x.to(dev)
    got = _fast.kth_abs(x, k)
    assert got.shape == (1,) and got.dtype == torch.float32
    assert got.item() == torch.sort(x.abs(), descending=True).values[k - 1].item()


@pytest.mark.gpu
def test_radix_topk_gated_on_the_device_leaves_out_alone_or_fills_it(dev):
    """``skip`` nonzero: every kernel returns at once and ``out`` keeps what it held; zero: the top k."""
    x = torch.randn(100_003, generator=torch.Generator().manual_seed(4)).to(dev)
    k = 777
    out = torch.full((k,), -5, dtype=torch.int64, device=dev)
    assert _fast._radix_topk(x, k, out=out, skip=torch.ones(1, dtype=torch.int32, device=dev)) is out
    assert (out == -5).all()
    _fast._radix_topk(x, k, out=out, skip=torch.zeros(1, dtype=torch.int32, device=dev))
    _same_selection(x, out, k)


@pytest.mark.gpu
def test_topk_abs_offers_the_sampled_method_only_where_it_applies(dev, monkeypatch):
    seen = {}

    def fake_pick(key, fns):
        seen[key] = len(fns)
        return len(fns) - 1  # torch.topk

    monkeypatch.setattr(_fast, "pick", fake_pick)
    monkeypatch.setattr(_fast, "pick_replayed", fake_pick)
    big, small = torch.randn(N).to(dev), torch.randn(5_000).to(dev)
    _fast.topk_abs(big, 1_000)
    _fast.topk_abs(small, 10)
    # the sampled method (where it applies), radix select and torch.topk, timed eager and, for a capture, as graph
    # replays; nothing else (no method that waits for the device)
    want = {("topk_no_sync", big.device, N, 1_000): 3, ("topk_no_sync", small.device, 5_000, 10): 2}
    if big.is_cuda:  # graphs exist on CUDA only
        want |= {("topk_graph", big.device, N, 1_000): 3, ("topk_graph", small.device, 5_000, 10): 2}
    assert seen == want


@pytest.mark.gpu
def test_topk_abs_under_capture_replays_the_no_sync_pick(dev, monkeypatch):
    """A process whose eager pick took the sampled method captures the method its replay-timed pick took (here
    ``torch.topk``), not radix select regardless; the replay selects the top k."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (CUDA graphs)")
    picks = {"topk_no_sync": 0, "topk_graph": 2}  # sampled eagerly, torch.topk replayed
    monkeypatch.setattr(_fast, "pick", lambda key, fns: picks.get(key[0], 0))  # compact_ge: its first shape
    monkeypatch.setattr(_fast, "pick_replayed", lambda key, fns: 0)
    monkeypatch.setattr(_fast, "_PICKED", {})
    x = torch.randn(N, generator=torch.Generator().manual_seed(3)).to(dev)
    _fast.topk_abs(x, 1_000)
    _fast.common._PICKED[("topk_graph", x.device, N, 1_000)] = 2
    called = []
    monkeypatch.setattr(_fast.topk, "_radix_topk", lambda *a: called.append("radix"))
    graph = torch.cuda.CUDAGraph()
    torch.cuda.current_blas_handle()
    with torch.cuda.graph(graph):
        idx = _fast.topk_abs(x, 1_000)
    graph.replay()
    torch.cuda.synchronize()
    assert called == []
    assert torch.equal(x[idx].abs().sort(descending=True).values, torch.topk(x.abs(), 1_000).values)


@pytest.mark.gpu
def test_pick_replayed_times_graph_replays_and_leaves_out_what_cannot_be_captured(dev, monkeypatch):
    """A candidate that waits for the device cannot be captured: left out with the others timed as replays
    (the pick is remembered per key); the last candidate failing to capture is an error."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (CUDA graphs)")
    monkeypatch.setattr(_fast, "_PICKED", {})
    x = torch.randn(1 << 20, device=dev)
    waits = lambda: float(x.sum())  # noqa: E731 - a host synchronisation
    fast, slow = (lambda: x.add(1)), (lambda: [x.mul(2) for _ in range(50)])
    with pytest.warns(RuntimeWarning, match="candidate 0 failed"):
        assert _fast.pick_replayed(("t", 1), [waits, slow, fast]) == 2
    assert _fast.common._PICKED[("t", 1)] == 2
    with pytest.raises(RuntimeError):
        _fast.pick_replayed(("t", 2), [fast, waits])
    assert torch.rand(3, device=dev).shape == (3,)  # random draws still work after the failed captures


@pytest.mark.gpu
def test_captured_sampled_topk_decides_on_the_device_at_every_replay(dev):
    """The sampled method decided on the device, held by a CUDA graph: replayed on a gradient its sample
    suits, then (the same buffer, refilled) on one whose sampled positions are all zeros (the sample misses:
    radix select runs inside the replay), it selects the top k both times."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (CUDA graphs)")
    k = 1_000
    x = torch.randn(N, generator=torch.Generator().manual_seed(5)).to(dev)
    _fast._sampled_topk_nosync(x, k)  # eager: the sample positions and compact_ge's shape
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        idx = _fast._sampled_topk_nosync(x, k)
    graph.replay()
    torch.cuda.synchronize()
    _same_selection(x, idx, k)
    bad = torch.zeros(N)
    bad[torch.randperm(N, generator=torch.Generator().manual_seed(6))[:5_000]] = torch.rand(5_000) + 1
    bad[_fast._SAMPLE_POS[(x.device, N)].cpu()] = 0.0
    x.copy_(bad.to(dev))
    graph.replay()
    torch.cuda.synchronize()
    _same_selection(x, idx, k)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", _fast.COMPACT_SHAPES)
@pytest.mark.parametrize("cap", [10, 5_000, 40_000])
def test_compact_ge_is_nonzero_static_of_the_mask(dev, cap, shape):
    """DGC's candidates on the fast path: the same positions as the reference's ``torch.nonzero_static``
    (first ``cap`` by position), with the total count, whether the room is short or not."""
    n = 100_003
    x = torch.randn(n, generator=torch.Generator().manual_seed(cap)).to(dev)
    t = torch.tensor([1.5], device=dev)
    pos, bits, found = _fast._compact_ge(x, t.view(torch.int32), cap, *shape)
    want = torch.nonzero_static(x.abs() >= t, size=cap, fill_value=n).view(-1)
    assert torch.equal(pos, want)
    assert found.item() == (x.abs() >= t).sum().item()
    used = pos < n
    assert torch.equal(bits[used], x[pos[used]].abs().view(torch.int32)) and (bits[~used] == 0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("room", [None, 40_000])
def test_compact_ge_in_a_larger_room_leaves_the_slots_past_cap_unused(dev, room):
    """DGC's candidates in buffers of whole radix select programs: the first ``cap`` slots as without a room,
    every slot past them unused (position n, bits 0); a room smaller than cap is refused."""
    n, cap = 100_003, 5_000
    x = torch.randn(n, generator=torch.Generator().manual_seed(7)).to(dev)
    t = torch.tensor([0.5], device=dev).view(torch.int32)  # about 62 % pass: far more than cap
    pos, bits, found = _fast.compact_ge(x, t, cap, room)
    assert pos.numel() == bits.numel() == (room or cap)
    want = torch.nonzero_static(x.abs() >= 0.5, size=cap, fill_value=n).view(-1)
    assert torch.equal(pos[:cap], want) and (pos[cap:] == n).all() and (bits[cap:] == 0).all()
    assert found.item() == (x.abs() >= 0.5).sum().item()
    with pytest.raises(ValueError, match="room 10 is smaller than cap 5000"):
        _fast.compact_ge(x, t, cap, 10)


@pytest.mark.gpu
@pytest.mark.parametrize("count,room", [(10_486, None), (10_486, 16_384), (1, 4_097)])
def test_sample_abs_bits_is_the_magnitude_at_the_uniform_positions(dev, count, room):
    """DGC's sample in one kernel: |x| at the positions ``uniform_positions`` draws from the same seed, as float
    bits, then +0.0 to the end of the room."""
    n = 2**20 + 3
    x = torch.randn(n, generator=torch.Generator().manual_seed(count)).to(dev)
    seed = _fast.Seed(torch.tensor([5], device=dev), 2**62 + 12_345)
    got = _fast.sample_abs_bits(x, count, seed, room)
    pos = _fast.uniform_positions(n, count, seed, dev)
    assert got.dtype == torch.int32 and got.numel() == (room or count)
    assert torch.equal(got[:count], x[pos].abs().view(torch.int32)) and (got[count:] == 0).all()
    with pytest.raises(ValueError, match="room 0 is smaller than count"):
        _fast.sample_abs_bits(x, count, seed, 0)


@pytest.mark.gpu
def test_take_slots_is_the_candidates_values_and_positions_with_unused_slots_as_zeros(dev):
    """DGC's payload in one kernel: as the reference ``_drop_fill(x, cand[top])``, an unused slot (position n)
    becoming value 0 at position 0; NaN and -inf values carried as they are."""
    from studykit.compressors.sparsification import _drop_fill

    n = 50_000
    x = torch.randn(n, generator=torch.Generator().manual_seed(1))
    x[[11, 12]] = torch.tensor([float("nan"), float("-inf")])
    cand = torch.cat([torch.tensor([11, 12]), torch.randperm(n, generator=torch.Generator().manual_seed(2))[:6000],
                      torch.full((2000,), n)])
    top = torch.randperm(cand.numel(), generator=torch.Generator().manual_seed(3))[:5000]
    top[:3] = torch.tensor([0, 1, cand.numel() - 1])  # the NaN, the -inf and an unused slot
    want_vals, want_idx = _drop_fill(x, cand[top])
    vals, idx = _fast.take_slots(x.to(dev), cand.to(dev), top.to(dev))
    assert torch.equal(idx.cpu(), want_idx)
    torch.testing.assert_close(vals.cpu(), want_vals, rtol=0, atol=0, equal_nan=True)  # the same bits
    assert vals[0].isnan().item() and vals[1].item() == float("-inf")
    assert vals[2].item() == 0 and idx[2].item() == 0


@pytest.mark.gpu
@pytest.mark.parametrize("n", [2**20 + 3, 300_001])  # the sampled threshold; 300,001: a room past n's programs
def test_dgc_on_the_fast_path_selects_what_its_reference_does_from_the_same_sample(dev, monkeypatch, n):
    """DGC's select with its fast overrides (fused sample, k-th largest, compaction into an aligned room, radix
    select among the candidates, the take) against its plain-PyTorch methods drawing the same positions (the
    ``positions`` kernel alone on): the same k values and positions."""
    from studykit.compressors.sparsification import DGC

    from studykit.compressors.fastpath import OVERRIDES

    x = torch.randn(n, generator=torch.Generator().manual_seed(n)).to(dev)
    comp = DGC(ratio=0.01)
    assert all(OVERRIDES[(DGC, m)].when(comp, *args) for m, args in  # the kernels run, not the reference twice
               (("_sample_kth", (x, 4096, 10)), ("_candidates", (x, None, 100))))
    fast_vals, fast_idx = comp.select(x, [n])
    monkeypatch.setattr(_fast, "enabled", lambda *tensors: False)  # every override but positions' (enabled_for)
    ref_vals, ref_idx = DGC(ratio=0.01).select(x, [n])
    assert fast_idx.numel() == ref_idx.numel() == math.ceil(0.01 * n)
    order_f, order_r = torch.argsort(fast_idx), torch.argsort(ref_idx)
    assert torch.equal(fast_idx[order_f], ref_idx[order_r]) and torch.equal(fast_vals[order_f], ref_vals[order_r])
