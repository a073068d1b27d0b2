"""Figures of the performance model's predictions: the paper's Figs. 3, 12, 18-21, the explorer's
breakdown and speed-up curve, and the claims. Each returns ``(fig, ax)`` and computes nothing: the data
come from :mod:`studykit.perfmodel` and :mod:`studykit.lessons.explore`."""
from __future__ import annotations

import numpy as np
import pandas as pd

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
    """``powersgd rank=4`` for the explorer's ``powersgd {'rank': 4}``."""
    params = data.get("params") or {}
    name = str(data["label"]).split(" {")[0]
    if not params or name != str(data["label"]).split(" ")[0]:
        return name
    return name + " " + ",".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


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


def claims_plot(df: pd.DataFrame, ax=None):
    """Every claim: the kit's scored difference from the paper (``rel_diff``: relative, speed-ups on their
    gain; 0 = agreement), tolerance band dashed, colour by verdict."""
    fig, ax = (ax.figure, ax) if ax is not None else new(width=10, height=0.35 * len(df) + 2.0)
    y = np.arange(len(df))
    diff = (df["rel_diff"] if "rel_diff" in df else df["kit_value"] / df["paper_value"] - 1).to_numpy(float)
    palette = {"reproduced": "tab:green", "partly": "tab:orange", "disagrees": "tab:red", "input": "0.6"}
    colors = df["verdict"].map(palette).fillna("C0")
    ax.scatter(100 * diff, y, c=list(colors))
    ax.set_yticks(y, [f"{c} ({s[:38]})" for c, s in zip(df["claim_id"], df["setting"])], fontsize="x-small")
    ax.axvline(0.0, color="0.3", linewidth=0.8)
    tol = float(df["tolerance"].max())
    for v in (-tol, tol):
        ref_line(ax, 100 * v, None, axis="x", color="0.5")
    ax.set_xlabel("kit vs paper (%, relative; speed-ups: of the gain)")
    ax.set_ylabel("claim (setting)")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker="o", linestyle="none", color=c, label=v)
               for v, c in (("reproduced", "tab:green"), ("partly (right direction, wrong size)", "tab:orange"),
                            ("disagrees", "tab:red"), ("input (by construction)", "0.6"))]
    handles.append(Line2D([], [], color="0.5", linestyle="--", label=f"tolerance ±{tol:.0%}"))
    ax.legend(handles=handles, fontsize="x-small", loc="lower right", framealpha=0.9)
    ax.set_title("Does the kit reproduce the paper's model-based claims?", fontsize="medium")
    ax.invert_yaxis()
    finish(fig)
    return fig, ax
