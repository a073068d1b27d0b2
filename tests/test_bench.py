"""``python -m studykit bench``, its summary, the lean DDP-hook path, and the fused GPU kernels.

The ``gpu`` tests compare every fused kernel (:mod:`studykit.compressors._fast`) with the
reference code it replaces, on a CUDA device; they skip on CPU machines. They also run on the
CPU through Triton's interpreter (``TRITON_INTERPRET=1 STUDYKIT_FAST_INTERPRET=1``, slow).
"""
import math
import os

import pytest
import torch

from studykit.measure import bench
from studykit import compressors as C
from studykit.comm import LocalComm
from studykit.compressors import _fast
from studykit.compressors import quantization as Q
from studykit.measure.records import load_records
from tests.conftest import worker_grads

GPU_DATA = os.path.join(os.path.dirname(__file__), "..", "data", "measurements", "gpu")


# ------------------------------------------------------------------ summary and CLI (CPU)
def test_summarize_reads_the_committed_gpu_measurements():
    recs = load_records(GPU_DATA)
    if not recs:
        pytest.skip("no committed GPU measurements")
    df = bench.summarize(recs)
    codec = df[(df.section == "codec") & df.target.notna()]
    assert set(bench.ELEMENTWISE) | {"topk", "powersgd"} <= set(codec.compressor)
    row = codec[codec.compressor == "fp16"].iloc[0]
    assert math.isclose(row.x_floor, row.ms / row.floor_ms) and row.limit == 3.0 and row.passed in (True, False)
    ddp = df[(df.section == "ddp") & (df.model == "resnet50") & (df.world_size == 2)]
    sync = ddp[ddp.compressor == "syncsgd"].iloc[0]
    assert math.isclose(sync.x_syncsgd, 1.0)
    ps = ddp[(ddp.compressor == "powersgd") & (ddp.impl == "hook")].iloc[0]
    assert ps.limit == 1.2 and ps.passed == (ps.x_syncsgd <= 1.2)
    half = ddp[(ddp.compressor == "fp16") & (ddp.impl == "hook")].iloc[0]
    assert half.peer == "torch_fp16" and math.isclose(half.x_peer, half.ms / half.peer_ms)
    assert "judged target rows pass" in bench.summary_markdown(df)


def test_bench_cli_writes_records_and_summary_on_cpu(tmp_path):
    out = tmp_path / "b"
    rc = bench.main(["bench", "--model", "mlp_small", "--compressors", "fp16", "signsgd", "topk",
                     "--out-dir", str(out), "--iters", "2", "--warmup", "1", "--quiet", "--reference"])
    assert rc == 0
    recs = load_records(out / "codecs.jsonl")
    kinds = {r["kind"] for r in recs}
    assert {"copy_bw", "bench"} <= kinds
    rows = [r for r in recs if r["kind"] == "bench" and r["compressor"] == "topk"]
    assert {r["phase"] for r in rows} == {"encdec", "default"}
    assert {r["mode"] for r in rows} == {"flat:fast", "flat:reference"}
    for r in rows:
        assert r["status"] == "ok" and r["floor_ms"] > 0 and r["x_floor"] > 0 and r["torch"] and r["timestamp"]
    assert (out / "summary.csv").exists() and (out / "summary.md").exists()
    # resume: a second run skips what is there (only the copy bandwidth is measured again)
    n = len(recs)
    bench.main(["bench", "--model", "mlp_small", "--compressors", "fp16", "--out-dir", str(out), "--iters", "2",
                "--warmup", "1", "--quiet", "--no-split"])
    assert len(load_records(out / "codecs.jsonl", dedupe=False)) == n + 1
    assert load_records(out / "codecs.jsonl").report.n_duplicates == 1  # the copy_bw of both runs


def test_summary_only_mode_prints_markdown(capsys):
    if not load_records(GPU_DATA):
        pytest.skip("no committed GPU measurements")
    assert bench.main(["bench", "--summary", GPU_DATA]) == 0
    assert "| model | compressor" in capsys.readouterr().out


# ------------------------------------------------------------------ lean protocol (CPU)
@pytest.mark.parametrize("name", ["none", "fp16", "signsgd", "topk", "quantize", "thc", "qsgd"])
def test_flat_buffer_gives_the_same_numbers_as_per_tensor_views(name):
    """What the DDP hook relies on for partition-invariant compressors."""
    shapes = [(6, 5), (7,), (2, 3, 4)]
    grads = worker_grads(2, shapes)
    flat = [torch.cat([t.reshape(-1) for t in g]) for g in grads]
    comp = C.get(name)
    assert comp.partition_invariant
    a = C.simulate(name, grads)
    b = C.simulate(name, flat)
    for w in range(2):
        assert torch.equal(torch.cat([t.reshape(-1) for t in a[w]]), b[w])


def test_layer_wise_compressors_are_not_partition_invariant():
    assert not C.get("powersgd").partition_invariant and not C.get("atomo").partition_invariant
    assert not C.get("topk", scope="layer").partition_invariant and C.get("topk").partition_invariant


def test_flat_input_is_not_modified_and_local_is_right():
    x = torch.randn(100)
    keep = x.clone()
    for name in C.available():
        C.get(name).reduce(x, LocalComm())
        avg, local = C.get(name, error_feedback=False).reduce(x, LocalComm(), return_local=True)
        assert torch.equal(x, keep), name
    avg, local = C.get("none").reduce(x, LocalComm(), return_local=True)
    assert torch.equal(avg, x) and torch.equal(local, x)


def test_error_feedback_memory_follows_a_switch_between_flat_and_per_tensor_layouts():
    shapes = [(4, 3), (5,)]
    g = [torch.randn(s) for s in shapes]
    flat = torch.cat([t.reshape(-1) for t in g])
    per = C.get("topk", ratio=0.2)
    whole = C.get("topk", ratio=0.2)
    per.reduce(g, key=0)
    whole.reduce(flat, key=0)
    assert torch.equal(torch.cat([m.reshape(-1) for m in per.memory.residuals[0]]), whole.memory.residuals[0][0])
    per.reduce(flat, key=0)  # per-tensor memory, flat gradient: re-cut, not an error
    whole.reduce(g, key=0)
    assert torch.allclose(torch.cat([m.reshape(-1) for m in whole.memory.residuals[0]]), per.memory.residuals[0][0])
    with pytest.raises(C.CompressorError, match="error-feedback memory"):
        per.reduce([torch.randn(3)], key=0)


def test_rekey_permutes_flat_error_feedback_memory():
    from studykit.ddp import _rekey

    comp = C.get("topk")
    a, b = torch.arange(6.0), torch.arange(6.0, 10.0)
    comp.memory.residuals[3] = [torch.cat([a, b])]
    _rekey(comp, 3, [1, 2], [2, 1], [(2, 3), (4,)])
    assert torch.equal(comp.memory.residuals[3][0], torch.cat([b, a]))


# ------------------------------------------------------------------ fused kernels (GPU)
def _device():
    if torch.cuda.is_available() and _fast.HAVE_TRITON:
        return "cuda"
    if os.environ.get("STUDYKIT_FAST_INTERPRET") == "1" and os.environ.get("TRITON_INTERPRET") == "1" \
            and _fast.HAVE_TRITON:
        return "cpu"
    pytest.skip("needs a CUDA GPU with triton (or Triton's interpreter)")


def _threads_ok(dev):
    if dev == "cpu":
        pytest.skip("simulate runs workers as threads; Triton's interpreter is not thread-safe")


@pytest.fixture
def dev():
    return _device()


@pytest.fixture
def reference(monkeypatch):
    """Call ``fn`` with the fused kernels off."""

    def run(fn):
        monkeypatch.setenv("STUDYKIT_FAST", "0")
        try:
            return fn()
        finally:
            monkeypatch.setenv("STUDYKIT_FAST", "1")

    return run


def _x(n, dev, seed=0):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)).to(dev)


@pytest.mark.gpu
def test_fast_path_is_used(dev):
    assert _fast.enabled(_x(10, dev))


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 7, 8, 4097, 100_003])
def test_packed_bits_equal_pack_bits(dev, n):
    x = _x(n, dev)
    x[: min(n, 3)] = torch.tensor([0.0, -0.0, 1.0], device=dev)[: min(n, 3)]
    for mode, ref in [(0, x >= 0), (1, x < 0), (2, x.view(torch.int32) < 0)]:
        assert torch.equal(_fast.pack(x, mode), Q.pack_bits(ref)), mode


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_casts_equal_torch(dev, reference, dtype):
    if dev == "cpu" and dtype == torch.bfloat16:
        pytest.skip("Triton's interpreter truncates to bfloat16; the GPU rounds to nearest even")
    x = _x(100_003, dev) * 300
    name = "fp16" if dtype == torch.float16 else "bf16"
    comp = C.get(name)
    for ws in (1, 3):
        payload, ctx = comp.compress(x, ws)
        ref, _ = reference(lambda: comp.compress(x, ws))
        assert payload[0].dtype == dtype and torch.equal(payload[0], ref[0])
        assert torch.equal(comp.decompress(payload, ctx), reference(lambda: comp.decompress(payload, ctx)))
        assert torch.equal(comp.decompress_mean(payload, ctx, ws), payload[0].float())


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["signsgd", "ef_signsgd"])
@pytest.mark.parametrize("world_size", [1, 3])
def test_sign_codecs_equal_reference(dev, reference, name, world_size):
    n = 70_001
    xs = [_x(n, dev, s) for s in range(world_size)]
    comp = C.get(name, error_feedback=False)
    fast = [comp.compress(x, world_size) for x in xs]
    ref = reference(lambda: [comp.compress(x, world_size) for x in xs])
    for (p, _), (r, _) in zip(fast, ref):
        assert all(torch.equal(a, b) for a, b in zip(p, r))
    payloads = [p for p, _ in fast]
    assert torch.allclose(comp.combine(payloads, n), reference(lambda: comp.combine(payloads, n)), atol=1e-6)
    assert torch.equal(comp.decompress(payloads[0], n), reference(lambda: comp.decompress(payloads[0], n)))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["qsgd", "terngrad", "natural"])
def test_stochastic_gather_codecs_decode_like_reference_and_round_to_neighbours(dev, reference, name):
    n = 70_001
    xs = [_x(n, dev, s) for s in range(3)]
    comp = C.get(name)
    fast = [comp.compress(x, 3)[0] for x in xs]
    ref = reference(lambda: [comp.compress(x, 3)[0] for x in xs])
    for p, r in zip(fast, ref):
        assert [(t.shape, t.dtype) for t in p] == [(t.shape, t.dtype) for t in r]
    # decoding the same payloads: same function (rounding aside)
    assert torch.allclose(comp.combine(fast, n), reference(lambda: comp.combine(fast, n)), rtol=1e-5, atol=1e-6)
    assert torch.allclose(comp.decompress(fast[0], n), reference(lambda: comp.decompress(fast[0], n)),
                          rtol=1e-5, atol=1e-6)
    # each decoded value is one of the two neighbours the reference rounds between
    got = comp.decompress(fast[0], n)
    if name == "qsgd":
        assert torch.allclose(fast[0][0], ref[0][0], rtol=1e-5)  # bucket norms
        levels = [comp._unpack(x[1], n).int() for x in (fast[0], ref[0])]  # packed: compare the levels
        assert (levels[0] - levels[1]).abs().max() <= 1
    elif name == "natural":
        assert (fast[0][0].int() - ref[0][0].int()).abs().max() <= 1 and torch.equal(fast[0][1], ref[0][1])
    else:
        assert torch.equal(fast[0][0], ref[0][0])  # the scaler
        assert set(got.unique().tolist()) <= {-fast[0][0].item(), 0.0, fast[0][0].item()}


@pytest.mark.gpu
@pytest.mark.parametrize("name,params", [("quantize", {}), ("quantize", {"bits": 4}), ("qsgd", {}), ("terngrad", {}),
                                         ("natural", {}), ("thc", {}), ("thc", {"rotation": "partial", "chunk": 1024}),
                                         ("thc", {"saturation": 3.0})])
def test_stochastic_codecs_unbiased_on_the_fast_path(dev, name, params):
    n = 20_011
    x = _x(n, dev)
    seeds = 64
    acc = torch.zeros(n, device=dev)
    one = None
    for s in range(seeds):
        out = C.get(name, seed=s, **params).reduce(x, LocalComm())
        one = out if one is None else one
        acc += out
    err_one = (one - x).pow(2).mean().sqrt()
    err_mean = (acc / seeds - x).pow(2).mean().sqrt()
    assert torch.isfinite(acc).all()
    if name == "thc" and params.get("saturation"):
        assert err_mean < 0.5 * err_one  # biased on the clipped outliers only
    else:
        assert err_mean < 2.5 * err_one / math.sqrt(seeds)


@pytest.mark.gpu
@pytest.mark.parametrize("name,params", [("quantize", {"bits": 16}), ("thc", {"bits": 16}),
                                         ("thc", {"bits": 16, "rotation": "partial", "chunk": 256})])
def test_high_precision_fast_codecs_are_close_to_the_dense_average(dev, name, params):
    _threads_ok(dev)
    grads = [[_x(5000, dev, s)] for s in range(4)]
    C.get(name, **params).reduce(grads[0][0], LocalComm())  # compile the kernels in this thread first
    exact = sum(g[0] for g in grads) / 4
    out = C.simulate(name, grads, **params)
    for w in out:
        assert torch.allclose(w[0], exact, atol=2e-3)
    assert all(torch.equal(w[0], out[0][0]) for w in out)


@pytest.mark.gpu
@pytest.mark.parametrize("n,k", [(100_003, 1_001), (5_000, 1), (5_000, 4_999), (1_000_000, 10_000)])
def test_radix_topk_selects_the_k_largest_magnitudes(dev, n, k):
    x = _x(n, dev)
    idx = _fast.topk_abs(x, k)
    assert idx.numel() == k and idx.unique().numel() == k
    assert torch.equal(x[idx].abs().sort(descending=True).values, torch.topk(x.abs(), k).values)


@pytest.mark.gpu
def test_radix_topk_with_ties_and_zeros(dev):
    x = torch.zeros(50_000, device=dev)
    x[:100] = _x(100, dev)
    x[100:300] = 0.5
    x[300:400] = -0.5
    for k in (50, 150, 350, 1000):
        idx = _fast.topk_abs(x, k)
        assert idx.unique().numel() == k
        assert torch.equal(x[idx].abs().sort(descending=True).values, torch.topk(x.abs(), k).values)


@pytest.mark.gpu
@pytest.mark.parametrize("n,length,k", [(10_000, 4096, 41), (3 * 4096, 4096, 41), (5_000, 1000, 10),
                                        (300, 300, 3), (40_000, 16384, 164)])
def test_row_topk_equals_batched_torch_topk(dev, n, length, k):
    x = _x(n, dev)
    vals, offs = _fast.row_topk(x, length, k)
    rows = -(-n // length)
    padded = torch.nn.functional.pad(x, (0, rows * length - n)).view(rows, length)
    ref = torch.topk(padded.abs(), k, dim=1).values
    assert torch.equal(vals.view(rows, k).abs().sort(dim=1, descending=True).values, ref)
    assert torch.equal(padded.gather(1, offs.view(rows, k).long()), vals.view(rows, k))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["topk", "topk_chunked", "dgc", "mstopk", "randomk"])
def test_sparsifiers_on_the_fast_path_equal_reference_decoding(dev, reference, name):
    x = _x(200_003, dev)
    comp = C.get(name, error_feedback=False)
    fast = comp.reduce(x, LocalComm())
    ref = reference(lambda: C.get(name, error_feedback=False).reduce(x, LocalComm()))
    if name in ("dgc", "randomk"):  # random sample / positions: only the count is comparable
        assert (fast != 0).sum() == (ref != 0).sum()
    else:
        assert torch.equal(fast, ref)


@pytest.mark.gpu
@pytest.mark.parametrize("name", C.available())
def test_every_compressor_runs_on_the_gpu_and_workers_agree(dev, name):
    _threads_ok(dev)
    grads = [[t.to(dev) for t in g] for g in worker_grads(2, shapes=((64, 33), (65,), (4, 3, 3, 3)))]
    C.get(name).reduce(grads[0], LocalComm())  # compile the kernels in this thread first
    for _ in range(2):  # second step: error-feedback memory and warm starts in play
        out = C.simulate(name, grads)
        assert all(torch.isfinite(t).all() for t in out[0])
        assert all(torch.equal(a, b) for a, b in zip(out[0], out[1]))
