"""One look for the kit's figures (STYLE.md item 9): seaborn theme, units on axes,
theoretical ceilings and paper values as dashed reference lines. Every helper
returns ``(fig, ax)`` (or ``(fig, axes)``) and computes nothing itself: the data
come from :mod:`studykit.perfmodel` and :mod:`studykit.explore`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["theme", "new", "ref_line", "bandwidth_sweep_plot", "required_ratio_plot", "compute_speedup_plot",
           "tradeoff_plot", "breakdown_plot", "speedup_curve_plot", "allreduce_fit_plot", "claims_plot",
           "calibration_compare_plot", "measured_bandwidth_plot", "PAPER_STYLE"]

#: paper values: dashed, dark grey
PAPER_STYLE = dict(color="0.25", linestyle="--", linewidth=1.2)


def theme() -> None:
    """Apply the kit's plotting theme (seaborn whitegrid, colorblind palette)."""
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind")


def new(ncols: int = 1, width: float = 6.0, height: float = 4.0, **kw):
    """A themed figure with ``ncols`` axes side by side."""
    import matplotlib.pyplot as plt

    theme()
    fig, ax = plt.subplots(1, ncols, figsize=(width * ncols, height), **kw)
    return fig, ax


def ref_line(ax, value: float, label: str | None = None, axis: str = "y", **style):
    """A dashed reference line (paper value or theoretical ceiling) at ``value``."""
    kw = {**PAPER_STYLE, **style}
    line = ax.axhline(value, label=label, **kw) if axis == "y" else ax.axvline(value, label=label, **kw)
    return line


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


def allreduce_fit_plot(data: pd.DataFrame, alpha_s: float, bandwidth_gbps: float,
                       reference: dict | None = None, ax=None):
    """Calibration: measured all-reduce times vs message size per world size, the Eq. 1 fit
    (solid) and a reference calibration (dashed: the paper's or the hardware spec)."""
    from studykit.perfmodel import collectives as col

    fig, ax = (ax.figure, ax) if ax is not None else new(width=7)
    sizes = np.geomspace(max(data["size_bytes"].min(), 1), data["size_bytes"].max(), 100)
    for i, (p, g) in enumerate(data.groupby("world_size")):
        ax.scatter(g["size_bytes"], g["t_s"] * 1e3, s=14, color=f"C{i}", label=f"measured, {p} workers")
        fit = col.ring_allreduce_s(sizes, p, alpha_s, col.gbps_to_bytes_s(bandwidth_gbps))
        ax.plot(sizes, fit * 1e3, color=f"C{i}", linewidth=1)
        if reference:
            ref = col.ring_allreduce_s(sizes, p, reference["alpha_s"], col.gbps_to_bytes_s(reference["bandwidth_gbps"]))
            ax.plot(sizes, ref * 1e3, **{**PAPER_STYLE, "color": f"C{i}"})
    ax.plot([], [], color="0.3", linewidth=1, label=f"Eq. 1 fit: alpha={alpha_s * 1e6:.3g} us, BW={bandwidth_gbps:.3g} Gbit/s")
    if reference:
        ax.plot([], [], **PAPER_STYLE, label=f"{reference.get('label', 'reference')}: alpha="
                f"{reference['alpha_s'] * 1e6:.3g} us, BW={reference['bandwidth_gbps']:.3g} Gbit/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message size per worker (bytes)")
    ax.set_ylabel("all-reduce time (ms)")
    ax.legend(fontsize="x-small")
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


def _key(r) -> tuple:
    def norm(v):
        return None if v is None or (isinstance(v, float) and np.isnan(v)) else v
    return (r["constant"], norm(r.get("model")), norm(r.get("batch_size")), norm(r.get("compressor")),
            norm(r.get("params")))


def calibration_compare_plot(fitted: pd.DataFrame, reference: pd.DataFrame | None = None,
                             labels: tuple[str, str] = ("fitted", "reference"), max_rows: int = 30):
    """Calibration: fitted times (T_comp, T_encode_decode; ms, bootstrap interval as error bars) and gamma,
    with the reference calibration's value for the same quantity as a dashed tick. At most
    ``max_rows`` times are drawn, those with a reference value first."""
    ref = {} if reference is None else {_key(r): r for _, r in reference.iterrows()}
    times = fitted[fitted["constant"].isin(["t_comp_s", "t_encode_decode_s"])]
    matched = times.apply(lambda r: _key(r) in ref, axis=1) if len(times) else pd.Series(dtype=bool)
    times = pd.concat([times[matched], times[~matched]]).head(max_rows).reset_index(drop=True) if len(times) else times
    fig, (ax, axg) = new(ncols=2, width=5.5, height=max(4.0, 0.25 * len(times) + 1),
                         gridspec_kw={"width_ratios": [3, 1]})
    for i, r in times.iterrows():
        v = r["value"] * 1e3
        lo = r["low"] * 1e3 if pd.notna(r.get("low")) else v
        hi = r["high"] * 1e3 if pd.notna(r.get("high")) else v
        ax.errorbar([v], [i], xerr=[[v - lo], [hi - v]], fmt="o", color="C0",
                    label=labels[0] if i == 0 else None)
        rr = ref.get(_key(r))
        if rr is not None:
            ax.plot([rr["value"] * 1e3] * 2, [i - 0.35, i + 0.35], **PAPER_STYLE,
                    label=labels[1] if labels[1] not in ax.get_legend_handles_labels()[1] else None)
    names = [f"{'T_comp' if r['constant'] == 't_comp_s' else 'T_enc+dec'} {r.get('model', '')}"
             + (f" b{int(r['batch_size'])}" if pd.notna(r.get("batch_size")) else "")
             + (f" {r['compressor']} {r['params']}" if isinstance(r.get("compressor"), str) else "")
             for _, r in times.iterrows()]
    ax.set_yticks(range(len(times)), names, fontsize="x-small")
    ax.invert_yaxis()
    if len(times):
        ax.set_xscale("log")
    n_all = int(fitted["constant"].isin(["t_comp_s", "t_encode_decode_s"]).sum())
    ax.set_xlabel("time (ms)" + (f"; {n_all - len(times)} more not shown" if n_all > len(times) else ""))
    ax.legend(fontsize="x-small")
    g = fitted[fitted["constant"] == "gamma"]
    if len(g):
        r = g.iloc[0]
        lo = r["low"] if pd.notna(r.get("low")) else r["value"]
        hi = r["high"] if pd.notna(r.get("high")) else r["value"]
        axg.errorbar([0], [r["value"]], yerr=[[r["value"] - lo], [hi - r["value"]]], fmt="o", color="C0")
    if reference is not None and (reference["constant"] == "gamma").any():
        rg = reference[reference["constant"] == "gamma"].iloc[0]
        for v in (rg.get("low"), rg.get("high")):
            if pd.notna(v):
                ref_line(axg, float(v), None)
        axg.plot([], [], **PAPER_STYLE, label=f"{labels[1]} range")
        axg.legend(fontsize="x-small")
    axg.set_xticks([0], ["gamma"])
    axg.set_ylabel("gamma (backward slowdown under overlap)")
    fig.tight_layout()
    return fig, (ax, axg)


def measured_bandwidth_plot(df: pd.DataFrame, methods: list[str], y: str = "ms", predicted: pd.DataFrame | None = None,
                            baseline: str | None = None, title: str | None = None, legend: bool = True, ax=None):
    """Figs. 3 / 19 measured: iteration time (``y="ms"``) or speed-up (``y="speedup"``, from
    :func:`studykit.measure.crossover.speedup_table`) against the emulated bandwidth, one model.

    Measured points are markers (joined by a thin line to guide the eye); ``predicted`` (columns
    method, rate_gbps, predicted_ms, and base_ms for speed-ups) draws the model as solid lines in the
    same colour. At most 6 methods per panel (STYLE.md item 14).
    """
    if len(methods) > 6:
        raise ValueError(f"at most 6 methods per panel, got {len(methods)}: facet instead")
    if y not in ("ms", "speedup"):
        raise ValueError(f"y must be 'ms' or 'speedup', got {y!r}")
    fig, ax = (ax.figure, ax) if ax is not None else new()
    for i, method in enumerate(methods):
        d = df[df["method"] == method].sort_values("rate_gbps")
        if d.empty:
            continue
        colour = f"C{i}"
        ax.plot(d["rate_gbps"], d[y], marker="o", linestyle="-", linewidth=0.6, alpha=0.9, color=colour,
                label=f"{method} (measured)" if predicted is not None else method)
        if predicted is not None:
            pm = predicted[predicted["method"] == method].sort_values("rate_gbps")
            if not pm.empty:
                vals = pm["predicted_ms"] if y == "ms" else pm["base_ms"] / pm["predicted_ms"]
                ax.plot(pm["rate_gbps"], vals, linestyle="-", linewidth=2.0, alpha=0.45, color=colour)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = sorted(df["rate_gbps"].unique())
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("emulated network bandwidth per GPU (Gbit/s, tc tbf)")
    if y == "ms":
        ax.set_ylabel("iteration time (ms)")
    else:
        ref_line(ax, 1.0, f"{baseline or 'baseline'} (speed-up 1)", color="0.4")
        ax.set_ylabel(f"speed-up over {baseline or 'the baseline'} (x)")
    if predicted is not None:
        ax.plot([], [], color="0.5", linewidth=2.0, alpha=0.45, label="model (thick lines)")
    ax.set_title(title or "")
    if legend:
        ax.legend(fontsize="x-small", loc="best")
    return fig, ax
