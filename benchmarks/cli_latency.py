"""Wall time of each ``python -m studykit`` command a user types often: ``--help`` of every command, and one
``predict`` / ``advise`` question on a built-in model with the committed calibration.

    python benchmarks/cli_latency.py                      # the table (Markdown) on stdout
    python benchmarks/cli_latency.py --out benchmarks/cli_latency.md
    python benchmarks/cli_latency.py --repeats 9 --only predict advise
    python benchmarks/cli_latency.py --compare /tmp/before   # another copy of the kit beside (git archive REV)

Each command runs in a fresh interpreter (``subprocess``), as a user's shell runs it, ``--repeats`` times after
one untimed run (which fills the disk caches of ``reports/cache/``, as a user's first call does); the table gives
the median, min and max wall time, whether the command imported torch (``-X importtime``, one extra run) and the
machine (CPU, cores, load average, Python, torch, git commit). ``--compare DIR`` adds the median of the same
command run from another copy of the kit (its folder first on ``sys.path``), timed in turn with this one so
that both see the same load. Goal: every median under :data:`GOAL_S`.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from studykit.cli import COMMANDS  # noqa: E402

GOAL_S = 2.0

#: the questions timed beside every command's --help (built-in models, the committed default calibration)
QUESTIONS = {
    "predict": ["predict", "--model", "resnet50", "--gpus", "8", "64", "--bandwidth-gbps", "1", "10", "25",
                "--compressor", "powersgd", "--param", "rank=4"],
    "advise": ["advise", "--model", "resnet50", "--gpus", "8", "--bandwidth-gbps", "10"],
}


def cases(only: list[str] | None) -> list[tuple[str, list[str]]]:
    """(label, argv) of every timed command: each command's ``--help``, then the questions."""
    out = [(f"{name} --help", [name, "--help"]) for name in COMMANDS]
    out += [(" ".join(argv), argv) for argv in QUESTIONS.values()]
    out.insert(0, ("--help", ["--help"]))
    if only:
        out = [(label, argv) for label, argv in out if argv[0] in only or label in only]
    return out


def run_once(argv: list[str], importtime: bool = False, root: Path = ROOT) -> tuple[float, subprocess.CompletedProcess]:
    """Wall time (s) of ``python -m studykit ARGV`` in a fresh interpreter started in ``root`` (whose
    ``studykit`` it imports), and the finished process."""
    cmd = [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "studykit", *argv]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
    return time.perf_counter() - t0, done


def imports_torch(argv: list[str]) -> bool:
    """Whether the command imports torch (``python -X importtime`` lists every module it loads)."""
    _, done = run_once(argv, importtime=True)
    return any(line.split("|")[-1].strip() == "torch" for line in done.stderr.splitlines())


def machine() -> str:
    """One line on where the table was made (the kit's one provenance builder, without importing torch here)."""
    from studykit.measure.envinfo import summary

    return summary()


def table(only: list[str] | None, repeats: int, compare: Path | None = None) -> str:
    """The Markdown table: one row per command (and the median from ``compare``, another copy of the kit)."""
    other = "" if compare is None else f" {compare.name}: median s |"
    lines = [f"| command | median s | min s | max s | imports torch | exit |{other}",
             "|---|---:|---:|---:|---|---:|" + ("---:|" if compare else "")]
    for label, argv in cases(only):
        _, first = run_once(argv)  # untimed: fills the disk caches as a user's first call does
        other_rc = None if compare is None else run_once(argv, root=compare)[1].returncode
        times, before = [], []
        for _ in range(repeats):  # in turn, so that both copies see the same load
            times.append(run_once(argv)[0])
            if compare is not None:
                before.append(run_once(argv, root=compare)[0])
        torch_ = imports_torch(argv)
        flag = "" if statistics.median(times) < GOAL_S else " (over goal)"
        lines.append(f"| `python -m studykit {label}` | {statistics.median(times):.2f}{flag} | {min(times):.2f} | "
                     f"{max(times):.2f} | {'yes' if torch_ else 'no'} | {first.returncode} |"
                     + ("" if compare is None else f" {statistics.median(before):.2f} |" if other_rc == 0
                        else f" - (exit {other_rc}) |"))
        print(lines[-1], file=sys.stderr, flush=True)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per command (default 5; the median is shown)")
    ap.add_argument("--only", nargs="+", default=None, metavar="COMMAND",
                    help="time only these commands (names as in python -m studykit --help)")
    ap.add_argument("--out", default=None, help="write the report (Markdown) here as well as to stdout")
    ap.add_argument("--compare", default=None, metavar="DIR",
                    help="also time each command from this copy of the kit (e.g. git archive REV | tar -x -C DIR)")
    a = ap.parse_args(argv)
    if a.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {a.repeats}")
    unknown = sorted(set(a.only or []) - set(COMMANDS) - {"--help"})
    if unknown:
        ap.error(f"--only: unknown command(s) {unknown}; valid: {', '.join(COMMANDS)}")
    compare = None if a.compare is None else Path(a.compare).resolve()
    if compare is not None and not (compare / "studykit" / "cli.py").is_file():
        ap.error(f"--compare: {compare} holds no copy of the kit (no studykit/cli.py)")
    body = table(a.only, a.repeats, compare)
    report = "\n".join([
        "# How long does each `python -m studykit` command take?", "",
        f"Wall time of a fresh `python -m studykit ...` (subprocess), median of {a.repeats} runs after one untimed "
        f"run; goal: under {GOAL_S:g} s. Regenerate: `python benchmarks/cli_latency.py --out "
        "benchmarks/cli_latency.md`.", "",
        body, "",
        *([] if compare is None else [f"`{compare.name}`: the median of the same command run from {compare} (another "
                                      "copy of the kit), timed in turn with this checkout's.", ""]),
        f"Machine: {machine()}; load average at the end {os.getloadavg()[0]:.2f} (the machine is shared: "
        "other work running beside it lengthens every row).", ""])
    print(report)
    if a.out:
        Path(a.out).write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
