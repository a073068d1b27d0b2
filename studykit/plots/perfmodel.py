"""Figures of the performance model's predictions: the paper's Figs. 3, 12, 18-21, the explorer's
breakdown and speed-up curve, and the claims. Each returns ``(fig, ax)`` and computes nothing: the data
come from :mod:`studykit.perfmodel` and :mod:`studykit.lessons.explore`."""
from __future__ import annotations

import numpy as np
import pandas as pd

from studykit.compressors.registry import setting_label
from studykit.plots.style import finish, new, ref_line, titled

__all__ = ["bandwidth_sweep_plot", "required_ratio_plot", "compute_speedup_plot", "tradeoff_plot", "breakdown_plot",
           "speedup_curve_plot", "claims_plot"]


def bandwidth_sweep_plot(df: pd.DataFrame, paper_crossover_gbps: float | None = None,
                         kit_crossover_gbps: float | None = None, title: str | None = None, ax=None):
    """Figs. 3 / 19: per-iteration time of syncSGD and the compressor vs bandwidth."""
    fig, ax = (ax.figure, ax) if ax is not None else new()
    ax.plot(df["bandwidth_gbps"], df["sync_s"] * 1e3, label="syncSGD (Sec. 4.1)")
    ax.plot(df["bandwidth_gbps"], df["compressed_s"] * 1e3, label="PowerSGD rank 4 (App. B)")
    ax.set_xscale("log")
    ax.set_xlabel("bandwidth (Gbit/s)")
    ax.set_ylabel("backward + sync time per iteration (ms)")
    if kit_crossover_gbps is not None and np.isfinite(kit_crossover_gbps):
        ax.axvline(kit_crossover_gbps, color="C2", linewidth=1.2, label=f"kit crossover {kit_crossover_gbps:.1f} Gbit/s")
    if paper_crossover_gbps is not None:
        ref_line(ax, paper_crossover_gbps, f"paper crossover {paper_crossover_gbps:g} Gbit/s", axis="x")
    ax.set_title(titled("Below which bandwidth does PowerSGD beat syncSGD?", title), fontsize="medium")
    ax.legend(fontsize="small")
    finish(fig)
    return fig, ax


def required_ratio_plot(df: pd.DataFrame, paper_ratio: float | None = None, paper_bandwidth_gbps: float | None = None,
                        hue: str = "batch_size", title: str | None = None, ax=None):
    """Figs. 12 / 18: compression ratio needed for near-linear scaling vs bandwidth. One colour per
    model, one marker per batch size (so a line hidden under another still shows its markers); the
    paper's values are dashed lines named where they are drawn (the legend keeps the series)."""
    fig, ax = (ax.figure, ax) if ax is not None else new()
    models = list(dict.fromkeys(df["model"]))
    batches = list(dict.fromkeys(df[hue])) if hue != "model" else [None]
    markers = "osD^v"
    for key, g in df.groupby(["model", hue], sort=False) if hue != "model" else df.groupby(["model"], sort=False):
        key = key if isinstance(key, tuple) else (key,)
        lab = key[0] if len(key) == 1 or key[1] == -1 else f"{key[0]}, batch {key[1]}"
        mk = markers[batches.index(key[1]) % len(markers)] if len(key) > 1 else None
        ax.plot(g["bandwidth_gbps"], g["required_ratio"], label=lab, color=f"C{models.index(key[0])}", marker=mk,
                markevery=max(1, len(g) // 6), markersize=5, alpha=0.9)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("bandwidth (Gbit/s)")
    ax.set_ylabel("required compression ratio (x)")
    if paper_ratio is not None:
        ref_line(ax, paper_ratio, f"paper: ~{paper_ratio:g}x", inline=True)
    if paper_bandwidth_gbps is not None:
        ref_line(ax, paper_bandwidth_gbps, f"paper: at {paper_bandwidth_gbps:g} Gbit/s", axis="x", color="0.55",
                 inline=True)
    ax.set_title(titled("What compression ratio keeps scaling near-linear?", title), fontsize="medium")
    ax.legend(fontsize="small")
    finish(fig)
    return fig, ax


def compute_speedup_plot(df: pd.DataFrame, paper_point: tuple[float, float] | None = None,
                         title: str | None = None, ax=None):
    """Fig. 20: PowerSGD's speed-up over syncSGD as compute gets faster."""
    fig, ax = (ax.figure, ax) if ax is not None else new()
    for flag, g in df.groupby("scale_encode_decode") if "scale_encode_decode" in df else [(True, df)]:
        lab = "kit (T_encode_decode shrinks too)" if flag else "kit (T_encode_decode fixed)"
        ax.plot(g["compute_speedup"], g["speedup"], label=lab, linestyle="-" if flag else ":")
    ref_line(ax, 1.0, "syncSGD", color="0.6", linestyle="-", linewidth=0.8)
    if paper_point is not None:
        ax.plot(*paper_point, marker="o", color="0.25", linestyle="none",
                label=f"paper: {paper_point[1]:g}x at {paper_point[0]:g}x compute")
        ref_line(ax, paper_point[1])
    ax.set_xlabel("compute speed-up over V100 (x)")
    ax.set_ylabel("speed-up over syncSGD (x)")
    ax.set_title(titled("Does PowerSGD gain on faster GPUs?", title), fontsize="medium")
    ax.legend(fontsize="small")
    finish(fig)
    return fig, ax


def tradeoff_plot(df: pd.DataFrame, title: str | None = None, ax=None):
    """Fig. 21: iteration time when encode/decode is k times faster and bytes l*k times more."""
    fig, ax = (ax.figure, ax) if ax is not None else new()
    for l, g in df.groupby("l"):
        ax.plot(g["k"], g["compressed_s"] * 1e3, marker="o", label=f"l = {l} (bytes x l k)")
    ref_line(ax, float(df["baseline_s"].iloc[0]) * 1e3, "PowerSGD rank 4 (baseline)")
    ref_line(ax, float(df["sync_s"].iloc[0]) * 1e3, "syncSGD", color="C3", linestyle=":")
    ax.set_xlabel("encode/decode speed-up k (x)")
    ax.set_ylabel("backward + sync time per iteration (ms)")
    ax.set_xticks(sorted(df["k"].unique()))
    ax.set_title(titled("Does faster encoding pay for more bytes?", title), fontsize="medium")
    ax.legend(fontsize="small")
    finish(fig)
    return fig, ax


def breakdown_plot(data: dict, ax=None):
    """Explorer: stacked iteration-time breakdown of syncSGD and the compressor."""
    fig, ax = (ax.figure, ax) if ax is not None else new()
    names = ["syncSGD"] + ([_method_label(data)] if data.get("compressed") else [])
    parts = [("compute", "compute_ms"), ("exposed communication", "exposed_comm_ms"),
             ("encode/decode", "encode_decode_ms")]
    bottoms = np.zeros(len(names))
    for i, (lab, key) in enumerate(parts):
        vals = np.array([data["sync"].get(key, 0.0)] +
                        ([data["compressed"].get(key, 0.0)] if data.get("compressed") else []))
        ax.bar(names, vals, bottom=bottoms, label=lab, color=f"C{i}")
        bottoms += vals
    ref_line(ax, data["linear_ms"], "linear scaling (T_comp)")
    ax.set_ylabel("backward + sync per iteration (ms)")
    ax.set_xlabel("method")
    if data.get("compressed"):
        ax.set_title(f"Is {names[1]} faster than syncSGD?\nspeed-up over syncSGD: {data['speedup']:.2f}x",
                     fontsize="medium")
    else:
        ax.set_title("Where does syncSGD's iteration time go?", fontsize="medium")
    ax.set_ylim(top=max(float(bottoms.max()), data["linear_ms"]) * 1.1)
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
    finish(fig)
    return fig, ax


def _method_label(data: dict) -> str:
    """``powersgd rank=4`` for the explorer's ``powersgd {'rank': 4}`` (advise's candidate label:
    :func:`~studykit.compressors.registry.setting_label` ``"kv"``)."""
    return setting_label(str(data["label"]).split(" {")[0], data.get("params") or {}, "kv")


def speedup_curve_plot(curve: pd.DataFrame, current: tuple[float, float] | None = None, ax=None):
    """Explorer: speed-up over syncSGD vs GPUs at the current settings."""
    fig, ax = (ax.figure, ax) if ax is not None else new()
    ax.plot(curve["world_size"], curve["speedup"], marker=".")
    ref_line(ax, 1.0, "syncSGD", color="0.6", linestyle="-", linewidth=0.8)
    if current is not None:
        ax.plot(*current, marker="o", color="C3", linestyle="none", label="current setting")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs (world size p, log scale)")
    ax.set_ylabel("speed-up over syncSGD (x)")
    ax.set_title("At which GPU count does the compressor pay?", fontsize="medium")
    ax.legend(fontsize="small")
    finish(fig)
    return fig, ax


def _claim_labels(df: pd.DataFrame) -> list[str]:
    """Each row as the claims table names it (``claim_id (figure or section)``, :func:`studykit.perfmodel.claims.
    markdown_table`), with the setting's first clause (the model) where a claim has several rows, and the verdict
    where that still leaves two alike. Whole words only."""
    where = [f if isinstance(f, str) and f else s for f, s in zip(df.get("figure", [""] * len(df)), df["section"])]
    labels = [f"{c} ({w})" for c, w in zip(df["claim_id"], where)]
    counts = pd.Series(labels).value_counts()
    labels = [lab + (f": {str(s).split(',')[0]}" if counts[lab] > 1 else "") for lab, s in zip(labels, df["setting"])]
    counts = pd.Series(labels).value_counts()
    return [lab + (f" [{v}]" if counts[lab] > 1 else "") for lab, v in zip(labels, df["verdict"])]


#: verdict -> (colour, legend text)
_VERDICTS = {"reproduced": ("tab:green", "reproduced"), "partly": ("tab:orange", "partly (right direction, wrong size)"),
             "disagrees": ("tab:red", "disagrees"), "input": ("0.6", "input (by construction)"),
             "not scored": ("tab:blue", "not scored (a reading the paper rules out)")}


def claims_plot(df: pd.DataFrame, ax=None):
    """Every claim as its verdict scores it (:func:`studykit.perfmodel.claims.reproduce`): the kit's difference
    from the paper on the scored quantity (``rel_diff``: relative; a speed-up on its gain, ``speed-up - 1``)
    as a dot coloured by verdict, beside the range that verdict accepts for the row, on the same scale (a grey
    bar: the paper's value or stated range widened by the row's tolerance, :func:`studykit.perfmodel.claims.
    accepted`). Rows are labelled as the claims table labels them."""
    from matplotlib.lines import Line2D

    from studykit.perfmodel import claims

    fig, ax = (ax.figure, ax) if ax is not None else new(width=10, height=0.35 * len(df) + 2.0)
    y = np.arange(len(df))
    edges = []
    for r in df.itertuples():
        gain = r.scored_on == "gain"
        low, high = (None if pd.isna(v) else float(v) for v in (r.paper_low, r.paper_high))
        band = claims.accepted(float(r.paper_value), low, high, float(r.tolerance), gain=gain)
        edges.append([claims.score(k, float(r.paper_value), low, high, float(r.tolerance), gain=gain)[0] for k in band])
    edges = 100 * np.array(edges, float).reshape(-1, 2)
    ax.hlines(y, edges[:, 0], edges[:, 1], color="0.82", linewidth=7, zorder=1)
    colors = [_VERDICTS.get(v, ("C0", v))[0] for v in df["verdict"]]
    ax.scatter(100 * df["rel_diff"].to_numpy(float), y, c=colors, zorder=3, edgecolors="white", linewidths=0.5)
    ax.set_yticks(y, _claim_labels(df), fontsize="x-small")
    ax.axvline(0.0, color="0.3", linewidth=0.8)
    ax.set_xlabel("kit vs paper as scored (%, relative; speed-ups: of the gain)")
    ax.set_ylabel("claim (as in the claims table)")
    handles = [Line2D([], [], marker="o", linestyle="none", color=c, label=text)
               for v, (c, text) in _VERDICTS.items() if v in set(df["verdict"])]
    handles.append(Line2D([], [], color="0.82", linewidth=7, label="accepted: paper's value or range ± tolerance"))
    ax.legend(handles=handles, fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.08 - 2.0 / fig.dpi),
              ncol=2, frameon=False)
    ax.set_title("Does the kit reproduce the paper's claims?", fontsize="medium")
    ax.set_ylim(len(df) - 0.5, -0.5)
    finish(fig)
    return fig, ax
