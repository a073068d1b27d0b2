"""``python -m studykit bench``, its summary, the lean DDP-hook path, and the fused GPU kernels.

The ``gpu`` tests compare every fused kernel (:mod:`studykit.compressors._fast`) with the
reference code it replaces, on a CUDA device; they skip on CPU machines. They also run on the
CPU through Triton's interpreter (``TRITON_INTERPRET=1 STUDYKIT_FAST_INTERPRET=1``, slow).
"""
import json
import math
import os
import re
import statistics
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from studykit.measure import bench
from studykit.measure.records import RecordWriter
from studykit import compressors as C
from studykit.comm import LocalComm
from studykit.compressors import _fast
from studykit.compressors import quantization as Q
from studykit.measure.records import load_records
from studykit.nbtools import codec_blocks as CB
from studykit.nbtools import readme_blocks as RB
from studykit.nbtools.readme_blocks import CODEC_KERNELS, TOPK_DDP, TOPK_DDP_RUNS
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
                     "--out-dir", str(out), "--iters", "2", "--min-time-s", "0", "--warmup", "1", "--quiet",
                     "--reference"])
    assert rc == 0
    recs = load_records(out / "codecs.jsonl")
    kinds = {r["kind"] for r in recs}
    assert {"copy_bw", "bench"} <= kinds
    rows = [r for r in recs if r["kind"] == "bench" and r["compressor"] == "topk"]
    assert {r["phase"] for r in rows} == {"encdec", "default"}
    assert {r["mode"] for r in rows} == {"flat:fast", "flat:reference"}
    for r in rows:
        assert r["status"] == "ok" and r["floor_ms"] > 0 and r["x_floor"] > 0 and r["torch"] and r["timestamp"]
        assert r["ms_q25"] <= r["ms_median"] <= r["ms_q75"] and r["n_iter"] >= 2 and r["git_commit"]
        assert (r["min_reps"], r["min_time_s"], r["l2_flush_bytes"], r["timer"]) == (2, 0.0, 0, "perf_counter")
    assert (out / "summary.csv").exists() and (out / "summary.md").exists()
    # resume: a second run skips what is there, the copy bandwidth (the floor) included: it is read back
    n = len(recs)
    bench.main(["bench", "--model", "mlp_small", "--compressors", "fp16", "--out-dir", str(out), "--iters", "2",
                "--min-time-s", "0", "--warmup", "1", "--quiet", "--no-split"])
    assert len(load_records(out / "codecs.jsonl", dedupe=False)) == n
    assert load_records(out / "codecs.jsonl").report.n_duplicates == 0


def test_summary_only_mode_prints_markdown(capsys):
    if not load_records(GPU_DATA):
        pytest.skip("no committed GPU measurements")
    assert bench.main(["bench", "--summary", GPU_DATA]) == 0
    assert "| model | compressor" in capsys.readouterr().out


# ------------------------------------------------------------------ issue 19: benchmark hygiene (fake clock)
class FakeClock:
    """Stands in for ``timing._Clock``: every call "takes" ``ms`` (no call is timed for real; the
    codec still runs in the bench's own settling and host-time calls)."""

    made: ClassVar[list] = []

    def __init__(self, device, flush_bytes=0, ms=0.5):
        self.ms, self.flush_bytes, self.reps = ms, flush_bytes, 0
        FakeClock.made.append(self)

    def __call__(self, fn):
        return self.ms

    def repeat(self, fn, n, setup=None):
        self.reps += n
        return [self.ms] * n


@pytest.fixture
def fake_clock(monkeypatch):
    """The first clock made (the copy bandwidth's) reads 4 ms a call, every later one (codecs) 0.5 ms."""
    from studykit.measure import timing

    FakeClock.made = []

    def make(device, flush_bytes=0):
        return FakeClock(device, flush_bytes, ms=4.0 if not FakeClock.made else 0.5)

    monkeypatch.setattr(timing, "_Clock", make)
    return FakeClock


def test_rep_policy_defaults_are_issue_19s_and_bad_policies_are_refused():
    p = bench.RepPolicy()
    assert (p.min_reps, p.min_time_s) == (100, 1.0)
    assert p.flush_for("cpu") == 0 and p.flush_for(torch.device("cuda", 0)) == 256 * 2**20
    kw = p.timing_kw("cpu")
    assert kw["n_iter"] == 100 and kw["min_time_s"] == 1.0 and kw["budget_s"] == p.budget_s and kw["flush_bytes"] == 0
    assert p.fields(torch.device("cuda", 0))["timer"] == "cuda_events" and p.fields("cpu")["timer"] == "perf_counter"
    assert bench.RepPolicy(flush_bytes=64 * 2**20).flush_for("cpu") == 64 * 2**20
    for kw, what in [({"min_reps": 0}, "min_reps"), ({"min_time_s": -1}, "min_time_s"),
                     ({"min_time_s": 5, "budget_s": 1}, "budget_s"), ({"n_warmup": 0}, "n_warmup"),
                     ({"flush_bytes": -1}, "flush_bytes")]:
        with pytest.raises(ValueError, match=what):
            bench.RepPolicy(**kw)


def test_bench_cli_refuses_a_budget_below_the_minimum_time(capsys):
    with pytest.raises(SystemExit):
        bench.main(["bench", "--min-time-s", "5", "--budget-s", "1", "--quiet"])
    assert "--budget-s (1.0)" in capsys.readouterr().err


def test_run_codecs_applies_the_policy_and_the_memory_floor(tmp_path, fake_clock):
    from studykit.measure.profile import memory_floor_ms
    from studykit.measure.records import RecordWriter

    policy = bench.RepPolicy(min_reps=100, min_time_s=1.0, budget_s=30.0, n_warmup=2, flush_bytes=4096)
    specs = [bench.CompressorSpec("fp16", ()), bench.CompressorSpec("powersgd", (("rank", 4),))]
    bench.run_codecs(specs, RecordWriter(tmp_path / "c.jsonl"), device="cpu", model="mlp_small", policy=policy,
                     copy_bytes=2**20, extras=False, phases=("encdec",), verbose=False)
    assert all(c.flush_bytes == 4096 for c in fake_clock.made)  # the policy's flush reaches every clock
    recs = load_records(tmp_path / "c.jsonl")
    (copy,) = [r for r in recs if r["kind"] == "copy_bw"]
    assert copy["copy_GBps"] == pytest.approx(2 * 2**20 / 4e-3 / 1e9)  # bytes read + written over 4 ms
    numel = 23050  # mlp_small
    floor = 8 * numel / (copy["copy_GBps"] * 1e9) * 1e3  # one read + one write of the fp32 gradient
    assert memory_floor_ms(numel, copy["copy_GBps"]) == pytest.approx(floor)
    rows = {r["compressor"]: r for r in recs if r["kind"] == "bench"}
    assert set(rows) == {"fp16", "powersgd"}
    for r in rows.values():
        assert r["numel"] == numel and r["floor_ms"] == pytest.approx(floor)
        assert r["ms_median"] == 0.5 and r["x_floor"] == pytest.approx(0.5 / floor)
        assert r["n_iter"] == 2000 and r["times_ms"] is None  # 1 s / 0.5 ms; the raw list left out beyond 1000
        assert (r["ms_q25"], r["ms_q75"]) == (0.5, 0.5) and r["reps_capped"] is False
        assert (r["min_reps"], r["min_time_s"], r["budget_s"], r["l2_flush_bytes"]) == (100, 1.0, 30.0, 4096)
    assert rows["powersgd"]["layout"] == "per_tensor" and rows["fp16"]["layout"] == "flat"


def test_a_budget_that_cuts_the_policy_is_recorded(tmp_path, fake_clock):
    from studykit.measure.records import RecordWriter

    policy = bench.RepPolicy(min_reps=100, min_time_s=0.01, budget_s=0.02, n_warmup=1)
    bench.run_codecs([bench.CompressorSpec("fp16", ())], RecordWriter(tmp_path / "c.jsonl"), device="cpu",
                     model="mlp_small", policy=policy, copy_bytes=2**20, extras=False, phases=("encdec",),
                     verbose=False)
    (r,) = [r for r in load_records(tmp_path / "c.jsonl") if r["kind"] == "bench"]
    assert r["n_iter"] == 40 and r["reps_capped"] is True and len(r["times_ms"]) == 40  # 20 ms / 0.5 ms < 100


def test_the_commit_is_stamped_where_the_checkout_has_no_git(tmp_path, monkeypatch, fake_clock, capsys):
    from studykit.measure import records
    from studykit.measure.records import RecordWriter

    monkeypatch.setattr(records, "_git_commit", lambda: ("unknown", None))  # no .git here
    def run(out):
        bench.run_codecs([bench.CompressorSpec("fp16", ())], RecordWriter(out), device="cpu", model="mlp_small",
                         policy=bench.RepPolicy(min_reps=2, min_time_s=0.0, n_warmup=1), copy_bytes=2**20,
                         extras=False, phases=("encdec",), verbose=False)

    monkeypatch.delenv("STUDYKIT_GIT_COMMIT", raising=False)
    run(tmp_path / "a.jsonl")
    assert {r["git_commit"] for r in load_records(tmp_path / "a.jsonl")} == {"unknown"}
    assert "STUDYKIT_GIT_COMMIT" in capsys.readouterr().err  # the run says how to stamp it
    monkeypatch.setenv("STUDYKIT_GIT_COMMIT", "0123abc")  # set after provenance was first built: still read
    run(tmp_path / "b.jsonl")
    assert {(r["git_commit"], r["git_dirty"]) for r in load_records(tmp_path / "b.jsonl")} == {("0123abc", None)}
    assert "WARNING" not in capsys.readouterr().err


def _rec(name, ms, *, params=None, phase="encdec", mode="flat:fast", model="resnet50", device="cuda:0",
         floor_ms=0.05, repeat=None, q=None):
    return {"kind": "bench", "status": "ok", "model": model, "compressor": name, "params": params or {},
            "phase": phase, "layout": "per_tensor" if name in ("powersgd", "atomo") else "flat", "mode": mode,
            "device": device, "gpu": "NVIDIA H200", "floor_ms": floor_ms, "ms_median": ms, "n_iter": 100,
            "ms_q25": q and q[0], "ms_q75": q and q[1], "repeat": repeat}


def test_compare_runs_gives_both_medians_their_ratio_and_agreement():
    a = [_rec("fp16", 0.100, q=(0.09, 0.11)), _rec("thc", 1.0), _rec("topk", 0.5), _rec("qsgd", 0.2),
         {"kind": "copy_bw", "status": "ok", "ms_median": 1.0}]
    b = [_rec("fp16", 0.105), _rec("thc", 1.2), _rec("topk", 0.5 / 1.1), _rec("qsgd", 0.2, phase="encode")]
    df = bench.compare_runs([a, b]).set_index("compressor")
    assert list(df.index) == ["fp16", "thc", "topk", "qsgd"]
    assert df.loc["fp16", "ratio"] == pytest.approx(1.05) and df.loc["fp16", "agree"]
    assert df.loc["fp16", "q25_1"] == 0.09 and df.loc["fp16", "x_floor_1"] == pytest.approx(2.0)
    assert not df.loc["thc", "agree"]  # 20 % apart
    assert df.loc["topk", "agree"]  # exactly 10 % apart: within
    assert df.loc["qsgd", "ratio"] is None or math.isnan(df.loc["qsgd", "ratio"])  # not measured twice
    md = bench.compare_markdown(bench.compare_runs([a, b]))
    assert "2 of 3 configurations measured twice agree within 10%" in md and "| NO |" in md
    with pytest.raises(ValueError, match="no runs"):
        bench.compare_runs([])


def test_split_repeats_separates_the_runs_of_one_file():
    recs = [_rec("fp16", 1.0, repeat=1), _rec("fp16", 2.0, repeat=2), _rec("bf16", 1.0, repeat=1),
            {"kind": "copy_bw", "repeat": 1}]
    runs = bench.split_repeats(recs)
    assert [[r["ms_median"] for r in run] for run in runs] == [[1.0, 1.0], [2.0]]
    assert bench.split_repeats([_rec("fp16", 1.0)]) == [[_rec("fp16", 1.0)]]


def test_speed_targets_judge_the_worst_run_and_name_what_is_missing():
    a = [_rec("fp16", 0.09), _rec("bf16", 0.09), _rec("thc", 0.25), _rec("quantize", 0.08, params={"bits": 2}),
         _rec("quantize", 0.12, params={"bits": 8}), _rec("powersgd", 1.4, params={"rank": 4}),
         _rec("powersgd", 9.0, params={"rank": 8}), _rec("mstopk", 0.4), _rec("fp16", 0.3, mode="flat:reference"),
         _rec("fp16", 0.03, phase="encode"), _rec("none", 0.05)]
    b = [_rec("fp16", 0.09), _rec("bf16", 0.11), _rec("thc", 0.15), _rec("quantize", 0.08, params={"bits": 2}),
         _rec("quantize", 0.09, params={"bits": 8}), _rec("powersgd", 1.45, params={"rank": 4}), _rec("mstopk", 0.4)]
    t = bench.speed_targets(bench.compare_runs([a, b]))
    got = {(r.compressor, r.params): (r.verdict, r.limit) for r in t.itertuples()}
    assert got[("fp16", "")] == ("PASS", 2.0)  # 1.8x the floor in both runs
    assert got[("bf16", "")] == ("MISS", 2.0)  # 1.8x, then 2.2x: the worst run is judged
    assert got[("thc", "")] == ("MISS", 4.0)  # 5x in run 1
    assert got[("quantize", "bits=2")][0] == "PASS" and got[("quantize", "bits=8")][0] == "MISS"  # every b
    assert got[("powersgd", "rank=4")] == ("PASS", 1.5) and ("powersgd", "rank=8") not in got
    assert got[("mstopk", "")] == ("PASS", 10.0)
    assert got[("atomo", "")][0] == "NOT MEASURED" and got[("topk", "")][0] == "NOT MEASURED"
    assert ("none", "") not in got and len([k for k in got if k[0] == "fp16"]) == 1  # reference, encode: not judged
    assert set(t.compressor) >= {n for tg in bench.SPEED_TARGETS for n in tg.compressors}
    md = bench.speed_targets_markdown(t)
    assert "| PASS |" in md and "| MISS |" in md and "judged target rows PASS" in md
    # on a CPU or another model the same numbers are reported, not judged
    cpu = bench.speed_targets(bench.compare_runs([[_rec("fp16", 0.09, device="cpu"),
                                                   _rec("bf16", 0.09, model="mlp_large")]]))
    verdicts = dict(zip(cpu.compressor, cpu.verdict))
    assert verdicts["fp16"].startswith("n/a (CPU") and verdicts["bf16"].startswith("n/a (mlp_large")


def test_every_speed_target_names_registered_compressors():
    for t in bench.SPEED_TARGETS:
        assert set(t.compressors) <= set(C.available()), t.key
        assert t.unit in ("x_floor", "ms") and t.limit > 0
        for k, _ in t.params:
            assert k in C.get(t.compressors[0]).params()
    names = [n for t in bench.SPEED_TARGETS for n in t.compressors]
    assert len(names) == len(set(names))  # one target per codec


def test_committed_records_without_the_new_fields_stay_readable():
    """Records of issue 7 (3-50 iterations, no quartiles, no policy) go through the new tables."""
    path = os.path.join(os.path.dirname(__file__), "..", "data", "benchmarks", "h200", "codecs.jsonl")
    recs = load_records(path)
    assert recs and all("ms_q25" not in r for r in recs)
    df = bench.compare_runs(bench.split_repeats(recs))
    fp16 = df[(df.compressor == "fp16") & (df.phase == "encdec") & (df["mode"] == "flat:fast")].iloc[0]
    assert fp16.q25_1 is None and fp16.ms_1 > 0 and fp16.x_floor_1 == pytest.approx(fp16.ms_1 / fp16.floor_ms)
    t = bench.speed_targets(df)
    row = t[t.compressor == "fp16"].iloc[0]
    assert row.verdict == ("PASS" if row.value <= 2.0 else "MISS")
    assert "| fp16 |" in bench.speed_targets_markdown(t)
    line = bench.compare_markdown(df[df.compressor == "fp16"].head(1)).splitlines()[2]
    assert f"{fp16.ms_1:.4f} n=" in line and "[" not in line  # no quartiles in an old record: none printed


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
    from studykit.ddp.hook import _rekey

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
        bucket = torch.full((x.numel(),), float("nan"), device=dev)  # a DDP hook decodes into its bucket
        assert comp.decompress_mean_into(payload, ctx, ws, bucket) is bucket
        assert torch.equal(bucket, payload[0].float())


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
        assert torch.equal(p[0], r[0])  # the signs
        # EF-SignSGD's scale ||g||_1 / d: the kernel sums per block, then the blocks (another order)
        assert all(torch.allclose(a, b, rtol=1e-6, atol=0) for a, b in zip(p[1:], r[1:]))
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
    idx = _fast._radix_topk(x, k)  # itself: topk_abs would leave out a failing candidate with a warning
    assert idx.numel() == k and idx.unique().numel() == k
    assert torch.equal(x[idx].abs().sort(descending=True).values, torch.topk(x.abs(), k).values)


@pytest.mark.gpu
def test_radix_topk_with_ties_and_zeros(dev):
    x = torch.zeros(50_000, device=dev)
    x[:100] = _x(100, dev)
    x[100:300] = 0.5
    x[300:400] = -0.5
    for k in (50, 150, 350, 1000):
        idx = _fast._radix_topk(x, k)
        assert idx.unique().numel() == k
        assert torch.equal(x[idx].abs().sort(descending=True).values, torch.topk(x.abs(), k).values)


@pytest.mark.gpu
@pytest.mark.parametrize("n,length,k", [(10_000, 4096, 41), (3 * 4096, 4096, 41), (5_000, 1000, 10),
                                        (300, 300, 3), (40_000, 16384, 164)])
def test_row_topk_equals_batched_torch_topk(dev, n, length, k):
    x = _x(n, dev)
    rows = -(-n // length)
    padded = torch.nn.functional.pad(x, (0, rows * length - n)).view(rows, length)
    ref = torch.topk(padded.abs(), k, dim=1).values
    for shape in _fast.ROW_TOPK_SHAPES:  # every variant pick may keep, each checked itself
        vals, offs = _fast.row_topk(x, length, k, shape=shape)
        assert torch.equal(vals.view(rows, k).abs().sort(dim=1, descending=True).values, ref), shape
        assert torch.equal(padded.gather(1, offs.view(rows, k).long()), vals.view(rows, k)), shape
        pos = (torch.arange(rows, device=dev)[:, None] * length + offs.view(rows, k).long()).view(-1)
        expected = torch.zeros(rows * length, device=dev).index_put_((pos,), vals)[:n]
        assert torch.equal(_fast.row_scatter(vals, offs, n, length, k), expected), shape


@pytest.mark.gpu
@pytest.mark.parametrize("n,length,k", [(3 * 4096 + 100, 4096, 41), (2_000, 512, 300)])
def test_row_topk_takes_ties_first_by_position(dev, n, length, k):
    """Few distinct magnitudes (and zeros, more of them than k leaves room for in some rows): the chosen offsets
    are the first k of a stable sort by descending |x|, in every shape (the early stop included)."""
    x = (torch.randint(-3, 4, (n,), generator=torch.Generator().manual_seed(1)) * 0.25).to(dev)
    rows = -(-n // length)
    padded = torch.nn.functional.pad(x, (0, rows * length - n)).view(rows, length)
    want = torch.sort(-padded.abs(), dim=1, stable=True).indices[:, :k].sort(dim=1).values
    for shape in _fast.ROW_TOPK_SHAPES:
        vals, offs = _fast.row_topk(x, length, k, shape=shape)
        assert torch.equal(offs.view(rows, k).long(), want), shape
        assert torch.equal(padded.gather(1, want), vals.view(rows, k)), shape


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["topk", "topk_chunked", "dgc", "mstopk", "randomk"])
def test_sparsifiers_on_the_fast_path_equal_reference_decoding(dev, reference, monkeypatch, name):
    x = _x(200_003, dev)
    comp = C.get(name, error_feedback=False)
    fast = comp.reduce(x, LocalComm())
    if name == "mstopk":  # the fast mean |g| is summed per block (_fast.abs_mean_max): the reference searches from it
        from studykit.compressors.sparsification import MSTopK

        lo = comp._magnitudes(x)[1]
        monkeypatch.setattr(MSTopK, "_magnitudes", lambda self, flat: (flat.abs(), lo, flat.abs().max()))
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


# ------------------------------------------------------------------ benchmarks/codec_repeat.py, scripts/gpu_codecs.sh
ROOT = os.path.join(os.path.dirname(__file__), "..")


def _benchmark(name: str):
    """The script benchmarks/<name>.py as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _codec_repeat():
    return _benchmark("codec_repeat")


def test_codec_repeat_default_codecs_are_every_one_with_quantize_at_every_b_and_atomo_last():
    specs = _codec_repeat().default_specs()
    names = [s.name for s in specs]
    assert set(names) == set(C.available()) and names[-1] == "atomo"
    bits = [dict(s.params)["bits"] for s in specs if s.name == "quantize"]
    assert bits == list(range(2, 17))  # every b Quantize accepts
    psgd = [dict(s.params) for s in specs if s.name == "powersgd"]  # defaults first, then the low-overhead variants
    assert psgd == [{}, {"orthogonalize": "once"}, {"reuse": 4}, {"orthogonalize": "once", "reuse": 4},
                    {"orthogonalize": "cholesky"}]
    for v in psgd:
        C.get("powersgd", **v)  # each is a valid setting
    atomo = [dict(s.params) for s in specs if s.name == "atomo"]  # the exact SVD, then the Gram route, both last
    assert atomo == [{}, {"svd": "gram"}] and [s.name for s in specs[-2:]] == ["atomo", "atomo"]
    C.get("atomo", **atomo[1])


def test_codec_repeat_times_every_codec_twice_and_reports_both(tmp_path, fake_clock, capsys):
    cr = _codec_repeat()
    out = tmp_path / "r.jsonl"
    argv = ["--device", "cpu", "--model", "mlp_small", "--compressors", "fp16", "powersgd", "--min-reps", "3",
            "--min-time-s", "0", "--warmup", "1", "--out", str(out), "--quiet"]
    assert cr.main(argv) == 0
    recs = load_records(out)
    assert sorted((r["kind"], r["repeat"]) for r in recs) == [("bench", 1), ("bench", 1), ("bench", 2), ("bench", 2),
                                                             ("copy_bw", 1), ("copy_bw", 2)]
    assert all(r["git_commit"] and r["timestamp"] and r["min_reps"] == 3 for r in recs)
    text = capsys.readouterr().out
    assert "2 of 2 configurations measured twice agree within 10%" in text  # the fake clock: identical runs
    assert "| elementwise | fp16 |" in text and "NOT MEASURED" in text
    assert (tmp_path / "r.md").read_text().startswith("# Codec timing, run twice")
    # resume: nothing is timed again (only each run's copy bandwidth); the report alone reads the file
    assert cr.main(argv) == 0 and len([r for r in load_records(out) if r["kind"] == "bench"]) == 4
    assert cr.main(["--report-only", "--out", str(out)]) == 0


@pytest.mark.parametrize("argv,needle", [
    (["--out", "x.json"], "give a .jsonl file"),
    (["--report-only", "--out", "{tmp}/missing.jsonl"], "no records at"),
    (["--out", os.path.join(ROOT, "data", "measurements", "x.jsonl")], "--overwrite-committed"),
    (["--min-time-s", "9", "--budget-s", "1"], "--budget-s (1.0)"),
    (["--compressors", "nonsense"], "nonsense"),
])
def test_codec_repeat_refuses_bad_input_and_says_why(tmp_path, capsys, argv, needle):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "r.jsonl")]
    with pytest.raises(SystemExit) as exc:
        _codec_repeat().main(argv)
    assert exc.value.code == 2 and needle in capsys.readouterr().err


def _gpu_codecs(tmp_path, **env):
    import subprocess
    import sys

    base = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, "DEVICE": "cpu", "MODEL": "mlp_small",
            "WARMUP": "1", "COMPONENTS": "0", "STUDYKIT_GIT_COMMIT": "feedc0de", **env}
    return subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_codecs.sh")], env=base, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.slow
def test_gpu_codecs_script_dry_run_on_cpu(tmp_path):
    """The lead's GPU script end to end on a tiny gradient: both runs, both tables, the commit passed in."""
    p = _gpu_codecs(tmp_path, COMPRESSORS="fp16 topk", MIN_TIME_S="0", MIN_REPS="3", TOTAL_S="200")
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(tmp_path)) == ["RUN.txt", "codecs.jsonl", "codecs.md", "run.log"]
    recs = load_records(tmp_path / "codecs.jsonl")
    assert {(r["compressor"], r["repeat"]) for r in recs if r["kind"] == "bench"} == \
        {("fp16", 1), ("fp16", 2), ("topk", 1), ("topk", 2)}
    assert {r["git_commit"] for r in recs} == {"feedc0de"}
    run = (tmp_path / "RUN.txt").read_text()
    assert "== codecs: rc=0" in run and "| topk | topk |" in run
    assert re.search(r"\d of 2 configurations measured twice agree within 10%", run)  # CPU noise: not judged here


@pytest.mark.slow
def test_gpu_codecs_script_cut_by_its_deadline_keeps_and_reports_what_it_measured(tmp_path):
    # Margins that hold on a loaded machine: each configuration (the copy bandwidth too) takes >= 2 s of timed
    # calls, 13 per run and 2 runs -> >= 52 s, so the codecs phase (at most TOTAL_S - REPORT_S = 50 s) is always
    # cut; the first run's copy bandwidth and fp16 need about 4 s after the imports, which leaves the imports
    # (and the machine summary's) some 40 s; the report's cap is a cap, not a wait.
    codecs = "fp16 bf16 signsgd topk natural qsgd terngrad randomk ef_signsgd dgc mstopk powersgd"
    p = _gpu_codecs(tmp_path, COMPRESSORS=codecs, MIN_TIME_S="2", BUDGET_S="2", MIN_REPS="1", TOTAL_S="140",
                    REPORT_S="90")
    assert p.returncode == 0, p.stderr
    run = (tmp_path / "RUN.txt").read_text()
    assert "== codecs: rc=124" in run and "deadline" in run and "== report: rc=0" in run
    bench_recs = [r for r in load_records(tmp_path / "codecs.jsonl") if r["kind"] == "bench"]
    assert 1 <= len(bench_recs) < 2 * len(codecs.split()) and all(r["status"] == "ok" for r in bench_recs)
    assert "| fp16 |" in (tmp_path / "codecs.md").read_text()  # the first codec measured is in the report


def test_a_run_cut_midway_keeps_every_codec_it_timed(tmp_path, monkeypatch):
    """Records stream as each codec is timed: a deadline (here an interrupt in the third codec) loses
    only the codec in flight."""
    from studykit.measure import timing
    from studykit.measure.records import RecordWriter

    made = []

    class Cut(FakeClock):
        def repeat(self, fn, n, setup=None):
            if len(made) == 4:  # copy bandwidth, fp16, bf16, then the deadline
                raise KeyboardInterrupt
            return super().repeat(fn, n, setup)

    monkeypatch.setattr(timing, "_Clock", lambda device, flush_bytes=0: made.append(1) or Cut(device, flush_bytes))
    specs = [bench.CompressorSpec(n, ()) for n in ("fp16", "bf16", "signsgd", "topk")]
    with pytest.raises(KeyboardInterrupt):
        bench.run_codecs(specs, RecordWriter(tmp_path / "c.jsonl"), device="cpu", model="mlp_small",
                         policy=bench.RepPolicy(min_reps=3, min_time_s=0.0, n_warmup=1), copy_bytes=2**20,
                         phases=("encdec",), verbose=False)
    recs = load_records(tmp_path / "c.jsonl")
    assert [r.get("compressor") for r in recs] == [None, "fp16", "bf16"]  # copy_bw first


def test_deferred_kernel_counts_run_after_every_pass(tmp_path, monkeypatch):
    """Two timing passes (codec_repeat's runs 1 and 2) share one ``deferred`` list: the profiler, which
    slows every later launch, runs after both, and each count names the timing it belongs to."""
    out = tmp_path / "c.jsonl"
    seen = []  # bench records already written when each count was taken
    monkeypatch.setattr(bench.codecs, "_kernels", lambda fn, device: seen.append(
        len(load_records(out, kind="bench", quiet=True))) or 5)
    deferred: list = []
    kw = dict(device="cpu", model="mlp_small", policy=bench.RepPolicy(min_reps=2, min_time_s=0.0, n_warmup=1),
              copy_bytes=2**20, phases=("encdec",), kernels=True, extras=False, deferred=deferred, verbose=False)
    for run in (1, 2):
        bench.run_codecs([bench.CompressorSpec("fp16", ()), bench.CompressorSpec("signsgd", ())],
                         RecordWriter(out), repeat=run, **kw)
    assert seen == [] and len(deferred) == 4  # nothing profiled during the passes
    assert bench.count_kernels(deferred, RecordWriter(out)) == 4
    assert seen == [4, 4, 4, 4]  # every count after all four timings
    recs = bench.attach_kernels(load_records(out))
    timed = [r for r in recs if r["kind"] == "bench"]
    assert len(timed) == 4 and all(r["kernels"] == 5 for r in timed)
    assert {r["of_config"] for r in recs if r["kind"] == "kernels"} == {r["config_id"] for r in timed}


def test_host_ahead_policy_is_another_timer_and_refused_on_cpu(tmp_path, capsys):
    ahead = bench.RepPolicy(host_ahead=True)
    assert ahead.timing_kw("cpu")["host_ahead"] is True and bench.RepPolicy().timing_kw("cpu")["host_ahead"] is False
    assert ahead.fields("cuda:0")["timer"] == "cuda_events_host_ahead"
    assert bench.RepPolicy().fields("cuda:0")["timer"] == "cuda_events" and ahead.fields("cpu")["timer"] == "perf_counter"
    with pytest.raises(ValueError, match="host-ahead timing needs a CUDA device"):
        bench.run_codecs([bench.CompressorSpec("fp16", ())], RecordWriter(tmp_path / "c.jsonl"), device="cpu",
                         model="mlp_small", policy=ahead, verbose=False)
    assert not (tmp_path / "c.jsonl").exists()  # refused before anything was written
    with pytest.raises(SystemExit):
        bench.main(["bench", "--model", "mlp_small", "--compressors", "fp16", "--out-dir", str(tmp_path / "b"),
                    "--host-ahead", "--device", "cpu", "--quiet"])
    assert "--host-ahead needs a CUDA device, got cpu" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _codec_repeat().main(["--device", "cpu", "--model", "mlp_small", "--compressors", "fp16", "--host-ahead",
                              "--out", str(tmp_path / "r.jsonl")])
    assert "--host-ahead needs a CUDA device, got cpu" in capsys.readouterr().err


def test_kernel_counts_written_after_the_timings_are_attached_to_them():
    timed = {"kind": "bench", "status": "ok", "config_id": "a", "kernels": None, "ms_median": 1.0}
    old = {"kind": "bench", "status": "ok", "config_id": "b", "kernels": 7}
    counts = {"kind": "kernels", "status": "ok", "config_id": "k", "of_config": "a", "kernels": 12}
    out = bench.attach_kernels([timed, old, counts])
    assert [r.get("kernels") for r in out] == [12, 7, 12] and timed["kernels"] is None  # the input is not changed


@pytest.mark.data
@pytest.mark.parametrize("run,device", [("archive/measurements/codec_repeat_cpu", "cpu"),
                                        ("archive/measurements/codec_repeat_h200", "cuda:0"),
                                        ("measurements/codec_repeat_h200b", "cuda:0"),
                                        ("archive/measurements/codec_repeat_h200b/events", "cuda:0")])
def test_the_committed_rerun_tables_are_generated_from_their_records(tmp_path, run, device):
    """data/<run>/codecs.md is what --report-only makes of codecs.jsonl (no hand edits)."""
    import shutil

    folder = os.path.join(ROOT, "data", run)
    shutil.copy(os.path.join(folder, "codecs.jsonl"), tmp_path / "codecs.jsonl")
    _codec_repeat().report(tmp_path / "codecs.jsonl", verbose=False)
    with open(os.path.join(folder, "codecs.md"), encoding="utf-8") as f:
        assert (tmp_path / "codecs.md").read_text(encoding="utf-8") == f.read()
    recs = load_records(os.path.join(folder, "codecs.jsonl"))
    assert {r["device"] for r in recs} == {device} and {r["repeat"] for r in recs} == {1, 2}


@pytest.mark.data
@pytest.mark.parametrize("run", ["archive/measurements/codec_repeat_h200", "measurements/codec_repeat_h200b"])
def test_the_h200_rerun_readme_summary_is_generated_from_its_records(tmp_path, run):
    """The summary block of data/<run>/README.md is what --report-only writes there
    (the closing lines of codecs.md's tables, verbatim, and the settings behind them), not a hand edit."""
    import shutil

    folder = os.path.join(ROOT, "data", run)
    for name in ("codecs.jsonl", "README.md"):
        shutil.copy(os.path.join(folder, name), tmp_path / name)
    cr = _codec_repeat()
    cr.report(tmp_path / "codecs.jsonl", verbose=False)
    with open(os.path.join(folder, "README.md"), encoding="utf-8") as f:
        committed = f.read()
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == committed
    block = committed[committed.index(cr.README_MARKERS[0]):committed.index(cr.README_MARKERS[1])]
    md = (tmp_path / "codecs.md").read_text(encoding="utf-8").splitlines()
    summary = [line[2:] for line in block.splitlines() if line.startswith("- ")]
    assert len(summary) == 2 and all(line in md for line in summary)  # copied verbatim from codecs.md


def test_the_profiler_aftereffect_table_is_generated_from_its_records(tmp_path):
    """data/measurements/codec_repeat_h200b/profiler_aftereffect/*.md is what --report-only makes of its records."""
    import importlib.util
    import shutil

    folder = os.path.join(ROOT, "data", "measurements", "codec_repeat_h200b", "profiler_aftereffect")
    shutil.copy(os.path.join(folder, "profiler_aftereffect.jsonl"), tmp_path / "profiler_aftereffect.jsonl")
    spec = importlib.util.spec_from_file_location("profiler_aftereffect",
                                                  os.path.join(ROOT, "benchmarks", "profiler_aftereffect.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    md = mod.report(tmp_path / "profiler_aftereffect.jsonl")
    with open(os.path.join(folder, "profiler_aftereffect.md"), encoding="utf-8") as f:
        assert md == f.read()
    assert md.count("| default |") == 2 and md.count("| teardown |") == 2  # both cases, both workloads


def test_codec_repeat_summary_block_names_the_settings_behind_its_lines(tmp_path, fake_clock):
    cr = _codec_repeat()
    out = tmp_path / "r.jsonl"
    (tmp_path / "README.md").write_text(f"intro\n{cr.README_MARKERS[0]}stale\n{cr.README_MARKERS[1]}\nrest\n")
    argv = ["--device", "cpu", "--model", "mlp_small", "--compressors", "fp16", "quantize:bits=4", "quantize:bits=8",
            "--min-reps", "3", "--min-time-s", "0", "--warmup", "1", "--out", str(out), "--quiet"]
    assert cr.main(argv) == 0
    text = (tmp_path / "README.md").read_text()
    assert text.startswith("intro\n") and text.endswith("\nrest\n") and "stale" not in text
    assert "- 3 of 3 configurations measured twice agree within 10%" in text and "Not within 10 %: none." in text
    assert "0 of 0 judged target rows PASS" in text and "PASS: none." in text  # CPU: reported, not judged
    compared = cr.bench.compare_runs(cr.bench.split_repeats(load_records(out)))
    compared.loc[compared["compressor"] == "quantize", "agree"] = False  # as if both quantize runs disagreed
    block = cr.summary_block("a\nA.", "t\nT.", compared, compared.assign(verdict="MISS"))
    assert block == "- A.\n  Not within 10 %: `quantize` (bits=4); `quantize` (bits=8).\n- T.\n  PASS: none.\n"


def test_the_benchmark_readme_states_the_policys_real_defaults():
    with open(os.path.join(ROOT, "data", "benchmarks", "README.md"), encoding="utf-8") as f:
        text = f.read()
    p = bench.RepPolicy()
    phrases = (f"`--min-reps` repetitions (default {p.min_reps})",
               f"`--min-time-s` seconds of timed calls\n  (default {p.min_time_s:g})",
               f"(default {p.budget_s:g};", f"(default {p.n_warmup}, after two settling",
               f"{bench.L2_FLUSH_BYTES // 2**20} MiB buffer", f"up to {bench.RAW_TIMES_MAX:,} repetitions",
               f"within {bench.AGREE_TOL:.0%}".replace("%", " %"))
    for phrase in phrases:
        assert phrase in text, phrase


def test_kernel_counts_follow_the_timings_as_their_own_records(tmp_path, fake_clock, monkeypatch):
    """The profiler pass (on CUDA by default; forced here with a stand-in counter): one kernels record per
    timed configuration, after every timing record, attached back by attach_kernels."""
    from studykit.measure.records import RecordWriter

    monkeypatch.setattr(bench.codecs, "_kernels", lambda fn, device: 7)
    bench.run_codecs([bench.CompressorSpec("fp16", ()), bench.CompressorSpec("topk", ())],
                     RecordWriter(tmp_path / "c.jsonl"), device="cpu", model="mlp_small",
                     policy=bench.RepPolicy(min_reps=3, min_time_s=0.0, n_warmup=1), copy_bytes=2**20,
                     phases=("encdec",), extras=False, kernels=True, repeat=2, verbose=False)
    recs = load_records(tmp_path / "c.jsonl")
    assert [r["kind"] for r in recs] == ["copy_bw", "bench", "bench", "kernels", "kernels"]
    timed = {r["config_id"]: r for r in recs if r["kind"] == "bench"}
    counts = [r for r in recs if r["kind"] == "kernels"]
    assert {r["of_config"] for r in counts} == set(timed) and all(r["repeat"] == 2 for r in counts)
    assert all(r["kernels"] is None for r in timed.values())
    assert [r["kernels"] for r in bench.attach_kernels(recs) if r["kind"] == "bench"] == [7, 7]
    df = bench.summarize(recs)
    assert set(df[df.compressor.isin(["fp16", "topk"])].kernels) == {7}


def test_json_benchmark_output_refuses_committed_data_unless_told(tmp_path, capsys):
    """benchmarks/advise_sweep.py and perfmodel_sweep.py write their JSON through bench.json_output_from_args:
    reports/ by default, the committed data/ only with --overwrite-committed, nothing with --no-write."""
    import argparse

    from studykit import paths

    def parse(*argv):
        ap = argparse.ArgumentParser(prog="x")
        bench.add_json_output_args(ap, "x.json")
        return ap, ap.parse_args(list(argv))

    ap, args = parse()
    assert bench.json_output_from_args(ap, args) == (paths.REPORTS / "benchmarks" / "x.json").resolve()
    ap, args = parse("--out", str(paths.DATA / "benchmarks" / "x.json"))
    with pytest.raises(SystemExit):
        bench.json_output_from_args(ap, args)
    assert "--overwrite-committed" in capsys.readouterr().err
    ap, args = parse("--out", str(paths.DATA / "benchmarks" / "x.json"), "--overwrite-committed")
    assert bench.json_output_from_args(ap, args) == (paths.DATA / "benchmarks" / "x.json").resolve()
    ap, args = parse("--no-write")
    assert bench.json_output_from_args(ap, args) is None
    out = tmp_path / "sub" / "r.json"
    bench.write_json(out, {"a": 1})
    assert json.loads(out.read_text()) == {"a": 1} and "wrote" in capsys.readouterr().out


def test_committed_h200x2b_summary_is_the_one_its_records_give():
    """data/benchmarks/h200x2b/summary.md (bench --ddp --no-codecs) is what summarize() makes of its records."""
    from studykit import paths
    from studykit.measure.records import load_records

    folder = paths.DATA / "benchmarks" / "h200x2b"
    md = bench.summary_markdown(bench.summarize(load_records(folder / "ddp.jsonl", quiet=True)))
    assert (folder / "summary.md").read_text(encoding="utf-8") == md + "\n"


# ------------------------------------------------------------------ benchmarks/codec_kernels.py: each kernel's device time
def _codec_kernels():
    return _benchmark("codec_kernels")


def test_split_calls_drops_the_flush_and_takes_each_kernels_median():
    # three rounds of (flush, a, b), out of order as a profiler may list them
    ev = [(0, 50.0, "flush"), (60, 10.0, "a"), (75, 4.0, "b"),
          (100, 50.0, "flush"), (160, 12.0, "a"), (175, 5.0, "b"),
          (200, 50.0, "flush"), (260, 11.0, "a"), (275, 3.0, "b")]
    out = bench.split_calls(list(reversed(ev)), 3)
    assert out == [{"name": "a", "us_median": 11.0, "us_min": 10.0}, {"name": "b", "us_median": 4.0, "us_min": 3.0}]
    with pytest.raises(ValueError, match="are not 2 equal rounds"):
        bench.split_calls(ev, 2)
    odd = ev[:6] + [(200, 50.0, "flush"), (260, 11.0, "a"), (275, 3.0, "c")]
    with pytest.raises(ValueError, match="call 3 launched other kernels than call 1") as exc:
        bench.split_calls(odd, 3)
    assert "b #1 in call 1" in str(exc.value) and "c #1 in call 3" in str(exc.value)  # which kernels differ


def test_split_calls_takes_a_memset_under_either_of_the_profilers_names():
    """RandomK's replayed call on an H200: one memset was "Memset (Unknown)" in call 1 and "Memset (Device)" in
    call 2; both are the call's memset."""
    ev = [(0, 50.0, "flush"), (60, 1.0, "Memset (Unknown)"), (70, 4.0, "gather"),
          (100, 50.0, "flush"), (160, 3.0, "Memset (Device)"), (170, 6.0, "gather")]
    assert bench.split_calls(ev, 2) == [{"name": "Memset", "us_median": 2.0, "us_min": 1.0},
                                        {"name": "gather", "us_median": 5.0, "us_min": 4.0}]


def test_split_calls_matches_kernels_that_start_in_another_order_by_name_and_occurrence():
    """A CUDA graph's concurrent branches (a fill beside a gather) may start in either order: each kernel is
    matched by its name and the count of same-named ones before it, in call 1's order."""
    ev = [(0, 50.0, "flush"), (60, 10.0, "fill"), (61, 4.0, "gather"), (80, 2.0, "fill"),
          (100, 50.0, "flush"), (160, 6.0, "gather"), (161, 12.0, "fill"), (180, 3.0, "fill"),
          (200, 50.0, "flush"), (260, 11.0, "fill"), (261, 5.0, "gather"), (280, 1.0, "fill")]
    out = bench.split_calls(ev, 3)
    assert out == [{"name": "fill", "us_median": 11.0, "us_min": 10.0}, {"name": "gather", "us_median": 5.0,
                                                                       "us_min": 4.0},
                   {"name": "fill", "us_median": 2.0, "us_min": 1.0}]


def test_kernel_times_refuses_a_cpu_device():
    with pytest.raises(ValueError, match="needs a CUDA device"):
        bench.kernel_times(lambda: None, "cpu")


def test_codec_kernels_report_puts_the_kernels_beside_the_timed_call(tmp_path, capsys):
    ck = _codec_kernels()
    out = tmp_path / "k.jsonl"
    params = {"bits": 8, "protocol": "auto"}
    from studykit.measure.records import make_record

    w = RecordWriter(out)
    w.write(make_record("bench", "t", device="cpu", compressor="quantize", params=params, mode="flat:fast",
                        phase="encdec", ms_median=0.12, floor_ms=0.05, min_reps=100, min_time_s=1.0, budget_s=30,
                        n_iter=100, timer="cuda_events_host_ahead"))
    w.write(make_record("codec_kernels", "k", device="cpu", compressor="quantize", params=params, mode="flat:fast",
                        reps=20, n_kernels=2, ms_kernels=0.09,
                        kernels=[{"name": "pack", "us_median": 60.0, "us_min": 59.0},
                                 {"name": "unpack", "us_median": 30.0, "us_min": 29.0}]))
    md = ck.report(out, verbose=False)
    row = [line for line in md.splitlines() if line.startswith("| quantize")][0]
    assert row == ("| quantize | bits=8,protocol=auto | 0.1200 (2.40) | 2 | 0.0900 (1.80) | 0.0300 | "
                   "pack: 60.0 (67 %); unpack: 30.0 (33 %) |")
    assert (tmp_path / "k.md").read_text() == md


def test_codec_kernels_refuses_a_machine_without_a_gpu_and_bad_arguments(tmp_path, capsys):
    ck = _codec_kernels()
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            ck.main(["--out", str(tmp_path / "k.jsonl")])
        assert "needs a CUDA GPU" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ck.main(["--report-only", "--out", str(tmp_path / "none.jsonl")])
    assert "no records at" in capsys.readouterr().err
    names = [s.name for s in ck.default_specs()]
    assert "atomo" not in names and set(names) == set(C.available()) - {"atomo"}


@pytest.mark.gpu
def test_kernel_times_of_one_elementwise_pass(dev):
    x = _x(1 << 24, dev)
    k = bench.kernel_times(lambda: x * 2, dev, reps=5)
    assert len(k) == 1 and k[0]["us_min"] <= k[0]["us_median"] and k[0]["us_median"] > 0


def test_atomo_table_block_and_reading_hold():
    sub = Path(CODEC_KERNELS) / "atomo"
    assert (sub / "codec_kernels.md").read_text(encoding="utf-8") == _codec_kernels().report(
        sub / "codec_kernels.jsonl.gz", verbose=False, write=False)
    text = (Path(CODEC_KERNELS) / "README.md").read_text(encoding="utf-8")
    a, b = "<!-- atomo:begin -->\n", "<!-- atomo:end -->"
    assert text[text.index(a) + len(a):text.index(b)] == CB.atomo_block(), "regenerate with python -m studykit data " \
        "regen --only measurements/codec_kernels_h200/README.md"
    rows = {svd: (t, k, solver) for svd, t, k, solver in CB.atomo_rows()}
    assert set(rows) == {"exact", "gram"}
    for t, k, solver in rows.values():
        assert solver > 10 * 20 and solver > k["ms_kernels"] / 2  # an order of magnitude above 20 ms, most of it
        assert t["timer"] == "cuda_events" and t["git_commit"][:7] == "ad9a010"
    assert rows["gram"][0]["ms_median"] < rows["exact"][0]["ms_median"]


def test_topk_ddp_readme_block_and_reading_hold():
    text = (Path(TOPK_DDP) / "README.md").read_text(encoding="utf-8")
    a, b = "<!-- topk-ddp:begin -->\n", "<!-- topk-ddp:end -->"
    assert text[text.index(a) + len(a):text.index(b)] == RB.topk_ddp_block(), "regenerate with python -m studykit " \
        "data regen --only measurements/topk_ddp_h200/README.md"
    text = " ".join(text.split())
    commits = {r: {x["git_commit"][:7] for x in load_records(os.path.join(TOPK_DDP, f"{r}.jsonl"), quiet=True)}
               for r in TOPK_DDP_RUNS}
    assert commits == {"old1": {"e019cab"}, "old2": {"e019cab"}, "new1": {"fafdf64"}, "new2": {"fafdf64"}}
    m = RB.topk_ddp_medians()
    r1 = [v["new1"] / v["old1"] for v in m.values()]
    r2 = [v["new2"] / v["old2"] for v in m.values()]
    assert len(m) == 8 and max(r1) < 1 < min(r2)  # the side follows the pair
    assert f"faster on all 8 rows ({min(r1):.3f}-{max(r1):.3f}x" in text and f"slower on all 8 ({min(r2):.3f}-{max(r2):.3f}x)" in text
    drift = [v["old2"] / v["old1"] for v in m.values()]
    assert max(drift) < 1 and f"moved by {100 * (1 - max(drift)):.1f}-{100 * (1 - min(drift)):.1f} %" in text
    assert "every row faster the second time" in text
    ms = [x for v in m.values() for x in v.values()]
    assert f"iterations of {min(ms):.0f}-{max(ms):.0f} ms" in text
    sub = os.path.join(CODEC_KERNELS, "topk_sampled", "codec_kernels.jsonl")
    t = {r["mode"]: r["ms_median"] for r in load_records(sub, quiet=True)
         if r["kind"] == "bench" and r["compressor"] == "topk" and r["params"]["ratio"] == 0.01}
    assert f"about {t['flat:reference'] - t['flat:fast']:.1f} ms" in text  # what the codec saved, ResNet-50's gradient
    log = (Path(TOPK_DDP) / "run.log").read_text(encoding="utf-8").split()
    assert log[1] == "07:57:40" and log[-1] == "08:00:56" and "within four minutes" in text


@pytest.mark.parametrize("sub", ["", "abs_max_trial", "thc_fused", "thc_diag", "thc_tf32x3", "topk_sampled"])
def test_committed_codec_kernels_tables_are_the_generated_ones(sub):
    out = Path(CODEC_KERNELS) / sub / "codec_kernels.jsonl"
    assert out.with_suffix(".md").read_text(encoding="utf-8") == _codec_kernels().report(out, verbose=False, write=False)


def test_codec_kernels_readme_reading_of_the_fused_diagonal_holds():
    """data/measurements/codec_kernels_h200/README.md on thc_diag/ and thc_signed/: the fused diagonal is no
    faster anywhere, pick kept the separate pass, THC's timed call and kernel count did not move, and the fast
    path's lead over the reference."""
    text = " ".join((Path(CODEC_KERNELS) / "README.md").read_text(encoding="utf-8").split())
    recs = load_records(os.path.join(CODEC_KERNELS, "thc_signed", "thc_signed.jsonl"), quiet=True)
    ms = {(r["params"]["rotation"], r["phase"], r["params"]["path"]): r["ms_median"] for r in recs}
    ratio = {k[:2]: ms[k] / ms[(*k[:2], "apart")] for k in ms if k[2] == "fused"}
    assert abs(ratio[("full", "thc_rotate_signed")] - 1) < 0.01 and "within 1 %" in text
    assert ratio[("partial", "thc_rotate_signed")] > 1 and ratio[("full", "thc_unrotate_signed")] > 1
    log = (Path(CODEC_KERNELS) / "thc_signed" / "run.log").read_text(encoding="utf-8")
    assert log.count("pick took: apart") == len(ratio) and "pick took: fused" not in log
    kern = {}
    for sub in ("thc_fused", "thc_diag"):
        for r in load_records(os.path.join(CODEC_KERNELS, sub, "codec_kernels.jsonl"), quiet=True):
            if r["kind"] in ("bench", "codec_kernels") and r["compressor"] == "thc":
                kern[(sub, r["kind"], r["params"]["rotation"], r["mode"])] = r
    for rot in ("full", "partial"):
        a, b = (kern[(s, "codec_kernels", rot, "flat:fast")]["n_kernels"] for s in ("thc_fused", "thc_diag"))
        assert a == b
        ta, tb = (kern[(s, "bench", rot, "flat:fast")]["ms_median"] for s in ("thc_fused", "thc_diag"))
        assert abs(tb / ta - 1) < 0.01
    lead = {rot: kern[("thc_diag", "bench", rot, "flat:reference")]["ms_median"]
            / kern[("thc_diag", "bench", rot, "flat:fast")]["ms_median"] for rot in ("full", "partial")}
    assert f"by {lead['full']:.1f}x (full rotation) and {lead['partial']:.1f}x (partial)" in text


def test_codec_kernels_readme_reading_of_tf32x3_holds():
    """data/measurements/codec_kernels_h200/README.md on thc_tf32x3/: tf32x3 is slower in every direction than the
    same pass at "ieee" and than the separate pass, pick took the separate pass everywhere, THC's timed call kept
    its kernels and its time (as shown), the rotation's kernels stay above 4x the floor, and the GPU failures are
    the 10 of the unpack-sum-decode test."""
    text = " ".join((Path(CODEC_KERNELS) / "README.md").read_text(encoding="utf-8").split())
    sub = Path(CODEC_KERNELS) / "thc_tf32x3"
    recs = load_records(os.path.join(sub, "thc_signed.jsonl"), quiet=True)
    smi = (sub / "nvidia-smi.csv").read_text(encoding="utf-8").splitlines()[1:]
    assert len(smi) == 2 and all(", NVIDIA H200, 580.159.04," in line for line in smi)
    assert "It ran on a lent 2 x H200 machine" in text and "kit commit `e019cab`, 2026-11-27" in text
    for file in ("thc_signed.jsonl", "codec_kernels.jsonl"):
        for r in load_records(os.path.join(sub, file), quiet=True):
            assert r["git_commit"].startswith("e019cab") and r["timestamp"].startswith("2026-11-27")
    ms = {(r["params"]["rotation"], r["phase"], r["params"]["path"]): r["ms_median"] for r in recs}
    rows = {k[:2] for k in ms}
    assert len(rows) == 3 and "tf32x3 is slower in every direction." in text
    assert ('In all three rows it takes longer than the same pass at "ieee", and longer than the separate pass '
            "(`fused-tf32x3 / apart` above 1)") in text
    for row in rows:
        assert ms[(*row, "fused-tf32x3")] > ms[(*row, "fused")] and ms[(*row, "fused-tf32x3")] > ms[(*row, "apart")]
    log = (sub / "thc_signed.log").read_text(encoding="utf-8")
    assert log.count("pick took: apart") == len(rows) and "pick took: fused" not in log
    assert ("took the separate diagonal pass in all three cases, never a fused pass "
            "(`thc_tf32x3/thc_signed.log`)") in text
    kern = {}
    for s in ("thc_diag", "thc_tf32x3"):
        for r in load_records(os.path.join(CODEC_KERNELS, s, "codec_kernels.jsonl"), quiet=True):
            if r["kind"] in ("bench", "codec_kernels") and r["compressor"] == "thc" and r["mode"] == "flat:fast":
                kern[(s, r["kind"], r["params"]["rotation"])] = r
    n = {rot: kern[("thc_tf32x3", "codec_kernels", rot)]["n_kernels"] for rot in ("full", "partial")}
    assert n == {rot: kern[("thc_diag", "codec_kernels", rot)]["n_kernels"] for rot in n}
    assert f"kept its kernels ({n['full']} with full rotation, {n['partial']} with partial)" in text
    t = {rot: kern[("thc_tf32x3", "bench", rot)] for rot in ("full", "partial")}
    for rot in t:
        assert abs(t[rot]["ms_median"] / kern[("thc_diag", "bench", rot)]["ms_median"] - 1) < 0.03
    assert (f"within 3 % of `thc_diag/`: {t['full']['ms_median']:.4f} ms (full) and "
            f"{t['partial']['ms_median']:.4f} ms (partial)") in text
    floor = t["full"]["floor_ms"]
    assert t["partial"]["floor_ms"] == floor
    rot_ms = {r: sum(x["us_median"] for x in kern[("thc_tf32x3", "codec_kernels", r)]["kernels"]
                     if "gemm" in x["name"] or "hadamard" in x["name"]) / 1e3 for r in t}
    assert min(rot_ms.values()) > 4 * floor
    assert (f"4x the floor is {4 * floor:.4f} ms, and the rotation's kernels alone take {rot_ms['full']:.4f} ms "
            f"(full, {rot_ms['full'] / floor:.1f}x the floor) and {rot_ms['partial']:.4f} ms "
            f"(partial, {rot_ms['partial'] / floor:.1f}x)") in text
    pytest_out = (sub / "gpu_pytest.txt").read_text(encoding="utf-8")
    failed = [line for line in pytest_out.splitlines() if line.startswith("FAILED ")]
    assert len(failed) == 10 and all("test_thc_unpack_sum_decode_is_the_references_bit_for_bit[" in f for f in failed)
    assert pytest_out.rstrip().splitlines()[-1].startswith("10 failed, 95 passed")
    assert "The 10 GPU failures in `thc_tf32x3/gpu_pytest.txt` are all" in text and "# 95 passed, 10 failed" in text


def test_codec_kernels_readme_block_is_the_generated_one():
    text = (Path(CODEC_KERNELS) / "README.md").read_text(encoding="utf-8")
    for marker, want in CB.codec_kernels_blocks().items():
        a, b = f"<!-- {marker}:begin -->\n", f"<!-- {marker}:end -->"
        assert text[text.index(a) + len(a):text.index(b)] == want, "regenerate with python -m studykit data regen " \
            "--only measurements/codec_kernels_h200/README.md"


def test_codec_kernels_measure_times_then_profiles_each_codec_and_resumes(tmp_path, fake_clock, monkeypatch):
    """The script's two passes on a CPU, the profiler replaced (its device times need CUDA)."""
    ck = _codec_kernels()
    calls = []

    def fake_kernel_times(fn, device, *, reps, flush_bytes):
        fn()
        calls.append(reps)
        return [{"name": "k", "us_median": 5.0, "us_min": 4.0}]

    monkeypatch.setattr(bench, "kernel_times", fake_kernel_times)
    out = tmp_path / "k.jsonl"
    policy = bench.RepPolicy(min_reps=3, min_time_s=0, n_warmup=1)
    from studykit.measure.runtime import CompressorSpec

    specs = [CompressorSpec("fp16", ()), CompressorSpec("powersgd", ())]
    ck.measure(specs, out, torch.device("cpu"), "mlp_small", policy, 2, False)
    recs = load_records(out)
    kern = [r for r in recs if r["kind"] == "codec_kernels"]
    assert [(r["compressor"], r["mode"], r["n_kernels"], r["ms_kernels"]) for r in kern] == [
        ("fp16", "flat:fast", 1, 0.005), ("powersgd", "per_tensor:fast", 1, 0.005)]
    assert calls == [2, 2] and all(r["git_commit"] for r in kern)
    ck.measure(specs, out, torch.device("cpu"), "mlp_small", policy, 2, False)  # resumed: nothing again
    assert calls == [2, 2] and len(load_records(out)) == len(recs)
    md = ck.report(out, verbose=False, write=False)
    assert "| fp16 |  |" in md and "| 1 | 0.0050 (" in md


def test_codec_kernels_reference_profiles_under_its_own_switch_whatever_the_environment(tmp_path, fake_clock,
                                                                                        monkeypatch):
    """With ``--reference`` each codec is profiled twice, the fast paths on then off, each labelled by what ran;
    a ``STUDYKIT_FAST=0`` in the environment changes neither (it once left the profile on the reference path
    while the timed rows and every label said fast)."""
    ck = _codec_kernels()
    seen = []

    def fake_kernel_times(fn, device, *, reps, flush_bytes):
        seen.append(os.environ.get("STUDYKIT_FAST"))
        return [{"name": "k", "us_median": 5.0, "us_min": 4.0}]

    monkeypatch.setattr(bench, "kernel_times", fake_kernel_times)
    monkeypatch.setenv("STUDYKIT_FAST", "0")
    out = tmp_path / "k.jsonl"
    policy = bench.RepPolicy(min_reps=3, min_time_s=0, n_warmup=1)
    from studykit.measure.runtime import CompressorSpec

    ck.measure([CompressorSpec("fp16", ())], out, torch.device("cpu"), "mlp_small", policy, 2, False, reference=True)
    recs = load_records(out)
    assert seen == ["1", "0"] and os.environ["STUDYKIT_FAST"] == "0"
    assert [r["mode"] for r in recs if r["kind"] == "codec_kernels"] == ["flat:fast", "flat:reference"]
    assert sorted(r["mode"] for r in recs if r["kind"] == "bench") == ["flat:fast", "flat:reference"]
    md = ck.report(out, verbose=False, write=False)
    assert "| fp16 |  |" in md and "| fp16 (reference) |  |" in md
    seen.clear()
    ck.measure([CompressorSpec("fp16", ())], out, torch.device("cpu"), "mlp_small", policy, 2, False)
    assert seen == []  # the fast profile is resumed, not repeated


def test_benchmarks_readme_block_is_the_generated_one():
    from studykit import paths

    text = (paths.DATA / "benchmarks" / "README.md").read_text(encoding="utf-8")
    for marker, want in RB.benchmark_hook_targets_block().items():
        a, b = f"<!-- {marker}:begin -->\n", f"<!-- {marker}:end -->"
        assert text[text.index(a) + len(a):text.index(b)] == want, "regenerate with python -m studykit data regen " \
            "--only benchmarks/README.md"


def test_codec_kernels_readme_reading_of_the_sampled_topk_holds():
    """data/measurements/codec_kernels_h200/README.md on topk_sampled/: every number and direction of its
    reading, from the records."""
    text = " ".join((Path(CODEC_KERNELS) / "README.md").read_text(encoding="utf-8").split())
    text = text[text.index("## `topk_sampled/`"):]
    sub = Path(CODEC_KERNELS) / "topk_sampled"
    recs = load_records(str(sub / "topk_select.jsonl.gz"), quiet=True)
    assert {r["git_commit"][:7] for r in recs} == {"4afea17"} and "`4afea17`" in text
    assert _fast._SAMPLES == 65536 and "65,536" in text and 16 * _fast._SAMPLES == 2**20 and "2^20" in text
    sel = {(r["model"], r["params"]["ratio"], r["params"]["path"]): r for r in recs if r["phase"] == "topk_select"}
    ratio = {k[:2]: sel[k]["ms_median"] / sel[(*k[:2], "torch")]["ms_median"] for k in sel if k[2] == "sampled"}
    assert all(v < 1 for v in ratio.values())
    rest = sorted(v for k, v in ratio.items() if k != ("resnet50", 0.01))
    assert len(rest) == 3 and f"{rest[0]:.2f}-{rest[-1]:.2f}x" in text
    r1 = sel[("resnet50", 0.01, "sampled")]
    assert f"{ratio[('resnet50', 0.01)]:.3f}x on ResNet-50 at 1 %" in text
    assert f"({r1['ms_q25']:.2f}-{r1['ms_q75']:.2f} ms)" in text
    radix = [sel[(*k, "radix")]["ms_median"] / sel[(*k, "torch")]["ms_median"] for k in ratio]
    assert all(2.9 < v < 3.3 for v in radix) and "about 3x" in text
    comp = [r for r in recs if r["phase"] == "compact_ge"]
    xs = [r["ms_median"] / r["floor_ms"] for r in comp]
    assert f"{min(xs):.1f}-{max(xs):.1f}x the floor" in text
    best = {}
    for r in comp:
        k = (r["model"], r["params"]["ratio"])
        if k not in best or r["ms_median"] < best[k]["ms_median"]:
            best[k] = r
    assert len(best) == 4 and {(b["params"]["block"], b["params"]["rows"]) for b in best.values()} == {(1024, 32)}
    assert "Blocks of 1024 with prefix sums in rows of 32 are the fastest shape on all four rows" in text
    best_x = min(b["ms_median"] / b["floor_ms"] for b in best.values() if b["model"] == "resnet50")
    codec = load_records(str(sub / "codec_kernels.jsonl"), quiet=True)
    key = lambda r: (r["compressor"], r["params"].get("ratio"), r["mode"].split(":")[-1])  # noqa: E731
    timed = {key(r): r for r in codec if r["kind"] == "bench"}
    kern = {key(r): r for r in codec if r["kind"] == "codec_kernels"}
    x = lambda k: timed[k]["ms_median"] / timed[k]["floor_ms"]  # noqa: E731
    xk = lambda k: kern[k]["ms_kernels"] / timed[k]["floor_ms"]  # noqa: E731
    for k in (("topk", 0.01, "fast"), ("topk", 0.001, "fast"), ("dgc", 0.01, "fast")):
        names = [n["name"] for n in sorted(kern[k]["kernels"], key=lambda n: -n["us_median"])]
        assert names[0] == "_compact_ge_kernel" and names.index("_count_ge_kernel") > 0
    t1, r1c = ("topk", 0.01, "fast"), ("topk", 0.01, "reference")
    assert f"11.2x the floor against {x(r1c):.1f}x" in text and f"{x(t1):.1f}x" == "11.2x"
    assert f"{xk(t1):.1f}x against {xk(r1c):.1f}x for its kernels alone" in text
    assert f"launches {kern[t1]['n_kernels']} kernels against {kern[r1c]['n_kernels']}" in text
    assert timed[t1]["timer"] == "cuda_events_host_sync" and timed[r1c]["timer"] == "cuda_events_host_ahead"
    assert f"At 0.1 %: {x(('topk', 0.001, 'fast')):.1f}x, with kernels alone at {xk(('topk', 0.001, 'fast')):.1f}x" in text
    d, dr = ("dgc", 0.01, "fast"), ("dgc", 0.01, "reference")
    assert f"**DGC**: {x(d):.1f}x against {x(dr):.1f}x" in text
    m = ("mstopk", 0.01, "fast")
    old = [r for r in load_records(os.path.join(CODEC_KERNELS, "codec_kernels.jsonl"), quiet=True)
           if r["kind"] == "bench" and r["compressor"] == "mstopk"]
    assert abs(x(m) / (old[0]["ms_median"] / old[0]["floor_ms"]) - 1) < 0.02 and f"unchanged at {x(m):.1f}x" in text
    top3 = sorted(kern[m]["kernels"], key=lambda n: -n["us_median"])[:3]
    assert {n["name"] for n in top3} == {"_mstopk_hist_kernel"}
    assert all(round(100 * n["us_median"] / 1e3 / kern[m]["ms_kernels"]) == 21 for n in top3) and "21 %" in text
    assert max(x(t1), x(d)) > 5 and f"{xk(t1):.1f}x (topk at 1 %) and {xk(d):.1f}x (dgc)" in text
    assert f"{best_x:.1f}x at their best shape" in text
    assert "40 passed" in (sub / "gpu_pytest.txt").read_text() and "35 passed" in (sub / "gpu_pytest2.txt").read_text()
    assert "# 40 passed" in text and "# 35 passed" in text


@pytest.mark.parametrize("script", ["topk_select", "thc_signed", "mstopk_bits"])
@pytest.mark.parametrize("argv,message", [
    (["--out", "data/measurements/x.jsonl"], "is inside the repository's committed data/"),
    (["--host-ahead"], "timed with plain CUDA events"),
    (["--budget-s", "0"], "--budget-s"),
])
def test_candidate_scripts_refuse_before_timing(script, argv, message, capsys):
    """benchmarks/topk_select.py, thc_signed.py and mstopk_bits.py (bench.start_candidates): a committed --out,
    --host-ahead and a bad policy are refused with a message naming them, before any GPU is needed and before any
    file is made."""
    with pytest.raises(SystemExit) as exc:
        _benchmark(script).main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err
    assert not (Path(ROOT) / "data" / "measurements" / "x.jsonl").exists()


def test_topk_select_refuses_a_ratio_outside_0_1(capsys):
    with pytest.raises(SystemExit):
        _benchmark("topk_select").main(["--ratios", "0"])
    assert "--ratios" in capsys.readouterr().err


@pytest.mark.parametrize("argv,flag", [(["--bits", "11"], "--bits"), (["--bits", "0"], "--bits"),
                                       (["--samplings", "0"], "--samplings"), (["--keep-from", "-1"], "--keep-from"),
                                       (["--keep-from", "all"], "--keep-from")])
def test_mstopk_bits_refuses_bits_the_search_cannot_take(argv, flag, capsys):
    with pytest.raises(SystemExit) as exc:
        _benchmark("mstopk_bits").main(argv)
    assert exc.value.code == 2 and flag in capsys.readouterr().err


def test_readme_states_the_candidate_scripts_former_defaults():
    """codec_kernels_h200/README.md: the committed thc_signed and topk_select runs were timed with the scripts'
    former defaults (3 warm-up calls, 256 MiB flushed), which the README tells how to repeat."""
    text = " ".join((Path(CODEC_KERNELS) / "README.md").read_text(encoding="utf-8").split())
    for sub, name in (("thc_signed", "thc_signed"), ("thc_tf32x3", "thc_signed"), ("topk_sampled", "topk_select")):
        base = os.path.join(CODEC_KERNELS, sub, f"{name}.jsonl")  # a large file is committed gzipped
        recs = load_records(base if os.path.exists(base) else base + ".gz", quiet=True)
        assert {(r["n_warmup"], r["flush_bytes"]) for r in recs} == {(3, 256 << 20)}, sub
    assert "3 warm-up calls, 256 MiB flushed" in text and text.count("--min-time-s 0.5 --budget-s 10 --warmup 3") == 2


def test_picks_since_names_the_choices_made_since(monkeypatch):
    """A codec's record names the fast path's choices its call made (the device left out), none when it made none."""
    fresh = {("topk", torch.device("cpu"), 10, 2): 1}
    monkeypatch.setattr(_fast, "_PICKED", fresh)
    before = set(fresh)
    fresh[("row_topk", torch.device("cpu"), 100, 4096, 41)] = 3
    assert _fast.picks_since(before) == {"row_topk/100/4096/41": 3}
    assert _fast.picks_since(set(fresh)) is None
    assert _fast.picks_since(set()) == {"topk/10/2": 1, "row_topk/100/4096/41": 3}


def test_codec_kernels_readme_reading_of_the_device_decided_topk_holds():
    """data/measurements/codec_kernels_h200/README.md on topk_nosync/: every number of its reading, from the
    records (per-kernel times and picks from the logs, which print them)."""
    text = " ".join((Path(CODEC_KERNELS) / "README.md").read_text(encoding="utf-8").split())
    text = text[text.index("## `topk_nosync/`"):]
    before, after = (CB.topk_nosync_records(c) for c in CB.TOPK_NOSYNC_RUNS)
    assert CB.TOPK_NOSYNC_RUNS == ("9f804a5", "e4a8ed4") and all(f"`{c}`" in text for c in CB.TOPK_NOSYNC_RUNS)

    def ms(sel, model, path, replayed=False, digits=2):
        return f"{sel[(model, path, replayed)]['ms_median']:.{digits}f}"

    nosync_r = after[("resnet50", "sampled_nosync", True)]
    assert nosync_r["ms_median"] < after[("resnet50", "torch", True)]["ms_median"]
    assert (f"takes {ms(after, 'resnet50', 'sampled_nosync', True)} ms on ResNet-50's gradient at 1 %, against "
            f"{ms(after, 'resnet50', 'torch', True)} ms for `torch.topk` "
            f"({nosync_r['ms_median'] / nosync_r['floor_ms']:.1f}x the floor)") in text
    assert (f"and {ms(after, 'bert_base', 'sampled_nosync', True)} against {ms(after, 'bert_base', 'torch', True)} "
            "ms on BERT-base's") in text
    eager = (after[("resnet50", p, False)]["ms_median"] for p in ("sampled_nosync", "sampled"))
    assert next(eager) > next(eager)
    assert (f"({ms(after, 'resnet50', 'sampled_nosync')} against {ms(after, 'resnet50', 'sampled')} ms on "
            "ResNet-50)") in text
    log = (Path(CODEC_KERNELS) / "topk_nosync" / "topk_select_e4a8ed4.log").read_text(encoding="utf-8")
    picks = re.findall(r"topk_abs picked: .*'topk_graph/\d+/\d+': (\d)", log)
    assert picks == ["0", "0"]  # both models: the device-decided sampled method, first of the no-sync candidates
    # radix select: 11-bit passes before, from the per-kernel lines printed after ResNet-50's radix replay
    old = (Path(CODEC_KERNELS) / "topk_nosync" / "topk_select_9f804a5.log").read_text(encoding="utf-8")
    part = old[old.index("resnet50   ratio=0.01   radix graph"):]
    part = part[:part.index("\ntopk ")]
    hist = [float(m) for m in re.findall(r"([\d.]+) us\s+_hist_kernel", part)][::2]  # each pass: bulk, then its tail
    assert len(hist) == 3 and f"the 11-bit passes took {hist[0] / 1e3:.2f} ms each" in text
    assert f"{hist[1] / 1e3:.2f}" == f"{hist[0] / 1e3:.2f}" and f"the 9-bit pass {hist[2] / 1e3:.2f} ms" in text
    assert (f"radix select took {ms(after, 'resnet50', 'radix')} ms in all, against {ms(before, 'resnet50', 'radix')} "
            f"ms, and {ms(after, 'bert_base', 'radix')} against {ms(before, 'bert_base', 'radix')} ms") in text
    assert after[("bert_base", "radix", False)]["ms_median"] < after[("bert_base", "torch", False)]["ms_median"]
    # the codec runs
    runs = load_records(str(Path(CODEC_KERNELS).parent / "codec_repeat_h200_nosync" / "codecs.jsonl"), quiet=True)
    prev = load_records(str(Path(CODEC_KERNELS).parent / "codec_repeat_h200_rows" / "codecs.jsonl"), quiet=True)
    runs, prev = ([r for r in rs if r["kind"] == "bench"] for rs in (runs, prev))  # not the kernel counts
    topk = [r for r in runs if r["compressor"] == "topk" and r["params"].get("scope") == "global"]
    dgc = sorted(r["ms_median"] for r in runs if r["compressor"] == "dgc")
    dgc_prev = sorted(r["ms_median"] for r in prev if r["compressor"] == "dgc")
    assert len(topk) == 2 and len(dgc) == 2 and len(dgc_prev) == 2
    t1 = next(r for r in topk if r.get("picked"))
    assert f"take {t1['ms_median']:.3f} ms replayed ({max(r['ms_median'] for r in topk) / t1['floor_ms']:.1f}x" in text
    d1 = next(r for r in runs if r["compressor"] == "dgc" and r.get("picked"))
    assert d1["picked"]["topk_graph/511142/255571"] == 1 == d1["picked"]["topk_no_sync/511142/255571"]  # radix
    assert not _fast._sampled_ok(511_142, 255_571) and "511,142 candidates" in text
    assert (f"DGC took {dgc[0]:.3f} and {dgc[1]:.3f} ms in its two runs ({dgc[1] / d1['floor_ms']:.1f}x" in text
            and f"measured {dgc_prev[0]:.3f} and {dgc_prev[1]:.3f} ms" in text)


def test_codec_kernels_readme_reading_of_the_bitmask_selection_holds():
    """data/measurements/codec_kernels_h200/README.md on topk_bitmask/ and replayed_bitmask/ (and the codec runs
    of codec_repeat_h200_bitmask/): every number, from the records; the compacting shapes kept are the winners."""
    text = " ".join((Path(CODEC_KERNELS) / "README.md").read_text(encoding="utf-8").split())
    text = text[text.index("## `topk_bitmask/`"):]
    sel, comp = CB.topk_bitmask_records()
    prev = CB.topk_nosync_records("e4a8ed4")
    assert {r["git_commit"][:7] for r in sel.values()} == {"f908c72"}

    def ms(recs, model, path, replayed=True):
        return f"{recs[(model, path, replayed)]['ms_median']:.3f}"

    r = sel[("resnet50", "sampled_nosync", True)]
    assert (f"now takes {ms(sel, 'resnet50', 'sampled_nosync')} ms on ResNet-50's gradient at 1 % "
            f"({r['ms_median'] / r['floor_ms']:.1f}x the floor; {ms(prev, 'resnet50', 'sampled_nosync')} ms at "
            f"`e4a8ed4`) and {ms(sel, 'bert_base', 'sampled_nosync')} ms on BERT-base's "
            f"({ms(prev, 'bert_base', 'sampled_nosync')} ms before), against {ms(sel, 'resnet50', 'torch')} and "
            f"{ms(sel, 'bert_base', 'torch')} ms for `torch.topk`") in text
    # every bitmask shape beats every prefix-sum shape, eager and replayed, per model; those kept are the bitmask's
    kept = {(r["params"]["block"], r["params"]["span"]) for r in comp if "span" in r["params"]}
    assert kept == set(_fast.COMPACT_SHAPES)
    spans = {}
    for model in ("resnet50", "bert_base"):
        for g in (False, True):
            got = [r for r in comp if r["model"] == model and bool(r["params"].get("graph")) == g]
            bits = [r["ms_median"] for r in got if "span" in r["params"]]
            scan = [r["ms_median"] for r in got if "rows" in r["params"]]
            assert len(bits) == 5 and len(scan) == 5 and max(bits) < min(scan)
            spans[(model, g)] = (min(bits), max(bits), min(scan))
    for model, label in (("resnet50", "on ResNet-50 against"), ("bert_base", "against")):
        lo, hi, best = spans[(model, True)]
        assert f"{lo:.3f} to {hi:.3f} ms {label} {best:.3f} ms" in text
    eager = sel[("resnet50", "sampled", False)]
    assert (f"host-decided sampled method took {eager['ms_median']:.3f} ms on ResNet-50" in text
            and f"range {eager['ms_q25']:.3f} to {eager['ms_q75']:.3f} ms" in text)
    log = (Path(CODEC_KERNELS) / "topk_bitmask" / "topk_select.log").read_text(encoding="utf-8")
    assert f"sampled  {eager['ms_median']:.4f} ms" in log
    # replayed_bitmask/
    recs = load_records(str(Path(CODEC_KERNELS) / "replayed_bitmask" / "codec_kernels.jsonl"), quiet=True)
    timed = {r["compressor"]: r for r in recs if r["kind"] == "bench"}
    kern = {r["compressor"]: r for r in recs if r["kind"] == "codec_kernels"}
    assert {r["git_commit"][:7] for r in recs if r.get("git_commit")} == {"251cc87"} and "kit `251cc87`" in text
    assert all(k["profiled"] == "replay" for k in kern.values())
    assert all(timed[c]["picked"][f"compact_ge/25557032/{cap}"] >= 5 for c, cap in (("topk", 458752), ("dgc", 511142)))

    def big(name, kernel):  # a Triton kernel's bulk launch (its masked tail launch is the smaller one)
        return max(x["us_median"] for x in kern[name]["kernels"] if x["name"] == kernel)

    t, k = timed["topk"], kern["topk"]
    old = load_records(str(Path(CODEC_KERNELS) / "replayed_nosync" / "codec_kernels.jsonl"), quiet=True)
    old_t = next(r for r in old if r["kind"] == "bench" and r["compressor"] == "topk")
    fill = max(x["us_median"] for x in k["kernels"] if "FillFunctor<float>" in x["name"])
    assert (f"took {t['ms_median']:.3f} ms ({t['ms_median'] / t['floor_ms']:.1f}x the floor; "
            f"{old_t['ms_median']:.3f} ms in `replayed_nosync/`), its {k['n_kernels']} kernels "
            f"{k['ms_kernels']:.3f} ms alone") in text
    assert (f"the gradient), the decode's zero fill ({fill:.0f} us) and the compacting pass "
            f"({big('topk', '_mask_compact_kernel'):.0f} us, was ") in text
    assert f"the bitmask ({big('topk', '_mask_ge_kernel'):.0f} us" in text
    d, old_d = timed["dgc"], next(r for r in old if r["kind"] == "bench" and r["compressor"] == "dgc")
    tk = [x for x in kern["dgc"]["kernels"] if x["name"].startswith("Memset") or "mbtopk" in x["name"]
          or "scan_by_key" in x["name"]]  # torch.topk's kernels
    assert (f"DGC's replayed call took {d['ms_median']:.3f} ms ({d['ms_median'] / d['floor_ms']:.1f}x; "
            f"{old_d['ms_median']:.3f} ms before)") in text
    assert (f"1 % sample, {sum(x['us_median'] for x in tk):.0f} us in {len(tk)} kernels), the counting pass "
            f"({big('dgc', '_mask_ge_kernel'):.0f} us) and the compacting pass "
            f"({big('dgc', '_mask_compact_kernel'):.0f} us)") in text
    assert 511142 % _fast._ROOM_ALIGN != 0  # DGC's room: not whole programs of radix select
    # codec_repeat_h200_bitmask/: both runs and the verdicts
    runs = [r for r in load_records(str(Path(CODEC_KERNELS).parent / "codec_repeat_h200_bitmask" / "codecs.jsonl"),
                                    quiet=True) if r["kind"] == "bench"]
    verdicts = bench.speed_targets(bench.compare_runs(bench.split_repeats(runs)))
    for name, label, verdict in (("topk", "TopK", "PASS"), ("dgc", "DGC", "MISS")):
        two = [r for r in runs if r["compressor"] == name]
        assert len(two) == 2
        worst = max(r["ms_median"] for r in two) / two[0]["floor_ms"]
        assert f"{label} {two[0]['ms_median']:.4f} and {two[1]['ms_median']:.4f} ms" in text
        row = verdicts[(verdicts["compressor"] == name) & (verdicts["verdict"].isin(["PASS", "MISS"]))]
        assert list(row["verdict"]) == [verdict] and f"{float(row['value'].iloc[0]):.1f}" == f"{worst:.1f}"
        assert f"{worst:.1f}x" in text and f"({verdict})" in text


def test_codec_kernels_readme_reading_of_dgc_fused_holds():
    """data/measurements/codec_kernels_h200/README.md on dgc_fused/ (and its block-4096 run in the archive, and the
    codec runs of codec_repeat_h200_dgc/): every number, from the records."""
    text = " ".join((Path(CODEC_KERNELS) / "README.md").read_text(encoding="utf-8").split())
    text = text[text.index("## `dgc_fused/`"):]

    def profile(path):
        recs = load_records(str(path / "codec_kernels.jsonl"), quiet=True)
        return ({r["compressor"]: r for r in recs if r["kind"] == "bench"},
                {r["compressor"]: r for r in recs if r["kind"] == "codec_kernels"}, recs)

    def us(kern, name):
        return next(x["us_median"] for x in kern["kernels"] if x["name"] == name)

    timed, kern, recs = profile(Path(CODEC_KERNELS) / "dgc_fused")
    old_t, old_k, _ = profile(Path(CODEC_KERNELS) / "replayed_bitmask")
    wide_t, wide_k, wide = profile(Path(CODEC_KERNELS).parent.parent / "archive" / "measurements" / "codec_kernels_h200"
                                   / "dgc_fused_block4096")
    assert {r["git_commit"][:7] for r in recs if r.get("git_commit")} == {"7731d69"} and "kit `7731d69`" in text
    assert {r["git_commit"][:7] for r in wide if r.get("git_commit")} == {"74943c4"} and "kit `74943c4`" in text
    d, k, od, ok = timed["dgc"], kern["dgc"], old_t["dgc"], old_k["dgc"]
    assert k["profiled"] == "replay"
    assert (f"took {d['ms_median']:.3f} ms ({d['ms_median'] / d['floor_ms']:.1f}x the floor; {od['ms_median']:.3f} ms "
            f"in `replayed_bitmask/`), its {k['n_kernels']} kernels {k['ms_kernels']:.3f} ms alone "
            f"({ok['n_kernels']} kernels, {ok['ms_kernels']:.3f} ms, before)") in text
    names = [x["name"] for x in k["kernels"]]
    before = k["kernels"][:names.index("_mask_ge_kernel")]  # the sample and its threshold
    old_before = ok["kernels"][:[x["name"] for x in ok["kernels"]].index("_mask_ge_kernel")]
    assert names[0] == "_sample_bits_kernel" and old_before[0]["name"] == "_positions_kernel"
    assert f"one kernel ({us(k, '_sample_bits_kernel'):.0f} us;" in text
    assert f"took {old_before[0]['us_median'] + old_before[1]['us_median']:.0f} us together" in text
    assert (f"{sum(x['us_median'] for x in before):.0f} us from the start of the call to the threshold, against "
            f"{sum(x['us_median'] for x in old_before):.0f} us when `torch.topk` found it") in text
    assert any("mbtopk" in x["name"] for x in old_before) and not any("mbtopk" in x for x in names)
    assert d["picked"]["kth_graph/262144/3834"] == 0  # radix select, as graph replays
    room = _fast.aligned(511_142)
    assert room == 524_288 and f"({room:,} slots for at most 511,142 candidates)" in text
    assert f"compact_ge/25557032/511142/{room}" in d["picked"]
    assert f"taken in one kernel ({us(k, '_take_kernel'):.0f} us)" in text
    assert (f"the fused sample took {us(wide_k['dgc'], '_sample_bits_kernel'):.0f} us, the take "
            f"{us(wide_k['dgc'], '_take_kernel'):.0f} us, the call {wide_t['dgc']['ms_median']:.3f} ms") in text
    k_1pc = math.ceil(0.01 * d["numel"])  # the payload's k: the take's elements
    assert _fast._GATHER_BLOCK == 512 and f"only {math.ceil(k_1pc / 4096)} programs covered" in text
    assert kern["randomk"]["status"] == "error" and "split_calls" in kern["randomk"]["reason"]
    r = timed["randomk"]
    assert f"its timed call took {r['ms_median']:.3f} ms ({r['ms_median'] / r['floor_ms']:.1f}x)" in text
    # codec_repeat_h200_dgc/: both runs and the verdicts
    runs = [r for r in load_records(str(Path(CODEC_KERNELS).parent / "codec_repeat_h200_dgc" / "codecs.jsonl"),
                                    quiet=True) if r["kind"] == "bench"]
    verdicts = bench.speed_targets(bench.compare_runs(bench.split_repeats(runs)))
    for name, label in (("topk", "TopK"), ("dgc", "DGC"), ("randomk", "RandomK")):
        two = [r for r in runs if r["compressor"] == name]
        assert len(two) == 2
        worst = max(r["ms_median"] for r in two) / two[0]["floor_ms"]
        row = verdicts[(verdicts["compressor"] == name) & (verdicts["verdict"].isin(["PASS", "MISS"]))]
        assert list(row["verdict"]) == ["PASS"] and f"{float(row['value'].iloc[0]):.1f}" == f"{worst:.1f}"
        assert f"{label} {two[0]['ms_median']:.4f} and {two[1]['ms_median']:.4f} ms ({worst:.1f}x, PASS)" in text


def test_codec_kernels_readme_reading_of_mstopk_shapes_holds():
    """data/measurements/codec_kernels_h200/README.md on mstopk_shapes/ (its leaf-0 trial in the archive, and the
    codec runs of codec_repeat_h200_mstopk_search/): every number, from the records."""
    text = " ".join((Path(CODEC_KERNELS) / "README.md").read_text(encoding="utf-8").split())
    text = text[text.index("## `mstopk_shapes/`"):]
    archive = Path(CODEC_KERNELS).parent.parent / "archive" / "measurements" / "codec_kernels_h200"

    def profile(path):
        recs = load_records(str(path / "codec_kernels.jsonl"), quiet=True)
        return (next(r for r in recs if r["kind"] == "bench" and r["compressor"] == "mstopk"),
                next(r for r in recs if r["kind"] == "codec_kernels" and r["compressor"] == "mstopk"))

    def after_search(kern, count):  # the first ``count`` kernels after the last walk of the search
        names = [x["name"] for x in kern["kernels"]]
        last = max(i for i, n in enumerate(names) if n == "_mstopk_walk_kernel")
        return kern["kernels"][last + 1:last + 1 + count]

    t, k = profile(Path(CODEC_KERNELS) / "mstopk_shapes")
    old_t, old_k = profile(Path(CODEC_KERNELS) / "replayed_bands")
    leaf_t, leaf_k = profile(archive / "mstopk_leaf0")
    assert t["git_commit"][:7] == "a7f08c3" and leaf_t["git_commit"][:7] == "7209170"
    assert (f"took {t['ms_median']:.3f} ms ({t['ms_median'] / t['floor_ms']:.1f}x the floor; {old_t['ms_median']:.3f} "
            f"ms in `replayed_bands/`)") in text
    new_above = after_search(k, 7)
    assert [x["name"] for x in new_above][0] == "_mask_ge_kernel" and new_above[-1]["name"] == "_mask_compact_kernel"
    old_above = after_search(old_k, 4)  # the comparison, then torch.nonzero's three kernels
    assert "flag_kernel" in old_above[-1]["name"] and "calc_block_sums" in old_above[1]["name"]
    assert (f"(the bitmask pass and its walk: {sum(x['us_median'] for x in new_above):.0f} us), instead of a "
            f"comparison and `torch.nonzero` ({sum(x['us_median'] for x in old_above):.0f} us)") in text

    def hists(kern):  # (bulk, masked rest) of each search pass
        h = [x["us_median"] for x in kern["kernels"] if x["name"] == "_mstopk_hist_kernel"]
        return h[0::2], h[1::2]

    bulk, rest = hists(k)
    old_bulk, old_rest = hists(old_k)
    assert len(bulk) == 5 and f"{max(rest):.0f} us a pass, against {min(old_rest):.0f} us as one program" in text
    assert f"{min(old_rest):.0f}" == f"{max(old_rest):.0f}" and f"{min(rest):.0f}" == f"{max(rest):.0f}"
    assert {f"{b:.0f}" for b in bulk} == {"56"} and "five search passes remain its largest cost, 56 us each" in text
    assert f"{statistics.median(hists(leaf_k)[0]):.0f}" == "85" and "made a pass 85 us, slower" in text
    shapes = load_records(str(Path(CODEC_KERNELS) / "mstopk_shapes" / "mstopk_shapes.jsonl"), quiet=True)
    by = {m: {tuple(r["params"][p] for p in ("block", "iters", "warps")): r for r in shapes
              if r["model"] == m and "block" in r["params"]} for m in ("resnet50", "bert_base")}
    assert len(by["bert_base"]) == len(by["resnet50"]) == 6
    bert = {s: r["ms_median"] for s, r in by["bert_base"].items()}
    best = min(bert, key=bert.get)
    others = sorted(v for s, v in bert.items() if s != best)
    assert best == (1024, 8, 4) and f"{bert[best]:.3f} ms for the search, the others {others[0]:.3f} to " \
        f"{others[-1]:.3f} ms" in text
    first = next(r for r in shapes if r["model"] == "resnet50" and "block" not in r["params"])
    picked = next(r for r in by["resnet50"].values() if r["picked"])
    assert f"timed {first['ms_median']:.3f} ms first and {picked['ms_median']:.3f} ms later" in text
    # codec_repeat_h200_mstopk_search/ against codec_repeat_h200_nosync/
    runs = [r for r in load_records(str(Path(CODEC_KERNELS).parent / "codec_repeat_h200_mstopk_search" /
                                        "codecs.jsonl"), quiet=True) if r["kind"] == "bench"]
    before = [r for r in load_records(str(Path(CODEC_KERNELS).parent / "codec_repeat_h200_nosync" / "codecs.jsonl"),
                                      quiet=True) if r["kind"] == "bench" and r["compressor"] == "mstopk"]
    verdicts = bench.speed_targets(bench.compare_runs(bench.split_repeats(runs)))
    assert [r["git_commit"][:7] for r in runs] == ["4b790ba"] * 2
    worst = max(r["ms_median"] for r in runs) / runs[0]["floor_ms"]
    worst_before = max(r["ms_median"] / r["floor_ms"] for r in before)
    row = verdicts[(verdicts["compressor"] == "mstopk") & (verdicts["verdict"].isin(["PASS", "MISS"]))]
    assert list(row["verdict"]) == ["MISS"] and f"{float(row['value'].iloc[0]):.1f}" == f"{worst:.1f}"
    assert (f"{runs[0]['ms_median']:.4f} and {runs[1]['ms_median']:.4f} ms, {worst:.1f}x the floor, against its 10x "
            f"target (MISS; {worst_before:.1f}x in `../codec_repeat_h200_nosync/`)") in text


def test_codec_kernels_readme_reading_of_the_replayed_profiles_holds():
    """data/measurements/codec_kernels_h200/README.md on replayed_nosync/: every number, from the records."""
    text = " ".join((Path(CODEC_KERNELS) / "README.md").read_text(encoding="utf-8").split())
    text = text[text.index("## `replayed_nosync/`"):]
    recs = load_records(str(Path(CODEC_KERNELS) / "replayed_nosync" / "codec_kernels.jsonl"), quiet=True)
    timed = {r["compressor"]: r for r in recs if r["kind"] == "bench"}
    kern = {r["compressor"]: r for r in recs if r["kind"] == "codec_kernels"}
    assert {r["git_commit"][:7] for r in recs if r.get("git_commit")} == {"577f0e9"} and "`577f0e9`" in text
    assert all(k["profiled"] == "replay" for k in kern.values())

    def us(name, *parts):  # the kernels whose names hold any of parts, summed
        return sum(x["us_median"] for x in kern[name]["kernels"] if any(p in x["name"] for p in parts))

    for name, label in (("topk", "TopK's"), ("dgc", "DGC's")):
        t, k = timed[name], kern[name]
        assert f"{t['ms_median']:.3f} ms ({t['ms_median'] / t['floor_ms']:.1f}x" in text
        assert f"its {k['n_kernels']} kernels {k['ms_kernels']:.3f} ms" in text and label in text
    big = {}  # each Triton kernel's bulk launch (its masked tail launch is the smaller one)
    for x in kern["topk"]["kernels"]:
        big[x["name"]] = max(big.get(x["name"], 0.0), x["us_median"])
    assert f"compacting pass ({big['_compact_ge_kernel']:.0f} us)" in text
    assert f"counting pass ({big['_count_ge_kernel']:.0f} us)" in text
    fill = max(x["us_median"] for x in kern["topk"]["kernels"] if "FillFunctor<float>" in x["name"])
    assert f"zero fill ({fill:.0f} us)" in text
    assert f"take {us('topk', 'mbtopk', 'scan_by_key'):.0f} us together" in text
    gated = [x for x in kern["topk"]["kernels"] if x["name"].startswith(("_hist_kernel", "_select_bin", "_rank_"))]
    assert f"select's {len(gated)} gated kernels, idle because the sample held, take " \
           f"{sum(x['us_median'] for x in gated):.0f} us" in text
    assert f"`torch.topk`'s kernels take {us('dgc', 'mbtopk', 'scan_by_key'):.0f} us" in text
    dgc_compact = max(x["us_median"] for x in kern["dgc"]["kernels"] if x["name"] == "_compact_ge_kernel")
    assert f"its compacting pass {dgc_compact:.0f} us" in text


def test_the_archived_mstopk_kept_trials_readings_hold():
    """The READMEs of archive/measurements/codec_kernels_h200/mstopk_atomic_keep/ and mstopk_kept_walk/: every
    number, from their records."""
    archive = Path(CODEC_KERNELS).parent.parent / "archive" / "measurements" / "codec_kernels_h200"

    def read(name):
        text = " ".join((archive / name / "README.md").read_text(encoding="utf-8").split())
        recs = load_records(str(archive / name / "codec_kernels.jsonl"), quiet=True)
        timed = next(r for r in recs if r["kind"] == "bench" and r["compressor"] == "mstopk")
        kern = next(r for r in recs if r["kind"] == "codec_kernels" and r["compressor"] == "mstopk")
        return text, timed, kern["kernels"]

    def us(kernels, name):  # the medians of the kernels so named, in launch order
        return [k["us_median"] for k in kernels if k["name"] == name]

    text, timed, kernels = read("mstopk_atomic_keep")
    assert timed["git_commit"][:7] == "dd1b084" and "`dd1b084`" in text
    hist, kept = us(kernels, "_mstopk_hist_kernel"), us(kernels, "_mstopk_kept_hist_kernel")
    assert len(hist) == 4 and len(kept) == 3  # two passes over |g| (each with its masked rest), three over the kept
    assert f"{min(kept):.0f}" == "3" and f"{max(kept):.0f}" == "5" and "took 3-5 us each" in text
    assert f"took {hist[2]:.0f} us replayed, against {hist[0]:.0f} us for the first pass" in text
    assert f"took {timed['ms_median']:.4f} ms, {timed['ms_median'] / timed['floor_ms']:.1f}x the floor" in text
    bits = {(r["model"], r["params"]["keep_from"]): r["ms_median"]
            for r in load_records(str(archive / "mstopk_atomic_keep" / "mstopk_bits.jsonl"), quiet=True)}
    spread = [(r["ms_q75"] - r["ms_q25"]) / r["ms_q25"]
              for r in load_records(str(archive / "mstopk_atomic_keep" / "mstopk_bits.jsonl"), quiet=True)
              if r["model"] == "resnet50"]
    assert f"quartiles lie {100 * min(spread):.0f}-{100 * max(spread):.0f} % apart" in text
    none = bits[("bert_base", None)]
    assert (f"took {bits[('bert_base', 1)] / none:.2f}x the time of reading every pass in full "
            f"({bits[('bert_base', 1)]:.4f} against {none:.4f} ms)") in text
    assert f"from the first pass, whose lower bound is the mean, {bits[('bert_base', 0)] / none:.2f}x" in text
    walk_text, walk_timed, walk = read("mstopk_kept_walk")
    assert walk_timed["git_commit"][:7] == "45c9a4e" and "`45c9a4e`" in walk_text
    assert (f"took {walk_timed['ms_median']:.4f} ms, {walk_timed['ms_median'] / walk_timed['floor_ms']:.1f}x the "
            f"floor") in walk_text
    walk_of_kept = us(walk, "_mask_compact_kernel")[1]  # the search's own compaction first
    before = [us(kernels, "_mask_ge_kernel")[0], us(kernels, "_mask_compact_kernel")[0]]  # over |g| at dd1b084
    assert (f"The marking pass took {us(walk, '_kept_mask_kernel')[0]:.0f} us and the walk {walk_of_kept:.0f} us, "
            f"against {before[0]:.0f} and {before[1]:.0f} us over all of |g|") in walk_text


def test_codec_kernels_readme_reading_of_mstopk_kept_holds():
    """data/measurements/codec_kernels_h200/README.md on mstopk_kept/ (against mstopk_shapes/, and the codec runs
    of codec_repeat_h200_mstopk_kept/): every number, from the records."""
    text = " ".join((Path(CODEC_KERNELS) / "README.md").read_text(encoding="utf-8").split())
    text = text[text.index("## `mstopk_kept/`"):]

    def profile(name):
        recs = load_records(str(Path(CODEC_KERNELS) / name / "codec_kernels.jsonl"), quiet=True)
        return (next(r for r in recs if r["kind"] == "bench" and r["compressor"] == "mstopk"),
                next(r for r in recs if r["kind"] == "codec_kernels" and r["compressor"] == "mstopk")["kernels"])

    def us(kernels, name):
        return [k["us_median"] for k in kernels if k["name"] == name]

    t, k = profile("mstopk_kept")
    old_t, old_k = profile("mstopk_shapes")
    assert t["git_commit"][:7] == "c56d7b8" and "kit `c56d7b8`" in text
    assert (f"took {t['ms_median']:.3f} ms, {t['ms_median'] / t['floor_ms']:.1f}x the floor, with {len(k)} kernels "
            f"({old_t['ms_median']:.3f} ms and {len(old_k)} kernels in `mstopk_shapes/`)") in text
    bulk = us(k, "_mstopk_hist_kernel")[0::2]
    assert len(bulk) == 2 and f"took {bulk[0]:.0f} and {bulk[1]:.0f} us; marking the kept entries costs the second " \
        f"pass {bulk[1] - bulk[0]:.0f} us" in text
    kept = us(k, "_mstopk_kept_hist_kernel")
    assert len(kept) == 3 and f"{min(kept):.0f}-{max(kept):.0f} us each" in text
    assert {f"{b:.0f}" for b in us(old_k, "_mstopk_hist_kernel")[0::2]} == {"56"} and "56 us each over |g|" in text
    fused = us(k, "_abs_mean_max_kernel")
    replaced = sum(x["us_median"] for x in old_k[:5] if not x["name"].startswith("Memset"))  # abs, mean, max
    assert [x["name"] for x in old_k[:5]].count("Memset (Unknown)") == 2
    assert (f"one pass of {fused[0]:.0f} us (and {fused[1]:.0f} us for the masked rest), against {replaced:.0f} us "
            f"for the three passes") in text
    take = us(k, "_kept_count_kernel")[0] + us(k, "_kept_take_kernel")[0]
    assert f"The certain entries took {take:.0f} us (count and take), against 50 us" in text
    assert "(the bitmask pass and its walk: 50 us)" in " ".join(
        (Path(CODEC_KERNELS) / "README.md").read_text(encoding="utf-8").split())  # mstopk_shapes/' own reading
    runs = [r for r in load_records(str(Path(CODEC_KERNELS).parent / "codec_repeat_h200_mstopk_kept" /
                                        "codecs.jsonl"), quiet=True) if r["kind"] == "bench"]
    before = [r for r in load_records(str(Path(CODEC_KERNELS).parent / "codec_repeat_h200_mstopk_search" /
                                          "codecs.jsonl"), quiet=True) if r["kind"] == "bench"]
    verdicts = bench.speed_targets(bench.compare_runs(bench.split_repeats(runs)))
    assert [r["git_commit"][:7] for r in runs] == ["c56d7b8"] * 2
    worst = max(r["ms_median"] / r["floor_ms"] for r in runs)
    row = verdicts[(verdicts["compressor"] == "mstopk") & (verdicts["verdict"].isin(["PASS", "MISS"]))]
    assert list(row["verdict"]) == ["PASS"] and f"{float(row['value'].iloc[0]):.1f}" == f"{worst:.1f}"
    assert (f"{runs[0]['ms_median']:.4f} and {runs[1]['ms_median']:.4f} ms, {worst:.1f}x the floor, within its 10x "
            f"target (PASS; {max(r['ms_median'] / r['floor_ms'] for r in before):.1f}x in "
            f"`../codec_repeat_h200_mstopk_search/`)") in text


def test_findings_reading_of_the_latest_full_codec_run_holds():
    """docs/findings.md on codec_repeat_h200_all/ (every codec at one commit): the PASS count and every range
    it names, from the records (the worse of the two runs, as the speed-target table judges)."""
    text = " ".join((Path(__file__).parent.parent / "docs" / "findings.md").read_text(encoding="utf-8").split())
    text = text[text.index("The two latest runs time every codec at one commit each"):]

    def verdicts(folder, commit):
        runs = [r for r in load_records(str(Path(CODEC_KERNELS).parent / folder / "codecs.jsonl"), quiet=True)
                if r["kind"] == "bench"]
        assert {r["git_commit"][:7] for r in runs} == {commit}
        v = bench.speed_targets(bench.compare_runs(bench.split_repeats(runs)))
        return runs, v[v["verdict"].isin(["PASS", "MISS"])]

    runs, v = verdicts("codec_repeat_h200_all", "3395d8d")
    again = verdicts("codec_repeat_h200_rerun", "4ee8452")[1]
    assert len(v) == 36 and f"{(v['verdict'] == 'PASS').sum()} of {len(v)} target rows PASS in each, the same rows" in text
    key = ["compressor", "params", "verdict"]
    assert sorted(map(tuple, v[key].values)) == sorted(map(tuple, again[key].values))

    def span(rows, fmt="{:.1f}"):
        lo, hi = fmt.format(float(rows["value"].min())), fmt.format(float(rows["value"].max()))
        return lo if lo == hi else f"{lo}-{hi}"

    def rows(target, names=None, verdict=None):
        r = v[v["target"] == target]
        r = r[r["compressor"].isin(names)] if names else r
        return r if verdict is None else r[r["verdict"] == verdict]

    sparse = rows("topk")
    assert set(sparse["verdict"]) == {"PASS"} and f"at {span(sparse)}x the floor against 5x" in text
    assert set(sparse["compressor"]) == {"topk", "topk_chunked", "topk_chunked_allreduce", "dgc", "randomk"}
    ms = rows("mstopk")
    assert list(ms["verdict"]) == ["PASS"] and f"MSTopK at {span(ms)}x against 10x" in text
    psgd = rows("powersgd")
    assert set(psgd["verdict"]) == {"PASS"} and f"({float(psgd['value'].max()):.2f} ms at most against 1.5 ms)" in text
    ok = rows("elementwise", verdict="PASS")
    assert set(ok["compressor"]) == {"fp16", "bf16", "signsgd", "ef_signsgd", "natural", "qsgd"}
    assert f"QSGD ({span(ok)}x against 2x)" in text
    miss = rows("elementwise", verdict="MISS")
    assert set(miss["compressor"]) == {"quantize", "terngrad"}
    assert len(rows("elementwise", ["quantize"], "MISS")) == 15 == len(rows("elementwise", ["quantize"]))
    assert (f"quantize at every b ({span(rows('elementwise', ['quantize']))}x) and TernGrad "
            f"({span(rows('elementwise', ['terngrad']))}x) against 2x the floor") in text
    thc = rows("thc")
    assert list(thc["verdict"]) == ["MISS"] and f"THC ({span(thc)}x against 4x)" in text
    atomo = [r["ms_median"] for r in runs if r["compressor"] == "atomo"]
    assert set(rows("atomo")["verdict"]) == {"MISS"} and len(atomo) == 4
    assert f"ATOMO ({min(atomo):.0f}-{max(atomo):.0f} ms against 20 ms)" in text


def test_findings_reading_of_the_odd_width_unpack_holds():
    """docs/findings.md on pack_fields_odd_h200/ (the unpack kernel's two ways at widths that do not divide 8, the
    pack kernel's in pack_first/, the codec times after in codecs/ and thc_check/): every range, from the records."""
    text = " ".join((Path(__file__).parent.parent / "docs" / "findings.md").read_text(encoding="utf-8").split())
    text = text[text.index("Since then the unpack kernel of quantize and THC"):]
    root = Path(CODEC_KERNELS).parent / "pack_fields_odd_h200"

    def ratios(folder):  # (phase, bits, workers) -> median over the rounds of gather / shifts
        by = {}
        for r in load_records(str(root / folder / "pack_fields_odd.jsonl.gz"), quiet=True):
            p = r["params"]
            assert r["same_results"]
            by.setdefault((r["phase"], p["bits"], p["workers"], p["round"]), {})[p["path"]] = r["ms_median"]
        out = {}
        for (phase, bits, workers, _), v in by.items():
            out.setdefault((phase, bits, workers), []).append(v["gather"] / v["shifts"])
        return {k: statistics.median(v) for k, v in out.items()}

    def span(values, fmt="{:.2f}"):
        return f"{fmt.format(min(values))}-{fmt.format(max(values))}"

    unpack = ratios("")
    assert {w for _, _, w in unpack} == {1, 4} and {b for _, b, _ in unpack} == {3, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15}
    assert all(p == "quantize_unpack" for p, _, _ in unpack)
    below = [v for (_, b, _), v in unpack.items() if b < 8]
    above = [v for (_, b, _), v in unpack.items() if b > 8]
    assert max(below) < 1 and f"`data/measurements/{root.name}/`: {span(below)}x the time of three byte loads" in text
    pack = {b: v for (p, b, _), v in ratios("pack_first").items() if p == "quantize_pack"}
    assert len(pack) == 11
    assert (f"Above 8 bits the gather took {span(above)}x and a gathered pack {span(pack.values())}x (no faster at "
            f"{sum(v > 0.99 for v in pack.values())} of {len(pack)} widths)") in text
    from studykit.compressors._fast import quantize as fq

    assert fq.GATHER_BELOW == 8  # what was kept: the gather below 8 bits only

    def codec(folder):  # (compressor, bits, run) -> (ms, x floor)
        return {(r["compressor"], r["params"].get("bits"), r["repeat"]): (r["ms_median"], r["x_floor"])
                for r in load_records(str(root.parent / folder / "codecs.jsonl"), quiet=True)
                if r.get("kind") == "bench" and r.get("phase") == "encdec"}

    after, before, again = codec(f"{root.name}/codecs"), codec("codec_repeat_h200_rerun"), codec(f"{root.name}/thc_check")
    q = {k: after[k][0] / before[k][0] for k in after if k[0] == "quantize"}
    gathered = [v for (_, b, _), v in q.items() if b in (3, 5, 6, 7)]
    rest = [v for (_, b, _), v in q.items() if b not in (3, 5, 6, 7)]
    assert len(gathered) == 8 and len(rest) == 22 and max(gathered) < min(rest)
    worst = lambda d, b: max(x for (c, bb, _), (_, x) in d.items() if c == "quantize" and bb == b)  # noqa: E731
    assert (f"quantize then took {span(gathered)}x its times in `codec_repeat_h200_rerun`, run by run (b = 3: "
            f"{worst(after, 3):.1f}x the floor, from {worst(before, 3):.1f}x), the other widths {span(rest)}x") in text
    assert min(x for (c, _, _), (_, x) in after.items() if c == "quantize") > 2  # "every width still misses 2x"
    thc = {f"{after[k][0] / before[k][0]:.2f}" for k in after if k[0] == "thc"}
    thc2 = {f"{again[k][0] / before[k][0]:.2f}" for k in again if k[0] == "thc"}
    assert len(thc) == len(thc2) == 1 and f"took {thc.pop()}x in that run and {thc2.pop()}x in a rerun" in text


def test_pack_fields_odd_script_refuses_without_a_gpu_and_rewrites_its_table(tmp_path, capsys):
    import importlib.util
    import shutil

    spec = importlib.util.spec_from_file_location("pack_fields_odd", Path(__file__).parent.parent / "benchmarks"
                                                  / "pack_fields_odd.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(SystemExit) as exc:
        mod.main(["--report-only"])
    assert exc.value.code == 2 and "--report-only needs --out" in capsys.readouterr().err
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            mod.main(["--out", str(tmp_path / "x.jsonl")])
        assert "needs a CUDA GPU and Triton" in capsys.readouterr().err
        assert not (tmp_path / "x.jsonl").exists()
    committed = Path(CODEC_KERNELS).parent / "pack_fields_odd_h200"
    shutil.copy(committed / "pack_fields_odd.jsonl.gz", tmp_path)
    assert mod.main(["--report-only", "--out", str(tmp_path / "pack_fields_odd.jsonl.gz")]) == 0
    assert (tmp_path / "pack_fields_odd.md").read_text() == (committed / "pack_fields_odd.md").read_text()


def _l2_flush_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("l2_flush",
                                                  Path(__file__).parent.parent / "benchmarks" / "l2_flush.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_l2_flush_script_refuses_bad_input_and_rewrites_its_table(tmp_path, capsys):
    import shutil

    mod = _l2_flush_script()
    with pytest.raises(SystemExit) as exc:
        mod.main(["--report-only"])
    assert exc.value.code == 2 and "--report-only needs --out" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        mod.main(["--compressors", "bogus", "--out", str(tmp_path / "x.jsonl")])
    assert exc.value.code == 2 and "unknown compressor 'bogus'; available:" in capsys.readouterr().err
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            mod.main(["--out", str(tmp_path / "x.jsonl")])
        assert "needs a CUDA GPU and Triton" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()
    committed = Path(CODEC_KERNELS) / "l2_flush"
    shutil.copy(committed / "l2_flush.jsonl.gz", tmp_path)
    assert mod.main(["--report-only", "--out", str(tmp_path / "l2_flush.jsonl.gz")]) == 0
    assert (tmp_path / "l2_flush.md").read_text() == (committed / "l2_flush.md").read_text()


def test_l2_flush_table_prices_every_call_against_the_floor_of_its_own_flush_and_round():
    """A hand-made case: the floor copy moves 2 x 8 MiB in 0.1 ms, so the floor of a 1 Mi-element gradient (8 MiB
    read + written) is 0.05 ms; a call of 0.1 ms after the same flush is 2x it."""
    mod = _l2_flush_script()
    numel, copy_bytes = 2**20, 8 * 2**20

    def rec(call, flush, rnd, ms):
        return {"params": {"call": call, "flush": flush, "round": rnd}, "ms_median": ms, "numel": numel,
                "floor_copy_bytes": copy_bytes, "timer": "cuda_events"}

    records = [rec("floor copy", "write", 1, 0.1), rec("floor copy", "read", 1, 0.08), rec("quantize", "write", 1, 0.1),
               rec("quantize", "read", 1, 0.06)]
    floors = mod.floor_ms(records)
    assert floors[("write", 1)] == pytest.approx(0.05) and floors[("read", 1)] == pytest.approx(0.04)
    lines = mod.table(records).splitlines()
    assert lines[2] == "| memory floor | from `floor copy` | 0.0500 (1.00) | 0.0400 (1.00) | — | 0.800 |"
    assert lines[3] == "| quantize | cuda_events | 0.1000 (2.00) | 0.0600 (1.50) | — | 0.600 |"
    assert not any(line.startswith("| floor copy") for line in lines)  # its bandwidth is the floor row


def test_l2_flush_script_times_every_call_after_every_flush():
    """The script's loop on this machine (a tiny gradient, three repetitions): every call after every flush in every
    round, one record each, with the floor copy's size for the table."""
    import types

    from studykit import models as M
    from studykit.measure.runtime import parse_compressor_specs

    mod = _l2_flush_script()
    model = min(M.available(), key=M.numel)
    records = []
    writer = types.SimpleNamespace(write=records.append)
    policy = bench.RepPolicy(min_reps=3, min_time_s=0.0, budget_s=1.0, n_warmup=1, flush_bytes=1 << 20)
    mod.run(types.SimpleNamespace(model=model, rounds=2), parse_compressor_specs(["signsgd"]), policy, writer,
            torch.device("cpu"))
    calls = [*mod.PASSES, "signsgd"]
    assert sorted((r["params"]["call"], r["params"]["flush"], r["params"]["round"]) for r in records) == sorted(
        (c, f, n) for c in calls for f in mod.FLUSHES for n in (1, 2))
    assert all(r["ms_median"] > 0 and r["floor_copy_bytes"] == bench.FLOOR_COPY_BYTES[0] for r in records)
    assert set(mod.floor_ms(records)) == {(f, n) for f in mod.FLUSHES for n in (1, 2)}


def test_codec_kernels_readme_reading_of_the_l2_flush_holds():
    """codec_kernels_h200/README.md, section l2_flush/: every number, from the records."""
    text = " ".join((Path(CODEC_KERNELS) / "README.md").read_text(encoding="utf-8").split())
    text = text[text.index("## `l2_flush/`"):text.index("## `thc_fused/`")]
    mod = _l2_flush_script()
    recs = [r for r in load_records(str(Path(CODEC_KERNELS) / "l2_flush" / "l2_flush.jsonl.gz"), quiet=True)
            if r.get("phase") == "l2_flush"]
    floors = mod.floor_ms(recs)
    ms, x = {}, {}
    for r in recs:
        p = r["params"]
        ms.setdefault((p["call"], p["flush"]), []).append(r["ms_median"])
        x.setdefault((p["call"], p["flush"]), []).append(r["ms_median"] / floors[(p["flush"], p["round"])])
    med = {k: statistics.median(v) for k, v in ms.items()}
    xf = {k: statistics.median(v) for k, v in x.items()}
    rw = {c: med[(c, "read")] / med[(c, "write")] for c, _ in med}
    spread = max(max(v) / min(v) for v in ms.values()) - 1
    assert len(recs) == 126 and f"Every call's three rounds agree within {100 * spread:.1f} %" in text
    m = "max abs(g)"
    assert (f"After a read flush it takes {xf[(m, 'read')]:.2f}x the floor instead of {xf[(m, 'write')]:.2f}x "
            f"({rw[m]:.2f}x its time after `bench`'s write)") in text and 0.75 < rw[m] < 0.85  # "a fifth"
    two_pass = ["quantize:bits=2", "quantize:bits=4", "quantize:bits=8", "terngrad"]
    meet = ["qsgd", "natural", "fp16", "bf16", "signsgd", "ef_signsgd"]
    assert {f"{rw[c]:.2f}" for c in two_pass} == {"0.93"}
    assert f"They take 0.93x their time after a read flush, as the elementwise codecs that meet the target do " \
           f"({min(rw[c] for c in meet):.2f}-{max(rw[c] for c in meet):.2f}x)" in text
    span = lambda f: f"{min(xf[(c, f)] for c in two_pass):.2f}-{max(xf[(c, f)] for c in two_pass):.2f}x"  # noqa: E731
    assert min(xf[(c, "read")] for c in two_pass) > 2 and max(xf[(c, "write")] for c in meet) < 2
    assert (f"still miss it: {span('read')} the floor (quantize at b = 2, 4, 8 and TernGrad), against "
            f"{span('write')}") in text
    assert (f"takes {xf[('copy', 'write')]:.2f}x it after `bench`'s flush and {xf[('copy', 'read')]:.2f}x after a "
            f"read") in text
    b2 = med[("quantize:bits=2", "write")] / med[("copy", "write")]
    assert f"Against that copy quantize at b = 2 takes {b2:.2f}x" in text
    findings = " ".join((Path(__file__).parent.parent / "docs" / "findings.md").read_text(encoding="utf-8").split())
    assert (f"Timed after a flush that leaves no written lines in the L2, quantize at b = 2, 4, 8 and TernGrad still "
            f"take {span('read')} (`data/measurements/codec_kernels_h200/l2_flush/`)") in findings


def test_codec_kernels_readme_reading_of_atomo_eigh_holds():
    """codec_kernels_h200/README.md, section atomo_eigh/, and docs/findings.md's ATOMO line: every number, from the
    records (the candidates' sums, the eigenvalue errors, ATOMO's call before and after)."""
    text = " ".join((Path(CODEC_KERNELS) / "README.md").read_text(encoding="utf-8").split())
    text = text[text.index("## `atomo_eigh/`"):text.index("## `mstopk_bits/`")]
    recs = [r for r in load_records(str(Path(CODEC_KERNELS) / "atomo_eigh" / "atomo_eigh.jsonl"), quiet=True)
            if r.get("phase") == "atomo_eigh"]
    by = {}
    for r in recs:
        p = r["params"]
        by.setdefault((p["batch"], p["n"], p["m"]), {})[p["candidate"]] = r
    assert len(by) == 21 and all(len(v) == 7 for v in by.values())
    tot = {c: sum(v[c]["ms_median"] for v in by.values()) for c in by[next(iter(by))]}
    x = {c: t / tot["eigh"] for c, t in tot.items()}
    err = {c: max(v[c]["eig_rel_err"] for v in by.values()) for c in tot}
    faster = sum(v["eigh fp64"]["ms_median"] < v["eigh"]["ms_median"] for v in by.values())
    assert (f"float64 takes {x['eigh fp64']:.2f}x the time of fp32**, {tot['eigh fp64']:.1f} ms against "
            f"{tot['eigh']:.1f} ms, and is faster on {faster} of the 21 groups") in text
    e = lambda v: f"{v:.1e}".replace("e-0", "e-")  # noqa: E731 - 2.2e-4 as the README writes it
    assert f"(off by {e(err['eigh fp64'])} of the largest); fp32's were off by up to {e(err['eigh'])}" in text
    solvers = ("eigh", "eigh fp64", "eigh magma", "eigh cpu")
    host = [v for v in by.values() if min(solvers, key=lambda c: v[c]["ms_median"]) in ("eigh magma", "eigh cpu")]
    ks = sorted({v["eigh"]["params"]["k"] for v in host})
    best = sum(min(v[c]["ms_median"] for c in solvers) for v in by.values()) / tot["eigh"]
    assert (f"MAGMA ({x['eigh magma']:.2f}x) and the host's 16 cores ({x['eigh cpu']:.2f}x) are the fastest only on "
            f"the {len(host)} groups of k = {' and '.join(map(str, ks))}") in text
    assert f"Picking the fastest solver per group would take {best:.2f}x" in text
    assert f"takes {x['svd']:.2f}x the fp32 eigh, and {x['svd fp64']:.2f}x in float64" in text
    drivers = {}
    for r in load_records(str(Path(CODEC_KERNELS) / "atomo_eigh" / "svd_drivers" / "atomo_eigh.jsonl"), quiet=True):
        drivers[r["params"]["candidate"]] = drivers.get(r["params"]["candidate"], 0.0) + r["ms_median"]
    xd = {c: t / drivers["eigh"] for c, t in drivers.items()}
    assert (f"With cuSOLVER's QR-based driver (`driver=\"gesvd\"`) it took {xd['svd gesvd']:.2f}x in fp32 and "
            f"{xd['svd gesvd fp64']:.2f}x in float64, on a second lease of the same machine kind, where float64's eigh "
            f"again took {xd['eigh fp64']:.2f}x fp32's") in text
    assert min(xd["svd gesvd"], xd["svd gesvd fp64"]) > xd["svd"]  # "keeps ... PyTorch's driver"
    from studykit.nbtools.codec_blocks import atomo_rows

    before = {svd: (t, k) for svd, t, k, _ in atomo_rows()}["gram"]
    after = {r["kind"]: r for r in load_records(str(Path(CODEC_KERNELS) / "atomo_eigh" / "after" /
                                                    "codec_kernels.jsonl.gz"), quiet=True)}
    t0, t1 = before[0]["ms_median"], after["bench"]["ms_median"]
    k0, k1 = before[1], after["codec_kernels"]
    assert (f"It took {t1:.1f} ms, {t1 / t0:.2f}x the {t0:.1f} ms of `atomo/`, with {k1['n_kernels']:,} kernels "
            f"instead of {k0['n_kernels']:,} ({k1['ms_kernels']:.1f} ms alone)") in text
    assert f"the float64 decompositions alone took {tot['eigh fp64']:.1f} ms" in text
    findings = " ".join((Path(__file__).parent.parent / "docs" / "findings.md").read_text(encoding="utf-8").split())
    assert (f"which halved it ({t0:.1f} to {t1:.1f} ms, `data/measurements/codec_kernels_h200/atomo_eigh/`), still "
            f"{t1 / 20:.1f}x the target") in findings and 0.45 < t1 / t0 < 0.55


def test_atomo_eigh_script_refuses_bad_input_and_tabulates_by_hand(tmp_path, capsys):
    """The script's refusals (a candidate it does not know, --report-only without --out), and its table on a
    hand-made case: two groups, the kit's eigh at 10 + 2 ms, float64 at 4 + 3 ms, the host's at 6 + 1 ms."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("atomo_eigh",
                                                  Path(__file__).parent.parent / "benchmarks" / "atomo_eigh.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for argv, needle in ((["--candidates", "qr"], "invalid choice: 'qr'"), (["--report-only"], "needs --out"),
                         (["--report-only", "--out", str(tmp_path / "none.jsonl")], "no records at"),
                         (["--report-only", "--out", str(empty)], "no bench records")):
        with pytest.raises(SystemExit) as exc:
            mod.main(argv)
        assert exc.value.code == 2 and needle in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown candidate 'qr'; valid: eigh"):
        mod.candidate("qr", None, None)

    def rec(group, name, ms):
        return {"params": {"candidate": name, "batch": 1, "n": group, "m": 2 * group, "k": group}, "ms_median": ms,
                "eig_rel_err": 1e-7}
    lines = mod.table([rec(64, "eigh", 10.0), rec(64, "eigh fp64", 4.0), rec(64, "eigh cpu", 6.0),
                       rec(512, "eigh", 2.0), rec(512, "eigh fp64", 3.0), rec(512, "eigh cpu", 1.0)]).splitlines()
    assert lines[2] == "| eigh | 2 | 12.0 | 1.00 | 1.0e-07 |"
    assert lines[3] == "| eigh fp64 | 2 | 7.0 | 0.58 | 1.0e-07 |"
    assert lines[5] == "| fastest Gram eigensolver per group (eigh cpu, eigh fp64) | 2 | 5.0 | 0.42 | — |"
    assert lines[9] == "| 1 x 64 x 128 | 64 | 10.00 | 4.00 | 6.00 |"  # the slowest group first


def test_topk_eager_readme_reads_its_records():
    """codec_kernels_h200/topk_eager/README.md: every number, from its records and topk_bitmask/'s."""
    text = " ".join((Path(CODEC_KERNELS) / "topk_eager" / "README.md").read_text(encoding="utf-8").split())

    def times(name):
        recs = load_records(str(Path(CODEC_KERNELS) / name / "topk_select.jsonl.gz"), quiet=True)
        return {(r["model"], r["params"]["path"], bool(r["params"].get("graph"))): r["ms_median"]
                for r in recs if r.get("phase") == "topk_select"}

    now, before = times("topk_eager"), times("topk_bitmask")
    assert not any(path == "sampled" for _, path, _ in now)  # the host-decided form is gone
    eager = {m: min((t, p) for (mm, p, g), t in now.items() if mm == m and not g) for m in ("resnet50", "bert_base")}
    assert eager["resnet50"][1] == "torch" and eager["bert_base"][1] == "sampled_nosync"
    for m, label in (("resnet50", "`torch.topk`"), ("bert_base", "the device-decided sampled selection")):
        assert (f"the eager pick is now {label}, {eager[m][0]:.3f} ms, where the host-decided form took "
                f"{before[(m, 'sampled', False)]:.3f} ms") in text
    g = [now[(m, "sampled_nosync", True)] for m in ("resnet50", "bert_base")]
    assert f"takes {g[0]:.3f} ms on ResNet-50 and {g[1]:.3f} ms on BERT-base, as before" in text
    assert all(abs(now[(m, "sampled_nosync", True)] / before[(m, "sampled_nosync", True)] - 1) < 0.02
               for m in ("resnet50", "bert_base"))
    worst = max(eager[m][0] - before[(m, "sampled", False)] for m in eager)
    assert f"costs up to {worst:.2f} ms more" in text
