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


def test_threads_that_reach_one_key_together_make_one_pick_one_at_a_time(monkeypatch):
    """Simulated workers are threads and reach a pick's key together; one thread's timing synchronises the device,
    which another thread's CUDA graph capture does not survive. So a pick is made by one thread while the others
    wait, and they take its result (the CUDA side of this: test_sparsification.py's test_cuda_matches_cpu, run
    alone on a GPU). A candidate may pick among paths of its own in the same thread."""
    import threading
    import time

    monkeypatch.setattr(_fast, "_PICKED", {})
    monkeypatch.setattr(common.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(common, "_interpret_on_cpu", lambda: False)
    monkeypatch.setattr(common, "_timed", lambda call: float(call()))  # a candidate returns its "time"
    inside, most, calls = {}, [0], []  # inside: thread -> candidates it is running (nested ones count once)
    guard = threading.Lock()

    def candidate(ms, nested=False):
        def fn():
            me = threading.get_ident()
            with guard:
                inside[me] = inside.get(me, 0) + 1
                most[0] = max(most[0], sum(1 for d in inside.values() if d))
                calls.append(ms)
            time.sleep(0.02)
            if nested:  # picks among paths of its own: the same thread takes the lock again
                common.pick(("inner",), [candidate(5.0), candidate(4.0)])
            with guard:
                inside[me] -= 1
            return ms
        return fn

    picks, start = [], threading.Barrier(4)

    def worker():
        start.wait()
        picks.append(common.pick(("outer",), [candidate(3.0, nested=True), candidate(1.0), candidate(2.0)]))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a pick deadlocked"
    assert picks == [1, 1, 1, 1]
    assert most[0] == 1, f"{most[0]} threads ran candidates at once"
    # one thread warmed and timed each candidate once (the nested pick once, inside the first candidate's warm-up)
    assert sorted(calls) == sorted([3.0, 5.0, 4.0, 5.0, 4.0, 3.0, 1.0, 1.0, 2.0, 2.0])
    assert common._PICKED == {("outer",): 1, ("inner",): 1}
