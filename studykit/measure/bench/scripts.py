"""What the benchmark scripts (``benchmarks/*.py``) share with ``bench``: the repetition-policy options,
the checked output options (a ``.jsonl`` of records and its ``.md`` tables, or one JSON result), their start,
and reading their records and writing their reports."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Optional

import torch

from studykit import argtypes, paths
from studykit.measure.bench.calls import BUDGET_S, RepPolicy
from studykit.measure.records import RecordError, RecordWriter, load_records
from studykit.measure.timing import L2_FLUSH_BYTES, MIN_REPS, MIN_TIME_S


def add_policy_args(ap: argparse.ArgumentParser) -> None:
    """The repetition-policy options (:class:`RepPolicy`), shared by ``bench`` and ``benchmarks/codec_repeat.py``."""
    ap.add_argument("--min-reps", "--iters", dest="min_reps", type=argtypes.positive_int, default=MIN_REPS,
                    help=f"at least this many timed repetitions per codec (default {MIN_REPS}; --iters is the old name)")
    ap.add_argument("--min-time-s", type=argtypes.nonneg_float, default=MIN_TIME_S,
                    help=f"and at least this many seconds of timed calls, whichever is more (default {MIN_TIME_S:g})")
    ap.add_argument("--budget-s", type=argtypes.positive_float, default=BUDGET_S,
                    help=f"at most this many seconds of timed calls per codec configuration (default {BUDGET_S:g}; "
                         "a record whose policy it cut says reps_capped)")
    ap.add_argument("--warmup", type=argtypes.positive_int, default=10,
                    help="untimed calls before timing, after two settling calls (default 10)")
    ap.add_argument("--l2-flush-mib", type=argtypes.nonneg_float, default=None,
                    help=f"MiB written before every repetition, untimed (default: {L2_FLUSH_BYTES // 2**20} on CUDA, "
                         "as triton.testing.do_bench; 0 on CPU; more than the last-level cache, e.g. 64, flushes it there)")
    ap.add_argument("--host-ahead", action="store_true",
                    help="CUDA only: time each repetition's device work with the host ahead of the GPU (a GPU sleep "
                         "before it lets the host queue the whole call), not the host's launch gaps; records say "
                         "timer cuda_events_host_ahead")
    ap.add_argument("--graph", action="store_true",
                    help="CUDA only: capture each codec call once as a CUDA graph and time its replays, host side "
                         "included, as the DDP hook's graph runner pays them (timer cuda_graph); a call that cannot "
                         "be replayed (it waits for the GPU, draws host-seeded random numbers or replaces its state) "
                         "is timed eagerly with plain events, as that runner runs it (timer cuda_events_eager)")


def policy_from_args(ap: argparse.ArgumentParser, args) -> RepPolicy:
    """The :class:`RepPolicy` of parsed :func:`add_policy_args` options (a bad combination: ``ap.error``)."""
    try:
        return RepPolicy(min_reps=args.min_reps, min_time_s=args.min_time_s, budget_s=args.budget_s,
                         n_warmup=args.warmup, host_ahead=bool(getattr(args, "host_ahead", False)),
                         graph=bool(getattr(args, "graph", False)),
                         flush_bytes=None if args.l2_flush_mib is None else int(args.l2_flush_mib * 2**20))
    except ValueError as exc:
        ap.error(str(exc).replace("RepPolicy: ", "").replace("budget_s", "--budget-s")
                 .replace("min_time_s", "--min-time-s"))

def add_output_args(ap: argparse.ArgumentParser, default_name: str, what: str) -> None:
    """The record-file options of a benchmark script that writes one ``.jsonl`` and its generated ``.md`` beside
    it (``benchmarks/codec_repeat.py``, ``benchmarks/pack_fields.py``): ``--out``, the overwrite flags,
    ``--report-only``, ``--quiet``. ``what``: what the ``.md`` holds ("tables", "table")."""
    ap.add_argument("--out", default=str(paths.REPORTS / "benchmarks" / default_name),
                    help=f"records, JSON Lines (default reports/benchmarks/{default_name}); the {what} go(es) beside "
                         f"it as .md; inside the committed data/ only with {paths.OVERWRITE_FLAG}")
    ap.add_argument(paths.OVERWRITE_FLAG, action="store_true", help="allow --out inside the committed data/")
    ap.add_argument("--overwrite", action="store_true", help="start --out afresh (else: resume)")
    ap.add_argument("--report-only", action="store_true", help=f"only print and write the {what} of --out")
    ap.add_argument("--quiet", action="store_true", help=f"no per-configuration lines (the {what} still printed)")


def add_json_output_args(ap: argparse.ArgumentParser, default_name: str) -> None:
    """The options of a benchmark script that writes one JSON result (``benchmarks/advise_sweep.py``,
    ``benchmarks/perfmodel_sweep.py``): ``--out``, ``--no-write`` and the overwrite flag."""
    ap.add_argument("--out", default=str(paths.REPORTS / "benchmarks" / default_name),
                    help=f"the result, JSON (default reports/benchmarks/{default_name}); inside the committed data/ "
                         f"only with {paths.OVERWRITE_FLAG}")
    ap.add_argument(paths.OVERWRITE_FLAG, action="store_true", help="allow --out inside the committed data/")
    ap.add_argument("--no-write", action="store_true", help="print only")


def json_output_from_args(ap: argparse.ArgumentParser, args) -> Optional[Path]:
    """The checked ``--out`` of :func:`add_json_output_args`, before anything is timed (refusals: ``ap.error``);
    None with ``--no-write``."""
    if args.no_write:
        return None
    try:
        return paths.check_writable_output(args.out, args.overwrite_committed, what="--out", file=True)
    except paths.OutputError as exc:
        ap.error(str(exc))


def write_json(out: Optional[Path], result: dict) -> None:
    """``result`` into ``out`` (:func:`json_output_from_args`; nothing when None), said on stdout."""
    if out is None:
        return
    import json

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


def output_from_args(ap: argparse.ArgumentParser, args, report: Callable[[Path], object]) -> Optional[Path]:
    """The checked ``--out`` of :func:`add_output_args` (refusals: ``ap.error``), ready to write (``--overwrite``
    applied); None when ``--report-only`` has done its job (``report(out)`` ran)."""
    try:
        out = paths.check_writable_output(args.out, args.overwrite_committed, what="--out", file=True)
        paths.check_writable_output(out.with_suffix(".md"), args.overwrite_committed, what="--out", file=True)
    except paths.OutputError as exc:
        ap.error(str(exc))
    if out.suffix != ".jsonl":
        ap.error(f"--out {args.out}: give a .jsonl file (the generated tables are written beside it as .md)")
    if args.report_only:
        if not out.exists():
            ap.error(f"--report-only: no records at {out}")
        try:
            report(out)
        except RecordError as exc:
            ap.error(str(exc))
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.overwrite:
        out.unlink(missing_ok=True)
    return out


def start(ap: argparse.ArgumentParser, argv: Optional[list[str]], report: Callable[[Path], object]):
    """A benchmark script's start: ``(args, policy, out)`` from its parser (:func:`add_policy_args`,
    :func:`add_output_args`); ``out`` None when ``--report-only`` has done its job."""
    args = ap.parse_args(argv)
    policy = policy_from_args(ap, args)
    return args, policy, output_from_args(ap, args, report)


def add_candidates_args(ap: argparse.ArgumentParser, report_only: bool = False) -> None:
    """The options of a script that times a fast path's candidates side by side on one GPU
    (``benchmarks/thc_signed.py``, ``benchmarks/topk_select.py``): the repetition policy (:func:`add_policy_args`)
    and ``--out`` (records appended; inside the committed data/ only with the overwrite flag); with ``report_only``
    also ``--report-only`` (:func:`candidates_report_only`)."""
    add_policy_args(ap)
    if report_only:
        ap.add_argument("--report-only", action="store_true", help="rewrite the table(s) of --out's records and stop")
    ap.add_argument("--out", type=Path, default=None, help="records (jsonl); appended to; inside the committed data/ "
                                                           f"only with {paths.OVERWRITE_FLAG}")
    ap.add_argument(paths.OVERWRITE_FLAG, action="store_true", help="allow --out inside the committed data/")


def start_candidates(ap: argparse.ArgumentParser, argv: Optional[list[str]]):
    """``(args, policy, writer or None)`` of :func:`add_candidates_args` options, refused (``ap.error``) without
    CUDA and Triton, with ``--host-ahead`` (a candidate may synchronise with the host: these scripts time with
    plain events) and with an ``--out`` that may not be written."""
    from studykit.compressors import _fast

    args = ap.parse_args(argv)
    policy = policy_from_args(ap, args)
    if args.host_ahead or args.graph:
        ap.error(f"--{'host-ahead' if args.host_ahead else 'graph'}: the candidates are timed with plain CUDA events "
                 f"(a candidate may wait for the GPU)")
    out = None
    if args.out is not None:
        try:
            out = paths.check_writable_output(args.out, args.overwrite_committed, file=True)
        except paths.OutputError as exc:
            ap.error(str(exc))
    if not torch.cuda.is_available() or not _fast.HAVE_TRITON:
        ap.error("needs a CUDA GPU and Triton (the fused kernels)")
    return args, policy, (RecordWriter(out) if out is not None else None)


def candidates_report_only(ap: argparse.ArgumentParser, argv: Optional[list[str]], report: Callable[[Path], object]) -> bool:
    """A candidate script's ``--report-only`` (``benchmarks/pack_fields_odd.py``, ``benchmarks/l2_flush.py``): when
    it is given, ``report(--out)`` rewrites the table from the records, with no GPU needed, and this returns True."""
    if "--report-only" not in (argv if argv is not None else sys.argv[1:]):
        return False
    args = ap.parse_args(argv)
    if args.out is None:
        ap.error("--report-only needs --out")
    if not Path(args.out).exists():
        ap.error(f"--report-only: no records at {args.out}")
    try:
        report(args.out)
    except RecordError as exc:
        ap.error(str(exc))
    return True


def candidates_gpu(script: str) -> tuple[torch.device, float]:
    """The GPU a candidate script times on (``cuda:0``) and its copy bandwidth (GB/s: the memory floor's), which
    it prints as ``<script>: copy bandwidth N GB/s``."""
    from studykit.measure.profile import measure_copy_bandwidth

    device = torch.device("cuda:0")
    copy_gbps = measure_copy_bandwidth(device, 256 << 20, n_iter=50, n_warmup=3)[1]
    print(f"{script}: copy bandwidth {copy_gbps:.0f} GB/s", flush=True)
    return device, copy_gbps


def records_of(out: Path, kind: str, script: str) -> list[dict]:
    """The records of ``kind`` in ``out`` (a benchmark's report); :class:`RecordError` naming ``script``
    when there are none."""
    records = [r for r in load_records(out, quiet=True) if r.get("kind") == kind]
    if not records:
        raise RecordError(f"{out}: no {kind} records (written by {script})")
    return records


def records_line(out: Path, records: list[dict], fact: Callable[[dict], str]) -> str:
    """The line under a benchmark table's title: ``out``'s name and record count, the distinct ``fact(record)``
    (the machine and versions), the kit commits and the first record's repetition policy."""
    from studykit.measure.bench.calls import policy_text

    facts = sorted({fact(r) for r in records})
    commits = sorted({str(r.get("git_commit")) for r in records})
    return (f"Records: `{out.name}` ({len(records)} records); {'; '.join(facts)}; kit commit: {', '.join(commits)}; "
            f"policy: {policy_text(records[0])}.")


def write_report(out: Path, text: str, verbose: bool = True) -> str:
    """``text`` (a benchmark's Markdown tables) written beside ``out`` as ``.md`` (``x.jsonl`` and ``x.jsonl.gz``:
    ``x.md``), printed if ``verbose``."""
    Path(str(out).removesuffix(".gz")).with_suffix(".md").write_text(text, encoding="utf-8")
    if verbose:
        print(text)
    return text
