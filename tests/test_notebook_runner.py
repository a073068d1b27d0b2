"""The batch runner (``python -m studykit notebooks``): index with links and thumbnails, failures that name
notebook and cell, and ``papermill --help-notebook`` describing every parameter of every committed notebook."""
import ast
import json
import re
import subprocess
import sys

import nbformat
import pytest

from studykit import paths
from studykit.nbtools import runner as notebooks

NOTEBOOKS = notebooks.discover()


def _notebook(path, cells):
    """Write a notebook of ``(kind, source)`` cells; kind ``parameters`` is a tagged code cell."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for kind, src in cells:
        if kind == "markdown":
            nb.cells.append(nbformat.v4.new_markdown_cell(src))
        else:
            cell = nbformat.v4.new_code_cell(src)
            if kind == "parameters":
                cell.metadata["tags"] = ["parameters"]
            elif kind == "hidden":
                cell.metadata["jupyter"] = {"source_hidden": True}
            nb.cells.append(cell)
    nbformat.write(nb, str(path))
    return path


FIGURE = "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([0, 1], [0, scale])\nplt.show()"


@pytest.fixture()
def tiny(tmp_path):
    """A folder with one good notebook (two figures) and one that fails in its fourth cell."""
    src = tmp_path / "nbs"
    src.mkdir()
    _notebook(src / "good.ipynb", [("markdown", "# A good notebook"),
                                   ("parameters", "scale: float = 1.0  # height of the line"),
                                   ("code", FIGURE), ("code", FIGURE.replace("[0, scale]", "[scale, 0]")),
                                   ("hidden", "answer_in_source = 42\nprint('visible', 'output')")])
    _notebook(src / "bad.ipynb", [("markdown", "# A bad notebook"),
                                  ("parameters", "n: int = 1  # how many"),
                                  ("code", "x = n + 1"),
                                  ("code", "y = x * 2\nraise ValueError(f'boom {y}')"),
                                  ("code", "print('never reached')")])
    profile = tmp_path / "profile.yaml"
    profile.write_text("good:\n  scale: 2.5\nbad:\n  n: 3\n")
    return src, profile, tmp_path / "out"


@pytest.mark.slow
def test_index_links_every_notebook_with_parameters_times_and_thumbnails(tiny, capsys):
    src, profile, out = tiny
    rc = notebooks.main(["notebooks", "--notebooks-dir", str(src), "--params", str(profile), "--out", str(out),
                         "--only", "good"])
    assert rc == 0
    page = (out / "index.html").read_text()
    assert "href='good.html'" in page and "href='good.ipynb'" in page
    assert (out / "good.html").exists() and (out / "good.ipynb").exists()
    # a cell collapsed in Jupyter (an exercise's answer) shows its output but not its source in the HTML copy
    body = (out / "good.html").read_text()
    assert "visible output" in body and "answer_in_source" not in body
    assert "<code>scale</code> = <code>2.5</code>" in page
    assert page.count("src='data:image/png;base64,") == notebooks.THUMBNAILS == 2
    summary = json.loads((out / "summary.json").read_text())
    (s,) = summary["notebooks"]
    assert s["status"] == "ok" and s["parameters"] == {"scale": 2.5} and s["seconds"] > 0 and s["figures"] == 2
    assert f"{s['seconds']:.1f}" in page
    assert summary["provenance"]["python"] and "timestamp" in summary["provenance"]
    # papermill recorded the parameters in the executed copy
    assert json.loads((out / "good.ipynb").read_text())["metadata"]["papermill"]["parameters"] == {"scale": 2.5}
    # thumbnails are smaller than the figures they stand for
    full = notebooks.images(out / "good.ipynb")
    assert len(full) == 2 and len(notebooks.thumbnail(full[0])) < len(full[0])
    # the README table comes from summary.json
    capsys.readouterr()
    assert notebooks.main(["notebooks", "--out", str(out), "--table", "--allow-dirty"]) == 0  # tests run in any tree
    table = capsys.readouterr().out
    assert "| [`good`](notebooks/good.ipynb) | A good notebook |" in table and f"| {s['seconds']:.1f} |" in table


@pytest.mark.slow
def test_failure_names_notebook_and_cell(tiny, capsys):
    src, profile, out = tiny
    with pytest.raises(notebooks.NotebookFailed) as err:
        notebooks.run_one(src / "bad.ipynb", {"n": 3}, out, html_copy=False)
    msg = str(err.value)
    # cell 4 of the *source* notebook, although papermill inserted an injected-parameters cell before it
    assert "notebook bad.ipynb failed in cell 4 of 5" in msg, msg
    assert "y = x * 2" in msg and "ValueError: boom 8" in msg and str(out / "bad.ipynb") in msg
    assert err.value.cell == 4 and err.value.notebook == "bad"

    rc = notebooks.main(["notebooks", "--notebooks-dir", str(src), "--params", str(profile), "--out", str(out),
                         "--keep-going", "--no-html"])
    assert rc == 1
    assert "notebook bad.ipynb failed in cell 4 of 5" in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    status = {s["notebook"]: s["status"] for s in summary["notebooks"]}
    assert status == {"bad": "failed", "good": "ok"}  # --keep-going ran the next one
    page = (out / "index.html").read_text()
    assert "FAILED" in page and "cell 4 of 5" in page


def _parameter_names(nb) -> list[str]:
    """Names assigned in the notebook's parameters cell, read with ast (independently of papermill)."""
    cells = json.loads(nb.read_text())["cells"]
    (cell,) = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    tree = ast.parse("".join(cell["source"]))
    names = []
    for node in tree.body:
        if isinstance(node, ast.AnnAssign):
            names.append(node.target.id)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return names


@pytest.mark.slow
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_help_notebook_describes_every_parameter(nb):
    import papermill as pm

    names = _parameter_names(nb)
    assert names, f"{nb.name}: empty parameters cell"
    inferred = pm.inspect_notebook(str(nb))
    missing = [n for n in names if n not in inferred]
    assert not missing, (f"{nb.name}: papermill --help-notebook cannot read parameter(s) {missing}; a line with a "
                         f"second '=' (in the value or the comment) is skipped")
    undocumented = [n for n in names if not inferred[n]["help"].strip()]
    assert not undocumented, f"{nb.name}: parameter(s) {undocumented} lack a '# description' comment"
    untyped = [n for n in names if inferred[n]["inferred_type_name"] in ("None", "")]
    assert not untyped, f"{nb.name}: parameter(s) {untyped} lack a type annotation"
    # and the command a user types prints them all
    out = subprocess.run([sys.executable, "-m", "papermill", "--help-notebook", str(nb)], capture_output=True,
                         text=True, timeout=120, cwd=paths.ROOT).stdout
    for n in names:
        assert f"  {n}: " in out and inferred[n]["help"].strip()[:40] in out, f"{nb.name}: {n} not in --help-notebook"


def test_every_notebook_has_a_question_for_the_readme_table():
    for nb in NOTEBOOKS:
        assert notebooks.question(nb), nb.name
    assert set(notebooks.QUESTIONS) >= {p.stem for p in NOTEBOOKS}, "add the new notebook to notebooks.QUESTIONS"


def _summary(dirty):
    return {"profile": "params/smoke.yaml", "notebooks": [{"notebook": "tour", "question": "Q?", "seconds": 1.25,
                                                          "status": "ok"}],
            "provenance": {"cpu_count": 2, "torch": "2.13.0+cpu", "git_commit": "0123456789abcdef",
                           "git_dirty": dirty, "timestamp": "2026-01-01T00:00:00+00:00"}}


def test_readme_table_refuses_a_run_from_a_dirty_tree(tmp_path, capsys):
    clean = notebooks.markdown_table(_summary(False))
    assert "| 1.2 |" in clean and "commit 0123456789, 2026" in clean and "local changes" not in clean
    with pytest.raises(notebooks.DirtyTreeError, match="uncommitted changes.*--allow-dirty"):
        notebooks.markdown_table(_summary(True))
    assert "commit 0123456789 with local changes" in notebooks.markdown_table(_summary(True), allow_dirty=True)
    (tmp_path / "summary.json").write_text(json.dumps(_summary(True)))
    assert notebooks.main(["notebooks", "--table", str(tmp_path / "summary.json")]) == 2
    assert "uncommitted changes" in capsys.readouterr().err


def test_readme_footer_names_a_clean_commit():
    """The README's timing footer comes from a run at a commit, not from a dirty working tree."""
    readme = (paths.ROOT / "README.md").read_text()
    footer = re.search(r"<sub>profile `params/smoke.yaml`.*</sub>", readme)
    assert footer, "README lacks the notebook table's footer (python -m studykit notebooks --table)"
    assert re.search(r"commit [0-9a-f]{10}, ", footer.group()), footer.group()
    assert "local changes" not in footer.group(), ("regenerate the README table from a clean commit: "
                                                   "python -m studykit notebooks --params params/smoke.yaml")


def test_readme_table_lists_every_notebook():
    readme = (paths.ROOT / "README.md").read_text()
    missing = [p.stem for p in NOTEBOOKS if f"[`{p.stem}`](notebooks/{p.stem}.ipynb)" not in readme]
    assert not missing, (f"README's notebook table lacks {missing}: run `python -m studykit notebooks --params "
                         "params/smoke.yaml`, then paste `python -m studykit notebooks --table`")


@pytest.mark.slow
def test_jupyter_fix_polls_in_steps_and_keeps_timeouts():
    """studykit.nbtools.jupyter_fix: a reply that arrives while get_msg waits is returned within a step, and a
    wait with a timeout still ends in Empty after that timeout."""
    import asyncio
    import time
    from queue import Empty

    from jupyter_client.channels import AsyncZMQSocketChannel

    from studykit.nbtools import jupyter_fix

    assert jupyter_fix.apply() and jupyter_fix.apply()  # idempotent

    class Socket:  # a socket whose message is there from ``ready_at`` on, but whose wake-up is lost
        def __init__(self, ready_at):
            self.ready_at = ready_at

        async def poll(self, timeout_ms=None):
            if time.monotonic() >= self.ready_at:
                return 1
            await asyncio.sleep(timeout_ms / 1000 if timeout_ms is not None else 3600)  # no wake-up
            return int(time.monotonic() >= self.ready_at)

    chan = AsyncZMQSocketChannel.__new__(AsyncZMQSocketChannel)

    async def recv(**kw):
        return {"msg_type": "execute_reply"}

    chan._recv = recv
    chan.socket = Socket(time.monotonic() + 0.3)
    t0 = time.monotonic()
    assert asyncio.run(chan.get_msg(timeout=None))["msg_type"] == "execute_reply"
    assert time.monotonic() - t0 < 0.3 + 10 * jupyter_fix.STEP_S  # steps, not the lost wake-up's hour (slack: busy CI)
    chan.socket = Socket(time.monotonic() + 60)
    t0 = time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(chan.get_msg(timeout=0.5))
    assert 0.45 < time.monotonic() - t0 < 0.5 + 10 * jupyter_fix.STEP_S
