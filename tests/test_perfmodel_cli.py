"""``python -m studykit predict`` and ``fit``: JSON output, bad arguments exit 2 naming valid choices."""
import json

import pytest

from studykit import cli as top
from studykit import compressors
from studykit.perfmodel import cli, synthetic
from studykit.perfmodel.calibration import Calibration
from studykit.perfmodel.model import Hardware, Workload, predict
from studykit.perfmodel.whatif import paper_calibration


def _run(capsys, argv):
    rc = top.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_predict_json(capsys):
    if "powersgd" not in compressors.available():
        pytest.skip("powersgd not registered yet")
    rc, out, _ = _run(capsys, ["predict", "--model", "resnet101", "--batch-size", "64", "--gpus", "8", "16", "64",
                               "--bandwidth-gbps", "1", "10", "25", "--compressor", "powersgd", "--param", "rank=4",
                               "--json"])
    assert rc == 0
    d = json.loads(out)
    assert len(d["points"]) == 9 and d["params"] == {"rank": 4}
    pt = next(p for p in d["points"] if p["world_size"] == 64 and p["bandwidth_gbps"] == 10)
    cal = paper_calibration()
    pr = predict(Workload("resnet101", 64), Hardware.from_calibration(cal, bandwidth_gbps=10.0), 64, "powersgd",
                 {"rank": 4}, calibration=cal)
    assert pt["speedup_over_syncsgd"] == pytest.approx(float(pr.sync["iteration_s"] / pr.compressed["iteration_s"]))
    assert pt["t_obs_speedup_over_syncsgd"] == pytest.approx(float(pr.speedup))
    assert pt["compressed"]["total_ms"] == pytest.approx(float(pr.compressed["total_s"]) * 1e3)
    assert set(pt["syncsgd"]) >= {"total_ms", "compute_ms", "exposed_comm_ms"}
    assert {c["op"] for c in d["plans"]["64"]} == {"all_reduce"}


def test_predict_prints_a_table_by_default(capsys):
    """Without --json the answer is a table: one row per world size and bandwidth, the numbers of the JSON."""
    argv = ["predict", "--model", "resnet101", "--gpus", "64", "--bandwidth-gbps", "10", "--compressor", "powersgd",
            "--param", "rank=4"]
    rc, table, _ = _run(capsys, argv)
    assert rc == 0 and "x syncSGD" in table
    _, out, _ = _run(capsys, [*argv, "--json"])
    pt = json.loads(out)["points"][0]
    row = next(line for line in table.splitlines() if line.split()[:2] == ["64", "10"])
    assert f"{pt['syncsgd']['iteration_ms']:.1f}" in row and f"{pt['speedup_over_syncsgd']:.2f}x" in row


def test_predict_syncsgd_only_with_overrides(capsys):
    rc, out, _ = _run(capsys, ["predict", "--model", "vgg19", "--t-comp-ms", "300", "--gpus", "4", "--json"])
    assert rc == 0
    d = json.loads(out)
    assert "compressed" not in d["points"][0] and d["inputs"]["t_comp"] == "given"


@pytest.mark.parametrize("argv,needle", [
    (["predict", "--model", "resnet10"], "unknown model 'resnet10'; did you mean 'resnet101'? available: "),
    (["predict", "--model", "resnet50", "--compressor", "zip"], "invalid choice: 'zip'"),
    (["predict", "--model", "resnet50", "--compressor", "powersgd", "--param", "rnk=4"], "valid: "),
    (["predict", "--model", "resnet50", "--gpus", "0"], "must be an integer >= 1"),
    (["predict", "--model", "resnet50", "--t-encode-decode-ms", "-100"], "--t-encode-decode-ms: must be a number >= 0"),
    (["predict", "--model", "resnet50", "--t-encode-decode-ms", "nan"], "--t-encode-decode-ms: must be a number >= 0"),
    (["predict", "--model", "resnet50", "--bandwidth-gbps", "inf"], "--bandwidth-gbps: must be a number > 0"),
    (["predict", "--model", "resnet50", "--alpha-s", "-1"], "--alpha-s: must be a number >= 0"),
    (["predict", "--model", "vgg19"], "no T_comp for model 'vgg19'"),
    (["predict", "--model", "resnet50", "--param", "rank=4"], "--param needs --compressor"),
    (["predict", "--model", "resnet50", "--calibration", "nope.json"], "not found"),
])
def test_bad_predict_args_exit_2(capsys, argv, needle):
    rc, _, err = _run(capsys, argv)
    assert rc == 2
    assert needle in err


def test_unknown_subcommand(capsys):
    assert cli.main(["fitt"]) == 2
    assert "predict, fit, advise" in capsys.readouterr().err


def test_fit_cli_round_trip(capsys, tmp_path):
    rec = synthetic.write_jsonl(synthetic.synthetic_records(), tmp_path / "r.jsonl")
    out = tmp_path / "cal" / "mine.json"
    rc, text, _ = _run(capsys, ["fit", str(rec), "--out", str(out), "--bootstrap", "20", "--json"])
    assert rc == 0
    cal = Calibration.load(out)
    assert cal.name == "mine" and cal.alpha_s.value == pytest.approx(synthetic.Truth().alpha_s, rel=0.05)
    assert json.loads(text)["written"] == str(out)


def test_fit_cli_errors(capsys, tmp_path):
    rc, _, err = _run(capsys, ["fit", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "c.json")])
    assert rc == 2 and "not found" in err
    rows = [{"kind": "sweep", "op": "all_reduce", "world_size": 2, "size_bytes": 1000, "ms_median": 1.0}]
    rec = synthetic.write_jsonl(rows, tmp_path / "one.jsonl")
    rc, _, err = _run(capsys, ["fit", str(rec), "--out", str(tmp_path / "c.json")])
    assert rc == 2 and "one message size only" in err
    rc, _, _ = _run(capsys, ["fit", str(rec), "--out", str(tmp_path / "c.json"), "--stat", "ms_mode"])
    assert rc == 2


def test_fit_cli_refuses_committed_data_and_reports_what_it_read(capsys, tmp_path):
    from studykit import paths

    rec = synthetic.write_jsonl(synthetic.synthetic_records(), tmp_path / "r.jsonl")
    target = paths.CALIBRATIONS / "should_not_be_written.json"
    rc, _, err = _run(capsys, ["fit", str(rec), "--out", str(target), "--bootstrap", "0"])
    assert rc == 2 and "--overwrite-committed" in err and not target.exists()
    with open(rec, "a") as fh:
        fh.write("{cut\n")
    rc, text, err = _run(capsys, ["fit", str(rec), "--out", str(tmp_path / "c.json"), "--bootstrap", "0", "--json"])
    read = json.loads(text)["records_read"]
    assert rc == 0 and len(read["damaged_lines"]) == 1 and read["records"] == len(synthetic.synthetic_records())


def test_fit_cli_says_gamma_was_not_fitted(capsys, tmp_path):
    recs = [r for r in synthetic.synthetic_records() if r["kind"] != "ddp"]
    recs += [{**r, "world_size": 1} for r in synthetic.synthetic_records() if r["kind"] == "ddp"][:1]
    rec = synthetic.write_jsonl(recs, tmp_path / "p1.jsonl")
    rc, text, err = _run(capsys, ["fit", str(rec), "--out", str(tmp_path / "c.json"), "--bootstrap", "0", "--json"])
    assert rc == 0 and "gamma" in json.loads(text)["not_fitted"] and "gamma" in err


@pytest.mark.parametrize("argv, needle", [(["--bootstrap", "-1"], "--bootstrap"), (["--seed", "x"], "--seed")])
def test_fit_cli_bad_numbers(capsys, tmp_path, argv, needle):
    rec = synthetic.write_jsonl(synthetic.synthetic_records(), tmp_path / "r.jsonl")
    rc, _, err = _run(capsys, ["fit", str(rec), "--out", str(tmp_path / "c.json"), *argv])
    assert rc == 2 and needle in err
