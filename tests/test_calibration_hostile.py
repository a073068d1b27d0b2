"""Hostile use of calibrations, ``fit`` and ``verify``: every bad calibration is refused where it is loaded,
naming the file, the field and what is valid; ``fit`` refuses records of different machines, drops duplicates
across files, reads what ``verify`` reads and prints a summary a person can judge; ``predict`` and ``advise``
treat a calibration without gamma alike; ``verify`` says what it is doing and how to read its table."""
from __future__ import annotations

import gzip
import json
import shutil

import pandas as pd
import pytest

import studykit
from studykit import cli as top
from studykit import paths
from studykit.perfmodel import fit, synthetic, verify
from studykit.perfmodel.advise import AdviseError
from studykit.perfmodel.calibration import Calibration, Constant, TEncodeDecode
from tests.test_fit_robust import _set

CPU = paths.MEASUREMENTS / "cpu"
GPU = paths.MEASUREMENTS / "gpu"
H200 = paths.CALIBRATIONS / "h200x2_nvlink.json"
ADVISE = ["advise", "--model", "resnet50", "--gpus", "8", "--bandwidth-gbps", "10"]
PREDICT = ["predict", "--model", "resnet50", "--gpus", "8", "--bandwidth-gbps", "10"]


def _run(capsys, argv):
    rc = top.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _good() -> dict:
    return json.loads(H200.read_text())


def _write(tmp_path, d, name="bad.json"):
    f = tmp_path / name
    f.write_text(json.dumps(d))  # NaN and inf become the NaN / Infinity tokens Python's json reads back
    return f


def _mutated(path, value) -> dict:
    d = _good()
    _set(d, path, value)
    return d


# ------------------------------------------------------------------ 1. NaN and inf in a calibration
@pytest.mark.parametrize("path, value, field", [
    ("gamma.value", float("nan"), "gamma.value"),
    ("alpha_s.value", float("inf"), "alpha_s.value"),
    ("bandwidth_gbps.value", float("nan"), "bandwidth_gbps.value"),
    ("t_comp.0.value", float("nan"), "t_comp[0].value"),
    ("t_encode_decode.0.value", float("inf"), "t_encode_decode[0].value"),
    ("bandwidth_gbps.low", float("-inf"), "bandwidth_gbps.low"),
    ("overhead.0.value", float("nan"), "overhead[0].value"),
])
def test_nan_or_inf_is_refused_at_load_naming_the_field(tmp_path, path, value, field):
    f = _write(tmp_path, _mutated(path, value))
    with pytest.raises(ValueError) as exc:
        Calibration.load(f)
    assert repr(field) in str(exc.value) and str(f) in str(exc.value)


def test_advise_with_a_nan_or_infinite_calibration_exits_2_naming_the_field(tmp_path, capsys):
    for path, value in (("gamma.value", float("nan")), ("alpha_s.value", float("inf"))):
        f = _write(tmp_path, _mutated(path, value))
        rc, out, err = _run(capsys, [*ADVISE, "--calibration", str(f)])
        assert rc == 2 and out == "" and repr(path) in err, (path, err)


def test_advise_refuses_a_nan_calibration_given_in_memory():
    cal = Calibration.load(H200)
    cal.gamma = Constant(float("nan"), "ratio", "hostile")
    with pytest.raises(AdviseError, match=r"'gamma.value' must be a number > 0"):
        studykit.advise("resnet50", gpus=8, bandwidth_gbps=10, calibration=cal, compressors=["powersgd"])


# ------------------------------------------------------------------ 2. records of different machines
def test_fit_of_a_cpu_and_an_h200_folder_is_refused_unless_allowed(tmp_path, capsys):
    rc, out, err = _run(capsys, ["fit", str(CPU), str(GPU), "--out", str(tmp_path / "c.json"), "--bootstrap", "0"])
    assert rc == 2 and "different machines" in err and "--allow-mixed" in err and not (tmp_path / "c.json").exists()


def test_fit_of_two_machines_sweeps_is_refused_unless_allowed(tmp_path, capsys):
    """Network constants from two machines' sweeps are a mix too (``verify --pool`` refuses it)."""
    argv = ["fit", str(CPU / "sweep.jsonl"), str(GPU / "sweep.jsonl"), "--out", str(tmp_path / "c.json"),
            "--bootstrap", "0"]
    rc, _, err = _run(capsys, argv)
    assert rc == 2 and "different machines" in err and "'AMD EPYC'" in err and "'NVIDIA H200'" in err
    rc, out, err = _run(capsys, [*argv, "--allow-mixed"])
    assert rc == 0 and "different machines" in err
    assert any("different machines" in w for w in Calibration.load(tmp_path / "c.json").warnings)


# ------------------------------------------------------------------ 3. duplicates across files
def test_a_copied_sweep_file_is_dropped_as_duplicates_and_the_count_said(tmp_path, capsys):
    copy = shutil.copy(CPU / "sweep.jsonl", tmp_path / "copy.jsonl")
    one = fit.fit_calibration(fit.load_frame(CPU / "sweep.jsonl"), "one", n_boot=0)
    with pytest.warns(UserWarning, match="duplicate"):
        df = fit.load_frame(CPU / "sweep.jsonl", copy)
    assert len(df) == len(fit.load_frame(CPU / "sweep.jsonl"))
    assert df.attrs["report"].n_duplicates == len(df)
    two = fit.fit_calibration(df, "two", n_boot=0)
    assert two.alpha_s.n == one.alpha_s.n and two.alpha_s.value == pytest.approx(one.alpha_s.value)
    with pytest.warns(UserWarning, match="duplicate"):
        rc, out, _ = _run(capsys, ["fit", str(CPU / "sweep.jsonl"), str(copy), "--out", str(tmp_path / "c.json"),
                                   "--bootstrap", "0", "--json"])
    assert rc == 0 and json.loads(out)["records_read"]["duplicates_dropped"] == len(df)


# ------------------------------------------------------------------ 4. a calibration without gamma
def test_predict_and_advise_both_refuse_a_calibration_without_gamma(tmp_path, capsys):
    d = _good()
    d.pop("gamma")
    d.pop("gamma_extended")
    f = _write(tmp_path, d, "nogamma.json")
    for cmd in (PREDICT, ADVISE):
        rc, out, err = _run(capsys, [*cmd, "--calibration", str(f)])
        assert rc == 2 and out == "" and "no gamma" in err and "--gamma" in err, (cmd[0], err)
        rc, out, err = _run(capsys, [*cmd, "--calibration", str(f), "--gamma", "1.05"])
        assert rc == 0, (cmd[0], err)


def test_fit_of_ddp_records_at_world_size_1_writes_gamma_1_and_says_so(tmp_path, capsys):
    recs = [r for r in synthetic.synthetic_records() if r["kind"] != "ddp"]
    recs += [{**r, "world_size": 1} for r in synthetic.synthetic_records() if r["kind"] == "ddp"][:1]
    rec = synthetic.write_jsonl(recs, tmp_path / "p1.jsonl")
    rc, _, err = _run(capsys, ["fit", str(rec), "--out", str(tmp_path / "c.json"), "--bootstrap", "0"])
    cal = Calibration.load(tmp_path / "c.json")
    assert rc == 0 and cal.gamma is not None and cal.gamma.value == 1.0 and "assumed" in cal.gamma.source
    assert "world size 1" in err and "gamma = 1 assumed" in err


# ------------------------------------------------------------------ 5. values and structure
@pytest.mark.parametrize("path, value, needle", [
    ("t_comp.0.value", -0.0525, "'t_comp[0].value' must be a number > 0"),
    ("bandwidth_gbps.unit", "Mbit/s", "'bandwidth_gbps.unit' must be 'Gbit/s'"),
    ("t_comp.0.unit", "ms", "'t_comp[0].unit' must be 's'"),
    ("gamma.value", 1e308, "'gamma.value' must be a number > 0 and <= 100"),
    ("gamma.high", 1e308, "'gamma.high' must be a number > 0 and <= 100"),
    ("overhead.0.value", -1e300, "'overhead[0].value' must be a number >= -3600"),
    ("t_comp.0.low", -0.01, "'t_comp[0].low' must be a number > 0"),
    ("alpha_s", 5, "'alpha_s' must be an object with value, unit and source"),
    ("alpha_s.unit", KeyError, "'alpha_s' lacks required field 'unit'"),
    ("t_comp", None, "'t_comp' must be a list of constants"),
    ("t_comp.0.batch_size", "64", "'t_comp[0].batch_size' must be an integer >= 1"),
    ("t_comp.0.batch_size", float("nan"), "'t_comp[0].batch_size' must be an integer >= 1"),
    ("world_size", float("nan"), "'world_size' must be an integer >= 1"),
    ("t_comp.0.model", KeyError, "'t_comp[0]' lacks required field 'model'"),
    ("t_encode_decode.0.compressor", KeyError, "'t_encode_decode[0]' lacks required field 'compressor'"),
    ("path_overhead.0.mode", "sideways", "'path_overhead[0].mode' must be one of"),
])
def test_bad_values_are_refused_naming_file_field_and_what_is_valid(tmp_path, path, value, needle):
    f = _write(tmp_path, _mutated(path, value))
    with pytest.raises(ValueError) as exc:
        Calibration.load(f)
    assert needle in str(exc.value) and str(f) in str(exc.value)


@pytest.mark.parametrize("text, needle", [("5", "must be a JSON object, got int"),
                                          ("[1, 2]", "must be a JSON object, got list"),
                                          ("null", "must be a JSON object, got NoneType")])
def test_a_file_that_is_not_an_object_is_refused(tmp_path, text, needle):
    f = tmp_path / "c.json"
    f.write_text(text)
    with pytest.raises(ValueError, match=needle):
        Calibration.load(f)


@pytest.mark.parametrize("cmd", [PREDICT, ADVISE])
def test_predict_and_advise_exit_2_on_a_negative_t_comp(tmp_path, capsys, cmd):
    f = _write(tmp_path, _mutated("t_comp.0.value", -0.0525))
    rc, out, err = _run(capsys, [*cmd, "--calibration", str(f)])
    assert rc == 2 and out == "" and "'t_comp[0].value'" in err and "Traceback" not in err


def test_two_entries_at_one_parameter_value_are_refused_and_never_divide_by_zero(tmp_path):
    d = _good()
    d["t_encode_decode"].append(dict(d["t_encode_decode"][0]))
    f = _write(tmp_path, d)
    with pytest.raises(ValueError, match=r"'t_encode_decode\[\d+\]' repeats 't_encode_decode\[0\]'"):
        Calibration.load(f)
    # built in memory, the look-up interpolates between distinct parameter values only
    e = [TEncodeDecode(v, "s", "t", compressor="powersgd", params={"rank": r}, model="resnet50")
         for v, r in ((0.01, 2), (0.011, 2), (0.03, 8))]
    cal = Calibration("dup", t_encode_decode=e)
    v, _, how = cal.t_encode_decode_s("powersgd", {"rank": 4}, "resnet50")
    assert "interpolated" in how and 0.01 < v < 0.03


# ------------------------------------------------------------------ 6. one reader rule for fit and verify
def test_fit_reads_jsonl_gz_in_folders_as_verify_does(tmp_path):
    folder = tmp_path / "recs"
    folder.mkdir()
    text = (CPU / "sweep.jsonl").read_bytes()
    (folder / "sweep.jsonl.gz").write_bytes(gzip.compress(text))
    df = fit.load_frame(folder)
    assert len(df) == len(fit.load_frame(CPU / "sweep.jsonl")) > 0
    assert len(verify.load_platform(folder).sweep) == len(df)


# ------------------------------------------------------------------ 7. fit and verify output
def test_fit_prints_a_readable_summary_and_json_behind_a_flag(tmp_path, capsys):
    argv = ["fit", str(CPU / "sweep.jsonl"), str(GPU / "sweep.jsonl"), "--allow-mixed", "--out",
            str(tmp_path / "c.json"), "--bootstrap", "20"]
    rc, out, _ = _run(capsys, argv)
    assert rc == 0
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)
    cal = Calibration.load(tmp_path / "c.json")
    row = next(line for line in out.splitlines() if line.startswith("alpha_s "))
    assert f" {cal.alpha_s.n} " in row
    assert f"{cal.alpha_s.r2:.2f}" in row and "Eq. 1" in row and "[" in row
    assert cal.alpha_s.r2 < fit.MIN_R2
    assert "R^2 below 0.9" in out and "unreliable" in out
    assert "duplicate(s) dropped" in out and str(tmp_path / "c.json") in out
    rc, out, _ = _run(capsys, [*argv, "--json"])
    assert rc == 0 and json.loads(out)["written"] == str(tmp_path / "c.json")


def test_fit_summary_lists_the_constants_of_a_good_fit_without_the_poor_fit_line(tmp_path, capsys):
    rec = synthetic.write_jsonl(synthetic.synthetic_records(), tmp_path / "r.jsonl")
    rc, out, _ = _run(capsys, ["fit", str(rec), "--out", str(tmp_path / "c.json"), "--bootstrap", "20"])
    cal = Calibration.load(tmp_path / "c.json")
    assert rc == 0 and "R^2 below" not in out
    for name in ("alpha_s", "bandwidth_gbps", "gamma", "t_comp", "t_encode_decode"):
        assert any(line.startswith(name) for line in out.splitlines()), name
    assert f"{cal.bandwidth_gbps.value:.4g} Gbit/s" in out


def _summary_frame() -> pd.DataFrame:
    return pd.DataFrame([
        {"platform": "gpu", "group": "syncSGD", "variant": "paper", "n": 20, "median_abs_rel_error": 0.02,
         "max_abs_rel_error": 0.05, "mean_rel_error": 0.0, "worst_config": "vgg19 b32"},
        {"platform": "throttle_long_name", "group": "compressors (blocking hook)", "variant": "extended", "n": 148,
         "median_abs_rel_error": 0.393, "max_abs_rel_error": 12.5, "mean_rel_error": 0.1, "worst_config": "mlp"}])


def test_verify_summary_columns_are_aligned_and_say_how_to_read_them():
    text = verify.cli._fmt_summary(_summary_frame())
    lines = text.splitlines()
    head = lines[0]
    rows = [line for line in lines[1:] if line.startswith(("gpu", "throttle"))]
    assert len(rows) == 2
    for col in (" n ", " median|e| ", " max|e| "):  # right-aligned under their headers
        end = head.index(col) + len(col) - 1
        assert all(r[end - 1] != " " and r[end] == " " for r in rows), (col, text)
    within = [r[head.index("within"):].split()[0] for r in rows]
    assert within == ["yes", "no"], text  # 2 % / 5 % inside syncSGD's 3 % / 10 %; 39 % / 1250 % outside 5 % / 15 %
    assert "within the model's stated error" in text


def test_verify_reports_progress_per_platform_on_stderr(tmp_path, capsys):
    synthetic.write_jsonl(synthetic.synthetic_records(), tmp_path / "syn" / "r.jsonl")
    rc = verify.main(["verify", "--records", str(tmp_path / "syn"), "--out", str(tmp_path / "v"), "--no-hook"])
    cap = capsys.readouterr()
    assert rc == 0
    assert "syn" in cap.err and "verify:" in cap.err and "platform 1/1" in cap.err
    assert "within the model's stated error" in cap.out
    rc = verify.main(["verify", "--records", str(tmp_path / "syn"), "--out", str(tmp_path / "v"), "--quiet"])
    assert rc == 0 and capsys.readouterr().err == ""
