"""The fused elementwise kernels of :mod:`studykit.compressors._fast` that write (and read) bit-packed
payloads: quantize's levels + offset + pack and unpack + sum + decode, QSGD's levels + pack and
unpack + decode. The wire format is :func:`~studykit.compressors.quantization.pack_fields`'s, so a
payload made on the fast path decodes on the reference path and the other way round (one rank on a
CPU, one on a GPU agree): tested here byte for byte on inputs whose rounding is exact whatever the
noise (the kernels draw Philox noise in-kernel, the reference ``torch.rand``), and value for value on
random inputs. Needs a CUDA GPU with triton, or Triton's interpreter on the CPU::

    TRITON_INTERPRET=1 STUDYKIT_FAST_INTERPRET=1 PYTHONPATH=$PWD:/path/to/triton python -m pytest -q tests/test_fast_elementwise.py

Without either, the kernel tests skip (CI); the payload-row helper test runs everywhere.
"""
# ruff: noqa: F811
import pytest
import torch

from studykit import compressors as C
from studykit.compressors import _fast
from studykit.compressors import quantization as Q
from studykit.compressors import thc

# the kernel tests' fixtures: dev (a GPU, or the CPU under Triton's interpreter; else skip) and reference
# (a call with the fast path off); as parameters they shadow the imports (F811)
from tests.test_bench import _x, dev, reference  # noqa: F401


# ------------------------------------------------------------------ payload rows without a copy (any machine)
def test_rows_are_a_view_where_payloads_lie_back_to_back_and_a_copy_otherwise():
    buf = torch.arange(12, dtype=torch.uint8)
    gathered = [[t] for t in buf.view(3, 4).unbind(0)]  # what TorchComm.all_gather hands back
    rows = _fast.rows(gathered, 0)
    assert rows.shape == (3, 4) and torch.equal(rows, buf.view(3, 4))
    assert rows.data_ptr() == buf.data_ptr()  # no copy
    one = _fast.rows(gathered[:1], 0)
    assert one.shape == (1, 4) and one.data_ptr() == buf.data_ptr()
    apart = [[torch.arange(4, dtype=torch.uint8) + 4 * w] for w in range(3)]  # separate allocations
    rows = _fast.rows(apart, 0)
    assert torch.equal(rows, buf.view(3, 4)) and rows.data_ptr() != apart[0][0].data_ptr()
    backwards = list(reversed(gathered))  # back to back, but not in rank order
    assert torch.equal(_fast.rows(backwards, 0), buf.view(3, 4).flip(0))


# ------------------------------------------------------------------ quantize
BITS = list(range(2, 17))
SIZES = [1, 13, 2 * 4096 + 5]


@pytest.mark.gpu
@pytest.mark.parametrize("bits", BITS)
def test_quantize_packed_payload_is_pack_fields_bytes_at_every_width(dev, reference, bits):
    """Inputs +-(L + 1/2) against scale = L clamp to the levels +-L whatever the noise: the fused
    kernel's bytes must then be exactly the reference's. Integer inputs in [-L, L] give the level
    itself but for float32's rounding of u + x up to x + 1 (u within half an ulp of 1): the fields
    read back by the reference's unpack_fields are x + L, or x + L + 1 for a rare few."""
    comp = C.get("quantize", bits=bits)
    L = comp.max_level
    scale = torch.tensor(float(L), device=dev)
    for n in SIZES:
        g = torch.Generator().manual_seed(n)
        x = ((torch.randint(0, 2, (n,), generator=g) * 2 - 1) * (L + 0.5)).float().to(dev)
        got = comp.encode_packed(x, scale)
        want = reference(lambda x=x: comp.encode_packed(x, scale))
        assert got.dtype == torch.uint8 and got.shape == want.shape == (-(-n * bits // 8),), (n, bits)
        assert torch.equal(got, want), (n, bits)
        x = torch.randint(-L, L + 1, (n,), generator=g).float().to(dev)
        x[: min(n, 2)] = torch.tensor([-L, L], dtype=torch.float32)[: min(n, 2)].to(dev)
        extra = Q.unpack_fields(comp.encode_packed(x, scale), bits, n).long().cpu() - (x.long().cpu() + L)
        assert set(extra.unique().tolist()) <= {0, 1} and extra.float().mean() < 0.01, (n, bits)


@pytest.mark.gpu
@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("world_size", [1, 3])
def test_quantize_payloads_decode_the_same_on_both_paths(dev, reference, bits, world_size):
    """Random payloads (any bytes) and random inputs: the fused unpack + integer sum + decode gives
    the reference's floats bit for bit, and a fast payload decodes identically on either path."""
    comp = C.get("quantize", bits=bits)
    n = 2 * 4096 + 5
    nbytes = -(-n * bits // 8)
    x = _x(n, dev)
    scale = x.abs().max()
    g = torch.Generator().manual_seed(bits)
    packed = [torch.randint(0, 256, (nbytes,), generator=g, dtype=torch.uint8).to(dev) for _ in range(world_size)]
    assert torch.equal(comp.decode_gathered(packed, scale, n), reference(lambda: comp.decode_gathered(packed, scale, n)))
    fast = [comp.encode_packed(x, scale, rank) for rank in range(world_size)]
    got = comp.decode_gathered(fast, scale, n)
    assert torch.equal(got, reference(lambda: comp.decode_gathered(fast, scale, n)))
    # each worker's own decoding is one of the two grid points around its input (stochastic rounding)
    own = comp.decode_gathered(fast[:1], scale, n)
    step = scale.item() / comp.max_level
    assert ((own - x).abs() <= step * 1.1).all()  # float32 rounding of u + x L / scale at L = 2^15 - 1


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [3, 5, 6, 7, 9, 12, 15])
@pytest.mark.parametrize("world_size", [1, 3])
def test_both_ways_of_unpacking_odd_widths_give_the_same_floats(dev, monkeypatch, bits, world_size):
    """The unpack kernel's two ways of reading widths that do not divide 8 (a group's bytes gathered, or three byte
    loads per field; GATHER_BELOW picks per width) decode random payloads to the same floats, the masked last
    block included."""
    from studykit.compressors._fast import quantize as fq

    n = 2 * 4096 + 13
    nbytes = -(-n * bits // 8)
    g = torch.Generator().manual_seed(bits + 100 * world_size)
    packed = torch.randint(0, 256, (world_size, nbytes), generator=g, dtype=torch.uint8).to(dev)
    scale = torch.tensor([0.5], device=dev)
    got = {}
    for below in (0, 16):
        monkeypatch.setattr(fq, "GATHER_BELOW", below)
        got[below] = fq.quantize_unpack(packed, scale, 2 ** (bits - 1) - 1, bits, n)
    assert torch.equal(got[0], got[16])
    want = Q.unpack_fields(packed.cpu(), bits, n).sum(0, dtype=torch.int32)
    assert torch.equal(got[16].cpu(), Q.Quantize(bits=bits).decode(want - world_size * (2 ** (bits - 1) - 1),
                                                                   scale.cpu(), world_size))


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [2, 3, 8, 16])
def test_quantize_reduce_on_the_fast_path_is_close_to_the_reference(dev, reference, bits):
    x = _x(20_011, dev)
    comp = C.get("quantize", bits=bits)
    fast = comp.reduce(x)
    ref = reference(lambda: C.get("quantize", bits=bits).reduce(x))
    step = x.abs().max().item() / comp.max_level
    assert ((fast - x).abs() <= step * 1.1).all() and ((ref - x).abs() <= step * 1.1).all()
    assert not torch.equal(fast, ref)  # other noise (Philox in the kernel), same grid


# ------------------------------------------------------------------ QSGD
#: levels -> packed bits: 2, 3, 4, 5, 8 (both packing layouts of the kernel)
LEVELS = [1, 3, 4, 8, 127]


def _one_spike_per_bucket(n, bucket, dev, seed=0):
    """Zeros but one power of two per bucket: norm = |spike|, level = s exactly (no rounding to draw)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(n)
    for b in range(-(-n // bucket)):
        lo, hi = b * bucket, min(n, (b + 1) * bucket)
        pos = lo + int(torch.randint(0, hi - lo, (1,), generator=g))
        x[pos] = (-1) ** b * 2.0 ** int(torch.randint(-20, 20, (1,), generator=g))
    return x.to(dev)


@pytest.mark.gpu
@pytest.mark.parametrize("levels", LEVELS)
@pytest.mark.parametrize("bucket", [16, 512, 4096])
def test_qsgd_packed_payload_equals_the_reference_bytes(dev, reference, levels, bucket):
    comp = C.get("qsgd", levels=levels, bucket_size=bucket)
    for n in (bucket * 3 + 7, bucket * 2):
        x = _one_spike_per_bucket(n, bucket, dev, seed=n)
        got, _ = comp.compress(x, 1)
        want, _ = reference(lambda x=x: comp.compress(x, 1))
        assert [(t.shape, t.dtype) for t in got] == [(t.shape, t.dtype) for t in want]
        assert torch.equal(got[0], want[0]), "bucket norms"
        assert torch.equal(got[1], want[1]), (levels, bucket, n)


@pytest.mark.gpu
@pytest.mark.parametrize("levels", LEVELS)
def test_qsgd_payloads_decode_the_same_on_both_paths(dev, reference, levels):
    comp = C.get("qsgd", levels=levels)
    n = 512 * 9 + 33
    xs = [_x(n, dev, s) for s in range(3)]
    fast = [comp.compress(x, 3)[0] for x in xs]
    ref = reference(lambda: [comp.compress(x, 3)[0] for x in xs])
    for payload in (fast[0], ref[0]):  # one payload, either origin: bit for bit
        assert torch.equal(comp.decompress(payload, n), reference(lambda p=payload: comp.decompress(p, n)))
    for payloads in (fast, ref):  # the mean of three: the same sums, perhaps in another order
        assert torch.allclose(comp.combine(payloads, n), reference(lambda p=payloads: comp.combine(p, n)),
                              rtol=1e-6, atol=1e-7)
    # the fast levels are the reference's or a neighbour (same norms, other noise)
    assert torch.allclose(fast[0][0], ref[0][0], rtol=1e-6)
    assert (comp._unpack(fast[0][1], n).int() - comp._unpack(ref[0][1], n).int()).abs().max() <= 1


# ------------------------------------------------------------------ THC: levels packed in one pass, unpacked with the sum
THC_BITS = [1, 2, 3, 4, 8, 16]


@pytest.mark.gpu
@pytest.mark.parametrize("bits", THC_BITS)
def test_thc_packed_payload_is_pack_fields_of_its_grid_index(dev, bits):
    """With M = top / 2 the grid step is 1 and y = j - top / 2 sits exactly on grid index j, and |y| beyond M
    clamps to 0 or top: the fused kernel's bytes are then ``pack_fields`` of those indices whatever the noise
    (but for float32's rounding of u + j up to j + 1, u within half an ulp of 1: a rare few)."""
    top = 2**bits - 1
    bound = torch.tensor(top / 2, device=dev)
    for n in SIZES:
        g = torch.Generator().manual_seed(n + bits)
        j = torch.randint(0, top + 1, (n,), generator=g)
        y = (j.double() - top / 2).float()
        y[: min(n, 2)] = torch.tensor([-3.0 * top, 3.0 * top])[: min(n, 2)]  # clamped
        want = j.clone()
        want[: min(n, 2)] = torch.tensor([0, top])[: min(n, 2)]
        got = _fast.thc_pack(y.to(dev), bound, top, bits, seed=_fast.seed_of(thc.THC(seed=n), torch.device(dev)))
        assert got.dtype == torch.uint8 and got.numel() == -(-n * bits // 8), (n, bits)
        extra = Q.unpack_fields(got.cpu(), bits, n).long() - want
        assert set(extra.unique().tolist()) <= {0, 1} and extra.float().mean() < 0.01, (n, bits)
        exact = (extra == 0)
        assert torch.equal(Q.unpack_fields(got.cpu(), bits, n)[exact], want[exact].int())


@pytest.mark.gpu
@pytest.mark.parametrize("bits", THC_BITS)
@pytest.mark.parametrize("world_size", [1, 3])
def test_thc_unpack_sum_decode_is_the_reference_to_float32_rounding(dev, bits, world_size):
    """Random payloads (any bytes): unpack + integer sum over the workers + decode in one pass gives what the
    reference computes (``THC._sum``'s ``unpack_fields(...).sum(0)``, then ``sum * (delta / W) - M``) to float32
    rounding, and what the two-kernel fast path (``thc_decode``) gives bit for bit.

    Not bit for bit against the reference: on the GPU Triton contracts the multiply and the subtract into one
    FMA (one rounding; its default ``enable_fp_fusion``), where PyTorch rounds the product, then the difference
    (two roundings). The sum is at most W * top, so the product is at most 2 * M in magnitude: its rounding is at
    most eps * M, and the result (at most M in magnitude) moves by at most one more step of its grid, eps * M.
    The tolerance, 4 eps * M, leaves a margin over that and over the last bit of delta / W (a division in the
    kernel; on CUDA, PyTorch's product with 1 / W). Under the interpreter (numpy, no contraction) the two agree
    bit for bit."""
    top = 2**bits - 1
    n = 2 * 4096 + 5
    nbytes = -(-n * bits // 8)
    g = torch.Generator().manual_seed(bits * 10 + world_size)
    rows = torch.randint(0, 256, (world_size, nbytes), generator=g, dtype=torch.uint8).to(dev)
    bound = torch.tensor(0.8125, device=dev)
    got = _fast.thc_unpack(rows, bound, top, bits, n, world_size)
    total = Q.unpack_fields(rows, bits, n).sum(0, dtype=torch.int32)
    delta = bound * (2 / top)
    ref = total.float() * (delta / world_size) - bound
    torch.testing.assert_close(got, ref, rtol=0, atol=4 * torch.finfo(torch.float32).eps * bound.item())
    assert torch.equal(got, _fast.thc_decode(total, bound, top, world_size))


@pytest.mark.gpu
@pytest.mark.parametrize("bits", [2, 4, 8])
def test_thc_packed_levels_are_stochastic_rounding_of_y(dev, bits):
    """Random y: every decoded level is one of the two grid points around y (stochastic rounding), and their
    mean over many elements sits on y's (unbiased)."""
    top = 2**bits - 1
    y = _x(40_000, dev)
    bound = y.abs().max()
    delta = bound * (2 / top)
    packed = _fast.thc_pack(y, bound, top, bits, seed=_fast.seed_of(thc.THC(seed=7), y.device))
    own = _fast.thc_unpack(packed.view(1, -1), bound, top, bits, y.numel())
    assert ((own - y).abs() <= delta * 1.001).all()
    assert abs((own - y).mean().item()) < 0.05 * delta.item()


# ------------------------------------------------------------------ THC: the Hadamard transform, two stages per pass
def test_stages_pair_the_reference_stages_in_order_where_both_are_at_least_16():
    from studykit.compressors.thc import _radix_sizes

    assert _radix_sizes(2**19) == [32, 32, 32, 16]
    assert _fast._stages(2**19, False) == [(32, 16), (32, 32)]  # applied: 16 then 32, then 32 then 32
    assert _fast._stages(2**19, True) == [(32, 32), (32, 16)]
    assert _radix_sizes(2**16) == [64, 32, 32]
    assert _fast._stages(2**16, False) == [(32, 32), (64,)] and _fast._stages(2**16, True) == [(64, 32), (32,)]
    assert _fast._stages(2**7, False) == [(8,), (16,)]  # 16 x 8: no pair (tl.dot needs 16)
    for size in [2**k for k in range(1, 25)]:
        for inverse in (False, True):
            flat = [d for st in _fast._stages(size, inverse) for d in st]
            assert sorted(flat) == sorted(_radix_sizes(size)), (size, inverse)


def test_pick_leaves_out_a_candidate_that_fails_but_not_the_plain_path(monkeypatch):
    """pick on a (faked) GPU: a fused candidate that raises is left out with a warning naming it, the fastest of
    the rest is taken and remembered; the plain path (last) failing is a real error."""
    class _Event:
        clock = [0.0]

        def __init__(self, enable_timing=True):
            self.t = None

        def record(self):
            self.t = _Event.clock[0]

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return other.t - self.t

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(_fast, "_interpret_on_cpu", lambda: False)
    monkeypatch.setattr(_fast, "_PICKED", {})

    def takes(ms):
        def fn():
            _Event.clock[0] += ms
        return fn

    def broken():
        raise RuntimeError("no tf32x3 here")

    with pytest.warns(RuntimeWarning, match=r"'k1': candidate 0 failed \(RuntimeError: no tf32x3 here\); left out"):
        assert _fast.pick(("k1",), [broken, takes(3.0), takes(1.0)]) == 2
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # remembered: no second warning, no timing
        assert _fast.pick(("k1",), [broken, takes(3.0), takes(1.0)]) == 2
    with pytest.warns(RuntimeWarning, match="'k2': candidate 1 failed"):
        assert _fast.pick(("k2",), [takes(1.0), broken, takes(2.0)]) == 0
    with pytest.raises(RuntimeError, match="no tf32x3 here"):
        _fast.pick(("k3",), [takes(1.0), broken])


def test_the_diagonal_rides_on_rotates_first_pass_and_unrotates_last_where_they_are_pairs():
    assert _fast._signed_fusable(2**19, False) and _fast._signed_fusable(2**19, True)  # ResNet-50's blocks
    assert _fast._signed_fusable(2**16, False) and not _fast._signed_fusable(2**16, True)  # (64, 32), (32,)
    assert not _fast._signed_fusable(2**7, False) and not _fast._signed_fusable(2**7, True)


@pytest.mark.gpu
@pytest.mark.parametrize("numel,size", [(1000, 2**8), (3 * 2**10 - 5, 2**10), (2**12, 2**12), (5000, 2**9)])
def test_signed_rotation_fuses_the_diagonal_bit_for_bit(dev, numel, size):
    """THC's diagonal fused into rotate's first pass (sign on the load, zero padding) and unrotate's last (sign on
    the store, un-padding): the same bits as the separate sign kernel around the unfused passes; both public
    entry points give the unfused results too, whichever path they pick."""

    padded = -(-numel // size) * size
    seed = _fast.seed_of(thc.THC(), torch.device(dev), 0)
    flat = _x(numel, dev)
    apart = _fast._fwht_passes(_fast.thc_sign(flat, numel, padded, size, seed), size, False)
    if _fast._signed_fusable(size, False):
        fused = _fast._fwht_passes(flat, size, False, (numel, padded, size, seed))
        assert fused.shape == apart.shape and torch.equal(fused, apart)
    tol = 1e-5 * size**0.5 * 8  # the entry points may pick other dot precisions (HADAMARD_PRECISIONS): rounding apart
    assert torch.allclose(_fast.rotate_signed(flat, numel, padded, size, seed).reshape(-1),
                          _fast.rotate(_fast.thc_sign(flat, numel, padded, size, seed).view(-1, size)).reshape(-1),
                          atol=tol, rtol=0)
    z = apart
    back = _fast.thc_sign(_fast._fwht_passes(z, size, True), padded, numel, size, seed)
    if _fast._signed_fusable(size, True):
        fused = _fast._fwht_passes(z, size, True, (numel, padded, size, seed))
        assert fused.shape == (numel,) and torch.equal(fused, back)
    got = _fast.unrotate_signed(z, padded, numel, size, seed)
    want = _fast.thc_sign(_fast.unrotate(z, padded // size, size).reshape(-1), padded, numel, size, seed)
    assert torch.allclose(got, want, atol=tol, rtol=1e-5)
    # D H H D / size = I: the decode side inverts the encode side
    assert got.shape == flat.shape and torch.allclose(got, flat, atol=1e-5 * size ** 0.5, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("size", [2**19, 2**16, 2**10, 2**8])
def test_every_dot_precision_of_the_hadamard_passes_is_the_transform_to_float32_rounding(dev, size):
    """The passes with tl.dot on fp32 FMA ("ieee") and on tensor cores with the input split in two TF32 halves
    ("tf32x3"): the same rotation and inverse to float32 rounding (the +-1 factors are exact in TF32), against the
    reference's GEMMs; with the diagonal fused too; an unknown precision is refused by name."""

    rows = 2
    x = _x(rows * size, dev).view(rows, size)
    want = thc.rotate(x).reshape(-1)
    tol = 1e-5 * size**0.5 * 8
    numel, seed = rows * size - 3, _fast.seed_of(thc.THC(seed=7), torch.device(dev))
    for p in _fast.HADAMARD_PRECISIONS:
        got = _fast._fwht_passes(x, size, False, precision=p)
        assert torch.allclose(got, want, atol=tol, rtol=0), (p, (got - want).abs().max())
        back = _fast._fwht_passes(got, size, True, precision=p)
        assert torch.allclose(back, size * x.reshape(-1), atol=tol * size**0.5, rtol=1e-5), p
        if _fast._signed_fusable(size, False):
            flat = x.reshape(-1)[:numel]
            signed = _fast._fwht_passes(flat, size, False, (numel, rows * size, size, seed), p)
            apart = _fast._fwht_passes(_fast.thc_sign(flat, numel, rows * size, size, seed), size, False, precision="ieee")
            assert torch.allclose(signed, apart, atol=tol, rtol=0), p
    with pytest.raises(ValueError, match=r"precision must be one of \('ieee', 'tf32x3'\), got 'tf32'"):
        _fast._hadamard2(x.reshape(-1), 32, 32, False, precision="tf32")


@pytest.mark.gpu
@pytest.mark.parametrize("rows,size", [(1, 2**19), (3, 2**16), (5, 2**10), (2, 2**12), (7, 2**7), (4, 32), (1, 2**13)])
def test_fast_rotation_is_the_references_up_to_rounding_and_inverts(dev, rows, size):
    """:func:`_fast.rotate` / ``unrotate`` (two stages per pass) against :func:`thc.rotate` / ``unrotate`` (one GEMM
    per stage): the same values in the same rotated layout, to float32 rounding; ``unrotate(rotate(x)) = size x``;
    and against the dense Hadamard product where that is small enough to build."""

    x = _x(rows * size, dev).view(rows, size)
    got, want = _fast.rotate(x), thc.rotate(x)
    tol = 1e-5 * size**0.5 * 8
    assert got.shape == want.shape and torch.allclose(got, want, atol=tol, rtol=0), (got - want).abs().max()
    back = _fast.unrotate(got, rows, size)
    assert back.shape == (rows, size) and torch.allclose(back, size * x, atol=tol * size**0.5, rtol=1e-5)
    assert torch.allclose(back, thc.unrotate(want, rows, size), atol=tol * size**0.5, rtol=1e-5)
    if size <= 2**12:
        dense = (x.double() @ thc.hadamard_matrix(size, "cpu").double().to(dev)).float()  # natural layout
        assert torch.allclose(got.view(size, rows).t(), dense, atol=tol, rtol=0)
