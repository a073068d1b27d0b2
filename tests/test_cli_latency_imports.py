"""The commands a user types often load no more than they need: no torch, pandas or matplotlib for ``--help`` or for
a ``predict`` / ``advise`` question on a built-in model once the registry's and the payload's disk caches hold its
answers (``benchmarks/cli_latency.py`` times them). Each check runs a fresh interpreter (subprocess): what one
process imports says nothing of another's."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from studykit import compressors, paths

HEAVY = ("torch", "pandas", "matplotlib")


def _heavy_after(code: str, cache_dir=None) -> tuple[list[str], str]:
    """Run ``code`` in a fresh interpreter; the heavy modules it imported and its stdout (before the last line)."""
    env = dict(os.environ)
    if cache_dir is not None:
        env["STUDYKIT_CACHE"] = str(cache_dir)
    probe = f"\nimport sys\nprint(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code + probe], cwd=paths.ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    *out, last = done.stdout.rstrip("\n").split("\n")
    return eval(last), "\n".join(out)  # noqa: S307 - the list the probe printed


def _command(argv: list[str]) -> str:
    """``python -m studykit ARGV`` as code for :func:`_heavy_after` (``--help`` exits through SystemExit)."""
    return f"from studykit.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass"


def test_importing_the_perfmodel_cli_imports_no_torch():
    heavy, _ = _heavy_after("import studykit.perfmodel.cli, studykit.compressors, studykit.measure.envinfo")
    assert heavy == []


@pytest.mark.parametrize("argv", [["--help"], pytest.param(["predict", "--help"], marks=pytest.mark.slow),
                                  ["advise", "--help"], ["fit", "--help"], ["compressors", "--help"], ["env", "--help"]])
def test_help_imports_nothing_heavy(argv, tmp_path):
    heavy, out = _heavy_after(_command(argv), tmp_path)  # an empty cache: the registry's names come from torch then
    assert "usage:" in out
    warm, again = _heavy_after(_command(argv), tmp_path)
    assert warm == [] and again == out


@pytest.mark.slow
@pytest.mark.parametrize("argv", [
    ["predict", "--model", "resnet50", "--gpus", "8", "64", "--bandwidth-gbps", "1", "10", "--compressor", "powersgd",
     "--param", "rank=4"],
    ["advise", "--model", "resnet50", "--gpus", "8", "--bandwidth-gbps", "10", "--compressors", "powersgd", "topk"],
])
def test_a_question_on_a_builtin_model_needs_no_torch_once_cached(argv, tmp_path):
    """The first run fills the disk caches (torch plans the payloads); the second answers the same without torch."""
    _, first = _heavy_after(_command(argv), tmp_path)
    heavy, second = _heavy_after(_command(argv), tmp_path)
    assert heavy == [] and second == first
    if argv[0] == "predict":  # a world size not planned yet: a payload without steps in p needs no new plan
        i = argv.index("--gpus") + 1
        heavy, other = _heavy_after(_command([*argv[:i], "128", *argv[i:]]), tmp_path)
        assert heavy == [] and any(line.split()[:1] == ["128"] for line in other.splitlines())


@pytest.mark.slow
def test_the_registry_answers_from_its_cache_as_the_classes_do(tmp_path):
    """What the cached registry says (no torch) equals what the loaded classes say (this process)."""
    code = ("from studykit import compressors as C\nimport json\n"
            "print(json.dumps({n: [repr(C.parameters(n)), repr(C.metadata(n)), repr(C.registry.main_parameter(n))]"
            " for n in C.available()}))\n"
            "print(json.dumps([C.check('topk', ratio=0.01), C.parse_spec('powersgd:rank=4,error_feedback=no')]))")
    _heavy_after(code, tmp_path)  # fills the cache
    heavy, out = _heavy_after(code, tmp_path)
    classes, (facts, spec) = (json.loads(line) for line in out.splitlines())
    assert heavy == []
    assert classes == {n: [repr(compressors.parameters(n)), repr(compressors.metadata(n)),
                           repr(compressors.registry.main_parameter(n))] for n in compressors.available()}
    comp = compressors.get("topk", ratio=0.01)
    assert facts["partition_invariant"] == comp.partition_invariant and facts["error_feedback"] is True
    assert facts["allreduce_compatible"] == comp.allreduce_compatible and spec == ["powersgd", {"rank": 4,
                                                                                              "error_feedback": "no"}]


@pytest.mark.slow
def test_a_bad_setting_is_refused_with_a_warm_cache(tmp_path):
    """The cache holds valid settings only: a bad one builds the compressor, which names what is wrong."""
    code = ("from studykit import compressors as C\nC.check('topk', ratio=0.01)\n"
            "try:\n    C.parse_spec('topk:ratio=0.01,rank=4')\nexcept C.CompressorError as exc:\n    print(exc)")
    _heavy_after(code, tmp_path)
    heavy, out = _heavy_after(code, tmp_path)
    assert "unknown parameter(s) ['rank']" in out and "valid:" in out and "torch" in heavy


@pytest.mark.slow
def test_simulate_stays_the_function_when_its_module_is_imported():
    """``compressors.simulate`` is the function, also when ``studykit.compressors.simulate`` is imported first."""
    code = ("import types\nfrom studykit import compressors as C\nimport studykit.compressors.simulate as S\n"
            "from studykit.compressors.simulate import Simulation\n"
            "print(callable(C.simulate) and not isinstance(C.simulate, types.ModuleType), C.Simulation is Simulation)")
    _, out = _heavy_after(code)
    assert out == "True True"


def test_is_compressor():
    assert compressors.is_compressor(compressors.get("topk")) and not compressors.is_compressor("topk")
