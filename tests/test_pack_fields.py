"""``pack_fields`` / ``unpack_fields`` at every width, byte for byte the layout's definition (issue 19's codecs at
the memory floor: widths that do not divide 8 were packed through a tensor of single bits).

The layout: value ``i`` on bits ``[i * width, (i + 1) * width)`` of the little-endian bit stream,
``ceil(numel * width / 8)`` bytes. Its definition, bit by bit, is ``benchmarks/pack_fields.py``'s
``pack_fields_bitwise`` (one definition, also the benchmark's reference); the first tests pin that
definition itself to hand-worked bytes and to ``numpy.packbits``.
"""
import importlib.util
import math
import os

import numpy as np
import pytest
import torch

from studykit.compressors.quantization import MAX_FIELD_WIDTH, pack_fields, unpack_fields

ROOT = os.path.join(os.path.dirname(__file__), "..")
WIDTHS = list(range(1, MAX_FIELD_WIDTH + 1))
NUMELS = [0, 1, 7, 8, 9, 15, 17, 1000, 1001, 4099]


def _bench():
    spec = importlib.util.spec_from_file_location("pack_fields_bench", os.path.join(ROOT, "benchmarks", "pack_fields.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BENCH = _bench()


def _values(width, numel, dtype=torch.int64, seed=0):
    g = torch.Generator().manual_seed(seed * 100_003 + width * 1000 + numel)
    return torch.randint(0, 2**width, (numel,), generator=g, dtype=torch.int64).to(dtype)


def _as_int32(v):
    """What unpack_fields returns for values ``v``: int32 (width 32: the int32 with the same 32 bits)."""
    return torch.from_numpy(v.numpy().astype(np.uint32).view(np.int32).copy()) if v.numel() else v.to(torch.int32)


# ------------------------------------------------------------------ the definition itself
def test_the_bitwise_definition_is_the_layout_worked_by_hand():
    # width 3: 5 = 0b101 on bits 0..2, 3 = 0b011 on bits 3..5, 6 = 0b110 on bits 6..8 (bit 8 = byte 1's bit 0)
    packed = BENCH.pack_fields_bitwise(torch.tensor([5, 3, 6]), 3)
    assert packed.tolist() == [0b10_011_101, 0b1]
    # width 12: 0xABC then 0x123 -> bytes 0xBC, 0x3A, 0x12
    assert BENCH.pack_fields_bitwise(torch.tensor([0xABC, 0x123]), 12).tolist() == [0xBC, 0x3A, 0x12]
    assert BENCH.unpack_fields_bitwise(torch.tensor([0xBC, 0x3A, 0x12], dtype=torch.uint8), 12, 2).tolist() == \
        [0xABC, 0x123]


@pytest.mark.parametrize("width", [1, 3, 7, 13, 32])
def test_the_bitwise_definition_agrees_with_numpy_packbits(width):
    v = _values(width, 1001)
    bits = ((v.numpy()[:, None].astype(np.uint64) >> np.arange(width, dtype=np.uint64)) & 1).astype(np.uint8)
    want = np.packbits(bits.reshape(-1), bitorder="little")
    assert np.array_equal(BENCH.pack_fields_bitwise(v, width).numpy(), want)


# ------------------------------------------------------------------ the kit's code, every width
@pytest.mark.parametrize("width", WIDTHS)
def test_packed_bytes_are_the_definitions_and_unpack_inverts_them(width):
    for numel in NUMELS:
        v = _values(width, numel)
        packed = pack_fields(v, width)
        assert packed.dtype == torch.uint8 and packed.shape == (math.ceil(numel * width / 8),), (width, numel)
        assert torch.equal(packed, BENCH.pack_fields_bitwise(v, width)), (width, numel)
        got = unpack_fields(packed, width, numel)
        assert got.dtype == torch.int32 and torch.equal(got, _as_int32(v)), (width, numel)
        assert torch.equal(got, BENCH.unpack_fields_bitwise(packed, width, numel)), (width, numel)


@pytest.mark.parametrize("width", WIDTHS)
def test_extreme_values_all_zeros_and_all_ones(width):
    for numel in (8, 24, 13):
        for fill in (0, 2**width - 1):
            v = torch.full((numel,), fill, dtype=torch.int64)
            packed = pack_fields(v, width)
            assert torch.equal(packed, BENCH.pack_fields_bitwise(v, width)), (width, numel, fill)
            assert torch.equal(unpack_fields(packed, width, numel), _as_int32(v)), (width, numel, fill)
    # a whole number of bytes of all-ones fields is all 0xFF
    assert pack_fields(torch.full((8,), 2**width - 1), width).tolist() == [0xFF] * width


@pytest.mark.parametrize("width", [2, 3, 5, 8, 9, 12, 15, 16])
def test_any_integer_dtype_packs_the_same_bytes(width):
    v = _values(width, 1001)
    want = BENCH.pack_fields_bitwise(v, width)
    dtypes = [torch.int32, torch.int64] + ([torch.int16] if width < 16 else []) + ([torch.uint8] if width <= 8 else [])
    for dtype in dtypes:
        assert torch.equal(pack_fields(v.to(dtype), width), want), dtype
    bits = torch.rand(77, generator=torch.Generator().manual_seed(1)) < 0.5  # bool: one bit each
    assert torch.equal(pack_fields(bits, 1), BENCH.pack_fields_bitwise(bits, 1))


@pytest.mark.parametrize("width", [3, 5, 6, 7, 9, 11, 13, 14, 16])
def test_workers_stacked_unpack_at_once_and_offset_views_work(width):
    numel = 333
    vs = [_values(width, numel, seed=s) for s in range(3)]
    packed = torch.stack([pack_fields(v, width) for v in vs])
    got = unpack_fields(packed, width, numel)
    assert got.shape == (3, numel) and all(torch.equal(got[i], _as_int32(vs[i])) for i in range(3))
    # views that start mid-storage (no 8-byte alignment) and packed payloads with trailing bytes
    big = _values(width, numel + 3)
    assert torch.equal(pack_fields(big[3:], width), BENCH.pack_fields_bitwise(big[3:], width))
    padded = torch.cat([torch.zeros(1, dtype=torch.uint8), pack_fields(vs[0], width), torch.zeros(5, dtype=torch.uint8)])
    assert torch.equal(unpack_fields(padded[1:], width, numel), _as_int32(vs[0]))


@pytest.mark.parametrize("width", [1, 3, 4, 9, 16, 32])
def test_meta_tensors_give_the_shapes_plan_needs(width):
    v = torch.empty(1001, dtype=torch.int32, device="meta")
    packed = pack_fields(v, width)
    assert packed.device.type == "meta" and packed.dtype == torch.uint8 and packed.shape == (math.ceil(1001 * width / 8),)
    out = unpack_fields(torch.empty(4, packed.numel(), dtype=torch.uint8, device="meta"), width, 1001)
    assert out.shape == (4, 1001) and out.dtype == torch.int32


@pytest.mark.gpu
@pytest.mark.parametrize("width", WIDTHS)
def test_cuda_packs_the_same_bytes(width):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    v = _values(width, 100_003)
    packed = pack_fields(v.cuda(), width)
    assert packed.is_cuda and torch.equal(packed.cpu(), BENCH.pack_fields_bitwise(v, width))
    assert torch.equal(unpack_fields(packed, width, v.numel()).cpu(), _as_int32(v))


# ------------------------------------------------------------------ hostile input
@pytest.mark.parametrize("width", [0, -1, MAX_FIELD_WIDTH + 1, 64, 2.5, "4", True, None])
def test_a_width_outside_the_valid_range_is_refused_by_name(width):
    for call in (lambda: pack_fields(torch.tensor([1, 0, 1]), width),
                 lambda: unpack_fields(torch.zeros(3, dtype=torch.uint8), width, 3)):
        with pytest.raises(ValueError, match=rf"width must be an integer in \[1, {MAX_FIELD_WIDTH}\].*got {width!r}"):
            call()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.complex64])
def test_non_integer_values_are_refused_by_dtype(dtype):
    with pytest.raises(TypeError, match=rf"pack_fields: values must be integers.*got {dtype}"):
        pack_fields(torch.ones(9, dtype=dtype), 3)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.float32, torch.bool])
def test_packed_bytes_must_be_uint8(dtype):
    with pytest.raises(TypeError, match=rf"unpack_fields: packed must be uint8.*got {dtype}"):
        unpack_fields(torch.zeros(4, dtype=dtype), 3, 8)


def test_unpack_refuses_too_few_bytes_and_a_bad_numel():
    packed = pack_fields(torch.arange(8), 5)  # 5 bytes
    with pytest.raises(ValueError, match=r"9 values of 5 bits need 6 bytes.*has 5"):
        unpack_fields(packed, 5, 9)
    for numel in (-1, 2.0, None):
        with pytest.raises(ValueError, match=rf"numel must be an integer >= 0, got {numel!r}"):
            unpack_fields(packed, 5, numel)
    with pytest.raises(ValueError, match="at least one dimension"):
        unpack_fields(torch.tensor(3, dtype=torch.uint8), 5, 0)


# ------------------------------------------------------------------ benchmarks/pack_fields.py
class _FixedClock:
    """A stand-in for the timing clock: every call runs once and reads ``ms``."""

    def __init__(self, device, flush_bytes=0, ms=2.0):
        self.ms = ms

    def __call__(self, fn):
        fn()
        return self.ms

    def repeat(self, fn, n, setup=None):
        fn()
        return [self.ms] * n


def test_the_benchmark_times_every_width_both_ways_and_writes_the_table(tmp_path, monkeypatch, capsys):
    from studykit.measure import timing
    from studykit.measure.records import load_records

    monkeypatch.setattr(timing, "_Clock", _FixedClock)
    out = tmp_path / "p.jsonl"
    argv = ["--numel", "1001", "--widths", "3", "9", "--min-reps", "3", "--min-time-s", "0", "--warmup", "1",
            "--out", str(out), "--quiet"]
    assert BENCH.main(argv) == 0
    recs = load_records(out)
    assert sorted((r["width"], r["mode"]) for r in recs) == [(3, "bitwise"), (3, "kit"), (9, "bitwise"), (9, "kit")]
    assert all(r["kind"] == "pack_fields" and r["matches_reference"] is True and r["n_iter"] == 3 and r["git_commit"]
               and r["packed_bytes"] == math.ceil(1001 * r["width"] / 8) and r["numel"] == 1001 for r in recs)
    table = (tmp_path / "p.md").read_text()
    assert "| 3 | 2.000 [2.000-2.000] 3 | 2.000 [2.000-2.000] 3 | 1.0 | yes |" in table
    assert table in capsys.readouterr().out
    assert BENCH.main(argv) == 0 and len(load_records(out)) == 4  # resumed: nothing timed twice
    assert BENCH.main(["--report-only", "--out", str(out)]) == 0


@pytest.mark.parametrize("argv,needle", [
    (["--out", os.path.join(ROOT, "data", "benchmarks", "pack_fields_cpu", "x.jsonl")], "--overwrite-committed"),
    (["--widths", "0"], "must be an integer in [1, 32]"),
    (["--widths", str(MAX_FIELD_WIDTH + 1)], "must be an integer in [1, 32]"),
    (["--numel", "0"], "--numel"),
    (["--out", "x.json"], "give a .jsonl file"),
])
def test_the_benchmark_refuses_bad_input_and_says_why(tmp_path, capsys, argv, needle):
    if "--out" not in argv:
        argv = [*argv, "--out", str(tmp_path / "p.jsonl")]
    with pytest.raises(SystemExit) as exc:
        BENCH.main(argv)
    assert exc.value.code == 2 and needle in capsys.readouterr().err


def test_the_committed_cpu_table_is_generated_from_its_records(tmp_path):
    """data/benchmarks/pack_fields_cpu/pack_fields.md is what --report-only makes of its records (no hand edits),
    and every committed width packed the same bytes as the definition."""
    import shutil

    from studykit.measure.records import load_records

    folder = os.path.join(ROOT, "data", "benchmarks", "pack_fields_cpu")
    shutil.copy(os.path.join(folder, "pack_fields.jsonl"), tmp_path / "pack_fields.jsonl")
    BENCH.report(tmp_path / "pack_fields.jsonl", verbose=False)
    with open(os.path.join(folder, "pack_fields.md"), encoding="utf-8") as f:
        assert (tmp_path / "pack_fields.md").read_text(encoding="utf-8") == f.read()
    recs = load_records(os.path.join(folder, "pack_fields.jsonl"))
    assert {(r["width"], r["mode"]) for r in recs} == {(w, m) for w in range(1, 17) for m in ("kit", "bitwise")}
    assert all(r["matches_reference"] for r in recs) and {r["device"] for r in recs} == {"cpu"}
