"""How long the explorer takes to show its first figure and table: the notebook's code cell (imports, the
calibration, ``studykit.lessons.explore.app`` with the notebook's parameters) in a fresh interpreter.

    python benchmarks/explorer_latency.py                  # the report (Markdown) on stdout
    python benchmarks/explorer_latency.py --out benchmarks/explorer_latency.md
    python benchmarks/explorer_latency.py --repeats 9

Each run is a fresh ``python`` (``subprocess``), as a kernel starting the notebook is, timed ``--repeats`` times
in two conditions: **warm caches** (the plan and compressor-metadata caches of ``reports/cache/`` filled by one
untimed run, as after any earlier use of the kit) and **cold caches** (``STUDYKIT_CACHE`` set to a new empty
folder for every run, as on a fresh checkout or after a compressor's source changed). The child reports its
phases (imports, calibration, ``app``: the figure, the ranking and the sliders) and whether it imported torch;
the report gives the median, min and max of each, the time from starting the interpreter to the figure and
table being there (``first render``: what a reader waits for), the wall time of the whole process (which adds
the interpreter's exit) and the machine. A run that shows no figure fails the benchmark. Goal: every median
first render under :data:`GOAL_S`. Kernel start-up and the browser's own rendering are not in these times.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "explorer.ipynb"
GOAL_S = 5.0
PHASES = ("imports_s", "calibration_s", "app_s")

#: the notebook's code cell, instrumented: prints the phases as JSON on its last line
CHILD = """
import json, sys, time
t0 = time.perf_counter()
from studykit import paths
from studykit.lessons import explore
from studykit.perfmodel import Calibration
t1 = time.perf_counter()
p = json.loads(sys.argv[1])
cal = Calibration.load(paths.ROOT / p["calibration_path"])
t2 = time.perf_counter()
shown = explore.app(cal, p["model"], p["batch_size"], p["bandwidth_gbps"], p["world_size"], p["compressor"],
                    p["param_value"], interactive=p["interactive"])
view = shown.result if p["interactive"] else shown
t3 = time.perf_counter()
ok = view is not None and view.png.startswith(b"\\x89PNG") and view.table is not None and len(view.table) > 0
print(json.dumps({"imports_s": t1 - t0, "calibration_s": t2 - t1, "app_s": t3 - t2, "shown": bool(ok),
                  "torch": "torch" in sys.modules, "done_at": time.time()}))
"""


def parameters() -> dict:
    """The explorer's parameters cell, as values (the benchmark follows the notebook's defaults)."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    (cell,) = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    return {n.target.id: ast.literal_eval(n.value) for n in ast.parse("".join(cell["source"])).body
            if isinstance(n, ast.AnnAssign)}


def run_once(params: dict, cache: str | None) -> dict:
    """One fresh interpreter running the notebook's cell: its phases, whether it showed the figure and table,
    whether it imported torch, the time from its start to the figure and table (``first_render_s``) and its wall
    time (``wall_s``). ``cache``: ``STUDYKIT_CACHE`` (None: the kit's)."""
    env = {k: v for k, v in os.environ.items() if k != "STUDYKIT_CACHE"}
    env["MPLBACKEND"] = "Agg"  # a kernel uses the inline backend; both render the figure to PNG here
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if cache is not None:
        env["STUDYKIT_CACHE"] = cache
    started_at, t0 = time.time(), time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(params)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"the explorer's cell failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    if not out["shown"]:
        raise SystemExit(f"the explorer showed no figure and table:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return {**out, "first_render_s": out["done_at"] - started_at, "wall_s": wall}


def condition(params: dict, repeats: int, cold: bool) -> list[dict]:
    """``repeats`` timed runs: each with a new empty cache folder (``cold``), or after one untimed run that
    fills the kit's caches."""
    if not cold:
        run_once(params, None)
        return [run_once(params, None) for _ in range(repeats)]
    runs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="studykit-cache-") as empty:
            runs.append(run_once(params, empty))
    return runs


def row(label: str, runs: list[dict]) -> str:
    """One table row: median (min-max) of every phase and of the wall time."""
    def cell(key):
        v = [r[key] for r in runs]
        return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"

    first = statistics.median(r["first_render_s"] for r in runs)
    torch_ = {r["torch"] for r in runs}
    return (f"| {label} | {cell('first_render_s')}{'' if first < GOAL_S else ' (over goal)'} | "
            + " | ".join(cell(k) for k in PHASES) + f" | {cell('wall_s')}"
            + f" | {'yes' if torch_ == {True} else 'no' if torch_ == {False} else 'some runs'} |")


def machine() -> str:
    """One line on where the report was made (the kit's one provenance builder)."""
    sys.path.insert(0, str(ROOT))
    from studykit.measure.envinfo import summary

    return summary()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per condition (default 5; the median is shown)")
    ap.add_argument("--out", default=None, help="write the report (Markdown) here as well as to stdout")
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {a.repeats}")
    params = parameters()
    load_start = os.getloadavg()[0]
    lines = ["| caches | first render s | imports s | calibration s | app s (figure, table, sliders) | process wall s "
             "| imports torch |", "|---|---:|---:|---:|---:|---:|---|"]
    for label, cold in (("warm (filled by an earlier run)", False), ("cold (empty cache folder)", True)):
        lines.append(row(label, condition(params, a.repeats, cold)))
        print(lines[-1], file=sys.stderr, flush=True)
    setting = ", ".join(f"{k}={v!r}" for k, v in params.items())
    report = "\n".join([
        "# How long does the explorer take to show its figure and table?", "",
        f"The explorer notebook's code cell (imports, `Calibration.load`, `explore.app`: the figure, the ranking "
        f"table and the sliders) in a fresh `python`, median (min-max) of {a.repeats} runs per condition. First render: "
        f"from starting the interpreter to the figure and table being drawn (goal: under {GOAL_S:g} s); process "
        "wall adds the interpreter's exit. Kernel start-up and the browser's rendering are not included. "
        "Regenerate: `python benchmarks/explorer_latency.py --out benchmarks/explorer_latency.md`.", "",
        *lines, "",
        f"Parameters (the notebook's): {setting}.", "",
        f"Machine: {machine()}; load average {load_start:.2f} at the start, {os.getloadavg()[0]:.2f} at the end (the "
        "machine is shared: other work running beside it lengthens every row).", ""])
    print(report)
    if a.out:
        Path(a.out).write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
