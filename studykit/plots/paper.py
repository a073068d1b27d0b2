"""Figures 4-10 of Agarwal et al. 2022 (https://arxiv.org/abs/2103.00543), redrawn: the kit's model as
lines, the paper's stated values dashed or as open black markers (named with their section), the kit's
measured points as filled markers. The data come from :mod:`studykit.perfmodel.figures`; each function
returns ``(fig, axes)`` and computes nothing."""
from __future__ import annotations

import numpy as np
import pandas as pd

from studykit.plots.style import PAPER_STYLE, new, ref_line

__all__ = ["batch_plot", "collectives_plot", "gap_plot", "overlap_plot", "ps_iterations_plot", "scaling_plot"]

_PAPER_MARK = {"marker": "D", "markersize": 8, "markerfacecolor": "none", "markeredgecolor": PAPER_STYLE["color"],
               "markeredgewidth": 1.5, "linestyle": "none"}
_MEASURED_MARK = {"marker": "o", "markersize": 7, "linestyle": "none", "markeredgecolor": "black"}


def _gpu_axis(ax, world_sizes):
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({int(p) for p in world_sizes}), [str(int(p)) for p in sorted(set(world_sizes))])
    ax.set_xlabel("GPUs (world size p)")


def _plain_ticks(ax):
    """Plain numbers (0.6, 2, 10) on a log y-axis instead of powers of ten."""
    from matplotlib.ticker import ScalarFormatter

    for fmt, which in ((ScalarFormatter(), ax.yaxis.set_major_formatter), (ScalarFormatter(), ax.yaxis.set_minor_formatter)):
        fmt.set_scientific(False)
        which(fmt)


def _panels(n: int, width: float = 4.6):
    fig, axes = new(ncols=n, width=width, height=4.2)
    return fig, np.atleast_1d(axes)


def _finish(fig, axes, title: str, ncol: int = 3):
    """One legend for all panels, below them (labels never cover data), and the question as the title."""
    seen = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
        if ax.get_legend():
            ax.get_legend().remove()
    rows = -(-len(seen) // ncol)
    fig.legend(list(seen.values()), list(seen), loc="lower center", ncol=ncol, fontsize="small", frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.045 * rows + 0.02, 1, 1))
    return fig, axes


def scaling_plot(df: pd.DataFrame, paper: pd.DataFrame | None = None, measured: pd.DataFrame | None = None,
                 measured_methods=(), title: str = "", y: str = "speedup"):
    """Figs. 6-8: each compressor's speed-up over syncSGD (or ``y="time_ms"``) against GPUs, one panel per model."""
    model_names = list(dict.fromkeys(df["model"]))
    fig, axes = _panels(len(model_names))
    for ax, m in zip(axes, model_names):
        g = df[(df["model"] == m) & ((df["compressor"] != "none") | (y != "speedup"))]
        for i, (method, h) in enumerate(g.groupby("method", sort=False)):
            ax.plot(h["world_size"], h[y], marker=".", color=f"C{i}", label=f"{method} (kit model)")
        if y == "speedup":
            ref_line(ax, 1.0, "syncSGD", color="0.6", linestyle="-", linewidth=0.8)
        else:
            ax.plot(g["world_size"].unique(), g.groupby("world_size")["linear_ms"].first(), **PAPER_STYLE,
                    label="linear scaling (T_comp)")
        if paper is not None and len(pm := paper[(paper["model"] == m) & (paper["quantity"] == y)]):
            for _, r in pm.iterrows():
                ax.plot(r["world_size"], r["value"], **_PAPER_MARK)
            ax.plot([], [], **_PAPER_MARK, label="paper's stated values (" + ", ".join(dict.fromkeys(pm["section"])) + ")")
        if measured is not None and len(mm := measured[(measured["model"] == m) & measured["method"].isin(measured_methods)]):
            for j, (method, h) in enumerate(mm.groupby("method")):
                ax.plot(h["world_size"], h[y if y in h else "ms"], **_MEASURED_MARK, color=f"C{5 + j}",
                        label=f"measured {method}, {h['gpu'].iloc[0].replace('NVIDIA ', '')}, "
                              f"{h['rate_gbps'].iloc[0]:g} Gbit/s")
        _gpu_axis(ax, list(df["world_size"]) + (list(mm["world_size"]) if measured is not None and len(mm) else []))
        ax.set_yscale("log")  # measured H200 speed-ups and V100 model ratios span a decade
        _plain_ticks(ax)
        ax.set_ylabel("speed-up over syncSGD (x, log)" if y == "speedup" else "backward + sync per iteration (ms)")
        ax.set_title(m)
    return _finish(fig, axes, title)


def batch_plot(frames: dict[str, pd.DataFrame], paper: pd.DataFrame | None = None, title: str = ""):
    """Fig. 9: PowerSGD rank 4's speed-up over syncSGD against GPUs per batch size; one panel per frame
    (e.g. the nominal and the fitted effective bandwidth); the paper's Sec. 3.3 points as open markers."""
    fig, axes = _panels(len(frames))
    for ax, (name, df) in zip(axes, frames.items()):
        g = df[df["compressor"] != "none"]
        for i, (bs, h) in enumerate(g.groupby("batch_size")):
            ax.plot(h["world_size"], h["speedup"], marker=".", color=f"C{i}", label=f"batch {bs} (kit model)")
            if paper is not None and len(pb := paper[paper["batch_size"] == bs]):
                ax.plot(pb["world_size"], pb["value"], **{**_PAPER_MARK, "markeredgecolor": f"C{i}"})
        if paper is not None:
            ax.plot([], [], **_PAPER_MARK, label="paper, Sec. 3.3 (96 GPUs)")
        ref_line(ax, 1.0, "syncSGD", color="0.6", linestyle="-", linewidth=0.8)
        _gpu_axis(ax, df["world_size"])
        ax.set_ylabel("PowerSGD rank 4 speed-up over syncSGD (x)")
        ax.set_title(name)
    return _finish(fig, axes, title)


def gap_plot(df: pd.DataFrame, paper: pd.DataFrame | None = None, measured: pd.DataFrame | None = None,
             title: str = ""):
    """Fig. 10: time above linear scaling (ms, log) against GPUs, syncSGD and each compressor, one panel per
    model; the paper's 200 ms dashed; measured syncSGD gaps (iteration minus one GPU's) as markers."""
    model_names = list(dict.fromkeys(df["model"]))
    fig, axes = _panels(len(model_names))
    for ax, m in zip(axes, model_names):
        for i, (method, h) in enumerate(df[df["model"] == m].groupby("method", sort=False)):
            ax.plot(h["world_size"], h["gap_ms"], marker=".", color=f"C{i}", label=f"{method} (kit model)")
        if paper is not None and len(paper):
            r = paper.iloc[0]
            ref_line(ax, float(r["value"]), f"paper: {r['value']:g} ms ({r['model']}, {r['section']})")
            if r["model"] == m:
                ax.plot(r["world_size"], r["value"], **_PAPER_MARK)
        if measured is not None and len(mm := measured[(measured["model"] == m) & (measured["method"] == "syncSGD")]):
            ax.plot(mm["world_size"], mm["gap_ms"], **_MEASURED_MARK, color="C5",
                    label=f"measured syncSGD, {mm['gpu'].iloc[0].replace('NVIDIA ', '')}, "
                          f"{mm['rate_gbps'].iloc[0]:g} Gbit/s, batch {int(mm['batch_size'].iloc[0])}")
        _gpu_axis(ax, list(df["world_size"]) + (list(mm["world_size"]) if measured is not None and len(mm) else []))
        ax.set_yscale("log")
        _plain_ticks(ax)
        ax.set_ylabel("time above linear scaling (ms)")
        ax.set_title(m)
    return _finish(fig, axes, title)


def collectives_plot(model_df: pd.DataFrame, measured: pd.DataFrame | None = None, title: str = ""):
    """Fig. 4: aggregation time against GPUs (log-log). Left: the paper's equations (Table 1, Eq. 1, App. B)
    on its inputs, solid for the fp32 gradient, dotted for a compressor's payload. Right: the kit's measured
    NCCL collectives and parameter-server emulations."""
    fig, axes = _panels(2 if measured is not None and len(measured) else 1, width=5.2)
    ax = axes[0]
    colors = {}
    for (payload, scheme), g in model_df.groupby(["payload", "scheme"], sort=False):
        c = colors.setdefault(scheme, f"C{len(colors)}")
        ax.plot(g["world_size"], g["time_ms"], marker=".", color=c,
                linestyle="-" if payload == "fp32 gradient" else ":", label=f"{scheme}: {payload}")
    _gpu_axis(ax, model_df["world_size"])
    ax.set_yscale("log")
    ax.set_ylabel("time to aggregate (ms)")
    _plain_ticks(ax)
    r = model_df.iloc[0]
    ax.set_title(f"model, paper's equations: {r['model']}, {r['bandwidth_gbps']:g} Gbit/s", fontsize="small")
    if len(axes) > 1:
        ax = axes[1]
        same = {"all-reduce": "all-reduce (Eq. 1)", "all-gather": "all-gather (App. B)"}
        for i, (scheme, g) in enumerate(measured.groupby("scheme", sort=False)):
            c = colors.get(same.get(scheme, "parameter server (Table 1)"), f"C{i}")
            ax.errorbar(g["world_size"], g["ms"], yerr=[g["ms"] - g["ms_min"], g["ms_max"] - g["ms"]], color=c,
                        **{**_MEASURED_MARK, "marker": "osv^"[i % 4]}, label=f"{scheme} (measured)")
        _gpu_axis(ax, measured["world_size"])
        ax.set_yscale("log")
        ax.set_ylabel("measured time (ms, median, min-max)")
        _plain_ticks(ax)
        r = measured.iloc[0]
        ax.set_title(f"measured: {r['nbytes'] / 2**20:.0f} MiB per worker, {r['gpu'].replace('NVIDIA ', '')}, "
                     f"{r['network']}", fontsize="small")
    return _finish(fig, axes, title, ncol=2)


#: Fig. 4's schemes in the colours :func:`collectives_plot` gives them (its model panel's order)
_SCHEME_COLOR = {"all-reduce": "C0", "all-gather": "C1", "parameter server": "C2", "mixed": "C3"}


def ps_iterations_plot(df: pd.DataFrame, title: str = ""):
    """Fig. 4 in measured training iterations (:func:`studykit.perfmodel.figures.measured_ps_iterations`):
    iteration time against world size, one panel per network; colour = scheme (as in :func:`collectives_plot`),
    marker = payload, median with min-max bars, the schemes of one payload side by side at each p."""
    from matplotlib.ticker import LogLocator, NullFormatter

    nets = list(dict.fromkeys(df["network"]))
    fig, axes = _panels(len(nets), width=5.2)
    payloads = list(dict.fromkeys(df["payload"]))
    series = list(dict.fromkeys(zip(df["payload"], df["scheme"])))
    for ax, net in zip(axes, nets):
        g = df[df["network"] == net]
        for i, (payload, scheme) in enumerate(series):
            s = g[(g["payload"] == payload) & (g["scheme"] == scheme)]
            dodge = 2 ** (0.035 * (i - (len(series) - 1) / 2))  # spread the series at each p (log2 x-axis)
            ax.errorbar(s["world_size"] * dodge, s["ms"], yerr=[s["ms"] - s["ms_min"], s["ms_max"] - s["ms"]],
                        color=_SCHEME_COLOR.get(scheme, "C4"),
                        **{**_MEASURED_MARK, "marker": "osv^D"[payloads.index(payload) % 5]},
                        label=f"{payload} via {scheme}")
        _gpu_axis(ax, g["world_size"])
        ax.set_xlabel("processes (world size p)")
        ax.set_yscale("log")
        ax.set_ylabel("iteration time (ms, median, min-max)")
        _plain_ticks(ax)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))  # 10, 20, 50, 100: labels never collide
        ax.yaxis.set_minor_formatter(NullFormatter())
        r = g.iloc[0]
        device = str(r["gpu"]).replace("NVIDIA ", "")
        ax.set_title(f"{net}\n{r['model']} batch {r['batch_size']}, {r['backend']}, {device}", fontsize="small")
    return _finish(fig, axes, title, ncol=3)


def overlap_plot(df: pd.DataFrame, measured: pd.DataFrame | None = None, title: str = ""):
    """Fig. 5 / App. A. Left: the kit's model, hook time over post time against the fraction of encode/decode
    that hides under the backward pass (above 1: overlapping is slower, as the paper measured). Right: the
    kit's measured hook / post ratios (bars: a ratio, linear axis)."""
    fig, axes = _panels(2 if measured is not None and len(measured) else 1, width=5.2)
    ax = axes[0]
    for i, (method, g) in enumerate(df.groupby("method", sort=False)):
        ax.plot(g["hidden_fraction"], g["ratio"], marker=".", color=f"C{i}", label=f"{method} (kit model)")
    ref_line(ax, 1.0, "paper (Sec. 3.1, Fig. 5): hooks slower, above this line", color=PAPER_STYLE["color"])
    r = df.iloc[0]
    ax.set_xlabel("fraction of encode/decode hidden under backward")
    ax.set_ylabel("hook / post-backward time (x)")
    ax.set_title(f"kit's model: {r['model']}, batch {r['batch_size']}, {r['world_size']} GPUs, "
                 f"{r['bandwidth_gbps']:g} Gbit/s", fontsize="small")
    if len(axes) > 1:
        ax = axes[1]
        labels = [f"{m}\n{mo} p={p}" for m, mo, p in zip(measured["method"], measured["model"], measured["world_size"])]
        ax.bar(range(len(measured)), measured["ratio"], color=[f"C{i % 3}" for i in range(len(measured))])
        ax.set_xticks(range(len(measured)), labels, fontsize="x-small", rotation=45, ha="right")
        ref_line(ax, 1.0, "hook as fast as post")
        ax.set_ylabel("measured hook / post (x)")
        r = measured.iloc[0]
        ax.set_title(f"measured by the kit: {r['gpu']}, {r['rate_gbps']:g} Gbit/s emulated", fontsize="small")
    return _finish(fig, axes, title, ncol=2)
