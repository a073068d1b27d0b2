"""benchmarks/hook_host.py: the hook clock's sums and medians on hand-made calls, its table, bad input, a CPU run."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("hook_host_bench", ROOT / "benchmarks" / "hook_host.py")
hook_host = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hook_host)


class _Bucket:
    def __init__(self, i):
        self.i = i

    def index(self):
        return self.i


def test_the_clock_sums_each_iteration_and_takes_each_buckets_median(monkeypatch):
    """Two buckets per iteration; the fake clock's readings make each call last a known time (us)."""
    clock = hook_host.HookClock()

    def hook(state, bucket):
        return f"fut{bucket.index()}"

    timed = clock.wrap(hook)
    assert timed.__name__ == "hook"  # DDP checks the name of PyTorch's bf16 hook
    durations = iter([10, 30, 20, 40, 90, 50])  # us: iteration 1 (buckets 0, 1), 2, 3
    for it in (1, 2, 3):
        clock.iteration = it
        for b in (0, 1):
            readings = [0, next(durations) * 1000]  # ns at the call and at its return
            monkeypatch.setattr(hook_host.time, "perf_counter_ns", lambda r=readings: r.pop(0))
            assert timed(None, _Bucket(b)) == f"fut{b}"
    s = clock.summary(2, 3)  # iteration 1 is warm-up
    assert s["hook_us_per_iter"] == pytest.approx([60.0, 140.0])  # 20 + 40, 90 + 50
    assert s["bucket_us_median"] == pytest.approx([55.0, 45.0])  # median(20, 90), median(40, 50)
    assert s["hook_us_median"] == pytest.approx(100.0) and s["buckets"] == 2
    with pytest.raises(ValueError, match="no hook calls in iterations 4-5"):
        clock.summary(4, 5)


def _rec(hook, ms, us):
    return {"kind": "hook_host", "model": "m", "batch_size": 8, "compressor": "bf16", "hook": hook, "world_size": 1,
            "ms_median": ms, "n_iter": 30, "n_warmup": 10, "hook_us_median": sum(us), "bucket_us_median": us,
            "buckets": len(us), "gpu": "G", "git_commit": "abc"}


def test_the_table_lists_each_hook_with_its_host_time(tmp_path):
    f = tmp_path / "hook_host.jsonl"
    f.write_text(json.dumps(_rec("graph", 33.456, [40.0, 60.0, 80.0])) + "\n")
    text = hook_host.table(f)
    assert "| m | bf16 | graph | 33.46 | 180 | 3 | 60 (40-80) |" in text


def test_missing_or_foreign_records_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="no records at"):
        hook_host.table(tmp_path / "none.jsonl")
    f = tmp_path / "x.jsonl"
    f.write_text(json.dumps({"kind": "ddp", "status": "ok"}) + "\n")
    with pytest.raises(SystemExit, match="no hook_host records"):
        hook_host.table(f)


def test_a_bad_codec_is_refused_before_any_work(tmp_path):
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "hook_host.py"), "--compressors", "nosuch",
                          "--out", str(tmp_path / "o.jsonl")], capture_output=True, text=True, timeout=120)
    assert res.returncode != 0 and "nosuch" in res.stderr and not (tmp_path / "o.jsonl").exists()


@pytest.mark.slow
def test_a_cpu_run_writes_one_record_per_hook_with_provenance(tmp_path):
    out = tmp_path / "h.jsonl"
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
                    str(ROOT / "benchmarks" / "hook_host.py"), "--models", "mlp_small", "--compressors", "fp16",
                    "--iters", "3", "--warmup", "1", "--python-profile", "3", "--out", str(out)],
                   check=True, capture_output=True, timeout=300, cwd=tmp_path)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["hook"] for r in recs] == ["graph", "thread"]  # PyTorch's 16-bit hooks: NCCL only
    assert all(len(r["hook_us_per_iter"]) == 3 and r["buckets"] >= 1 and r["hook_us_median"] > 0
               and r["git_commit"] and r["torch"] and len(r["python_profile"]) == 3 for r in recs)


def test_the_python_profile_keeps_the_costliest_functions_per_iteration():
    import cProfile

    def costly():
        total = 0
        for i in range(20000):  # in the function itself, not in a built-in it calls
            total += i
        return total

    def cheap():
        return 1

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(4):
        costly()
        cheap()
    prof.disable()
    rows = hook_host.python_profile(prof, iterations=2, top=2)
    assert len(rows) == 2 and "costly" in rows[0]["function"] and rows[0]["calls"] == pytest.approx(2.0)
    assert rows[0]["own_us"] >= rows[1]["own_us"] > 0
