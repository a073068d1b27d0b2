"""Sparsifiers against dense references: TopK vs torch.topk, RandomK's shared indices,
MSTopK/DGC near the true top-k, TopK-chunked vs a per-chunk loop, wire bytes, bad params."""
import math

import pytest
import torch

from studykit import compressors as C
from studykit.comm import LocalComm
from studykit.compressors.base import CompressorError
from studykit.compressors.sparsification import index_dtype, num_selected
from tests.conftest import worker_grads

SPARSE = ["topk", "randomk", "mstopk", "dgc", "topk_chunked"]
GATHER = ["topk", "mstopk", "dgc", "topk_chunked"]


def gaussian(n, seed=0):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


def topk_dense(g, k):
    """Reference: g with all but its k largest magnitudes zeroed."""
    idx = torch.topk(g.abs().reshape(-1), k).indices
    out = torch.zeros(g.numel())
    out[idx] = g.reshape(-1)[idx]
    return out.reshape(g.shape)


def sent(name, flat, **params):
    """(values, int64 positions) one worker sends for a single flat tensor."""
    comp = C.get(name, error_feedback=False, **params)
    payload, _ = comp.compress(flat, 1)
    return payload[0], payload[1].long()


def overlap(idx, g, k):
    true = set(torch.topk(g.abs(), k).indices.tolist())
    return len(true & set(idx.tolist())) / k


# ---------------------------------------------------------------------- k and dtypes
def test_num_selected_rounds_up_and_ignores_float_noise():
    assert num_selected(1000, 0.01) == 10
    assert num_selected(1001, 0.01) == 11
    assert num_selected(100, 0.07) == 7  # 0.07 * 100 = 7.000000000000001 in floats
    assert num_selected(5, 0.01) == 1
    assert num_selected(5, 1.0) == 5
    assert index_dtype(2**31 - 1) == torch.int32 and index_dtype(2**31) == torch.int64


def test_defaults_and_error_feedback_conventions():
    for name in SPARSE:
        assert C.get(name).error_feedback, name
        assert C.parameters(name)["ratio"] == 0.01
    assert C.get("randomk", error_feedback=False).allreduce_compatible
    assert not any(C.get(n, error_feedback=False).allreduce_compatible for n in GATHER)


def test_ratio_parameter_does_not_hide_the_ratio_method():
    comp = C.get("topk", ratio=0.1, error_feedback=False)
    assert comp.params()["ratio"] == 0.1
    assert "ratio=0.1" in repr(comp)
    assert math.isclose(comp.compression_ratio([(1000,)], 2), 4000 / (100 * 8))


# ------------------------------------------------------------------------------ TopK
@pytest.mark.parametrize("ratio", [0.01, 0.05, 0.3])
def test_topk_selection_equals_torch_topk(ratio):
    g = gaussian(5000)
    k = num_selected(g.numel(), ratio)
    values, idx = sent("topk", g, ratio=ratio)
    ref = torch.topk(g.abs(), k)
    assert set(idx.tolist()) == set(ref.indices.tolist())
    assert torch.equal(values, g[idx])
    out = C.simulate("topk", [g], ratio=ratio, error_feedback=False)[0]
    assert torch.equal(out, topk_dense(g, k))


def test_topk_global_average_over_workers():
    grads = worker_grads(3, shapes=((40, 10), (25,)))
    out = C.simulate("topk", grads, ratio=0.1, error_feedback=False)
    flat = [torch.cat([t.reshape(-1) for t in g]) for g in grads]
    k = num_selected(425, 0.1)
    ref = sum(topk_dense(f, k) for f in flat) / 3
    got = torch.cat([t.reshape(-1) for t in out[1]])
    assert torch.allclose(got, ref, atol=1e-7)


def test_topk_layer_scope_selects_inside_every_tensor():
    grads = worker_grads(2, shapes=((30, 20), (50,), (4, 5, 6), (3,)))
    out = C.simulate("topk", grads, ratio=0.05, scope="layer", error_feedback=False)
    for i, t in enumerate(out[0]):
        k_i = num_selected(grads[0][i].numel(), 0.05)
        ref = (topk_dense(grads[0][i], k_i) + topk_dense(grads[1][i], k_i)) / 2
        assert torch.allclose(t, ref, atol=1e-7), i
    shapes = [(30, 20), (50,), (4, 5, 6), (3,)]
    k = sum(num_selected(math.prod(s), 0.05) for s in shapes)  # 30 + 3 + 6 + 1
    assert C.get("topk", ratio=0.05, scope="layer").wire_bytes(shapes) == 8 * k == 8 * 40


def test_topk_layer_and_global_scope_differ_when_one_tensor_dominates():
    big, small = 100 * gaussian(200, 1), gaussian(200, 2)
    g = C.simulate("topk", [[big, small]], ratio=0.05, error_feedback=False)[0]
    l_ = C.simulate("topk", [[big, small]], ratio=0.05, scope="layer", error_feedback=False)[0]
    assert torch.count_nonzero(g[1]) == 0 and torch.count_nonzero(l_[1]) == 10


@pytest.mark.parametrize("name", SPARSE)
def test_ratio_one_reproduces_the_dense_average_exactly(name):
    grads = worker_grads(3, shapes=((20, 30), (7,), (2, 3, 4)))
    out = C.simulate(name, grads, ratio=1.0, error_feedback=False)
    for i, t in enumerate(out[2]):
        assert torch.equal(t, sum(g[i] for g in grads) / 3), name


@pytest.mark.parametrize("name", SPARSE)
def test_dense_average_exact_with_ratio_one_and_error_feedback_leaves_no_residual(name):
    grads = worker_grads(2, shapes=((64,),))
    sim = C.Simulation(name, 2, ratio=1.0)
    sim.step(grads)
    assert all(torch.count_nonzero(m) == 0 for w in sim.workers for m in w.memory.residuals[None])


# --------------------------------------------------------------------------- RandomK
def test_randomk_indices_identical_across_workers_and_fresh_each_step():
    a = C.get("randomk", ratio=0.1, error_feedback=False)
    b = C.get("randomk", ratio=0.1, error_feedback=False)
    (_, ctx_a), (_, ctx_b) = a.compress(gaussian(1000, 1), 2), b.compress(gaussian(1000, 2), 2)
    assert torch.equal(ctx_a[0], ctx_b[0])
    assert len(set(ctx_a[0].tolist())) == 100
    a.reduce(gaussian(1000), LocalComm())
    assert not torch.equal(a.indices(1000, torch.device("cpu")), ctx_a[0])


@pytest.mark.parametrize("n,ratio", [(100_000, 0.01), (2_000_003, 0.001), (64, 1 / 16)])
def test_randomk_sparse_draws_are_k_distinct_positions(n, ratio):
    comp = C.get("randomk", ratio=ratio, error_feedback=False)
    k = num_selected(n, ratio)
    assert 16 * k <= n  # the draw-with-replacement branch, not the permutation
    idx = comp.indices(n, torch.device("cpu"))
    assert idx.shape == (k,) and idx.unique().numel() == k and 0 <= int(idx.min()) and int(idx.max()) < n


@pytest.mark.slow
def test_randomk_positions_uniform_over_seeds():
    n, k, runs = 64, 4, 4000
    counts = torch.zeros(n)
    for s in range(runs):
        idx = C.get("randomk", ratio=k / n, seed=s, error_feedback=False).indices(n, torch.device("cpu"))
        counts[idx] += 1
    expected = runs * k / n  # 250 per position, binomial sd ~15.5
    assert (counts - expected).abs().max() < 5 * math.sqrt(expected)


@pytest.mark.parametrize("unbiased", [False, True])
def test_randomk_allreduced_result_is_dense_average_on_shared_indices(unbiased):
    grads = [[gaussian(500, r)] for r in range(3)]
    out = C.simulate("randomk", grads, ratio=0.05, unbiased=unbiased, error_feedback=False)
    idx = C.get("randomk", ratio=0.05, error_feedback=False).indices(500, torch.device("cpu"))
    mask = torch.zeros(500, dtype=torch.bool)
    mask[idx] = True
    scale = 500 / 25 if unbiased else 1.0
    dense = sum(g[0] for g in grads) / 3
    got = out[0][0]
    assert torch.allclose(got[mask], scale * dense[mask], atol=1e-5)
    assert torch.count_nonzero(got[~mask]) == 0
    assert all(torch.equal(o[0], out[0][0]) for o in out)


def test_randomk_sends_values_only_by_all_reduce():
    plan = C.get("randomk", ratio=0.01).plan([(1000,), (500,)], 4)
    assert [(c.op, c.numel, c.dtype) for c in plan] == [("all_reduce", 15, torch.float32)]


@pytest.mark.slow
def test_randomk_unbiased_in_expectation_over_seeds():
    g = gaussian(20)
    est = torch.stack([C.simulate("randomk", [g], ratio=0.25, unbiased=True, error_feedback=False, seed=s)[0]
                       for s in range(4000)])
    assert torch.allclose(est.mean(0), g, atol=4 * 3 * g.abs().max() / math.sqrt(4000))
    biased = C.simulate("randomk", [g], ratio=0.25, error_feedback=False)[0]
    assert torch.count_nonzero(biased) == 5 and set(biased[biased != 0].tolist()) <= set(g.tolist())


# ----------------------------------------------------------------------- MSTopK, DGC
@pytest.mark.parametrize("name", ["mstopk", "dgc"])
@pytest.mark.parametrize("n,ratio", [(100_000, 0.01), (200_000, 0.001), (3000, 0.05), (20_000, 0.4)])
def test_approximate_topk_sends_k_and_nearly_the_true_topk(name, n, ratio):
    g = gaussian(n, seed=n)
    k = num_selected(n, ratio)
    values, idx = sent(name, g, ratio=ratio)
    assert values.shape == idx.shape == (k,)
    assert len(set(idx.tolist())) == k  # k distinct positions, no padding needed on Gaussian data
    assert torch.equal(values, g[idx])
    assert overlap(idx, g, k) >= 0.9


@pytest.mark.parametrize("name", ["mstopk", "dgc"])
def test_approximate_topk_on_heavy_tailed_and_tied_data(name):
    heavy = gaussian(50_000, 3) ** 3
    k = num_selected(50_000, 0.01)
    _, idx = sent(name, heavy)
    assert overlap(idx, heavy, k) >= 0.9
    tied = torch.ones(10_000)  # every magnitude equal: any k positions are a top-k
    values, idx = sent(name, tied)
    assert values.shape == (100,) and torch.equal(values, torch.ones(100))
    assert len(set(idx.tolist())) == 100


def test_mstopk_is_exact_topk_on_distinct_magnitudes():
    g = gaussian(10_000, 5)
    _, idx = sent("mstopk", g, ratio=0.02)
    assert overlap(idx, g, 200) == 1.0


def test_dgc_pads_with_zeros_when_too_few_pass_the_threshold():
    # Put 1.0 at exactly 62 of the sampled positions the threshold is read from (the
    # rest of the sample reads 0): only they pass, and the other 938 of the k = 1000
    # payload slots are zero padding.
    n, comp = 100_000, C.get("dgc", ratio=0.01, error_feedback=False)
    pos = comp.positions(n, 4096, torch.device("cpu"))  # the sample the threshold is read from
    g = torch.full((n,), 0.01)
    big = pos.unique()[:62]
    g[pos] = 0.0
    g[big] = 1.0
    payload, _ = comp.compress(g, 1)
    assert payload[0].shape == payload[1].shape == (1000,)
    assert torch.count_nonzero(payload[0]) == 62
    assert set(payload[1][payload[0] != 0].tolist()) == set(big.tolist())


def test_dgc_keeps_the_top_of_the_first_candidates_when_too_many_pass():
    g = torch.zeros(100_000)
    g[:50] = 1.0  # the sample sees (almost) only zeros: threshold 0, every entry a candidate
    out = C.simulate("dgc", [g], ratio=0.01, error_feedback=False)[0]
    assert torch.equal(out[:50], g[:50]) and torch.count_nonzero(out[50:]) == 0


# ---------------------------------------------------------------------- TopK-chunked
def chunked_reference(g, chunk, ratio):
    """Per-chunk loop: keep each chunk's top ceil(ratio * chunk) magnitudes."""
    out = torch.zeros_like(g)
    length = min(chunk, g.numel())
    k_c = num_selected(length, ratio)
    for start in range(0, g.numel(), length):
        piece = g[start:start + length]
        idx = torch.topk(piece.abs(), min(k_c, piece.numel())).indices + start
        out[idx] = g[idx]
    return out


@pytest.mark.parametrize("n,chunk,ratio", [(10_000, 256, 0.05), (4096, 1024, 0.01), (1000, 4096, 0.1),
                                           (70_001, 40_000, 0.001), (999, 1, 0.5)])
def test_topk_chunked_equals_per_chunk_loop(n, chunk, ratio):
    grads = [[gaussian(n, r)] for r in range(2)]
    out = C.simulate("topk_chunked", grads, ratio=ratio, chunk=chunk, error_feedback=False)
    ref = (chunked_reference(grads[0][0], chunk, ratio) + chunked_reference(grads[1][0], chunk, ratio)) / 2
    assert torch.allclose(out[0][0], ref, atol=1e-7)


def test_topk_chunked_offsets_are_chunk_local_in_the_smallest_dtype():
    g = gaussian(100_000)
    comp = C.get("topk_chunked", error_feedback=False)
    payload, _ = comp.compress(g, 1)
    assert comp.offset_dtype(g.numel()) == torch.int16
    assert payload[1].dtype == torch.uint8 and payload[1].numel() == 2 * payload[0].numel()  # int16's bytes
    offsets = payload[1].view(torch.int16)
    assert int(offsets.min()) >= 0 and int(offsets.max()) < 4096
    assert C.get("topk_chunked", chunk=32768).offset_dtype(g.numel()) == torch.int16
    big = C.get("topk_chunked", chunk=32769, error_feedback=False)
    assert big.offset_dtype(g.numel()) == torch.int32 and big.compress(g, 1)[0][1].dtype == torch.int32
    assert big.offset_dtype(1000) == torch.int16  # one chunk of 1000


# ------------------------------------------------------------------------ wire bytes
@pytest.mark.parametrize("name,bytes_per_entry", [("topk", 8), ("mstopk", 8), ("dgc", 8), ("randomk", 4)])
def test_wire_bytes_are_the_theoretical_count(name, bytes_per_entry):
    shapes = [(512, 64), (1000,)]
    k = num_selected(512 * 64 + 1000, 0.01)
    assert C.get(name).wire_bytes(shapes, 4) == bytes_per_entry * k


def test_wire_bytes_topk_chunked():
    n = 25_557_032  # ResNet-50
    chunks, k_c = math.ceil(n / 4096), math.ceil(0.01 * 4096)
    plan = C.get("topk_chunked").plan([(n,)], 8)
    assert [(c.numel, c.dtype) for c in plan] == [(chunks * k_c, torch.float32), (2 * chunks * k_c, torch.uint8)]
    assert sum(c.nbytes for c in plan) == 6 * chunks * k_c


def test_indices_become_int64_from_two_to_the_31_elements():
    for name in ["topk", "mstopk"]:
        plan = C.get(name, ratio=1e-6).plan([(2**31,)], 2)
        assert [c.dtype for c in plan] == [torch.float32, torch.int64]
        assert plan[0].numel == math.ceil(2**31 * 1e-6)


@pytest.mark.parametrize("name", SPARSE)
def test_plan_on_resnet50_sized_bucket(name):
    n = 25_557_032
    plan = C.get(name).plan([(n,)], 16)
    assert plan[0].numel == (math.ceil(n / 4096) * 41 if name == "topk_chunked" else num_selected(n, 0.01))


# ------------------------------------------------------------------------ bad params
@pytest.mark.parametrize("name", SPARSE)
@pytest.mark.parametrize("ratio", [1.5, 0, -0.1, "0.1", True, float("nan")])
def test_bad_ratio_rejected(name, ratio):
    with pytest.raises(CompressorError, match=rf"'{name}'.*ratio must be in \(0, 1\], got"):
        C.get(name, ratio=ratio)


def test_bad_params_name_the_valid_range():
    with pytest.raises(CompressorError, match=r"ratio must be in \(0, 1\], got 1.5"):
        C.get("topk", ratio=1.5)
    with pytest.raises(CompressorError, match="scope must be one of 'global', 'layer', got 'tensor'"):
        C.get("topk", scope="tensor")
    with pytest.raises(CompressorError, match=r"chunk must be an integer in \[1, 2147483648\], got 0"):
        C.get("topk_chunked", chunk=0)
    with pytest.raises(CompressorError, match="chunk must be an integer"):
        C.get("topk_chunked", chunk=16.0)
    with pytest.raises(CompressorError, match="samplings must be an integer >= 1, got 0"):
        C.get("mstopk", samplings=0)
    with pytest.raises(CompressorError, match=r"sample_ratio must be in \(0, 1\], got 2"):
        C.get("dgc", sample_ratio=2)
    with pytest.raises(CompressorError, match="unbiased.*must be a boolean"):
        C.get("randomk", unbiased=2)
    with pytest.raises(CompressorError, match="unknown parameter"):
        C.get("topk", k=10)


# ------------------------------------------------------------------------------ CUDA
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", SPARSE)
def test_cuda_matches_cpu(name):
    grads = worker_grads(2, shapes=((300, 40), (77,)))
    cpu = C.simulate(name, grads, error_feedback=False)
    gpu = C.simulate(name, [[t.cuda() for t in g] for g in grads], error_feedback=False)
    if name in ("randomk", "dgc"):  # CPU and CUDA generators draw different numbers
        assert all(t.is_cuda for t in gpu[0])
        return
    for a, b in zip(cpu[0], gpu[0]):
        assert torch.allclose(a, b.cpu(), atol=1e-6)


# ------------------------------------------------- TopK-chunked, all-reduce (Han et al. 2024)
def test_topk_chunked_allreduce_sends_the_chunks_of_largest_summed_norm():
    world_size, n, chunk = 3, 1000, 64
    grads = [torch.randn(n, generator=torch.Generator().manual_seed(r)) for r in range(world_size)]
    out = C.simulate("topk_chunked_allreduce", grads, ratio=0.2, chunk=chunk, error_feedback=False)
    # dense reference: pad, sum squared norms per chunk over workers, keep the top K chunks of the mean
    rows = [torch.nn.functional.pad(g, (0, -n % chunk)).view(-1, chunk) for g in grads]
    norms = sum(r.pow(2).sum(1) for r in rows)
    k = math.ceil(0.2 * norms.numel())
    keep = torch.zeros(norms.numel(), dtype=torch.bool)
    keep[torch.topk(norms, k).indices] = True
    expected = (sum(rows) / world_size * keep.unsqueeze(1)).view(-1)[:n]
    for w in out:
        assert torch.allclose(w, expected, atol=1e-6)
        assert torch.equal(w, out[0])


def test_topk_chunked_allreduce_is_dense_at_ratio_one_and_plans_two_allreduces():
    grads = [torch.randn(300, generator=torch.Generator().manual_seed(r)) for r in range(2)]
    out = C.simulate("topk_chunked_allreduce", grads, ratio=1.0, chunk=64, error_feedback=False)[0]
    assert torch.allclose(out, (grads[0] + grads[1]) / 2, atol=1e-6)
    comp = C.get("topk_chunked_allreduce")
    n = 25_557_032  # ResNet-50
    chunks = math.ceil(n / 4096)
    plan = comp.plan([(n,)], 64)
    assert [(c.op, c.numel) for c in plan] == [("all_reduce", chunks),
                                               ("all_reduce", math.ceil(0.01 * chunks) * 4096)]
    assert comp.allreduce_compatible and comp.compression_ratio([(n,)], 64) > 95


def test_topk_chunked_allreduce_error_feedback_keeps_the_unsent_chunks():
    x = torch.arange(1.0, 129.0)
    comp = C.get("topk_chunked_allreduce", ratio=0.5, chunk=32)
    first = comp.reduce(x.clone(), key="b")
    assert torch.equal(first[64:], x[64:]) and not first[:64].any()  # the two largest chunks go first
    second = comp.reduce(torch.zeros(128), key="b")
    assert torch.equal(second[:64], x[:64])  # then the residual


def test_mstopk_fills_from_the_band_at_random_not_by_position():
    x = torch.ones(1000)  # every entry ties: all in the band, none above t1
    picks = []
    for seed in range(3):
        comp = C.get("mstopk", ratio=0.01, seed=seed, error_feedback=False)
        values, indices = comp.select(x, [1000])
        assert values.numel() == 10 and indices.unique().numel() == 10 and torch.all(values == 1)
        picks.append(set(indices.tolist()))
    assert picks[0] != set(range(10)) and len({frozenset(p) for p in picks}) == 3


def test_gather_sparse_average_divides_only_the_sent_positions_bit_for_bit():
    """combine divides the positions sent (each once, however many workers sent it) instead of the whole
    gradient: the same numbers, bit for bit, as dividing everything after the sums."""
    from studykit.compressors.sparsification import TopK

    g = torch.Generator().manual_seed(0)
    n, workers = 5_000, 3
    gathered = []
    for w in range(workers):
        idx = torch.randperm(n, generator=g)[:700 + w].to(torch.int32)  # overlapping positions across workers
        gathered.append([torch.randn(idx.numel(), generator=g) * 3, idx])
    dense = torch.zeros(n)
    for values, indices in gathered:
        dense.index_add_(0, indices, values)
    want = dense / workers
    got = TopK().combine(gathered, n)
    assert torch.equal(got, want)
    one = torch.zeros(n).index_add_(0, gathered[0][1], gathered[0][0])  # one worker: the sums themselves
    assert torch.equal(TopK().combine(gathered[:1], n), one)
