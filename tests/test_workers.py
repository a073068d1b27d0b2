"""Nothing left behind: a training worker, spawned by ``train --world-size N`` or started by torchrun, dies with its
parent (even a SIGKILLed one), a spawned one taking the run's temporary folder with it; an interrupted or
terminated parent stops its workers first."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from studykit import paths
from studykit.measure import workers

psutil = pytest.importorskip("psutil")
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

#: a training run far longer than any test: the workers are killed, never left to finish
TRAIN = ["--world-size", "2", "--dataset", "synthetic", "--limit-train", "256", "--limit-test", "64",
         "--batch-size", "16", "--steps", "1000000", "--eval-every", "5", "--methods", "none", "--warmup-steps", "0",
         "--profile-steps", "0", "--quiet"]
START_S, GONE_S = 240, 15


def _wait(cond, timeout_s: float, what: str, proc=None) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the parent exited ({proc.returncode}) before {what}: {proc.communicate()[1][-2000:]}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _alive(pids) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _run_folders(tmp) -> list:
    """The kit's temporary folders under ``tmp`` (torch keeps caches of its own there)."""
    return list(tmp.glob("studykit-train-*"))


#: how the two workers are started: spawned by ``train --world-size 2``, or by torchrun
LAUNCHERS = {"spawn": [sys.executable, "-m", "studykit", "train", *TRAIN],
             "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", "studykit", "train", *TRAIN]}


@pytest.fixture()
def training(tmp_path, request):
    """``python -m studykit train`` on two workers (spawned, or by torchrun with ``request.param``), started
    (records written) and running; yields (the parent, its workers' pids, the temporary root); kills whatever is
    left at the end."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "runs.jsonl"
    proc = subprocess.Popen([*LAUNCHERS[getattr(request, "param", "spawn")], "--out", str(out)],
                            cwd=paths.ROOT, env={**os.environ, "TMPDIR": str(tmp)}, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    kids: list[int] = []
    try:
        _wait(lambda: out.exists() and out.stat().st_size > 0, START_S, "the workers' first record", proc)
        kids = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        assert len(kids) >= 2  # the two workers (and multiprocessing's resource tracker)
        yield proc, kids, tmp
    finally:
        for pid in _alive([proc.pid, *kids]):
            os.kill(pid, signal.SIGKILL)
        proc.communicate()


@linux
@pytest.mark.slow
@pytest.mark.parametrize("training", ["spawn", "torchrun"], indirect=True)
def test_workers_die_when_the_parent_is_killed(training, request):
    proc, kids, tmp = training
    spawned = "spawn" in request.node.callspec.id
    assert bool(_run_folders(tmp)) == spawned
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    _wait(lambda: not _alive(kids), GONE_S, "the workers to exit after their parent was killed")
    _wait(lambda: not _run_folders(tmp), GONE_S, "the run's temporary folder to go")


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_parent_stops_its_workers_and_removes_its_files(training, signum):
    proc, kids, tmp = training
    os.kill(proc.pid, signum)  # the parent alone, as a kill or a notebook's interrupt does
    proc.wait(timeout=GONE_S + 10)
    assert proc.returncode != 0
    _wait(lambda: not _alive(kids), GONE_S, "the workers to exit")
    assert _run_folders(tmp) == [] and not list(tmp.glob("pytorch-errorfile-*"))


@linux
def test_die_with_parent_sends_the_signal_at_once_when_the_parent_is_already_gone():
    code = ("import os, sys, time; from studykit.measure import workers; "
            "print(workers.die_with_parent(parent_pid=os.getppid() + 10**6), flush=True); time.sleep(30)")
    r = subprocess.run([sys.executable, "-c", code], cwd=paths.ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == -signal.SIGTERM and r.stdout == ""


@linux
def test_die_with_parent_kills_an_orphan(tmp_path):
    """A grandchild asks for the signal, then its parent is SIGKILLed: the grandchild goes too."""
    pid_file, grandchild_py = tmp_path / "pid", tmp_path / "grandchild.py"
    grandchild_py.write_text("import os, pathlib, sys, time\nfrom studykit.measure import workers\n"
                             "assert workers.die_with_parent()\n"
                             "pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))\ntime.sleep(60)\n")
    child = (f"import subprocess, sys, time; subprocess.Popen([sys.executable, {str(grandchild_py)!r}, "
             f"{str(pid_file)!r}], cwd={str(paths.ROOT)!r}); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", child], cwd=paths.ROOT, start_new_session=True)
    try:
        _wait(lambda: pid_file.exists() and pid_file.read_text(), 60, "the grandchild", proc)
        grandchild = int(pid_file.read_text())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        _wait(lambda: not _alive([grandchild]), GONE_S, "the orphan to exit")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_die_with_launcher_does_nothing_outside_a_launcher(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    assert workers.die_with_launcher() is False and not workers.under_torchrun()
