"""scripts/gpu_checks.sh without a GPU: every command it would run parses with the kit's own argument parsers
(a typo in a flag must not cost a device call), and the test files it hands to pytest exist."""
import json
import os
import subprocess

import pytest

from studykit import paths
from studykit.measure import cli as mcli

SCRIPT = paths.ROOT / "scripts" / "gpu_checks.sh"

FAKE_PY = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["ARGV_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
"""


@pytest.fixture(scope="module")
def calls(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_checks")
    fake = tmp / "python"
    fake.write_text(FAKE_PY)
    fake.chmod(0o755)
    log = tmp / "argv.jsonl"
    env = {**os.environ, "OUT": str(tmp / "out"), "PYTHON": str(fake), "ARGV_LOG": str(log),
           "STUDYKIT_GIT_COMMIT": "test", "IPROUTE2": str(tmp / "none"), "TOTAL_S": "600"}
    res = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120, cwd=paths.ROOT)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    # the machine summary's version probes (python3 -c ...) are not phases
    return [a for a in (json.loads(line) for line in log.read_text().splitlines()) if a[:1] != ["-c"]]


def _studykit_args(argv: list[str]) -> list[str]:
    """The arguments after ``-m studykit`` (torchrun's and python's own in front are dropped)."""
    i = max(j for j in range(len(argv) - 1) if argv[j] == "-m" and argv[j + 1] == "studykit")
    return argv[i + 2:]


def test_every_phase_runs_one_command(calls):
    # kernels, buckets, hostahead, tcomp, nvlink, batches, hooks x 2 (GIL A/B), ps, hookdiag (its trace summary
    # runs only where the ddp phase left traces, which this stand-in python does not)
    assert len(calls) == 10, calls


def test_every_studykit_command_parses(calls):
    parser = mcli.build_parser()
    seen = []
    for argv in calls:
        if "studykit" not in argv:
            continue
        args = _studykit_args(argv)
        if args[0] == "throttle":  # its own options mirror scripts/gpu_bandwidth.sh's; the command after -- parses
            assert "--gpus" in args and "--rate-gbps" in args
            args = args[args.index("--") + 1:]
        ns = parser.parse_args([*args, "--out", "/tmp/x.jsonl"] if "--out" not in args else args)
        seen.append((ns.cmd, tuple(getattr(ns, "modes", ()) or ())))
    cmds = [c for c, _ in seen]
    assert cmds.count("ddp") == 6 and cmds.count("profile") == 2 and "tcomp" in cmds
    (diag,) = [a for a in calls if "--trace-dir" in a]
    assert "--hook-times" in diag and diag[diag.index("--iters") + 1] == "30" and "graph" in diag
    (ahead,) = [a for a in calls if "--host-ahead" in a]
    assert "--ddp-buckets" in ahead and "--out" in ahead
    hooks = [a for a in calls if "throttle" in a and "hook" in a]
    assert any("--hook-times" in a for a in hooks) and any("--switch-interval-ms" in a for a in hooks)


def test_pytest_phase_names_existing_gpu_tests(calls):
    (argv,) = [a for a in calls if a[:2] == ["-m", "pytest"]]
    files = [a for a in argv if a.startswith("tests/")]
    assert files and all((paths.ROOT / f).is_file() for f in files)
    assert argv[argv.index("-m", 1) + 1] == "gpu"


def test_the_script_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
