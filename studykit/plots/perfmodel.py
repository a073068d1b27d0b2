"""Figures of the performance model's predictions: the paper's Figs. 3, 12, 18-21, the explorer's
breakdown and speed-up curve, and the claims. Each returns ``(fig, ax)`` and computes nothing: the data
come from :mod:`studykit.perfmodel` and :mod:`studykit.lessons.explore`."""
from __future__ import annotations

import numpy as np
import pandas as pd

from studykit.plots.style import new, ref_line

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
    ax.set_title(title or "")
    ax.legend(fontsize="small")
    return fig, ax


def required_ratio_plot(df: pd.DataFrame, paper_ratio: float | None = None, paper_bandwidth_gbps: float | None = None,
                        hue: str = "batch_size", title: str | None = None, ax=None):
    """Figs. 12 / 18: compression ratio needed for near-linear scaling vs bandwidth."""
    fig, ax = (ax.figure, ax) if ax is not None else new()
    for key, g in df.groupby(["model", hue]) if hue != "model" else df.groupby(["model"]):
        key = key if isinstance(key, tuple) else (key,)
        lab = key[0] if len(key) == 1 or key[1] == -1 else f"{key[0]}, batch {key[1]}"
        ax.plot(g["bandwidth_gbps"], g["required_ratio"], label=lab)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("bandwidth (Gbit/s)")
    ax.set_ylabel("required compression ratio (x)")
    if paper_ratio is not None:
        ref_line(ax, paper_ratio, f"paper: ~{paper_ratio:g}x")
    if paper_bandwidth_gbps is not None:
        ref_line(ax, paper_bandwidth_gbps, f"paper: at {paper_bandwidth_gbps:g} Gbit/s", axis="x", color="0.55")
    ax.set_title(title or "")
    ax.legend(fontsize="small")
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
    ax.set_title(title or "")
    ax.legend(fontsize="small")
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
    ax.set_title(title or "")
    ax.legend(fontsize="small")
    return fig, ax


def breakdown_plot(data: dict, ax=None):
    """Explorer: stacked iteration-time breakdown of syncSGD and the compressor."""
    fig, ax = (ax.figure, ax) if ax is not None else new()
    names = ["syncSGD"] + ([data["label"]] if data.get("compressed") else [])
    parts = [("compute", "compute_ms"), ("exposed communication", "exposed_comm_ms"),
             ("encode/decode", "encode_decode_ms")]
    bottoms = np.zeros(len(names))
    for i, (lab, key) in enumerate(parts):
        vals = np.array([data["sync"].get(key, 0.0)] +
                        ([data["compressed"].get(key, 0.0)] if data.get("compressed") else []))
        ax.bar(names, vals, bottom=bottoms, label=lab, color=f"C{i}")
        bottoms += vals
    ref_line(ax, data["linear_ms"], "linear scaling (T_comp)")
    ax.set_ylabel("backward + sync time per iteration (ms)")
    if data.get("compressed"):
        ax.set_title(f"speed-up over syncSGD: {data['speedup']:.2f}x")
    ax.set_ylim(top=max(float(bottoms.max()), data["linear_ms"]) * 1.45)  # headroom for the legend
    ax.legend(fontsize="small", loc="upper left")
    return fig, ax


def speedup_curve_plot(curve: pd.DataFrame, current: tuple[float, float] | None = None, ax=None):
    """Explorer: speed-up over syncSGD vs GPUs at the current settings."""
    fig, ax = (ax.figure, ax) if ax is not None else new()
    ax.plot(curve["world_size"], curve["speedup"], marker=".")
    ref_line(ax, 1.0, "syncSGD", color="0.6", linestyle="-", linewidth=0.8)
    if current is not None:
        ax.plot(*current, marker="o", color="C3", linestyle="none", label="current setting")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("GPUs (world size)")
    ax.set_ylabel("speed-up over syncSGD (x)")
    ax.legend(fontsize="small")
    return fig, ax


def claims_plot(df: pd.DataFrame, ax=None):
    """Every claim: the kit's value relative to the paper's (1 = agreement), tolerance band dashed."""
    fig, ax = (ax.figure, ax) if ax is not None else new(width=8, height=0.35 * len(df) + 1.5)
    y = np.arange(len(df))
    ratio = df["kit_value"].to_numpy(float) / df["paper_value"].to_numpy(float)
    colors = df["verdict"].map({"reproduced": "tab:green", "disagrees": "tab:red", "input": "0.6"}).fillna("C0")
    ax.scatter(ratio, y, c=list(colors))
    ax.set_yticks(y, [f"{c} ({s[:38]})" for c, s in zip(df["claim_id"], df["setting"])], fontsize="x-small")
    ax.axvline(1.0, color="0.3", linewidth=0.8)
    tol = float(df["tolerance"].max())
    for v in (1 - tol, 1 + tol):
        ref_line(ax, v, None, axis="x", color="0.5")
    ax.set_xscale("log")
    ax.set_xlabel("kit / paper (dashed: tolerance; green reproduced, red disagrees, grey input)")
    ax.invert_yaxis()
    return fig, ax
