"""Figures for training runs; each returns ``(fig, ax)`` with units on the axes.

Tirupati et al.'s Figs. 1-3 ("Distributed Model Training With Dynamic Gradient Compression": train
accuracy, test accuracy, training loss over epochs) and the level schedule ("bits over epochs"); Han et
al.'s time to accuracy against the FP16 baseline (2024, https://arxiv.org/abs/2407.01378), bytes sent
and the per-iteration time split.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from studykit.plots.style import finish, theme
from studykit.train.analysis import method_order

__all__ = ["accuracy_curves", "accuracy_vs_time", "bits_over_epochs", "bytes_bars", "colors", "curves", "loss_curves",
           "metric_bands_by_rate", "metric_vs_time", "time_split_bars", "tta_bars", "tuned_speedups"]

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
           "train_loss": "training cross-entropy (nats per prediction)",
           "test_loss": "test cross-entropy (nats per prediction)",
           "val_loss": "validation cross-entropy (nats per prediction)"}
#: the smallest accuracy span an axis shows (percentage points): a narrower one would draw noise as a trend
MIN_ACC_SPAN = 1.0
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_DASHES = ("-", "--", "-.", ":")


def curves(df: pd.DataFrame, metric: str, ax=None, x: str = "epoch"):
    """``metric`` per method over epochs (``x="epoch"``) or training time (``x="time_s"``)."""
    theme()
    fig, ax = plt.subplots(figsize=(6, 4)) if ax is None else (ax.figure, ax)
    scale = 100 if metric.endswith("_acc") else 1
    col = colors(df["method"])
    for i, m in enumerate(method_order(df["method"])):
        d = df[df["method"] == m].sort_values("epoch")
        xs = d[x] + (1 if x == "epoch" else 0)  # epoch 1 is the first trained epoch
        # marker and dash differ per method, so a line drawn exactly over another stays visible
        ax.plot(xs, scale * d[metric], marker=_MARKERS[i % len(_MARKERS)], ms=4, ls=_DASHES[i % len(_DASHES)],
                label=m, color=col[m], markerfacecolor="none" if i % 2 else col[m])
    if metric.endswith("_acc"):
        lo, hi = ax.get_ylim()
        if hi - lo < MIN_ACC_SPAN:
            mid = (lo + hi) / 2
            ax.set_ylim(mid - MIN_ACC_SPAN / 2, mid + MIN_ACC_SPAN / 2)
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


def accuracy_vs_time(df: pd.DataFrame, target: float | None = None, ax=None):
    """Test accuracy (%) against cumulative training time (s), target as a dashed line."""
    fig, ax = curves(df, "test_acc", ax, x="time_s")
    if target is not None:
        ax.axhline(100 * target, ls="--", c="gray", lw=1, label=f"target {100 * target:.0f}%")
        ax.legend(fontsize=8)
    ax.set_title("Which method reaches the accuracy soonest in time?", fontsize="medium")
    return fig, ax


def bits_over_epochs(df: pd.DataFrame, ax=None):
    """Wire bits per gradient element against the training iteration: a level holds from the iteration
    its round starts to the one it ends, so each change is drawn at the iteration it really happened
    (after the round that triggered it), one line per run; ▲ marks rounds with compression temporarily
    removed; static methods are dotted lines, methods that send the same bits named on one line
    (8-bit sums travel as 16 bits, like fp16)."""
    theme()
    fig, ax = plt.subplots(figsize=(7.5, 3.8)) if ax is None else (ax.figure, ax)
    col = colors(df["method"])
    static: dict[float, list[str]] = {}
    for m in method_order(df["method"]):
        dm = df[df["method"] == m]
        if dm["bits_per_element"].nunique() > 1:
            for i, (_, d) in enumerate(dm.groupby("run_id")):
                d = d.sort_values("step")
                start = (d["step"] - d["iterations"]).tolist()
                xs = start + [d["step"].iloc[-1]]
                ys = d["bits_per_element"].tolist() + [d["bits_per_element"].iloc[-1]]
                ax.step(xs, ys, where="post", color=col[m], lw=2 if i == 0 else 1, alpha=1 if i == 0 else 0.6,
                        label=m if i == 0 else None)
                b = d[d["boost"].astype(bool)]
                if len(b):
                    ax.scatter(b["step"] - b["iterations"] / 2, b["bits_per_element"], marker="^", s=40,
                               color=col[m], zorder=3)
        else:
            static.setdefault(round(float(dm["bits_per_element"].iloc[0]), 1), []).append(m)  # 16.004 is 16
    for y, ms in static.items():
        ax.axhline(y, ls=":", lw=1.2, color=col[ms[0]], label=f"{', '.join(ms)} (static, {y:g} bits)")
    ax.set_xlim(0, float(df["step"].max()))
    ax.set_yscale("log", base=2)
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("training iteration (count)")
    ax.set_ylabel("wire bits per element (bits)")
    ax.set_title("When does the dynamic method change its compression level?\n(▲: a round with compression removed)",
                 fontsize="medium")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    finish(fig)
    return fig, ax


def metric_vs_time(df: pd.DataFrame, metric: str = "val_loss", target: float | None = None, ax=None):
    """``metric`` against cumulative training time (s), one line per run (seed) of each method, so the
    spread over seeds is visible (the legend says how many runs); the target dashed (Han et al. 2024's time
    to accuracy, https://arxiv.org/abs/2407.01378). At most 6 methods keep it readable (docs/CONTRIBUTING.md)."""
    theme()
    fig, ax = plt.subplots(figsize=(7.5, 4.2)) if ax is None else (ax.figure, ax)
    scale = 100 if metric.endswith("_acc") else 1
    col = colors(df["method"])
    runs = df.groupby("method")["run_id"].nunique()
    several = bool((runs > 1).any())
    for m in method_order(df["method"]):
        for i, (_, d) in enumerate(df[df["method"] == m].groupby("run_id")):
            d = d.sort_values("step")
            label = (f"{m} ({runs[m]} run{'s' if runs[m] > 1 else ''})" if several else m) if i == 0 else None
            ax.plot(d["time_s"], scale * d[metric], marker="o", ms=2.5, lw=1.2, color=col[m], alpha=0.85,
                    label=label)
    name = _LABELS.get(metric, metric)
    if target is not None:
        ax.axhline(scale * target, ls="--", c="gray", lw=1, label=f"target {scale * target:g}{'%' if scale == 100 else ''}")
    ax.set_xlabel("training time (s, evaluation excluded)")
    ax.set_ylabel(name.replace(" (", "\n(") if len(name) > 30 else name)  # the unit on a line of its own
    ax.set_title(f"Which method reaches the target {name.split(' (')[0]} first?", fontsize="medium")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    finish(fig)
    return fig, ax


def metric_bands_by_rate(bands: dict, metric: str = "val_loss", target: float | None = None, level: float = 0.9):
    """``metric`` against training time (s), one panel per emulated rate (``{rate: analysis.curve_band(...)}``):
    per method the mean over seeds at each evaluation (markers on a line) and its ``level`` interval as a band; the
    target dashed and named on the line (Han et al. 2024's time to a target, https://arxiv.org/abs/2407.01378).
    Panels share the y axis; each keeps its own time axis (the rates differ several-fold)."""
    from studykit.plots.style import ref_line

    if not bands:
        raise ValueError("no rates to draw: give {rate: analysis.curve_band(frame)} for at least one rate")
    theme()
    fig, axes = plt.subplots(1, len(bands), figsize=(4.6 * len(bands) + 1.6, 4.2), sharey=True, squeeze=False)
    scale = 100 if metric.endswith("_acc") else 1
    name = _LABELS.get(metric, metric)
    col = colors(pd.concat(bands.values())["method"])
    for ax, (rate, b) in zip(axes[0], bands.items()):
        for m in method_order(b["method"]):
            d = b[b["method"] == m].sort_values("step")
            runs = int(d["runs"].max())
            ax.plot(d["time_s"], scale * d[metric], marker="o", ms=2.5, lw=1.3, color=col[m],
                    label=f"{m} ({runs} run{'s' if runs > 1 else ''})")
            ax.fill_between(d["time_s"], scale * d["lo"], scale * d["hi"], color=col[m], alpha=0.18, lw=0)
        if target is not None:
            ref_line(ax, scale * target, f"target {scale * target:.3g}", inline=True, color="0.35")
        ax.set_title(rate, fontsize="medium")
        ax.set_xlabel("training time (s, evaluation excluded)")
    axes[0][0].set_ylabel(name.replace(" (", "\n(") if len(name) > 30 else name)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"Which method reaches the target {name.split(' (')[0]} first at each bandwidth?\n"
                 f"(mean over seeds; band: {100 * level:g} % interval of the mean)", fontsize="medium")
    finish(fig)
    return fig, axes[0]


def tta_bars(tta: pd.DataFrame, baseline: str = "fp16", ax=None, what: str = "target accuracy"):
    """Time to the target (s) per method (``analysis.time_to_accuracy`` or, with seeds,
    ``analysis.time_to_target``: median bar, min-max error bar, runs that reached it / runs); the
    baseline's time dashed; methods that never reached the target are marked."""
    theme()
    fig, ax = plt.subplots(figsize=(6, 3.5)) if ax is None else (ax.figure, ax)
    t = tta["tta_s"].fillna(0)
    col = colors(tta.index)
    bars = ax.bar(tta.index, t, color=[col[m] for m in tta.index])
    if "tta_min_s" in tta:
        lo, hi = (t - tta["tta_min_s"]).clip(lower=0).fillna(0), (tta["tta_max_s"] - t).clip(lower=0).fillna(0)
        ax.errorbar(range(len(t)), t, yerr=[lo, hi], fmt="none", ecolor="black", capsize=3, lw=1)
        for b, (n, k) in zip(bars, zip(tta["runs"], tta["reached"])):
            ax.text(b.get_x() + b.get_width() / 2, b.get_height(), f"{k}/{n}", ha="center", va="bottom", fontsize=7)
    reached = tta["reached"] > 0 if tta["reached"].dtype != bool else tta["reached"]
    for b, ok in zip(bars, reached):
        if not ok:
            ax.text(b.get_x() + b.get_width() / 2, 0, "not\nreached", ha="center", va="bottom", fontsize=8)
    if baseline in tta.index and reached[baseline]:
        ax.axhline(tta.loc[baseline, "tta_s"], ls="--", c="gray", lw=1, label=f"{baseline} baseline")
        ax.legend(fontsize=8)
    ax.set_ylabel(f"time to {what} (s)")
    ax.set_xlabel("method")
    ax.set_title(f"Which method reaches the {what} sooner than {baseline}?", fontsize="medium")
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
    """Per-iteration time (ms) stacked (``analysis.time_split``): compute, encode, communicate, decode from the
    profiled (blocking) iterations, and the median timed (overlapped) iteration as a black marker. The timed
    iteration also holds the optimizer step and the batch's preparation, which the profiled phases leave out:
    the marker sits below the bar by what overlap hides, less that extra work, and above it where the extra
    work is larger (small models on CPU). Older records stack compute,
    compression and communication of one synchronised timing."""
    theme()
    fig, ax = plt.subplots(figsize=(6, 3.5)) if ax is None else (ax.figure, ax)
    new = "encode_ms" in split
    parts = (("compute_ms", "compute"), ("encode_ms", "encode"), ("comm_ms", "communicate"), ("decode_ms", "decode")) \
        if new else (("compute_ms", "compute"), ("compress_ms", "compression"), ("comm_ms", "communication"))
    bottom = None
    for c, name in parts:
        ax.bar(split.index, split[c], bottom=bottom, label=name + (" (profiled)" if new else ""))
        bottom = split[c] if bottom is None else bottom + split[c]
    if new:
        ax.scatter(split.index, split["iteration_ms"], marker="_", s=300, color="black", zorder=3,
                   label="timed iteration (overlapped)")
    ax.set_ylabel("time per iteration (ms)")
    ax.set_xlabel("method")
    ax.set_title("Where does each method's iteration time go?", fontsize="medium")
    plt.setp(ax.get_xticklabels(), rotation=40, ha="right", rotation_mode="anchor")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    finish(fig)
    return fig, ax


def tuned_speedups(tables: dict, baseline: str = "fp16", ax=None):
    """Speed-up over ``baseline`` in time to the strictest target, per method and emulated rate
    (:func:`studykit.train.tuning.tuned_tables`): the geometric mean over seeds with its interval as a whisker,
    on a log axis with 1 (no gain) marked; a method that did not reach the target in every run is marked so."""
    theme()
    fig, ax = plt.subplots(figsize=(7, 3.8)) if ax is None else (ax.figure, ax)
    rates = sorted({r for r, _ in tables}, reverse=True)
    strict = {r: min(t for rr, t in tables if rr == r) for r in rates}
    methods = [m for m in tables[(rates[0], strict[rates[0]])].index if m != baseline]
    width = 0.8 / len(rates)
    x = np.arange(len(methods))
    for i, r in enumerate(rates):
        t = tables[(r, strict[r])].reindex(methods)
        ok = (t["reached"] == t["runs"]).to_numpy()
        mid = t["speedup_vs_baseline"].where(ok).to_numpy(dtype=float)
        lo = np.clip(mid - t["speedup_lo"].to_numpy(dtype=float), 0, None)
        hi = np.clip(t["speedup_hi"].to_numpy(dtype=float) - mid, 0, None)
        xs = x + (i - (len(rates) - 1) / 2) * width
        ax.errorbar(xs, mid, yerr=[np.nan_to_num(lo), np.nan_to_num(hi)], fmt="o", capsize=3,
                    label=f"{r:g} Gbit/s (target {strict[r]:.3f})")
    # the runs (and so whether they reach the target) are the same at every rate: one note per method
    t = tables[(rates[0], strict[rates[0]])].reindex(methods)
    for xx, (k, n) in zip(x, zip(t["reached"], t["runs"])):
        if k < n:
            ax.text(xx, 1, f"reached in\n{int(k)} of {int(n)} runs", fontsize=7, ha="center", va="top", color="dimgray")
    ax.axhline(1, ls="--", c="gray", lw=1)
    ax.set_yscale("log")
    from matplotlib.ticker import FormatStrFormatter

    lo, hi = ax.get_ylim()
    ax.set_ylim(min(lo, 0.7), max(hi, 1.5))
    lo, hi = ax.get_ylim()
    ax.set_yticks([v for v in (0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 10) if lo <= v <= hi])
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter(""))
    ax.set_xlim(-0.7, len(methods) - 0.3)
    ax.set_xticks(x, methods)
    ax.set_ylabel(f"speed-up over {baseline}\n(time to target, log scale)")
    ax.set_xlabel("method (each at its own best learning rate)")
    ax.set_title(f"Tuned: which method reaches the loss sooner than {baseline}?", fontsize="medium")
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right", rotation_mode="anchor")
    ax.legend(fontsize=7)
    finish(fig)
    return fig, ax
