"""Figures of the performance model scored against measurements (``notebooks/verify.ipynb``). Each takes
the predictions table of :func:`studykit.perfmodel.verify.verify` (or the scaling CSVs) and returns
``(fig, axes)``, or ``(None, None)`` when the table holds nothing to draw."""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from studykit.compressors.registry import setting_label
from studykit.plots.style import finish, new, theme, titled

__all__ = ["bucket_plot", "post_compressors_plot", "bandwidth_plot", "error_overview_plot", "scaling_plot",
           "own_model_figure", "own_model_table"]

#: the error targets drawn on the parity plots (2 % and 10 %: the kit's goals for the median and largest error)
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
    """The y = x line and the +-2 % / +-10 % bands (dashed, named in the legend) between ``lo`` and ``hi`` (ms)."""
    xs = np.geomspace(lo, hi, 10) if log else np.linspace(lo, hi, 10)
    ax.plot(xs, xs, "k-", lw=0.8)
    for i, f in enumerate(PARITY_BANDS):
        bands = " and ".join(f"±{b:.0%}" for b in PARITY_BANDS)
        ax.plot(xs, xs * (1 + f), "k--", lw=0.5, label=f"y = x, {bands} (dashed)" if i == 0 else None)
        ax.plot(xs, xs * (1 - f), "k--", lw=0.5)


def bucket_plot(pred: pd.DataFrame):
    """syncSGD under DDP by bucket size, one panel per setting: measured bars, both model variants as
    markers; a prediction off the scale is written at the top with an arrow."""
    sync = pred[pred["group"] == "syncSGD"].copy()
    sync["bucket"] = sync["bucket_mb"].map(lambda b: "default" if pd.isna(b) else f"{b:g}MB")
    net = sync["rate_gbps"].map(lambda r: "" if pd.isna(r) else f" {r:g} Gbit/s")
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
        ax.set_xlabel("DDP bucket size", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("Does the model predict syncSGD (DDP) at every bucket size? (bars: measured; "
                 "n↑: a prediction of n ms, off the scale)")
    finish(fig)
    return fig, axes


def post_compressors_plot(pred: pd.DataFrame, max_panels: int = 8):
    """Compression after the backward pass: measured and predicted (extended) bars per compressor, one
    panel per setting (at most ``max_panels``)."""
    post = pred[(pred["group"] == "compressors (post)") & (pred["variant"] == "extended")].copy()
    if post.empty:
        return None, None
    net = post["rate_gbps"].map(lambda r: "" if pd.isna(r) else f" {r:g} Gbit/s")
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
        ax.set_xlabel("compressor (after the backward pass)", fontsize=8)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("Does the model predict compression after the backward pass?")
    finish(fig)
    return fig, axes


def _short_params(params) -> str:
    """``rank=4`` for a record's JSON parameters, in :func:`~studykit.compressors.registry.setting_label`'s
    ``"kv"`` style, switches and empty values left out (a legend names the setting, not its options)."""
    if not isinstance(params, str) or not params.strip():
        return ""
    try:
        d = json.loads(params)
    except ValueError:
        return params
    shown = {k: v for k, v in d.items()
             if not isinstance(v, bool) and v is not None and k not in ("scope", "min_compression")}
    return setting_label("", shown, "kv", params_only=True)


def bandwidth_plot(pred: pd.DataFrame):
    """Throttled links, 2 workers: iteration time against link rate, the model as lines and the
    measurements as dots, one panel per batch size (syncSGD with default buckets, and compressors)."""
    thr = pred[pred["rate_gbps"].notna() & (pred["world_size"] == 2)
               & ((pred["mode"] == "syncsgd") & pred["bucket_mb"].isna() | (pred["mode"] == "post"))].copy()
    if thr.empty:
        return None, None
    import seaborn as sns

    def label(r):
        if r["mode"] == "syncsgd":
            return "syncSGD (DDP)"
        name = "none (uncompressed, after backward)" if r["compressor"] == "none" else r["compressor"]
        return f"{name} {_short_params(r.get('params'))}".strip()

    thr["method"] = thr.apply(label, axis=1)
    bss = sorted(thr["batch_size"].unique())
    others = sorted(m for m in thr["method"].unique() if m != "syncSGD (DDP)")
    per = 4  # methods per panel besides syncSGD, which every panel repeats: at most 5 lines a panel
    chunks = [others[i:i + per] for i in range(0, len(others), per)] or [[]]
    panels = [(bs, ch) for bs in bss for ch in chunks]
    fig, axes = _grid(len(panels), len(chunks), 5.5, 4)
    palette = sns.color_palette("colorblind")
    for ax, (bs, chunk) in zip(axes.flat, panels):
        g = thr[(thr["batch_size"] == bs) & (thr["variant"] == "extended")]
        for i, mth in enumerate(["syncSGD (DDP)", *chunk]):
            # one configuration per rate: several runs of it are averaged, never joined into a sawtooth
            gm = g[g["method"] == mth].groupby("rate_gbps")[["predicted_ms", "measured_ms"]].mean().reset_index()
            c = "0.3" if i == 0 else palette[(others.index(mth) + 1) % len(palette)]
            ax.plot(gm["rate_gbps"], gm["predicted_ms"], "-", color=c, label=mth)
            ax.plot(gm["rate_gbps"], gm["measured_ms"], "o", color=c)
        ax.set_xscale("log")
        ax.set_yscale("log")
        rates = sorted(g["rate_gbps"].unique())
        ax.set_xticks(rates, [f"{r:g}" for r in rates])
        ax.minorticks_off()
        ax.set_xlabel("link rate (Gbit/s, tc tbf)")
        ax.set_ylabel("iteration (ms, log scale)")
        ax.set_title(f"{g['model'].iloc[0] if len(g) else ''}, batch {bs}, 2 workers", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("Does the model follow the measured iteration time as the link slows? "
                 "(lines: model, dots: measured)")
    finish(fig)
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
    ax.set(xscale="log", yscale="log", xlabel="measured (ms)", ylabel="predicted (ms)",
           title="Is every prediction within the bands?")
    ax.legend(fontsize=7)
    errs = pred.assign(abs_err=pred["rel_error"].abs() * 100, where=pred["platform"] + " " + pred["group"])
    sns.boxplot(data=errs, x="abs_err", y="where", hue="variant", ax=axes[1], fliersize=2)
    axes[1].axvline(target_median * 100, color="0.3", ls="--", label=f"target median {target_median:.0%}")
    axes[1].axvline(target_max * 100, color="0.3", ls=":", label=f"target max {target_max:.0%}")
    axes[1].set(xscale="log", xlabel="|relative error| (%)", ylabel="platform, group",
                title="How large are the errors per group?")
    axes[1].legend(fontsize=7)
    finish(fig)
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
                ax.scatter(gv["measured_ms"], gv["predicted_ms"], marker=mk, color=c, s=28)
            ax.scatter([], [], marker="s", color=c, label=grp)
        for v, mk in (("paper", "x"), ("extended", "o")):
            ax.scatter([], [], marker=mk, color="0.3", label=f"{v} model")
        both = sc[["measured_ms", "predicted_ms"]]
        _parity(ax, both.min().min() * 0.9, both.max().max() * 1.1, log=False)
        ax.set_xlabel("measured iteration at p = 4 (ms)")
        ax.set_ylabel("predicted from p <= 2 (ms)")
        ax.set_title(f"Does a model calibrated on p <= 2 predict p = 4?\n"
                     f"{', '.join(sorted(sc['platform'].unique()))}, {k} statistic", fontsize=9)
        ax.legend(fontsize=7)
    finish(fig)
    return fig, axes


#: marker per group of ``benchmarks/own_model_check.py``'s predictions
OWN_MODEL_MARKERS = {"syncSGD": "o", "fp16 baseline": "s", "post": "^", "hook": "D"}


def _own_model_folders(folders) -> list[Path]:
    """``folders`` (one or several) as paths, each checked to hold what ``benchmarks/own_model_check.py --out``
    writes: ``predictions.csv.gz`` (or an earlier version's ``predictions.csv``) and ``summary.json``."""
    from studykit.perfmodel.verify.files import OLD_PREDICTIONS, PREDICTIONS

    folders = [Path(folders)] if isinstance(folders, (str, Path)) else [Path(f) for f in folders]
    if not folders:
        raise ValueError("no folders given: pass the --out folders of benchmarks/own_model_check.py "
                         "(e.g. data/verification/own_model/vit_b16_p2)")
    missing = [str(f / PREDICTIONS) for f in folders
               if not (f / PREDICTIONS).is_file() and not (f / OLD_PREDICTIONS).is_file()]
    missing += [str(f / "summary.json") for f in folders if not (f / "summary.json").is_file()]
    if missing:
        raise FileNotFoundError(f"missing {', '.join(missing)}: give folders that benchmarks/own_model_check.py "
                                f"--out wrote ({PREDICTIONS} and summary.json)")
    return folders


def own_model_figure(folders: str | Path | Iterable[str | Path]):
    """Predicted against measured iteration time (ms, log-log) of every row of each folder's
    ``predictions.csv.gz`` (``benchmarks/own_model_check.py``): a marker per group, a colour per world size,
    y = x dashed and the +-10 % band shaded; the title names each folder's fit rate (``summary.json``).
    Returns ``(fig, ax)``."""
    import seaborn as sns

    from studykit.perfmodel.verify.files import PREDICTIONS, read_predictions

    folders = _own_model_folders(folders)
    fit = {f.name: json.loads((f / "summary.json").read_text())["fit_rate_gbps"] for f in folders}
    pred = pd.concat([read_predictions(f).assign(folder=f.name) for f in folders], ignore_index=True)
    unknown = sorted(set(pred["group"]) - set(OWN_MODEL_MARKERS))
    if unknown:
        raise ValueError(f"{PREDICTIONS} groups {unknown} are not among {list(OWN_MODEL_MARKERS)}")
    drawn = pred.dropna(subset=["measured_ms", "predicted_ms"])
    fig, ax = new(width=6.5, height=5.0, layout="constrained")
    sizes = sorted(drawn["world_size"].unique())
    colours = dict(zip(sizes, sns.color_palette("colorblind", len(sizes))))
    for (group, p), g in drawn.groupby(["group", "world_size"]):
        ax.plot(g["measured_ms"], g["predicted_ms"], OWN_MODEL_MARKERS[group], color=colours[p], ms=7, alpha=0.85)
    both = drawn[["measured_ms", "predicted_ms"]]
    lo, hi = both.min().min() * 0.8, both.max().max() * 1.25
    xs = np.geomspace(lo, hi, 50)
    band = ax.fill_between(xs, xs * 0.9, xs * 1.1, color="0.85", zorder=0, label="±10 %")
    (ident,) = ax.plot(xs, xs, "--", color="0.25", lw=1, label="y = x")
    # the empty corners of a parity plot hold the two legends: markers (group) and colours (world size)
    groups = [ax.plot([], [], OWN_MODEL_MARKERS[k], color="0.35", label=k)[0]
              for k in OWN_MODEL_MARKERS if k in set(drawn["group"])]
    ax.add_artist(ax.legend(handles=groups, title="group", loc="lower right", fontsize=8, title_fontsize=8))
    worlds = [ax.plot([], [], "o", color=colours[p], label=f"{p} GPUs")[0] for p in sizes]
    ax.legend(handles=[*worlds, ident, band], loc="upper left", fontsize=8)
    ticks = [t for t in (m * 10.0 ** e for e in range(-1, 6) for m in (1, 2, 5)) if lo <= t <= hi]
    ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured iteration (ms, log scale)",
           ylabel="predicted by advise (ms, log scale)")
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    fits = ", ".join(f"{fit[k]:g} Gbit/s ({', '.join(f'{p} GPUs' for p in sorted(g['world_size'].unique()))})"
                     for k, g in drawn.groupby("folder"))
    left = len(pred) - len(drawn)
    context = (f"{', '.join(sorted(drawn['model'].unique()))}; fit at {fits}"
               + (f"; {left} row(s) without a prediction not drawn" if left else ""))
    ax.set_title(titled("Does the fit from one GPU and one rate predict the other rates?", context), fontsize=10)
    return fig, ax


def own_model_table(folders: str | Path | Iterable[str | Path]) -> pd.DataFrame:
    """Each folder's ``summary.json`` groups (``benchmarks/own_model_check.py``): folder, world size, the fit's
    rate (Gbit/s), group, n, median and max |relative error| (fractions), their targets and whether both are met."""
    from studykit.perfmodel.verify.files import read_predictions

    rows = []
    for f in _own_model_folders(folders):
        summary = json.loads((f / "summary.json").read_text())
        sizes = sorted(int(p) for p in read_predictions(f)["world_size"].unique())
        world = sizes[0] if len(sizes) == 1 else ", ".join(map(str, sizes))  # a folder scored at several sizes
        for g in summary["groups"]:
            rows.append({"folder": f.name, "world_size": world, "fit_rate_gbps": summary["fit_rate_gbps"],
                         **{k: g[k] for k in ("group", "n", "median_abs_rel_error", "max_abs_rel_error",
                                              "target_median", "target_max", "met")}})
    return pd.DataFrame(rows)
