"""The committed check of a model the kit does not list (data/verification/own_model/): its summary is what its
predictions give, and the p = 4 check, which needs no torchvision, regenerates it."""
import importlib.util
import json

import pandas as pd
import pytest

from studykit import paths

pytestmark = pytest.mark.data
FOLDERS = sorted((paths.DATA / "verification" / "own_model").glob("vit_b16_p*"))


def _check_module():
    spec = importlib.util.spec_from_file_location("own_model_check", paths.ROOT / "benchmarks" / "own_model_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_both_world_sizes_are_committed():
    assert [f.name for f in FOLDERS] == ["vit_b16_p2", "vit_b16_p4"]


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda f: f.name)
def test_summary_is_what_the_predictions_give(folder):
    pred = pd.read_csv(folder / "predictions.csv")
    assert (pred["rel_error"] - (pred["predicted_ms"] - pred["measured_ms"]) / pred["measured_ms"]).abs().max() < 1e-4
    summary = json.loads((folder / "summary.json").read_text())
    again = {g["group"]: g for g in _check_module().summarize(pred)}
    for g in summary["groups"]:
        assert g["median_abs_rel_error"] == pytest.approx(again[g["group"]]["median_abs_rel_error"], rel=1e-4)
        assert g["max_abs_rel_error"] == pytest.approx(again[g["group"]]["max_abs_rel_error"], rel=1e-4)
        assert g["met"] == again[g["group"]]["met"]
    # the fit never saw a rate it predicts
    assert summary["fit_rate_gbps"] not in set(pred["rate_gbps"])


@pytest.mark.slow
def test_p4_check_regenerates(tmp_path):
    committed = paths.DATA / "verification" / "own_model" / "vit_b16_p4"
    rc = _check_module().main([str(paths.MEASUREMENTS / "own_model" / "vit_b16_p4"), "--fit-rate", "8",
                               "--out", str(tmp_path)])
    assert rc == 0
    got, want = pd.read_csv(tmp_path / "predictions.csv"), pd.read_csv(committed / "predictions.csv")
    assert list(got["candidate"]) == list(want["candidate"])
    assert got["predicted_ms"].to_numpy() == pytest.approx(want["predicted_ms"].to_numpy(), rel=1e-4)
