"""Where the kit's files live (resolved from the package, so notebooks work from any cwd).

A clone reads ``data/`` beside the package. A ``pip install`` of the wheel has no ``data/``: it reads the
part of it that the wheel carries, ``studykit/_data/`` (calibrations, the paper's numbers, the
verification summary, the training runs; mapped from ``data/`` at build time, see pyproject.toml),
through :mod:`importlib.resources`, and writes reports under the working directory. ``STUDYKIT_ROOT``
names another checkout to read instead.
"""
from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Iterable, Mapping

ROOT = Path(os.environ.get("STUDYKIT_ROOT", Path(__file__).resolve().parent.parent))
#: a clone (or STUDYKIT_ROOT) has data/ beside the package; an installed wheel does not
IS_CLONE = (ROOT / "data").is_dir()


def packaged_data() -> Path:
    """The data the wheel carries (``studykit/_data/``), as a folder on disk."""
    folder = resources.files("studykit") / "_data"
    if not isinstance(folder, Path):  # a zip import: the readers need real files
        raise TypeError(f"studykit's data {folder} is not a folder on disk; install the wheel unzipped (pip does)")
    return folder


DATA = ROOT / "data" if IS_CLONE else packaged_data()
MEASUREMENTS = DATA / "measurements"
PAPER = DATA / "paper"
CALIBRATIONS = DATA / "calibrations"
REPORTS = ROOT / "reports" if IS_CLONE else Path("reports")  # installed: under the working directory
NOTEBOOKS = ROOT / "notebooks"
PARAMS = ROOT / "params"

#: the committed trees no command writes into unless told to (``--overwrite-committed``)
COMMITTED = (DATA, NOTEBOOKS)
OVERWRITE_FLAG = "--overwrite-committed"


class OutputError(ValueError):
    """An output path that must not be written; the message names the path and the way out."""


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def check_writable_output(path: Path | str, allow_committed: bool = False, *, what: str = "--out",
                          file: bool = False, sources: Mapping[str, Iterable[Path | str | None]] | None = None) -> Path:
    """Refuse an output inside the repository's committed ``data/`` or ``notebooks/`` unless
    ``allow_committed`` (the command's ``--overwrite-committed``), a ``file`` output that is
    not a regular file (``/dev/stdout``, a FIFO, a folder: appends there would hang or be lost), and
    an output equal to or inside one of the command's inputs: ``sources`` maps each input's option
    (``--records``) to its files or folders (None entries skipped). Returns the path, resolved."""
    p = Path(path).expanduser()
    resolved = p.resolve()
    for option, given in (sources or {}).items():
        for src in (s for s in given if s is not None):
            source = Path(src).expanduser().resolve()
            if _inside(resolved, source):
                how = "is" if resolved == source else "is inside"
                raise OutputError(f"{what} {path} {how} the input {option} {src}: it would overwrite or sit among "
                                  f"what the command reads; give a {what} outside every input")
    if not allow_committed:
        for folder in COMMITTED:
            if _inside(resolved, folder.resolve()):
                raise OutputError(f"{what} {path} is inside the repository's committed {folder.name}/ "
                                  f"({folder}); write to reports/ (the default) or another folder, or pass "
                                  f"{OVERWRITE_FLAG} to write there on purpose")
    if file:
        if (p.exists() or p.is_symlink()) and not p.is_file():  # /dev/stdout -> a pipe or tty: appends hang
            raise OutputError(f"{what} {path} exists and is not a regular file; give a .jsonl file path")
    elif p.exists() and not p.is_dir():
        raise OutputError(f"{what} {path} exists and is not a folder")
    return resolved
