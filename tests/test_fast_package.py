"""The layout of :mod:`studykit.compressors._fast`: one module per codec family, every name reachable as
``_fast.NAME``, and a name set on the package set in the module that defines it (no stale copy). Runs
without triton (the kernels themselves: tests/test_fast_elementwise.py, tests/test_fast_topk.py,
tests/test_bench.py)."""
from __future__ import annotations

import re
from pathlib import Path

import torch

from studykit.compressors import _fast
from studykit.compressors._fast import common, topk

ROOT = Path(__file__).resolve().parents[1]
MODULES = (_fast.common, _fast.precision, _fast.packing, _fast.quantize, _fast.hadamard, _fast.topk, _fast.mstopk)


def test_each_exported_name_is_defined_in_exactly_one_module():
    seen = {}
    for module in MODULES:
        for name in module.__all__:
            assert name not in seen, f"{name} exported by {seen[name]} and {module.__name__}"
            seen[name] = module.__name__
            assert hasattr(module, name), f"{module.__name__} exports {name} but has none"
    assert set(seen) >= {"HAVE_TRITON", "enabled", "seed_of", "pick", "_PICKED", "rows", "topk_abs", "rotate"}


def test_every_name_used_through_the_package_resolves():
    """``_fast.NAME`` in the kit, its tests and benchmarks names something the package exports."""
    used = set()
    for folder in ("studykit", "tests", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == Path(__file__).resolve() or path.parent == Path(_fast.__file__).parent:
                continue  # this file and the package's own docs name it in the abstract
            used |= set(re.findall(r"\b_fast\.([A-Za-z_]\w*)", path.read_text(encoding="utf-8")))
    used -= {m.__name__.rsplit(".", 1)[1] for m in MODULES}  # the submodules themselves
    missing = sorted(name for name in used if not hasattr(_fast, name))
    assert not missing, f"used as _fast.NAME but not exported: {missing}"


def test_setting_a_name_on_the_package_sets_it_where_it_is_defined(monkeypatch):
    fresh = {}
    monkeypatch.setattr(_fast, "_PICKED", fresh)
    assert common._PICKED is fresh and _fast._PICKED is fresh and "_PICKED" not in vars(_fast)
    monkeypatch.undo()
    assert common._PICKED is not fresh and _fast._PICKED is common._PICKED and "_PICKED" not in vars(_fast)


def test_a_patched_pick_reaches_the_callers_in_other_modules(monkeypatch):
    """topk_abs (in _fast.topk) asks pick (in _fast.common) which method to run: patching ``_fast.pick``
    changes its choice; here the last candidate, ``torch.topk``, which runs on the CPU."""
    seen = []

    def last(key, fns):
        seen.append(key)
        return len(fns) - 1

    monkeypatch.setattr(_fast, "pick", last)
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    idx = topk.topk_abs(x, 10)
    assert seen == [("topk_no_sync", x.device, 1000, 10)]
    assert torch.allclose(x[idx].abs().sort().values, torch.topk(x.abs(), 10).values.sort().values)


def test_an_unknown_name_is_a_clear_attribute_error():
    try:
        _fast.no_such_kernel  # noqa: B018
    except AttributeError as exc:
        assert "studykit.compressors._fast" in str(exc) and "no_such_kernel" in str(exc)
    else:
        raise AssertionError("expected AttributeError")
