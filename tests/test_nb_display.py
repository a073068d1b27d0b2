"""studykit.nbtools.display: what an executed notebook prints."""
import warnings

import numpy as np
import pandas as pd

from studykit import paths
from studykit.nbtools import display


def test_setup_prints_numbers_whole_tables_and_short_paths():
    saved_np, saved_fmt = np.get_printoptions(), warnings.formatwarning
    saved_pd = {k: pd.get_option(k) for k in ("display.max_columns", "display.max_rows", "display.width")}
    try:
        display.setup()
        display.setup()  # idempotent
        assert repr(np.float64(1.0)) == "1.0"
        wide = pd.DataFrame([[1.0] * 23] * 6)
        assert "[6 rows x 23 columns]" not in repr(wide) and "..." not in repr(wide)
        text = warnings.formatwarning(f"{paths.ROOT}/data/x.jsonl: damaged", UserWarning,
                                      str(paths.ROOT / "studykit" / "paths.py"), 3)
        assert str(paths.ROOT) not in text and "studykit/paths.py:3" in text and "data/x.jsonl" in text
    finally:
        np.set_printoptions(**saved_np)
        warnings.formatwarning = saved_fmt
        for k, v in saved_pd.items():
            pd.set_option(k, v)
    assert display.short_path("/usr/lib/python3/site-packages/pandas/core/frame.py") == "pandas/core/frame.py"
    assert display.short_path("/somewhere/else/file.py") == "file.py"
