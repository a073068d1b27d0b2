"""Time a 10^4-point performance-model sweep (100 bandwidths x 100 GPU counts) in one call.

    python benchmarks/perfmodel_sweep.py            # prints ms, writes reports/benchmarks/perfmodel_sweep.json
    python benchmarks/perfmodel_sweep.py --out data/benchmarks/perfmodel_sweep.json --overwrite-committed   # the committed one
    python benchmarks/perfmodel_sweep.py --no-write

One :func:`studykit.perfmodel.predict` call evaluates syncSGD (Sec. 4.1) and PowerSGD
rank 4 (App. B, collectives from its ``plan()``) on the whole grid. The first call
also runs ``plan()`` once per distinct GPU count (cached afterwards); it is reported
separately as the cold time. The warm time is the median of ``--repeats`` calls.
Goal: well under 50 ms warm.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from studykit.measure import bench  # noqa: E402

from studykit import paths  # noqa: E402
from studykit.measure.records import provenance  # noqa: E402
from studykit.perfmodel import Calibration, Hardware, Workload, predict  # noqa: E402

GOAL_MS = 50.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=50, help="timed warm calls (median reported)")
    ap.add_argument("--model", default="resnet101")
    ap.add_argument("--compressor", default="powersgd")
    ap.add_argument("--rank", type=int, default=4)
    bench.add_json_output_args(ap, "perfmodel_sweep.json")
    a = ap.parse_args(argv)
    out = bench.json_output_from_args(ap, a)

    cal = Calibration.load(paths.CALIBRATIONS / "paper_v100.json")
    bw = np.geomspace(1.0, 400.0, 100)[:, None]
    gpus = np.arange(2, 202, 2)[None, :]  # 100 distinct GPU counts
    hw = Hardware.from_calibration(cal, bandwidth_gbps=bw)
    w = Workload(a.model, 64)
    params = {"rank": a.rank}

    t0 = time.perf_counter()
    pr = predict(w, hw, gpus, a.compressor, params, calibration=cal)
    cold_ms = (time.perf_counter() - t0) * 1e3
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        pr = predict(w, hw, gpus, a.compressor, params, calibration=cal)
        _ = pr.speedup
        times.append((time.perf_counter() - t0) * 1e3)
    points = int(np.broadcast(bw, gpus).size)
    result = {
        "benchmark": "perfmodel_sweep",
        "points": points, "grid": {"bandwidth_gbps": [1.0, 400.0, 100], "world_size": [2, 200, 100]},
        "model": a.model, "compressor": a.compressor, "params": params, "calibration": cal.name,
        "warm_ms_median": statistics.median(times), "warm_ms_min": min(times), "warm_ms_max": max(times),
        "repeats": a.repeats, "cold_ms_first_call_incl_plans": cold_ms,
        "goal_ms": GOAL_MS, "meets_goal": statistics.median(times) < GOAL_MS,
        "provenance": {**provenance("cpu"), "cores": os.cpu_count(), "numpy": np.__version__,
                       "pandas": __import__("pandas").__version__},
    }
    print(f"{points} points: warm median {result['warm_ms_median']:.2f} ms (min {result['warm_ms_min']:.2f}, "
          f"max {result['warm_ms_max']:.2f}; {a.repeats} repeats); cold first call incl. "
          f"{gpus.size} plan() calls {cold_ms:.0f} ms; goal < {GOAL_MS:g} ms: "
          f"{'met' if result['meets_goal'] else 'NOT met'}")
    bench.write_json(out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
