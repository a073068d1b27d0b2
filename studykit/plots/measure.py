"""Figures of measurements and of the calibration fitted to them: all-reduce times against Eq. 1,
fitted constants against a reference, measured iteration times against emulated bandwidth."""
from __future__ import annotations

import numpy as np
from typing import Optional

import pandas as pd

from studykit.measure.report import _with_paper, backward_ms, encode_decode_table
from studykit.plots.check import MEASURED
from studykit.plots.style import PAPER_STYLE, finish, new, ref_line, theme, titled

__all__ = ["allreduce_fit_plot", "bandwidth_grid_plot", "calibration_compare_plot", "hook_vs_post_plot",
           "measured_bandwidth_plot", "plot_encode_decode", "plot_overheads", "hook_timeline"]


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
    ax.set_title("Does Eq. 1 (alpha + size / bandwidth) fit the measured all-reduce times?", fontsize="medium")
    ax.legend(fontsize="x-small", loc="upper left")
    finish(fig)
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
    ax.set_xlabel("time (ms, log scale)" + (f"; {n_all - len(times)} more not shown" if n_all > len(times) else ""))
    ax.set_ylabel("fitted constant (model, batch, compressor)")
    ax.set_title("Do the fitted times agree with the reference calibration?", fontsize="medium")
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
    axg.set_xlabel("constant")
    axg.set_ylabel("gamma (x, backward slowdown\nunder overlap)")
    axg.set_title("gamma", fontsize="medium")
    finish(fig)
    return fig, (ax, axg)


#: the legend title of the measured-bandwidth figures: what markers, bars and lines are
_BANDWIDTH_KEY = "markers: measured median\nbars: iteration quartiles\nthick lines: model"


def _delivered_rates(df: pd.DataFrame) -> dict[float, float]:
    """Set rate -> the rate the shaped link delivered there (Gbit/s): the median of the records' probed bus
    bandwidth (``measured_gbps`` of :func:`studykit.measure.crossover.iteration_table`); the set rate itself where
    no probe was recorded."""
    rates = {float(r): float(r) for r in df["rate_gbps"].unique()}
    if "measured_gbps" in df:
        probed = df.dropna(subset=["measured_gbps"]).astype({"measured_gbps": float})
        rates.update({float(r): float(v) for r, v in probed.groupby("rate_gbps")["measured_gbps"].median().items()})
    return rates


def _quartile_err(d: pd.DataFrame, y: str) -> list:
    """``yerr`` of a measured time (``y="ms"``) or speed-up (``base_ms / ms``) from each row's timed iterations
    (``times_ms``): their quartiles, a speed-up's at the baseline's median; no bar where a row kept none."""
    from studykit.measure.timing import quartiles

    q = np.array([quartiles(t)[::2] if len(t) else (np.nan, np.nan) for t in d["times_ms"]], float).reshape(-1, 2)
    v = d[y].to_numpy(float)
    lo, hi = (q[:, 0], q[:, 1]) if y == "ms" else (d["base_ms"].to_numpy(float) / q[:, 1],
                                                    d["base_ms"].to_numpy(float) / q[:, 0])
    return [np.nan_to_num(np.clip(v - lo, 0, None)), np.nan_to_num(np.clip(hi - v, 0, None))]


def measured_bandwidth_plot(df: pd.DataFrame, methods: list[str], y: str = "ms", predicted: pd.DataFrame | None = None,
                            baseline: str | None = None, title: str | None = None, legend: bool = True, ax=None):
    """Figs. 3 / 19 measured: iteration time (``y="ms"``) or speed-up (``y="speedup"``, from
    :func:`studykit.measure.crossover.speedup_table`) against the bandwidth the shaped link delivered, one model.

    The x-axis is the probed rate (:func:`_delivered_rates`; the set rate where nothing was probed): at p = 4 the
    link gives less than it is set to. Measured points are medians (markers joined by a thin line to guide the
    eye) with the quartiles of their timed iterations as bars (``gid="measured"``); ``predicted`` (columns
    method, rate_gbps, predicted_ms, and base_ms for speed-ups) draws the model as thick lines in the same
    colour, at the same delivered rates. At most 6 methods per panel (docs/STYLE.md item 14).
    """
    if len(methods) > 6:
        raise ValueError(f"at most 6 methods per panel, got {len(methods)}: facet instead")
    if y not in ("ms", "speedup"):
        raise ValueError(f"y must be 'ms' or 'speedup', got {y!r}")
    from matplotlib.ticker import FuncFormatter, LogLocator

    standalone = ax is None
    fig, ax = (ax.figure, ax) if ax is not None else new(width=8.5 if legend else 6)
    at = _delivered_rates(df)
    for i, method in enumerate(methods):
        d = df[df["method"] == method].sort_values("rate_gbps")
        if d.empty:
            continue
        colour = f"C{i}"
        ax.errorbar(d["rate_gbps"].map(at), d[y], yerr=_quartile_err(d, y), marker="o", linestyle="-", linewidth=0.6,
                    alpha=0.9, color=colour, capsize=4, elinewidth=1.0, gid=MEASURED,
                    label=f"{method} (measured)" if predicted is not None else method)
        if predicted is not None:
            pm = predicted[predicted["method"] == method].sort_values("rate_gbps")
            if not pm.empty:
                vals = pm["predicted_ms"] if y == "ms" else pm["base_ms"] / pm["predicted_ms"]
                ax.plot(pm["rate_gbps"].map(lambda r: at.get(float(r), float(r))), vals, linestyle="-", linewidth=2.0,
                        alpha=0.45, color=colour)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ticks = sorted(set(at.values()))
    ax.set_xticks(ticks)
    ax.set_xticklabels(_sparse_log_labels(ticks, min_decades=0.07, digits=2))
    ax.minorticks_off()
    # 1-2-5 steps, plain numbers: a decade alone (10^2, 10^3) leaves most of the axis unreadable
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    probed = any(at[r] != r for r in at)
    ax.set_xlabel("bandwidth the link delivered (Gbit/s, probed)" if probed else "emulated bandwidth per GPU (Gbit/s)")
    if y == "ms":
        ax.set_ylabel("iteration time (ms)")
    else:
        ref_line(ax, 1.0, f"{baseline or 'baseline'} (speed-up 1)", color="0.4", inline=True)
        ax.set_ylabel(f"speed-up over {baseline or 'the baseline'} (x)")
    ax.set_title(titled("Below which bandwidth does each method beat syncSGD?", title) if standalone else title or "",
                 fontsize="medium")
    if legend:
        ax.legend(fontsize="x-small", loc="center left", bbox_to_anchor=(1.01, 0.5),
                  title=_BANDWIDTH_KEY if predicted is not None else _BANDWIDTH_KEY.rsplit("\n", 1)[0],
                  title_fontsize="x-small")
    finish(fig)
    return fig, ax


def _sparse_log_labels(ticks, min_decades: float = 0.12, digits: int | None = None) -> list[str]:
    """Tick labels for a log axis, blank where a tick sits closer than ``min_decades`` to the last labelled
    one (15, 20 and 25 Gbit/s would overprint); ``digits`` significant digits (default: as ``:g`` gives)."""
    out, last = [], None
    for t in ticks:
        keep = last is None or t <= 0 or np.log10(t / last) >= min_decades
        out.append((f"{t:.{digits}g}" if digits else f"{t:g}") if keep else "")
        last = t if keep else last
    return out


def bandwidth_grid_plot(table: pd.DataFrame, speedups: pd.DataFrame, methods: list[str],
                        predicted: pd.DataFrame | None = None, baseline: str = "syncSGD"):
    """The bandwidth notebook's figure: per model (columns), measured iteration time (top) and speed-up
    over ``baseline`` (bottom) against the emulated bandwidth (:func:`measured_bandwidth_plot`), one
    legend for the figure. Returns ``(fig, axes)``."""
    import matplotlib.pyplot as plt

    theme()
    models = list(dict.fromkeys(table["model"]))
    fig, axes = plt.subplots(2, len(models), figsize=(4.8 * len(models) + 2.6, 8.0), squeeze=False)
    for j, model in enumerate(models):
        pm = None if predicted is None else predicted[predicted["model"] == model]
        measured_bandwidth_plot(table[table["model"] == model], methods, y="ms", predicted=pm, ax=axes[0, j],
                                legend=False, title=f"{model}: iteration time")
        measured_bandwidth_plot(speedups[speedups["model"] == model], methods, y="speedup", baseline=baseline,
                                predicted=pm, ax=axes[1, j], legend=False, title=f"{model}: speed-up")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, [lab.replace(" (measured)", "") for lab in labels], loc="center right", fontsize="small",
               title=_BANDWIDTH_KEY if predicted is not None else _BANDWIDTH_KEY.rsplit("\n", 1)[0],
               title_fontsize="x-small")
    ps = ", ".join(map(str, sorted(table["world_size"].unique())))
    fig.suptitle(f"Below which bandwidth does each method beat {baseline}?\n(measured, p = {ps}; x: the rate the "
                 "link delivered)", fontsize="medium")
    fig.tight_layout(rect=(0, 0, 1 - 2.4 / fig.get_figwidth(), 1))
    return fig, axes


def hook_vs_post_plot(table: pd.DataFrame):
    """Is the kit's overlapped DDP hook faster than its own post-backward path? Per model
    (panels), the ratio hook / post of the median iteration times (:func:`studykit.measure.report.hook_vs_post`)
    against the emulated bandwidth (the set rate), one line per compressor setting (at most 6), below 1 where the
    hook wins; bars: the hook's iteration quartiles over post's median (``hook_q25``, ``hook_q75``).
    Returns ``(fig, axes)``."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    if table.empty:
        raise ValueError("hook_vs_post_plot: no configuration with both a hook and a post record")
    labels = sorted(table["label"].unique())
    if len(labels) > 6:
        raise ValueError(f"at most 6 compressor settings per panel, got {len(labels)}: select some (column label)")
    theme()
    models = list(dict.fromkeys(table["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models) + 2.2, 3.8), squeeze=False, sharey=True)
    for ax, model in zip(axes[0], models):
        t = table[table["model"] == model]
        for i, lab in enumerate(labels):
            d = t[t["label"] == lab].sort_values("rate_gbps")
            lo, hi = d["hook_q25"] / d["post_ms"], d["hook_q75"] / d["post_ms"]
            ax.errorbar(d["rate_gbps"], d["ratio"], yerr=[np.nan_to_num(np.clip(d["ratio"] - lo, 0, None)),
                                                          np.nan_to_num(np.clip(hi - d["ratio"], 0, None))],
                        marker="o", linewidth=0.8, color=f"C{i}", capsize=4, elinewidth=1.0, gid=MEASURED, label=lab)
        ref_line(ax, 1.0, "hook = post", color="0.4", inline=True)
        ax.set_xscale("log")
        ticks = sorted(t["rate_gbps"].unique())
        ax.set_xticks(ticks)
        ax.set_xticklabels(_sparse_log_labels(ticks))
        ax.minorticks_off()
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.set_xlabel("emulated bandwidth per GPU (Gbit/s, set rate)")
        ax.set_title(f"{model} (batch {int(t['batch_size'].iloc[0])})", fontsize="medium")
    axes[0, 0].set_ylabel("hook / post iteration time (x)")
    handles, labs = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labs, loc="center right", fontsize="small",
               title="compressor\n(median; bars: hook's\niteration quartiles / post)", title_fontsize="x-small")
    ps = ", ".join(map(str, sorted(table["world_size"].unique())))
    fig.suptitle(f"Is the kit's hook faster than its own post-backward path? (below 1: yes; measured, p = {ps})",
                 fontsize="medium")
    fig.tight_layout(rect=(0, 0, 1 - 2.0 / fig.get_figwidth(), 1))
    return fig, axes


def plot_encode_decode(df: pd.DataFrame, model: str = "resnet50", batch_size: Optional[int] = None,
                       paper: Optional[pd.DataFrame] = None):
    """Encode-decode time per method (mean, min-max bars, log scale) against the memory floor
    and the backward pass (dashed lines); the paper's V100 ms as open markers. Returns ``fig, ax``."""
    import matplotlib.pyplot as plt


    theme()
    t = _with_paper(encode_decode_table(df, model), paper)
    fig, ax = plt.subplots(figsize=(9.5, 0.28 * max(len(t), 4) + 1.6))
    if t.empty:
        ax.text(0.5, 0.5, f"no profile records for {model}", ha="center", transform=ax.transAxes)
        return fig, ax
    y = range(len(t))
    err = [t["ms_mean"] - t["ms_min"], t["ms_max"] - t["ms_mean"]]
    ax.errorbar(t["ms_mean"], list(y), xerr=err, fmt="o", capsize=3, label=f"{t['gpu'].iloc[0]} (mean, min-max)")
    if "paper_v100_ms" in t and t["paper_v100_ms"].notna().any():
        ax.plot(t["paper_v100_ms"], list(y), "s", mfc="none", label="paper, V100")
    floor = float(t["floor_ms"].iloc[0])
    ax.axvline(floor, ls="--", c="k", lw=1, label=f"memory floor {floor:.3g} ms (8 B/element)")
    bwd = backward_ms(df, model, batch_size)
    if bwd is not None:
        ax.axvline(bwd, ls="--", c="C3", lw=1, label=f"backward pass {bwd:.3g} ms")
    ax.set_yticks(list(y), t["method"])
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("encode + decode time (ms, log scale)")
    ax.set_ylabel("compressor")
    ax.set_title(f"How far above the memory floor is each compressor's encode-decode?\n{model}'s gradients",
                 fontsize="medium")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    finish(fig)
    return fig, ax


def plot_overheads(df: pd.DataFrame, batch_size: Optional[int] = None):
    """For every profiled model: encode-decode time as a multiple of the memory floor (left) and of
    the backward pass (right; models with tcomp records). Returns ``fig, axes``."""
    import matplotlib.pyplot as plt
    import seaborn as sns


    theme()
    frames = []
    for model in sorted(df.loc[df["kind"] == "profile", "model"].dropna().unique()) if not df.empty else []:
        t = encode_decode_table(df, model)
        if t.empty:
            continue
        t["model"] = model
        bwd = backward_ms(df, model, batch_size)
        t["x_backward"] = t["ms_mean"] / bwd if bwd else float("nan")
        frames.append(t)
    fig, axes = plt.subplots(1, 2, figsize=(11, 5), sharey=True)
    if not frames:
        axes[0].text(0.5, 0.5, "no profile records", ha="center", transform=axes[0].transAxes)
        return fig, axes
    t = pd.concat(frames, ignore_index=True)
    order = list(dict.fromkeys(t["method"]))
    hues = sorted(t["model"].unique())
    sns.stripplot(data=t, x="x_floor", y="method", hue="model", order=order, hue_order=hues, ax=axes[0], size=7,
                  jitter=False)
    axes[0].axvline(1, ls="--", c="k", lw=1, label="memory floor (1x)")
    axes[0].set(xscale="log", xlabel="encode-decode / memory floor (x, log scale)", ylabel="compressor",
                title="against the memory floor")
    if t["x_backward"].notna().any():
        sns.stripplot(data=t.dropna(subset=["x_backward"]), x="x_backward", y="method", hue="model", order=order,
                      hue_order=hues, ax=axes[1], size=7, jitter=False)
        axes[1].axvline(1, ls="--", c="C3", lw=1, label="backward pass (1x)")
    else:
        axes[1].text(0.5, 0.5, "no tcomp (backward) records\nfor the profiled models", ha="center",
                     transform=axes[1].transAxes)
    axes[1].set(xscale="log", xlabel="encode-decode / backward pass (x, log scale)", ylabel="",
                title="against the backward pass")
    for ax in axes:
        if ax.get_legend() is not None:
            ax.legend(fontsize="x-small", loc="lower right")
    fig.suptitle("How far above the memory floor is encode-decode, and how large next to the backward pass?",
                 fontsize="medium")
    finish(fig)
    return fig, axes


#: columns of a :func:`hook_timeline` frame (ms since the start of the backward pass), one row per DDP bucket
HOOK_TIMELINE_COLUMNS = ("bucket", "ready_ms", "encode_end_ms", "comm_start_ms", "comm_end_ms", "decode_start_ms",
                         "decode_end_ms", "backward_end_ms")
#: optional columns: the host chain (drawn where present) and the measured decode end's interquartile range
HOOK_TIMELINE_HOST = ("host_ready_ms", "host_start_ms", "host_done_ms")
HOOK_TIMELINE_SPREAD = ("decode_end_q25_ms", "decode_end_q75_ms")
#: (label, start column, end column, lane, colour) of each bar series: the host lane above the device lane
_HOOK_BARS = (("host: waiting for the thread", "host_ready_ms", "host_start_ms", -1, "0.78"),
              ("host: the bucket's protocol", "host_start_ms", "host_done_ms", -1, "C4"),
              ("device: ready to encoded", "ready_ms", "encode_end_ms", 1, "C0"),
              ("device: collectives", "comm_start_ms", "comm_end_ms", 1, "C1"),
              ("device: decode", "decode_start_ms", "decode_end_ms", 1, "C2"))


def _hook_lanes(ax, t: pd.DataFrame, measured: bool) -> None:
    """One panel of :func:`hook_timeline`: per bucket (row ``i``, communication order) a host lane and a device lane
    of horizontal bars, and the end of the backward pass as a vertical line."""
    y = np.arange(len(t), dtype=float)
    for label, start, end, lane, colour in _HOOK_BARS:
        if start not in t or end not in t:
            continue
        a, b = t[start].to_numpy(float), t[end].to_numpy(float)
        ok = np.isfinite(a) & np.isfinite(b)
        bars = ax.barh(y[ok] + 0.21 * lane, b[ok] - a[ok], left=a[ok], height=0.38, color=colour, label=label)
        if measured and end == "decode_end_ms" and all(c in t for c in HOOK_TIMELINE_SPREAD):
            for patch in bars.patches:
                patch.set_gid(f"{MEASURED}:decode")
            lo, hi = (t[c].to_numpy(float) for c in HOOK_TIMELINE_SPREAD)
            ax.hlines(y + 0.21, lo, hi, color="0.1", linewidth=1.2, gid="spread:decode")
    ax.axvline(float(t["backward_end_ms"].iloc[0]), color="0.1", linewidth=1.4, label="end of the backward pass")
    ax.set_yticks(y, [str(int(b)) for b in t["bucket"]])
    ax.set_xlabel("time since the backward pass started (ms)")


def hook_timeline(measured: pd.DataFrame, predicted: pd.DataFrame, context: str = "", n_iter: int | None = None,
                  model_name: str = "model"):
    """Where does a DDP comm hook's iteration go, bucket by bucket? Two panels on one ms axis from the start of the
    backward pass: the measured time line (left; ``hook_times`` stamps, e.g. from
    :func:`studykit.measure.hook_times.hook_timeline_table` and ``hook_host_table``) and the model's (right;
    ``buckets`` of :func:`studykit.perfmodel.model.bucket_timeline_s`). Each DDP bucket (rows, communication order)
    has a host lane (waiting for the communication thread, then the thread running the bucket's protocol) and a
    device lane (from the moment the bucket is ready until it is encoded, which includes any wait for the
    protocol's turn; its collectives; its decode); a vertical line marks
    the end of the backward pass. Both frames hold :data:`HOOK_TIMELINE_COLUMNS` (ms), optionally
    :data:`HOOK_TIMELINE_HOST` and, for ``measured``, :data:`HOOK_TIMELINE_SPREAD` (drawn as whiskers at the decode
    end). ``context`` (model, compressor, rate, GPUs) goes under the question; ``n_iter``: the iterations the
    measured medians come from; ``model_name``: what the right panel's title calls the model. Returns
    ``(fig, (ax_measured, ax_model))``."""
    for name, t in (("measured", measured), ("predicted", predicted)):
        missing = [c for c in HOOK_TIMELINE_COLUMNS if c not in t]
        if missing or t.empty:
            raise ValueError(f"hook_timeline: the {name} frame needs one row per bucket with columns "
                             f"{', '.join(HOOK_TIMELINE_COLUMNS)}" + (f"; missing {', '.join(missing)}" if missing
                                                                       else "; it has no rows"))
    fig, (axm, axp) = new(ncols=2, width=6.2, height=0.34 * max(len(measured), len(predicted)) + 3.4,
                          sharex=True, sharey=True, layout="constrained")
    _hook_lanes(axm, measured, measured=True)
    _hook_lanes(axp, predicted, measured=False)
    axm.invert_yaxis()  # bucket 0, the first to communicate, on top (shared with the model's panel)
    axm.set_xlim(left=0.0)
    axm.set_ylabel("DDP bucket (communication order)")
    spread = all(c in measured for c in HOOK_TIMELINE_SPREAD)
    axm.set_title("measured: median" + (f" of {n_iter} iterations" if n_iter else "")
                  + ("\n(whiskers: decode end's interquartile range)" if spread else ""), fontsize="medium")
    axp.set_title(f"{model_name}: the same configuration", fontsize="medium")
    seen: dict = {}
    for ax in (axm, axp):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen.keys()), loc="outside lower center", ncol=3, fontsize="small")
    fig.suptitle(titled("Where does the hook's time go, bucket by bucket?", context or None), fontsize="medium")
    finish(fig)
    return fig, (axm, axp)
