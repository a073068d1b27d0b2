"""ATOMO's ``svd="gram"`` option against the exact ``torch.linalg.svd`` path (issue 19 item 2).

The Gram route (eigendecomposition of the smaller Gram matrix, fp32) squares the condition
number: singular values below about sqrt(eps) * s_max lose their relative accuracy. These tests
state the tolerances, check that the estimate stays unbiased, that the wire format and the plan
do not move, and that hostile inputs behave as on the exact path.
"""
import math
import threading

import pytest
import torch

from studykit import compressors as C
from studykit.comm import RecordingComm, SimGroup
from studykit.compressors.base import CompressorError
from studykit.compressors.lowrank import atomo_probabilities, gram_svd
from tests.conftest import worker_grads
from tests.test_lowrank import MIXED, assert_unbiased, recorded, resnet50_shapes

EPS32 = torch.finfo(torch.float32).eps
#: small versions of the kit's matrix shapes: conv kernels (wide), a 1x1 expansion (tall), a
#: classifier, a square one
SHAPES = [(16, 8, 3, 3), (32, 8, 1, 1), (10, 20), (12, 12)]


def ill_conditioned(n: int, m: int, s: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """An fp32 n x m matrix with singular values ``s`` (descending, len min(n, m)), random vectors."""
    g = torch.Generator().manual_seed(seed)
    k = min(n, m)
    u = torch.linalg.qr(torch.randn(n, k, generator=g, dtype=torch.float64)).Q
    v = torch.linalg.qr(torch.randn(m, k, generator=g, dtype=torch.float64)).Q
    return (u * s.double()) @ v.T


def spectrum(mat: torch.Tensor) -> torch.Tensor:
    """Singular values of the fp32 matrix ``mat`` (n, m) from :func:`gram_svd`, descending."""
    s, _, scale = gram_svd(mat.float().unsqueeze(0))
    return (s * scale.view(-1, 1))[0]


# ------------------------------------------------------------ the spectrum
@pytest.mark.parametrize("shape", SHAPES)
def test_gram_singular_values_match_the_exact_svd_on_random_matrices(shape):
    """Gaussian matrices (condition number below ~100): every value within 1e-5 * s_max."""
    mat = torch.randn(shape, generator=torch.Generator().manual_seed(1)).reshape(shape[0], -1)
    exact = torch.linalg.svdvals(mat)
    got = spectrum(mat)
    assert got.shape == exact.shape and (got[:-1] >= got[1:]).all()  # descending, k = min(n, m) values
    assert (got - exact).abs().max() <= 1e-5 * exact[0]


@pytest.mark.parametrize("n, m", [(16, 72), (32, 8), (12, 12)])
def test_gram_loses_only_values_below_sqrt_eps_of_an_ill_conditioned_matrix(n, m):
    """Singular values 1 .. 1e-8: above 1e-2 * s_max within 1e-4 relative; every value within
    2 sqrt(eps) s_max absolute (the squared condition number); never NaN, never negative, never
    zero on a nonzero matrix (so every atom keeps p > 0 and the estimate stays unbiased)."""
    k = min(n, m)
    s_true = torch.logspace(0, -8, k, dtype=torch.float64)
    mat = ill_conditioned(n, m, s_true).float()
    exact = torch.linalg.svdvals(mat.double())  # of the fp32 matrix itself
    got = spectrum(mat).double()
    assert torch.isfinite(got).all() and (got > 0).all()
    big = exact >= 1e-2 * exact[0]
    assert ((got - exact).abs()[big] <= 1e-4 * exact[big]).all()
    assert (got - exact).abs().max() <= 2 * math.sqrt(EPS32) * exact[0]
    # ... while the fp32 exact SVD resolves them far below that: this is the price of the option
    assert (torch.linalg.svdvals(mat).double() - exact).abs().max() < 0.1 * math.sqrt(EPS32) * exact[0]


@pytest.mark.parametrize("n, m", [(16, 72), (32, 8)])
def test_gram_vectors_are_orthonormal_so_the_atoms_sum_to_the_matrix(n, m):
    """ATOMO is unbiased for any orthonormal atomic decomposition: the eigenvectors of the Gram
    matrix are orthonormal to working precision even where their singular values are not
    accurate, and every atom of a nonzero matrix has p > 0, so E[estimate] = U U^T M = M."""
    mat = ill_conditioned(n, m, torch.logspace(0, -8, min(n, m), dtype=torch.float64)).float().unsqueeze(0)
    s, vecs, _ = gram_svd(mat)
    k = min(n, m)
    assert vecs.shape == (1, k, k)
    assert torch.allclose(vecs.mT @ vecs, torch.eye(k), atol=1e-5)
    assert (atomo_probabilities(s, 2) > 0).all()


def test_gram_svd_scales_so_huge_and_tiny_matrices_stay_finite():
    base = torch.randn(2, 12, 30, generator=torch.Generator().manual_seed(2))
    ref = torch.linalg.svdvals(base)
    for factor in (1e30, 1e-30):  # squares would overflow / underflow fp32 without scaling
        s, vecs, scale = gram_svd(base * factor)
        assert torch.isfinite(s).all() and torch.isfinite(vecs).all()
        assert torch.allclose(s * scale.view(-1, 1) / factor, ref, rtol=1e-4, atol=1e-5 * ref.max())


# ----------------------------------------------------------- the estimate
@pytest.mark.parametrize("shape", [(8, 6), (6, 8)])
@pytest.mark.slow
def test_gram_atomo_is_unbiased_over_many_seeds(shape):
    grad = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    assert_unbiased(C.get("atomo", rank=2, svd="gram"), grad)


@pytest.mark.slow
def test_gram_atomo_is_unbiased_on_an_ill_conditioned_matrix():
    grad = ill_conditioned(8, 6, torch.tensor([1.0, 0.5, 0.1, 1e-2, 1e-3, 1e-5])).float()
    assert_unbiased(C.get("atomo", rank=2, svd="gram"), grad, min_std=0.01)


@pytest.mark.parametrize("shape", [(6, 5), (5, 8), (4, 3, 2, 2)])
def test_gram_full_rank_is_exact(shape):
    """At rank min(n, m) every p_i = 1: every atom u_i u_i^T M (or M v_i v_i^T) is sent, and they sum to M."""
    grads = worker_grads(3, shapes=(shape, (7,)))
    out = C.simulate("atomo", grads, rank=min(shape[0], math.prod(shape[1:])), min_compression=0, svd="gram")
    for i in range(2):
        assert torch.allclose(out[1][i], sum(g[i] for g in grads) / 3, atol=1e-5)


@pytest.mark.parametrize("world_size", [1, 3])
def test_gram_gives_the_exact_paths_estimate_for_the_same_seed(world_size):
    """Same seed, same draws: where the spectrum is well separated both options pick the same
    atoms (signs of singular vectors cancel in u v^T), so the estimates agree to fp32 accuracy."""
    grads = worker_grads(world_size, shapes=MIXED + ((16, 8, 3, 3), (32, 8, 1, 1)), seed=4)
    exact = C.simulate("atomo", grads, rank=2)
    gram = C.simulate("atomo", grads, rank=2, svd="gram")
    for a, b in zip(exact[0], gram[0]):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-4 * a.abs().max())
    for worker in gram[1:]:  # every worker ends with the same estimate
        assert all(torch.equal(a, b) for a, b in zip(worker, gram[0]))


def test_gram_local_is_own_rank_r_reconstruction_and_average_of_locals_is_estimate():
    grads = worker_grads(3, shapes=((12, 10), (10, 12)))
    group, res = SimGroup(3), [None] * 3

    def run(rank):
        res[rank] = C.get("atomo", rank=3, svd="gram").reduce(grads[rank], group.comm(rank), return_local=True)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(3)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for i in range(2):
        locals_ = [loc[i] for _, loc in res]
        assert torch.allclose(sum(locals_) / 3, res[0][0][i], atol=1e-5)
        assert all(torch.linalg.matrix_rank(loc, atol=1e-4) <= 3 for loc in locals_)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gram_keeps_dtypes(dtype):
    grads = worker_grads(2, shapes=MIXED, dtype=dtype)
    out = C.simulate("atomo", grads, rank=2, svd="gram")
    assert [(t.shape, t.dtype) for t in out[0]] == [(g.shape, dtype) for g in grads[0]]
    assert all(torch.isfinite(t.float()).all() for t in out[0])


# -------------------------------------------------------- wire and plan
def test_gram_sends_the_same_collectives_bytes_and_plan():
    grads = worker_grads(2, shapes=MIXED)
    exact = recorded("atomo", grads, rank=2)
    assert recorded("atomo", grads, rank=2, svd="gram") == exact
    assert [(c.op, c.numel, c.dtype) for c in C.get("atomo", rank=2, svd="gram").plan(MIXED, 2)] == exact
    shapes = resnet50_shapes()
    assert C.get("atomo", svd="gram").wire_bytes(shapes) == C.get("atomo").wire_bytes(shapes)
    rec = RecordingComm(SimGroup(1).comm(0))
    C.get("atomo", rank=2, svd="gram").reduce(grads[0], rec)
    assert [(c.op, c.numel, c.dtype) for c in rec.log] == \
        [(c.op, c.numel, c.dtype) for c in C.get("atomo", rank=2).plan(MIXED, 1)]


# ----------------------------------------------------------- hostile input
@pytest.mark.parametrize("svd", ["exact", "gram"])
def test_zero_and_rank_one_matrices_come_back_exactly_and_finite(svd):
    g = torch.Generator().manual_seed(5)
    rank_one = torch.randn(16, 1, generator=g) @ torch.randn(1, 72, generator=g)
    tall_rank_one = rank_one.T.contiguous()
    zeros = torch.zeros(16, 72)
    out = C.get("atomo", rank=2, svd=svd).reduce([zeros, rank_one, tall_rank_one])
    assert torch.equal(out[0], zeros)
    for got, want in zip(out[1:], (rank_one, tall_rank_one)):
        assert torch.isfinite(got).all()
        assert torch.allclose(got, want, atol=1e-5 * want.abs().max())


@pytest.mark.parametrize("factor", [1e30, 1e-30])
def test_gram_on_huge_and_tiny_gradients_matches_the_exact_path(factor):
    grads = [[t * factor for t in w] for w in worker_grads(2, shapes=((16, 72), (32, 8)), seed=6)]
    exact = C.simulate("atomo", grads, rank=2)[0]
    gram = C.simulate("atomo", grads, rank=2, svd="gram")[0]
    for a, b in zip(exact, gram):
        assert torch.isfinite(b).all()
        assert torch.allclose(a / factor, b / factor, rtol=1e-3, atol=1e-4 * (a / factor).abs().max())


@pytest.mark.parametrize("svd", ["exact", "gram"])
def test_nonfinite_gradient_is_refused_by_both_options(svd):
    bad = torch.randn(16, 72)
    bad[3, 4] = float("nan")
    with pytest.raises(CompressorError, match=r"'atomo': tensor 0 contains NaN or Inf; pass allow_nonfinite=True"):
        C.get("atomo", rank=2, svd=svd).reduce([bad])
    # let through, the decomposition itself refuses it on CPU, on either option
    with pytest.raises(torch.linalg.LinAlgError):
        C.get("atomo", rank=2, svd=svd, allow_nonfinite=True).reduce([bad])


@pytest.mark.parametrize("bad", ["fast", "lowrank", "GRAM", None, 1])
def test_bad_svd_option_names_the_valid_ones(bad):
    with pytest.raises(CompressorError, match=rf"'atomo': svd must be one of 'exact', 'gram', got {bad!r}"):
        C.get("atomo", svd=bad)


def test_svd_option_default_is_exact_and_is_recorded():
    assert C.parameters("atomo")["svd"] == "exact"
    assert C.get("atomo").svd == "exact" and C.get("atomo", svd="gram").svd == "gram"


# ------------------------------------------------------------------- CUDA
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_gram_matches_the_cpu_spectrum_and_full_rank_is_exact():
    """The GPU run of the same code (its Gram matrices decomposed in float64): same singular values as on CPU, full
    rank exact, workers agree, hostile scales finite. CUDA draws other numbers, so no seed-for-seed check."""
    mat = ill_conditioned(64, 576, torch.logspace(0, -6, 64, dtype=torch.float64)).float().unsqueeze(0)
    cpu = gram_svd(mat)
    cuda = gram_svd(mat.cuda())
    assert torch.allclose(cuda[0].cpu(), cpu[0], rtol=1e-4, atol=2 * math.sqrt(EPS32) * cpu[0].max())
    # on the GPU the Gram matrix is decomposed in float64: its eigenvalues to float32 rounding, where cuSOLVER's
    # fp32 Jacobi solver is off by up to ~2e-4 of the largest (benchmarks/atomo_eigh.py)
    x = mat.cuda() / cuda[2]
    w = torch.linalg.eigh(torch.bmm(x, x.mT).double())[0].flip(-1)
    assert (cuda[0].double() ** 2 - w).abs().max() <= 4 * EPS32 * w.max()
    grads = [[t.cuda() for t in w] for w in worker_grads(2, shapes=MIXED)]
    out = C.simulate("atomo", grads, rank=100, min_compression=0, svd="gram")  # rank min(n, m) everywhere
    for i, t in enumerate(out[0]):
        want = (grads[0][i] + grads[1][i]) / 2
        assert t.device.type == "cuda" and torch.allclose(t, want, atol=1e-4)
    out = C.simulate("atomo", [[t * 1e30 for t in w] for w in grads], rank=2, svd="gram")
    assert all(torch.equal(a, b) for a, b in zip(out[0], out[1]))
    assert all(torch.isfinite(t).all() for t in out[0])
