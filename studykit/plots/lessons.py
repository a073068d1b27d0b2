"""The tour's and the gallery's figures: collective costs, overlap timelines, speed-up bars, and the
heatmaps of what survives each compressor. The data come from :mod:`studykit.lessons`."""
from __future__ import annotations

import numpy as np
import pandas as pd

from studykit.lessons.gallery import survivors
from studykit.plots import style as plots
from studykit.plots.style import finish, theme, titled

__all__ = ["plot_bucket_sweep", "plot_collectives", "plot_speedups", "plot_survivors", "plot_timelines",
           "plot_tradeoff"]


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
    ax.set_xlabel("GPUs (world size p, log scale)")
    ax.set_ylabel("time to aggregate one gradient (ms)")
    ax.set_title(titled("Which way of aggregating keeps up as GPUs are added?", title), fontsize="medium")
    ax.legend(fontsize="small")
    finish(fig)
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
    ax.set_ylabel("scenario: lane")
    ax.grid(axis="y", visible=False)
    ax.set_title(titled("How much communication hides under the backward pass?", title),
                 fontsize="medium")
    finish(fig)
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
    plots.ref_line(ax, 1.0, "syncSGD (1x)")
    ax.set_ylim(0, 1.1 * max(float(df["speedup"].max()), 1.0))
    ax.set_xlabel("model")
    ax.set_ylabel("speed-up over syncSGD (x)")
    ax.set_title(titled("Does compression beat syncSGD here?", title), fontsize="medium")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    finish(fig)
    return fig, ax


def plot_bucket_sweep(sweep: pd.DataFrame, t_comp_s: float, default_bucket_mb: float = 25.0, title: str = "",
                      ax=None):
    """syncSGD's iteration time against DDP's bucket size (:func:`studykit.lessons.tour.bucket_sweep`, Sec. 4.1),
    linear scaling (``T_comp``) dashed, DDP's default bucket marked."""
    fig, ax = (ax.figure, ax) if ax is not None else plots.new()
    ax.plot(sweep["bucket_mb"], sweep["total_s"] * 1e3, marker=".", label="syncSGD, model (Sec. 4.1)")
    plots.ref_line(ax, t_comp_s * 1e3, "linear scaling (T_comp)")
    ax.axvline(default_bucket_mb, color="C2", linewidth=1, label=f"DDP default bucket_cap_mb ({default_bucket_mb:g})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bucket size (MiB, log scale)")
    ax.set_ylabel("backward + sync per iteration (ms)")
    ax.set_title(titled("Which bucket size hides the most communication?", title), fontsize="medium")
    ax.legend(fontsize="small")
    finish(fig)
    return fig, ax


def plot_tradeoff(table: pd.DataFrame):
    """The gallery's trade-off, one row per compressor (:func:`studykit.lessons.gallery.compare`): bytes
    saved (compression ratio against an fp32 all-reduce, left) and the error of the aggregate (right),
    both on log axes so that one outlier does not squash the rest; rows sorted by ratio."""
    t = table.sort_values("ratio").reset_index(drop=True)
    fig, (ax, axe) = plots.new(ncols=2, width=4.8, height=0.3 * len(t) + 1.8, sharey=True)
    y = np.arange(len(t))
    colors = ["C0" if c else "C1" for c in t["allreduce_compatible"]]
    ax.scatter(t["ratio"], y, c=colors, zorder=3)
    axe.scatter(t["rel_error"].clip(lower=1e-8), y, c=colors, zorder=3)
    plots.ref_line(ax, 1.0, "fp32 (1x)", axis="x", inline=True)
    ax.set_yticks(y, t["compressor"], fontsize="small")
    ax.invert_yaxis()
    ax.set(xscale="log", xlabel="compression ratio vs fp32\n(x, log scale)", ylabel="compressor",
           title="bytes saved")
    axe.set(xscale="log", xlabel="relative error of the aggregate\n(‖estimate − exact‖ / ‖exact‖, log scale)",
            title="error after one step")
    axe.margins(x=0.08)
    from matplotlib.lines import Line2D

    ax.legend(handles=[Line2D([], [], marker="o", linestyle="none", color="C0", label="all-reduce compatible"),
                       Line2D([], [], marker="o", linestyle="none", color="C1", label="needs all-gather")],
              fontsize="x-small", loc="upper right")
    fig.suptitle("What does each compressor trade: bytes saved against error of the aggregate?", fontsize="medium")
    finish(fig)
    return fig, (ax, axe)


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
        im = ax.imshow(arr, cmap="RdBu_r", vmin=-vmax, vmax=vmax, aspect="auto", interpolation="nearest")
        ax.grid(False)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("input unit (index)")
        ax.set_ylabel("output unit (index)")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle("What survives of one layer's gradient after each compressor? (one colour scale)",
                 fontsize="medium")
    finish(fig)
    cb = fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, pad=0.02)
    cb.set_label("gradient value (a.u.)")
    return fig, axes
