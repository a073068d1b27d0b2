"""Figures of the performance model scored against measurements (``notebooks/verify.ipynb``). Each takes
the predictions table of :func:`studykit.perfmodel.verify.verify` (or the scaling CSVs) and returns
``(fig, axes)``, or ``(None, None)`` when the table holds nothing to draw."""
from __future__ import annotations

import numpy as np
import pandas as pd

from studykit.plots.style import new, theme

__all__ = ["bucket_plot", "post_compressors_plot", "bandwidth_plot", "error_overview_plot", "scaling_plot"]

#: the error targets drawn on the parity plots (2 % and 10 %: the issue's goals)
PARITY_BANDS = (0.02, 0.10)


def _grid(n: int, ncol: int, width: float, height: float):
    """``n`` panels in rows of at most ``ncol``; the unused axes hidden."""
    import matplotlib.pyplot as plt

    theme()
    ncol = min(ncol, n)
    nrow = int(np.ceil(n / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(width * ncol, height * nrow), squeeze=False)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return fig, axes


def _parity(ax, lo: float, hi: float, log: bool = True):
    """The y = x line and the +-2 % / +-10 % bands (dashed) between ``lo`` and ``hi`` (ms)."""
    xs = np.geomspace(lo, hi, 10) if log else np.linspace(lo, hi, 10)
    ax.plot(xs, xs, "k-", lw=0.8)
    for f in PARITY_BANDS:
        ax.plot(xs, xs * (1 + f), "k--", lw=0.5)
        ax.plot(xs, xs * (1 - f), "k--", lw=0.5)


def bucket_plot(pred: pd.DataFrame):
    """syncSGD under DDP by bucket size, one panel per setting: measured bars, both model variants as
    markers; a prediction off the scale is written at the top with an arrow."""
    sync = pred[pred["group"] == "syncSGD"].copy()
    sync["bucket"] = sync["bucket_mb"].map(lambda b: "default" if pd.isna(b) else f"{b:g}MB")
    net = sync["rate_gbps"].map(lambda r: "" if pd.isna(r) else f" {r:g}Gb/s")
    sync["where"] = (sync["model"] + " b" + sync["batch_size"].astype(str) + net + " p="
                     + sync["world_size"].astype(str))
    panels = list(dict.fromkeys(sync["where"]))
    if not panels:
        return None, None
    fig, axes = _grid(len(panels), 4, 4, 3.2)
    for ax, w in zip(axes.flat, panels):
        g = sync[sync["where"] == w]
        meas = g[g["variant"] == g["variant"].iloc[0]].set_index("bucket")["measured_ms"]
        ax.bar(meas.index, meas.values, color="0.8", label="measured")
        top = 1.6 * max(meas.max(), g[g["variant"] == "extended"]["predicted_ms"].max())
        for v, mk in (("paper", "x"), ("extended", "o")):
            gv = g[g["variant"] == v].set_index("bucket").reindex(meas.index)["predicted_ms"]
            ax.plot(meas.index, gv.clip(upper=top).values, mk, label=f"model ({v})")
            for b, y in gv[gv > top].items():  # off the scale: value written at the top
                ax.annotate(f"{y:.0f}↑", (b, top), ha="center", va="top", fontsize=7)
        ax.set_ylim(0, top * 1.05)
        ax.grid(axis="x", visible=False)
        ax.set_title(w, fontsize=9)
        ax.set_ylabel("iteration (ms)")
        ax.tick_params(axis="x", labelsize=8)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("syncSGD (DDP) by bucket size: measured vs predicted")
    fig.tight_layout()
    return fig, axes


def post_compressors_plot(pred: pd.DataFrame, max_panels: int = 8):
    """Compression after the backward pass: measured and predicted (extended) bars per compressor, one
    panel per setting (at most ``max_panels``)."""
    post = pred[(pred["group"] == "compressors (post)") & (pred["variant"] == "extended")].copy()
    if post.empty:
        return None, None
    net = post["rate_gbps"].map(lambda r: "" if pd.isna(r) else f" {r:g}Gb/s")
    post["where"] = (post["platform"] + " " + post["model"] + net + " b" + post["batch_size"].astype(str)
                     + " p=" + post["world_size"].astype(str))
    keep = list(dict.fromkeys(post["where"]))[:max_panels]
    fig, axes = _grid(len(keep), 2, 6, 3.0)
    for ax, w in zip(axes.flat, keep):
        g = post[post["where"] == w]
        x = np.arange(len(g))
        ax.bar(x - 0.2, g["measured_ms"], 0.4, label="measured", color="0.7")
        ax.bar(x + 0.2, g["predicted_ms"], 0.4, label="predicted (extended)")
        ax.set_xticks(x, g["compressor"], rotation=60, fontsize=7)
        ax.set_title(w, fontsize=9)
        ax.set_ylabel("iteration (ms)")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    return fig, axes


def bandwidth_plot(pred: pd.DataFrame):
    """Throttled links, 2 workers: iteration time against link rate, the model as lines and the
    measurements as dots, one panel per batch size (syncSGD with default buckets, and compressors)."""
    thr = pred[pred["rate_gbps"].notna() & (pred["world_size"] == 2)
               & ((pred["mode"] == "syncsgd") & pred["bucket_mb"].isna() | (pred["mode"] == "post"))].copy()
    if thr.empty:
        return None, None
    import seaborn as sns

    thr["method"] = np.where(thr["mode"] == "syncsgd", "syncSGD", thr["compressor"])
    bss = sorted(thr["batch_size"].unique())
    fig, axes = _grid(len(bss), len(bss), 6, 4)
    for ax, bs in zip(axes.flat, bss):
        g = thr[(thr["batch_size"] == bs) & (thr["variant"] == "extended")]
        for i, (mth, gm) in enumerate(g.groupby("method")):
            gm = gm.sort_values("rate_gbps")
            c = sns.color_palette()[i % 10]
            ax.plot(gm["rate_gbps"], gm["predicted_ms"], "-", color=c, label=mth)
            ax.plot(gm["rate_gbps"], gm["measured_ms"], "o", color=c)
        ax.set_xscale("log")
        rates = sorted(g["rate_gbps"].unique())
        ax.set_xticks(rates, [f"{r:g}" for r in rates])
        ax.minorticks_off()
        ax.set_xlabel("link rate (Gbit/s, tc tbf)")
        ax.set_ylabel("iteration (ms)")
        ax.set_title(f"{g['model'].iloc[0] if len(g) else ''} batch {bs}, 2 workers (lines: model, dots: measured)",
                     fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig, axes


def error_overview_plot(pred: pd.DataFrame, target_median: float = 0.02, target_max: float = 0.10):
    """Every prediction: predicted against measured (log-log, +-2 % and +-10 % dashed), and the
    |relative error| per platform and group as boxes with the targets as vertical lines."""
    import seaborn as sns

    fig, axes = new(ncols=2, width=6, height=4.5)
    ax = axes[0]
    for (plat, v), g in pred.groupby(["platform", "variant"]):
        ax.scatter(g["measured_ms"], g["predicted_ms"], s=12, alpha=0.7, label=f"{plat} {v}")
    both = pred[["measured_ms", "predicted_ms"]]
    _parity(ax, both.min().min() * 0.8, both.max().max() * 1.2)
    ax.set(xscale="log", yscale="log", xlabel="measured (ms)", ylabel="predicted (ms)")
    ax.legend(fontsize=7)
    errs = pred.assign(abs_err=pred["rel_error"].abs() * 100, where=pred["platform"] + " " + pred["group"])
    sns.boxplot(data=errs, x="abs_err", y="where", hue="variant", ax=axes[1], fliersize=2)
    axes[1].axvline(target_median * 100, color="0.3", ls="--")
    axes[1].axvline(target_max * 100, color="0.3", ls=":")
    axes[1].set(xscale="log", xlabel="|relative error| (%)", ylabel="")
    fig.tight_layout()
    return fig, axes


def scaling_plot(scaling: dict[str, pd.DataFrame]):
    """Calibrated on 1-2 workers, scored at 4: predicted against measured per statistic (``{name: table}``),
    one colour per group, paper variant as crosses and extended as dots."""
    if not scaling:
        return None, None
    import seaborn as sns

    fig, axes = _grid(len(scaling), len(scaling), 6, 4.8)
    for ax, (k, sc) in zip(axes.flat, scaling.items()):
        for i, (grp, g) in enumerate(sc.groupby("group", sort=False)):
            c = sns.color_palette()[i % 10]
            for v, mk in (("paper", "x"), ("extended", "o")):
                gv = g[g["variant"] == v]
                ax.scatter(gv["measured_ms"], gv["predicted_ms"], marker=mk, color=c, s=28, label=f"{grp}, {v}")
        both = sc[["measured_ms", "predicted_ms"]]
        _parity(ax, both.min().min() * 0.9, both.max().max() * 1.1, log=False)
        ax.set_xlabel("measured iteration at p = 4 (ms)")
        ax.set_ylabel("predicted from p <= 2 (ms)")
        ax.set_title(f"{', '.join(sorted(sc['platform'].unique()))}: calibrated on p <= 2, scored on p = 4 ({k})",
                     fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig, axes
