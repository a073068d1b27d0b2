"""The package's layout shows the data flow (docs/architecture.md): small central modules at
the top level, every larger part in its folder, and every command's module importable."""
import importlib

from studykit import cli, paths

#: the top-level modules that stay small and central (references: the papers' table, read by outputs)
TOP_LEVEL = {"__init__", "__main__", "argtypes", "cli", "comm", "ddp", "models", "paths", "references"}


def test_only_small_central_modules_at_the_top_level():
    top = {p.stem: len(p.read_text().splitlines()) for p in (paths.ROOT / "studykit").glob("*.py")}
    assert set(top) <= TOP_LEVEL, f"move {sorted(set(top) - TOP_LEVEL)} into a package"
    big = {name: n for name, n in top.items() if n > 320}
    assert not big, f"top-level modules over ~300 lines: {big}"


def test_every_command_module_imports_and_has_main():
    for name, (module, _) in cli.COMMANDS.items():
        assert callable(importlib.import_module(module).main), name
