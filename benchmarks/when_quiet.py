"""Time a command only where the host is quiet: probe the host, run one round where it is quiet, repeat.

    python benchmarks/when_quiet.py --out DIR --budget-s 540 --needs-s 80 [--rounds N] -- \\
        torchrun --standalone --nproc-per-node 1 -m studykit ddp ... --out DIR/ddp_r{round}.jsonl

Why: on the lent GPU machines the host's speed changes within minutes, and a DDP hook that does host work per
bucket is timed slower through a slow spell (`data/measurements/noise_probe_h200/`). Each try runs
``benchmarks/noise_probe.py --quiet-below SPREAD`` (its exit status: 0 quiet, 3 noisy) and, where the host was
quiet, the command once with ``{round}`` replaced by the round's number. It tries again until ``--budget-s`` is
spent or ``--rounds`` rounds have run. ``--needs-s`` is what a probe and a round take together: no probe starts
with less than that left, so every quiet probe is followed by its round.

Writes ``DIR/probe_K.json`` (each probe's ``noise_probe.json``, K from ``--first-probe`` on) and
``DIR/when_quiet.log`` (each try: when, the probe's verdict line, the round it let through and that round's exit
status), and prints the same lines. Stops with an error where a probe fails (no CUDA device, say) or a round exits
non-zero; what ran before stays. Exits 0 where at least one round ran, 3 where none did.
"""
from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PLACEHOLDER = "{round}"


def probe(out: Path, rounds: int, quiet_below: float) -> tuple[int, str]:
    """One ``noise_probe.py --out out --quiet-below`` run: its exit status and its output."""
    res = subprocess.run([sys.executable, str(HERE / "noise_probe.py"), "--out", str(out), "--rounds", str(rounds),
                          "--quiet-below", str(quiet_below)], capture_output=True, text=True)
    return res.returncode, res.stdout + res.stderr


def run_round(command: list[str]) -> int:
    """The command's exit status (its output goes where this script's goes)."""
    sys.stdout.flush()
    return subprocess.run(command).returncode


def gate(command: list[str], out: Path, budget_s: float, needs_s: float, *, quiet_below: float = 0.1,
         probe_rounds: int = 200, first_probe: int = 1, first_round: int = 1, max_rounds: int | None = None,
         probe=probe, run=run_round, clock=time.monotonic) -> list[int]:
    """Probe and run until the budget is spent or ``max_rounds`` rounds have run; the rounds that ran.

    ``probe(dir, rounds, quiet_below) -> (status, output)`` and ``run(command) -> status`` are the two calls (the
    tests pass their own); a probe's ``noise_probe.json`` is moved to ``out/probe_K.json`` (beside the rounds' files,
    one campaign folder, as ``data/measurements`` keeps them)."""
    start = clock()
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "when_quiet.log"
    k, r, ran = first_probe, first_round, []

    def log(line: str) -> None:
        print(line, flush=True)
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    while budget_s - (clock() - start) >= needs_s and (max_rounds is None or len(ran) < max_rounds):
        target = out / f"probe_{k}.json"
        if target.exists():
            raise FileExistsError(f"{target} exists; give --first-probe past the probes already in {out}")
        work = out / f".probe_{k}"
        log(f"== probe {k} at {clock() - start:.0f} s")
        status, text = probe(work, probe_rounds, quiet_below)
        verdict = next((x for x in reversed(text.splitlines()) if x.startswith("the host loop's spread")), None)
        if status not in (0, 3) or verdict is None or not (work / "noise_probe.json").is_file():
            shutil.rmtree(work, ignore_errors=True)
            log(f"probe {k} failed (exit status {status}):\n" + "\n".join(text.strip().splitlines()[-5:]))
            raise RuntimeError(f"probe {k} failed (exit status {status}); {len(ran)} rounds ran before it")
        (work / "noise_probe.json").replace(target)
        shutil.rmtree(work, ignore_errors=True)
        log(verdict)
        k += 1
        if status == 3:
            continue
        round_cmd = [a.replace(PLACEHOLDER, str(r)) for a in command]
        log(f"== round {r} at {clock() - start:.0f} s: {shlex.join(round_cmd)}")
        rc = run(round_cmd)
        if rc != 0:
            log(f"round {r} exited with status {rc}")
            raise RuntimeError(f"round {r} exited with status {rc}; {len(ran)} rounds ran before it")
        ran.append(r)
        r += 1
    log(f"== {len(ran)} rounds ran ({', '.join(map(str, ran)) or 'none'}) and {k - first_probe} probes in "
        f"{clock() - start:.0f} s")
    return ran


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 usage="%(prog)s --out DIR --budget-s S --needs-s S [options] -- COMMAND ...")
    ap.add_argument("--out", type=Path, required=True, help="where the probes (probe_K.json) and when_quiet.log go")
    ap.add_argument("--budget-s", type=float, required=True, help="seconds to keep trying")
    ap.add_argument("--needs-s", type=float, required=True,
                    help="seconds a probe and a round take together: no probe starts with less left")
    ap.add_argument("--rounds", type=int, default=None, help="stop after this many rounds (default: the budget)")
    ap.add_argument("--quiet-below", type=float, default=0.1, metavar="SPREAD",
                    help="the probe's verdict: quiet where the host loop's interquartile range over its median is "
                         "below SPREAD (default 0.1)")
    ap.add_argument("--probe-rounds", type=int, default=200, help="timed rounds of each probe (default 200)")
    ap.add_argument("--first-probe", type=int, default=1, help="number of the first probe (default 1)")
    ap.add_argument("--first-round", type=int, default=1, help="number of the first round (default 1)")
    if "--" not in argv:
        ap.error("give the command to time after --, with {round} where its output file is named")
    cut = argv.index("--")
    args, command = ap.parse_args(argv[:cut]), argv[cut + 1:]
    if not command:
        ap.error("no command after --")
    if not any(PLACEHOLDER in a for a in command):
        ap.error("the command must name its output with {round} (e.g. --out DIR/ddp_r{round}.jsonl), so that "
                 "rounds do not overwrite each other")
    if not 0 < args.quiet_below < 1:
        ap.error(f"--quiet-below must be a fraction between 0 and 1 (0.1: 10 %), got {args.quiet_below}")
    if args.needs_s <= 0 or args.budget_s < args.needs_s:
        ap.error(f"--needs-s must be above 0 and --budget-s at least --needs-s, got {args.needs_s:g} and "
                 f"{args.budget_s:g}")
    if args.rounds is not None and args.rounds < 1:
        ap.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.probe_rounds < 10:
        ap.error(f"--probe-rounds must be at least 10, got {args.probe_rounds}")
    try:
        ran = gate(command, args.out, args.budget_s, args.needs_s, quiet_below=args.quiet_below,
                   probe_rounds=args.probe_rounds, first_probe=args.first_probe, first_round=args.first_round,
                   max_rounds=args.rounds)
    except (RuntimeError, FileExistsError) as exc:
        print(f"when_quiet: {exc}", file=sys.stderr)
        return 1
    return 0 if ran else 3


if __name__ == "__main__":
    raise SystemExit(main())
