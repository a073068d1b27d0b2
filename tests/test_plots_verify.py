"""The verify notebook's figures (studykit.plots.verify) on the committed verification tables."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from studykit import paths  # noqa: E402
from studykit.plots import verify as V  # noqa: E402

PRED = paths.DATA / "verification" / "predictions.csv.gz"
SCALING = paths.DATA / "verification" / "scaling" / "predictions.csv.gz"


@pytest.fixture(scope="module")
def pred():
    return pd.read_csv(PRED)


@pytest.mark.parametrize("draw", [V.bucket_plot, V.post_compressors_plot, V.bandwidth_plot, V.error_overview_plot])
def test_each_figure_draws_the_committed_predictions(pred, draw):
    fig, axes = draw(pred)
    assert fig is not None, f"{draw.__name__}: nothing drawn from {PRED.name}"
    drawn = [ax for ax in axes.flat if ax.axison]
    assert drawn and all(ax.get_ylabel() or ax.get_xlabel() for ax in drawn)  # units on the axes
    plt.close(fig)


@pytest.mark.parametrize("draw", [V.bucket_plot, V.post_compressors_plot, V.bandwidth_plot])
def test_an_empty_table_draws_nothing(pred, draw):
    assert draw(pred.iloc[:0]) == (None, None)
    assert V.scaling_plot({}) == (None, None)


def test_scaling_and_parity_bands():
    fig, axes = V.scaling_plot({"median": pd.read_csv(SCALING)})
    dashed = [ln for ln in axes.flat[0].get_lines() if ln.get_linestyle() == "--"]
    assert len(dashed) == 2 * len(V.PARITY_BANDS)
    assert "ms" in axes.flat[0].get_xlabel()
    plt.close(fig)


def test_bucket_plot_marks_off_scale_predictions():
    row = dict(group="syncSGD", variant="paper", model="m", batch_size=8, rate_gbps=float("nan"), world_size=2,
               bucket_mb=float("nan"), measured_ms=10.0, predicted_ms=100.0)
    pred = pd.DataFrame([row, {**row, "variant": "extended", "predicted_ms": 11.0}])
    fig, axes = V.bucket_plot(pred)
    assert any(t.get_text().endswith("↑") for t in axes.flat[0].texts)
    plt.close(fig)
