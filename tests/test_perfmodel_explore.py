"""The explorer's pure function, its widgets, the what-if sweeps and the plot helpers."""
import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from studykit import compressors  # noqa: E402
from studykit.lessons import explore  # noqa: E402
from studykit.plots import measure as mplots  # noqa: E402
from studykit.plots import perfmodel as plots  # noqa: E402
from studykit.perfmodel import whatif  # noqa: E402

pytestmark = pytest.mark.skipif("powersgd" not in compressors.available(), reason="powersgd not registered yet")


@pytest.fixture(scope="module")
def cal():
    return whatif.paper_calibration()


def test_explore_data_breakdown_adds_up(cal):
    d = explore.explore_data(cal, "resnet101", 64, 10.0, 64, compressor="powersgd", param_value=4)
    s, c = d["sync"], d["compressed"]
    assert s["compute_ms"] + s["exposed_comm_ms"] == pytest.approx(s["total_ms"])
    assert c["compute_ms"] + c["exposed_comm_ms"] + c["encode_decode_ms"] == pytest.approx(c["total_ms"])
    assert d["speedup"] == pytest.approx(s["total_ms"] / c["total_ms"])
    assert d["params"] == {"rank": 4}
    assert 64 in set(d["curve"]["world_size"])


def test_explore_data_sliders_move_the_model(cal):
    base = explore.explore_data(cal, bandwidth_gbps=10.0)
    assert explore.explore_data(cal, bandwidth_gbps=1.0)["speedup"] > base["speedup"]  # Fig. 3
    assert explore.explore_data(cal, compute_speedup=3.0)["speedup"] > base["speedup"]  # Fig. 20
    assert explore.explore_data(cal, gamma=1.3)["sync"]["compute_ms"] > base["sync"]["compute_ms"]
    assert explore.explore_data(cal, alpha_us=500)["sync"]["total_ms"] > base["sync"]["total_ms"]
    assert explore.explore_data(cal, param_value=16)["compressed"]["wire_bytes"] > base["compressed"]["wire_bytes"]
    t = explore.explore_data(cal, t_comp_ms=50.0)
    assert t["linear_ms"] == pytest.approx(50.0)


def test_explore_none_and_main_params(cal):
    d = explore.explore_data(cal, compressor="none")
    assert d["compressed"] is None
    assert explore.main_param("powersgd") == ("rank", 4)
    assert explore.main_param("topk")[0] == "ratio"
    assert explore.main_param("none") == (None, None)
    assert explore.compressor_choices(cal, "resnet50")[0] == "none"


def test_explore_figure_and_widgets(cal):
    fig, axes = explore.explore(cal, compressor="signsgd")
    assert len(axes) == 2 and "speed-up" in axes[0].get_title()
    w = explore.controls(cal)
    for name, widget in w.items():
        if hasattr(widget, "continuous_update"):
            assert widget.continuous_update is False, name
    import inspect
    assert set(w) <= set(inspect.signature(explore.explore).parameters)
    explore.bind(cal)(world_size=16)  # the interact callback: one call of explore, figure closed


def test_whatif_sweeps_shapes(cal):
    bw = np.array([1.0, 10.0, 30.0])
    df = whatif.bandwidth_sweep("resnet50", 64, 64, bw, calibration=cal)
    assert list(df["bandwidth_gbps"]) == list(bw) and (df["speedup"].diff().dropna() < 0).all()
    rr = whatif.required_ratio_sweep(("resnet50", "bert_base"), (16, 64), 64, bw, calibration=cal)
    assert set(rr["batch_size"]) == {16, 64, -1}  # BERT's batch is unstated in the paper
    assert (rr.groupby(["model", "batch_size"])["required_ratio"].apply(lambda s: s.is_monotonic_decreasing)).all()
    cs = whatif.compute_speedup_sweep(factors=[1, 2, 4], calibration=cal)
    assert cs["speedup"].is_monotonic_increasing
    tg = whatif.tradeoff_grid(calibration=cal)
    assert len(tg) == 12 and tg.loc[(tg.k == 1) & (tg.l == 1), "compressed_s"].iloc[0] == tg["baseline_s"].iloc[0]


def test_plot_helpers_return_fig_ax(cal):
    bw = np.geomspace(1, 30, 8)
    checks = [
        plots.bandwidth_sweep_plot(whatif.bandwidth_sweep("resnet50", 64, 64, bw, calibration=cal), 9.0, 9.5),
        plots.required_ratio_plot(whatif.required_ratio_sweep(("resnet50",), (16,), 64, bw, calibration=cal), 4, 10),
        plots.compute_speedup_plot(whatif.compute_speedup_sweep(factors=[1, 2], calibration=cal), (3.5, 1.75)),
        plots.tradeoff_plot(whatif.tradeoff_grid(calibration=cal)),
        plots.claims_plot(pd.DataFrame({"claim_id": ["a"], "section": ["Sec. 4"], "setting": ["s"], "kit_value": [2.0],
                                        "paper_value": [1.0], "paper_low": [None], "paper_high": [None],
                                        "rel_diff": [1.0], "scored_on": ["value"], "verdict": ["disagrees"],
                                        "tolerance": [0.15]})),
        mplots.calibration_compare_plot(cal.to_frame(), cal.to_frame()),
    ]
    for fig, ax in checks:
        assert fig is not None and ax is not None
    fig, ax = checks[0]
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert dashed, "paper values are dashed reference lines"
    assert "Gbit/s" in ax.get_xlabel() and "ms" in ax.get_ylabel()


def test_explorer_ranking_is_advise_at_the_sliders_setting(cal):
    from studykit.perfmodel import advise

    df = explore.ranking(cal, "resnet101", 64, 10.0, 64, top=None)
    want = advise.advise(cal, "resnet101", 64, [64], [10.0], t_comp_s=cal.t_comp_s("resnet101", 64)[0]).ranking(64, 10.0)
    assert list(df["candidate"]) == [r["candidate"] for r in want]
    np.testing.assert_allclose(df["iteration_ms"], [r["iteration_ms"] for r in want])
    assert list(df["rank"]) == list(range(1, len(df) + 1)) and df["iteration_ms"].is_monotonic_increasing
    # the sliders move it: at 1 Gbit/s syncSGD falls behind, at 100 Gbit/s it is within error of the best
    slow = explore.ranking(cal, "resnet101", 64, 1.0, 64, top=None).set_index("candidate")
    fast = explore.ranking(cal, "resnet101", 64, 100.0, 64, top=None).set_index("candidate")
    assert slow.loc["syncSGD", "rank"] > fast.loc["syncSGD", "rank"] and fast.loc["syncSGD", "within_error_of_best"]
    assert len(explore.ranking(cal, top=3)) == 3


def test_explorer_callback_shows_the_table_under_the_caption(cal):
    import matplotlib.pyplot as plt

    fig, axes = explore.explore(cal)
    table = explore.ranking(cal)
    html = explore._FigureWithCaption(fig, axes[0].get_title(), table)._repr_mimebundle_()["text/html"]
    plt.close(fig)
    assert html.index("studykit-speedup") < html.index("studykit-ranking") and table["candidate"].iloc[0] in html


def _slider_values(cal, **moved) -> dict:
    """What the interact passes the explorer's callback: every widget's value (``explore.controls``), some moved."""
    return {**{k: w.value for k, w in explore.controls(cal).items()}, **moved}


def test_explorer_table_keeps_the_calibrations_intervals(cal):
    """With every slider where it starts, the table's intervals are advise's own (the calibration's), not low == high."""
    from studykit.perfmodel import advise

    df = explore.ranking(cal, top=None, **_slider_values(cal)).set_index("candidate")
    want = {r["candidate"]: r for r in advise.advise(cal, "resnet101", 64, [64], [10.0]).ranking(64, 10.0)}
    assert (df["high_ms"] > df["low_ms"]).all(), df[df["high_ms"] <= df["low_ms"]]
    for name in ("syncSGD", "fp16 baseline", "powersgd rank=4"):
        assert df.loc[name, "low_ms"] == pytest.approx(want[name]["low_ms"], rel=1e-3)
        assert df.loc[name, "high_ms"] == pytest.approx(want[name]["high_ms"], rel=1e-3)


def test_explorer_table_intervals_move_with_the_sliders(cal):
    """A moved alpha / gamma keeps the calibration's relative interval: the table still shows one."""
    df = explore.ranking(cal, top=None, **_slider_values(cal, alpha_us=50.0, gamma=1.2)).set_index("candidate")
    assert (df["high_ms"] > df["low_ms"]).all()
    assert (df["low_ms"] <= df["iteration_ms"]).all() and (df["iteration_ms"] <= df["high_ms"]).all()
    moved = whatif.moved(cal, "resnet101", 64, alpha_s=50e-6, gamma=1.2, t_comp_s=0.3)
    f = 50e-6 / cal.alpha_s.value
    assert (moved.alpha_s.value, moved.alpha_s.low, moved.alpha_s.high) == pytest.approx(
        (50e-6, cal.alpha_s.low * f, cal.alpha_s.high * f))
    assert moved.gamma.high / moved.gamma.value == pytest.approx(cal.gamma.high / cal.gamma.value)
    assert moved.t_comp_s("resnet101", 64)[0] == pytest.approx(0.3) and cal.t_comp_s("resnet101", 64)[0] != 0.3
    assert whatif.moved(cal, "resnet101", 64) == cal
    with pytest.raises(ValueError, match="gamma.*> 0"):
        whatif.moved(cal, "resnet101", 64, gamma=-1.0)


def test_explorer_table_agrees_with_the_figure(cal):
    """The figure's compressor and syncSGD take the same times in the table, compute speed-up included (App. D:
    it divides T_comp and T_encode_decode in both)."""
    for moved in ({}, {"compute_speedup": 2.0, "alpha_us": 30.0, "bandwidth_gbps": 3.0}):
        settings = _slider_values(cal, **moved)
        d = explore.explore_data(cal, **settings)
        df = explore.ranking(cal, top=None, **settings).set_index("candidate")
        assert df.loc["syncSGD", "iteration_ms"] == pytest.approx(d["sync"]["total_ms"], rel=1e-9)
        assert df.loc["powersgd rank=4", "iteration_ms"] == pytest.approx(d["compressed"]["total_ms"], rel=1e-9)


def test_explorer_app_draws_one_figure_and_one_table(cal):
    """The notebook's one call: sliders over one output that the callback fills at once (figure, caption, table)."""
    import matplotlib.pyplot as plt

    open_before = set(plt.get_fignums())
    w = explore.app(cal, "resnet101", 64, 10.0, 64, "powersgd", 4.0)
    view = w.result
    assert view is not None and view.png.startswith(b"\x89PNG") and "speed-up over syncSGD" in view.caption
    assert list(view.table["candidate"]) == list(explore.ranking(cal, **_slider_values(cal))["candidate"])
    assert [c for c in w.children if "Output" in type(c).__name__] == [w.out]
    assert all(getattr(c, "continuous_update", False) is False for c in w.children if hasattr(c, "continuous_update"))
    still = explore.app(cal, interactive=False)
    assert still.png.startswith(b"\x89PNG") and still.table is not None
    assert set(plt.get_fignums()) == open_before  # every figure closed: nothing left for the inline backend to show
