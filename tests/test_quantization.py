"""Quantizers against dense references: bit packing, majority vote, unbiasedness over seeds,
wire bytes from the papers' formulas, parameter checking.

Unbiasedness tolerance: each test states an upper bound ``v_i`` on the variance of one
estimate of coordinate i (stochastic rounding between grid points ``delta`` apart has variance
``p (1 - p) delta^2 <= delta^2 / 4``). For K independent seeds the mean has standard error
``<= sqrt(v_i / K)`` (CLT), so we require ``|mean_i - x_i| <= 5 sqrt(v_i / K)`` plus float
slack: with <= 64 coordinates a false failure has probability < 64 * 6e-7. A biased rounding
(round-to-nearest: bias up to delta / 2) exceeds it by ~ sqrt(K) / 10 ~ 4x at K = 2000.
The sample spread is also checked against the bound, and must not be zero.
"""
import math

import numpy as np
import pytest
import torch

from studykit import compressors as C
from studykit.compressors.base import CompressorError
from studykit.compressors.quantization import QSGD, Quantize, integer_sum_dtype, pack_bits, unpack_bits

SEEDS = 2000


class FakeComm:
    """A worker of a pretend group whose other workers send the same tensors."""

    def __init__(self, rank=0, world_size=1):
        self.rank, self.world_size = rank, world_size

    def all_reduce(self, t):
        return t * self.world_size

    def all_gather(self, t):
        return [t] * self.world_size


def probe_vector(numel=48):
    """Mixed magnitudes, exact zeros, an outlier, a power of two and a negative power of two."""
    x = torch.randn(numel, generator=torch.Generator().manual_seed(7))
    x[3] = 0.0
    x[5] = 4.0
    x[6] = -0.25
    x[7] = 1e-3
    return x


def estimates_over_seeds(name, x, seeds=SEEDS, **params):
    return torch.stack([C.get(name, seed=s, **params).reduce(x) for s in range(seeds)])


def assert_unbiased(est, x, var_bound):
    k = est.shape[0]
    mean, var = est.mean(0), est.var(0)
    tol = 5 * (var_bound / k).sqrt() + 1e-6 * (1 + x.abs())
    bad = (mean - x).abs() > tol
    assert not bad.any(), f"biased at {bad.nonzero().flatten().tolist()}: mean {mean[bad]} vs {x[bad]} (tol {tol[bad]})"
    # rare events (p ~ 1/K) make the sample variance noisy: allow a few draws' worth of slack
    slack = 10 * est.abs().max() ** 2 / k
    assert (var <= 1.5 * var_bound + slack).all(), "spread exceeds the method's variance bound"
    assert var.sum() > 0, "no randomness at all"


# ------------------------------------------------------------------ packing
@pytest.mark.parametrize("numel", [1, 7, 8, 9, 1000, 1003])
def test_pack_unpack_round_trip(numel):
    bits = torch.rand(numel, generator=torch.Generator().manual_seed(numel)) < 0.5
    packed = pack_bits(bits)
    assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(numel / 8)
    assert torch.equal(unpack_bits(packed, numel), bits.to(torch.uint8))
    assert torch.equal(pack_bits(bits.to(torch.uint8)), packed)
    assert torch.equal(pack_bits(torch.ones(numel, dtype=torch.bool)), pack_bits((torch.ones(numel + 7) > 0)[7:]))  # unaligned view


def test_pack_bits_matches_numpy_little_endian_and_unpacks_batched():
    bits = torch.rand(37, generator=torch.Generator().manual_seed(0)) < 0.5
    packed = pack_bits(bits)
    assert np.array_equal(packed.numpy(), np.packbits(bits.numpy(), bitorder="little"))
    both = unpack_bits(torch.stack([packed, pack_bits(~bits)]), 37)  # (workers, nbytes) at once
    assert torch.equal(both[0].bool(), bits) and torch.equal(both[1].bool(), ~bits)


def test_integer_sum_dtype_ladder():
    assert integer_sum_dtype(127, signed=True) == torch.int8
    assert integer_sum_dtype(128, signed=True) == torch.float16
    assert integer_sum_dtype(255, signed=False) == torch.uint8
    assert integer_sum_dtype(2048, signed=False) == torch.float16
    assert integer_sum_dtype(2049, signed=True) == torch.int32
    # float16 really carries these integer sums exactly
    ints = torch.arange(-2048, 2049, dtype=torch.float32)
    assert torch.equal(ints.half().float(), ints)


# ------------------------------------------------------------------ signSGD
@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_majority_vote_is_sign_of_sum_of_signs(world_size):
    g = torch.Generator().manual_seed(world_size)
    grads = [torch.randn(4, 25, generator=g) for _ in range(world_size)]
    grads[0][0, :5] = 0.0  # zeros vote +1
    out = C.simulate("signsgd", grads)
    signs = [torch.where(x >= 0, 1.0, -1.0) for x in grads]
    expected = torch.sign(sum(signs))  # ties (even world sizes) -> 0
    for w in out:
        assert torch.equal(w, expected)
    if world_size % 2 == 0:
        assert (expected == 0).any(), "test should exercise ties"


def test_signsgd_local_decoding_is_own_sign():
    x = probe_vector()
    _, local = C.get("signsgd").reduce(x, FakeComm(), return_local=True)
    assert torch.equal(local, torch.where(x >= 0, 1.0, -1.0))


# --------------------------------------------------------------- EF-SignSGD
def test_ef_signsgd_is_average_of_scaled_signs_and_keeps_the_error():
    grads = [torch.randn(50, generator=torch.Generator().manual_seed(r)) for r in range(3)]
    out = C.simulate("ef_signsgd", grads, error_feedback=False)[0]
    expected = sum(x.abs().mean() * torch.where(x >= 0, 1.0, -1.0) for x in grads) / 3
    assert torch.allclose(out, expected, atol=1e-6)
    comp = C.get("ef_signsgd")  # error feedback on by default
    assert isinstance(comp.memory, C.ResidualMemory)
    x = grads[0]
    comp.reduce(x, FakeComm(), key="k")
    assert torch.allclose(comp.memory.residuals["k"][0], x - x.abs().mean() * torch.where(x >= 0, 1.0, -1.0), atol=1e-6)


# ----------------------------------------------------------- unbiasedness
@pytest.mark.slow
def test_qsgd_unbiased_on_grid_and_bounded():
    x = probe_vector()
    s, bucket = 4, 16
    est = estimates_over_seeds("qsgd", x, levels=s, bucket_size=bucket)
    norms = x.view(-1, bucket).norm(dim=1).repeat_interleave(bucket)
    # variance of stochastic rounding between levels norm/s apart is <= (norm/s)^2 / 4
    assert_unbiased(est, x, var_bound=(norms / s) ** 2 / 4)
    levels = est * s / norms
    assert torch.allclose(levels, levels.round(), atol=1e-4) and (levels.abs() <= s + 1e-4).all()


@pytest.mark.slow
def test_qsgd_whole_vector_bucket_and_multiworker_unbiased():
    x = probe_vector(30)
    est = torch.stack([C.simulate("qsgd", [x, x], seed=s, bucket_size=0)[0] for s in range(800)])
    assert_unbiased(est, x, var_bound=(x.norm() / 4) ** 2 / 4 / 2)


def test_terngrad_unbiased_and_ternary():
    x = probe_vector()
    est = estimates_over_seeds("terngrad", x)
    s = x.abs().max()
    assert_unbiased(est, x, var_bound=s * x.abs() - x**2)  # Bernoulli(|g|/s) times s
    assert set(torch.unique(est / s).tolist()) <= {-1.0, 0.0, 1.0}


def test_natural_unbiased_and_powers_of_two_neighbours():
    x = probe_vector()
    est = estimates_over_seeds("natural", x)
    assert_unbiased(est, x, var_bound=x**2 / 4)
    nz = x != 0
    lo = 2.0 ** torch.floor(torch.log2(x[nz].abs()))
    mag = est[:, nz].abs()
    assert ((mag == lo) | (mag == 2 * lo)).all(), "not rounded to a neighbouring power of two"
    assert (torch.sign(est[:, nz]) == torch.sign(x[nz])).all()
    assert (est[:, ~nz] == 0).all()
    assert (est[:, 5] == 4.0).all() and (est[:, 6] == -0.25).all(), "powers of two must stay exact"


def test_natural_subnormal_and_huge_values_stay_finite():
    x = torch.tensor([1e-40, -3e-39, 3.0e38, -3.3e38, 2.0**-126])
    est = estimates_over_seeds("natural", x, seeds=400)
    assert torch.isfinite(est).all()
    assert (est[:, :2].abs() <= 2.0**-126).all() and (est[:, 4] == 2.0**-126).all()
    assert torch.allclose(est[:, :2].mean(0), x[:2], rtol=0.3)


@pytest.mark.parametrize("bits", [2, 4])
@pytest.mark.slow
def test_quantize_unbiased(bits):
    x = probe_vector()
    est = estimates_over_seeds("quantize", x, bits=bits)
    delta = x.abs().max() / (2 ** (bits - 1) - 1)
    assert_unbiased(est, x, var_bound=torch.full_like(x, delta**2 / 4))


@pytest.mark.slow
def test_quantize_multiworker_unbiased():
    grads = [probe_vector(), -0.5 * probe_vector(), torch.randn(48, generator=torch.Generator().manual_seed(3))]
    mean = sum(grads) / 3
    est = torch.stack([C.simulate("quantize", grads, bits=3, seed=s)[0] for s in range(600)])
    delta = max(g.abs().max() for g in grads) / 3
    assert_unbiased(est, mean, var_bound=torch.full_like(mean, delta**2 / 4 / 3))


def test_private_randomness_depends_on_rank():
    x = probe_vector()
    for name in ("qsgd", "terngrad", "natural", "quantize"):
        a = C.get(name).reduce(x, FakeComm(rank=0), return_local=True)[1]
        b = C.get(name).reduce(x, FakeComm(rank=1), return_local=True)[1]
        assert not torch.equal(a, b), f"{name}: workers share their rounding randomness"


# ------------------------------------------------------------------ quantize
def test_quantize_16_bits_close_to_dense_mean():
    grads = [torch.randn(3, 40, generator=torch.Generator().manual_seed(r)) for r in range(4)]
    mean = sum(grads) / 4
    out = C.simulate("quantize", grads, bits=16)[0]
    assert (out - mean).norm() <= 1e-4 * mean.norm()
    assert (out - mean).abs().max() <= 1e-4 * max(g.abs().max() for g in grads)


@pytest.mark.parametrize("bits,world_size", [(8, 1), (8, 2), (4, 18), (4, 19), (8, 16), (8, 17), (16, 2), (2, 3)])
@pytest.mark.parametrize("protocol", ["allgather", "allreduce"])
def test_quantize_sums_cannot_overflow(bits, world_size, protocol):
    # worst case: every worker sends the top (or bottom) level; the summed integers must stay exact
    for value in (2.5, -2.5):
        grads = [torch.full((5,), value)] * world_size
        out = C.simulate("quantize", grads, bits=bits, protocol=protocol)[0]
        assert torch.allclose(out, grads[0], rtol=1e-6)


# ---------------------------------------------------------------- wire bytes
@pytest.mark.parametrize("shapes", [[(1,)], [(7,)], [(64, 32), (32,)], [(1000, 3), (5,)]])
@pytest.mark.parametrize("world_size", [1, 2, 8])
def test_wire_bytes_match_the_formulas(shapes, world_size):
    n = sum(math.prod(s) for s in shapes)
    expected = {
        "signsgd": math.ceil(n / 8),
        "ef_signsgd": math.ceil(n / 8) + 4,
        "qsgd": math.ceil(n * 4 / 8) + 4 * math.ceil(n / 512),  # 9 levels: 4 bits
        "terngrad": 4 + 2 * math.ceil(n / 8),
        "natural": n + math.ceil(n / 8),
        "quantize": n + 4 if world_size <= 2 else 8 * math.ceil(n / 5) + 4,  # 5 lanes of 8 + 3 bits
    }
    for name, nbytes in expected.items():
        assert C.get(name).wire_bytes(shapes, world_size) == nbytes, name
    assert C.get("qsgd", bucket_size=0).wire_bytes(shapes, world_size) == math.ceil(n / 2) + 4
    assert C.get("quantize", bits=4, protocol="allgather").wire_bytes(shapes, world_size) == math.ceil(n / 2) + 4


def test_gather_methods_declare_it():
    for name in ("signsgd", "ef_signsgd", "qsgd", "terngrad", "natural"):
        assert not C.get(name).allreduce_compatible
        assert all(c.op == "all_gather" for c in C.get(name).plan([(10,)], 4))
    assert [c.op for c in C.get("quantize").plan([(10,)], 4)] == ["all_gather", "all_reduce"]
    assert [c.op for c in C.get("quantize").plan([(10,)], 2)] == ["all_gather", "all_gather"]


# ---------------------------------------------------------------- parameters
@pytest.mark.parametrize("name,params,match", [
    ("qsgd", {"levels": 0}, r"levels must be an integer in \[1, 127\], got 0"),
    ("qsgd", {"levels": 128}, r"levels must be an integer in \[1, 127\]"),
    ("qsgd", {"levels": 2.5}, r"levels must be an integer"),
    ("qsgd", {"levels": True}, r"levels must be an integer"),
    ("qsgd", {"bucket_size": -1}, r"bucket_size must be an integer >= 0"),
    ("quantize", {"bits": 1}, r"bits must be an integer in \[2, 16\], got 1"),
    ("quantize", {"bits": 17}, r"bits must be an integer in \[2, 16\]"),
    ("quantize", {"bits": "8"}, r"bits must be an integer in \[2, 16\]"),
])
def test_bad_parameters_name_the_valid_range(name, params, match):
    with pytest.raises(CompressorError, match=rf"'{name}'.*{match}"):
        C.get(name, **params)


def test_parameters_are_listed_with_defaults():
    assert C.parameters("qsgd") == {"levels": 4, "bucket_size": 512}
    assert C.parameters("quantize") == {"bits": 8, "protocol": "auto"}
    assert C.get("qsgd", levels=8).params()["levels"] == 8
    assert isinstance(C.get("qsgd", error_feedback=False), QSGD)
