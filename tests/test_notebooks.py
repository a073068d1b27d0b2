"""Every notebook runs headless with the smoke parameters, and every figure it shows passes the figure checker
(studykit.plots.check); committed notebooks carry no outputs."""
import json

import pytest

from studykit import paths
from studykit.nbtools import runner as notebooks
from studykit.plots import check

NOTEBOOKS = notebooks.discover()
SMOKE = notebooks.load_profile(paths.PARAMS / "smoke.yaml")


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_notebook_has_no_outputs(nb):
    cells = json.loads(nb.read_text())["cells"]
    dirty = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))]
    assert not dirty, f"{nb.name}: cells {dirty} carry outputs; strip them"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_has_a_parameters_cell(nb):
    cells = json.loads(nb.read_text())["cells"]
    assert any("parameters" in c.get("metadata", {}).get("tags", []) for c in cells), nb.name


@pytest.mark.slow
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_on_smoke_parameters(nb, tmp_path):
    assert nb.stem in SMOKE, f"params/smoke.yaml has no section for {nb.stem}"
    with check.checking_kernels(tmp_path / "figure-check") as report:
        notebooks.run_one(nb, SMOKE[nb.stem], tmp_path, html_copy=False)
    found = check.kernel_problems(report)
    assert not found, f"{nb.name}: figures break the checklist (docs/CONTRIBUTING.md):\n  " + "\n  ".join(found)


def _cells(nb) -> list[tuple]:
    """What a pair must agree on: each cell's type, source and tags (outputs and ids aside)."""
    return [(c.cell_type, c.source, tuple(c.metadata.get("tags", []))) for c in nb.cells]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_and_its_jupytext_pair_agree(nb):
    """Every notebook is a jupytext pair (percent format beside it), and the two hold the same cells."""
    import jupytext

    text = nb.with_suffix(".py")
    assert text.is_file(), f"{nb.name} has no pair: run jupytext --set-formats ipynb,py:percent {nb}"
    ipynb = jupytext.read(nb)
    assert ipynb.metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent", f"{nb.name} is not paired"
    assert _cells(jupytext.read(text)) == _cells(ipynb), f"out of sync: run jupytext --sync {text}"


def test_every_notebook_source_has_its_notebook():
    """No stray percent-format file: each notebooks/*.py is one half of a pair."""
    assert sorted(p.stem for p in paths.NOTEBOOKS.glob("*.py")) == sorted(p.stem for p in NOTEBOOKS)


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_code_cells_are_short(nb):
    """Notebooks orchestrate and plot (docs/STYLE.md item 1): a longer cell is a function for the package."""
    cells = json.loads(nb.read_text())["cells"]
    long = [i for i, c in enumerate(cells) if c["cell_type"] == "code"
            and "parameters" not in c.get("metadata", {}).get("tags", []) and len("".join(c["source"]).splitlines()) > 16]
    assert not long, f"{nb.name}: code cells {long} are longer than ~15 lines"
