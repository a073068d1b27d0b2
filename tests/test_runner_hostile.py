"""The notebook runner under hostile use: bad flags, broken profiles and summaries, notebooks that kill their
kernel, hang or do not parse, and interrupted runs end in a clear message (never a traceback), never overwrite
the source notebooks and leave no temporary files."""
import json
import os
import signal
import subprocess
import sys
import time

import nbformat
import pytest

from studykit import paths
from studykit.nbtools import runner

#: a "billion laughs" YAML: nine levels of nine aliases each (9**9 strings once expanded)
ALIAS_BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{n}: &{n} [{','.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi"))


def _notebook(path, params_src, *code):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells.append(nbformat.v4.new_markdown_cell(f"# {path.stem}"))
    cell = nbformat.v4.new_code_cell(params_src)
    cell.metadata["tags"] = ["parameters"]
    nb.cells.append(cell)
    nb.cells += [nbformat.v4.new_code_cell(src) for src in code]
    nbformat.write(nb, str(path))
    return path


@pytest.fixture()
def nbs(tmp_path):
    """A folder with one quick notebook and an empty profile."""
    src = tmp_path / "nbs"
    src.mkdir()
    _notebook(src / "ok.ipynb", "n: int = 1  # how many", "print(n + 1)")
    profile = tmp_path / "profile.yaml"
    profile.write_text("ok:\n  n: 2\n")
    return src, profile


@pytest.mark.parametrize("where", ["same", "inside", "contains"])
def test_out_that_is_inside_or_contains_the_notebooks_dir_is_refused(nbs, tmp_path, capsys, where):
    src, profile = nbs
    out = {"same": src, "inside": src / "executed", "contains": tmp_path}[where]
    before = (src / "ok.ipynb").read_bytes()
    with pytest.raises(SystemExit) as exc:
        runner.main(["notebooks", "--notebooks-dir", str(src), "--params", str(profile), "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--out" in err and "--notebooks-dir" in err and str(src) in err, err
    assert (src / "ok.ipynb").read_bytes() == before and not (out / "summary.json").exists()
    assert not (src / "executed").exists()


def test_only_without_names_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exc:
        runner.main(["notebooks", "--only"])
    assert exc.value.code == 2 and "argument --only: expected at least one argument" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["ok: [unclosed\n", "ok:\n  n: 1\n bad indent: 2\n", "\tok: 1\n"])
def test_malformed_yaml_is_a_clear_error(nbs, tmp_path, capsys, text):
    src, profile = nbs
    profile.write_text(text)
    with pytest.raises(ValueError, match=r"profile\.yaml.*not valid YAML"):
        runner.load_profile(profile)
    with pytest.raises(SystemExit) as exc:
        runner.main(["notebooks", "--notebooks-dir", str(src), "--params", str(profile), "--out",
                     str(tmp_path / "out")])
    assert exc.value.code == 2 and "not valid YAML" in capsys.readouterr().err


def test_yaml_aliases_are_refused(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB) < 600
    with pytest.raises(ValueError, match=r"bomb\.yaml.*alias"):
        runner.load_profile(bomb)
    small = tmp_path / "small.yaml"  # a merge key is an alias too
    small.write_text("base: &base\n  n: 1\nok:\n  <<: *base\n")
    with pytest.raises(ValueError, match=r"small\.yaml.*alias \*base"):
        runner.load_profile(small)
    plain = tmp_path / "plain.yaml"
    plain.write_text("ok:\n  n: 1\n  tags: [a, b]\n")
    assert runner.load_profile(plain) == {"ok": {"n": 1, "tags": ["a", "b"]}}


@pytest.mark.parametrize("content", [b"not json {", b"\xff\xfe\x00binary", b"[1, 2]", b'{"profile": "x"}',
                                     b'{"notebooks": [{"seconds": 1}]}', b'{"notebooks": "tour"}',
                                     b'{"notebooks": [{"notebook": "tour", "status": "ok", "seconds": "soon"}]}'])
def test_table_on_the_wrong_json_is_a_clear_error(tmp_path, capsys, content):
    wrong = tmp_path / "summary.json"
    wrong.write_bytes(content)
    assert runner.main(["notebooks", "--table", str(wrong), "--allow-dirty"]) == 2
    err = capsys.readouterr().err
    assert str(wrong) in err and "summary.json" in err and "Traceback" not in err, err


def test_table_on_a_folder_is_a_clear_error(tmp_path, capsys):
    assert runner.main(["notebooks", "--table", str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().err


def test_a_parameters_cell_that_does_not_parse_is_a_parameter_error(nbs, tmp_path, capsys):
    src, profile = nbs
    _notebook(src / "ok.ipynb", "n: int = = 1  # how many", "print(n)")
    with pytest.raises(runner.ParameterError, match=r"ok\.ipynb.*parameters cell.*line 1"):
        runner.parameters(src / "ok.ipynb")
    with pytest.raises(SystemExit) as exc:
        runner.main(["notebooks", "--notebooks-dir", str(src), "--params", str(profile), "--out",
                     str(tmp_path / "out")])
    assert exc.value.code == 2 and "ok.ipynb" in capsys.readouterr().err
    (src / "ok.ipynb").write_text("{ not a notebook")
    with pytest.raises(runner.ParameterError, match=r"ok\.ipynb.*not a notebook"):
        runner.parameters(src / "ok.ipynb")


@pytest.mark.slow
def test_dead_kernel_timeout_and_broken_cells_fail_their_notebook_and_keep_going(tmp_path, capsys, monkeypatch):
    src = tmp_path / "nbs"
    src.mkdir()
    _notebook(src / "a_dead.ipynb", "n: int = 1  # n", "x = 1", "import os; os._exit(3)", "print('never')")
    _notebook(src / "b_hangs.ipynb", "n: int = 1  # n", "import time\ntime.sleep(60)", "print('never')")
    _notebook(src / "c_unparsable.ipynb", "n: int = = 1  # n", "print('never')")
    _notebook(src / "d_ok.ipynb", "n: int = 1  # n", "print(n)")
    profile = tmp_path / "profile.yaml"
    profile.write_text("d_ok:\n  n: 2\n")
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))  # where the kernels' connection files go
    out = tmp_path / "out"
    rc = runner.main(["notebooks", "--notebooks-dir", str(src), "--params", str(profile), "--out", str(out),
                      "--keep-going", "--no-html", "--timeout", "3"])
    assert rc == 1
    err = capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    status = {s["notebook"]: s for s in summary["notebooks"]}
    assert [s["status"] for s in status.values()] == ["failed", "failed", "failed", "ok"]
    dead, hangs, unparsable = status["a_dead"], status["b_hangs"], status["c_unparsable"]
    assert "kernel died" in dead["error"] and "cell 4 of 5" in dead["error"] and "os._exit" in dead["error"]
    assert dead["failed_cell"] == 4
    assert "timed out after 3 s" in hangs["error"] and "cell 3 of 4" in hangs["error"] and "--timeout" in hangs["error"]
    assert "SyntaxError" in unparsable["error"] and unparsable["failed_cell"] == 2
    assert "kernel died" in err and "Traceback" not in err
    assert list(temp.iterdir()) == []


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_run_cleans_up_and_says_so(tmp_path, signum):
    src = tmp_path / "nbs"
    src.mkdir()
    _notebook(src / "hangs.ipynb", "n: int = 1  # n", "import time\ntime.sleep(120)")
    profile = tmp_path / "profile.yaml"
    profile.write_text("{}\n")
    temp = tmp_path / "tmp"
    temp.mkdir()
    code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from studykit.nbtools import runner; sys.exit(runner.main(sys.argv[1:]))")
    proc = subprocess.Popen([sys.executable, "-c", code, "notebooks", "--notebooks-dir", str(src), "--params",
                             str(profile), "--out", str(tmp_path / "out"), "--no-html"],
                            env={**os.environ, "TMPDIR": str(temp)}, cwd=paths.ROOT, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not list(temp.rglob("*.json")):  # the kernel's connection file: the kernel is starting
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        time.sleep(2)
        os.killpg(proc.pid, signum)  # as a terminal's Ctrl-C or a job's kill: the kernel gets it too
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signum, err
    # no traceback of the runner's (the kernel, shut down mid-cell, may log one of its own on its stderr)
    assert "interrupted" in err and "hangs" in err and "runner.py" not in err and "papermill" not in err, err
    assert list(temp.iterdir()) == []
    assert not (tmp_path / "out" / "summary.json").exists()
