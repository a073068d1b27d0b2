"""From training records to Tirupati et al.'s Table I and Han et al.'s time-to-accuracy view.

Records are the JSON lines :mod:`studykit.train.loop` writes (``kind == "train_epoch"``), one per
round. Times are training wall time (evaluation and profiling excluded); ``bytes_sent`` is what one
worker put into the collectives (``HookState.bytes_sent``), ``bytes_received`` what every worker
receives (``Compressor.plan`` with the ring's accounting: ``p-1`` shards for an all-gather).

With several seeds per method, :func:`time_to_target` and :func:`han_table` give the median over
seeds and the min-max interval (three seeds: every run shown, nothing assumed about its spread).
Han et al. 2024 (https://arxiv.org/abs/2407.01378) measure time to a target against FP16.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Optional

import pandas as pd

from studykit.train.loop import RECORD_KIND

__all__ = ["load_runs", "to_frame", "method_order", "summary_table", "time_to_accuracy", "time_split", "level_schedule",
           "latest_runs", "time_to_target", "han_table", "level_changes", "METRICS"]

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
def _reach(d: pd.DataFrame, metric: str, target: float) -> Optional[pd.Series]:
    """The first round of one run at which ``metric`` reaches ``target`` (<= for losses, >= otherwise)."""
    if metric not in METRICS:
        raise ValueError(f"unknown target metric {metric!r}; valid: {', '.join(METRICS)}")
    d = d.sort_values("step")
    hit = d[d[metric] <= target] if METRICS[metric] else d[d[metric] >= target]
    return hit.iloc[0] if len(hit) else None


def time_to_target(df: pd.DataFrame, metric: str = "val_loss", target: float = 2.0,
                   baseline: Optional[str] = "fp16") -> pd.DataFrame:
    """Per method, over its seeds: how many runs reached ``target`` on ``metric``, the time to it (s; median,
    min, max over the runs that reached it), the iterations and bytes received per worker to it, and the final
    ``metric`` (median, min, max). ``speedup_vs_baseline`` = baseline's median TTA / the method's (> 1: faster),
    with the interval from the extreme pairs (baseline min / method max .. baseline max / method min)."""
    if metric not in METRICS:
        raise ValueError(f"unknown target metric {metric!r}; valid: {', '.join(METRICS)}")
    rows = []
    for method in method_order(df["method"]):
        dm = df[df["method"] == method]
        tta, steps, mb, final = [], [], [], []
        for _, d in dm.groupby("run_id"):
            final.append(d.sort_values("step")[metric].iloc[-1])
            h = _reach(d, metric, target)
            if h is not None:
                tta.append(h["time_s"])
                steps.append(h["step"])
                mb.append(h["bytes_received_total"] / 1e6 if pd.notna(h["bytes_received_total"])
                          else h["bytes_sent_total"] / 1e6)
        s = pd.Series(tta, dtype=float)
        f = pd.Series(final, dtype=float)
        rows.append({"method": method, "runs": len(final), "reached": len(tta),
                     "tta_s": s.median() if len(s) else math.nan, "tta_min_s": s.min() if len(s) else math.nan,
                     "tta_max_s": s.max() if len(s) else math.nan,
                     "steps_to_target": pd.Series(steps, dtype=float).median(),
                     "received_to_target_mb": pd.Series(mb, dtype=float).median(),
                     f"final_{metric}": f.median(), f"final_{metric}_min": f.min(), f"final_{metric}_max": f.max()})
    out = pd.DataFrame(rows).set_index("method")
    if baseline is not None and baseline in out.index:
        b = out.loc[baseline]
        out["speedup_vs_baseline"] = b["tta_s"] / out["tta_s"]
        out["speedup_min"] = b["tta_min_s"] / out["tta_max_s"]
        out["speedup_max"] = b["tta_max_s"] / out["tta_min_s"]
    return out


def han_table(df: pd.DataFrame, metric: str = "val_loss", target: float = 2.0, baseline: str = "fp16") -> pd.DataFrame:
    """Han et al. 2024's table: time to the target for each method against the FP16 baseline (median and
    min-max over seeds), bytes received per worker per iteration and to the target, and the iteration time:
    the timed (overlapped) median and the profiled split into compute, encode, communicate and decode (ms)."""
    t = time_to_target(df, metric, target, baseline)
    split = time_split(df)
    cols = ["runs", "reached", "tta_s", "tta_min_s", "tta_max_s"]
    cols += [c for c in ("speedup_vs_baseline", "speedup_min", "speedup_max") if c in t]
    cols += ["steps_to_target", "received_to_target_mb", f"final_{metric}", f"final_{metric}_min",
             f"final_{metric}_max"]
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
