"""benchmarks/when_quiet.py: a round runs only after a probe that found the host quiet, within the budget, with its
number in the command; failures stop it and keep what ran; bad arguments get errors that say what is valid."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("when_quiet_bench", ROOT / "benchmarks" / "when_quiet.py")
wq = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wq)


class Fake:
    """Probes that answer the given exit statuses in turn and a clock that each call moves on: a probe takes
    ``probe_s``, a round ``round_s``."""

    def __init__(self, statuses, probe_s=20.0, round_s=60.0, round_status=0):
        self.statuses, self.probe_s, self.round_s, self.round_status = list(statuses), probe_s, round_s, round_status
        self.t, self.commands, self.probed = 0.0, [], []

    def clock(self):
        return self.t

    def probe(self, out, rounds, quiet_below):
        self.t += self.probe_s
        self.probed.append((out.name, rounds, quiet_below))
        status = self.statuses.pop(0)
        if status in (0, 3):
            out.mkdir(parents=True, exist_ok=True)
            (out / "noise_probe.json").write_text(json.dumps({"probe": len(self.probed)}))
            verdict = "quiet" if status == 0 else "noisy"
            return status, f"| table |\n\nthe host loop's spread: 5.0 % (quiet below 10 %): {verdict}\n"
        return status, "noise_probe.py: error: measuring needs a CUDA device (use --report DIR on this machine)\n"

    def run(self, command):
        self.t += self.round_s
        self.commands.append(command)
        return self.round_status


def _gate(fake, tmp_path, **kw):
    kw = {"budget_s": 400, "needs_s": 80, **kw}
    return wq.gate(["ddp", "--out", str(tmp_path / "ddp_r{round}.jsonl")], tmp_path, kw.pop("budget_s"),
                   kw.pop("needs_s"), probe=fake.probe, run=fake.run, clock=fake.clock, **kw)


def test_rounds_run_only_after_quiet_probes_numbered_on(tmp_path):
    fake = Fake([3, 0, 3, 3, 0, 3, 3, 3, 3, 3, 3])
    ran = _gate(fake, tmp_path, first_probe=7, first_round=10, quiet_below=0.08, probe_rounds=150)
    # probes end at 20 s (noisy), 40 (quiet), round 10 at 100, probes at 120, 140 (noisy), 160 (quiet), round 11 at
    # 220, probes at 240-320 (noisy); at 320 s, 80 s are left: one more probe (to 340 s); then too few
    assert ran == [10, 11]
    assert fake.commands == [["ddp", "--out", str(tmp_path / f"ddp_r{r}.jsonl")] for r in (10, 11)]
    assert [p[0] for p in fake.probed] == [f".probe_{k}" for k in range(7, 18)]
    assert {p[1:] for p in fake.probed} == {(150, 0.08)}
    kept = sorted(tmp_path.glob("probe_*.json"), key=lambda f: int(f.stem.split("_")[-1]))
    assert [f.name for f in kept] == [f"probe_{k}.json" for k in range(7, 18)]
    assert sorted(f.name for f in tmp_path.iterdir() if f.is_dir()) == []  # no work folders left
    assert json.loads((tmp_path / "probe_8.json").read_text()) == {"probe": 2}
    log = (tmp_path / "when_quiet.log").read_text()
    assert log.index("== probe 8 at 20 s") < log.index("== round 10 at 40 s") < log.index("== probe 9 at 100 s")
    assert log.count("== round") == 2 and log.count("(quiet below 10 %): noisy") == 9
    assert log.rstrip().endswith("== 2 rounds ran (10, 11) and 11 probes in 340 s")


def test_no_probe_starts_without_time_for_its_round_and_max_rounds_stops_it(tmp_path):
    fake = Fake([0] * 10)
    assert _gate(fake, tmp_path, budget_s=239, needs_s=80) == [1, 2]  # at 160 s only 79 s are left
    assert len(fake.probed) == 2
    fake = Fake([0] * 10)
    assert _gate(fake, tmp_path / "b", budget_s=10_000, max_rounds=3) == [1, 2, 3] and len(fake.probed) == 3


def test_a_failed_probe_or_round_stops_it_and_keeps_what_ran(tmp_path):
    fake = Fake([0, 2])
    with pytest.raises(RuntimeError, match=r"probe 2 failed \(exit status 2\); 1 rounds ran before it"):
        _gate(fake, tmp_path)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["probe_1.json", "when_quiet.log"]
    assert "measuring needs a CUDA device" in (tmp_path / "when_quiet.log").read_text()
    fake = Fake([0, 0], round_status=1)
    with pytest.raises(RuntimeError, match=r"round 1 exited with status 1; 0 rounds ran before it"):
        _gate(fake, tmp_path / "b")
    assert len(fake.commands) == 1


def test_probes_already_kept_are_not_overwritten(tmp_path):
    (tmp_path / "probe_1.json").write_text("kept")
    with pytest.raises(FileExistsError, match="give --first-probe past the probes already in"):
        _gate(Fake([0]), tmp_path)
    assert (tmp_path / "probe_1.json").read_text() == "kept"


@pytest.mark.parametrize("args, said", [
    (["--budget-s", "100", "--needs-s", "80", "ddp"], "give the command to time after --"),
    (["--budget-s", "100", "--needs-s", "80", "--"], "no command after --"),
    (["--budget-s", "100", "--needs-s", "80", "--", "ddp", "--out", "x.jsonl"], "must name its output with {round}"),
    (["--budget-s", "50", "--needs-s", "80", "--", "ddp", "r{round}"], "--budget-s at least --needs-s, got 80 and 50"),
    (["--budget-s", "100", "--needs-s", "80", "--quiet-below", "10", "--", "r{round}"],
     "a fraction between 0 and 1 (0.1: 10 %), got 10.0"),
    (["--budget-s", "100", "--needs-s", "80", "--rounds", "0", "--", "r{round}"], "--rounds must be at least 1"),
    (["--budget-s", "100", "--needs-s", "80", "--probe-rounds", "5", "--", "r{round}"],
     "--probe-rounds must be at least 10, got 5"),
])
def test_bad_arguments_are_refused(tmp_path, capsys, args, said):
    with pytest.raises(SystemExit) as exc:
        wq.main(["--out", str(tmp_path)] + args)
    assert exc.value.code == 2 and said in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_on_a_machine_without_cuda_the_real_probe_fails_clearly(tmp_path, capsys):
    """The probe is noise_probe.py itself, run as a process; without CUDA it refuses, and so does the gate."""
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the probe would measure")
    rc = wq.main(["--out", str(tmp_path), "--budget-s", "100", "--needs-s", "80", "--", sys.executable, "-c",
                  "print('{round}')"])
    assert rc == 1
    assert "when_quiet: probe 1 failed (exit status 2); 0 rounds ran before it" in capsys.readouterr().err
    assert "measuring needs a CUDA device" in (tmp_path / "when_quiet.log").read_text()
    assert [f.name for f in tmp_path.iterdir()] == ["when_quiet.log"]
