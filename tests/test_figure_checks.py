"""The figure checker (studykit.plots.check) on small figures broken on purpose, one defect each, and on their
repaired twins: overprinted (rotated) tick labels, a reference line on a panel it does not belong to, measured
data without its spread or with a spread hidden under the markers, an axis range narrower than the data's own
noise; and the hook that checks every figure a notebook's kernel shows."""
import io
import json

import matplotlib.pyplot as plt  # conftest.py selects the Agg backend
import numpy as np
import pytest
from matplotlib.backend_bases import FigureCanvasBase

from studykit.plots import check


def _axes(ax, title="Does it pay?", xlabel="bandwidth (Gbit/s)", ylabel="time (ms)"):
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    return ax


def _found(fig) -> str:
    try:
        return "\n".join(check.problems(fig))
    finally:
        plt.close(fig)


# ------------------------------------------------------------------ overprinted tick labels
def _bars(n: int, width: float, rotation: float):
    fig, ax = plt.subplots(figsize=(width, 4), layout="constrained")
    ax.bar(range(n), np.arange(1, n + 1))
    ax.set_xticks(range(n), [f"powersgd r4\nresnet{i} p=2" for i in range(n)], fontsize="x-small",
                  rotation=rotation, ha="right" if rotation else "center")
    _axes(ax, xlabel="compressor, model", ylabel="hook / post (x)")
    return fig


@pytest.mark.parametrize("rotation", [0, 45])
def test_overprinted_tick_labels_are_flagged_rotated_or_not(rotation):
    assert "x tick labels" in _found(_bars(20, 4, rotation))


@pytest.mark.parametrize("rotation", [0, 45, 90])
def test_tick_labels_with_room_pass(rotation):
    assert _found(_bars(3, 8, rotation)) == ""


def test_rotated_labels_whose_upright_boxes_overlap_but_whose_ink_does_not_pass():
    """Slanted labels side by side: their upright bounding boxes overlap, the turned texts do not."""
    fig, ax = plt.subplots(figsize=(5, 4), layout="constrained")
    ax.plot(range(10), range(10))
    ax.set_xticks(range(10), [f"a longer label {i}" for i in range(10)], rotation=45, ha="right",
                  rotation_mode="anchor")
    _axes(ax, xlabel="setting", ylabel="time (ms)")
    fig.canvas.draw()
    boxes = [t.get_window_extent() for t in ax.get_xticklabels()]
    assert any(check._overlap(a, b) > 4 for a, b in zip(boxes, boxes[1:])), "the test needs overlapping upright boxes"
    assert _found(fig) == ""


# ------------------------------------------------------------------ reference lines on their own panel
def _panels(ref_on_every_panel: bool):
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), layout="constrained")
    for ax, model in zip(axes, ("resnet50", "bert_base")):
        ax.plot([8, 96], [30, 60], marker="o", label="syncSGD (kit model)")
        if ref_on_every_panel or model == "bert_base":
            ax.axhline(200, linestyle="--", label="paper: 200 ms (bert_base)", gid=check.ref_gid("bert_base"))
        _axes(ax, title=model, xlabel="GPUs (count)", ylabel="time above linear (ms)")
    fig.suptitle("How far above linear scaling?")
    return fig


def test_a_reference_line_on_a_panel_it_does_not_belong_to_is_flagged():
    found = _found(_panels(ref_on_every_panel=True))
    assert "reference line 'paper: 200 ms (bert_base)' belongs to the 'bert_base' panel" in found
    assert found.count("reference line") == 1 and "resnet50" in found


def test_a_reference_line_on_its_own_panel_passes():
    assert _found(_panels(ref_on_every_panel=False)) == ""


def test_a_panel_name_matches_whole_words_only():
    fig, ax = plt.subplots(figsize=(5, 3.5), layout="constrained")
    ax.plot([1, 2], [1, 2])
    ax.axhline(1.5, gid=check.ref_gid("resnet50"))
    _axes(ax, title="resnet501: does it pay?")
    assert "belongs to the 'resnet50' panel" in _found(fig)


def test_ref_gid_needs_a_panel_name():
    with pytest.raises(ValueError, match="panel's name"):
        check.ref_gid(" ")


# ------------------------------------------------------------------ measured data and its spread
def _measured(kind: str):
    fig, ax = plt.subplots(figsize=(5, 3.5), layout="constrained")
    x, y = np.array([1.0, 2.5, 10.0, 25.0]), np.array([90.0, 60.0, 45.0, 40.0])
    if kind == "bare":
        ax.plot(x, y, marker="o", gid=check.MEASURED, label="hook (measured)")
    elif kind == "errorbar":
        ax.errorbar(x, y, yerr=0.1 * y, marker="o", capsize=3, gid=check.MEASURED, label="hook (measured)")
    elif kind == "band":
        ax.plot(x, y, marker="o", gid="measured:hook", label="hook (measured)")
        ax.fill_between(x, 0.9 * y, 1.1 * y, alpha=0.3, gid="spread:hook")
    elif kind == "band of another series":
        ax.plot(x, y, marker="o", gid="measured:hook", label="hook (measured)")
        ax.fill_between(x, 0.9 * y, 1.1 * y, alpha=0.3, gid="spread:post")
    elif kind == "bars":
        ax.bar(range(4), y, yerr=0.1 * y, gid=check.MEASURED, label="hook (measured)")
    elif kind == "bars without error":
        ax.bar(range(4), y, gid=check.MEASURED, label="hook (measured)")
    elif kind == "hidden":  # whiskers far shorter than the marker, no caps
        ax.errorbar(x, y, yerr=0.002 * y, marker="o", markersize=12, gid=check.MEASURED, label="hook (measured)")
    elif kind == "hidden but capped":
        ax.errorbar(x, y, yerr=0.002 * y, marker="o", markersize=12, capsize=9, gid=check.MEASURED,
                    label="hook (measured)")
    elif kind == "zoomed into the noise":
        ax.errorbar(x, y / y, yerr=0.2, marker="o", capsize=3, gid=check.MEASURED, label="hook / post (measured)")
        ax.set_ylim(0.98, 1.02)
    elif kind == "model line":  # not measured: no spread asked for
        ax.plot(x, y, label="model")
    ax.legend(fontsize="x-small")
    _axes(ax, ylabel="hook / post (x)" if kind == "zoomed into the noise" else "time (ms)")
    return fig


@pytest.mark.parametrize("kind", ["bare", "band of another series", "bars without error"])
def test_measured_data_without_its_spread_is_flagged(kind):
    assert "drawn without its spread" in _found(_measured(kind))


@pytest.mark.parametrize("kind", ["errorbar", "band", "bars", "hidden but capped", "model line"])
def test_measured_data_with_its_spread_passes(kind):
    assert _found(_measured(kind)) == ""


def test_a_spread_hidden_under_the_markers_is_flagged():
    assert "hidden under its markers" in _found(_measured("hidden"))


def test_an_axis_range_narrower_than_the_noise_is_flagged():
    found = _found(_measured("zoomed into the noise"))
    assert "the y axis (0.98 to 1.02) is narrower than the spread" in found


def test_the_same_noise_on_an_axis_wide_enough_passes():
    fig = _measured("zoomed into the noise")
    fig.axes[0].set_ylim(0.5, 1.5)
    assert _found(fig) == ""


# ------------------------------------------------------------------ every figure a notebook shows
def _bad_figure():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([1, 2], [1, 2], gid=check.MEASURED)
    ax.set(title="Is it?", xlabel="bandwidth", ylabel="time (ms)")
    return fig


def test_a_watched_kernel_reports_each_figure_once_in_the_order_shown(tmp_path, monkeypatch):
    """In-process stand-in for a kernel: the watch wraps print_figure, which every way of showing a figure calls."""
    monkeypatch.setattr(FigureCanvasBase, "print_figure", FigureCanvasBase.print_figure)  # restored afterwards
    report = tmp_path / "figures.jsonl"
    report.write_text("")
    check.watch_kernel(report)
    good = plt.figure(figsize=(4, 3), layout="constrained")
    good.add_subplot().set(title="Does it pay?", xlabel="bandwidth (Gbit/s)", ylabel="time (ms)")
    bad = _bad_figure()
    for fig in (good, bad, bad):  # shown twice (png and retina): checked once
        fig.savefig(io.BytesIO(), format="png")
    plt.close("all")
    rows = [json.loads(line) for line in report.read_text().splitlines()]
    assert [(r["figure"], r["title"], bool(r["problems"])) for r in rows] == [(1, "Does it pay?", False),
                                                                              (2, "Is it?", True)]
    found = check.kernel_problems(report)
    assert found and all(p.startswith("figure 2 ('Is it?'): ") for p in found)
    assert any("drawn without its spread" in p for p in found) and any("'bandwidth' has no unit" in p for p in found)


def test_checking_kernels_sets_and_restores_the_environment(tmp_path, monkeypatch):
    import os

    monkeypatch.delenv(check.REPORT_ENV, raising=False)
    monkeypatch.setenv("IPYTHONDIR", "/somewhere")
    with check.checking_kernels(tmp_path) as report:
        assert os.environ[check.REPORT_ENV] == str(report) and report.read_text() == ""
        startup = tmp_path / "ipython" / "profile_default" / "startup"
        assert os.environ["IPYTHONDIR"] == str(tmp_path / "ipython")
        assert "check.watch_kernel" in next(startup.glob("*.py")).read_text()
    assert os.environ["IPYTHONDIR"] == "/somewhere" and check.REPORT_ENV not in os.environ
    assert check.kernel_problems(report) == []


@pytest.mark.slow
def test_a_notebook_kernel_reports_its_broken_figure(tmp_path):
    """End to end: papermill's kernel, started inside checking_kernels, writes the problems of the figure it shows."""
    import nbformat

    from studykit.nbtools import runner

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2], [1, 2], gid='measured')\n"
        "ax.set(title='Is it?', xlabel='bandwidth', ylabel='time (ms)');")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, str(path))
    with check.checking_kernels(tmp_path / "check") as report:
        runner.run_one(path, {}, tmp_path / "out", html_copy=False, timeout_s=120)
    found = check.kernel_problems(report)
    assert any("figure 1 ('Is it?')" in p and "drawn without its spread" in p for p in found), found
