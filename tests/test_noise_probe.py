"""benchmarks/noise_probe.py's report: which call's slow rounds coincide with train's, and what was sampled then."""
import importlib.util
import json

import pytest

from studykit import paths

spec = importlib.util.spec_from_file_location("noise_probe", paths.ROOT / "benchmarks" / "noise_probe.py")
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


def _data():
    """40 rounds, one every 0.1 s; rounds 10-19 are a host spell: host and train slow, gpu not; the CPU steal
    sampled in the spell is 30 %, 0 % outside it; the SM clock is 1980 MHz throughout."""
    n, t0 = 40, 1000.0
    spell = [10 <= i < 20 for i in range(n)]
    calls = {"gpu": [10.0] * n, "host": [20.0 if s else 10.0 for s in spell],
             "train": [45.0 if s else 30.0 for s in spell]}
    data = {"provenance": {"gpu": "NVIDIA H200", "driver": "1", "torch": "2", "git_commit": "abc", "timestamp": "now"},
            "calls": {c: {"times_ms": ts, "start_s": [t0 + 0.1 * i + 0.01 for i in range(n)]}
                      for c, ts in calls.items()},
            "smi": [[t0 + 0.05 * i, 1980.0, 3201.0, 500.0, 40.0] for i in range(2 * n)],
            "cpu": [[t0 + 0.1 * i + 0.02, 0.5, 0.3 if s else 0.0] for i, s in enumerate(spell)]}
    return data


def test_the_report_says_which_calls_slow_rounds_coincide_with_trains_and_what_was_sampled_then():
    text = probe.report(_data())
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert rows["gpu"].endswith("| 0 of 40 | 0 of 10 |")
    assert rows["host"].endswith("| 10 of 40 | 10 of 10 |")
    assert rows["train"].split(" | ")[1] == "30.00"  # median ms
    assert rows["slow"] == "| slow | 10 | 1980 | 500 | 50.0 % | 30.00 % |"
    assert rows["not slow"] == "| not slow | 30 | 1980 | 500 | 50.0 % | 0.00 % |"


def test_the_command_refuses_what_it_cannot_do(tmp_path, capsys):
    with pytest.raises(SystemExit):
        probe.main([])
    assert "exactly one of --out DIR" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        probe.main(["--report", str(tmp_path)])
    assert "noise_probe.json not found" in capsys.readouterr().err
    (tmp_path / "noise_probe.json").write_text(json.dumps(_data()))
    assert probe.main(["--report", str(tmp_path), "--write"]) == 0
    assert (tmp_path / "noise_probe.md").read_text() == probe.report(_data())


def test_smi_rows_reads_nvidia_smis_csv_and_skips_what_is_not_a_sample():
    rows = probe._smi_rows("2026/12/03 06:20:01.250, 1980, 3201, 512.30, 41\nNo devices were found\n")
    assert len(rows) == 1 and rows[0][1:] == [1980.0, 3201.0, 512.3, 41.0]
