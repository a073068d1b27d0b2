import inspect
import os
import types

import pytest
import torch

os.environ.setdefault("MPLBACKEND", "Agg")
torch.set_num_threads(1)


def worker_grads(world_size: int, shapes=((6, 5), (7,), (2, 3, 4)), seed: int = 0, dtype=torch.float32):
    """Deterministic per-worker gradients: list over workers of list over tensors."""
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=g).to(dtype) for s in shapes] for _ in range(world_size)]


@pytest.fixture
def grads():
    return worker_grads


#: the committed campaign folders under data/: a test that reads them is marked ``data``
CAMPAIGN_FOLDERS = ("measurements", "verification", "training", "benchmarks", "archive")
#: those a bare name (or a path relative to data/) names without doubt: the repository's benchmark scripts
#: live in a top-level benchmarks/ too
BARE_CAMPAIGN_NAMES = ("measurements", "verification", "training", "archive")


def _names_campaign(value) -> bool:
    """``value`` is a path (or path text) inside a campaign folder, or a folder's bare name or a path relative
    to ``data/``; text with spaces (a docstring, a message) is not a path."""
    if not isinstance(value, (str, os.PathLike)):
        return False
    text = os.path.normpath(os.fspath(value)).replace(os.sep, "/")
    if any(c.isspace() for c in text):
        return False
    return text.split("/")[0] in BARE_CAMPAIGN_NAMES or any(f"data/{f}" in text for f in CAMPAIGN_FOLDERS)


def _reads_campaigns(literals: set, names: set) -> bool:
    """One code object names a campaign folder: ``paths.MEASUREMENTS``, ``ROOT / "data" / "measurements"``,
    ``"verification/bandwidth"``, ``os.path.join(ROOT, "data", "benchmarks")``, ``paths.DATA / "benchmarks"``."""
    return ("MEASUREMENTS" in names or any(_names_campaign(k) for k in literals)
            or ("benchmarks" in literals and ("data" in literals or "DATA" in names)))


def _starts_process(literals: set, names: set) -> bool:
    """One code object starts a process (``subprocess``, ``sys.executable``): a new interpreter imports torch."""
    return bool({"subprocess", "Popen", "executable"} & names)


#: marker -> (what one code object must do, what a module global it names must be)
RULES = {
    "data": (_reads_campaigns, _names_campaign),  # GPU = paths.MEASUREMENTS / "gpu" as a module global too
    "slow": (_starts_process, lambda value: getattr(value, "__name__", None) == "subprocess"
             or getattr(value, "__module__", None) == "subprocess"),
}


def _module_functions(value, module) -> list:
    """``value`` if it is a function (or fixture) defined in the test ``module``, or those in a dict, list
    or tuple of them (a table of builders); else nothing."""
    items = list(value.values()) if isinstance(value, dict) else list(value) if isinstance(value, (list, tuple)) \
        else [value]
    return [v for v in items if callable(v) and getattr(inspect.unwrap(v), "__module__", None) == module.__name__]


def _matches(fn, module, rule, seen: set) -> bool:
    """Whether the code of ``fn`` (its lambdas and inner functions too), or of a function of the test
    ``module`` that it names, matches ``rule`` (an entry of :data:`RULES`)."""
    in_code, is_global = rule
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None or code in seen:
        return False
    seen.add(code)
    stack = [code]
    while stack:
        c = stack.pop()
        stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]
        if in_code({k for k in c.co_consts if isinstance(k, str)}, set(c.co_names)):
            return True
        for value in (vars(module).get(name) for name in c.co_names):
            if is_global(value) or any(_matches(f, module, rule, seen) for f in _module_functions(value, module)):
                return True
    return False


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects
def pytest_collection_modifyitems(config, items):
    """The tiers (docs/CONTRIBUTING.md), from what a test's code (or a helper or fixture of its module) does:
    ``data`` where it reads a committed campaign folder under ``data/``; ``slow`` where it starts a process,
    and for tests that need root and network namespaces or Chromium; so ``-m "not slow and not data"``
    (make test-fast) is the unit tests alone."""
    verdicts: dict = {}  # (marker, test function, its fixtures) -> bool: once per function, not per parameter
    for item in items:
        if item.get_closest_marker("netns") or item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.slow)
        fn, module = getattr(item, "function", None), getattr(item, "module", None)
        if fn is None or module is None:
            continue
        code = (fn, *(f for name in item.fixturenames for f in _module_functions(vars(module).get(name), module)))
        for marker, rule in RULES.items():
            if (marker, *code) not in verdicts:
                seen: set = set()
                verdicts[(marker, *code)] = any(_matches(f, module, rule, seen) for f in code)
            if verdicts[(marker, *code)] and not item.get_closest_marker(marker):
                item.add_marker(marker)


def spawn_until(worker, args: tuple, folder: str, deadline_s: float, what: str) -> None:
    """``torch.multiprocessing.spawn`` two processes of ``worker(rank, *args)`` and wait at most ``deadline_s``; a
    hang fails the test naming ``what`` and where each rank was (the ``progress<rank>`` files it writes in
    ``folder``) instead of hanging the suite."""
    import os
    import time

    import torch.multiprocessing as mp

    ctx = mp.spawn(worker, args=args, nprocs=2, join=False)
    deadline = time.monotonic() + deadline_s
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:
            for proc in ctx.processes:
                proc.kill()
            where = [open(os.path.join(folder, f"progress{r}")).read() if os.path.exists(
                os.path.join(folder, f"progress{r}")) else "start" for r in range(2)]
            pytest.fail(f"{what} did not finish in {deadline_s} s; the ranks were in: {where}")
