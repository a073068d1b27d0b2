"""Fault test: a measurement command SIGKILLed at random points loses at most the record in flight and,
rerun, never duplicates a record (issue: nothing lost, nothing silently wrong)."""
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from studykit import paths

pytestmark = pytest.mark.slow

#: 3 models x 10 compressors (+ the copy-bandwidth record): about 30 records over a few seconds after
#: the ~3 s import, so random kills land before, between and inside records
CMD = [sys.executable, "-m", "studykit", "profile", "--models", "mlp_large", "cnn_small", "mlp_small", "--device", "cpu",
       "--no-split", "--iters", "10", "--warmup", "1", "--quiet", "--compressors", "none", "fp16", "bf16", "signsgd",
       "topk:ratio=0.1", "randomk:ratio=0.1", "qsgd", "terngrad", "natural", "quantize:bits=4"]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(paths.ROOT), os.environ.get("PYTHONPATH")])),
       "OMP_NUM_THREADS": "1"}


def _records(path):
    """Every line of the file as written (a line cut by the kill may be the last one)."""
    if not path.exists():
        return [], None
    lines = path.read_bytes().split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline, else a line cut short
    return [json.loads(x) for x in lines if x.strip()], tail or None


def _lines(path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_sigkill_at_random_points_loses_nothing_and_duplicates_nothing(tmp_path):
    """Each trial kills the command at a random point of its run: during start-up, or within 20 ms after
    a random number of new records appeared (the next record in flight), whatever the speed of the
    machine. A round with at most one record left starts a fresh file: finishing it would need a run longer than
    the start-up window of a kill, so on a slow machine the round would never end and the kills would stop
    spreading over the run."""
    rng = random.Random(20261126)
    trials, rounds, total = 20, 0, 31  # 3 models x 10 compressors + the copy-bandwidth record
    progress = []
    out, kept = None, []
    for _ in range(trials):
        if out is None or len(kept) >= total - 1:
            rounds += 1
            out, kept = tmp_path / f"profile{rounds}.jsonl", []
        start = _lines(out)
        target = rng.randint(0, max(0, total - len(kept) - 1))  # new records to wait for before the kill
        p = subprocess.Popen([*CMD, "--out", str(out)], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if target == 0:  # during start-up (imports, model shapes), before any record
            time.sleep(rng.uniform(0.0, 2.5))
        else:  # while the next record is being measured, or being written
            deadline = time.monotonic() + 120
            while _lines(out) - start < target and p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, 0.02))
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        recs, _cut = _records(out)  # complete lines parse
        ids = [r["config_id"] for r in recs]
        assert len(ids) == len(set(ids)), "a record was written twice"
        assert ids[:len(kept)] == kept, "a record measured before the kill was lost"
        kept = ids
        progress.append(len(kept))
    # the kills did land while records were being written (not all before the first, nor after the last)
    assert len(set(progress)) >= 5, progress
    done = subprocess.run([*CMD, "--out", str(out)], env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    recs, cut = _records(out)
    assert cut is None
    ids = [r["config_id"] for r in recs]
    assert len(ids) == len(set(ids)), "a rerun duplicated a record"
    assert ids[:len(kept)] == kept
    assert len(ids) == total
    assert {r["compressor"] for r in recs if r["kind"] == "profile"} >= {
        "none", "fp16", "bf16", "signsgd", "topk", "randomk", "qsgd", "terngrad", "natural", "quantize"}
