"""From training records to Tirupati et al.'s Table I and Han et al.'s time-to-accuracy view.

Records are the JSON lines :mod:`studykit.train.loop` writes (``kind == "train_epoch"``), one per
round. Times are training wall time (evaluation and profiling excluded); ``bytes_sent`` is what one
worker put into the collectives (``HookState.bytes_sent``), ``bytes_received`` what every worker
receives (``Compressor.plan`` with the ring's accounting: ``p-1`` shards for an all-gather).

With several seeds per method, :func:`time_to_target` and :func:`han_table` give the median over
seeds and the min-max interval (three seeds: every run shown, nothing assumed about its spread), or, with
``level``, means and Student-t intervals (:func:`seed_interval`) and the speed-up paired by seed.
Han et al. 2024 (https://arxiv.org/abs/2407.01378) measure time to a target against FP16; :func:`rate_tables`
gives their table for one workload at several emulated bandwidths against one target (the GPU runs of
``data/training/tta_gpu2/``, whose README holds :func:`han_markdown` of them).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Optional

import pandas as pd

from studykit.train.loop import RECORD_KIND

__all__ = ["load_runs", "to_frame", "method_order", "summary_table", "time_to_accuracy", "time_split", "level_schedule",
           "latest_runs", "time_to_target", "han_table", "level_changes", "METRICS", "seed_interval", "baseline_target",
           "rate_label", "load_rates", "rate_tables", "curve_band", "han_markdown", "rate_findings"]

_COLUMNS = ["run_id", "method", "epoch", "train_loss", "train_acc", "val_loss", "val_acc", "test_loss", "test_acc",
            "train_s", "compute_s", "compress_s", "comm_s", "eval_s", "time_s", "iterations", "bytes_sent",
            "bytes_sent_total", "bytes_planned_per_step", "bits_per_element", "level_index", "boost", "world_size",
            "grad_norm", "lr", "step", "bytes_received", "bytes_received_total", "bytes_received_per_step", "final"]
_SPLIT = ("compute", "encode", "comm", "decode", "iteration")

#: the metrics a target may be set on, and whether lower is better
METRICS = {"val_loss": True, "test_loss": True, "val_acc": False, "test_acc": False}


def load_runs(path: str | Path) -> list[dict]:
    """Every training record in a ``.jsonl`` file or in the ``*.jsonl`` files under a folder
    (read by :func:`studykit.measure.records.load_records`: damaged lines warned and skipped,
    duplicates kept once; ``.report`` says how many)."""
    from studykit.measure.records import RecordError, load_records

    path = Path(path)
    try:
        recs = load_records(path, kind=RECORD_KIND)
    except RecordError as exc:
        if not path.exists():
            raise FileNotFoundError(f"no training records at {path} (expected a .jsonl file or a folder of them)") \
                from None
        raise exc
    if not recs:
        raise ValueError(f"{path}: no records of kind {RECORD_KIND!r} in {recs.report.files}")
    return recs


def to_frame(records: Iterable[dict]) -> pd.DataFrame:
    """One row per (run, epoch) with the numeric columns and the level label."""
    rows = []
    for i, r in enumerate(records):
        row = {k: r.get(k, math.nan) for k in _COLUMNS}
        row["level"] = r["level"]["label"]
        row["device"] = r.get("provenance", {}).get("gpu") or r.get("provenance", {}).get("cpu")
        row["seed"] = r.get("seed", r.get("params", {}).get("seed", 0))
        row["order"] = i
        net = r.get("network") or r.get("provenance", {}).get("network") or {}
        row["rate_gbps"] = net.get("rate_gbps", math.nan) if isinstance(net, dict) else math.nan
        row["iter_ms"] = (r.get("iter_ms") or {}).get("ms_median", math.nan)
        row["peak_lr"] = r.get("params", {}).get("lr", math.nan)
        opt = r.get("optimizer_state") or {}
        for k in ("step_rms", "sqrt_v_mean", "m_rms"):
            row[f"opt_{k}"] = opt.get(k, math.nan)
        split = r.get("split_ms") or {}
        for k in _SPLIT:
            row[f"split_{k}_ms"] = split.get(k, math.nan)
        rows.append(row)
    df = pd.DataFrame(rows)
    df = df.sort_values(["method", "run_id", "epoch"]).reset_index(drop=True)
    # records written before rounds existed: the step is the iterations so far
    cum = df.groupby("run_id")["iterations"].cumsum()
    df["step"] = df["step"].where(df["step"].notna(), cum)
    return df


def latest_runs(df: pd.DataFrame) -> pd.DataFrame:
    """Keep one run per (method, seed): the last written of those that finished (``final``), or the last
    one where no run says whether it finished (records from before ``final`` existed)."""
    d = df.sort_values("order") if "order" in df else df
    done = d[d["final"] == True]  # noqa: E712 - NaN for old records
    keep = set(done.groupby(["method", "seed"])["run_id"].last()) if len(done) else set()
    rest = d[~d.set_index(["method", "seed"]).index.isin(done.set_index(["method", "seed"]).index)]
    keep |= set(rest.groupby(["method", "seed"])["run_id"].last()) if len(rest) else set()
    return df[df["run_id"].isin(keep)].sort_values(["method", "seed", "epoch"]).reset_index(drop=True)


def method_order(methods, preferred=("none", "fp16", "quantize8", "dynamic")) -> list[str]:
    ms = list(dict.fromkeys(methods))
    return [m for m in preferred if m in ms] + [m for m in ms if m not in preferred]


def summary_table(df: pd.DataFrame) -> pd.DataFrame:
    """Tirupati et al.'s Table I per method: epochs, final train/test accuracy (%), best test accuracy,
    training time (s), data transferred per worker and by all workers (MB = 1e6 bytes)."""
    rows = []
    for method in method_order(df["method"]):
        d = df[df["method"] == method].sort_values("epoch")
        last = d.iloc[-1]
        rows.append({
            "method": method,
            "epochs": int(last["epoch"]) + 1,
            "train_acc_pct": 100 * last["train_acc"],
            "test_acc_pct": 100 * last["test_acc"],
            "best_test_acc_pct": 100 * d["test_acc"].max(),
            "train_time_s": last["time_s"],
            "sent_per_worker_mb": last["bytes_sent_total"] / 1e6,
            "sent_all_workers_mb": last["bytes_sent_total"] * last["world_size"] / 1e6,
        })
    return pd.DataFrame(rows).set_index("method")


def time_to_accuracy(df: pd.DataFrame, target: float, baseline: Optional[str] = "fp16") -> pd.DataFrame:
    """Han et al.'s metric: training time (and epochs, bytes) until the test accuracy first reaches
    ``target`` (fraction). ``speedup_vs_baseline`` = baseline TTA / method TTA (> 1: faster);
    NaN where a method (or the baseline) never reached the target."""
    rows = []
    for method in method_order(df["method"]):
        d = df[df["method"] == method].sort_values("epoch")
        hit = d[d["test_acc"] >= target]
        if len(hit):
            h = hit.iloc[0]
            rows.append({"method": method, "reached": True, "epochs_to_target": int(h["epoch"]) + 1,
                         "tta_s": h["time_s"], "bytes_to_target_mb": h["bytes_sent_total"] / 1e6})
        else:
            rows.append({"method": method, "reached": False, "epochs_to_target": math.nan, "tta_s": math.nan,
                         "bytes_to_target_mb": math.nan})
    out = pd.DataFrame(rows).set_index("method")
    out["final_test_acc_pct"] = [100 * df[df["method"] == m].sort_values("epoch")["test_acc"].iloc[-1]
                                 for m in out.index]
    if baseline is not None and baseline in out.index:
        out["speedup_vs_baseline"] = out.loc[baseline, "tta_s"] / out["tta_s"]
    return out


def time_split(df: pd.DataFrame, skip_first_epoch: bool = True) -> pd.DataFrame:
    """Mean time per iteration (ms) per method, first round left out (warm-up, DDP's bucket rebuild)
    unless it is the only one.

    Records of :mod:`studykit.train.loop` since the overlap-keeping timing: ``iteration_ms`` is the
    median timed (overlapped) iteration, and ``compute_ms``, ``encode_ms``, ``comm_ms``, ``decode_ms``
    come from the separate profiled iterations (blocking, synchronised: their sum, ``profiled_ms``, is
    what the iteration would cost without overlap, optimizer step excluded). Older records (one
    synchronised timing) give ``compute_ms``, ``compress_ms`` (encode + decode) and ``comm_ms``, summing to
    ``iteration_ms``."""
    rows = []
    for method in method_order(df["method"]):
        d = df[df["method"] == method]
        if skip_first_epoch and (d["epoch"] > 0).any():
            d = d[d["epoch"] > 0]
        row = {"method": method, "bytes_per_iter_kb": d["bytes_planned_per_step"].mean() / 1e3}
        if "split_compute_ms" in d and d["split_compute_ms"].notna().any():
            row.update({f"{k}_ms": d[f"split_{k}_ms"].mean() for k in ("compute", "encode", "comm", "decode")})
            row["profiled_ms"] = d["split_iteration_ms"].mean()
            row["iteration_ms"] = d["iter_ms"].median()
            row["received_per_iter_kb"] = d["bytes_received_per_step"].mean() / 1e3
        else:
            it = d["iterations"].sum()
            row.update({"compute_ms": 1e3 * d["compute_s"].sum() / it, "compress_ms": 1e3 * d["compress_s"].sum() / it,
                        "comm_ms": 1e3 * d["comm_s"].sum() / it})
            row["iteration_ms"] = row["compute_ms"] + row["compress_ms"] + row["comm_ms"]
        rows.append(row)
    return pd.DataFrame(rows).set_index("method")


def level_schedule(df: pd.DataFrame) -> pd.DataFrame:
    """Per method and epoch: the compression level used and its wire bits per gradient element."""
    cols = ["method", "epoch", "level", "level_index", "boost", "bits_per_element"]
    return df[cols].sort_values(["method", "epoch"]).reset_index(drop=True)


# ------------------------------------------------------------------ several seeds
def _reach(d: pd.DataFrame, metric: str, target: float, interpolate: bool = False) -> dict | None:
    """Where one run first reaches ``target`` on ``metric`` (<= for losses, >= otherwise): ``time_s``, ``step`` and
    ``received_mb`` (bytes received per worker so far, MB) of the first round that reaches it, or, with
    ``interpolate``, at the linear crossing between that round and the one before (time, iterations and bytes grow
    linearly within a round, whose level is fixed; the metric is taken as linear between its evaluations). A run that
    reaches the target at its first evaluation keeps that round's values (no earlier evaluation to interpolate from).
    None if it never does."""
    if metric not in METRICS:
        raise ValueError(f"unknown target metric {metric!r}; valid: {', '.join(METRICS)}")
    d = d.sort_values("step").reset_index(drop=True)
    ok = d[metric] <= target if METRICS[metric] else d[metric] >= target
    if not ok.any():
        return None
    i = int(ok.to_numpy().argmax())
    mb = (d["bytes_received_total"] if d["bytes_received_total"].notna().all() else d["bytes_sent_total"]) / 1e6
    at = {"time_s": float(d.loc[i, "time_s"]), "step": float(d.loc[i, "step"]), "received_mb": float(mb[i])}
    if not interpolate or i == 0:
        return at
    m0, m1 = float(d.loc[i - 1, metric]), float(d.loc[i, metric])
    frac = (target - m0) / (m1 - m0)  # in (0, 1]: the round before had not reached it, this one has
    before = {"time_s": float(d.loc[i - 1, "time_s"]), "step": float(d.loc[i - 1, "step"]),
              "received_mb": float(mb[i - 1])}
    return {k: before[k] + frac * (at[k] - before[k]) for k in at}


def seed_interval(values, level: float = 0.9, log: bool = False) -> tuple[float, float, float]:
    """Mean over seeds of ``values`` and the two-sided Student-t confidence interval of that mean at ``level``:
    ``mean -+ t_{(1+level)/2, n-1} s / sqrt(n)`` (``s`` the sample standard deviation, ``n`` the runs; NaNs are
    dropped). With three seeds ``t = 2.92`` at 90 %, with two ``6.31``: the interval is as wide as so few runs
    allow. ``log``: the same on the logarithms, returned exponentiated (the geometric mean and an interval that stays
    positive: for times and ratios). Bounds are NaN with fewer than two values, everything NaN with none."""
    from scipy import stats

    if not 0 < level < 1:
        raise ValueError(f"level must be a confidence level strictly between 0 and 1 (e.g. 0.9), got {level!r}")
    v = pd.Series(values, dtype=float).dropna()
    if log:
        if (v <= 0).any():
            raise ValueError(f"log=True needs positive values, got {v[v <= 0].tolist()}")
        v = v.apply(math.log)
    back = math.exp if log else float
    if v.empty:
        return math.nan, math.nan, math.nan
    mean = float(v.mean())
    if len(v) < 2:
        return back(mean), math.nan, math.nan
    half = float(stats.t.ppf((1 + level) / 2, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
    return back(mean), back(mean - half), back(mean + half)


def baseline_target(df: pd.DataFrame, metric: str = "val_loss", baseline: str = "fp16") -> float:
    """The worst final ``metric`` among the ``baseline``'s runs (the highest loss, the lowest accuracy): a target
    every baseline run reaches by its end, and the others may or may not."""
    if metric not in METRICS:
        raise ValueError(f"unknown target metric {metric!r}; valid: {', '.join(METRICS)}")
    d = df[df["method"] == baseline]
    if d.empty:
        raise ValueError(f"no runs of the baseline {baseline!r}; methods here: {', '.join(method_order(df['method']))}")
    final = d.sort_values("step").groupby("run_id")[metric].last()
    return float(final.max() if METRICS[metric] else final.min())


def time_to_target(df: pd.DataFrame, metric: str = "val_loss", target: float = 2.0,
                   baseline: Optional[str] = "fp16", level: float | None = None,
                   interpolate: bool = False) -> pd.DataFrame:
    """Per method, over its seeds: how many runs reached ``target`` on ``metric``, the time to it (s), the
    iterations and bytes received per worker to it, the final ``metric``, and the bytes received per iteration over
    the whole run (``run_received_per_iter_mb``: total / iterations, so a dynamic method's levels are averaged).

    ``level=None``: medians, with the min-max over the runs (``tta_min_s``, ``tta_max_s``, ``final_*_min/max``);
    ``speedup_vs_baseline`` = baseline's median TTA / the method's (> 1: faster), with the interval from the
    extreme pairs (baseline min / method max .. baseline max / method min).
    ``level=0.9`` (Han et al. 2024's table with seeds): the Student-t intervals of :func:`seed_interval`; times to
    the target as geometric means over the runs that reached it with the interval on their logarithms
    (``tta_lo_s``, ``tta_hi_s``: positive), everything else as arithmetic means (``final_*_lo/hi``; min and max
    still given); the speed-up paired by seed (the same seed: the same initialisation and data order): the
    geometric mean of baseline TTA / method TTA over the seeds where both reached the target, interval on the log
    ratios (``speedup_lo``, ``speedup_hi``; where every run reached it, exactly baseline ``tta_s`` / method ``tta_s``).
    ``interpolate``: the crossing between evaluations (:func:`_reach`), else the first round that reaches it."""
    if metric not in METRICS:
        raise ValueError(f"unknown target metric {metric!r}; valid: {', '.join(METRICS)}")
    rows, per_seed = [], {}
    for method in method_order(df["method"]):
        dm = df[df["method"] == method]
        tta, steps, mb, final, per_iter = [], [], [], [], []
        per_seed[method] = {}
        for _, d in dm.groupby("run_id"):
            d = d.sort_values("step")
            final.append(d[metric].iloc[-1])
            total = d["bytes_received_total"].iloc[-1]
            total = d["bytes_sent_total"].iloc[-1] if pd.isna(total) else total
            per_iter.append(total / 1e6 / d["step"].iloc[-1])
            h = _reach(d, metric, target, interpolate)
            if h is not None:
                tta.append(h["time_s"])
                steps.append(h["step"])
                mb.append(h["received_mb"])
                per_seed[method][d["seed"].iloc[0]] = h["time_s"]
        s = pd.Series(tta, dtype=float)
        f = pd.Series(final, dtype=float)
        center = (lambda x: pd.Series(x, dtype=float).median()) if level is None else \
            (lambda x: pd.Series(x, dtype=float).mean())
        row = {"method": method, "runs": len(final), "reached": len(tta),
               "tta_s": center(tta) if level is None else seed_interval(tta, level, log=True)[0], "tta_min_s": s.min() if len(s) else math.nan,
               "tta_max_s": s.max() if len(s) else math.nan,
               "steps_to_target": center(steps), "received_to_target_mb": center(mb),
               f"final_{metric}": center(final), f"final_{metric}_min": f.min(), f"final_{metric}_max": f.max(),
               "run_received_per_iter_mb": center(per_iter)}
        if level is not None:
            _, row["tta_lo_s"], row["tta_hi_s"] = seed_interval(tta, level, log=True)
            _, row[f"final_{metric}_lo"], row[f"final_{metric}_hi"] = seed_interval(final, level)
        rows.append(row)
    out = pd.DataFrame(rows).set_index("method")
    if baseline is None or baseline not in out.index:
        return out
    if level is None:
        b = out.loc[baseline]
        out["speedup_vs_baseline"] = b["tta_s"] / out["tta_s"]
        out["speedup_min"] = b["tta_min_s"] / out["tta_max_s"]
        out["speedup_max"] = b["tta_max_s"] / out["tta_min_s"]
        return out
    ratios = {m: [per_seed[baseline][k] / t for k, t in per_seed[m].items() if k in per_seed[baseline]]
              for m in out.index}
    ci = {m: seed_interval(r, level, log=True) for m, r in ratios.items()}
    out["speedup_vs_baseline"] = [ci[m][0] for m in out.index]
    out["speedup_lo"] = [ci[m][1] for m in out.index]
    out["speedup_hi"] = [ci[m][2] for m in out.index]
    out["speedup_pairs"] = [len(ratios[m]) for m in out.index]
    return out


def han_table(df: pd.DataFrame, metric: str = "val_loss", target: float = 2.0, baseline: str = "fp16",
              level: float | None = None, interpolate: bool = False) -> pd.DataFrame:
    """Han et al. 2024's table: time to the target for each method against the FP16 baseline (over seeds:
    :func:`time_to_target` with ``level`` and ``interpolate``), bytes received per worker per iteration and to the
    target, and the iteration time: the timed (overlapped) median and the profiled split into compute, encode,
    communicate and decode (ms, :func:`time_split`)."""
    t = time_to_target(df, metric, target, baseline, level, interpolate)
    split = time_split(df)
    cols = ["runs", "reached", "tta_s"]
    cols += ["tta_min_s", "tta_max_s"] if level is None else ["tta_lo_s", "tta_hi_s"]
    cols += [c for c in ("speedup_vs_baseline", "speedup_min", "speedup_max", "speedup_lo", "speedup_hi",
                         "speedup_pairs") if c in t]
    cols += ["steps_to_target", "received_to_target_mb", f"final_{metric}"]
    cols += [f"final_{metric}_min", f"final_{metric}_max"] if level is None else [f"final_{metric}_lo",
                                                                                  f"final_{metric}_hi"]
    cols += ["run_received_per_iter_mb"]
    out = t[cols].join(split, how="left")
    return out


def level_changes(df: pd.DataFrame) -> pd.DataFrame:
    """Every change of compression level of every run: the iteration from which the new level trains
    (``step`` of the round before it), the old and new level and its wire bits per element."""
    rows = []
    for (method, run), d in df.groupby(["method", "run_id"]):
        d = d.sort_values("step")
        prev = None
        for _, r in d.iterrows():
            if prev is not None and r["level"] != prev["level"]:
                rows.append({"method": method, "run_id": run, "seed": r["seed"], "step": prev["step"],
                             "from": prev["level"], "to": r["level"], "bits_per_element": r["bits_per_element"],
                             "boost": bool(r["boost"])})
            prev = r
    return pd.DataFrame(rows, columns=["method", "run_id", "seed", "step", "from", "to", "bits_per_element", "boost"])


# ------------------------------------------------------------------ one workload at several emulated rates
def rate_label(df: pd.DataFrame) -> str:
    """The emulated link of a set of runs as text (``"10 Gbit/s"``), from the records' ``network.rate_gbps``;
    ``"not emulated"`` when no record names one. Runs of more than one rate are refused."""
    rates = set(df["rate_gbps"].dropna())
    if len(rates) > 1:
        raise ValueError(f"runs at several emulated rates {sorted(rates)} Gbit/s: give one folder per rate")
    return f"{rates.pop():g} Gbit/s" if rates else "not emulated"


def load_rates(folders: Iterable[str | Path]) -> dict[str, pd.DataFrame]:
    """The latest runs (:func:`latest_runs`) of each folder of training records, keyed by their emulated rate
    (:func:`rate_label`), in the order given."""
    out: dict[str, pd.DataFrame] = {}
    for folder in folders:
        df = latest_runs(to_frame(load_runs(folder)))
        label = rate_label(df)
        if label in out:
            raise ValueError(f"{folder}: a second folder of runs at {label}; give one folder per rate")
        out[label] = df
    return out


def rate_tables(frames: dict[str, pd.DataFrame], metric: str = "val_loss", target: float | None = None,
                baseline: str = "fp16", level: float = 0.9, interpolate: bool = True) -> tuple[float, dict]:
    """Han et al. 2024's table (:func:`han_table`, means with ``level`` intervals over seeds, crossings
    interpolated) for each rate's runs, all against one target: ``target``, or where it is None (or negative) the
    baseline's worst final value over every rate (:func:`baseline_target`: every baseline run reaches it).
    Returns ``(target, {rate: table})``."""
    if not frames:
        raise ValueError("no runs: give at least one folder of training records")
    if target is None or target < 0:
        target = baseline_target(pd.concat(frames.values(), ignore_index=True), metric, baseline)
    return target, {rate: han_table(df, metric, target, baseline, level, interpolate) for rate, df in frames.items()}


def curve_band(df: pd.DataFrame, metric: str = "val_loss", level: float = 0.9) -> pd.DataFrame:
    """Per method and evaluation round (``step``): the mean training time over seeds (s), the mean ``metric`` and
    its :func:`seed_interval` (``lo``, ``hi``), and the number of runs; the band a figure draws around the mean
    curve. Seeds are aligned by iteration, so the time axis is the seeds' mean time at that iteration."""
    rows = []
    for (method, step), d in df.groupby(["method", "step"]):
        mean, lo, hi = seed_interval(d[metric], level)
        rows.append({"method": method, "step": step, "time_s": d["time_s"].mean(), metric: mean, "lo": lo, "hi": hi,
                     "runs": len(d)})
    return pd.DataFrame(rows).sort_values(["method", "step"]).reset_index(drop=True)


def _ci(mid: float, lo: float, hi: float, fmt: str) -> str:
    if pd.isna(mid):
        return "not reached"
    if pd.isna(lo) or pd.isna(hi):
        return f"{mid:{fmt}} (one run)"
    return f"{mid:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


def han_markdown(table: pd.DataFrame, metric: str = "val_loss", baseline: str = "fp16") -> str:
    """One :func:`rate_tables` table (``level`` set) as Markdown: per method the runs that reached the target, the
    time to it (s) and the speed-up over the baseline with their intervals, the mean iterations to it, the final
    ``metric``, MB received per worker per iteration (run average) and the iteration: timed median and profiled
    split (ms)."""
    need = {"tta_lo_s", f"final_{metric}_lo", "compute_ms"}
    if not need <= set(table.columns):
        raise ValueError(f"table lacks {sorted(need - set(table.columns))}: give a han_table(..., level=0.9) of "
                         f"records with profiled iterations, target on {metric!r}")
    head = (f"| method | reached | time to target (s) | speed-up vs {baseline} | iterations to target "
            f"| final {metric.replace('_', ' ')} | received / iteration (MB) | timed iteration (ms) "
            "| compute / encode / comm / decode (ms) |")
    lines = [head,
             "|---|---:|---|---|---:|---|---:|---:|---|"]
    for m, r in table.iterrows():
        speed = "(baseline)" if m == baseline else _ci(r["speedup_vs_baseline"], r["speedup_lo"], r["speedup_hi"],
                                                       ".2f")
        steps = "-" if pd.isna(r["steps_to_target"]) else f"{r['steps_to_target']:.0f}"
        split = " / ".join(f"{r[f'{k}_ms']:.1f}" for k in ("compute", "encode", "comm", "decode"))
        tta = _ci(r["tta_s"], r["tta_lo_s"], r["tta_hi_s"], ".2f")
        final = _ci(r[f"final_{metric}"], r[f"final_{metric}_lo"], r[f"final_{metric}_hi"], ".3f")
        lines.append(f"| {m} | {int(r['reached'])}/{int(r['runs'])} | {tta} | {speed} | {steps} | {final} "
                     f"| {r['run_received_per_iter_mb']:.2f} | {r['iteration_ms']:.1f} | {split} |")
    return "\n".join(lines) + "\n"


def rate_findings(tables: dict[str, pd.DataFrame], baseline: str = "fp16") -> list[str]:
    """What the :func:`rate_tables` say, one sentence per rate, every number read from the tables: which methods
    reached the target in every run and which in none, the fastest to it against the baseline, the shortest timed
    iteration, and the baseline's communication share of its profiled iteration."""
    out = []
    for rate, t in tables.items():
        every = [m for m in t.index if t.loc[m, "reached"] == t.loc[m, "runs"]]
        never = [m for m in t.index if t.loc[m, "reached"] == 0]
        s = f"At {rate}: {', '.join(every) or 'no method'} reached the target in every run"
        s += f"; {', '.join(never)} in none" if never else ""
        reached = t[t["reached"] > 0]
        if len(reached):
            best = reached["tta_s"].idxmin()
            s += f". Fastest to it: {best}, {_ci(t.loc[best, 'tta_s'], t.loc[best, 'tta_lo_s'], t.loc[best, 'tta_hi_s'], '.2f')} s"
            if best != baseline and baseline in t.index:
                s += (f", {_ci(t.loc[best, 'speedup_vs_baseline'], t.loc[best, 'speedup_lo'], t.loc[best, 'speedup_hi'], '.2f')}"
                      f"x {baseline}'s {t.loc[baseline, 'tta_s']:.2f} s")
        quick = t["iteration_ms"].idxmin()
        s += f". Shortest timed iteration: {quick} ({t.loc[quick, 'iteration_ms']:.1f} ms"
        if baseline in t.index:
            b = t.loc[baseline]
            s += (f" against {baseline}'s {b['iteration_ms']:.1f} ms, whose profiled iteration spends "
                  f"{100 * b['comm_ms'] / b['profiled_ms']:.0f} % communicating")
        out.append(s + ").")
    return out
