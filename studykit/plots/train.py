"""Figures for training runs; each returns ``(fig, ax)`` with units on the axes.

Tirupati et al.'s Figs. 1-3 ("Distributed Model Training With Dynamic Gradient Compression": train
accuracy, test accuracy, training loss over epochs) and the level schedule ("bits over epochs"); Han et
al.'s time to accuracy against the FP16 baseline (2024, https://arxiv.org/abs/2407.01378), bytes sent
and the per-iteration time split.
"""
from __future__ import annotations

from typing import Optional

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from studykit.plots.style import finish, theme
from studykit.train.analysis import method_order

__all__ = ["colors", "curves", "accuracy_curves", "loss_curves", "bits_over_epochs", "tta_bars", "bytes_bars",
           "time_split_bars", "accuracy_vs_time"]

def colors(methods) -> dict:
    """One colour per method (seaborn's colorblind palette in :func:`method_order`), so a method
    keeps its colour in every figure of a notebook."""
    import seaborn as sns

    ms = method_order(methods)
    pal = sns.color_palette("colorblind", 10)
    # reordered so the first four (none, fp16, quantize8, dynamic) are far apart (orange vs vermilion is not)
    pal = [pal[i] for i in (0, 1, 2, 4, 3, 9, 5, 7, 8, 6)]
    return {m: pal[i % len(pal)] for i, m in enumerate(ms)}


_LABELS = {"train_acc": "training accuracy (%)", "test_acc": "test accuracy (%)", "val_acc": "validation accuracy (%)",
           "train_loss": "training cross-entropy loss (nats)", "test_loss": "test cross-entropy loss (nats)"}


def curves(df: pd.DataFrame, metric: str, ax=None, x: str = "epoch"):
    """``metric`` per method over epochs (``x="epoch"``) or training time (``x="time_s"``)."""
    theme()
    fig, ax = plt.subplots(figsize=(6, 4)) if ax is None else (ax.figure, ax)
    scale = 100 if metric.endswith("_acc") else 1
    col = colors(df["method"])
    for m in method_order(df["method"]):
        d = df[df["method"] == m].sort_values("epoch")
        xs = d[x] + (1 if x == "epoch" else 0)  # epoch 1 is the first trained epoch
        ax.plot(xs, scale * d[metric], marker="o", ms=3, label=m, color=col[m])
    ax.set_xlabel("epoch (count)" if x == "epoch" else "training time (s)")
    ax.set_ylabel(_LABELS.get(metric, metric))
    ax.set_title(f"How does the {_LABELS.get(metric, metric).split(' (')[0]} change as training goes on?",
                 fontsize="medium")
    ax.legend(fontsize=8)
    finish(fig)
    return fig, ax


def accuracy_curves(df: pd.DataFrame, which: str = "test", ax=None):
    """Tirupati et al. Fig. 1 (``which="train"``) / Fig. 2 (``"test"``): accuracy (%) per epoch."""
    fig, ax = curves(df, f"{which}_acc", ax)
    ax.set_title(f"Does compression cost {which} accuracy per epoch?", fontsize="medium")
    return fig, ax


def loss_curves(df: pd.DataFrame, ax=None):
    """Tirupati et al. Fig. 3: training cross-entropy loss per epoch."""
    fig, ax = curves(df, "train_loss", ax)
    ax.set_title("Does compression slow the loss's descent per epoch?", fontsize="medium")
    return fig, ax


def accuracy_vs_time(df: pd.DataFrame, target: Optional[float] = None, ax=None):
    """Test accuracy (%) against cumulative training time (s), target as a dashed line."""
    fig, ax = curves(df, "test_acc", ax, x="time_s")
    if target is not None:
        ax.axhline(100 * target, ls="--", c="gray", lw=1, label=f"target {100 * target:.0f}%")
        ax.legend(fontsize=8)
    ax.set_title("Which method reaches the accuracy soonest in time?", fontsize="medium")
    return fig, ax


def bits_over_epochs(df: pd.DataFrame, ax=None):
    """Wire bits per gradient element in each epoch: methods whose level changes as stairs, epoch ``k``
    spanning ``[k-1, k]`` (▲: an epoch with compression temporarily removed); static methods as dotted
    lines, methods that send the same bits named on one line (8-bit sums travel as 16 bits, like fp16)."""
    theme()
    fig, ax = plt.subplots(figsize=(7.5, 3.8)) if ax is None else (ax.figure, ax)
    col = colors(df["method"])
    last = int(df["epoch"].max()) + 1
    static: dict[float, list[str]] = {}
    for m in method_order(df["method"]):
        d = df[df["method"] == m].sort_values("epoch")
        if d["bits_per_element"].nunique() > 1:
            ax.stairs(d["bits_per_element"].to_numpy(float), np.append(d["epoch"].to_numpy(float),
                                                                       d["epoch"].iloc[-1] + 1.0),
                      baseline=None, label=m, color=col[m], lw=2)
            b = d[d["boost"].astype(bool)]
            if len(b):
                ax.scatter(b["epoch"] + 0.5, b["bits_per_element"], marker="^", s=50, color=col[m], zorder=3)
        else:
            static.setdefault(round(float(d["bits_per_element"].iloc[0]), 1), []).append(m)  # 16.004 is 16
    for y, ms in static.items():
        ax.axhline(y, ls=":", lw=1.2, color=col[ms[0]], label=f"{', '.join(ms)} (static, {y:g} bits)")
    ax.set_xlim(0, last)
    ax.set_yscale("log", base=2)
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("epoch (count)")
    ax.set_ylabel("wire bits per element (bits)")
    ax.set_title("How many bits does each method send, epoch by epoch?\n(▲: an epoch with compression removed)",
                 fontsize="medium")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    finish(fig)
    return fig, ax


def tta_bars(tta: pd.DataFrame, baseline: str = "fp16", ax=None):
    """Time to target accuracy (s) per method (``analysis.time_to_accuracy``); the baseline's
    TTA dashed; methods that never reached the target are marked."""
    theme()
    fig, ax = plt.subplots(figsize=(6, 3.5)) if ax is None else (ax.figure, ax)
    t = tta["tta_s"].fillna(0)
    col = colors(tta.index)
    bars = ax.bar(tta.index, t, color=[col[m] for m in tta.index])
    for b, reached in zip(bars, tta["reached"]):
        if not reached:
            ax.text(b.get_x() + b.get_width() / 2, 0, "not\nreached", ha="center", va="bottom", fontsize=8)
    if baseline in tta.index and tta.loc[baseline, "reached"]:
        ax.axhline(tta.loc[baseline, "tta_s"], ls="--", c="gray", lw=1, label=f"{baseline} baseline")
        ax.legend(fontsize=8)
    ax.set_ylabel("time to target accuracy (s)")
    ax.set_xlabel("method")
    ax.set_title("Which method reaches the target accuracy first?", fontsize="medium")
    plt.setp(ax.get_xticklabels(), rotation=40, ha="right", rotation_mode="anchor")
    finish(fig)
    return fig, ax


def bytes_bars(summary: pd.DataFrame, column: str = "sent_per_worker_mb", ax=None):
    """Data put on the wire per method (MB), from ``analysis.summary_table``: markers on a log axis
    (the methods span decades, and bars on a log axis mislead)."""
    theme()
    fig, ax = plt.subplots(figsize=(6, 4)) if ax is None else (ax.figure, ax)
    col = colors(summary.index)
    x = np.arange(len(summary))
    ax.vlines(x, summary[column].min() / 2, summary[column], color=[col[m] for m in summary.index], lw=1)
    ax.scatter(x, summary[column], color=[col[m] for m in summary.index], zorder=3)
    ax.set_xticks(x, summary.index)
    ax.set_yscale("log")
    ax.set_ylabel("sent per worker (MB, log scale)" if column == "sent_per_worker_mb"
                  else "sent, all workers (MB, log scale)")
    ax.set_xlabel("method")
    ax.set_title("How many bytes does each method put on the wire?", fontsize="medium")
    plt.setp(ax.get_xticklabels(), rotation=40, ha="right", rotation_mode="anchor")
    finish(fig)
    return fig, ax


def time_split_bars(split: pd.DataFrame, ax=None):
    """Per-iteration time (ms) stacked: compute, compression, communication (``analysis.time_split``)."""
    theme()
    fig, ax = plt.subplots(figsize=(6, 3.5)) if ax is None else (ax.figure, ax)
    bottom = None
    for col, name in (("compute_ms", "compute"), ("compress_ms", "compression"), ("comm_ms", "communication")):
        ax.bar(split.index, split[col], bottom=bottom, label=name)
        bottom = split[col] if bottom is None else bottom + split[col]
    ax.set_ylabel("time per iteration (ms)")
    ax.set_xlabel("method")
    ax.set_title("Where does each method's iteration time go?", fontsize="medium")
    plt.setp(ax.get_xticklabels(), rotation=40, ha="right", rotation_mode="anchor")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    finish(fig)
    return fig, ax
