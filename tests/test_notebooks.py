"""Every notebook runs headless with the smoke parameters; committed notebooks carry no outputs."""
import json

import pytest

from studykit import notebooks, paths

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


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_on_smoke_parameters(nb, tmp_path):
    assert nb.stem in SMOKE, f"params/smoke.yaml has no section for {nb.stem}"
    notebooks.run_one(nb, SMOKE[nb.stem], tmp_path, html_copy=False)


def _nbbuild():
    import importlib.util

    spec = importlib.util.spec_from_file_location("nbbuild", paths.ROOT / "scripts" / "nbbuild.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SOURCES = sorted((paths.NOTEBOOKS / "src").glob("*.py"))


@pytest.mark.parametrize("src", SOURCES, ids=[p.stem for p in SOURCES])
def test_notebook_source_and_notebook_agree(src):
    """A notebook written as notebooks/src/NAME.py is exactly what scripts/nbbuild.py builds from it."""
    built = _nbbuild().build(src.read_text())
    nb = json.loads((paths.NOTEBOOKS / f"{src.stem}.ipynb").read_text())
    strip = lambda cells: [(c["cell_type"], "".join(c["source"]) if isinstance(c["source"], list) else c["source"])
                           for c in cells]
    assert strip(built.cells) == strip(nb["cells"]), \
        f"run: python scripts/nbbuild.py notebooks/src/{src.stem}.py notebooks/{src.stem}.ipynb"
