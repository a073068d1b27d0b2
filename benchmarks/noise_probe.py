"""Where does a shared machine's slow spell come from: the GPU or the host? (CUDA only)

    python benchmarks/noise_probe.py --out DIR [--rounds 300]        # on the GPU machine
    python benchmarks/noise_probe.py --report DIR [--write]           # the table of DIR/noise_probe.json

Why: DDP iterations timed on a lent GPU machine sometimes run 10-30 % slower for stretches of a second or more,
in stretches that fall on whichever configuration is being timed. Whether a hook is level with post-backward
compression (within 2 %) cannot be read through such spells. This probe asks which side of the machine they come
from.

Three calls are timed round by round, a round of each per iteration
(:func:`studykit.measure.timing.time_interleaved`, every other round reversed):

* ``gpu``: bf16 matmuls of 8192 x 8192 (about 10 ms of device work; the host waits on the device);
* ``host``: a fixed Python loop (no GPU work at all);
* ``train``: one ResNet-50 training step at batch 64 (forward, backward, SGD), as the DDP runs time it.

Meanwhile ``nvidia-smi`` samples the SM clock, power and temperature every 50 ms and a thread samples the
machine's CPU time from ``/proc/stat`` (busy and steal fractions) every 50 ms.

A spell that slows ``train`` and ``gpu`` together points at the device (its clock, or another tenant on it); one
that slows ``train`` and ``host`` together points at the host CPUs (steal: another VM on the same cores). The
report gives, per call, the median and the spread of its times, the share of slow rounds (over 1.1x its median)
and how often a slow ``train`` round is a slow round of the other two; and, for ``train``'s slow rounds against
the rest, the mean SM clock and CPU steal sampled while they ran.

Writes ``DIR/noise_probe.json`` (the times, their host start times, the samples and provenance) and prints the
table; ``--report DIR --write`` writes it to ``DIR/noise_probe.md``. ``--quiet-below 0.1`` also judges the host and
exits 3 where the host loop's interquartile range is not below 10 % of its median, so that a script can skip its
timed runs on a noisy host (``python benchmarks/noise_probe.py --out DIR --quiet-below 0.1 && torchrun ...``;
``benchmarks/when_quiet.py`` probes and runs in turn until a time budget is spent).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CALLS = ("gpu", "host", "train")
SLOW = 1.1  # a round is slow for a call when it took over this many times the call's median
SAMPLE_S = 0.05


def _cpu_sampler(stop: threading.Event, out: list) -> None:
    """[unix time, busy fraction, steal fraction] of all CPUs over each ``SAMPLE_S`` (``/proc/stat``)."""
    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + (v[4] if len(v) > 4 else 0)
        steal = v[7] if len(v) > 7 else 0
        return sum(v[:8]), idle, steal

    prev = read()
    while not stop.wait(SAMPLE_S):
        cur = read()
        total = cur[0] - prev[0]
        if total > 0:
            out.append([time.time(), 1 - (cur[1] - prev[1]) / total, (cur[2] - prev[2]) / total])
        prev = cur


def _smi_rows(text: str) -> list:
    """nvidia-smi's csv lines (timestamp, SM MHz, memory MHz, power W, temperature C) -> [unix time, ...]."""
    from datetime import datetime

    rows = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            continue
        try:
            t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()  # the machine's local time
            rows.append([t] + [float(p) for p in parts[1:]])
        except ValueError:
            continue
    return rows


def measure(out_dir: Path, rounds: int, warmup: int) -> Path:
    import torch

    from studykit import models as M
    from studykit.measure.records import provenance
    from studykit.measure.timing import time_interleaved

    device = torch.device("cuda:0")
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    torch.manual_seed(0)
    net = M.build("resnet50").to(device).train()
    batch = M.example_batch("resnet50", 64, device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    starts = {c: [] for c in CALLS}

    def gpu():
        starts["gpu"].append(time.time())
        for _ in range(10):
            torch.mm(a, b)

    def host():
        starts["host"].append(time.time())
        x = 0
        for i in range(200_000):
            x += i * i
        return x

    def train():
        starts["train"].append(time.time())
        opt.zero_grad(set_to_none=True)
        M.loss("resnet50", net, batch).backward()
        opt.step()

    cpu: list = []
    stop = threading.Event()
    sampler = threading.Thread(target=_cpu_sampler, args=(stop, cpu), daemon=True)
    smi = subprocess.Popen(["nvidia-smi", "-i", "0", "--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,"
                            "temperature.gpu", "--format=csv,noheader,nounits", "-lms", str(int(SAMPLE_S * 1e3))],
                           stdout=subprocess.PIPE, text=True)
    sampler.start()
    try:
        timings = time_interleaved([gpu, host, train], n_iter=rounds, n_warmup=warmup, device=device)
    finally:
        stop.set()
        sampler.join()
        smi.terminate()
        smi_text = smi.communicate(timeout=10)[0]
    data = {"provenance": provenance(device, rounds=rounds, warmup=warmup, slow=SLOW, sample_s=SAMPLE_S),
            "calls": {c: {"times_ms": t.times_ms, "start_s": starts[c][warmup:]} for c, t in zip(CALLS, timings)},
            "smi": _smi_rows(smi_text), "cpu": cpu}
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "noise_probe.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data) + "\n")
    tmp.replace(path)
    return path


def _mean_during(samples: list, spans: list, col: int, before: float, after: float):
    """Mean of column ``col`` of the samples whose window (``before`` s before its time to ``after`` s after it)
    overlaps any of ``spans`` ([start, end] unix times): a CPU sample covers the interval that ends at it, an
    nvidia-smi sample stands for the half interval on either side."""
    vals = [s[col] for s in samples for a, b in spans if s[0] - before <= b and s[0] + after >= a]
    return statistics.fmean(vals) if vals else None


def report(records, verbose: bool = False) -> str:
    """The tables (markdown) of one probe or several: the data ``measure`` wrote, or its file(s) (``data regen``'s
    report generator passes a campaign's list), one section per probe in order; printed with ``verbose``."""
    if isinstance(records, dict):
        items = [records]
    else:
        items = [json.loads(Path(f).read_text()) for f in ([records] if isinstance(records, (str, Path)) else records)]
    text = "\n".join(table(d) for d in items)
    if verbose:
        print(text)
    return text


def table(data: dict) -> str:
    """One probe's tables (markdown) from the data ``measure`` wrote."""
    from studykit.measure.timing import quartiles

    calls = data["calls"]
    n = min(len(calls[c]["times_ms"]) for c in CALLS)
    med = {c: statistics.median(calls[c]["times_ms"][:n]) for c in CALLS}
    slow = {c: [t > SLOW * med[c] for t in calls[c]["times_ms"][:n]] for c in CALLS}
    prov = data["provenance"]
    lines = [f"## Where the slow spells come from: {prov.get('gpu')}, {n} rounds", "",
             f"{prov.get('gpu')}, driver {prov.get('driver')}, torch {prov.get('torch')}, kit commit "
             f"{prov.get('git_commit')}, {prov.get('timestamp')}. One round times each call once "
             f"(`time_interleaved`); a round is slow for a call when it took over {SLOW}x the call's median. "
             "Generated by `python benchmarks/noise_probe.py --report FOLDER --write`.", "",
             "| call | median ms | q25-q75 ms | max ms | slow rounds | slow in the rounds where train is slow |",
             "|---|---:|---:|---:|---:|---:|"]
    n_train = sum(slow["train"])
    for c in CALLS:
        ts = calls[c]["times_ms"][:n]
        q25, _, q75 = quartiles(ts)
        both = sum(s and t for s, t in zip(slow[c], slow["train"]))
        lines.append(f"| {c} | {med[c]:.2f} | {q25:.2f}-{q75:.2f} | {max(ts):.2f} | {sum(slow[c])} of {n} | "
                     + (f"{both} of {n_train} |" if n_train else "- |"))
    lines.append("")
    spans = {k: [] for k in (True, False)}
    for t0, ms, s in zip(calls["train"]["start_s"], calls["train"]["times_ms"][:n], slow["train"]):
        spans[s].append((t0, t0 + ms / 1e3))
    lines += ["| train rounds | rounds | mean SM clock MHz | mean power W | mean CPU busy | mean CPU steal |",
              "|---|---:|---:|---:|---:|---:|"]

    def fmt(x, spec):
        return "-" if x is None else format(x, spec)

    for s, name in ((False, "not slow"), (True, "slow")):
        half = SAMPLE_S / 2
        sm, pw = (_mean_during(data["smi"], spans[s], col, half, half) for col in (1, 3))
        busy, steal = (_mean_during(data["cpu"], spans[s], col, SAMPLE_S, 0.0) for col in (1, 2))
        lines.append(f"| {name} | {len(spans[s])} | {fmt(sm, '.0f')} | {fmt(pw, '.0f')} | "
                     f"{fmt(busy and busy * 100, '.1f')} % | {fmt(steal and steal * 100, '.2f')} % |")
    return "\n".join(lines) + "\n"


def host_spread(data: dict) -> float:
    """The host loop's interquartile range over its median: how unsteady the host was during a probe. On the kit's
    lent H200s (``data/measurements/noise_probe_h200``) 0.01-0.02 on a quiet machine, 0.07 right before a quiet
    DDP round, and 0.14-0.33 beside noisy ones."""
    q = statistics.quantiles(data["calls"]["host"]["times_ms"], n=4)
    return (q[2] - q[0]) / q[1]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="measure (CUDA) and write OUT/noise_probe.json")
    ap.add_argument("--report", type=Path, metavar="DIR", help="print the table of DIR/noise_probe.json")
    ap.add_argument("--write", action="store_true", help="with --report: also write DIR/noise_probe.md")
    ap.add_argument("--rounds", type=int, default=300, help="timed rounds (default 300)")
    ap.add_argument("--warmup", type=int, default=10, help="warm-up rounds (default 10)")
    ap.add_argument("--quiet-below", type=float, default=None, metavar="SPREAD",
                    help="also judge the host: exit 3 unless the host loop's interquartile range over its median is "
                         "below SPREAD (e.g. 0.1), so that a script times nothing on a noisy host")
    args = ap.parse_args(argv)
    if args.quiet_below is not None and not 0 < args.quiet_below < 1:
        ap.error(f"--quiet-below must be a fraction between 0 and 1 (0.1: 10 %), got {args.quiet_below}")
    if (args.out is None) == (args.report is None):
        ap.error("give exactly one of --out DIR (measure) or --report DIR (table)")
    if args.rounds < 10 or args.warmup < 1:
        ap.error(f"--rounds must be >= 10 and --warmup >= 1, got {args.rounds} and {args.warmup}")
    folder = args.report
    if args.out is not None:
        import torch

        if not torch.cuda.is_available():
            ap.error("measuring needs a CUDA device (use --report DIR on this machine)")
        measure(args.out, args.rounds, args.warmup)
        folder = args.out
    src = folder / "noise_probe.json"
    if not src.is_file():
        ap.error(f"{src} not found (write it with --out {folder} on a GPU machine)")
    text = report(src, verbose=True)
    if args.write:
        (folder / "noise_probe.md").write_text(text)
    if args.quiet_below is not None:
        spread = host_spread(json.loads(src.read_text()))
        quiet = spread < args.quiet_below
        print(f"the host loop's spread: {100 * spread:.1f} % (quiet below {100 * args.quiet_below:g} %): "
              f"{'quiet' if quiet else 'noisy'}")
        return 0 if quiet else 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
