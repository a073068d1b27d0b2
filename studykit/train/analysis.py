"""From training records to Tirupati et al.'s Table I and Han et al.'s time-to-accuracy view.

Records are the JSON lines :mod:`studykit.train.loop` writes (``kind == "train_epoch"``).
Times are training wall time (evaluation excluded), bytes are what one worker put into
the collectives (``HookState.bytes_sent``); "all workers" multiplies by the world size.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Optional

import pandas as pd

from studykit.train.loop import RECORD_KIND

__all__ = ["load_runs", "to_frame", "method_order", "summary_table", "time_to_accuracy", "time_split", "level_schedule",
           "latest_runs"]

_COLUMNS = ["run_id", "method", "epoch", "train_loss", "train_acc", "val_acc", "test_loss", "test_acc",
            "train_s", "compute_s", "compress_s", "comm_s", "eval_s", "time_s", "iterations", "bytes_sent",
            "bytes_sent_total", "bytes_planned_per_step", "bits_per_element", "level_index", "boost", "world_size",
            "grad_norm", "lr"]


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
    for r in records:
        row = {k: r.get(k, math.nan) for k in _COLUMNS}
        row["level"] = r["level"]["label"]
        row["device"] = r.get("provenance", {}).get("gpu") or r.get("provenance", {}).get("cpu")
        rows.append(row)
    df = pd.DataFrame(rows)
    return df.sort_values(["method", "run_id", "epoch"]).reset_index(drop=True)


def latest_runs(df: pd.DataFrame) -> pd.DataFrame:
    """Keep only the last run (by ``run_id`` order of appearance) of each method."""
    last = df.groupby("method")["run_id"].last()
    return df[df["run_id"].isin(set(last))].reset_index(drop=True)


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
    """Mean time per iteration (ms), split into compute, compression (encode/decode) and
    communication, per method. The first epoch (warm-up, DDP bucket rebuild) is left out
    unless it is the only one."""
    rows = []
    for method in method_order(df["method"]):
        d = df[df["method"] == method]
        if skip_first_epoch and (d["epoch"] > 0).any():
            d = d[d["epoch"] > 0]
        it = d["iterations"].sum()
        rows.append({"method": method, "compute_ms": 1e3 * d["compute_s"].sum() / it,
                     "compress_ms": 1e3 * d["compress_s"].sum() / it, "comm_ms": 1e3 * d["comm_s"].sum() / it,
                     "bytes_per_iter_kb": d["bytes_planned_per_step"].mean() / 1e3})
    out = pd.DataFrame(rows).set_index("method")
    out["iteration_ms"] = out[["compute_ms", "compress_ms", "comm_ms"]].sum(axis=1)
    return out


def level_schedule(df: pd.DataFrame) -> pd.DataFrame:
    """Per method and epoch: the compression level used and its wire bits per gradient element."""
    cols = ["method", "epoch", "level", "level_index", "boost", "bits_per_element"]
    return df[cols].sort_values(["method", "epoch"]).reset_index(drop=True)
