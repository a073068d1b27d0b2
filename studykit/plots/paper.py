"""Figures 4-10 of Agarwal et al. 2022 (https://arxiv.org/abs/2103.00543), redrawn: the kit's model as
lines, the paper's stated values dashed or as open black markers (named with their section), the kit's
measured points as filled markers with their spread as bars (``gid="measured"``, :mod:`studykit.plots.check`).
The data come from :mod:`studykit.perfmodel.figures`; each function returns ``(fig, axes)`` and computes nothing
beyond moving a record's quartiles into the drawn quantity."""
from __future__ import annotations

import numpy as np
import pandas as pd

from studykit.plots.check import MEASURED, ref_gid
from studykit.plots.style import PAPER_STYLE, new, ref_line

__all__ = ["batch_plot", "collectives_plot", "gap_plot", "overlap_plot", "ps_iterations_plot", "scaling_plot"]

_PAPER_MARK = {"marker": "D", "markersize": 8, "markerfacecolor": "none", "markeredgecolor": PAPER_STYLE["color"],
               "markeredgewidth": 1.5, "linestyle": "none"}
_MEASURED_MARK = {"marker": "o", "markersize": 7, "linestyle": "none", "markeredgecolor": "black"}
#: a measured point's bars: dark, drawn over the marker, with caps wider than it (a short bar stays visible)
_MEASURED_BARS = {"ecolor": "0.15", "elinewidth": 1.2, "capsize": 5, "barsabove": True, "gid": MEASURED}


def _quartile_bars(h: pd.DataFrame, col: str) -> list:
    """``yerr`` of a measured column from its records' iteration quartiles (``ms_q25``, ``ms_q75`` of
    :func:`studykit.perfmodel.figures.measured_points`): a time as they are, a gap above one GPU shifted by the
    same milliseconds, a speed-up over syncSGD (its median / this one's) at the syncSGD median."""
    v = h[col].to_numpy(float)
    q25, q75, ms = (h[c].to_numpy(float) for c in ("ms_q25", "ms_q75", "ms"))
    if col == "speedup":
        lo, hi = v * ms / q75, v * ms / q25
    elif col == "gap_ms":
        lo, hi = v + q25 - ms, v + q75 - ms
    else:
        lo, hi = q25, q75
    return [np.clip(v - lo, 0, None), np.clip(hi - v, 0, None)]


def _gpu_axis(ax, world_sizes):
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({int(p) for p in world_sizes}), [str(int(p)) for p in sorted(set(world_sizes))])
    ax.set_xlabel("GPUs (world size p)")


#: tick sets per decade on a log axis, densest first (0.6 0.7 0.8 ..., 1 2 3 5 7, 1 2 3 5, 1 2 5, 1 3, decades)
_LOG_SUBS = ((1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 2, 3, 5, 7), (1, 2, 3, 5), (1, 2, 5), (1, 3), (1,))


def _log_ticks(ax) -> None:
    """Plain numbers (0.6, 2, 10) on a log y-axis, at major ticks only, as dense as the axes' height allows
    without two labels touching (a label and a half apart): every digit, 1-2-3-5, 1-2-5, 1-3, each decade or
    every second, third or fifth decade. Minor ticks keep their marks, without labels. Call it once the axes is laid out."""
    from matplotlib import rcParams
    from matplotlib.font_manager import FontProperties
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    lo, hi = sorted(ax.get_ylim())
    span = np.log10(hi / lo)
    px_per_decade = ax.get_window_extent().height / max(span, 1e-9)
    need_px = 1.5 * FontProperties(size=rcParams["ytick.labelsize"]).get_size_in_points() * ax.figure.dpi / 72
    decades = range(int(np.floor(np.log10(lo))) - 1, int(np.ceil(np.log10(hi))) + 1)
    candidates = [[s * 10.0 ** k for k in decades for s in subs] for subs in _LOG_SUBS]
    candidates += [[10.0 ** k for k in decades if k % step == 0] for step in (2, 3, 5)]
    best = None
    for ticks in candidates:
        ticks = [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]
        gap = np.diff(np.log10(ticks)).min() * px_per_decade if len(ticks) > 1 else np.inf
        if best is None and ticks:
            best = ticks  # the densest set with a tick: used where no set both fits and has two ticks
        if len(ticks) > 1 and gap >= need_px:
            best = ticks
            break
    ax.yaxis.set_major_locator(FixedLocator(best or [lo, hi]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_locator(LogLocator(subs="auto"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(lo, hi)


def _panels(n: int, width: float = 4.6, height: float = 4.2):
    fig, axes = new(ncols=n, width=width, height=height)
    return fig, np.atleast_1d(axes)


def _wrap(text, renderer, max_px: float, vertical: bool = False) -> None:
    """Wrap ``text`` until its extent along its direction is at most ``max_px``: as it is if it fits, else
    before its unit (``name\n(unit)``), else at spaces (never inside a word), as far as it will go."""
    import textwrap

    lines = text.get_text().split("\n")  # a line break of the caller's (titled()) is kept
    tries = [text.get_text()]
    if len(lines) == 1 and (at := lines[0].rfind(" (")) > 0:
        tries.append(lines[0][:at] + "\n" + lines[0][at + 1:])
    tries += ["\n".join(textwrap.fill(line, width, break_long_words=False, break_on_hyphens=False) for line in lines)
              for width in range(max(map(len, lines)) - 3, 7, -3)]
    for t in tries:
        text.set_text(t)
        box = text.get_window_extent(renderer)
        if (box.height if vertical else box.width) <= max_px:
            return


def _legend_below(fig, entries: dict, x: float, max_px: float, ncol: int, renderer):
    """A figure legend of ``entries`` (label: handle) centred at ``x`` (figure fraction) on the figure's
    bottom edge, in the most of ``ncol`` columns that keep it narrower than ``max_px``."""
    leg = None
    for n in range(max(min(ncol, len(entries)), 1), 0, -1):
        if leg is not None:
            leg.remove()
        leg = fig.legend(list(entries.values()), list(entries), loc="lower center", bbox_to_anchor=(x, 0.0),
                         ncol=n, fontsize="small", frameon=False)
        if leg.get_window_extent(renderer).width <= max_px:
            break
    return leg


def _finish(fig, axes, title: str, ncol: int = 3, per_panel: bool = False):
    """Legends below the panels (labels never cover data): one for all panels, or (``per_panel``) one under
    each panel, each in as many of ``ncol`` columns as fit (the figure widens if one column does not); the
    question as the title, the panels' titles and axis labels wrapped to fit; log y-axes ticked by
    :func:`_log_ticks` once laid out."""
    groups = []
    for ax in axes:
        entries = dict(zip(*ax.get_legend_handles_labels()[::-1]))
        if ax.get_legend():
            ax.get_legend().remove()
        if per_panel or not groups:
            groups.append((ax, entries))
        else:
            for lab, h in entries.items():
                groups[0][1].setdefault(lab, h)
    groups = [(ax, e) for ax, e in groups if e]
    renderer = fig.canvas.get_renderer()
    share = 1 / len(axes) if per_panel else 1.0
    legends = [(ax, _legend_below(fig, e, 0.5, 0.96 * share * fig.bbox.width, ncol, renderer)) for ax, e in groups]
    need_px = max([leg.get_window_extent(renderer).width / (0.96 * share) for _, leg in legends], default=0.0)
    if need_px > fig.bbox.width:
        fig.set_size_inches(need_px / fig.dpi, fig.get_figheight())
    bottom = max([leg.get_window_extent(renderer).height / fig.bbox.height + 0.02 for _, leg in legends],
                 default=0.0)
    _wrap(fig.suptitle(title), renderer, 0.96 * fig.bbox.width)
    log_axes = [ax for ax in axes if ax.get_yscale() == "log"]
    for ax in log_axes:
        ax.get_ylim()  # autoscale now, before the layout
    fig.tight_layout(rect=(0, bottom, 1, 1))
    for _ in range(2):  # a second pass for the axes the first one's layout narrowed
        for ax in axes:  # titles and labels longer than their laid-out axes get a second line
            box = ax.get_window_extent(renderer)
            _wrap(ax.title, renderer, box.width)
            _wrap(ax.xaxis.label, renderer, box.width)
            _wrap(ax.yaxis.label, renderer, box.height, vertical=True)
        for ax in log_axes:  # ticks chosen for the laid-out height
            _log_ticks(ax)
        fig.tight_layout(rect=(0, bottom, 1, 1))
    if per_panel:
        for ax, leg in legends:
            box = ax.get_position()
            leg.set_bbox_to_anchor((box.x0 + box.width / 2, 0.0), transform=fig.transFigure)
    return fig, axes


def scaling_plot(df: pd.DataFrame, paper: pd.DataFrame | None = None, measured: pd.DataFrame | None = None,
                 measured_methods=(), title: str = "", y: str = "speedup"):
    """Figs. 6-8: each compressor's speed-up over syncSGD (or ``y="time_ms"``) against GPUs, one panel per model."""
    model_names = list(dict.fromkeys(df["model"]))
    fig, axes = _panels(len(model_names))
    # one legend entry for the paper's values of every panel (sections of all panels named once)
    sections = dict.fromkeys(paper.loc[paper["quantity"] == y, "section"]) if paper is not None else {}
    paper_label = "paper's stated values (" + ", ".join(sections) + ")"
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
            ax.plot([], [], **_PAPER_MARK, label=paper_label)
        if measured is not None and len(mm := measured[(measured["model"] == m) & measured["method"].isin(measured_methods)]):
            for j, (method, h) in enumerate(mm.groupby("method")):
                col = y if y in h else "ms"
                device = h["gpu"].iloc[0].replace("NVIDIA ", "")
                ax.errorbar(h["world_size"], h[col], yerr=_quartile_bars(h, col), **_MEASURED_MARK, **_MEASURED_BARS,
                            color=f"C{5 + j}", label=f"measured {method}, {device}, {h['rate_gbps'].iloc[0]:g} Gbit/s "
                                                     "(median, bars: iteration quartiles)")
        _gpu_axis(ax, list(df["world_size"]) + (list(mm["world_size"]) if measured is not None and len(mm) else []))
        ax.set_yscale("log")  # measured H200 speed-ups and V100 model ratios span a decade
        ax.set_ylabel("speed-up over syncSGD (x, log scale)" if y == "speedup"
                      else "backward + sync per iteration (ms, log scale)")
        ax.set_title(m)
    return _finish(fig, axes, title)


def batch_plot(frames: dict[str, pd.DataFrame], paper: pd.DataFrame | None = None, title: str = ""):
    """Fig. 9: PowerSGD rank 4's speed-up over syncSGD against GPUs per batch size; one panel per frame
    (e.g. the nominal and the fitted effective bandwidth, a model-error absorber); the paper's Sec. 3.3 points
    as open markers."""
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
    model; the paper's value dashed on the panel of the model it was stated for (``gid="ref:<model>"``);
    measured syncSGD gaps (iteration minus one GPU's) as markers with their iteration quartiles."""
    model_names = list(dict.fromkeys(df["model"]))
    fig, axes = _panels(len(model_names))
    for ax, m in zip(axes, model_names):
        for i, (method, h) in enumerate(df[df["model"] == m].groupby("method", sort=False)):
            ax.plot(h["world_size"], h["gap_ms"], marker=".", color=f"C{i}", label=f"{method} (kit model)")
        for _, r in (paper[paper["model"] == m] if paper is not None else pd.DataFrame()).iterrows():
            ref_line(ax, float(r["value"]), f"paper: {r['value']:g} ms ({r['model']}, {r['section']})", gid=ref_gid(m))
            ax.plot(r["world_size"], r["value"], **_PAPER_MARK)
        if measured is not None and len(mm := measured[(measured["model"] == m) & (measured["method"] == "syncSGD")]):
            ax.errorbar(mm["world_size"], mm["gap_ms"], yerr=_quartile_bars(mm, "gap_ms"), **_MEASURED_MARK,
                        **_MEASURED_BARS, color="C5",
                        label=f"measured syncSGD, {mm['gpu'].iloc[0].replace('NVIDIA ', '')}, "
                              f"{mm['rate_gbps'].iloc[0]:g} Gbit/s, batch {int(mm['batch_size'].iloc[0])} "
                              "(median, bars: iteration quartiles)")
        _gpu_axis(ax, list(df["world_size"]) + (list(mm["world_size"]) if measured is not None and len(mm) else []))
        ax.set_yscale("log")
        ax.set_ylabel("time above linear scaling (ms, log scale)")
        ax.set_title(m)
    return _finish(fig, axes, title)


def collectives_plot(model_df: pd.DataFrame, measured: pd.DataFrame | None = None, title: str = ""):
    """Fig. 4: aggregation time against GPUs (log-log). Left: the paper's equations (Table 1, Eq. 1, App. B)
    on its inputs, solid for the fp32 gradient, dotted for a compressor's payload. Right: the kit's measured
    NCCL collectives and parameter-server emulations."""
    fig, axes = _panels(2 if measured is not None and len(measured) else 1, width=5.2, height=5.0)
    ax = axes[0]
    colors = {}
    for (payload, scheme), g in model_df.groupby(["payload", "scheme"], sort=False):
        c = colors.setdefault(scheme, f"C{len(colors)}")
        ax.plot(g["world_size"], g["time_ms"], marker=".", color=c,
                linestyle="-" if payload == "fp32 gradient" else ":", label=f"{scheme}: {payload}")
    _gpu_axis(ax, model_df["world_size"])
    ax.set_yscale("log")
    ax.set_ylabel("time to aggregate (ms, log scale)")
    r = model_df.iloc[0]
    ax.set_title(f"model, paper's equations: {r['model']}, {r['bandwidth_gbps']:g} Gbit/s", fontsize="small")
    if len(axes) > 1:
        ax = axes[1]
        same = {"all-reduce": "all-reduce (Eq. 1)", "all-gather": "all-gather (App. B)"}
        for i, (scheme, g) in enumerate(measured.groupby("scheme", sort=False)):
            c = colors.get(same.get(scheme, "parameter server (Table 1)"), f"C{i}")
            ax.errorbar(g["world_size"], g["ms"], yerr=[g["ms"] - g["ms_min"], g["ms_max"] - g["ms"]], color=c,
                        **{**_MEASURED_MARK, "marker": "osv^"[i % 4]}, **_MEASURED_BARS, label=f"{scheme} (measured)")
        _gpu_axis(ax, measured["world_size"])
        ax.set_yscale("log")
        ax.set_ylabel("measured time (ms, log scale)")
        r = measured.iloc[0]
        ax.set_title(f"measured (median, min-max): {r['nbytes'] / 2**20:.0f} MiB per worker,\n"
                     f"{r['gpu'].replace('NVIDIA ', '')}, {r['network']}", fontsize="small")
    return _finish(fig, axes, title, ncol=1, per_panel=True)


#: Fig. 4's schemes in the colours :func:`collectives_plot` gives them (its model panel's order)
_SCHEME_COLOR = {"all-reduce": "C0", "all-gather": "C1", "parameter server": "C2", "mixed": "C3"}


def ps_iterations_plot(df: pd.DataFrame, title: str = ""):
    """Fig. 4 in measured training iterations (:func:`studykit.perfmodel.figures.measured_ps_iterations`):
    iteration time against world size, one panel per network; colour = scheme (as in :func:`collectives_plot`),
    marker = payload, median with min-max bars, the schemes of one payload side by side at each p."""
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
                        color=_SCHEME_COLOR.get(scheme, "C4"), **_MEASURED_BARS,
                        **{**_MEASURED_MARK, "marker": "osv^D"[payloads.index(payload) % 5]},
                        label=f"{payload} via {scheme}")
        _gpu_axis(ax, g["world_size"])
        if g["world_size"].nunique() == 1:  # one p: keep the dodged series beside it, not across the panel
            q = float(g["world_size"].iloc[0])
            ax.set_xlim(q / 1.5, q * 1.5)
        ax.set_xlabel("processes (world size p)")
        ax.set_yscale("log")
        ax.set_ylabel("iteration time (ms, log scale)")  # ticks: _finish's _log_ticks
        r = g.iloc[0]
        device = str(r["gpu"]).replace("NVIDIA ", "")
        ax.set_title(f"{net}: median, min-max\n{r['model']} batch {r['batch_size']}, {r['backend']}, {device}", fontsize="small")
    return _finish(fig, axes, title, ncol=3)


def overlap_plot(df: pd.DataFrame, measured: pd.DataFrame | None = None, title: str = ""):
    """Fig. 5 / App. A. Left: the kit's model, hook time over post time against the fraction of encode/decode
    that hides under the backward pass (above 1: overlapping is slower, as the paper measured). Right: the
    kit's measured hook / post ratios, one row per model and world size, one marker per compressor (in the left
    panel's colours), bars from the hook's iteration quartiles over post's median; each panel has its legend."""
    fig, axes = _panels(2 if measured is not None and len(measured) else 1, width=5.2)
    ax = axes[0]
    for i, (method, g) in enumerate(df.groupby("method", sort=False)):
        ax.plot(g["hidden_fraction"], g["ratio"], marker=".", color=f"C{i}", label=f"{method} (kit model)")
    ref_line(ax, 1.0, "paper (Sec. 3.1, Fig. 5): hooks slower, above this line", color=PAPER_STYLE["color"])
    r = df.iloc[0]
    ax.set_xlabel("encode/decode hidden under the backward pass (fraction)")
    ax.set_ylabel("hook / post-backward time (x)")
    ax.set_title(f"kit's model: {r['model']}, batch {r['batch_size']}, {r['world_size']} GPUs, "
                 f"{r['bandwidth_gbps']:g} Gbit/s", fontsize="small")
    if len(axes) > 1:
        ax = axes[1]
        rows = list(dict.fromkeys(zip(measured["model"], measured["world_size"])))
        methods = list(dict.fromkeys(measured["method"]))
        for j, method in enumerate(methods):
            d = measured[measured["method"] == method]
            y = [rows.index(k) + 0.22 * (j - (len(methods) - 1) / 2) for k in zip(d["model"], d["world_size"])]
            lo, hi = d["hook_q25"] / d["post_ms"], d["hook_q75"] / d["post_ms"]
            ax.errorbar(d["ratio"], y, xerr=[np.clip(d["ratio"] - lo, 0, None), np.clip(hi - d["ratio"], 0, None)],
                        **{**_MEASURED_MARK, "marker": "osD^v"[j % 5], "markersize": 6}, **_MEASURED_BARS,
                        color=f"C{j}", label=f"{method} (median; bars: hook's quartiles / post)")
        ax.set_yticks(range(len(rows)), [f"{m}, p={p}" for m, p in rows], fontsize="small")
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ref_line(ax, 1.0, "hook as fast as post", axis="x")
        ax.set_xlabel("measured hook / post iteration time (x)")
        ax.set_ylabel("model, GPUs")
        r = measured.iloc[0]
        ax.set_title(f"measured by the kit: {str(r['gpu']).replace('NVIDIA ', '')}, {r['rate_gbps']:g} Gbit/s "
                     "emulated", fontsize="small")
    return _finish(fig, axes, title, ncol=1, per_panel=True)
