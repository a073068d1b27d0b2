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
    pred = pd.read_csv(folder / "predictions.csv.gz")
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
    got, want = pd.read_csv(tmp_path / "predictions.csv.gz"), pd.read_csv(committed / "predictions.csv.gz")
    assert list(got["candidate"]) == list(want["candidate"])
    assert got["predicted_ms"].to_numpy() == pytest.approx(want["predicted_ms"].to_numpy(), rel=1e-4)


def test_advise_asks_at_the_batch_the_calibration_measured():
    """No batch size given: the one the calibration's T_comp of the model was measured at (its only one)."""
    import studykit
    from studykit.perfmodel.calibration import Calibration

    path = paths.DATA / "verification" / "own_model" / "vit_b16_p4" / "calibration.json"
    cal = Calibration.load(path)
    assert cal.batch_size_of("examples/vit_b16.py:build") == 32
    assert cal.batch_size_of("resnet50") == 64  # none measured: the default
    adv = studykit.advise("examples/vit_b16.py:build", gpus=4, bandwidth_gbps=12, calibration=cal, mode="post",
                          compressors=["powersgd"], evidence=False)
    assert adv.inputs["batch_size"] == 32
    pred = pd.read_csv(path.parent / "predictions.csv.gz")
    row = pred[(pred["rate_gbps"] == 12) & (pred["candidate"] == "syncSGD")].iloc[0]
    got = {r["candidate"]: r["iteration_ms"] for r in adv.ranking(4, 12)}["syncSGD"]
    # the check predicted at the probed bandwidth, not the nominal 12: close, not equal
    assert got == pytest.approx(row["predicted_ms"], rel=0.15)


def test_advise_says_when_codec_times_are_scaled_from_another_model():
    import studykit

    path = paths.DATA / "verification" / "own_model" / "vit_b16_p4" / "calibration.json"
    text = str(studykit.advise("resnet50", gpus=4, bandwidth_gbps=10, calibration=path, compressors=["powersgd"],
                               t_comp_s=0.03, evidence=False))
    assert "encode/decode: not profiled on resnet50: scaled by parameter count from examples/vit_b16.py:build" in text
    own = str(studykit.advise("examples/vit_b16.py:build", gpus=4, bandwidth_gbps=10, calibration=path,
                              compressors=["powersgd"], evidence=False))
    assert "not profiled" not in own  # profiled on the model itself: nothing to say


def test_the_explorer_takes_a_model_spec():
    """The explorer's model menu offers a spec given as its parameter, beside the paper's models."""
    pytest.importorskip("ipywidgets")
    from studykit.lessons import explore
    from studykit.perfmodel.calibration import Calibration

    cal = Calibration.load(paths.DATA / "verification" / "own_model" / "vit_b16_p4" / "calibration.json")
    menu = explore.controls(cal, "examples/vit_b16.py:build", 32)["model"]
    assert menu.value == "examples/vit_b16.py:build" and "resnet50" in menu.options
    fig, _ = explore.explore(cal, "examples/vit_b16.py:build", 32, 10.0, world_size=4, compressor="powersgd",
                             param_value=4.0)
    assert fig.axes
