"""environment.yml (conda users) and pyproject.toml declare the same dependencies."""
import re
import tomllib

import yaml

from studykit import paths

CONDA_NAMES = {"pytorch": "torch"}  # conda package name -> PyPI name


def _split(req: str) -> tuple[str, str]:
    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", req)
    return m.group(1).lower().replace("_", "-"), m.group(2).replace(" ", "")


def pyproject_deps() -> dict[str, str]:
    meta = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(meta["dependencies"])
    for extra in meta["optional-dependencies"].values():
        reqs += extra
    return dict(_split(r) for r in reqs)


def conda_deps() -> dict[str, str]:
    env = yaml.safe_load((paths.ROOT / "environment.yml").read_text())
    out = {}
    for d in env["dependencies"]:
        items = d["pip"] if isinstance(d, dict) else [d]
        for r in items:
            name, spec = _split(r)
            if name in ("python", "pip"):
                continue
            out[CONDA_NAMES.get(name, name)] = spec
    return out


def test_same_dependencies_and_versions():
    assert pyproject_deps() == conda_deps()


def test_ci_runs_the_readme_test_command():
    readme = (paths.ROOT / "README.md").read_text()
    ci = (paths.ROOT / ".ci" / "run").read_text()
    assert "make test" in readme and "make demo" in readme
    assert re.search(r"^make test$", ci, re.M)


def test_setup_never_installs_an_unpinned_torch():
    script = (paths.ROOT / "scripts" / "setup_env.sh").read_text()
    assert 'TORCH_SPEC=${TORCH_SPEC:-torch==' in script
    # torch is installed before the kit, so `pip install -e .` finds it satisfied
    assert script.index('install "$TORCH_SPEC"') < script.index('install -e ".[notebooks,test]"')
