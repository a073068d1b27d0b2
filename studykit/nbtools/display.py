"""How executed notebooks print: plain numbers, whole tables, warnings without this machine's paths.

:func:`setup` is what ``python -m studykit notebooks`` runs in every kernel before a notebook's first cell (a
hidden cell of the executed copy); call it yourself at the top of a notebook you run in Jupyter to read it the
same way.
"""
from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

__all__ = ["setup", "short_path", "SETUP_SOURCE"]

#: the cell the runner puts before a notebook's first cell (hidden in the HTML report)
SETUP_SOURCE = "from studykit.nbtools.display import setup\nsetup()"


def short_path(filename: str) -> str:
    """``filename`` without this machine's prefix: relative to the repository for the kit's files, from the
    package folder on for installed packages (``site-packages/pandas/x.py`` -> ``pandas/x.py``), else the name."""
    from studykit import paths

    p = Path(filename)
    try:
        return p.resolve().relative_to(paths.ROOT.resolve()).as_posix()
    except (ValueError, OSError):
        pass
    parts = p.parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return "/".join(parts[parts.index(marker) + 1:])
    return p.name


def setup() -> None:
    """numpy scalars print as numbers (``1.0``, not ``np.float64(1.0)``); pandas shows whole tables (every column,
    up to 200 rows, 200 characters wide); warnings name files by :func:`short_path` and drop the repository's
    folder from their text. Calling it again changes nothing."""
    import numpy as np

    np.set_printoptions(legacy="1.25")
    if "pandas" in sys.modules or _importable("pandas"):
        import pandas as pd

        pd.set_option("display.max_columns", None)
        pd.set_option("display.max_rows", 200)
        pd.set_option("display.width", 200)
    if getattr(warnings.formatwarning, "_studykit", False):
        return
    original = warnings.formatwarning

    def formatwarning(message, category, filename, lineno, line=None):
        from studykit import paths

        text = str(message).replace(str(paths.ROOT) + os.sep, "")  # the kit's own messages name files by path
        return original(text, category, short_path(filename), lineno, line)

    formatwarning._studykit = True
    warnings.formatwarning = formatwarning


def _importable(name: str) -> bool:
    from importlib.util import find_spec

    return find_spec(name) is not None
