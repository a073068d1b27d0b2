"""scripts/gpu_bandwidth.sh without a GPU: every DDP command it would run through ``throttle`` parses with the
kit's own argument parser, and BROADCAST_BUFFERS adds the A/B pass (or refuses a value it does not know)."""
import json
import os
import subprocess

from studykit import paths
from studykit.measure import cli as mcli

SCRIPT = paths.ROOT / "scripts" / "gpu_bandwidth.sh"
FAKE_PY = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["ARGV_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
"""


def _run(tmp_path, **env_extra):
    fake = tmp_path / "python"
    fake.write_text(FAKE_PY)
    fake.chmod(0o755)
    log = tmp_path / "argv.jsonl"
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": str(fake), "ARGV_LOG": str(log),
           "STUDYKIT_GIT_COMMIT": "test", "IPROUTE2": str(tmp_path / "none"), "TOTAL_S": "600", **env_extra}
    res = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120, cwd=paths.ROOT)
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return res, [a for a in calls if "throttle" in a]


def _ddp_args(argv):
    i = argv.index("--")
    return argv[i + 1:]


def test_broadcast_buffers_adds_one_pass_per_rate(tmp_path):
    res, calls = _run(tmp_path, RATES="25 10", BROADCAST_BUFFERS="1 0", MODELS="resnet50")
    assert res.returncode == 0, res.stderr[-2000:]
    assert len(calls) == 4
    parser = mcli.build_parser()
    nobuf = []
    for argv in calls:
        ns = parser.parse_args(_ddp_args(argv))
        assert ns.cmd == "ddp"
        nobuf.append((argv[argv.index("--rate-gbps") + 1], ns.broadcast_buffers))
    assert nobuf == [("25", True), ("25", False), ("10", True), ("10", False)]
    assert "ddp@10G-nobuf" in (tmp_path / "out" / "RUN.txt").read_text()


def test_default_keeps_the_buffer_broadcast(tmp_path):
    res, calls = _run(tmp_path, RATES="5")
    assert res.returncode == 0 and len(calls) == 1 and "--no-broadcast-buffers" not in calls[0]


def test_rounds_measure_every_rate_again_into_round_folders_without_stamps(tmp_path):
    res, calls = _run(tmp_path, RATES="25 10", ROUNDS="2", BUCKET_TIMES="1", HOOK_TIMES="1")
    assert res.returncode == 0, res.stderr[-2000:]
    outs = [(a[a.index("--rate-gbps") + 1], a[a.index("--out") + 1]) for a in calls]
    out = str(tmp_path / "out")
    assert outs == [("25", f"{out}/ddp.jsonl"), ("10", f"{out}/ddp.jsonl"),
                    ("25", f"{out}/round2/ddp.jsonl"), ("10", f"{out}/round2/ddp.jsonl")]
    stamped = ["--bucket-times" in a and "--hook-times" in a for a in calls]
    assert stamped == [True, True, False, False]  # the stamps once, in the first round
    parser = mcli.build_parser()
    assert all(parser.parse_args(_ddp_args(a)).cmd == "ddp" for a in calls)
    assert "ddp@10G-round2" in (tmp_path / "out" / "RUN.txt").read_text()


def test_trace_writes_the_first_rounds_traces_into_one_folder(tmp_path):
    res, calls = _run(tmp_path, RATES="25 10", ROUNDS="2", TRACE="1")
    assert res.returncode == 0, res.stderr[-2000:]
    parser = mcli.build_parser()
    dirs = [parser.parse_args(_ddp_args(a)).trace_dir for a in calls]
    assert dirs == [str(tmp_path / "out" / "traces")] * 2 + [None, None]  # trace names carry the rate
    (tmp_path / "d").mkdir()
    res, calls = _run(tmp_path / "d", RATES="25")
    assert res.returncode == 0 and parser.parse_args(_ddp_args(calls[0])).trace_dir is None  # off by default
    (tmp_path / "bad").mkdir()
    res, calls = _run(tmp_path / "bad", TRACE="yes")
    assert res.returncode == 2 and not calls and "TRACE must be 0 or 1, got 'yes'" in res.stderr


def test_bad_rounds_are_refused(tmp_path):
    for bad in ("0", "two", "-1"):
        res, calls = _run(tmp_path, ROUNDS=bad)
        assert res.returncode == 2 and not calls and f"ROUNDS must be a whole number >= 1, got '{bad}'" in res.stderr


def test_unknown_broadcast_buffers_value_is_refused(tmp_path):
    res, calls = _run(tmp_path, BROADCAST_BUFFERS="yes")
    assert res.returncode == 2 and not calls
    assert "BROADCAST_BUFFERS must hold 1 and/or 0, got 'yes'" in res.stderr


def _profiles(tmp_path):
    log = tmp_path / "argv.jsonl"
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [a for a in calls if "profile" in a and "throttle" not in a]


def test_hook_profile_times_each_bucket_before_the_throttled_phases_when_hooks_are_measured(tmp_path):
    """With hooks in MODES the script first runs `profile --ddp-buckets --bucket-times` (parsed by the kit's own
    parser) into profile_buckets.jsonl; without hooks, or with HOOK_PROFILE=0, it does not; other values are
    refused."""
    res, _ = _run(tmp_path, RATES="25", MODELS="resnet50", COMPRESSORS="powersgd:rank=4", MODES="syncsgd hook")
    assert res.returncode == 0, res.stderr[-2000:]
    (argv,) = _profiles(tmp_path)
    ns = mcli.build_parser().parse_args(argv[argv.index("-m") + 2:])
    assert ns.cmd == "profile" and ns.ddp_buckets and ns.bucket_times == 20 and ns.models == ["resnet50"]
    assert argv[argv.index("--out") + 1] == str(tmp_path / "out" / "profile_buckets.jsonl")
    for env in ({"MODES": "syncsgd post"}, {"MODES": "syncsgd hook", "HOOK_PROFILE": "0"}):
        sub = tmp_path / env["MODES"].replace(" ", "_") / env.get("HOOK_PROFILE", "d")
        sub.mkdir(parents=True)
        res, _ = _run(sub, RATES="25", MODELS="resnet50", **env)
        assert res.returncode == 0 and not _profiles(sub)
    bad = tmp_path / "bad"
    bad.mkdir()
    res, calls = _run(bad, HOOK_PROFILE="yes")
    assert res.returncode == 2 and not calls and "HOOK_PROFILE must be 0 or 1, got 'yes'" in res.stderr



def test_empty_rates_run_only_the_sweep_and_empty_bucket2_only_ddps_default(tmp_path):
    """RATES="" with SWEEP=1 runs the sweep alone (not the default rates); BUCKET2_MB="" times syncSGD at DDP's
    default bucket only (not at 100 MB besides)."""
    res, calls = _run(tmp_path, RATES="", SWEEP="1", SWEEP_RATES="8")
    assert res.returncode == 0, res.stderr[-2000:]
    assert [_ddp_args(a)[0] for a in calls] == ["sweep"]
    (tmp_path / "b").mkdir()
    res, calls = _run(tmp_path / "b", RATES="5", BUCKET2_MB="")
    assert res.returncode == 0, res.stderr[-2000:]
    ns = mcli.build_parser().parse_args(_ddp_args(calls[0]))
    assert ns.cmd == "ddp" and ns.bucket_mb == []


def test_hook_runner_passes_every_runner_to_ddp_and_defaults_to_the_thread(tmp_path):
    parser = mcli.build_parser()
    res, calls = _run(tmp_path, RATES="5", HOOK_RUNNER="thread graph")
    assert res.returncode == 0, res.stderr[-2000:]
    assert parser.parse_args(_ddp_args(calls[0])).hook_runner == ["thread", "graph"]
    (tmp_path / "default").mkdir()
    res, calls = _run(tmp_path / "default", RATES="5")
    assert parser.parse_args(_ddp_args(calls[0])).hook_runner == ["thread"]


def test_pair_hook_post_reaches_every_ddp_call_and_a_bad_value_is_refused(tmp_path):
    paired, default, bad = (tmp_path / name for name in ("paired", "default", "bad"))
    for folder in (paired, default, bad):
        folder.mkdir()
    parser = mcli.build_parser()
    for value, want in (("1", "configs"), ("iterations", "iterations")):
        (paired / value).mkdir()
        res, calls = _run(paired / value, RATES="25 5", PAIR_HOOK_POST=value)
        assert res.returncode == 0, res.stderr[-2000:]
        assert len(calls) == 2 and all(parser.parse_args(_ddp_args(a)).pair_hook_post == want for a in calls)
    res, calls = _run(default, RATES="5")
    assert res.returncode == 0 and len(calls) == 1 and parser.parse_args(_ddp_args(calls[0])).pair_hook_post == "off"
    res, calls = _run(bad, RATES="5", PAIR_HOOK_POST="yes")
    assert res.returncode == 2 and calls == [] and "PAIR_HOOK_POST must be 0, 1 or iterations, got 'yes'" in res.stderr
