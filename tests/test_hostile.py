"""The kit under careless or hostile input.

Every case ends in a clear error (non-zero exit and a message naming the problem, never a Python
traceback or a hang) or in a correct result. Commands are driven through ``studykit.cli.main``
(the ``python -m studykit`` entry point) in-process, so each case costs milliseconds; one test runs
the real entry point in a subprocess to show the error path prints no traceback there either.
"""
from __future__ import annotations

import json
import os
import pickle
import re
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


@pytest.mark.slow
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
from studykit.compressors.base import MAX_WORLD_SIZE, CompressorError  # noqa: E402
from studykit.compressors.registry import FALSE_WORDS, TRUE_WORDS  # noqa: E402


@pytest.mark.parametrize("word", [*FALSE_WORDS, "No", "OFF", False, 0])
def test_error_feedback_false_words_turn_it_off(word):
    assert not C.get("topk", error_feedback=word).error_feedback


@pytest.mark.parametrize("word", [*TRUE_WORDS, "Yes", "ON", True, 1])
def test_error_feedback_true_words_turn_it_on(word):
    assert C.get("topk", error_feedback=word).error_feedback


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=8), st.integers(), st.floats(), st.none(), st.lists(st.booleans(), max_size=2)))
def test_booleans_are_parsed_strictly(value):
    words = TRUE_WORDS + FALSE_WORDS
    ok = isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)) or \
        (isinstance(value, str) and value.strip().lower() in words)
    if ok:
        comp = C.get("topk", error_feedback=value)
        assert comp.error_feedback == (str(value).strip().lower() in ("yes", "true", "1", "on"))
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


# ---------------------------------------------------------------- 2. nothing written into committed data/notebooks
def test_check_writable_output_guards_the_committed_trees(tmp_path):
    for inside in (paths.DATA / "verification", paths.DATA, paths.NOTEBOOKS, paths.DATA / "x" / ".." / "y"):
        with pytest.raises(paths.OutputError, match="--overwrite-committed"):
            paths.check_writable_output(inside)
        assert paths.check_writable_output(inside, True) == inside.resolve()
    assert paths.check_writable_output(tmp_path / "new") == (tmp_path / "new").resolve()
    assert paths.check_writable_output(paths.REPORTS / "x") == (paths.REPORTS / "x").resolve()
    with pytest.raises(paths.OutputError, match="not a regular file"):
        paths.check_writable_output("/dev/null", file=True)


@pytest.mark.parametrize("argv", [
    ["verify", "--out", str(paths.DATA / "verification")],
    ["notebooks", "--out", str(paths.NOTEBOOKS)],
    ["bench", "--out-dir", str(paths.DATA / "benchmarks" / "h200")],
    ["profile", "--out", str(paths.DATA / "measurements" / "cpu" / "profile.jsonl")],
    ["sweep", "--out", str(paths.DATA / "measurements" / "cpu" / "sweep.jsonl")],
    ["train", "--out", str(paths.DATA / "training" / "cpu")],
])
def test_commands_refuse_to_write_into_committed_trees(argv, capsys):
    before = {p: p.stat().st_mtime_ns for p in (paths.DATA.rglob("*") if paths.DATA.exists() else [])}
    refused(argv, capsys, "committed", "--overwrite-committed")
    after = {p: p.stat().st_mtime_ns for p in (paths.DATA.rglob("*") if paths.DATA.exists() else [])}
    assert before == after


def test_defaults_go_to_reports():
    from studykit.measure import bench
    from studykit.perfmodel import verify

    assert str(paths.REPORTS) in bench.build_parser().get_default("out_dir")
    assert verify.build_parser().get_default("out") == str(paths.REPORTS / "verification")


def test_misspelt_notebooks_dir_leaves_summary_alone(tmp_path, capsys):
    out = tmp_path / "reports"
    out.mkdir()
    (out / "summary.json").write_text('{"notebooks": [{"notebook": "tour"}]}')
    refused(["notebooks", "--notebooks-dir", str(tmp_path / "notebok"), "--out", str(out)], capsys, "no notebooks")
    assert json.loads((out / "summary.json").read_text())["notebooks"] == [{"notebook": "tour"}]


# ---------------------------------------------------------------- 5. numbers checked at the command line
@pytest.mark.parametrize("argv,needle", [
    (["train", "--epochs", "0"], "--epochs: must be an integer >= 1"),
    (["train", "--batch-size", "0"], "--batch-size: must be an integer >= 1"),
    (["train", "--limit-train", "0"], "--limit-train: must be an integer >= 1"),
    (["train", "--target-acc", "5"], "--target-acc: must be a number > 0 and <= 1"),
    (["train", "--lr", "nan"], "--lr: must be a number > 0 (finite)"),
    (["train", "--world-size", "0"], "--world-size: must be an integer in [1, 1024]"),
    (["train", "--device", "meta"], "device 'meta' is not supported"),
    (["train", "--device", "gpu7"], "is not a device"),
    (["train", "--methods", "topk:error_feedback=maybe"], "must be a boolean"),
    (["ddp", "--timeout-s", "inf"], "--timeout-s: must be a number > 0 (finite)"),
    (["sweep", "--timeout-s", "-1"], "--timeout-s: must be a number > 0"),
    (["sweep", "--factor", "1"], "--factor: must be an integer >= 2"),
    (["sweep", "--sizes", "0"], "--sizes: must be a size >= 1"),
    (["profile", "--copy-bytes", "0"], "--copy-bytes: must be a size >= 1"),
    (["profile", "--device", "meta"], "device 'meta' is not supported"),
    (["tcomp", "--iters", "1e3"], "--iters: must be an integer >= 1"),
    (["bench", "--ddp-iters", "0"], "--ddp-iters: must be an integer >= 1"),
    (["bench", "--iters", "-5"], "--iters: must be an integer >= 1"),
    (["bench", "--budget-s", "inf"], "--budget-s: must be a number > 0 (finite)"),
    (["notebooks", "--timeout", "0"], "--timeout: must be an integer >= 1"),
])
def test_bad_numbers_are_refused_naming_argument_and_range(argv, needle, capsys):
    refused(argv, capsys, needle)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.integers(max_value=0), st.sampled_from(["inf", "-inf", "nan", "1.5", "", "x", "1e400"])))
def test_train_epochs_property(capsys, value):
    refused(["train", "--epochs", str(value)], capsys, "--epochs")


def test_trainconfig_validates_for_api_callers():
    from studykit.train import TrainConfig

    for kw, needle in ((dict(epochs=0), "epochs must be an integer >= 1"),
                       (dict(batch_size=2.5), "batch_size must be an integer >= 1"),
                       (dict(limit_train=0), "limit_train must be None or an integer >= 1"),
                       (dict(target_acc=5), r"target_acc must be None or a fraction in \(0, 1\]"),
                       (dict(lr=float("inf")), "lr must be a finite number > 0"),
                       (dict(device="meta"), "device 'meta' is not supported")):
        with pytest.raises(ValueError, match=needle):
            TrainConfig(**kw)


# ---------------------------------------------------------------- 6. measurements neither lost nor blocked
def test_records_refuse_non_regular_outputs_instead_of_hanging(tmp_path, capsys):
    with pytest.raises(R.RecordError, match="not a regular file"):
        R.RecordWriter("/dev/null")  # (/dev/stdout is a file under pytest; a tty or pipe in use)
    os.mkfifo(tmp_path / "fifo.jsonl")
    refused(["tcomp", "--out", str(tmp_path / "fifo.jsonl")], capsys, "not a regular file")
    refused(["profile", "--out", "/dev/null"], capsys, "not a regular file")
    refused(["bench", "--out-dir", str(tmp_path / "fifo.jsonl")], capsys, "not a folder")


def test_bench_summary_of_nothing_fails(tmp_path, capsys):
    refused(["bench", "--summary", str(tmp_path / "nonexistent")], capsys, "no records at")
    (tmp_path / "empty").mkdir()
    refused(["bench", "--summary", str(tmp_path / "empty")], capsys, "no records in")


def test_bench_retry_errors_measures_error_records_again(tmp_path):
    from studykit.measure import bench

    out = tmp_path / "b"
    argv = ["bench", "--model", "mlp_small", "--compressors", "fp16", "--out-dir", str(out), "--iters", "2",
            "--min-time-s", "0", "--warmup", "1", "--quiet", "--no-split"]
    assert bench.main(argv) == 0
    recs = R.load_records(out / "codecs.jsonl")
    for r in recs:
        if r["kind"] == "bench":
            r.update(status="error", reason="RuntimeError: pretend", ms_median=None)
    _write(out / "codecs.jsonl", recs)
    assert bench.main(argv) == 0  # errors count as done: nothing measured again
    assert all(r["status"] == "error" for r in R.load_records(out / "codecs.jsonl") if r["kind"] == "bench")
    assert bench.main([*argv, "--retry-errors"]) == 0
    bench_recs = [r for r in R.load_records(out / "codecs.jsonl") if r["kind"] == "bench"]
    assert bench_recs and all(r["status"] == "ok" for r in bench_recs)


# ---------------------------------------------------------------- 7. notebook parameters checked before a kernel
def _nb(path, params_src):
    import nbformat

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(params_src)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# t"), cell, nbformat.v4.new_code_cell("raise SystemExit('ran')")]
    nbformat.write(nb, str(path))
    return path


@pytest.mark.parametrize("profile,needle", [
    ("tiny:\n  scael: 2.0\n", "notebook 'tiny' has no parameter 'scael' (its parameters: scale, n, name, flag"),
    ("tiyn:\n  scale: 2.0\n", "unknown notebook 'tiyn'"),
    ("tiny:\n  n: 2.5\n", "notebook 'tiny' parameter 'n' expects int, got float 2.5"),
    ("tiny:\n  n: true\n", "parameter 'n' expects int, got bool"),
    ("tiny:\n  scale: '2'\n", "parameter 'scale' expects float, got str '2'"),
    ("tiny:\n  flag: 1\n", "parameter 'flag' expects bool, got int 1"),
    ("tiny:\n  name: null\n", "parameter 'name' expects str, got NoneType"),
    ("tiny: [1]\n", "expected a mapping of notebook name"),
])
def test_notebook_parameters_are_checked_against_the_parameters_cell(tmp_path, capsys, profile, needle,
                                                                     monkeypatch):
    src = tmp_path / "nbs"
    src.mkdir()
    _nb(src / "tiny.ipynb", "scale: float = 1.0  # x\nn: int = 1\nname: str = 'a'\nflag: bool = False\n")
    (tmp_path / "p.yaml").write_text(profile)
    import papermill

    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: pytest.fail("a kernel started"))
    refused(["notebooks", "--notebooks-dir", str(src), "--params", str(tmp_path / "p.yaml"), "--out",
             str(tmp_path / "out"), "--no-html"], capsys, needle)
    assert not (tmp_path / "out" / "summary.json").exists()


def test_run_one_checks_parameters_before_a_kernel(tmp_path, monkeypatch):
    from studykit.nbtools import runner as notebooks

    nb = _nb(tmp_path / "tiny.ipynb", "n: int = 1\n")
    import papermill

    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: pytest.fail("a kernel started"))
    with pytest.raises(notebooks.ParameterError, match="'tiny' parameter 'n' expects int, got str"):
        notebooks.run_one(nb, {"n": "3"}, tmp_path / "out")
    assert notebooks.parameters(nb) == {"n": "int"}


def test_committed_profiles_pass_the_check():
    from studykit.nbtools import runner as notebooks

    nbs = notebooks.discover()
    for name in ("smoke", "full"):
        notebooks.check_profile(notebooks.load_profile(paths.PARAMS / f"{name}.yaml"), nbs, name)


# ---------------------------------------------------------------- the real entry point prints no traceback
def test_entry_point_prints_a_message_not_a_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "studykit", "bench", "--summary", str(tmp_path / "none")],
                       capture_output=True, text=True, cwd=paths.ROOT, timeout=120)
    assert r.returncode == 2 and "no records at" in r.stderr and "Traceback" not in r.stderr


def test_out_dev_stdout_is_refused_not_hung():
    r = subprocess.run([sys.executable, "-m", "studykit", "tcomp", "--models", "mlp_small", "--out", "/dev/stdout"],
                       capture_output=True, text=True, cwd=paths.ROOT, timeout=120)
    assert r.returncode == 2 and "not a regular file" in r.stderr and "Traceback" not in r.stderr


# ---------------------------------------------------------------- property-based: arbitrary bytes in, clear errors out
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.binary(max_size=40), st.just(json.dumps(_rec("a")).encode()),
                          st.just(json.dumps(_rec("b", schema=3)).encode())), max_size=6))
def test_load_records_on_arbitrary_lines(tmp_path, lines):
    p = tmp_path / "r.jsonl"
    p.write_bytes(b"\n".join(lines))
    try:
        recs = R.load_records(p)
    except R.RecordError as exc:
        assert "schema" in str(exc) and "r.jsonl:" in str(exc)
        return
    rep = recs.report
    assert len(recs) + rep.n_damaged + rep.n_duplicates + rep.superseded <= len(b"\n".join(lines).split(b"\n"))
    assert all(isinstance(r, dict) for r in recs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=200))
def test_cifar_batch_on_arbitrary_bytes(tmp_path, raw):
    try:
        data._cifar_batch(raw, "batch")
    except data.DataError as exc:
        assert "cifar10: batch" in str(exc)


# ---------------------------------------------------------------- every command: unknown flags and bad values
@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_refuses_an_unknown_flag(name, capsys):
    refused([name, "--no-such-flag"], capsys, "error:")  # unrecognized, or a required argument named


@pytest.mark.parametrize("argv,needle", [
    (["compressors", "--world-size", "300000"], "world_size must be an integer in [1, 262144]"),
    (["compressors", "--world-size", "1e9"], "--world-size"),
    (["predict", "--model", "resnet50", "--gpus", "100000000", "--compressor", "topk"], "world_size must be"),
    (["train", "--dataset", "cifar10", "--data-root", "/nonexistent/cifar"], "does not exist"),
    (["fit", "/nonexistent/records", "--out", "/tmp/never.json"], "not found"),
    (["nosuchcommand"], "unknown command"),
])
def test_commands_on_bad_values(argv, needle, capsys):
    refused(argv, capsys, needle)


# ---------------------------------------------------------------- --out never an input
def _one_error_line(err: str, needle: str) -> None:
    """The refusal is one line (after argparse's usage, where argparse says it), and it names the problem."""
    lines = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(lines) == 1 and needle in lines[0], err


@pytest.fixture()
def inputs(tmp_path):
    """A folder of records and a file in it."""
    from studykit.perfmodel import synthetic

    folder = tmp_path / "recs"
    return folder, synthetic.write_jsonl(synthetic.synthetic_records(), folder / "r.jsonl")


def test_check_writable_output_refuses_an_input_or_a_place_inside_one(inputs, tmp_path):
    folder, f = inputs
    for out, how in ((f, "is inside the input --records"), (folder, "is the input --records"),
                     (folder / "v" / "x", "is inside the input --records"),
                     (tmp_path / "x" / ".." / "recs", "is the input --records")):
        with pytest.raises(paths.OutputError, match=re.escape(f"--out {out} {how} {folder}:")):
            paths.check_writable_output(out, sources={"--records": [None, folder]})
    with pytest.raises(paths.OutputError, match="is the input RECORDS"):
        paths.check_writable_output(f, file=True, sources={"RECORDS": [f]})
    # beside an input, or in a folder above it: nothing there is read back
    for ok in (tmp_path / "v", tmp_path, folder.parent / "recs2"):
        assert paths.check_writable_output(ok, sources={"--records": [folder]}) == ok.resolve()


@pytest.mark.parametrize("argv, needle", [
    (["fit", "{f}", "--out", "{f}"], "is the input RECORDS"),
    (["fit", "{d}", "--out", "{d}/c.json"], "is inside the input RECORDS"),
    (["fit", "--compute-from", "{f}", "--network-from", "{d}", "--out", "{d}/c.json"], "input --network-from"),
    (["verify", "--records", "{d}", "--out", "{d}"], "is the input --records"),
    (["verify", "--records", "{d}", "--out", "{d}/verification"], "is inside the input --records"),
    (["verify", "--records", "{t}/other", "--sweep-from", "{d}", "--out", "{d}/v"], "input --sweep-from"),
    (["verify", "--records", "{t}/other", "--inputs-from", "{t}/x", "{d}", "--out", "{d}"], "input --inputs-from"),
], ids=["fit-file", "fit-folder", "fit-network-from", "verify-same", "verify-inside", "verify-sweep-from",
        "verify-inputs-from"])
def test_commands_refuse_an_out_that_is_an_input(inputs, tmp_path, capsys, argv, needle):
    folder, f = inputs
    argv = [a.format(f=f, d=folder, t=tmp_path) for a in argv]
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    _one_error_line(refused(argv, capsys, needle), needle)
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before


def test_data_regen_refuses_an_out_inside_data_but_rebuilds_data_in_place(capsys):
    from studykit.nbtools import datacli

    before = {p: p.stat().st_mtime_ns for p in paths.CALIBRATIONS.rglob("*")}
    err = refused(["data", "regen", "--out", str(paths.CALIBRATIONS), paths.OVERWRITE_FLAG, "--quiet"], capsys,
                  "is inside the input folder data/", "leave out --out")
    _one_error_line(err, "--out")
    assert {p: p.stat().st_mtime_ns for p in paths.CALIBRATIONS.rglob("*")} == before
    # data/ itself is the in-place rebuild: refused only for want of the flag
    with pytest.raises(paths.OutputError, match=paths.OVERWRITE_FLAG):
        datacli.regen(out=paths.DATA, progress=False)


@pytest.mark.skipif(not paths.MEASUREMENTS.is_dir(), reason="no committed records")
def test_verify_refuses_an_out_among_its_default_records(capsys):
    from studykit.perfmodel import verify

    default = verify.cli.default_sources()
    if not default:
        pytest.skip("no committed records to verify by default")
    refused(["verify", "--out", str(default[0]), paths.OVERWRITE_FLAG], capsys, "is the input --records")


# ---------------------------------------------------------------- calibrations through predict and advise
from tests import test_calibration_hostile as CH  # noqa: E402  (its calibration mutators; its cases not repeated)


@pytest.mark.parametrize("cmd, field, value, needle", [
    (CH.PREDICT, "gamma.value", float("nan"), "'gamma.value' must be a number"),
    (CH.PREDICT, "alpha_s.value", -1e-5, "'alpha_s.value' must be a number >= 0"),
    (CH.ADVISE, "alpha_s.value", -1e-5, "'alpha_s.value' must be a number >= 0"),
    (CH.ADVISE, "bandwidth_gbps.value", -10.0, "'bandwidth_gbps.value' must be a number > 0"),
    (CH.PREDICT, "bandwidth_gbps.unit", "Mbit/s", "'bandwidth_gbps.unit' must be 'Gbit/s'"),
    (CH.ADVISE, "bandwidth_gbps.unit", "Mbit/s", "'bandwidth_gbps.unit' must be 'Gbit/s'"),
    (CH.ADVISE, "t_comp.0.unit", "ms", "'t_comp[0].unit' must be 's'"),
], ids=["predict-nan", "predict-negative", "advise-negative", "advise-negative-bw", "predict-unit", "advise-unit",
        "advise-tcomp-unit"])
def test_predict_and_advise_refuse_a_bad_calibration_naming_the_field(tmp_path, capsys, cmd, field, value, needle):
    f = CH._write(tmp_path, CH._mutated(field, value))
    rc, err = run_cli([*cmd, "--calibration", str(f)], capsys)
    assert rc == 2 and needle in err and str(f) in err, err
    _one_error_line(err, needle)


def test_advise_on_a_mixed_machine_fit_says_so(tmp_path, capsys):
    from studykit.perfmodel import synthetic

    recs = synthetic.synthetic_records()
    for name, gpu in (("a", "GPU A"), ("b", "GPU B")):
        synthetic.write_jsonl([{**r, "gpu": gpu} for r in recs], tmp_path / name / "r.jsonl")
    cal = tmp_path / "mixed.json"
    fit = ["fit", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(cal), "--bootstrap", "0"]
    refused(fit, capsys, "different machines", "--allow-mixed")
    assert run_cli([*fit, "--allow-mixed"], capsys)[0] == 0
    for cmd in (CH.ADVISE, CH.PREDICT):
        rc, err = run_cli([*cmd, "--calibration", str(cal)], capsys)
        assert rc == 0 and "warning" in err and "different machines" in err and "'GPU A'" in err, (cmd[0], err)


# ---------------------------------------------------------------- the notebooks runner from the command line
def test_notebooks_refuses_its_sources_as_out_and_an_empty_only(tmp_path, capsys):
    src = tmp_path / "nbs"
    src.mkdir()
    nb = _nb(src / "tiny.ipynb", "n: int = 1  # n\n")
    before = nb.read_bytes()
    err = refused(["notebooks", "--notebooks-dir", str(src), "--out", str(src), "--no-html"], capsys,
                  "--notebooks-dir", "overlap")
    _one_error_line(err, "--out")
    assert nb.read_bytes() == before and sorted(p.name for p in src.iterdir()) == ["tiny.ipynb"]
    refused(["notebooks", "--notebooks-dir", str(src), "--out", str(tmp_path / "out"), "--only"], capsys,
            "--only: expected at least one argument")
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- studykit.ddp.register
@pytest.fixture()
def ddp_model():
    """A one-process gloo group and a DDP model on it (removed afterwards)."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("kw, needle", [
    ({"runner": "fast"}, "runner must be one of thread, graph, got 'fast'"),
    ({"runner": "graph", "overlap": False}, "runner='graph' needs overlap=True"),
])
def test_register_refuses_a_bad_runner_and_installs_nothing(ddp_model, kw, needle):
    from studykit import ddp

    with pytest.raises(ValueError, match=needle):
        ddp.register(ddp_model, "topk", **kw)
    ddp.register(ddp_model, "topk").close()  # DDP takes one hook only: the refused call left none


@pytest.mark.parametrize("model", ["linear", "none"])
def test_register_refuses_a_model_that_is_not_ddp_naming_it(model):
    import torch

    from studykit import ddp

    obj = torch.nn.Linear(4, 2) if model == "linear" else None
    with pytest.raises(TypeError, match="DistributedDataParallel"):
        ddp.register(obj, "topk")


# ---------------------------------------------------------------- the hook's boolean keywords
@pytest.mark.parametrize("kw", ["overlap", "check_finite", "find_unused_parameters"])
def test_hook_state_booleans_are_parsed_strictly(kw):
    from studykit import ddp
    from studykit.comm import LocalComm

    for word, want in (("no", False), ("Off", False), (0, False), ("yes", True), (True, True)):
        state = ddp.HookState(C.get("topk"), comm=LocalComm(), **{kw: word})
        got = {"overlap": state.overlap, "check_finite": state.check_finite,
               "find_unused_parameters": state.find_unused_parameters}[kw]
        assert got is want, (kw, word)
        state.close()
    for bad in ("maybe", 2, None, 0.5):
        with pytest.raises(CompressorError, match=rf"{kw} must be a boolean: true/false.*got {re.escape(repr(bad))}"):
            ddp.HookState(C.get("topk"), comm=LocalComm(), **{kw: bad})


def test_register_reads_overlap_no_as_false(ddp_model):
    from studykit import ddp

    with pytest.raises(ValueError, match="runner='graph' needs overlap=True"):  # "no" is false, not truthy
        ddp.register(ddp_model, "powersgd", overlap="no", runner="graph")
    with pytest.raises(CompressorError, match="overlap must be a boolean.*got 'nope'"):
        ddp.register(ddp_model, "powersgd", overlap="nope")
    state = ddp.register(ddp_model, "powersgd", overlap="no", check_finite="no")
    assert state.overlap is False and state.check_finite is False
    state.close()


# ---------------------------------------------------------------- integer parameters of compressors
def _int_params():
    return [(name, key) for name in C.available() for key, default in {**C.parameters(name), "seed": 0}.items()
            if isinstance(default, int) and not isinstance(default, bool)]


@pytest.mark.parametrize("name, key", _int_params())
@pytest.mark.parametrize("bad", ["abc", 2.5, True, None])
def test_every_integer_parameter_names_itself_and_what_is_valid(name, key, bad):
    with pytest.raises(CompressorError, match=rf"compressor '{name}': {key} must be an integer.*got {re.escape(repr(bad))}"):
        C.get(name, **{key: bad})


@pytest.mark.parametrize("spec", ["randomk:seed=abc", "topk:seed=1.5", "powersgd:rank=4,seed=x"])
def test_a_bad_seed_in_a_spec_names_the_parameter(spec):
    with pytest.raises(CompressorError, match=r"compressor '\w+': seed must be an integer \(any\).*got"):
        C.parse_spec(spec)


def test_any_integer_seed_works():
    assert C.get("randomk", seed=-3).seed == -3 and C.get("randomk", seed=np.int64(7)).seed == 7
    assert C.parse_spec("randomk:seed=12")[1] == {"seed": 12}


# ---------------------------------------------------------------- non-tensors into the compressor API
@pytest.mark.parametrize("name", ["fp16", "topk", "qsgd", "signsgd", "randomk", "thc", "powersgd"])
def test_non_tensors_are_refused_by_every_entry_point(name):
    import torch

    comp = C.get(name)
    with pytest.raises(CompressorError, match=rf"'{name}': reduce expects a torch.Tensor or a list of them, got int"):
        comp.reduce(5)
    with pytest.raises(CompressorError, match=rf"'{name}': tensor 0 is a float, expected a torch.Tensor"):
        comp.reduce([1.0, 2.0])
    if type(comp).compress is not C.Compressor.compress:  # single-round codecs: the GRACE halves
        with pytest.raises(CompressorError, match=rf"'{name}': compress expects a torch.Tensor, got list"):
            comp.compress([1.0, 2.0], 1)
        payload, ctx = comp.compress(torch.randn(64), 1)
        assert comp.decompress(payload, ctx).shape == (64,)
        with pytest.raises(CompressorError, match=rf"'{name}': decompress expects a list of payload tensors "
                                                  r"\(what compress returned\), got Tensor"):
            comp.decompress(payload[0], ctx)
        with pytest.raises(CompressorError, match=rf"'{name}': decompress: payload 0 expects a torch.Tensor, "
                                                  "got list"):
            comp.decompress([[1.0, 2.0]], ctx)


def test_simulate_refuses_non_tensors_naming_the_worker():
    import torch

    with pytest.raises(CompressorError, match=r"'fp16': simulate: worker 0's gradient 0 expects a torch.Tensor, "
                                              "got float"):
        C.simulate("fp16", [[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(CompressorError, match="'fp16': simulate: worker 1's gradient expects a torch.Tensor "
                                              "or a list of them, got str"):
        C.simulate("fp16", [torch.ones(2), "grad"])
    with pytest.raises(CompressorError, match="simulate expects a list of per-worker gradients.*got Tensor"):
        C.simulate("fp16", torch.ones(2, 4))
    with pytest.raises(CompressorError, match=r"world_size must be an integer in \[1, "):
        C.Simulation("fp16", "2")
    assert torch.allclose(C.simulate("fp16", [torch.ones(4), 3 * torch.ones(4)])[0], torch.full((4,), 2.0))


# ---------------------------------------------------------------- fp16 overflow outside the hook
@pytest.mark.parametrize("value, world_size", [(7e4, 1), (1e6, 4), (3e38, 1)])
def test_fp16_refuses_a_finite_gradient_it_would_turn_into_inf(value, world_size):
    import torch

    grads = [torch.tensor([1.0, value, -2.0]) for _ in range(world_size)]
    with pytest.raises(CompressorError, match=r"'fp16': tensor 0 holds a finite value of magnitude .*float16's "
                                              r"largest finite value is 65504.*use bf16"):
        C.simulate("fp16", grads)
    out = C.simulate("fp16", grads, allow_nonfinite=True)[0]  # let through, as in the DDP hook: inf arrives
    assert torch.isinf(out[1]) and out[0] == pytest.approx(1.0)
    assert torch.allclose(C.simulate("bf16", grads)[0], grads[0], rtol=1e-2)  # bf16 keeps float32's range


def test_fp16_keeps_what_the_division_by_the_world_size_brings_into_range():
    import torch

    grads = [torch.tensor([1e5, 1.0]), torch.tensor([-1e5, 1.0])]  # 1e5 / 2 fits float16
    assert torch.allclose(C.simulate("fp16", grads)[0], torch.tensor([0.0, 1.0]))
    assert torch.isfinite(C.get("fp16").reduce(torch.tensor([65504.0]))).all()  # the largest value itself


# ---------------------------------------------------------------- absurd times and unknown statuses in records
@pytest.mark.parametrize("field, value", [("ms_median", 1e308), ("ms_median", float("inf")), ("ms_min", -1.0),
                                          ("ms_mean", 2e7), ("ms_max", "12"), ("ms_median", True),
                                          ("times_ms", [1.0, 1e308]), ("times_ms", [1.0, float("nan")]),
                                          ("times_ms", 3.0)])
def test_a_record_with_an_absurd_time_is_skipped_naming_it(tmp_path, field, value):
    p = _write(tmp_path / "r.jsonl", [_rec("a"), _rec("b", **{field: value}), _rec("c", times_ms=[1.0, None])])
    with pytest.warns(UserWarning, match=rf"r\.jsonl:2: skipping a record whose {field}.* is .*: a time must be a "
                                         r"finite number of ms in \[0, 1e\+07\]"):
        recs = R.load_records(p)
    assert [r["config_id"] for r in recs] == ["a", "c"] and recs.report.n_damaged == 1


def test_fit_skips_a_record_with_an_absurd_time_and_says_so(tmp_path, capsys):
    from studykit.perfmodel import synthetic

    recs = synthetic.synthetic_records()
    gather = next(i for i, r in enumerate(recs) if r.get("op") == "all_gather")
    recs[gather]["ms_median"] = 1e308
    recs[gather + 1]["times_ms"][3] = 1e308
    f = synthetic.write_jsonl(recs, tmp_path / "recs" / "r.jsonl")
    with pytest.warns(UserWarning, match=rf"r\.jsonl:{gather + 1}: skipping a record whose ms_median is 1e\+308"):
        rc, _ = run_cli(["fit", str(f), "--out", str(tmp_path / "c.json"), "--bootstrap", "20"], capsys)
    assert rc == 0
    cal = json.loads((tmp_path / "c.json").read_text())
    inc = cal["incast_coeff"]
    assert inc["n"] < 30 and np.isfinite([inc["low"], inc["high"], inc["r2"]]).all()


@pytest.mark.parametrize("status", ["OK", "Ok", "failed", 1])
def test_an_unknown_status_is_refused_naming_the_valid_ones(tmp_path, status):
    p = _write(tmp_path / "r.jsonl", [_rec("a"), _rec("b", status=status)])
    with pytest.raises(R.RecordError, match=rf"r\.jsonl:2: status {re.escape(repr(status))} is not one of ok, "
                                            r"skipped, error \(lower case\)"):
        R.load_records(p)


def test_fit_on_a_record_with_status_OK_says_what_is_wrong(tmp_path, capsys):
    from studykit.perfmodel import synthetic

    recs = synthetic.synthetic_records()
    recs[3]["status"] = "OK"
    f = synthetic.write_jsonl(recs, tmp_path / "recs" / "r.jsonl")
    refused(["fit", str(f), "--out", str(tmp_path / "c.json")], capsys, "r.jsonl:4: status 'OK' is not one of ok",
            "(lower case)")
