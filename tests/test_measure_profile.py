"""``profile`` and ``tcomp`` on CPU, model modules, and clear errors for bad arguments."""
import importlib.util

import pytest
import torch

from studykit import compressors as C
from studykit import models as M
from studykit.measure import cli
from studykit.measure.profile import paper_specs, single_round
from studykit.measure.records import load_records
from studykit.nbtools.readme_blocks import HOST_TRAFFIC, bucket_rows, hook_host_blocks, traffic_rows


@pytest.fixture(scope="module")
def profile_records(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile") / "p.jsonl"
    assert cli.main(["profile", "--models", "mlp_small", "--iters", "3", "--warmup", "1", "--copy-bytes", "1M",
                     "--quiet", "--out", str(out)]) == 0
    return load_records(out)


def test_one_reduce_record_per_compressor(profile_records):
    reduce = [r for r in profile_records if r["kind"] == "profile" and r["phase"] == "reduce"]
    assert sorted(r["compressor"] for r in reduce) == C.available()
    for r in reduce:
        assert r["status"] == "ok", r["reason"]
        assert r["n_iter"] == 3 and r["n_warmup"] == 1 and len(r["times_ms"]) == 3
        assert r["ms_min"] <= r["ms_median"] <= r["ms_max"]
        assert r["numel"] == M.numel("mlp_small") and r["floor_bytes"] == 8 * r["numel"]
        assert r["floor_ms"] == pytest.approx(r["floor_bytes"] / (r["copy_GBps"] * 1e9) * 1e3)
        assert r["x_floor"] == pytest.approx(r["ms_mean"] / r["floor_ms"])
        assert r["ratio"] and r["ratio"] > 0 and r["wire_bytes"] > 0
        assert r["device"] == "cpu" and r["backend"] == "none" and r["world_size"] == 1


def test_copy_bandwidth_record_and_split_phases(profile_records):
    (copy,) = [r for r in profile_records if r["kind"] == "copy_bw"]
    assert copy["size_bytes"] == 2**20 and copy["copy_GBps"] > 0
    split = {r["compressor"] for r in profile_records if r["kind"] == "profile" and r["phase"] == "encode"}
    assert split == {n for n in C.available() if single_round(C.get(n))}
    assert {"none", "fp16"} <= split
    assert all(r["copy_GBps"] == copy["copy_GBps"] for r in profile_records if r["kind"] == "profile")


def test_params_are_recorded_in_full(tmp_path):
    out = tmp_path / "p.jsonl"
    assert cli.main(["profile", "--models", "mlp_small", "--compressors", "topk:ratio=0.1", "--iters", "1",
                     "--warmup", "0", "--copy-bytes", "64K", "--quiet", "--out", str(out)]) == 0
    (rec,) = load_records(out, kind="profile")
    assert rec["params"]["ratio"] == 0.1 and set(C.parameters("topk")) <= set(rec["params"])


def test_paper_specs_are_valid():
    specs = paper_specs()
    assert any(s.name == "powersgd" and s.kwargs == {"rank": 16} for s in specs)
    for s in specs:
        C.get(s.name, **s.kwargs)


@pytest.mark.parametrize("argv,needle", [
    (["profile", "--compressors", "nosuch"], "available: "),
    (["profile", "--compressors", "topk:nosuch=1"], "valid: "),
    (["profile", "--compressors", "topk:ratio"], "key=value"),
    (["profile", "--models", "resnet5"], "unknown model 'resnet5'"),
    (["sweep", "--ops", "broadcast"], "invalid choice"),
    (["sweep", "--sizes", "12Q"], "bad size"),
    (["tcomp", "--batch-sizes", "0"], "must be an integer >= 1"),
    (["ddp", "--modes", "nosuch"], "invalid choice"),
    (["profile", "--budget-s", "1", "--warmup", "0"], "--warmup >= 1"),
    (["profile", "--host-ahead", "--device", "cpu"], "--host-ahead needs a CUDA device"),
])
def test_bad_arguments_fail_clearly_and_write_nothing(argv, needle, tmp_path, capsys):
    out = tmp_path / "x.jsonl"
    with pytest.raises(SystemExit) as exc:
        cli.main([*argv, "--out", str(out)])
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()


def test_sweep_refuses_a_single_process(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["sweep", "--sizes", "1K", "--out", str(tmp_path / "s.jsonl")])
    assert "at least 2 processes" in capsys.readouterr().err


def test_tcomp_records_both_phases(tmp_path):
    out = tmp_path / "t.jsonl"
    assert cli.main(["tcomp", "--models", "mlp_small", "cnn_small", "--batch-sizes", "4", "--iters", "3",
                     "--warmup", "1", "--quiet", "--out", str(out)]) == 0
    recs = load_records(out)
    assert {(r["model"], r["phase"]) for r in recs} == {(m, p) for m in ("mlp_small", "cnn_small")
                                                        for p in ("fwd_bwd", "bwd")}
    assert all(r["status"] == "ok" and r["batch_size"] == 4 and r["ms_mean"] > 0 for r in recs)


def test_tcomp_without_the_library_is_a_skip_record(tmp_path):
    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("torchvision is installed here")
    out = tmp_path / "t.jsonl"
    assert cli.main(["tcomp", "--models", "resnet50", "--batch-sizes", "2", "--quiet", "--out", str(out)]) == 0
    recs = load_records(out)
    assert len(recs) == 2 and all(r["status"] == "skipped" and "torchvision" in r["reason"] for r in recs)


@pytest.mark.parametrize("name", ["mlp_small", "cnn_small"])
def test_small_models_build_with_their_shapes(name):
    m = M.build(name)
    assert [tuple(p.shape) for p in m.parameters()] == M.param_shapes(name)
    loss = M.loss(name, m, M.example_batch(name, 3))
    loss.backward()
    assert torch.isfinite(loss)


def test_big_models_build_when_their_libraries_exist():
    for name, lib in [("resnet50", "torchvision"), ("bert_base", "transformers")]:
        try:
            __import__(lib)
        except Exception:  # noqa: BLE001
            with pytest.raises(ModuleNotFoundError, match=lib):
                M.build(name)
            continue
        m = M.build(name)
        assert sum(p.numel() for p in m.parameters()) == M.PARAM_COUNTS[name]


def test_ddp_bucket_grads_follow_ddps_assignment():
    from studykit.measure.profile import ddp_bucket_grads
    from studykit.perfmodel.model import ddp_buckets

    grads = [torch.randn(s) for s in M.param_shapes("mlp_large")]
    buckets = ddp_bucket_grads(grads)
    assert [[tuple(v.shape) for v in views] for _, views in buckets] == ddp_buckets([g.shape for g in grads])
    # the views alias the flat buffer, and hold the gradients (reverse order: the last layer first)
    buf, views = buckets[0]
    assert views[0].data_ptr() == buf.data_ptr() and torch.equal(views[0], grads[-1])
    assert sum(b.numel() for b, _ in buckets) == sum(g.numel() for g in grads)


@pytest.mark.parametrize("spec", ["fp16", "powersgd:rank=2"])
def test_reduce_buckets_phase_is_the_hooks_protocol(spec, tmp_path):
    """One record of phase reduce_buckets per compressor; the timed call runs the protocol once per DDP
    bucket, called as the kit's hook calls it."""
    from studykit.measure.profile import _timed_call

    out = tmp_path / "p.jsonl"
    assert cli.main(["profile", "--models", "mlp_small", "--compressors", spec, "--ddp-buckets", "--no-split",
                     "--iters", "2", "--warmup", "0", "--copy-bytes", "64K", "--quiet", "--out", str(out)]) == 0
    assert [r["phase"] for r in load_records(out, kind="profile")] == ["reduce", "reduce_buckets"]
    from studykit.measure.profile import ddp_bucket_grads

    grads = [torch.randn(s) for s in M.param_shapes("mlp_large")]
    name, _, kv = spec.partition(":")
    comp = C.get(name, **({k: int(v) for k, v in [kv.split("=")]} if kv else {}))
    calls = []
    inner = comp.reduce

    def spy(x, comm, key=None):
        calls.append((key, x.shape if isinstance(x, torch.Tensor) else [t.shape for t in x]))
        return inner(x, comm, key=key)

    comp.reduce = spy
    _timed_call(comp, "reduce_buckets", grads, 1)()
    # one call per DDP bucket, keyed by its index, with what the hook passes: the flat bucket for
    # partition-invariant codecs (fp16), the per-parameter views otherwise (PowerSGD)
    want = [(i, buf.shape if comp.partition_invariant else [v.shape for v in views])
            for i, (buf, views) in enumerate(ddp_bucket_grads(grads))]
    assert calls == want and len(want) > 1


def test_bucket_times_measure_each_buckets_host_time(tmp_path, monkeypatch):
    """``profile --ddp-buckets --bucket-times N``: the reduce_buckets record holds one host time per DDP bucket
    (communication order), each the median of N rounds of that bucket's own call; no device times on CPU;
    the reduce record none. Refused without --ddp-buckets."""
    import time as _time
    from studykit.measure import profile as P

    out = tmp_path / "p.jsonl"
    assert cli.main(["profile", "--models", "mlp_large", "--compressors", "fp16", "--ddp-buckets", "--bucket-times",
                     "3", "--no-split", "--iters", "2", "--warmup", "0", "--copy-bytes", "64K", "--quiet",
                     "--out", str(out)]) == 0
    red, rb = load_records(out, kind="profile")
    n = len(P.ddp_bucket_grads([torch.zeros(s) for s in M.param_shapes("mlp_large")]))
    assert "bucket_host_ms" not in red and n > 1
    assert len(rb["bucket_host_ms"]) == n and all(x > 0 for x in rb["bucket_host_ms"]) and rb["bucket_reps"] == 3
    assert rb["bucket_device_ms"] is None and rb["bucket_device_error"] is None
    # each bucket's time is its own call's: bucket 1 made slow shows in bucket 1 alone
    calls = [lambda: None, lambda: _time.sleep(0.02), lambda: None]
    t = P.bucket_times(calls, "cpu", reps=3)
    assert t["bucket_host_ms"][1] >= 20 and max(t["bucket_host_ms"][0], t["bucket_host_ms"][2]) < 5
    with pytest.raises(ValueError, match="reps must be >= 1"):
        P.bucket_times(calls, "cpu", reps=0)
    with pytest.raises(SystemExit):
        cli.main(["profile", "--models", "mlp_small", "--bucket-times", "3", "--out", str(tmp_path / "q.jsonl")])


def test_encode_decode_input_never_pools_split_phases():
    """RecordInputs.encode_decode reads one phase: the split encode / decode records (single-round codecs)
    are not the protocol's time and must not be pooled with it."""
    import pandas as pd

    from studykit.perfmodel.fit import RecordInputs

    prof = pd.DataFrame([{"kind": "profile", "model": "m", "compressor": "fp16", "params_key": "{}", "phase": ph,
                          "sim_world_size": 1, "ms_median": ms}
                         for ph, ms in (("reduce", 2.5), ("encode", 0.1), ("decode", 0.1), ("reduce_buckets", 1.0))])
    cols = ["kind", "model", "batch_size", "phase", "network", "world_size", "mode", "bucket_mb", "rate_gbps",
            "ms_median"]
    empty = pd.DataFrame(columns=cols)
    inp = RecordInputs(empty, empty, empty, prof, "ms_median")
    assert inp.encode_decode("m", "fp16", "{}", 2)[0] == pytest.approx(2.5e-3)
    assert inp.encode_decode("m", "fp16", "{}", 2, phase="reduce_buckets")[0] == pytest.approx(1.0e-3)
    with pytest.raises(KeyError, match="reduce_buckets"):
        inp.encode_decode("m", "topk", "{}", 2, phase="reduce_buckets")


def test_host_ahead_profiling_needs_cuda_and_writes_nothing(tmp_path):
    from studykit.measure.profile import run_profile
    from studykit.measure.records import RecordWriter
    out = tmp_path / "x.jsonl"
    with pytest.raises(ValueError, match="--host-ahead needs a CUDA device"):
        run_profile(["mlp_small"], [], RecordWriter(out), device=torch.device("cpu"), host_ahead=True)
    assert not out.exists()


# ------------------------------------------------------------------ data/measurements/hook_host_h200*/README.md
def test_hook_host_under_traffic_reading_holds():
    """hook_host_h200c/README.md: the profiles ran while their loops' timed iterations did; rank 32's host time
    beside the 25 Gbit/s loop was no longer than alone before it; alone again it took the factor named."""
    from datetime import datetime, timedelta

    from studykit import paths

    rows = traffic_rows()
    host = {tag: sum(rows[(tag, "powersgd r32")]["bucket_host_ms"]) for tag, _ in HOST_TRAFFIC}
    text = " ".join((paths.MEASUREMENTS / "hook_host_h200c" / "README.md").read_text(encoding="utf-8").split())
    assert host["during25"] <= host["alone"]
    assert f"took {host['alone2'] / host['alone']:.2f}x the host time three minutes later" in text
    assert host["alone2"] / host["alone"] > 1.4 and host["during10"] > 1.4 * host["alone"]
    when = lambda r: datetime.fromisoformat(r["timestamp"])  # noqa: E731
    for tag, rate in HOST_TRAFFIC:
        if rate is None:
            continue
        (t,) = load_records(paths.MEASUREMENTS / "hook_host_h200c" / f"traffic_{int(rate)}.jsonl", quiet=True)
        end = when(t)
        start = end - timedelta(milliseconds=sum(t["times_ms"]))
        assert start <= when(rows[(tag, "powersgd r32")]) <= end, tag


def test_hook_host_readme_blocks_are_the_generated_ones():
    from studykit import paths

    for (folder, marker), want in hook_host_blocks().items():
        text = (paths.MEASUREMENTS / folder / "README.md").read_text(encoding="utf-8")
        a, b = f"<!-- {marker}:begin -->\n", f"<!-- {marker}:end -->"
        assert text[text.index(a) + len(a):text.index(b)] == want, \
            f"regenerate with python -m studykit data regen --only measurements/{folder}/README.md"


def test_hook_host_readme_reading_holds():
    """hook_host_h200/README.md: Gram-Schmidt rank 32 takes more host than device time bucket by bucket on every
    model, CholeskyQR2 rank 32 much less host time; hook_host_h200b/README.md: the same call's host time differs
    between the two machines by the factors it names."""
    from studykit import paths

    a, b = bucket_rows("hook_host_h200"), bucket_rows("hook_host_h200b")
    text = " ".join((paths.MEASUREMENTS / "hook_host_h200" / "README.md").read_text(encoding="utf-8").split())
    for m in ("bert_base", "gpt2_small", "resnet50", "resnet101", "vgg19"):
        gs, ch = a[(m, "powersgd r32 twice")], a[(m, "powersgd r32 cholesky")]
        assert sum(gs["bucket_host_ms"]) > 2 * sum(gs["bucket_device_ms"])
        assert sum(ch["bucket_host_ms"]) < 0.5 * sum(gs["bucket_host_ms"])
    assert "host time is more than twice its device time on every model" in text
    ratios = {k: sum(r["bucket_host_ms"]) / sum(a[k]["bucket_host_ms"]) for k, r in b.items()}
    text_b = " ".join((paths.MEASUREMENTS / "hook_host_h200b" / "README.md").read_text(encoding="utf-8").split())
    r = ratios[("bert_base", "powersgd r32 twice")]
    assert r > 1.4 and f"{r:.2f}x" in text_b
    assert all(0.89 <= v <= 1.11 for k, v in ratios.items() if k != ("bert_base", "powersgd r32 twice"))
    dev = [sum(x["bucket_device_ms"]) / sum(a[k]["bucket_device_ms"]) for k, x in b.items()]
    assert all(abs(d - 1) <= 0.01 for d in dev)
    assert "device times agree between the two machines within 1 %" in text_b and "host times agree within 11 %" in text_b
