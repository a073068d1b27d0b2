"""The test tiers (docs/CONTRIBUTING.md): tests/conftest.py marks a test ``data`` when its code names a committed
campaign folder and ``slow`` when it starts a process, looking through its helpers, lambdas and fixtures."""
import types

import conftest
import pytest

from studykit import paths

FAKE_TESTS = '''
import os
import subprocess
import sys
from pathlib import Path

from studykit import paths

ROOT = "/repo"
GPU = Path("/repo/data/verification/bandwidth")


def _records():
    return os.path.join(ROOT, "data", "benchmarks", "h200", "codecs.jsonl")


BUILDERS = {"bench": _records}


def by_attribute():
    return paths.MEASUREMENTS / "gpu"


def by_module_constant():
    return GPU


def by_helper():
    return _records()


def by_table_of_builders():
    return BUILDERS["bench"]()


def by_lambda():
    return (lambda: "verification/bandwidth/h200_p2")()


def unit():
    """Refuses --out data/measurements/x.jsonl (a docstring names the folder; the code does not)."""
    return os.path.join(ROOT, "benchmarks", "codec_repeat.py"), "measurements are records"


def by_interpreter():
    return subprocess.run([sys.executable, "-c", "pass"], check=True)


def by_helper_starting_a_process():
    return by_interpreter()
'''


@pytest.fixture(scope="module")
def fake():
    module = types.ModuleType("fake_tests")
    exec(compile(FAKE_TESTS, "fake_tests.py", "exec"), module.__dict__)
    return module


def _marks(module, name: str) -> set[str]:
    return {m for m, rule in conftest.RULES.items() if conftest._matches(getattr(module, name), module, rule, set())}


@pytest.mark.parametrize("name", ["by_attribute", "by_module_constant", "by_helper", "by_table_of_builders",
                                  "by_lambda"])
def test_code_naming_a_campaign_folder_is_data(fake, name):
    assert _marks(fake, name) == {"data"}


def test_a_docstring_a_message_or_the_benchmark_scripts_folder_is_not_data(fake):
    assert _marks(fake, "unit") == set()


@pytest.mark.parametrize("name", ["by_interpreter", "by_helper_starting_a_process"])
def test_starting_a_process_is_slow(fake, name):
    assert _marks(fake, name) == {"slow"}


def test_the_hook_marks_the_collected_tests(request):
    """This test names no campaign folder and starts nothing: it stays in the fast tier."""
    assert request.node.get_closest_marker("data") is None and request.node.get_closest_marker("slow") is None


def test_a_test_reading_the_committed_records_is_in_the_data_tier(request):
    assert (paths.MEASUREMENTS / "README.md").is_file()
    assert request.node.get_closest_marker("data") is not None
