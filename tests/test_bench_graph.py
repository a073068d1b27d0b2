"""``bench --graph``: a codec call timed as replays of its CUDA graph, as the DDP hook's graph runner pays it, and the
one rule (shared with the graph runner) that says when a replay is not the next call."""
import json

import pytest
import torch

from studykit import compressors as C
from studykit.comm import LocalComm
from studykit.ddp.hook import replay_fingerprint
from studykit.measure import bench


def _two_calls(name, **kw):
    comp = C.get(name, allow_nonfinite=True, **kw)
    grads = [torch.randn(64, 32), torch.randn(32)]
    comm = LocalComm()
    comp.reduce(grads, comm, key=0)  # the first call builds the state (warm start, residual)
    before = replay_fingerprint(comp, 0)
    comp.reduce(grads, comm, key=0)
    return before, replay_fingerprint(comp, 0)


@pytest.mark.parametrize("name, kw", [("fp16", {}), ("topk", {"ratio": 0.1}), ("powersgd", {"rank": 2})])
def test_a_call_that_keeps_its_state_and_draws_nothing_on_the_host_keeps_its_fingerprint(name, kw):
    before, after = _two_calls(name, **kw)
    assert before == after


def test_a_call_that_draws_host_seeded_random_numbers_changes_its_fingerprint():
    before, after = _two_calls("randomk", ratio=0.1)  # this dense, a permutation from a generator seeded on the host
    assert after[0] == before[0] + 1 and after[1] == before[1]


def test_graph_policy_is_a_timer_of_its_own_and_excludes_host_ahead():
    p = bench.RepPolicy(graph=True)
    assert p.timer(torch.device("cuda", 0)) == "cuda_graph" and p.timer("cpu") == "perf_counter"
    assert "graph" not in p.timing_kw("cpu")  # replays are timed with plain events
    with pytest.raises(ValueError, match="graph and host_ahead exclude each other"):
        bench.RepPolicy(graph=True, host_ahead=True)


def test_graph_timing_is_refused_without_a_gpu(tmp_path, capsys):
    from studykit.measure.bench.calls import capture_call
    from studykit.measure.records import RecordWriter

    with pytest.raises(ValueError, match="capture_call needs a CUDA device"):
        capture_call(lambda: None, "cpu")
    with pytest.raises(ValueError, match="graph timing needs a CUDA device"):
        bench.run_codecs([bench.CompressorSpec("fp16", ())], RecordWriter(tmp_path / "a.jsonl"), device="cpu",
                         model="mlp_small", policy=bench.RepPolicy(graph=True), extras=False, verbose=False)
    assert not (tmp_path / "a.jsonl").exists() or not (tmp_path / "a.jsonl").read_text().strip()
    with pytest.raises(SystemExit):
        bench.main(["bench", "--graph", "--device", "cpu", "--quiet"])
    assert "--graph needs a CUDA device" in capsys.readouterr().err


def test_a_configuration_timed_eagerly_says_so_in_the_table():
    rec = {"kind": "bench", "status": "ok", "model": "resnet50", "compressor": "quantize", "params": {"bits": 8},
           "phase": "encdec", "layout": "flat", "mode": "flat:fast", "device": "cuda:0", "floor_ms": 0.05,
           "ms_median": 0.2, "n_iter": 100}
    eager = dict(rec, timer="cuda_events_eager")
    graph = dict(rec, compressor="fp16", params={}, timer="cuda_graph")
    md = bench.compare_markdown(bench.compare_runs([[eager, graph], [eager, graph]]))
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ") and "ms" not in line}
    assert "flat:fast (eager: no replayable graph)" in rows["quantize"] and "eager" not in rows["fp16"]


@pytest.mark.gpu
def test_replays_of_a_captured_codec_are_its_calls_and_are_timed_as_cuda_graph():
    """fp16's call captured and replayed gives the same average as an eager call; quantize's replays are its next
    calls (its random numbers are seeded from the step on the device); randomk at a density above 1/16 (a
    permutation from a generator seeded on the host) is not replayable and is timed eagerly; all through the kit's
    one codec timer."""
    from studykit.measure.bench.calls import capture_call, time_call

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    dev = torch.device("cuda", 0)
    grads = [torch.randn(1 << 16, device=dev)]
    comm = LocalComm()
    policy = bench.RepPolicy(graph=True, min_reps=5, min_time_s=0.0, n_warmup=2)
    fp16 = C.get("fp16", allow_nonfinite=True)
    want = fp16.reduce(grads, comm, key=0)[0].clone()
    out = torch.zeros_like(want)
    graph = capture_call(lambda: out.copy_(fp16.reduce(grads, comm, key=0)[0]), dev,
                         lambda: replay_fingerprint(fp16, 0))
    assert graph is not None
    out.zero_()
    graph.replay()
    torch.cuda.synchronize(dev)
    assert torch.allclose(out, want)  # a replay is the call
    ct = time_call(lambda: fp16.reduce(grads, comm, key=0), dev, policy, lambda: replay_fingerprint(fp16, 0))
    assert ct.timer == "cuda_graph" and ct.timing.n_iter >= 5 and ct.timing.ms_median > 0
    twin, quant = (C.get("quantize", bits=8, allow_nonfinite=True) for _ in range(2))
    want = [twin.reduce(grads, comm, key=0)[0].clone() for _ in range(3)]
    assert not torch.equal(want[1], want[2])
    quant.reduce(grads, comm, key=0)  # step 0, eagerly: its step on the device exists before the capture
    graph = capture_call(lambda: out.copy_(quant.reduce(grads, comm, key=0)[0]), dev,
                         lambda: replay_fingerprint(quant, 0))
    assert graph is not None
    for step in (1, 2):
        graph.replay()
        torch.cuda.synchronize(dev)
        assert torch.equal(out, want[step]), f"replay {step} is not step {step}'s call"
    ct = time_call(lambda: quant.reduce(grads, comm, key=0), dev, policy, lambda: replay_fingerprint(quant, 0))
    assert ct.timer == "cuda_graph"
    randomk = C.get("randomk", ratio=0.1, allow_nonfinite=True)
    ct = time_call(lambda: randomk.reduce(grads, comm, key=0), dev, policy, lambda: replay_fingerprint(randomk, 0))
    assert ct.timer == "cuda_events_eager"


def test_the_agreement_table_says_how_many_disagreeing_configurations_were_host_bound():
    """host_ms / ms_median >= 0.8 in some run: host-bound. Here fp16 agrees and is device-bound (0.01 / 0.1), thc
    disagrees and was host-bound in run 2 (0.9 / 1.0), topk disagrees and is device-bound."""
    def rec(name, ms, host):
        return {"kind": "bench", "status": "ok", "model": "resnet50", "compressor": name, "params": {},
                "phase": "encdec", "layout": "flat", "mode": "flat:fast", "device": "cuda:0", "floor_ms": 0.05,
                "ms_median": ms, "n_iter": 100, "host_ms": host}

    a = [rec("fp16", 0.10, 0.01), rec("thc", 1.2, 0.5), rec("topk", 0.5, 0.1)]
    b = [rec("fp16", 0.10, 0.01), rec("thc", 1.0, 0.9), rec("topk", 0.7, 0.1)]
    df = bench.compare_runs([a, b]).set_index("compressor")
    assert list(df["host_bound"]) == [False, True, False]
    md = bench.compare_markdown(bench.compare_runs([a, b]))
    assert "1 of 3 configurations measured twice agree" in md
    assert "1 of the 2 that disagree, 0 of the 1 that agree." in md


def test_the_codec_runs_block_counts_agreement_eager_configurations_and_targets(tmp_path, monkeypatch):
    """One graph run by hand: fp16 replayed, the same median twice (agrees; 1.6x the floor: PASS); quantize timed
    eagerly, 0.2 then 0.3 ms (disagrees; 6x the floor: MISS)."""
    from studykit import paths
    from studykit.measure.records import SCHEMA_VERSION
    from studykit.nbtools.codec_blocks import codec_runs_block

    def rec(name, params, ms, repeat, timer):
        return {"schema": SCHEMA_VERSION, "kind": "bench", "status": "ok", "config_id": f"{name}-{repeat}",
                "model": "resnet50", "compressor": name, "params": params, "phase": "encdec", "layout": "flat",
                "mode": "flat:fast", "device": "cuda:0", "floor_ms": 0.05, "ms_median": ms, "n_iter": 100,
                "repeat": repeat, "timer": timer, "git_commit": "abc1234"}

    folder = tmp_path / "measurements" / "codec_run"
    folder.mkdir(parents=True)
    rows = [rec("fp16", {}, 0.08, r, "cuda_graph") for r in (1, 2)]
    rows += [rec("quantize", {"bits": 8, "protocol": "auto"}, ms, r, "cuda_events_eager")
             for r, ms in ((1, 0.2), (2, 0.3))]
    (folder / "codecs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(paths, "DATA", tmp_path)
    line = codec_runs_block(["measurements/codec_run"]).splitlines()[-1]
    assert line == "| codec_run | abc1234 | CUDA graph replays (bench --graph) | 1 of 2 | 1 | 1 of 2 |"


def test_the_codec_rerun_block_sets_each_run_beside_the_same_run_of_another_campaign(tmp_path, monkeypatch):
    """Two campaigns by hand, two runs each: fp16 at 0.08 ms in all four runs (ratio 1), quantize 0.20/0.21 ms in
    the first campaign and 0.21/0.25 ms in the second (run 1: 1.05, agrees; run 2: 1.19, disagrees)."""
    from studykit import paths
    from studykit.measure.records import SCHEMA_VERSION
    from studykit.nbtools.codec_blocks import codec_rerun_block

    def rec(name, ms, repeat):
        return {"schema": SCHEMA_VERSION, "kind": "bench", "status": "ok", "config_id": f"{name}-{repeat}",
                "model": "resnet50", "compressor": name, "params": {}, "phase": "encdec", "layout": "flat",
                "mode": "flat:fast", "device": "cuda:0", "floor_ms": 0.05, "ms_median": ms, "n_iter": 100,
                "repeat": repeat, "timer": "cuda_graph"}

    for name, quantize in (("old", (0.20, 0.21)), ("new", (0.21, 0.25))):
        folder = tmp_path / "measurements" / name
        folder.mkdir(parents=True)
        rows = [rec("fp16", 0.08, r) for r in (1, 2)] + [rec("quantize", ms, r) for r, ms in zip((1, 2), quantize)]
        (folder / "codecs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.setattr(paths, "DATA", tmp_path)
    lines = codec_rerun_block("measurements/old", "measurements/new").splitlines()
    assert lines[0].endswith("| new / old: median [min-max] |")
    assert lines[2] == "| run 1 of each | 2 | 2 | 1.025 [1.000-1.050] |"
    assert lines[3] == "| run 2 of each | 2 | 1 | 1.095 [1.000-1.190] |"
    (tmp_path / "measurements" / "new" / "codecs.jsonl").write_text(json.dumps(rec("fp16", 0.08, 1)) + "\n")
    with pytest.raises(ValueError, match="must each hold two runs"):
        codec_rerun_block("measurements/old", "measurements/new")
