"""Tables from ``verify``'s outputs and records: error summaries (:func:`summarize`, :func:`by_batch_size`,
:func:`summary_markdown`, :func:`small_batch_table`), the encode/decode the iterations imply
(:func:`implied_encode_decode`), the hook's coalescing the model would choose (:func:`coalesce_picks`), and the noise
under the error (:func:`noise_floor`, :func:`repeatability`)."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pandas as pd

from studykit import paths
from studykit.perfmodel.verify.platform import _label, coalesce_of, load_platform, without_coalesce

#: the error targets of the bandwidth verification (median, max |relative error|) per group
TARGETS = {"syncSGD": (0.03, 0.10), "compressors (post)": (0.03, 0.10), "compressors (hook)": (0.05, 0.15),
           "compressors (blocking hook)": (0.05, 0.15)}


def within_target(group: str, median: float, maximum: float, targets: dict | None = None) -> str:
    """Whether a group's median and max |relative error| are within its target (``targets``, default
    :data:`TARGETS`): ``"yes"`` (both), ``"median only"``, ``"no"``, or ``""`` for a group without a target."""
    t = (TARGETS if targets is None else targets).get(group)
    if t is None:
        return ""
    ok = (median <= t[0], maximum <= t[1])
    return "yes" if all(ok) else ("median only" if ok[0] else "no")


def implied_encode_decode(predictions: pd.DataFrame, *, variant: str = "extended", mode: str = "post",
                          worst: int | None = None) -> pd.DataFrame:
    """The encode/decode time the measured iterations leave room for, beside the profiled one the model used.

    For a post-backward configuration the model's iteration is ``O + T_comp + T_comm + T_encode_decode``
    (Eq. 1 of Agarwal et al. 2022, https://arxiv.org/abs/2103.00543, Sec. 4.1, with the extended model's
    overhead ``O``; nothing overlaps after the backward pass), so ``measured - O - T_comp - T_comm`` is the
    encode/decode the iteration actually paid, if every other term is right. One row per model and
    compressor configuration of ``predictions`` (a ``verify`` ``predictions.csv.gz``, as
    :func:`~studykit.perfmodel.verify.files.read_predictions` reads it): how many rates, the profiled
    ``T_encode_decode`` (ms, median), the implied one (ms, median over the rates), their ratio and the largest
    |relative error| of the iteration time. ``worst``: keep only that many rows, largest error
    first (default: all, same order)."""
    need = {"variant", "mode", "model", "compressor", "params", "measured_ms", "overhead_ms", "t_comp_ms",
            "t_comm_ms", "t_encode_decode_ms", "rel_error"}
    missing = need - set(predictions.columns)
    if missing:
        raise ValueError(f"implied_encode_decode: predictions lack column(s) {sorted(missing)}")
    e = predictions[(predictions["variant"] == variant) & (predictions["mode"] == mode)].copy()
    e["implied"] = e["measured_ms"] - e["overhead_ms"] - e["t_comp_ms"] - e["t_comm_ms"]
    e["abs_err"] = e["rel_error"].abs()
    g = (e.groupby(["model", "compressor", "params"], dropna=False)
         .agg(n=("implied", "size"), profiled_ms=("t_encode_decode_ms", "median"), implied_ms=("implied", "median"),
              max_abs_rel_error=("abs_err", "max")).reset_index())
    g["implied_over_profiled"] = g["implied_ms"] / g["profiled_ms"]
    g = g.sort_values("max_abs_rel_error", ascending=False, kind="stable").reset_index(drop=True)
    return g if worst is None else g.head(worst)


def implied_encode_decode_markdown(table: pd.DataFrame) -> str:
    """:func:`implied_encode_decode` as a Markdown table (ms, two decimals; params shortened to their values)."""
    import json

    def short(params) -> str:
        try:
            p = json.loads(params) if isinstance(params, str) else {}
        except ValueError:
            return str(params)
        keep = {k: v for k, v in p.items() if k in ("rank", "ratio", "bits", "levels", "orthogonalize", "chunk")}
        return ", ".join(f"{k} {v}" for k, v in keep.items())

    lines = ["| model | compressor | params | rates | profiled encode/decode (ms) | implied by the iterations (ms) | "
             "implied / profiled | max error |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in table.itertuples():
        lines.append(f"| {r.model} | {r.compressor} | {short(r.params)} | {r.n} | {r.profiled_ms:.2f} | "
                     f"{r.implied_ms:.2f} | {r.implied_over_profiled:.2f} | {100 * r.max_abs_rel_error:.1f} % |")
    return "\n".join(lines) + "\n"


def _coalesce_name(mb) -> str:
    return "per bucket" if mb is None else ("per iteration" if mb == 0 else f"{mb:g} MB")


def _coalesce_order(name: str) -> tuple:
    """Per bucket (the default) first, then groups by size, then one group per iteration."""
    return (0, 0.0) if name == "per bucket" else (2, 0.0) if name == "per iteration" else (1, float(name.split()[0]))


def coalesce_picks(predictions: pd.DataFrame, variant: str = "extended") -> pd.DataFrame:
    """Which coalescing of an overlapped hook (a protocol per bucket, or ``coalesce_mb`` groups: ``register(...,
    coalesce_mb=)``) the model predicts fastest, beside the one measured fastest: one row per hook (model, batch,
    compressor, runner, world size, network) scored with more than one coalescing in ``predictions`` (``verify``'s
    ``predictions.csv.gz``, scored with ``--score-coalesced``).

    Columns: the hook's ``model``, ``batch_size``, ``compressor``, ``world_size``, ``rate_gbps``, ``settings`` (how
    many coalescings), ``measured`` and ``predicted`` (``{coalescing: ms}``), ``fastest`` (measured),
    ``pick`` (the model's), ``pick_over_fastest`` (the pick's measured time over the fastest's: what choosing by
    the model cost, 1.0 where it chose right). A tie goes to the first in the order per bucket, groups by size, one
    group per iteration."""
    h = predictions[(predictions["variant"] == variant) & (predictions["mode"] == "hook")].copy()
    h["coalesce"] = [_coalesce_name(coalesce_of(c)) for c in h["config"]]
    h["hook"] = [without_coalesce(c) for c in h["config"]]
    rows = []
    for _, g in h.groupby("hook", sort=True):
        if len(g) < 2:
            continue
        g = g.iloc[sorted(range(len(g)), key=lambda i: _coalesce_order(g["coalesce"].iloc[i]))]
        first = g.iloc[0]
        measured = dict(zip(g["coalesce"], g["measured_ms"].astype(float)))
        predicted = dict(zip(g["coalesce"], g["predicted_ms"].astype(float)))
        fastest, pick = min(measured, key=measured.get), min(predicted, key=predicted.get)
        rows.append({"model": first["model"], "batch_size": int(first["batch_size"]),
                     "compressor": first["compressor"], "world_size": int(first["world_size"]),
                     "rate_gbps": first["rate_gbps"], "settings": len(g), "measured": measured,
                     "predicted": predicted, "fastest": fastest, "pick": pick,
                     "pick_over_fastest": measured[pick] / measured[fastest]})
    return pd.DataFrame(rows)


def coalesce_picks_markdown(table: pd.DataFrame) -> str:
    """:func:`coalesce_picks` as a Markdown table (each coalescing's measured and predicted ms) and a count."""
    if table.empty:
        return "No hook was scored with more than one coalescing.\n"
    names = sorted({k for m in table["measured"] for k in m}, key=_coalesce_order)
    head = ["rate Gbit/s", "p", "model", "compressor"] + [f"{n}: measured / predicted ms" for n in names]
    out = ["| " + " | ".join(head + ["fastest", "the model's pick", "pick / fastest"]) + " |",
           "|" + "---|" * 4 + "---:|" * len(names) + "---|---|---:|"]
    t = table.sort_values(["world_size", "model", "rate_gbps"], ascending=[True, True, False])
    for r in t.to_dict("records"):
        cells = [f"{r['measured'][n]:.1f} / {r['predicted'][n]:.1f}" if n in r["measured"] else "" for n in names]
        rate = "NVLink" if pd.isna(r["rate_gbps"]) else f"{float(r['rate_gbps']):g}"
        out.append(f"| {rate} | {r['world_size']} | {r['model']} b{r['batch_size']} | {r['compressor']} | "
                   + " | ".join(cells) + f" | {r['fastest']} | {r['pick']} | {r['pick_over_fastest']:.2f} |")
    right = int((t["pick"] == t["fastest"]).sum())
    out += ["", f"The model picked the fastest coalescing for {right} of {len(t)} hooks; its picks took at most "
                f"{t['pick_over_fastest'].max():.2f}x the fastest (median {t['pick_over_fastest'].median():.2f}x)."]
    return "\n".join(out) + "\n"


def summary_markdown(folders: dict[str, Path | str], targets: dict | None = TARGETS) -> str:
    """Committed ``summary.csv`` files as one Markdown table: one row per (folder, group), the paper and
    extended variants' median / max |error| side by side and, with ``targets`` (default :data:`TARGETS`),
    the target and whether the extended variant meets it. ``folders``: row label -> a ``verify --out``
    folder. The READMEs under ``data/verification/`` hold exactly this (tests/test_verify.py checks it)."""
    def pct(x):
        return f"{100 * x:.1f} %"

    head = "| records, holdout | group | n | paper: median / max | extended: median / max |"
    rule = "|---|---|---:|---:|---:|"
    if targets is not None:
        head, rule = head + " target | met |", rule + "---:|---|"
    lines = [head, rule]
    for label, folder in folders.items():
        s = pd.read_csv(Path(folder) / "summary.csv")
        for group, g in s.groupby(["platform", "group"], sort=False):
            v = g.set_index("variant")
            cells = {k: f"{pct(v.loc[k, 'median_abs_rel_error'])} / {pct(v.loc[k, 'max_abs_rel_error'])}"
                     if k in v.index else "" for k in ("paper", "extended")}
            name = label if s["platform"].nunique() == 1 else f"{label}: {group[0]}"
            row = f"| {name} | {group[1]} | {int(v['n'].max())} | {cells['paper']} | {cells['extended']} |"
            if targets is not None:
                t = targets.get(group[1])
                met = within_target(group[1], v.loc["extended", "median_abs_rel_error"],
                                    v.loc["extended", "max_abs_rel_error"], targets) if "extended" in v.index else ""
                row += f" {'' if t is None else f'{pct(t[0])} / {pct(t[1])}'} | {met} |"
            lines.append(row)
    return "\n".join(lines) + "\n"


def summarize(df: pd.DataFrame, by: Sequence[str] = ("platform", "group", "variant")) -> pd.DataFrame:
    """Per group: number of configurations, median and maximum |relative error|, mean signed error."""
    if df.empty:
        return pd.DataFrame(columns=[*by, "n", "median_abs_rel_error", "max_abs_rel_error", "mean_rel_error"])
    a = df.assign(_abs=df["rel_error"].abs())
    g = a.groupby(list(by), sort=False)
    out = pd.DataFrame({"n": g.size(), "median_abs_rel_error": g["_abs"].median(),
                        "max_abs_rel_error": g["_abs"].max(), "mean_rel_error": g["rel_error"].mean()})
    worst = a.loc[g["_abs"].idxmax(), [*by, "config"]].set_index(list(by))["config"]
    out["worst_config"] = worst
    return out.reset_index()


def by_batch_size(df: pd.DataFrame) -> pd.DataFrame:
    """:func:`summarize` per batch size too: where the small-batch regime (per-tensor CPU work that
    neither gamma nor a per-bucket constant represents) shows up as a larger error."""
    return summarize(df, by=("platform", "group", "variant", "batch_size"))


#: where the small-batch comparison lives (``verify --records data/measurements/gpu`` without and with
#: ``--per-tensor``; docs/verify.md section 6 is generated from it by :func:`small_batch_table`)
SMALL_BATCH = paths.DATA / "verification" / "small_batch"


def small_batch_table(without: pd.DataFrame, with_per_tensor: pd.DataFrame | None = None,
                      group: str = "syncSGD") -> str:
    """Markdown table of the error per batch size of ``group`` (two :func:`by_batch_size` frames: the
    extended preset without and with the per-tensor CPU term, ``ModelOptions.per_tensor``), paper
    variant beside them, one row per (platform, batch size): how much of the small-batch error the
    per-tensor term removes.
    Without ``with_per_tensor``: the paper and extended columns and the extended variant's worst row."""
    def rows(df, variant):
        d = df[(df["group"] == group) & (df["variant"] == variant)]
        return {(r.platform, int(r.batch_size)): r for r in d.itertuples()}

    paper, off = rows(without, "paper"), rows(without, "extended")
    on = None if with_per_tensor is None else rows(with_per_tensor, "extended")
    if not off or (on is not None and set(off) != set(on)):
        raise ValueError(f"small_batch_table: the two frames must hold the same (platform, batch) rows of {group!r} "
                         f"extended; got {sorted(off)} and {sorted(on or {})}")
    def pct(r) -> str:
        return f"{r.median_abs_rel_error:.1%} / {r.max_abs_rel_error:.1%}"

    if on is None:
        lines = ["| platform | batch | n | paper | extended | worst (extended) |", "|---|---:|---:|---|---|---|"]
    else:
        lines = ["| platform | batch | n | paper | extended | extended + per-tensor | worst with per-tensor |",
                 "|---|---:|---:|---|---|---|---|"]
    for key in sorted(off, key=lambda k: (k[0], k[1])):
        a, b = paper.get(key), off[key]
        last = [b.worst_config] if on is None else [pct(on[key]), on[key].worst_config]
        lines.append(" | ".join([f"| {key[0]}", str(key[1]), str(b.n), pct(a) if a is not None else "-", pct(b),
                                 *last]) + " |")
    return "\n".join(lines)



def noise_floor(pred: pd.DataFrame, variant: str = "extended") -> pd.DataFrame:
    """How much syncSGD iterations of one model differ across bucket sizes, measured and predicted.

    On a fast network the model predicts nearly the same time for every bucket size, so the
    measured spread is (mostly) run-to-run noise: a floor under the achievable error."""
    s = pred[(pred["group"] == "syncSGD") & (pred["variant"] == variant)]
    rows = []
    for key, g in s.groupby(["platform", "model", "batch_size", "world_size", "rate_gbps"], dropna=False):
        if len(g) < 2:
            continue
        rows.append(dict(zip(["platform", "model", "batch_size", "world_size", "rate_gbps"], key),
                         n=len(g), measured_spread=g["measured_ms"].max() / g["measured_ms"].min() - 1.0,
                         predicted_spread=g["predicted_ms"].max() / g["predicted_ms"].min() - 1.0,
                         max_dev_from_median=(g["measured_ms"] / g["measured_ms"].median() - 1.0).abs().max()))
    return pd.DataFrame(rows)


def repeatability(source: str | Path, stat: str = "ms_median") -> pd.DataFrame:
    """DDP configurations measured more than once in ``source`` (e.g. a second pass over the
    rates): each record's statistic, and the relative spread ``max/min - 1`` among them. A model
    cannot be expected to predict a configuration more closely than it reproduces itself."""
    plat = load_platform(source, stat)
    d = plat.ddp[plat.ddp["world_size"] >= 2].copy()
    if d.empty:
        return pd.DataFrame(columns=["config", "n_records", "spread"])
    d["config"] = [_label(r) for r in d.to_dict("records")]
    rows = []
    for cfg, g in d.groupby("config", sort=False):
        if len(g) >= 2:
            v = g[stat].to_numpy(float)
            rows.append({"platform": plat.name, "config": cfg, "mode": g["mode"].iloc[0], "n_records": len(g),
                         "values_ms": "; ".join(f"{x:.3f}" for x in v), "spread": float(v.max() / v.min() - 1.0)})
    return pd.DataFrame(rows)

