"""The own-model check's figure and table (``studykit.plots.verify.own_model_figure`` / ``own_model_table``)
drawn from the committed ``data/verification/own_model/`` folders."""
import json

import matplotlib.pyplot as plt  # conftest.py selects the Agg backend
import numpy as np
import pandas as pd
import pytest

from studykit import paths
from studykit.plots import check
from studykit.plots import verify as V

pytestmark = pytest.mark.data

OWN = paths.DATA / "verification" / "own_model"
FOLDERS = [OWN / "vit_b16_p2", OWN / "vit_b16_p4"]
#: the groups of the committed summary.json files and the predictions.csv.gz groups each one pools
MEMBERS = {"syncSGD, fp16 baseline and post": ("syncSGD", "fp16 baseline", "post"), "hook": ("hook",),
           "syncSGD": ("syncSGD",), "fp16 baseline": ("fp16 baseline",), "post": ("post",)}


def _predictions() -> pd.DataFrame:
    return pd.concat([pd.read_csv(f / "predictions.csv.gz").assign(folder=f.name) for f in FOLDERS], ignore_index=True)


def _points(ax) -> np.ndarray:
    """Every measured point drawn on ``ax`` (x, y), from its marker-only lines."""
    pts = [np.column_stack(ln.get_data()) for ln in ax.get_lines()
           if ln.get_linestyle() in ("None", "", " ") and len(ln.get_xdata())]
    return np.concatenate(pts) if pts else np.empty((0, 2))


def test_figure_draws_one_point_per_prediction_with_units():
    pred = _predictions()
    fig, ax = V.own_model_figure(FOLDERS)
    try:
        pts = _points(ax)
        found = check.problems(fig)
    finally:
        plt.close(fig)
    assert len(pts) == len(pred)
    # the same points, in any order: measured (x) against predicted (y)
    want = np.sort(pred[["measured_ms", "predicted_ms"]].to_numpy(), axis=0)
    assert np.allclose(np.sort(pts, axis=0), want, rtol=1e-9)
    assert "(ms" in ax.get_xlabel() and "(ms" in ax.get_ylabel()
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "?" in ax.get_title()
    assert found == [], found


def test_table_medians_match_the_predictions():
    pred = _predictions()
    pred["abs_err"] = ((pred["predicted_ms"] - pred["measured_ms"]) / pred["measured_ms"]).abs()
    table = V.own_model_table(FOLDERS)
    assert {"world_size", "group", "n", "median_abs_rel_error", "max_abs_rel_error", "target_median",
            "target_max", "met"} <= set(table.columns)
    n_groups = sum(len(json.loads((f / "summary.json").read_text())["groups"]) for f in FOLDERS)
    assert len(table) == n_groups
    for r in table.itertuples():
        e = pred.loc[(pred["world_size"] == r.world_size) & pred["group"].isin(MEMBERS[r.group]), "abs_err"]
        assert r.n == len(e)
        assert r.median_abs_rel_error == pytest.approx(e.median(), rel=1e-3, abs=1e-5)
        assert r.max_abs_rel_error == pytest.approx(e.max(), rel=1e-3, abs=1e-5)
        assert r.met == (r.median_abs_rel_error <= r.target_median and r.max_abs_rel_error <= r.target_max)


def test_a_folder_without_the_check_files_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="predictions.csv.gz"):
        V.own_model_figure([tmp_path])
    with pytest.raises(FileNotFoundError, match="summary.json"):
        V.own_model_table([tmp_path])
    with pytest.raises(ValueError, match="no folders"):
        V.own_model_figure([])
