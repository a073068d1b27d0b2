"""Time to accuracy against tuned baselines: each method at its own best learning rate, priced at link rates.

A comparison of methods at one learning rate measures, besides the methods, how far that rate is from each
one's best (Han et al. 2024, https://arxiv.org/abs/2407.01378, compare at equal tuning effort). This module
reads three sets of training records (:mod:`studykit.train.loop`, made by ``scripts/gpu_tta_tuned.sh``):

* a **sweep**: every method at several peak learning rates, one seed; :func:`best_lrs` picks, per method,
  the rate with the lowest final *validation* loss and says when it lies at the edge of the grid;
* the **seeds**: more seeds of every method at its chosen rate (the sweep's run is the first);
* the **rates**: a few timed iterations of every method, and of every rung of a dynamic ladder, on a link
  shaped to each rate. The loss a run reaches after ``n`` iterations does not depend on the link, and the
  iteration time does not depend on the learning rate or the seed, so :func:`priced` gives every round of every
  run the time it takes at a rate: its iterations times the median iteration time of its level there.

:func:`tuned_tables` then gives, per rate and target loss (on the held-out *test* files), each method's
iteration-time ratio against fp16, iterations and time to the target with Student-t intervals over seeds, and
the speed-up over fp16 paired by seed (:func:`studykit.train.analysis.time_to_target`).

    python -m studykit.train.tuning best-lr SWEEP_FOLDER       # "LR METHOD" per method (the campaign script)
    python -m studykit.train.tuning report FOLDER              # the tables as Markdown (sweep/ seeds/ rates/)
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from studykit.train import analysis

__all__ = ["load_frame", "best_lrs", "chosen_runs", "level_times", "priced", "targets", "tuned_tables",
           "optimizer_effect", "load_campaign", "tuned_markdown", "findings", "main"]


def load_frame(path: str | Path) -> pd.DataFrame:
    """:func:`analysis.to_frame` of every record under ``path``, the latest run per (method, seed, peak learning
    rate, emulated link rate)."""
    df = analysis.to_frame(analysis.load_runs(path))
    parts = []
    for _, d in df.groupby(["peak_lr", "rate_gbps"], dropna=False):
        parts.append(analysis.latest_runs(d))
    return pd.concat(parts, ignore_index=True) if parts else df


def best_lrs(sweep: pd.DataFrame, metric: str = "val_loss") -> pd.DataFrame:
    """Per method: the final ``metric`` (mean over the sweep's seeds) at every peak learning rate, the rate with the
    lowest (``lr``), and ``at_edge``: whether it is the smallest or largest rate tried (the best may lie beyond)."""
    if metric not in ("val_loss", "test_loss"):
        raise ValueError(f"best_lrs chooses on a loss: val_loss (the default) or test_loss, got {metric!r}")
    finals = (sweep.sort_values("step").groupby(["method", "peak_lr", "run_id"])[metric].last()
              .groupby(["method", "peak_lr"]).mean().unstack("peak_lr"))
    if finals.empty:
        raise ValueError("no sweep runs to choose a learning rate from")
    grid = sorted(finals.columns)
    rows = []
    for method in analysis.method_order(finals.index):
        row = finals.loc[method].dropna()
        best = float(row.idxmin())
        rows.append({"method": method, "lr": best, "at_edge": len(row) > 1 and best in (min(row.index), max(row.index)),
                     "lrs_tried": len(row), **{f"{metric}@{lr:g}": finals.loc[method].get(lr, math.nan) for lr in grid}})
    return pd.DataFrame(rows).set_index("method")


def chosen_runs(sweep: pd.DataFrame, seeds: pd.DataFrame, lrs: pd.DataFrame) -> pd.DataFrame:
    """Every run of every method at its chosen learning rate (``lrs["lr"]``, :func:`best_lrs`): the sweep's and the
    extra seeds', the latest per (method, seed)."""
    both = pd.concat([sweep, seeds], ignore_index=True)
    keep = [both[(both["method"] == m) & (both["peak_lr"] == lr)] for m, lr in lrs["lr"].items()]
    out = analysis.latest_runs(pd.concat(keep, ignore_index=True))
    if out.empty:
        raise ValueError("no runs at the chosen learning rates")
    return out


def level_times(rates: pd.DataFrame, skip_rounds: int = 1) -> pd.DataFrame:
    """Per emulated rate and level: the median over timed rounds of the rounds' median iteration time (ms), its
    min and max over those rounds, the rounds and timed iterations used, and the profiled split (ms). The first
    ``skip_rounds`` rounds of each run are warm-up (DDP rebuilds its buckets; caches fill) and left out."""
    rows = []
    for (rate, level), d in rates.groupby(["rate_gbps", "level"]):
        d = d.sort_values("step")
        timed = d[d.groupby("run_id").cumcount() >= skip_rounds]
        if timed.empty:
            raise ValueError(f"level {level} at {rate:g} Gbit/s: no round after the {skip_rounds} warm-up round(s)")
        rows.append({"rate_gbps": float(rate), "level": level, "iter_ms": float(timed["iter_ms"].median()),
                     "iter_ms_min": float(timed["iter_ms"].min()), "iter_ms_max": float(timed["iter_ms"].max()),
                     "rounds": len(timed), "iterations": int(timed["iterations"].sum()),
                     **{f"{k}_ms": float(timed[f"split_{k}_ms"].median()) for k in ("compute", "encode", "comm",
                                                                                      "decode")}})
    if not rows:
        raise ValueError("no timed runs at any rate")
    return pd.DataFrame(rows).set_index(["rate_gbps", "level"]).sort_index()


def priced(runs: pd.DataFrame, times: pd.DataFrame, rate: float) -> pd.DataFrame:
    """``runs`` with ``time_s`` replaced by the training time at ``rate`` (Gbit/s): every round costs its
    iterations times its level's median iteration time there (:func:`level_times`), summed along the run."""
    timed = sorted(times.index.get_level_values("rate_gbps").unique())
    if float(rate) not in timed:
        raise ValueError(f"no timed iterations at {rate:g} Gbit/s; timed rates: {', '.join(f'{r:g}' for r in timed)}")
    at = times.xs(float(rate), level="rate_gbps")["iter_ms"]
    missing = sorted(set(runs["level"]) - set(at.index))
    if missing:
        raise ValueError(f"no timed iterations at {rate:g} Gbit/s for level(s) {', '.join(missing)}; timed: "
                         f"{', '.join(at.index)}")
    out = runs.sort_values(["run_id", "step"]).copy()
    out["iter_ms"] = out["level"].map(at)
    out["time_s"] = (out["iterations"] * out["iter_ms"] / 1e3).groupby(out["run_id"]).cumsum()
    return out


def targets(runs: pd.DataFrame, metric: str = "test_loss", baseline: str = "fp16") -> list[tuple[float, str]]:
    """The target losses of :func:`tuned_tables`, each with what it is: the worst final ``metric`` of the
    ``baseline``'s runs (each of them reaches it), 10 % above it, and two that every run of every method reaches:
    the worst final of any run and 10 % above that."""
    b = analysis.baseline_target(runs, metric, baseline)
    final = runs.sort_values("step").groupby("run_id")[metric].last()
    worst = float(final.max())
    out = {worst: "the worst final run of any method", 1.1 * worst: "10 % above the worst final run of any method"}
    out[b] = f"the worst final {baseline} run" + (" (and of any method)" if b in out else "")
    out[1.1 * b] = f"10 % above the worst final {baseline} run"
    return sorted(out.items())


def tuned_tables(runs: pd.DataFrame, times: pd.DataFrame, metric: str = "test_loss", baseline: str = "fp16",
                 level: float = 0.9) -> dict[tuple[float, float], pd.DataFrame]:
    """Per (rate, target): per method the runs that reached the target, iterations and time to it (Student-t
    intervals over seeds, crossings interpolated between evaluations), the speed-up over ``baseline`` paired by
    seed (:func:`analysis.time_to_target`), the mean iteration time at the rate (a dynamic method's averaged over
    its levels as its runs used them up to the target, or over the whole run where none reached it) and
    ``throughput_vs_baseline``, the baseline's iteration time over it."""
    out = {}
    for rate in sorted(times.index.get_level_values("rate_gbps").unique(), reverse=True):
        p = priced(runs, times, rate)
        per_run = p.groupby("run_id").agg(t=("time_s", "last"), n=("step", "last"), method=("method", "first"))
        ms = (1e3 * per_run["t"] / per_run["n"]).groupby(per_run["method"]).mean()
        for target, _ in targets(runs, metric, baseline):
            t = analysis.time_to_target(p, metric, target, baseline, level, interpolate=True)
            steps = {m: [] for m in t.index}
            upto = {m: [] for m in t.index}
            for _, d in p.groupby("run_id"):
                h = analysis._reach(d, metric, target, interpolate=True)
                if h is not None:
                    steps[d["method"].iloc[0]].append(h["step"])
                    upto[d["method"].iloc[0]].append(1e3 * h["time_s"] / h["step"])
            ci = {m: analysis.seed_interval(v, level) for m, v in steps.items()}
            t["steps_to_target"] = [ci[m][0] for m in t.index]
            t["steps_lo"] = [ci[m][1] for m in t.index]
            t["steps_hi"] = [ci[m][2] for m in t.index]
            # up to the target where reached (a dynamic method's levels as its runs used them until then)
            t["iter_ms"] = [sum(upto[m]) / len(upto[m]) if upto[m] else ms.get(m, math.nan) for m in t.index]
            t["throughput_vs_baseline"] = ms.get(baseline, math.nan) / t["iter_ms"]
            out[(float(rate), float(target))] = t
    return out


def optimizer_effect(sweep: pd.DataFrame, reference: str = "none", rounds: slice = slice(None)) -> pd.DataFrame:
    """AdamW's step against the ``reference`` method's at the same peak learning rate, seed and evaluation: per
    method and rate, the mean over ``rounds`` of ``step_rms / step_rms(reference)`` and of
    ``sqrt_v_mean / sqrt_v_mean(reference)`` (:func:`studykit.train.loop.optimizer_state`). Below 1 and above 1
    respectively: the method's gradient noise raised AdamW's second moment and shrank its per-coordinate step, an
    effectively lower learning rate."""
    cols = ["method", "peak_lr", "seed", "step", "opt_step_rms", "opt_sqrt_v_mean"]
    d = sweep[cols].dropna()
    if d.empty:
        raise ValueError("these records carry no optimizer state (optimizer_state, recorded since the tuned campaign)")
    ref = d[d["method"] == reference].set_index(["peak_lr", "seed", "step"])
    rows = []
    for (method, lr), g in d.groupby(["method", "peak_lr"]):
        g = g.set_index(["peak_lr", "seed", "step"]).join(ref.add_suffix("_ref"), how="inner").sort_index()
        g = g.iloc[rounds]
        if g.empty:
            continue
        rows.append({"method": method, "peak_lr": lr,
                     "step_rms_ratio": float((g["opt_step_rms"] / g["opt_step_rms_ref"]).mean()),
                     "sqrt_v_ratio": float((g["opt_sqrt_v_mean"] / g["opt_sqrt_v_mean_ref"]).mean()),
                     "evaluations": len(g)})
    return pd.DataFrame(rows).set_index(["method", "peak_lr"])


def _ci(mid, lo, hi, fmt="{:.2f}") -> str:
    if not math.isfinite(mid):
        return "not reached"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return fmt.format(mid)
    return f"{fmt.format(mid)} [{fmt.format(lo)}, {fmt.format(hi)}]"


def load_campaign(root: str | Path) -> dict:
    """The three parts of a tuned campaign folder (``sweep/``, ``seeds/``, ``rates/``) read and combined: the
    sweep, the chosen rates (:func:`best_lrs`), every run at them, the level times (:func:`level_times`) and the
    :func:`tuned_tables`."""
    root = Path(root)
    for part in ("sweep", "seeds", "rates"):
        if not (root / part).is_dir():
            raise FileNotFoundError(f"{root}: no {part}/ folder (a tuned campaign has sweep/, seeds/ and rates/)")
    sweep = load_frame(root / "sweep")
    lrs = best_lrs(sweep)
    runs = chosen_runs(sweep, load_frame(root / "seeds"), lrs)
    times = level_times(load_frame(root / "rates"))
    return {"sweep": sweep, "lrs": lrs, "runs": runs, "times": times, "tables": tuned_tables(runs, times)}


def _span(counts: pd.Series) -> str:
    """"3" or "2 to 3": the range of a count over methods."""
    lo, hi = int(counts.min()), int(counts.max())
    return f"{lo}" if lo == hi else f"{lo} to {hi}"


def _machines(root: str | Path) -> str:
    """Which GPUs each stage's records ran on, from their provenance ("loss runs on A; iteration times on B")."""
    def gpus(stage: str) -> str:
        names = sorted({str(r["provenance"].get("gpu", "an unknown GPU"))
                        for r in analysis.load_runs(Path(root) / stage)})
        return " and ".join(names) if names else "no records"
    loss = sorted({gpus("sweep"), gpus("seeds")} - {"no records"})
    return f"loss runs on {' and '.join(loss) or 'no records'}; iteration times on {gpus('rates')}"


def tuned_markdown(root: str | Path, metric: str = "test_loss", baseline: str = "fp16") -> str:
    """The README block of a tuned campaign: the workload, the learning rates chosen, the iteration times per rate,
    the time-to-target tables per rate and target, AdamW's state against ``none``'s, and what they say."""
    c = load_campaign(root)
    runs, lrs, times, tables = c["runs"], c["lrs"], c["times"], c["tables"]
    first = analysis.load_runs(Path(root) / "sweep")[0]
    ds = first["dataset"]
    seen = first["global_batch"] * ds["seq_len"] * first["total_steps"]
    final = runs.sort_values("step").groupby("run_id").last()
    seeds = runs.groupby("method")["seed"].nunique()
    out = [f"Each run trains {first['total_steps']} iterations of {first['global_batch']} windows x {ds['seq_len']} "
           f"bytes ({seen / ds['num_train_tokens']:.2f} passes over the {ds['num_train_tokens'] / 1e6:.2f} M training "
           f"bytes) in {first['buckets']} DDP buckets, {first['world_size']} ranks; {_machines(root)}. Runs per method at its chosen rate: {_span(seeds)} seeds. Final test "
           f"losses at the chosen rates lie between {final[metric].min():.3f} and {final[metric].max():.3f} nats per "
           f"byte.\n\n"]
    grid = [c for c in lrs.columns if c.startswith("val_loss@")]
    out.append("**Learning rate** (final validation loss of seed 0 at each peak rate; the lowest is chosen; "
               "\"edge\": the best rate tried is the smallest or largest, so the method's best may lie beyond)\n\n")
    out.append("| method | " + " | ".join(g.split("@")[1] for g in grid) + " | chosen |\n|---|" +
               "---:|" * len(grid) + "---|\n")
    for m, row in lrs.iterrows():
        out.append(f"| {m} | " + " | ".join("not run" if math.isnan(row[g]) else f"{row[g]:.3f}" for g in grid) +
                   f" | {row['lr']:g}{' (edge)' if row['at_edge'] else ''} |\n")
    out.append("\n**Iteration time** on the shaped link (median of the rounds' medians, 30 timed iterations after 10 "
               "warm-up; min-max over the three rounds; compute / encode / communicate / decode from 2 profiled "
               "iterations per round, ms)\n\n| level | " +
               " | ".join(f"{r:g} Gbit/s" for r in sorted(times.index.get_level_values(0).unique(), reverse=True)) +
               " |\n|---|" + "---|" * times.index.get_level_values(0).nunique() + "\n")
    for level in times.index.get_level_values(1).unique():
        cells = []
        for r in sorted(times.index.get_level_values(0).unique(), reverse=True):
            t = times.loc[(r, level)]
            cells.append(f"{t['iter_ms']:.1f} [{t['iter_ms_min']:.1f}, {t['iter_ms_max']:.1f}] "
                         f"({t['compute_ms']:.1f} / {t['encode_ms']:.1f} / {t['comm_ms']:.1f} / {t['decode_ms']:.1f})")
        out.append(f"| {level} | " + " | ".join(cells) + " |\n")
    tg = dict(targets(runs, metric, baseline))
    for (rate, target), t in tables.items():
        out.append(f"\n**{rate:g} Gbit/s, target {metric.replace('_', ' ')} {target:.4f}** ({tg[target]}): runs that "
                   f"reached it, iterations and time to it (means over seeds with 90 % Student-t intervals; time: "
                   f"geometric mean), the speed-up over {baseline} paired by seed, the mean iteration time at this rate up to "
                   f"the target (over the whole run where none reached it) and the throughput against "
                   f"{baseline}'s\n\n")
        out.append(f"| method | lr | reached | iterations to target | time to target (s) | speed-up vs {baseline} | "
                   f"iteration (ms) | throughput vs {baseline} |\n|---|---:|---:|---|---|---|---:|---:|\n")
        for m, row in t.iterrows():
            sp = "(baseline)" if m == baseline else _ci(row["speedup_vs_baseline"], row["speedup_lo"], row["speedup_hi"])
            out.append(f"| {m} | {lrs.loc[m, 'lr']:g} | {int(row['reached'])}/{int(row['runs'])} | "
                       f"{_ci(row['steps_to_target'], row['steps_lo'], row['steps_hi'], '{:.0f}')} | "
                       f"{_ci(row['tta_s'], row['tta_lo_s'], row['tta_hi_s'], '{:.1f}')} | {sp} | "
                       f"{row['iter_ms']:.1f} | {row['throughput_vs_baseline']:.2f} |\n")
    eff = optimizer_effect(c["sweep"])
    early = optimizer_effect(c["sweep"], rounds=slice(0, 5))
    out.append("\n**AdamW's state against none's** at the same peak rate, seed and evaluation (sweep, seed 0): the "
               "mean ratio of the step's root mean square (`m_hat / (sqrt(v_hat) + eps)`) and of the mean "
               "`sqrt(v_hat)`, over the whole run and over its first 5 evaluations. A noisier gradient raises "
               "`sqrt(v)` (ratio > 1); it lowers the learning rate in effect only where the step's ratio drops below 1."
               "\n\n| method | lr | step rms ratio (all) | sqrt(v) ratio (all) | step rms ratio (first 5) | "
               "sqrt(v) ratio (first 5) |\n|---|---:|---:|---:|---:|---:|\n")
    for (m, lr), row in eff.iterrows():
        if m == "none":
            continue
        e = early.loc[(m, lr)]
        out.append(f"| {m} | {lr:g} | {row['step_rms_ratio']:.3f} | {row['sqrt_v_ratio']:.3f} | "
                   f"{e['step_rms_ratio']:.3f} | {e['sqrt_v_ratio']:.3f} |\n")
    out.append("\n" + "\n".join(f"* {s}" for s in findings(c, metric, baseline)) + "\n")
    return "".join(out)


def findings(c: dict, metric: str = "test_loss", baseline: str = "fp16") -> list[str]:
    """What the tables say, one sentence each, every number read from them: per rate, at the strictest target,
    each method that reached it against ``baseline``, split into throughput and iterations."""
    out = []
    lrs = c["lrs"]
    edge = [m for m, r in lrs.iterrows() if r["at_edge"]]
    if edge:
        out.append(f"The best learning rate is at the edge of the grid for {', '.join(edge)}: for them the tuning is "
                   f"bounded by the grid, and a rate beyond it could move their results.")
    for (rate, target), t in c["tables"].items():
        if target != min(tt for (r, tt) in c["tables"] if r == rate):
            continue
        b = t.loc[baseline]
        parts = []
        for m, row in t.iterrows():
            if m == baseline:
                continue
            if row["reached"] < row["runs"]:
                parts.append(f"{m} reached it in {int(row['reached'])} of {int(row['runs'])} runs")
                continue
            it = b["steps_to_target"] / row["steps_to_target"]
            parts.append(f"{m} {row['speedup_vs_baseline']:.2f}x [{row['speedup_lo']:.2f}, {row['speedup_hi']:.2f}] "
                         f"({row['throughput_vs_baseline']:.2f}x the throughput, {it:.2f}x fewer iterations)")
        out.append(f"At {rate:g} Gbit/s and the strictest target ({metric.replace('_', ' ')} {target:.4f}), against "
                   f"{baseline}: " + "; ".join(parts) + ".")
    runs = c["runs"]
    for m in runs["method"].unique():
        levels = runs[runs["method"] == m].groupby("level")["iterations"].sum()
        if len(levels) > 1:
            share = ", ".join(f"{lv} {100 * n / levels.sum():.0f} %" for lv, n in levels.sort_values(ascending=False).items())
            boost = "; none: the ladder's boost to full precision after a stall" if "none" in levels.index else ""
            out.append(f"{m} trained its iterations at: {share} (all runs at its chosen rate{boost}).")
    eff, early = optimizer_effect(c["sweep"]), optimizer_effect(c["sweep"], rounds=slice(0, 5))
    for m in ("quantize8", "dynamic"):
        key = (m, float(c["lrs"].loc[m, "lr"])) if m in c["lrs"].index else None
        if key is None or key not in eff.index:
            continue
        a, e = eff.loc[key], early.loc[key]
        out.append(f"AdamW, {m} at its chosen rate against none at the same rate: mean sqrt(v) {a['sqrt_v_ratio']:.2f}x "
                   f"none's over the run ({e['sqrt_v_ratio']:.2f}x over the first 5 evaluations), the step's rms "
                   f"{a['step_rms_ratio']:.3f}x ({e['step_rms_ratio']:.3f}x).")
    return out


def _cli(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studykit.train.tuning", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("best-lr", help="print 'LR METHOD' per method: the lowest final validation loss of a sweep")
    b.add_argument("sweep", help="a folder of training records at several peak learning rates")
    r = sub.add_parser("report", help="print the campaign's tables (Markdown)")
    r.add_argument("folder", help="a tuned campaign: a folder with sweep/, seeds/ and rates/")
    a = ap.parse_args(argv)
    if a.cmd == "report":
        try:
            print(tuned_markdown(a.folder))
        except (FileNotFoundError, ValueError) as exc:
            ap.error(str(exc))
        return 0
    if a.cmd == "best-lr":
        try:
            table = best_lrs(load_frame(a.sweep))
        except (FileNotFoundError, ValueError) as exc:
            ap.error(str(exc))
        for method, row in table.iterrows():
            print(f"{row['lr']:g} {method}")
            if row["at_edge"]:
                print(f"warning: {method}'s best learning rate {row['lr']:g} is at the edge of the grid",
                      file=sys.stderr)
    return 0


main = _cli

if __name__ == "__main__":
    raise SystemExit(main())
