"""Where the kit's files live (resolved from the package, so notebooks work from any cwd)."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(os.environ.get("STUDYKIT_ROOT", Path(__file__).resolve().parent.parent))
DATA = ROOT / "data"
MEASUREMENTS = DATA / "measurements"
PAPER = DATA / "paper"
CALIBRATIONS = DATA / "calibrations"
REPORTS = ROOT / "reports"
NOTEBOOKS = ROOT / "notebooks"
PARAMS = ROOT / "params"
