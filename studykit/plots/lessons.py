"""The tour's and the gallery's figures: collective costs, overlap timelines, speed-up bars, and the
heatmaps of what survives each compressor. The data come from :mod:`studykit.lessons`."""
from __future__ import annotations

import numpy as np
import pandas as pd

from studykit.lessons.gallery import survivors
from studykit.plots import style as plots
from studykit.plots.style import theme

__all__ = ["plot_collectives", "plot_timelines", "plot_speedups", "plot_survivors"]


def plot_collectives(df: pd.DataFrame, title: str = "", ax=None):
    """Aggregation time vs GPUs (log-log) for ring, tree and parameter server; dashed: the ring's
    bandwidth term as p grows without bound (``2 n / BW``)."""

    fig, ax = (ax.figure, ax) if ax is not None else plots.new()
    x = df["world_size"]
    ax.plot(x, df["ring_s"] * 1e3, marker=".", label="ring all-reduce (Eq. 1)")
    ax.plot(x, df["ring_bandwidth_s"] * 1e3, linestyle=":", color="C0", label="  ring: bandwidth term only")
    ax.plot(x, df["tree_s"] * 1e3, marker=".", label="tree all-reduce (Table 1)")
    ax.plot(x, df["parameter_server_s"] * 1e3, marker=".", label="parameter server (Table 1)")
    plots.ref_line(ax, float(df["ring_bandwidth_limit_s"].iloc[0]) * 1e3, "ring bandwidth term as p grows: 2n/BW")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs (world size p)")
    ax.set_ylabel("time to aggregate one gradient (ms)")
    ax.set_title(title)
    ax.legend(fontsize="small")
    return fig, ax


def plot_timelines(timelines: dict[str, pd.DataFrame], title: str = "", ax=None):
    """Gantt chart of :func:`overlap_timeline` results, one pair of lanes per scenario (ms)."""

    fig, ax = (ax.figure, ax) if ax is not None else plots.new(width=8, height=1.0 + 1.1 * len(timelines))
    yticks, ylabels = [], []
    y = 0.0
    for name, tl in reversed(list(timelines.items())):
        for lane, color in (("all-reduce (network)", "C1"), ("backward (GPU)", "C0")):
            seg = tl[tl["lane"] == lane]
            spans = [(s * 1e3, (e - s) * 1e3) for s, e in zip(seg["start_s"], seg["end_s"])]
            ax.broken_barh(spans, (y, 0.8), facecolors=color, edgecolors="white", linewidth=0.8)
            yticks.append(y + 0.4)
            ylabels.append(f"{name}: {lane.split(' ')[0]}")
            y += 1.0
        end = float(tl["end_s"].max()) * 1e3
        ax.plot([end, end], [y - 2.0, y], color="0.25", linestyle="--", linewidth=1.2)
        ax.annotate(f"{end:.0f} ms", (end, y - 0.2), xytext=(3, 0), textcoords="offset points", fontsize="small",
                    va="top")
        y += 0.5
    ax.set_yticks(yticks, ylabels, fontsize="small")
    ax.set_xlabel("time within one iteration (ms)")
    ax.set_title(title)
    return fig, ax


def plot_speedups(df: pd.DataFrame, title: str = "", ax=None):
    """Grouped bars of :func:`speedup_table`; dashed: syncSGD (1x)."""

    fig, ax = (ax.figure, ax) if ax is not None else plots.new(width=7)
    model_names = list(dict.fromkeys(df["model"]))
    labels = list(dict.fromkeys(df["compressor"]))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        g = df[df["compressor"] == label].set_index("model").reindex(model_names)
        ax.bar(np.arange(len(model_names)) + (i - (len(labels) - 1) / 2) * width, g["speedup"], width=width,
               label=label)
    ax.set_xticks(range(len(model_names)), model_names)
    plots.ref_line(ax, 1.0, "syncSGD")
    ax.set_ylim(0, 1.35 * float(df["speedup"].max()))
    ax.set_ylabel("speed-up over syncSGD (x)")
    ax.set_title(title)
    ax.legend(fontsize="small", ncol=2, loc="upper left")
    return fig, ax


def plot_survivors(specs: list[str], grads, tensor_index: int = 0, max_cols: int = 4):
    """A grid of heatmaps: the exact average gradient, then each compressor's estimate."""
    import matplotlib.pyplot as plt


    theme()
    panels = [("exact average", survivors(specs[0], grads, tensor_index)[0])]
    panels += [(s, survivors(s, grads, tensor_index)[1]) for s in specs]
    cols = min(max_cols, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    vmax = float(np.abs(panels[0][1]).max())
    for ax, (title, arr) in zip(axes.flat, panels):
        ax.imshow(arr, cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto", interpolation="nearest")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("input unit")
        ax.set_ylabel("output unit")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    return fig, axes
