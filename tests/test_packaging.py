"""environment.yml (conda users) and pyproject.toml declare the same dependencies; the wheel carries
the data predict, advise and the hook need, and works installed outside the repository."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
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
            if r.startswith("-e "):  # the kit itself (test_environment_installs_the_kit_itself)
                continue
            name, spec = _split(r)
            if name in ("python", "pip"):
                continue
            out[CONDA_NAMES.get(name, name)] = spec
    return out


def test_same_dependencies_and_versions():
    assert pyproject_deps() == conda_deps()


def test_environment_installs_the_kit_itself():
    """A conda user gets the kit too: pip's section installs the repository (where environment.yml is)."""
    env = yaml.safe_load((paths.ROOT / "environment.yml").read_text())
    pip_items = [r for d in env["dependencies"] if isinstance(d, dict) for r in d.get("pip", [])]
    assert "-e ." in pip_items, f"environment.yml's pip section must install the kit (-e .); it has {pip_items}"


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


# ------------------------------------------------------------------ the wheel carries the data


def _setuptools_config() -> dict:
    return tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_wheel_lists_every_package_of_the_kit():
    """pyproject lists the packages by hand (a mapped one cannot be found): none may be missing."""
    on_disk = {".".join(p.parent.relative_to(paths.ROOT).parts)
               for p in (paths.ROOT / "studykit").rglob("__init__.py") if "__pycache__" not in p.parts}
    listed = set(_setuptools_config()["packages"])
    assert on_disk <= listed, f"add {sorted(on_disk - listed)} to [tool.setuptools] packages in pyproject.toml"
    assert listed - on_disk == {"studykit._data"}


def test_wheel_data_covers_what_predict_and_advise_read():
    """Every calibration and paper file, the verification summaries advise reads (the top-level one, the hook
    campaigns') and the training runs match a package-data glob of the mapped data/ folder."""
    import fnmatch

    cfg = _setuptools_config()
    assert cfg["package-dir"] == {"studykit._data": "data"}
    globs = cfg["package-data"]["studykit._data"]
    need = [p for sub in ("calibrations", "paper") for p in (paths.DATA / sub).iterdir() if p.is_file()]
    need += [paths.DATA / "verification" / "summary.csv", *(paths.DATA / "training").rglob("*.jsonl"),
             *(paths.DATA / "verification" / "hook_runner").glob("*/summary.csv")]  # advise's hook error
    assert any("hook_runner" in str(f) for f in need)
    for f in need:
        rel = f.relative_to(paths.DATA).as_posix()
        assert any(fnmatch.fnmatch(rel, g.replace("**/", "*")) for g in globs), f"{rel} is not in the wheel"


def test_without_a_clone_the_kit_reads_its_packaged_data(tmp_path):
    """No data/ beside the package: paths point into studykit/_data (importlib.resources), reports go
    under the working directory."""
    code = "from studykit import paths; print(paths.IS_CLONE, paths.DATA, paths.CALIBRATIONS, paths.REPORTS)"
    env = {**os.environ, "STUDYKIT_ROOT": str(tmp_path), "PYTHONPATH": str(paths.ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                         check=True).stdout.split()
    pkg = (paths.ROOT / "studykit" / "_data").resolve()
    assert out == ["False", str(pkg), str(pkg / "calibrations"), "reports"]
    assert paths.IS_CLONE and paths.DATA == paths.ROOT / "data"  # a clone reads data/ as before


_HOOK_SCRIPT = '''
import os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp
import studykit


def work(rank, init):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    torch.manual_seed(rank)  # different data per worker, same initial weights after DDP's broadcast
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    # the README's three lines
    ddp_model = torch.nn.parallel.DistributedDataParallel(model)
    state = studykit.ddp.register(ddp_model, "powersgd", rank=2)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        ddp_model(torch.randn(8, 32)).square().mean().backward()
        opt.step()
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    both = [torch.empty_like(flat) for _ in range(2)]
    dist.all_gather(both, flat)
    assert torch.equal(both[0], both[1]), "workers diverged"
    assert state.bytes_sent > 0
    if rank == 0:
        print("hook ok", state.bytes_sent, studykit.__file__)
    # DDP's reducer and the hook state go before the process group: torch 2.13's gloo otherwise aborts at exit
    # now and then ("terminate called without an active exception"), with or without a comm hook
    del ddp_model, opt, state
    import gc
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(work, args=("file://" + os.path.abspath(sys.argv[1]),), nprocs=2, join=True)
'''


@pytest.mark.slow
def test_wheel_installed_outside_the_repository_runs_predict_advise_and_the_hook(tmp_path):
    """Build the wheel, install it into a fresh venv, and from a folder outside the repository run
    ``predict``, ``advise`` and a 2-process gloo DDP step with the kit's hook."""
    import shutil
    import site
    import sysconfig

    src = tmp_path / "src"  # a copy, so the build leaves no build/ or egg-info in the checkout
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "MANIFEST.in"):
        if (paths.ROOT / name).exists():
            shutil.copy(paths.ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    shutil.copytree(paths.ROOT / "studykit", src / "studykit", ignore=skip)
    shutil.copytree(paths.ROOT / "data", src / "data", ignore=shutil.ignore_patterns("measurements", "benchmarks"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(tmp_path / "dist"),
                    str(src)], check=True, capture_output=True, text=True)
    wheel = next((tmp_path / "dist").glob("studykit-*.whl"))

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    # torch, numpy, ... come from this interpreter's environment (nothing is downloaded): its
    # site-packages as plain path entries, so its own .pth files (an editable studykit) stay inactive
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    parents = dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"]])
    (Path(purelib) / "studykit_test_parent.pth").write_text("\n".join(parents) + "\n")
    subprocess.run([*pip, "--python", str(py), "install", "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True, text=True)

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STUDYKIT_ROOT")}

    def run(*args):
        res = subprocess.run([str(py), *args], cwd=work, env=env, capture_output=True, text=True, timeout=300,
                             check=False)
        assert res.returncode == 0, f"{args}: {res.stderr[-2000:]}"
        return res.stdout

    where = run("-c", "import studykit, studykit.paths as p; print(studykit.__file__); print(p.IS_CLONE, p.DATA)")
    assert where.startswith(purelib) and "False" in where and "_data" in where, where
    pred = run("-m", "studykit", "predict", "--model", "resnet50", "--gpus", "8", "--bandwidth-gbps", "10",
               "--compressor", "powersgd", "--param", "rank=4")
    assert "resnet50" in pred and "Gbit/s" in pred
    adv = json.loads(run("-m", "studykit", "advise", "--model", "resnet50", "--gpus", "8", "--bandwidth-gbps", "10",
                         "--json"))
    assert adv["points"][0]["ranking"]  # ranked with the packaged calibration and verification summary
    evidence = {c["label"]: c["accuracy_evidence"] for c in adv["candidates"]}
    assert evidence["syncSGD"] == "yes", evidence  # the packaged training runs were found
    (work / "hook.py").write_text(_HOOK_SCRIPT)
    out = run("hook.py", str(work / "rdzv"))
    assert out.startswith("hook ok") and purelib in out
