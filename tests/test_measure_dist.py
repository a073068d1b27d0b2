"""``sweep`` and ``ddp`` for real under torchrun (2 processes, gloo, CPU): records, bus bandwidth,
compressor hooks and post-backward reducers, and PyTorch's built-in hooks as skip records (no hang)."""
import os
import subprocess
import sys

import pytest

from studykit import paths
from studykit.measure.records import load_records

pytestmark = pytest.mark.slow  # multi-process: the full suite (make test) only

TIMEOUT_S = 120  # a hang fails the test instead of blocking the suite


def torchrun(*args, nproc=2):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(paths.ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           "-m", "studykit", *args, "--quiet"]
    res = subprocess.run(cmd, cwd=paths.ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res


def test_sweep_records_bus_bandwidth(tmp_path):
    out = tmp_path / "s.jsonl"
    torchrun("sweep", "--sizes", "1K", "16K", "--iters", "3", "--warmup", "1", "--out", str(out))
    recs = load_records(out)
    ops = {"all_reduce", "all_gather", "ps_gather", "ps_reduce"}
    assert {(r["op"], r["size_bytes"]) for r in recs} == {(o, s) for o in ops for s in (1024, 16384)}
    for r in recs:
        assert r["status"] == "ok" and r["world_size"] == 2 and r["backend"] == "gloo" and r["n_iter"] == 3
        p, size = r["world_size"], r["size_bytes"]
        moved = size * p if r["op"] == "all_gather" else size
        assert r["nccl_tests_bytes"] == moved
        assert r["algbw_GBps"] == pytest.approx(moved / (r["ms_mean"] * 1e-3) / 1e9)
        factor = {"all_reduce": 2 * (p - 1) / p, "all_gather": (p - 1) / p}.get(r["op"], 1.0)
        assert r["bus_factor"] == pytest.approx(factor)
        assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * factor)
    # resume: a rerun with one more size measures only that size
    torchrun("sweep", "--sizes", "1K", "16K", "64K", "--ops", "all_reduce", "--iters", "2", "--warmup", "1",
             "--out", str(out))
    recs = load_records(out)
    assert len(recs) == 9 and len({r["config_id"] for r in recs}) == 9


def test_ddp_syncsgd_hooks_post_and_builtin_skips(tmp_path):
    out = tmp_path / "d.jsonl"
    torchrun("ddp", "--models", "mlp_small", "--batch-sizes", "8", "--compressors", "fp16", "randomk:ratio=0.25",
             "--bucket-mb", "0.001", "--iters", "3", "--warmup", "1", "--out", str(out))
    recs = load_records(out)
    by = {(r["mode"], r["compressor"], r["bucket_mb"]): r for r in recs}
    assert len(by) == len(recs) == 2 + 3 + 2 * 2
    for key in [("syncsgd", None, None), ("syncsgd", None, 0.001), ("hook", "fp16", None), ("post", "fp16", None),
                ("hook", "randomk", None), ("post", "randomk", None)]:
        r = by[key]
        assert r["status"] == "ok", (key, r["reason"])
        assert r["world_size"] == 2 and r["backend"] == "gloo" and r["batch_size"] == 8 and r["n_iter"] == 3
        assert r["ms_min"] <= r["ms_mean"] <= r["ms_max"]
        if r["mode"] != "syncsgd":
            assert r["wire_bytes_per_iter"] > 0
        assert "picked" in r and r["picked"] is None  # the fast path's choices: none on a CPU (no kernels to pick)
    assert by[("hook", "randomk", None)]["params"]["ratio"] == 0.25
    assert all(r["switch_interval_ms"] == pytest.approx(1e3 * sys.getswitchinterval()) for r in recs)
    # the GIL A/B: the same hook with another switch interval is another configuration, recorded as such
    torchrun("ddp", "--models", "mlp_small", "--batch-sizes", "8", "--compressors", "randomk:ratio=0.25",
             "--modes", "hook", "--switch-interval-ms", "0.5", "--iters", "2", "--warmup", "1", "--out", str(out))
    new = load_records(out)[len(recs):]
    assert len(new) == 1 and new[0]["status"] == "ok" and new[0]["switch_interval_ms"] == pytest.approx(0.5)
    for name in ("torch_fp16", "torch_bf16", "torch_powersgd"):
        r = by[("builtin", name, None)]
        assert r["status"] == "skipped" and "NCCL" in r["reason"] and r["ms_mean"] is None


def test_ddp_bucket_times_records(tmp_path):
    """``ddp --bucket-times``: one ``buckets`` record per syncSGD configuration, ready times that rise
    with the bucket index and end at the last bucket, bytes matching the model's DDP assignment."""
    from studykit.measure.records import FIELDS, KIND_FIELDS
    from studykit.perfmodel.model import Workload

    out = tmp_path / "d.jsonl"
    torchrun("ddp", "--models", "mlp_small", "--batch-sizes", "8", "--modes", "syncsgd", "--bucket-mb", "0.01",
             "--bucket-times", "--iters", "3", "--warmup", "1", "--out", str(out))
    recs = load_records(out)
    ddp = [r for r in recs if r["kind"] == "ddp"]
    bk = {r["bucket_mb"]: r for r in recs if r["kind"] == "buckets"}
    assert len(ddp) == 2 and set(bk) == {None, 0.01}
    documented = set(FIELDS) | set(KIND_FIELDS["buckets"]) | set(KIND_FIELDS["ddp"])
    for mb, r in bk.items():
        assert set(r) - {"source"} <= documented, sorted(set(r) - documented)  # source: added by load_records
        assert r["status"] == "ok" and r["clock"] == "perf_counter" and r["world_size"] == 2
        assert r["bucket_index"] == list(range(len(r["ready_ms"])))
        assert all(a <= b + 1e-6 for a, b in zip(r["ready_ms"], r["ready_ms"][1:]))
        assert r["ready_fraction"][-1] == 1.0 and r["backward_ms"] >= r["ready_ms"][-1]
        w = Workload("mlp_small", 8, bucket_bytes=(mb or 25) * 2**20, first_bucket_bytes=None if mb is None else mb * 2**20)
        assert r["bucket_bytes"] == [int(b) for b in w.bucket_sizes("ddp")]
    # a rerun resumes: nothing new
    torchrun("ddp", "--models", "mlp_small", "--batch-sizes", "8", "--modes", "syncsgd", "--bucket-mb", "0.01",
             "--bucket-times", "--iters", "3", "--warmup", "1", "--out", str(out))
    assert len(load_records(out)) == len(recs)


def test_ddp_hook_times_records(tmp_path):
    """``ddp --hook-times``: one ``hook_times`` record per hook configuration (overlapped and blocking, none for
    syncSGD or post), also for hook configurations timed by an earlier run without the flag; ordered stamps, bucket
    bytes of the model's DDP buckets, every field documented; a rerun resumes; the table reads the records."""
    from studykit.measure.hook_times import hook_host_table, hook_timeline_table
    from studykit.measure.records import FIELDS, KIND_FIELDS
    from studykit.perfmodel.model import Workload

    out = tmp_path / "d.jsonl"
    common = ("ddp", "--models", "mlp_large", "--batch-sizes", "8", "--compressors", "fp16", "randomk:ratio=0.25",
              "--iters", "2", "--warmup", "1", "--out", str(out))
    torchrun(*common, "--modes", "syncsgd", "hook", "post")  # the overlapped hooks timed without stamps first
    first = load_records(out)
    assert not [r for r in first if r["kind"] == "hook_times"]
    torchrun(*common, "--modes", "syncsgd", "hook", "hook_blocking", "post", "--hook-times")
    recs = load_records(out)
    ddp = {r["config_id"]: r for r in recs if r["kind"] == "ddp"}
    ht = [r for r in recs if r["kind"] == "hook_times"]
    hooks = [r for r in ddp.values() if r["mode"] == "hook"]
    assert len(ddp) == 1 + 2 + 4 and len(hooks) == 4 and len(ht) == 4
    as_ddp = {r["config_id"].replace('"kind":"hook_times"', '"kind":"ddp"') for r in ht}
    assert as_ddp == {r["config_id"] for r in hooks}  # the ddp record's identity, kind aside
    assert {(r["compressor"], r["hook_overlap"]) for r in ht} == {(c, o) for c in ("fp16", "randomk")
                                                                 for o in (True, False)}
    sizes = [int(b) for b in Workload("mlp_large", 8).bucket_sizes("ddp")]
    assert len(sizes) >= 2  # several buckets, so their order is tested
    documented = set(FIELDS) | set(KIND_FIELDS["hook_times"])
    for r in ht:
        assert r["status"] == "ok", r["reason"]
        assert set(r) - {"source"} <= documented, sorted(set(r) - documented)  # source: added by load_records
        assert r["clock"] == "perf_counter" and r["world_size"] == 2 and r["n_iter"] >= 2 and r["mode"] == "hook"
        assert r["bucket_index"] == list(range(len(sizes))) and r["bucket_bytes"] == sizes
        for i in range(len(sizes)):
            assert r["n_collectives"][i] >= 1
            assert 0 <= r["ready_ms"][i] <= r["encode_end_ms"][i] <= r["decode_end_ms"][i], (r["compressor"], i)
            assert 0 <= r["ready_host_ms"][i] <= r["issue_host_ms"][i] <= r["done_host_ms"][i], (r["compressor"], i)
            assert r["comm_ms"][i] >= 0
        assert r["ready_ms"][-1] <= r["backward_end_ms"] <= r["sync_end_ms"] <= r["iteration_ms"]
        assert len(r["stamps_ms"]["ready_ms"]) == r["n_iter"] == len(r["times_ms"]) == len(r["stamps_ms"]["done_host_ms"])
        if not r["hook_overlap"]:  # blocking: every bucket's protocol ran inside the backward pass
            assert r["backward_end_ms"] >= max(r["decode_end_ms"])
    table = hook_timeline_table(recs)
    assert len(table) == 4 * len(sizes) and (table["exposed_ms"] >= 0).all()
    host = hook_host_table(recs)
    assert len(host) == 4 * len(sizes) and (host["wait_ms"] >= 0).all() and host["post_ms"].notna().all()
    # a rerun resumes: nothing new
    torchrun(*common, "--modes", "syncsgd", "hook", "hook_blocking", "post", "--hook-times")
    assert len(load_records(out)) == len(recs)


def test_ddp_coalesced_hooks_are_configurations_of_their_own_and_traces_are_written(tmp_path):
    """``--hook-coalesce-mb off 0``: each hook twice (a protocol per bucket, once per iteration), the value in the
    record and its identity, the same bytes per iteration (PowerSGD's payloads do not depend on the grouping);
    ``--trace-dir``: rank 0's traces."""
    import gzip
    import json

    out, traces = tmp_path / "d.jsonl", tmp_path / "traces"
    torchrun("ddp", "--models", "mlp_small", "--batch-sizes", "8", "--modes", "hook", "--compressors", "powersgd",
             "--bucket-mb", "0.001", "--hook-coalesce-mb", "off", "0", "--iters", "3", "--warmup", "1",
             "--out", str(out), "--trace-dir", str(traces))
    recs = [r for r in load_records(out) if r["mode"] == "hook"]
    by = {r["hook_coalesce_mb"]: r for r in recs}
    assert set(by) == {None, 0.0} and len({r["config_id"] for r in recs}) == 2
    assert all(r["status"] == "ok" for r in recs)
    assert by[0.0]["wire_bytes_per_iter"] == pytest.approx(by[None]["wire_bytes_per_iter"])
    assert '"hook_coalesce_mb":0.0' in by[0.0]["config_id"] and "hook_coalesce_mb" not in by[None]["config_id"]
    names = sorted(p.name for p in traces.iterdir())
    assert names == ["mlp_small_b8_hook_powersgd.json.gz", "mlp_small_b8_hook_powersgd_c0.json.gz"]
    events = json.loads(gzip.open(traces / names[1]).read())["traceEvents"]
    assert any(e.get("name", "").startswith("aten::") for e in events)
    # --no-broadcast-buffers: DDP built without it, a configuration of its own
    torchrun("ddp", "--models", "mlp_small", "--batch-sizes", "8", "--modes", "syncsgd", "--iters", "2",
             "--warmup", "1", "--out", str(out), "--no-broadcast-buffers")
    nob = [r for r in load_records(out) if r["mode"] == "syncsgd"]
    assert len(nob) == 1 and nob[0]["broadcast_buffers"] is False and nob[0]["status"] == "ok"
    assert '"broadcast_buffers":false' in nob[0]["config_id"]


def test_ddp_pair_hook_post_writes_each_hook_right_after_its_post(tmp_path):
    """``ddp --pair-hook-post``: the records come out post, hook, post, hook (the default: every post, then every
    hook); the configurations and their ids are the default's."""
    runs = {}
    for name, extra in (("paired", ["--pair-hook-post"]), ("default", [])):
        out = tmp_path / f"{name}.jsonl"
        torchrun("ddp", "--models", "mlp_small", "--batch-sizes", "8", "--compressors", "fp16", "signsgd",
                 "--modes", "hook", "post", "--iters", "2", "--warmup", "1", "--out", str(out), *extra)
        runs[name] = [r for r in load_records(out) if r["kind"] == "ddp"]
    assert [(r["mode"], r["compressor"]) for r in runs["paired"]] == [
        ("post", "fp16"), ("hook", "fp16"), ("post", "signsgd"), ("hook", "signsgd")]
    assert [(r["mode"], r["compressor"]) for r in runs["default"]] == [
        ("post", "fp16"), ("post", "signsgd"), ("hook", "fp16"), ("hook", "signsgd")]
    assert sorted(r["config_id"] for r in runs["paired"]) == sorted(r["config_id"] for r in runs["default"])
    assert all(r["status"] == "ok" for r in runs["paired"] + runs["default"])


def test_ddp_pair_hook_post_iterations_times_post_and_hooks_side_by_side(tmp_path):
    """``ddp --pair-hook-post iterations`` on two ranks: every record ok, with the default's ids and as many
    timed iterations as asked; each compressor's post and hook name each other in ``timed_with``."""
    out = tmp_path / "interleaved.jsonl"
    torchrun("ddp", "--models", "mlp_small", "--batch-sizes", "8", "--compressors", "fp16", "signsgd",
             "--modes", "syncsgd", "hook", "post", "--iters", "4", "--warmup", "1", "--out", str(out),
             "--pair-hook-post", "iterations", nproc=2)
    recs = [r for r in load_records(out) if r["kind"] == "ddp"]
    assert [(r["mode"], r["compressor"]) for r in recs] == [
        ("syncsgd", None), ("post", "fp16"), ("hook", "fp16"),
        ("post", "signsgd"), ("hook", "signsgd")]
    assert all(r["status"] == "ok" and r["n_iter"] == 4 and r["n_warmup"] == 1 for r in recs)
    by = {(r["mode"], r["compressor"]): r for r in recs}
    assert by[("syncsgd", None)]["timed_with"] is None
    for name in ("fp16", "signsgd"):
        post, hook = by[("post", name)], by[("hook", name)]
        assert post["timed_with"] == [hook["config_id"]] and hook["timed_with"] == [post["config_id"]]
        assert post["wire_bytes_per_iter"] > 0 and hook["wire_bytes_per_iter"] > 0
