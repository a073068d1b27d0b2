"""Where a DDP iteration's time goes, from ``torch.profiler`` traces set side by side (``ddp --trace-dir`` writes
one per configuration: rank 0, 3 iterations): the compute stream's busy and idle time, the hook's side streams
(the codec) and how much of them ran while the compute stream was busy, NCCL's streams, and the busiest host
threads with their kernel launches (:mod:`studykit.measure.traces`).

    python benchmarks/hook_trace.py TRACES/bert_base_b16_post_powersgd.json.gz TRACES/bert_base_b16_hook_powersgd.json.gz
    python benchmarks/hook_trace.py TRACE ... --out reports/hook_trace.md

A trace comes from e.g. ``torchrun --nproc-per-node 2 -m studykit ddp --models bert_base --modes post hook
--compressors powersgd:rank=4 --hook-runner thread graph --trace-dir TRACES``.
"""
import argparse
import sys
from pathlib import Path

from studykit.measure.traces import summarize_trace, traces_markdown


def label(path: Path) -> str:
    """The configuration part of a trace's file name (``bert_base_b16_hook_powersgd_graph``)."""
    name = path.name
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    return name


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", type=Path, help="trace files (.json.gz or .json)")
    ap.add_argument("--iterations", type=int, default=3, help="iterations each trace holds (ddp --trace-dir: 3)")
    ap.add_argument("--out", type=Path, default=None, help="also write the table to this Markdown file")
    args = ap.parse_args(argv)
    if args.iterations < 1:
        ap.error(f"--iterations must be >= 1, got {args.iterations}")
    summaries = {}
    for path in args.traces:
        try:
            summaries[label(path)] = summarize_trace(path, args.iterations)
        except (OSError, ValueError) as exc:
            ap.error(str(exc))
    text = traces_markdown(summaries)
    print(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
