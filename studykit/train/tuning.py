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
    python -m studykit.train.tuning report SWEEP SEEDS RATES   # the tables as Markdown
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from studykit.train import analysis

__all__ = ["load_frame", "best_lrs", "chosen_runs", "level_times", "priced", "targets", "tuned_tables",
           "optimizer_effect", "tuned_markdown", "main"]


def load_frame(path: str | Path) -> pd.DataFrame:
    """:func:`analysis.to_frame` of every record under ``path``, the latest run per (method, seed, peak lr)."""
    df = analysis.to_frame(analysis.load_runs(path))
    parts = []
    for _, d in df.groupby("peak_lr"):
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


def _cli(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studykit.train.tuning", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("best-lr", help="print 'LR METHOD' per method: the lowest final validation loss of a sweep")
    b.add_argument("sweep", help="a folder of training records at several peak learning rates")
    a = ap.parse_args(argv)
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
