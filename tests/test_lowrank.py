"""PowerSGD and ATOMO against dense references (the generic properties are in
test_compressors_api.py; its default shapes are too small to be compressed at rank 4,
so the compressed path is exercised here)."""
import math
import os
import tempfile
import threading

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from studykit import compressors as C
from studykit.comm import LocalComm, RecordingComm, SimGroup, TorchComm
from studykit.compressors.base import CompressorError
from studykit.compressors.lowrank import (Atomo, PowerSGD, atomo_probabilities, orthonormalize_,
                                          systematic_sample)
from tests.conftest import worker_grads

#: shapes that are compressed at rank 2 (several row counts, so P is padded), plus
#: ones that stay dense: a bias, and (3, 2) where rank-2 factors would be larger
MIXED = ((24, 16), (7,), (8, 4, 3, 3), (8, 4, 3, 3), (40, 12), (3, 2))


def resnet50_shapes():
    """Parameter shapes of torchvision's ResNet-50 (25,557,032 parameters)."""
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    cin = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            out = 4 * width
            shapes += [(width, cin, 1, 1), (width,), (width,), (width, width, 3, 3), (width,), (width,),
                       (out, width, 1, 1), (out,), (out,)]
            if b == 0:  # projection shortcut
                shapes += [(out, cin, 1, 1), (out,), (out,)]
            cin = out
    return shapes + [(1000, 2048), (1000,)]


def mean_of(grads, i):
    return sum(g[i].float() for g in grads) / len(grads)


def recorded(name, grads, **params):
    """Run the protocol for len(grads) workers; rank 0's collectives as (op, numel, dtype)."""
    group, log = SimGroup(len(grads)), []

    def run(rank):
        rec = RecordingComm(group.comm(rank))
        C.get(name, **params).reduce(grads[rank], rec)
        if rank == 0:
            log.extend(rec.log)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(grads))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    return [(c.op, c.numel, c.dtype) for c in log]


# ---------------------------------------------------------------- PowerSGD
@pytest.mark.parametrize("warm_start", [True, False])
@pytest.mark.parametrize("shape", [(6, 5), (5, 8), (4, 3, 2, 2)])
def test_powersgd_full_rank_reconstructs_the_average(shape, warm_start):
    grads = worker_grads(3, shapes=(shape, (7,)))
    n, m = shape[0], math.prod(shape[1:])
    comp = C.get("powersgd", rank=min(n, m), warm_start=warm_start, min_compression=0, error_feedback=False)
    assert comp.layout([shape, (7,)]).dense == (1,)  # min_compression=0: the matrix is factored
    out = C.Simulation(comp, 3)
    for _ in range(2):
        res = out.step(grads, key=0)
        for i in range(2):
            assert torch.allclose(res[0][i], mean_of(grads, i), atol=1e-4)


def test_powersgd_matches_algorithm_1_written_per_matrix():
    """Vogels et al. Algorithm 1 for one step, per matrix with torch.linalg.qr, same Q0."""
    world_size, r, shape = 3, 3, (10, 4, 2)
    grads = worker_grads(world_size, shapes=(shape, shape))
    out = C.simulate("powersgd", grads, rank=r, error_feedback=False)[0]
    comp = PowerSGD(rank=r)
    q0 = torch.randn(2 * 8 * r, generator=comp.generator(torch.device("cpu"))).view(2, 8, r)
    for i in range(2):
        ms = [g[i].reshape(10, 8) for g in grads]
        p = sum(m @ q0[i] for m in ms)
        p = torch.linalg.qr(p).Q
        q = sum(m.T @ p for m in ms) / world_size
        assert torch.allclose(out[i], (p @ q.T).reshape(shape), atol=1e-5)


def test_powersgd_estimate_is_a_rank_r_projection_of_the_average():
    """X = Pi mean(M) with Pi an orthogonal projector of rank r: rank(X) <= r and
    X^T (mean(M) - X) = 0, for every group (mixed shapes, padded orthogonalization)."""
    r = 2
    grads = worker_grads(2, shapes=MIXED)
    comp = C.get("powersgd", rank=r, error_feedback=False)
    lay = comp.layout(MIXED)
    assert len(lay.groups) == 3 and any(b.padded for b in lay.ortho)
    out = C.simulate(comp, grads)[0]
    for i, shape in enumerate(MIXED):
        avg = mean_of(grads, i)
        if i not in lay.dense:
            x, a = out[i].reshape(shape[0], -1), avg.reshape(shape[0], -1)
            assert torch.linalg.matrix_rank(x, atol=1e-4) <= r
            assert (x.T @ (a - x)).abs().max() < 1e-4
            assert 0 < x.norm() <= a.norm() * (1 + 1e-5)
        else:  # dense tensors: the exact average
            assert torch.allclose(out[i], avg, atol=1e-6)


def test_powersgd_warm_start_converges_to_best_rank_r_approximation():
    """A fixed gradient with singular values (10, 5, 2, 1, .5): power iteration with a
    warm-started Q converges to the best rank-2 approximation; a fresh Q does not."""
    g = torch.Generator().manual_seed(1)
    u = torch.linalg.qr(torch.randn(20, 5, generator=g)).Q
    v = torch.linalg.qr(torch.randn(15, 5, generator=g)).Q
    s = torch.tensor([10.0, 5.0, 2.0, 1.0, 0.5])
    grad = u @ torch.diag(s) @ v.T
    best = u[:, :2] @ torch.diag(s[:2]) @ v[:, :2].T
    errors = {}
    for warm in (True, False):
        comp = C.get("powersgd", rank=2, warm_start=warm, error_feedback=False)
        for _ in range(15):
            out = comp.reduce(grad, LocalComm(), key="w")
        errors[warm] = float((out - best).norm() / best.norm())
    assert errors[True] < 1e-4
    assert errors[False] > 1e-2
    # exactly low rank: one step is already exact
    low = u[:, :2] @ torch.diag(s[:2]) @ v[:, :2].T
    assert torch.allclose(C.get("powersgd", rank=2, error_feedback=False).reduce(low), low, atol=1e-5)


def test_powersgd_rank_above_gradient_rank_and_zero_gradient_stay_exact_and_finite():
    a = torch.randn(12, 1) @ torch.randn(1, 9)  # rank 1, compressed at rank 3
    out = C.get("powersgd", rank=3, error_feedback=False).reduce(a)
    assert torch.allclose(out, a, atol=1e-5)
    zero = C.get("powersgd", rank=3, error_feedback=False).reduce(torch.zeros(12, 9))
    assert torch.equal(zero, torch.zeros(12, 9))


def test_orthonormalize_gives_orthonormal_columns_and_keeps_padding_zero():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 30, 4, generator=g)
    x[:, 20:] = 0  # padding rows
    x[1, :20, 3] = x[1, :20, 0] + 1e-3 * torch.randn(20, generator=g)  # nearly dependent column
    x[2, :, 3] = x[2, :, 0] - 2 * x[2, :, 1]  # exactly dependent: rank 3
    x[3] = 0  # a zero gradient
    y = orthonormalize_(x.clone())
    gram = y.transpose(1, 2) @ y
    eye = torch.eye(4).expand(5, 4, 4)
    assert torch.allclose(gram[[0, 1, 2, 4]], eye[[0, 1, 2, 4]], atol=1e-5)  # orthonormal even at rank 3
    assert torch.equal(y[3], torch.zeros(30, 4))  # zero stays zero, no NaN
    assert torch.equal(y[:, 20:], torch.zeros(5, 10, 4))
    # same column space as a float64 QR (where it is well defined: full column rank)
    q = torch.linalg.qr(x[[0, 1, 4], :20].double()).Q.float()
    yy = y[[0, 1, 4], :20]
    assert torch.allclose(yy @ yy.transpose(1, 2), q @ q.transpose(1, 2), atol=1e-3)


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_powersgd_collectives_are_dense_then_p_then_q(world_size):
    r = 2
    grads = worker_grads(world_size, shapes=MIXED)
    got = recorded("powersgd", grads, rank=r)
    dense = 7 + 3 * 2
    p = r * (24 + 8 + 8 + 40)  # P: r * n summed over compressed matrices
    q = r * (16 + 36 + 36 + 12)  # Q: r * m summed
    f32 = torch.float32
    assert got == [("all_reduce", dense, f32), ("all_reduce", p, f32), ("all_reduce", q, f32)]
    assert [(c.op, c.numel, c.dtype) for c in C.get("powersgd", rank=r).plan(MIXED, world_size)] == got
    # only matrices: no dense all-reduce; only vectors: no P and Q
    assert [c.numel for c in C.get("powersgd", rank=r).plan([(24, 16)])] == [r * 24, r * 16]
    assert [c.numel for c in C.get("powersgd", rank=r).plan([(7,), (3, 2)])] == [13]


def test_powersgd_ratio_for_resnet50_is_near_the_paper():
    """Agarwal et al. 2022, Table 3: ResNet-50 rank 4 / 8 / 16 -> 72x / 37x / 19x.
    Biases and BN weights travel uncompressed, which this count includes."""
    shapes = resnet50_shapes()
    assert sum(math.prod(s) for s in shapes) == 25_557_032
    for rank, paper in ((4, 72), (8, 37), (16, 19)):
        ratio = C.get("powersgd", rank=rank).compression_ratio(shapes)
        assert 0.85 * paper < ratio < 1.15 * paper, (rank, ratio)
    lay = C.get("powersgd", rank=4, error_feedback=False).layout(shapes)
    assert len(lay.groups) == 21 and len(lay.ortho) == 1  # 54 matrices in 21 shapes, one Gram-Schmidt


# ------------------------------------------------------------------- ATOMO
def test_atomo_probabilities_follow_the_paper():
    s = torch.tensor([[10.0, 1.0, 1.0, 1.0], [4.0, 3.0, 2.0, 1.0], [3.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    p = atomo_probabilities(s, 2)
    assert torch.allclose(p[0], torch.tensor([1.0, 1 / 3, 1 / 3, 1 / 3]))  # cap, then share the rest
    assert torch.allclose(p[1], 2 * s[1] / 10)  # nothing capped: proportional to s
    assert torch.equal(p[2], torch.tensor([1.0, 1.0, 0.0, 0.0]))  # rank <= budget: exact
    assert torch.equal(p[3], torch.zeros(4))
    big = torch.rand(50, 9).sort(descending=True).values
    p = atomo_probabilities(big, 3)
    assert torch.allclose(p.sum(1), torch.full((50,), 3.0), atol=1e-5) and p.max() <= 1


def test_systematic_sampling_has_exact_marginals_and_fixed_size():
    p = torch.tensor([1.0, 0.7, 0.5, 0.4, 0.3, 0.1, 0.0])  # sums to 3
    rows = 40_000
    u = torch.rand(rows, generator=torch.Generator().manual_seed(0))
    idx, valid = systematic_sample(p.expand(rows, 7), 3, u)
    assert valid.all()  # sum(p) = slots: every slot is used
    counts = torch.zeros(7).index_add_(0, idx.reshape(-1), torch.ones(3 * rows)) / rows
    assert (counts - p).abs().max() < 4 * math.sqrt(0.25 / rows)  # 4 sigma of a Bernoulli mean
    assert (idx[:, 1:] > idx[:, :-1]).all()  # never the same component twice
    idx, valid = systematic_sample(torch.tensor([[1.0, 1.0, 0.0]]), 3, torch.tensor([0.5]))
    assert valid.tolist() == [[True, True, False]]


def assert_unbiased(comp, grad: torch.Tensor, n_draws: int = 3000, min_std: float = 0.05) -> None:
    """Mean of ``n_draws`` estimates of ``comp`` (the step, hence the draw, changes every call)
    within 5 standard errors of ``grad``, entry by entry; the draws really are random."""
    draws = torch.stack([comp.reduce(grad, LocalComm()) for _ in range(n_draws)])
    mean, std = draws.mean(0), draws.std(0)
    assert std.max() > min_std  # really random
    assert ((mean - grad).abs() <= 5 * std / math.sqrt(n_draws) + 1e-6).all()


@pytest.mark.slow
def test_atomo_is_unbiased_over_many_seeds():
    """Mean of N estimates within 5 standard errors of the gradient, entry by entry."""
    grad = torch.randn(8, 6, generator=torch.Generator().manual_seed(3))
    assert_unbiased(C.get("atomo", rank=2), grad)
    # the same seed gives the same draw, different seeds (usually) different ones
    draws = [C.get("atomo", rank=2, seed=s).reduce(grad) for s in range(10)]
    assert torch.equal(draws[1], C.get("atomo", rank=2, seed=1).reduce(grad))
    assert any(not torch.equal(d, draws[0]) for d in draws[1:])


@pytest.mark.parametrize("shape", [(6, 5), (5, 8), (4, 3, 2, 2)])
def test_atomo_full_rank_is_exact(shape):
    """At rank min(n, m) every p_i = 1: each worker's SVD is sent whole."""
    grads = worker_grads(3, shapes=(shape, (7,)))
    n, m = shape[0], math.prod(shape[1:])
    out = C.simulate("atomo", grads, rank=min(n, m), min_compression=0)
    for i in range(2):
        assert torch.allclose(out[1][i], mean_of(grads, i), atol=1e-5)


def test_atomo_collectives_and_ratio():
    r = 2
    grads = worker_grads(2, shapes=MIXED)
    got = recorded("atomo", grads, rank=r)
    factors = r * ((24 + 16) + 2 * (8 + 36) + (40 + 12))
    assert got == [("all_reduce", 13, torch.float32), ("all_gather", factors, torch.float32)]
    assert [(c.op, c.numel, c.dtype) for c in C.get("atomo", rank=r).plan(MIXED, 2)] == got
    # same bytes as PowerSGD per step (each worker's share)
    shapes = resnet50_shapes()
    assert C.get("atomo", rank=4).wire_bytes(shapes) == C.get("powersgd", rank=4).wire_bytes(shapes)


def test_atomo_local_is_own_reconstruction_and_average_of_locals_is_estimate():
    grads = worker_grads(3, shapes=((12, 10),))
    group, res = SimGroup(3), [None] * 3

    def run(rank):
        res[rank] = C.get("atomo", rank=3).reduce(grads[rank], group.comm(rank), return_local=True)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(3)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    locals_ = [loc[0] for _, loc in res]
    assert torch.allclose(sum(locals_) / 3, res[0][0][0], atol=1e-5)
    for loc in locals_:
        assert torch.linalg.matrix_rank(loc, atol=1e-4) <= 3


# ------------------------------------------------------------ both methods
@pytest.mark.parametrize("name", ["powersgd", "atomo"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_compressed_path_keeps_dtypes_and_workers_agree(name, dtype):
    grads = worker_grads(3, shapes=MIXED, dtype=dtype)
    sim = C.Simulation(name, 3, rank=2)
    for _ in range(2):  # second step: warm start and error-feedback memory in play
        out = sim.step(grads, key="k")
        for worker in out:
            assert [(t.shape, t.dtype) for t in worker] == [(g.shape, dtype) for g in grads[0]]
            assert all(torch.isfinite(t.float()).all() for t in worker)
        for worker in out[1:]:
            assert all(torch.equal(a, b) for a, b in zip(worker, out[0]))


@pytest.mark.parametrize("name", ["powersgd", "atomo"])
def test_compressed_path_non_contiguous_same_as_contiguous(name):
    base = worker_grads(2, shapes=((12, 20), (6, 4, 2, 2)))
    nc = [[g[0].t(), g[1].transpose(1, 3)] for g in base]
    c = [[t.contiguous() for t in w] for w in nc]
    assert not nc[0][0].is_contiguous()
    a, b = C.simulate(name, nc, rank=2), C.simulate(name, c, rank=2)
    assert all(torch.equal(x, y) for x, y in zip(a[0], b[0]))


@pytest.mark.parametrize("name", ["powersgd", "atomo"])
@pytest.mark.parametrize("bad, match", [
    (dict(rank=0), r"rank must be an integer >= 1, got 0"),
    (dict(rank=-2), r"rank must be an integer >= 1, got -2"),
    (dict(rank=2.5), r"rank must be an integer >= 1, got 2.5"),
    (dict(rank=True), r"rank must be an integer >= 1, got True"),
    (dict(min_compression=-1), r"min_compression must be a finite number >= 0, got -1"),
    (dict(min_compression=float("nan")), r"min_compression must be a finite number >= 0, got nan"),
])
def test_bad_parameters_raise(name, bad, match):
    with pytest.raises(CompressorError, match=rf"'{name}': {match}"):
        C.get(name, **bad)


def test_bad_warm_start_raises_and_atomo_has_no_warm_start():
    with pytest.raises(CompressorError, match="'warm_start' must be a boolean.*got 'maybe'"):
        C.get("powersgd", warm_start="maybe")
    assert C.get("powersgd", warm_start="no", error_feedback="no").warm_start is False  # issue 17: strict words
    with pytest.raises(CompressorError, match="unknown parameter"):
        C.get("atomo", warm_start=True)
    assert C.parameters("powersgd") == {"rank": 4, "warm_start": True, "min_compression": 1.0,
                                         "orthogonalize": "twice", "reuse": 1}
    assert C.parameters("atomo") == {"rank": 4, "min_compression": 1.0, "svd": "exact"}


# ------------------------------------------------------- error feedback
def test_error_feedback_is_on_for_powersgd_by_default_and_keeps_memory_per_key():
    comp = C.get("powersgd", rank=1)
    assert isinstance(comp, PowerSGD) and isinstance(comp.memory, C.ResidualMemory)
    assert isinstance(C.get("powersgd", error_feedback=False), PowerSGD)
    assert C.get("powersgd", error_feedback=False).memory is None
    assert isinstance(C.get("atomo"), Atomo)  # unbiased: no error feedback by default
    ga = [torch.randn(10, 8), torch.randn(5)]
    gb = [torch.randn(6, 9, 2)]
    out_a = comp.reduce(ga, key="a")
    comp.reduce(gb, key="b")
    assert set(comp.memory.residuals) == {"a", "b"} and set(comp.state) == {"a", "b"}
    # memory = corrected gradient - the aggregated estimate; zero for the dense bias
    assert torch.allclose(comp.memory.residuals["a"][0], ga[0] - out_a[0], atol=1e-6)
    assert torch.equal(comp.memory.residuals["a"][1], torch.zeros(5))
    assert comp.memory.residuals["a"][0].norm() > 0
    with pytest.raises(CompressorError, match="memory for key 'a'"):
        comp.reduce(gb, key="a")


def test_error_feedback_running_mean_converges_to_a_fixed_gradient():
    """Sum of T estimates = T g - memory_T, so their mean approaches g like 1/T."""
    grad = torch.randn(12, 10, generator=torch.Generator().manual_seed(5))
    comp = C.get("powersgd", rank=1)
    total, errors = torch.zeros_like(grad), {}
    for t in range(1, 201):
        total += comp.reduce(grad, key=0)
        if t in (10, 200):
            errors[t] = float((total / t - grad).norm() / grad.norm())
    assert errors[200] < 0.05 and errors[200] < errors[10] / 4


# ----------------------------------------------------- real processes
def _gloo_worker(rank, world_size, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        comm, res = TorchComm(), {}
        for name in ("powersgd", "atomo"):
            comp = C.get(name, rank=2)
            res[name] = [comp.reduce(worker_grads(world_size, MIXED, seed=s)[rank], comm, key="b")
                         for s in range(2)]
        torch.save(res, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_gloo_compressed_path_matches_simulate():
    world_size = 2
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_gloo_worker, args=(world_size, os.path.join(tmp, "init"), tmp), nprocs=world_size, join=True)
        got = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(world_size)]
    for name in ("powersgd", "atomo"):
        sim = C.Simulation(name, world_size, rank=2)
        for step in range(2):
            expected = sim.step(worker_grads(world_size, MIXED, seed=step), key="b")
            for rank in range(world_size):
                for a, b in zip(got[rank][name][step], expected[rank]):
                    assert torch.allclose(a, b, atol=1e-4), (name, rank, step)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("name", ["powersgd", "atomo"])
def test_cuda_full_rank_is_exact_and_low_rank_is_a_projection(name):
    """CUDA generators draw other numbers than CPU ones, so the checks are device-free."""
    grads = [[t.cuda() for t in w] for w in worker_grads(2, shapes=MIXED)]
    kw = dict(error_feedback=False) if name == "powersgd" else {}
    out = C.simulate(name, grads, rank=100, min_compression=0, **kw)  # rank min(n, m) everywhere
    for i, t in enumerate(out[0]):
        assert t.device.type == "cuda" and torch.allclose(t, mean_of(grads, i), atol=1e-4)
    out = C.simulate(name, grads, rank=2, **kw)
    assert all(torch.equal(a, b) for a, b in zip(out[0], out[1]))
    if name == "powersgd":
        for i in (0, 2, 4):
            x, a = out[0][i].reshape(MIXED[i][0], -1), mean_of(grads, i).reshape(MIXED[i][0], -1)
            assert (x.T @ (a - x)).abs().max() < 1e-4


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_cholesky_orthonormalization_equals_gram_schmidt():
    from studykit.compressors.lowrank import orthonormalize_, orthonormalize_cholesky_

    x = torch.randn(7, 3072, 32, device="cuda")
    got, want = orthonormalize_cholesky_(x.clone()), orthonormalize_(x.clone())
    assert torch.allclose(got, want, atol=1e-4)
    assert torch.allclose(got.transpose(1, 2) @ got, torch.eye(32, device="cuda").expand(7, 32, 32), atol=1e-4)


# ------------------------------------------- low-overhead variants (Han et al. 2024)
def test_powersgd_reuse_skips_the_p_round_and_projects_on_the_kept_subspace():
    from studykit.comm import LocalComm, RecordingComm
    comp = C.get("powersgd", rank=2, reuse=3, error_feedback=False)
    grads = [torch.randn(16, 12, generator=torch.Generator().manual_seed(s)) for s in range(4)]
    ops = []
    for g in grads:
        rec = RecordingComm(LocalComm())
        out = comp.reduce([g], rec, key="b")[0]
        ops.append([c.numel for c in rec.log])
    assert ops == [[16 * 2, 12 * 2], [12 * 2], [12 * 2], [16 * 2, 12 * 2]]  # full, reuse, reuse, full
    p = comp.state["b"]["ps"][0][0]  # (16, 2), orthonormal, from the 4th (full) step
    assert torch.allclose(p.T @ p, torch.eye(2), atol=1e-5)
    assert torch.allclose(out, p @ p.T @ grads[3], atol=1e-5)


def test_powersgd_single_gram_schmidt_pass_is_orthonormal_on_well_conditioned_p():
    g = torch.randn(64, 48, generator=torch.Generator().manual_seed(0))
    once = C.get("powersgd", rank=4, orthogonalize="once", error_feedback=False).reduce([g])[0]
    twice = C.get("powersgd", rank=4, error_feedback=False).reduce([g])[0]
    assert torch.allclose(once, twice, atol=1e-4)


def test_cholesky_orthonormalization_equals_gram_schmidt_with_few_operations_at_any_rank():
    """Shifted CholeskyQR2 (``orthogonalize="cholesky"``) gives Gram-Schmidt's Q for a full-rank P, keeps zero
    columns, zero matrices and zero padding rows at zero, stays orthonormal on an ill-conditioned P (singular
    values over six decades), runs on ``meta``, and issues the same number of operations at rank 4 and 32."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from studykit.compressors.lowrank import orthonormalize_, orthonormalize_cholesky_

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    gen = torch.Generator().manual_seed(0)
    counts = {}
    for r in (1, 4, 32):
        x = torch.randn(5, 200, r, generator=gen)
        want = orthonormalize_(x.clone())
        Count.n = 0
        with Count():
            got = orthonormalize_cholesky_(x.clone())
        counts[r] = Count.n
        assert torch.allclose(got, want, atol=1e-5)
        assert torch.allclose(got.transpose(1, 2) @ got, torch.eye(r).expand(5, r, r), atol=1e-5)
    assert counts[4] == counts[32] <= 30 < 4 + 10 * 31  # Gram-Schmidt (two passes) at r = 32: 314
    x = torch.randn(3, 50, 4, generator=gen)
    x[:, :, 2], x[1], x[:, 40:] = 0, 0, 0
    got = orthonormalize_cholesky_(x.clone())
    assert got[:, :, 2].abs().max() == 0 and got[1].abs().max() == 0 and got[:, 40:].abs().max() == 0
    assert torch.allclose(got, orthonormalize_(x.clone()), atol=1e-5)
    u, _ = torch.linalg.qr(torch.randn(300, 8, dtype=torch.float64, generator=gen))
    ill = (u * torch.logspace(0, -6, 8, dtype=torch.float64)).float().unsqueeze(0)
    q = orthonormalize_cholesky_(ill.clone())
    assert torch.allclose(q.transpose(1, 2) @ q, torch.eye(8), atol=1e-5)
    assert orthonormalize_cholesky_(torch.empty(2, 10, 4, device="meta")).shape == (2, 10, 4)


def test_powersgd_cholesky_variant_gives_the_gram_schmidt_estimate():
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(64, 48, generator=gen), torch.randn(32, 16, 3, 3, generator=gen), torch.randn(10)]
    chol = C.get("powersgd", rank=4, orthogonalize="cholesky", error_feedback=False)
    gs = C.get("powersgd", rank=4, error_feedback=False)
    for _ in range(3):  # warm start: the power iteration goes on
        for a, b in zip(chol.reduce(grads, key="k"), gs.reduce(grads, key="k")):
            assert torch.allclose(a, b, atol=1e-4)
    assert [c.numel for c in chol.plan([g.shape for g in grads])] == [c.numel for c in gs.plan([g.shape for g in grads])]


@pytest.mark.parametrize("params", [{"orthogonalize": "once"}, {"reuse": 2}, {"orthogonalize": "cholesky"}])
def test_powersgd_variants_simulate_identically_on_every_worker(params):
    grads = [[torch.randn(16, 12, generator=torch.Generator().manual_seed(r))] for r in range(3)]
    sim = C.Simulation("powersgd", 3, **params)
    for _ in range(3):
        out = sim.step(grads, key="b")
        assert all(torch.equal(w[0], out[0][0]) for w in out)


def test_powersgd_variant_parameters_are_checked():
    with pytest.raises(C.CompressorError, match="orthogonalize"):
        C.get("powersgd", orthogonalize="never")
    with pytest.raises(C.CompressorError, match="reuse"):
        C.get("powersgd", reuse=0)
