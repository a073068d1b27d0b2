"""Issue 17: the kit under careless or hostile input.

Every case ends in a clear error (non-zero exit and a message naming the problem, never a Python
traceback or a hang) or in a correct result. Commands are driven through ``studykit.cli.main``
(the ``python -m studykit`` entry point) in-process, so each case costs milliseconds; one test runs
the real entry point in a subprocess to show the error path prints no traceback there either.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import tarfile
import warnings

import numpy as np
import pytest

from studykit import cli, paths
from studykit.measure import records as R
from studykit.train import data

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def run_cli(argv, capsys) -> tuple[int, str]:
    """``python -m studykit ARGV`` in-process: (exit status, stderr). argparse errors exit via SystemExit."""
    try:
        rc = cli.main(list(argv))
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


def refused(argv, capsys, *needles) -> str:
    rc, err = run_cli(argv, capsys)
    assert rc != 0, f"{argv} was accepted"
    for n in needles:
        assert n.lower() in err.lower(), f"{argv}: {n!r} not in {err!r}"
    return err


# ---------------------------------------------------------------- 1. no code runs from a CIFAR-10 copy
class _Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def _cifar_tree(root, evil=None):
    d = root / data.CIFAR_DIR
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in (*data.CIFAR_TRAIN, data.CIFAR_TEST):
        obj = {b"batch_label": b"x", b"labels": rng.integers(0, 10, 4).tolist(),
               b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"filenames": [b"f"] * 4}
        if name == evil:
            obj = {b"data": _Evil(), b"labels": [1]}
        (d / name).write_bytes(pickle.dumps(obj, protocol=2))
    return d


def test_crafted_cifar_batch_cannot_run_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = _cifar_tree(tmp_path / "c", evil="data_batch_1")
    with pytest.raises(data.DataError, match=r"data_batch_1 was refused.*posix.system|data_batch_1 was refused.*os"):
        data.cifar10(root)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("payload", [
    b"cbuiltins\neval\n(S'1+1'\ntR.",  # protocol 0 GLOBAL + REDUCE
    b"\x80\x04\x95\x1a\x00\x00\x00\x00\x00\x00\x00\x8c\x08builtins\x94\x8c\x04exec\x94\x93\x94.",
    pickle.dumps(np.array([object()], dtype=object)),  # object arrays are not CIFAR data
])
def test_cifar_unpickler_admits_only_cifar_globals(tmp_path, payload):
    d = _cifar_tree(tmp_path / "c")
    (d / "test_batch").write_bytes(payload)
    with pytest.raises(data.DataError, match="refused|not a readable pickle"):
        data.cifar10(d)


def test_genuine_cifar_layout_still_loads_from_folder_and_archive(tmp_path):
    d = _cifar_tree(tmp_path / "c")
    arc = tmp_path / data.CIFAR_ARCHIVE
    with tarfile.open(arc, "w:gz") as tar:
        tar.add(d, arcname=data.CIFAR_DIR)
    a, b = data.cifar10(d), data.cifar10(arc)
    assert a.x_train.shape == (20, 3, 32, 32) and np.array_equal(a.y_test.numpy(), b.y_test.numpy())


def test_train_cli_refuses_crafted_cifar_without_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = _cifar_tree(tmp_path / "c", evil="data_batch_1")
    refused(["train", "--dataset", "cifar10", "--data-root", str(root), "--methods", "none", "--epochs", "1"],
            capsys, "refused", "data_batch_1")
    assert not (tmp_path / "pwned").exists()


# ---------------------------------------------------------------- 3. a valid last record is kept
def test_repair_keeps_a_complete_last_record_without_newline(tmp_path):
    p = tmp_path / "r.jsonl"
    recs = [{"schema": 1, "kind": "tcomp", "config_id": c, "status": "ok"} for c in "ab"]
    p.write_text(json.dumps(recs[0]) + "\n" + json.dumps(recs[1]))  # no trailing newline
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is removed, so nothing to warn about
        w = R.RecordWriter(p)
    w.write({"kind": "tcomp", "config_id": "c", "status": "ok"})
    assert [r["config_id"] for r in R.load_records(p)] == ["a", "b", "c"]


def test_repair_still_drops_a_cut_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"schema": 1, "kind": "tcomp", "config_id": "a", "status": "ok"}\n{"schema": 1, "ki')
    with pytest.warns(UserWarning, match="partial last line"):
        R.RecordWriter(p)
    assert p.read_text().endswith("}\n") and len(R.load_records(p)) == 1


# ---------------------------------------------------------------- 4. one record reader, one policy
def _rec(cid, status="ok", **kw):
    return {"schema": 1, "kind": "sweep", "config_id": cid, "status": status, "ms_median": 1.0, "gpu": "g",
            "host": "h", **kw}


def _write(p, lines):
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return p


def test_damaged_lines_are_warned_with_file_and_line_and_counted(tmp_path):
    p = _write(tmp_path / "r.jsonl", [_rec("a"), '{"schema": 1, "ki', "[1, 2]", _rec("b")])
    with pytest.warns(UserWarning, match=r"r\.jsonl:2: skipping an unparsable line"):
        recs = R.load_records(p)
    assert [r["config_id"] for r in recs] == ["a", "b"]
    assert recs.report.n_damaged == 2 and [d[1] for d in recs.report.damaged] == [2, 3]
    rep = R.LoadReport()
    R.load_records(p, report=rep)
    assert rep.n_damaged == 2 and rep.records == 2 and "2 damaged" in rep.summary()


def test_other_schema_is_refused_naming_file_and_line(tmp_path):
    seconds = _rec("a", schema=2, ms_median=0.001)  # e.g. a future schema in seconds
    p = _write(tmp_path / "r.jsonl", [_rec("b"), seconds])
    with pytest.raises(R.RecordError, match=r"r\.jsonl:2: record schema 2 is not the schema 1"):
        R.load_records(p)
    _write(p, [_rec("b", schema="1")])
    with pytest.raises(R.RecordError, match="schema '1'"):
        R.load_records(p)


def test_missing_schema_is_warned_and_counted(tmp_path):
    bare = _rec("a")
    del bare["schema"]
    p = _write(tmp_path / "r.jsonl", [bare])
    with pytest.warns(UserWarning, match=r"r\.jsonl:1: 1 record\(s\) without a 'schema' field"):
        recs = R.load_records(p)
    assert recs.report.unversioned == 1


def test_duplicates_are_kept_once_counted_and_reported(tmp_path):
    p = _write(tmp_path / "r.jsonl", [_rec("a"), _rec("b"), _rec("a"), _rec("a", network={"rate_gbps": 1})])
    with pytest.warns(UserWarning, match=r"1 duplicate record\(s\) dropped.*r\.jsonl:3 repeats .*r\.jsonl:1"):
        recs = R.load_records(p)
    assert len(recs) == 3 and recs.report.n_duplicates == 1  # another network is another configuration
    assert len(R.load_records(p, dedupe=False)) == 4
    # across files of one folder too (two runs into two files of one platform)
    _write(tmp_path / "s.jsonl", [_rec("b")])
    assert len(R.load_records(tmp_path)) == 3


def test_missing_source_is_an_error_unless_allowed(tmp_path):
    with pytest.raises(R.RecordError, match="no records at"):
        R.load_records(tmp_path / "nope.jsonl")
    assert R.load_records(tmp_path / "nope.jsonl", missing_ok=True) == []
    assert R.done_ids(tmp_path / "nope.jsonl") == set()


def test_training_readers_use_the_one_reader(tmp_path):
    from studykit.train import analysis, launch

    ep = {"kind": "train_epoch", "run_id": "r1", "method": "none", "epoch": 1}
    p = _write(tmp_path / "t.jsonl", [ep, "{cut", ep])
    with pytest.warns(UserWarning, match=r"t\.jsonl:2: skipping an unparsable line"):
        runs = analysis.load_runs(p)
    assert len(runs) == 1 and runs.report.n_damaged == 1 and runs.report.n_duplicates == 1
    assert len(launch.read_records(p)) == 1


def test_report_reader_uses_the_one_reader(tmp_path):
    from studykit.measure import report

    p = _write(tmp_path / "r.jsonl", [_rec("a"), "{cut", _rec("a")])
    with pytest.warns(UserWarning, match="unparsable"):
        df = report.load_frame(p)
    assert len(df) == 1


# ---------------------------------------------------------------- 5. compressor API: booleans, world sizes
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from studykit import compressors as C  # noqa: E402
from studykit.compressors.base import MAX_WORLD_SIZE, CompressorError, ErrorFeedback  # noqa: E402
from studykit.compressors.registry import FALSE_WORDS, TRUE_WORDS  # noqa: E402


@pytest.mark.parametrize("word", [*FALSE_WORDS, "No", "OFF", False, 0])
def test_error_feedback_false_words_turn_it_off(word):
    assert not isinstance(C.get("topk", error_feedback=word), ErrorFeedback)


@pytest.mark.parametrize("word", [*TRUE_WORDS, "Yes", "ON", True, 1])
def test_error_feedback_true_words_turn_it_on(word):
    assert isinstance(C.get("topk", error_feedback=word), ErrorFeedback)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=8), st.integers(), st.floats(), st.none(), st.lists(st.booleans(), max_size=2)))
def test_booleans_are_parsed_strictly(value):
    words = TRUE_WORDS + FALSE_WORDS
    ok = isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)) or \
        (isinstance(value, str) and value.strip().lower() in words)
    if ok:
        comp = C.get("topk", error_feedback=value)
        assert isinstance(comp, ErrorFeedback) == (str(value).strip().lower() in ("yes", "true", "1", "on"))
    else:
        with pytest.raises(CompressorError, match=r"'error_feedback' must be a boolean.*true/false"):
            C.get("topk", error_feedback=value)


def test_spec_strings_parse_booleans_strictly():
    with pytest.raises(CompressorError, match="allow_nonfinite"):
        C.parse_spec("topk:allow_nonfinite=perhaps")
    assert C.parse_spec("topk:error_feedback=no")[1] == {"error_feedback": "no"}


@pytest.mark.parametrize("p", [1e9, 10**9, 0, -1, 2.5, True, "4", None, MAX_WORLD_SIZE + 1])
def test_unreasonable_world_sizes_are_refused(p):
    comp = C.get("topk", ratio=0.01)
    with pytest.raises(CompressorError, match=rf"world_size must be an integer in \[1, {MAX_WORLD_SIZE}\]"):
        comp.wire_bytes([100], world_size=p)


def test_large_world_sizes_still_work():
    assert C.get("powersgd", rank=1).wire_bytes([[8, 8]], world_size=65536) > 0
    assert C.get("fp16").wire_bytes([64], world_size=np.int64(65536)) == 128
