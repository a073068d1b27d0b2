"""THC against dense references: the Hadamard transform against the dense matrix, the
rotation's inverse, unbiasedness over seeds (tolerance derived as in test_quantization.py),
near-exact averages at 16 bits, saturation's bias, wire bytes and dtypes, parameters."""
import math

import pytest
import torch

from studykit import compressors as C
from studykit.compressors.base import CompressorError
from studykit.compressors.thc import THC, _radix_sizes, fwht, hadamard_matrix
from tests.test_quantization import FakeComm, assert_unbiased, probe_vector

SEEDS = 2000


# ------------------------------------------------------------------ transform
def test_hadamard_matrix_is_sylvester_and_orthogonal():
    h2 = torch.tensor([[1.0, 1.0], [1.0, -1.0]])
    h = torch.ones(1, 1)
    for k in range(1, 8):
        h = torch.kron(h2, h)
        assert torch.equal(hadamard_matrix(2**k), h)
        assert torch.equal(h @ h, 2**k * torch.eye(2**k))


@pytest.mark.parametrize("size", [1, 2, 4, 8, 64, 128, 2**10, 2**11])
def test_fwht_equals_dense_hadamard_product_and_is_own_inverse(size):
    x = torch.randn(3, size, generator=torch.Generator().manual_seed(size))
    dense = (x.double() @ hadamard_matrix(size).double()).float()
    scale = math.sqrt(size) * x.abs().max()  # entries of Hx are ~ sqrt(size) * |x|
    assert torch.allclose(fwht(x), dense, atol=1e-6 * scale)
    assert torch.allclose(fwht(fwht(x)), size * x, atol=1e-6 * size * x.abs().max())


def test_fwht_stages_are_few_and_cover_log2_n():
    for m in range(0, 31):
        sizes = _radix_sizes(2**m)
        assert math.prod(sizes) == 2**m and all(2 <= d <= 64 for d in sizes)
        assert len(sizes) == math.ceil(m / 6)


@pytest.mark.parametrize("rotation,chunk", [("full", 2**16), ("partial", 8), ("partial", 64)])
@pytest.mark.parametrize("numel", [1, 5, 64, 100, 1000])
def test_randomized_rotation_is_orthonormal_and_inverts(rotation, chunk, numel):
    thc = THC(rotation=rotation, chunk=chunk)
    x = torch.randn(numel, generator=torch.Generator().manual_seed(numel))
    size = thc.rotation_size(numel)
    signs = thc._signs(size, x.device)
    y = thc.forward(x, signs)
    assert y.numel() == thc.padded_numel(numel)
    assert torch.allclose(y.norm(), x.norm(), rtol=1e-5)
    assert torch.allclose(thc.inverse(y, signs, numel), x, atol=1e-5)


def test_rotation_is_shared_and_changes_every_step():
    thc = THC()
    a = thc._signs(64, torch.device("cpu"))
    assert torch.equal(a, THC()._signs(64, torch.device("cpu"))), "every worker must draw the same signs"
    thc.step = 1
    assert not torch.equal(a, thc._signs(64, torch.device("cpu")))


def test_rotations_pad_little():
    thc_full, thc_part = THC(), THC(rotation="partial", chunk=1024)
    # full: the largest power-of-two blocks padding <= 1/64 (here 64-blocks: 5056), not 8192
    assert thc_full.padded_numel(5000) == 5056 and thc_full.padded_numel(4096) == 4096
    assert thc_full.padded_numel(25_557_032) - 25_557_032 <= 25_557_032 / 64  # ResNet-50
    assert thc_part.padded_numel(5000) == 5120
    assert thc_part.padded_numel(100) == 128  # a gradient smaller than one chunk: next power of two


# ------------------------------------------------------------------ estimates
@pytest.mark.parametrize("params", [{}, {"rotation": "partial", "chunk": 16}, {"bits": 2}])
@pytest.mark.slow
def test_thc_rounding_unbiased_for_a_fixed_rotation(params):
    """Same seed and step (same rotation), K different ranks (K independent roundings): a random
    rotation would average a biased rounding out, so the rotation is held fixed here."""
    x = probe_vector()
    thc = THC(**params)
    y = thc.forward(x, thc._signs(thc.rotation_size(x.numel()), x.device))
    # rounding variance per rotated coordinate <= delta^2 / 4, delta = 2 max|y| / (2^b - 1); the
    # orthonormal inverse keeps the bound for every output coordinate
    delta = 2 * y.abs().max() / (2**thc.bits - 1)
    est = torch.stack([THC(**params).reduce(x, FakeComm(rank=r)) for r in range(SEEDS)])
    assert_unbiased(est, x, var_bound=torch.full_like(x, float(delta) ** 2 / 4))


@pytest.mark.slow
def test_thc_unbiased_over_seeds():
    x = probe_vector()
    est = torch.stack([C.get("thc", seed=s).reduce(x) for s in range(SEEDS)])
    delta = 2 * x.norm() / 15  # no rotated coordinate exceeds ||x||
    assert_unbiased(est, x, var_bound=torch.full_like(x, float(delta) ** 2 / 4))


@pytest.mark.slow
def test_thc_multiworker_unbiased():
    grads = [probe_vector(), -0.3 * probe_vector(), torch.randn(48, generator=torch.Generator().manual_seed(9))]
    mean = sum(grads) / 3
    est = torch.stack([C.simulate("thc", grads, bits=3, seed=s)[0] for s in range(600)])
    delta = 2 * max(g.norm() for g in grads) / 7
    assert_unbiased(est, mean, var_bound=torch.full_like(mean, float(delta) ** 2 / 4 / 3))


@pytest.mark.parametrize("rotation", ["full", "partial"])
def test_thc_16_bits_close_to_dense_average(rotation):
    grads = [[torch.randn(30, 11, generator=torch.Generator().manual_seed(r)), torch.randn(7)] for r in range(4)]
    out = C.simulate("thc", grads, bits=16, rotation=rotation, chunk=64)[0]
    for i in range(2):
        mean = sum(g[i] for g in grads) / 4
        assert (out[i] - mean).norm() <= 1e-4 * mean.norm()


def test_thc_default_bits_error_is_moderate_and_workers_agree():
    grads = [torch.randn(4096, generator=torch.Generator().manual_seed(r)) for r in range(4)]
    mean = sum(grads) / 4
    out = C.simulate("thc", grads)
    assert all(torch.equal(o, out[0]) for o in out)
    # 4 bits against the max of 4096 near-Gaussian coordinates (~3.5 sigma): relative error ~0.2
    assert (out[0] - mean).norm() < 0.5 * mean.norm()


def test_saturation_finer_grid_but_biased():
    x = torch.randn(4096, generator=torch.Generator().manual_seed(1))
    plain = [C.get("thc", bits=2, seed=s).reduce(x) for s in range(20)]
    sat = [C.get("thc", bits=2, saturation=2.0, seed=s).reduce(x) for s in range(20)]
    err = lambda outs: sum((o - x).norm() for o in outs) / len(outs)  # noqa: E731
    assert err(sat) < 0.8 * err(plain), "saturation should cut the error at low bit widths"
    assert C.get("thc").unbiased and not C.get("thc", saturation=2.0).unbiased
    # a tiny saturation range clips nearly everything: the mean over seeds shrinks towards zero
    spiky = probe_vector()
    mean = torch.stack([C.get("thc", saturation=0.1, seed=s).reduce(spiky) for s in range(200)]).mean(0)
    assert mean.norm() < 0.5 * spiky.norm()


def test_private_rounding_depends_on_rank():
    x = probe_vector()
    a = C.get("thc").reduce(x, FakeComm(rank=0), return_local=True)[1]
    b = C.get("thc").reduce(x, FakeComm(rank=1), return_local=True)[1]
    assert not torch.equal(a, b)


def test_many_workers_at_the_top_level_do_not_overflow():
    x = torch.ones(16)  # rotates to a single nonzero coordinate: it sits at the top of the range
    for p in (17, 18):  # 17 * 15 = 255 fills 8-bit fields; 18 workers need 9
        out = C.simulate("thc", [x] * p)[0]
        assert torch.allclose(out, x, atol=0.2)
    assert THC().lane_width(17) == 8 and THC().lane_width(18) == 9


# ------------------------------------------------------------------ wire bytes
@pytest.mark.parametrize("bits,world_size,width", [(4, 1, 4), (4, 17, 8), (4, 18, 9), (8, 2, 9), (8, 9, 12),
                                                   (12, 1, 12), (1, 255, 8)])
def test_lane_width_holds_the_sum(bits, world_size, width):
    assert THC(bits=bits).lane_width(world_size) == width
    assert world_size * (2**bits - 1) < 2**width


@pytest.mark.parametrize("shapes,full,partial", [([(1,)], 1, 1), ([(100,)], 128, 128), ([(64, 32), (32,)], 2112, 4096),
                                                 ([(1000, 3)], 3008, 4096), ([(1 << 20,)], 1 << 20, 1 << 20),
                                                 ([(1000, 1000)], 1_007_616, 1_048_576)])
def test_wire_bytes(shapes, full, partial):
    """At p = 2 the packed b-bit integers are all-gathered; full rotation pads at most 1/64 (or < 64)."""
    assert C.get("thc").wire_bytes(shapes, 2) == 4 + math.ceil(full * 4 / 8)
    assert C.get("thc", rotation="partial", chunk=2**16).wire_bytes(shapes, 2) == 4 + math.ceil(partial * 4 / 8)
    assert C.get("thc", bits=8).wire_bytes(shapes, 2) == 4 + full
    plan = C.get("thc").plan(shapes, 4)  # 4 workers: lanes of 6 bits, 10 per int64 word
    assert [(c.op, c.numel) for c in plan] == [("all_gather", 1), ("all_reduce", math.ceil(full / 10))]


# ------------------------------------------------------------------ parameters
@pytest.mark.parametrize("params,match", [
    ({"bits": 0}, r"bits must be an integer in \[1, 16\], got 0"),
    ({"bits": 17}, r"bits must be an integer in \[1, 16\]"),
    ({"rotation": "half"}, r"rotation must be 'full' or 'partial', got 'half'"),
    ({"chunk": 3}, r"chunk must be a power of two in \[2, 2\^30\]"),
    ({"chunk": 1}, r"chunk must be an integer in \[2, 1073741824\]"),
    ({"saturation": -1.0}, r"saturation must be a finite number >= 0"),
    ({"saturation": float("nan")}, r"saturation must be a finite number >= 0"),
])
def test_bad_parameters_name_the_valid_range(params, match):
    with pytest.raises(CompressorError, match=rf"'thc'.*{match}"):
        C.get("thc", **params)


def test_parameters_listed():
    assert C.parameters("thc") == {"bits": 4, "rotation": "full", "chunk": 2**16, "saturation": 0.0,
                                     "protocol": "auto"}
