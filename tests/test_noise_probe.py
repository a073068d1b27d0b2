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
    # a campaign's files, as data regen passes them: one section each, in order
    (tmp_path / "b.json").write_text(json.dumps(_data()))
    two = probe.report([tmp_path / "noise_probe.json", tmp_path / "b.json"])
    assert two == probe.report(_data()) + "\n" + probe.report(_data()) and two.count("## Where") == 2


def test_smi_rows_reads_nvidia_smis_csv_and_skips_what_is_not_a_sample():
    rows = probe._smi_rows("2026/12/03 06:20:01.250, 1980, 3201, 512.30, 41\nNo devices were found\n")
    assert len(rows) == 1 and rows[0][1:] == [1980.0, 3201.0, 512.3, 41.0]


def test_the_h200_readme_reads_its_probes():
    """data/measurements/noise_probe_h200/README.md against its first three probes, on a quiet machine (and
    noise_probe.md is the script's output for all six)."""
    import statistics

    folder = paths.MEASUREMENTS / "noise_probe_h200"
    probes = [json.loads((folder / f"probe_{i}.json").read_text()) for i in (1, 2, 3)]
    assert (folder / "noise_probe.md").read_text() == probe.report(
        [folder / f"probe_{i}.json" for i in (1, 2, 3, 4, 5, 6)])
    text = " ".join((folder / "README.md").read_text().split())
    med = [{c: statistics.median(d["calls"][c]["times_ms"]) for c in probe.CALLS} for d in probes]
    slow = [{c: [t > probe.SLOW * m[c] for t in d["calls"][c]["times_ms"]] for c in probe.CALLS}
            for d, m in zip(probes, med)]
    steps = sum(len(d["calls"]["train"]["times_ms"]) for d in probes)
    assert f"Of {steps} training steps, {sum(sum(s['train']) for s in slow)} took over 1.1x the median" in text
    assert steps == 2300 and sum(sum(s["gpu"]) for s in slow) == 0 and "The matmuls never did" in text

    def iqr(ts):
        q = statistics.quantiles(ts, n=4)
        return q[2] - q[0]

    assert all(iqr(d["calls"]["gpu"]["times_ms"]) < 0.006 * m["gpu"] for d, m in zip(probes, med))
    assert "their interquartile range is within 0.6 % of their median" in text
    train = [d["calls"]["train"]["times_ms"] for d in probes]
    assert all(0.035 < iqr(t) / m["train"] < 0.045 and round(m["train"], 1) == 33.0 for t, m in zip(train, med))
    assert "Its interquartile range spans about 4 % of its median (33.0 ms) in every probe" in text
    blocks = [statistics.median(t[i:i + 100]) / m["train"] - 1 for t, m in zip(train, med) for i in range(0, len(t), 100)]
    assert max(map(abs, blocks)) < 0.004 and "the median of every 100 rounds is within 0.4 % of the whole probe's" in text
    clock = [statistics.fmean(r[1] for r in d["smi"]) for d in probes]
    assert all(abs(c - 1860) < 15 for c in clock) and "The SM clock averaged about 1860 MHz" in text
    host = [sum(s["host"]) for s in slow]
    assert (min(host), max(host)) == (6, 17) and "rare slow rounds (6-17 per probe) that no other call shares" in text
    assert not any(s["host"][i] and (s["gpu"][i] or s["train"][i]) for s in slow for i in range(len(s["host"])))
    steal = [r[2] for d in probes for r in d["cpu"]]
    assert (len(steal), sum(x > 0 for x in steal)) == (2545, 1)
    assert "CPU steal was zero in all but one of 2545 samples of 50 ms" in text


def test_the_h200_readme_reads_probe_4_on_a_noisy_host():
    """The README's reading of probe 4: the host loop slow and unsteady beside the quiet machine's, the matmuls
    steady, the training step's slow rounds, and the steal samples."""
    import statistics

    folder = paths.MEASUREMENTS / "noise_probe_h200"
    quiet, noisy = (json.loads((folder / f"probe_{i}.json").read_text()) for i in (1, 4))
    text = " ".join((folder / "README.md").read_text().split())
    med = {c: statistics.median(noisy["calls"][c]["times_ms"]) for c in probe.CALLS}
    host_quiet = statistics.median(quiet["calls"]["host"]["times_ms"])
    host = noisy["calls"]["host"]["times_ms"]
    blocks = [statistics.median(host[i:i + 100]) for i in range(0, len(host), 100)]
    assert (f"{med['host']:.2f}", f"{med['host'] / host_quiet:.1f}", f"{host_quiet:.2f}") == ("16.28", "2.4", "6.88")
    assert (f"{min(blocks):.1f}", f"{max(blocks):.1f}") == ("12.3", "17.3")
    assert ("In probe 4, the fixed Python loop took a median of 16.28 ms, 2.4x the quiet machine's 6.88 ms, and its medians over "
            "100 rounds ranged from 12.3 to 17.3 ms") in text
    gpu = noisy["calls"]["gpu"]["times_ms"]
    q = statistics.quantiles(gpu, n=4)
    assert q[2] - q[0] < 0.005 * med["gpu"] and not any(t > probe.SLOW * med["gpu"] for t in gpu)
    assert f"The matmuls stayed within 0.5 % of their median ({med['gpu']:.2f} ms) and never had a slow round" in text
    train = noisy["calls"]["train"]["times_ms"]
    slow = sum(t > probe.SLOW * med["train"] for t in train)
    tb = [statistics.median(train[i:i + 100]) / med["train"] - 1 for i in range(0, len(train), 100)]
    assert (slow, f"{med['train']:.2f}", f"{-100 * min(tb):.1f}", f"{100 * max(tb):.1f}") == (44, "34.13", "2.0", "2.6")
    assert (f"{slow} of its 1000 rounds took over 1.1x its median ({med['train']:.2f} ms)" in text
            and "moved from 2.0 % below the whole probe's to 2.6 % above" in text)
    steal = [r[2] for r in noisy["cpu"]]
    assert (sum(x > 0 for x in steal), len(steal), f"{100 * max(steal):.2f}") == (66, 1267, "1.25")
    assert "CPU steal was above zero in 66 of 1267 samples of 50 ms, at most 1.25 %" in text


def test_the_h200_readme_reads_probes_5_and_6_minutes_apart():
    """Probes 5 and 6, before and after rounds 8 and 9 of hook_runner/h200_p1_one_round: the host loop's medians, and
    those rounds' spreads as hook_alone.py gives them."""
    import importlib.util
    import statistics

    folder = paths.MEASUREMENTS / "noise_probe_h200"
    five, six = (json.loads((folder / f"probe_{i}.json").read_text()) for i in (5, 6))
    host = [statistics.median(d["calls"]["host"]["times_ms"]) for d in (five, six)]
    assert [f"{h:.2f}" for h in host] == ["9.03", "16.77"]
    from datetime import datetime

    apart = (datetime.fromisoformat(six["provenance"]["timestamp"]) -
             datetime.fromisoformat(five["provenance"]["timestamp"])).total_seconds()
    assert 150 <= apart <= 210  # three minutes
    text = " ".join((folder / "README.md").read_text().split())
    assert ("probe 5's loop took a median of 9.03 ms and probe 6's, three minutes later, 16.77 ms. Between them, "
            "round 8 of `../hook_runner/h200_p1_one_round/` had a spread of 0.6 % and round 9 of 9.3 %") in text
    spec = importlib.util.spec_from_file_location("hook_alone_np", paths.ROOT / "benchmarks" / "hook_alone.py")
    ha = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ha)
    rounds = paths.MEASUREMENTS / "hook_runner" / "h200_p1_one_round"
    for r, want in ((8, "0.6"), (9, "9.3")):
        note = ha._round_note(rounds / f"ddp_r{r}.jsonl", ha.load_records(rounds / f"ddp_r{r}.jsonl", quiet=True))
        assert note.endswith(f"iterations' spread {want} %"), note


def test_quiet_below_judges_the_host_by_its_loops_spread(tmp_path, capsys):
    """``--quiet-below``: exit 0 on a steady host loop, 3 on an unsteady one, the spread printed; a bad value is
    refused. On the committed probes, 10 % passes the quiet machine's probes 1-3 and probe 5 (right before the one
    quiet round of hook_runner/h200_p1_one_round) and stops probes 4 and 6 (beside its noisy rounds)."""
    steady = _data()
    steady["calls"]["host"]["times_ms"] = [10.0, 10.1, 9.9, 10.2, 9.8, 10.0, 10.05, 9.95]
    unsteady = _data()
    unsteady["calls"]["host"]["times_ms"] = [10.0, 14.0, 7.0, 16.0, 9.0, 12.0, 8.0, 15.0]
    for data, rc, verdict in ((steady, 0, "quiet"), (unsteady, 3, "noisy")):
        (tmp_path / "noise_probe.json").write_text(json.dumps(data))
        assert probe.main(["--report", str(tmp_path), "--quiet-below", "0.1"]) == rc
        assert f"(quiet below 10 %): {verdict}" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        probe.main(["--report", str(tmp_path), "--quiet-below", "10"])
    assert "--quiet-below must be a fraction between 0 and 1 (0.1: 10 %), got 10.0" in capsys.readouterr().err
    folder = paths.MEASUREMENTS / "noise_probe_h200"
    spreads = {i: probe.host_spread(json.loads((folder / f"probe_{i}.json").read_text())) for i in range(1, 7)}
    assert [i for i, v in spreads.items() if v < 0.1] == [1, 2, 3, 5]
    assert [f"{spreads[i]:.2f}" for i in (5, 6, 4)] == ["0.07", "0.14", "0.33"]
    assert all(0.01 < spreads[i] < 0.02 for i in (1, 2, 3))  # the docstring of host_spread quotes these
    text = " ".join((folder / "README.md").read_text().split())
    assert ("It was 1-2 % in probes 1-3 and 7 % in probe 5, right before the one quiet round. It was 14 % and 33 % in "
            "probes 6 and 4, beside noisy rounds") in text


def test_the_gated_campaigns_probes_found_the_host_quiet_three_times():
    """hook_runner/h200_p1_gated/probe_*.json: the probes that gated its rounds (13-51, calls 2 and 3), as its
    README and this folder's README read them: quiet (host loop spread below 10 %) in probes 16, 25 and 49 only,
    each right before a round (16 and 17) or too late in its call for one (49)."""
    import statistics
    from datetime import datetime

    folder = paths.MEASUREMENTS / "hook_runner" / "h200_p1_gated"
    data = {int(f.stem.split("_")[-1]): json.loads(f.read_text()) for f in folder.glob("probe_*.json")}
    assert sorted(data) == list(range(13, 52))
    spreads = {k: probe.host_spread(d) for k, d in data.items()}
    assert [k for k, v in sorted(spreads.items()) if v < 0.1] == [16, 25, 49]
    assert f"{100 * statistics.median(spreads.values()):.1f}" == "39.9"
    assert all(d["provenance"]["rounds"] == 200 for d in data.values())
    stamps = sorted(datetime.fromisoformat(d["provenance"]["timestamp"]) for d in data.values())
    assert 16 * 60 <= (stamps[-1] - stamps[0]).total_seconds() <= 18 * 60  # about 17 minutes
    text = " ".join((folder / "README.md").read_text().split())
    assert ("Only 3 of them found the host quiet: the host loop's spread was under 10 % in probes 16, 25 and 49, and "
            "its median over the 39 was 39.9 %") in text
    here = " ".join((paths.MEASUREMENTS / "noise_probe_h200" / "README.md").read_text().split())
    assert ("found the host quiet in only 3 of 39 tries over about 17 minutes; the host loop's spread had a median "
            "of 39.9 % there") in here
    usage = " ".join((paths.ROOT / "docs" / "usage.md").read_text().split())
    assert "it found the host quiet in 3 of 39 tries over 17 minutes" in usage
    log = (folder / "run.log").read_text()
    assert log.count("== round 16") == 1 and log.index("== probe 16 ") < log.index("== round 16") < \
        log.index("== probe 17 ")
