"""``python -m studykit bench``: compressors against the memory floor, DDP hooks against PyTorch's.

Usage (codecs on one card, DDP on two)::

    python -m studykit bench --overwrite-committed --out-dir data/benchmarks/h200          # codecs only, one GPU
    torchrun --standalone --nproc-per-node 2 -m studykit bench --ddp --overwrite-committed --out-dir data/benchmarks/h200x2 --overwrite

Codecs (rank 0, one card): every registered compressor's encode+decode on the *flat*
ResNet-50 gradient (25.6M fp32 elements, one tensor) beside the memory floor -- one read and
one write of that fp32 gradient at the copy bandwidth measured in the same run
(:func:`studykit.measure.profile.measure_copy_bandwidth`). Phases (all at world size 1, so
collectives are identities and only compute is timed):

* ``encdec``: ``compressor.reduce(flat)`` with error feedback off: the whole codec protocol
  (encode, decode, the protocol's own passes); the number the targets are judged on;
* ``encode`` / ``decode``: the two halves apart, for single-round codecs
  (:func:`studykit.measure.profile.single_round`);
* ``default``: the registered default (error feedback on where the method's convention is),
  i.e. what a training run pays;
* low-rank methods (PowerSGD, ATOMO) are timed on the model's real parameter shapes
  (``layout`` ``per_tensor``): on one flat vector they would have no matrix to factor.

With ``--reference`` every codec is timed again with ``STUDYKIT_FAST=0`` (plain PyTorch, the
fused GPU kernels of :mod:`studykit.compressors._fast` off): before/after in one run. Each
record also has ``host_ms`` (Python + launch time per call, no synchronisation: when it is
close to ``ms_median`` the codec is launch-bound) and ``kernels`` (device kernels per call,
from the profiler), the two numbers behind "kernel count x launch overhead". Records are
written as each codec is timed (a run cut by a deadline keeps them); the profiler runs after
all timings, so the kernel counts follow as records of kind ``kernels`` (``of_config`` names
the timing record; :func:`attach_kernels`; older records carry ``kernels`` inline).

How each codec is timed (:class:`RepPolicy`; the repetition policy of
:mod:`studykit.measure.timing`): ``--warmup`` untimed calls (after two settling calls), then
at least ``--min-reps`` repetitions (100) *and* at least ``--min-time-s`` seconds (1 s) of timed
calls, whichever is more, capped at ``--budget-s`` seconds (30) per configuration; before each
repetition a 256 MiB buffer is written (``--l2-flush-mib``; L2 flushed, as
``triton.testing.do_bench`` does; on CPU no flush by default: ``--l2-flush-mib 64`` flushes a
buffer larger than the last-level cache, at about 10 ms of untimed work per repetition); CUDA
events on a GPU; with ``--host-ahead`` each repetition's device time with the host ahead of the
GPU (:class:`RepPolicy`: the event timing of a host-bound codec is its host's launch gaps).
Records carry the median, the interquartile range (``ms_q25``, ``ms_q75``),
``n_iter``, the policy (``min_reps``, ``min_time_s``, ``budget_s``, ``l2_flush_bytes``,
``timer``), ``reps_capped`` (true where the budget stopped it short of the policy),
``loadavg_1m`` (the machine's load when it was timed: a busy shared CPU explains noise), the memory
floor of the codec's input (``floor_ms``) and ``x_floor``. The kit's commit is stamped from
``git`` or, in a checkout without ``.git``, from ``STUDYKIT_GIT_COMMIT`` (pass it in; the run
warns when neither is there). Records written before this policy (3-50 iterations, no flush, no
quartiles) stay readable: the new fields are simply absent.

The codecs' speed targets (:data:`SPEED_TARGETS`) are judged by :func:`speed_targets` on
:func:`compare_runs` of one or two runs (``benchmarks/codec_repeat.py`` times every codec twice
in one process and prints both medians, their ratio and the verdicts).

DDP (``--ddp``; every rank): iteration time of syncSGD, the kit's hooks and PyTorch's
built-in hooks for each model through :func:`studykit.measure.ddp.run_ddp` (the same code
as ``python -m studykit ddp``): ``--ddp-warmup`` discarded and ``--ddp-iters`` timed iterations per
configuration (5 + 20 by default: about 2.5 minutes for the four models on two GPUs).

Records (JSON Lines, provenance-stamped by :mod:`studykit.measure.records`) go to
``OUT_DIR/codecs.jsonl`` and ``OUT_DIR/ddp.jsonl``; ``OUT_DIR/summary.csv`` and
``OUT_DIR/summary.md`` hold :func:`summarize`, which also reads the committed
``data/measurements/gpu/*.jsonl`` (``python -m studykit bench --summary FILES``).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import torch

from studykit import argtypes, paths
from studykit.measure.bench.codecs import PHASES, count_kernels, run_codecs
from studykit.measure.bench.scripts import add_policy_args, policy_from_args
from studykit.measure.bench.summary import summarize, summary_markdown
from studykit.measure.records import RecordWriter, load_records
from studykit.measure.runtime import parse_compressor_specs

if TYPE_CHECKING:  # pandas is imported where a table is built
    import pandas

#: ddp hooks timed by default (the targets' ones); --ddp-compressors all adds the rest
DDP_SPECS = ("none", "fp16", "bf16", "powersgd:rank=4")
DDP_MODELS = ("resnet50", "resnet101", "bert_base", "vgg19")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m studykit bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default=str(paths.REPORTS / "benchmarks" / "run"),
                    help="folder for codecs.jsonl, ddp.jsonl, summary.csv, summary.md (default reports/benchmarks/run; "
                         f"inside the committed data/ only with {paths.OVERWRITE_FLAG})")
    ap.add_argument(paths.OVERWRITE_FLAG, action="store_true",
                    help="allow --out-dir inside the repository's committed data/ (refused otherwise)")
    ap.add_argument("--retry-errors", action="store_true",
                    help="measure again the configurations whose records in --out-dir are errors")
    ap.add_argument("--overwrite", action="store_true", help="start the record files afresh (else: resume)")
    ap.add_argument("--model", default="resnet50", type=argtypes.model_spec, metavar="MODEL",
                    help=f"gradient for the codecs: {argtypes.MODEL_HELP}")
    ap.add_argument("--compressors", nargs="*", default=None, metavar="NAME[:k=v,...]",
                    help="codecs to time (default: every registered one)")
    ap.add_argument("--no-codecs", action="store_true", help="skip the codec part")
    ap.add_argument("--reference", action="store_true",
                    help="also time every codec with the fused kernels off (STUDYKIT_FAST=0): before/after")
    ap.add_argument("--no-split", action="store_true", help="skip the separate encode/decode timings")
    ap.add_argument("--phases", nargs="+", default=list(PHASES), choices=PHASES, metavar="PHASE",
                    help=f"codec phases to time (default: all of {' '.join(PHASES)}; the targets judge encdec)")
    ap.add_argument("--no-components", action="store_true",
                    help="skip the building blocks (torch.topk alone, THC's rotation, an elementwise pass, ...)")
    add_policy_args(ap)
    ap.add_argument("--ddp", action="store_true",
                    help="also time DDP iterations (every rank; under torchrun for 2+ GPUs)")
    ap.add_argument("--ddp-models", nargs="+", default=list(DDP_MODELS), type=argtypes.model_spec, metavar="MODEL",
                    help=f"models of the DDP part, each {argtypes.MODEL_HELP}")
    ap.add_argument("--ddp-compressors", nargs="*", default=list(DDP_SPECS), metavar="NAME[:k=v,...]",
                    help=f"kit hooks to time (default: {' '.join(DDP_SPECS)}; 'all' for every compressor)")
    ap.add_argument("--ddp-iters", type=argtypes.positive_int, default=20, help="timed DDP iterations per configuration (default 20)")
    ap.add_argument("--ddp-warmup", type=argtypes.nonneg_int, default=5,
                    help="discarded DDP iterations first (default 5; the first one builds DDP's buckets)")
    ap.add_argument("--ddp-budget-s", type=argtypes.positive_float, default=None,
                    help="cap seconds per DDP configuration (default: none, exactly --ddp-iters; a budget "
                         "estimates from the first, slow iteration and may cut a run to 5 iterations)")
    ap.add_argument("--device", default="auto", help="codec device: auto (GPU if any), cpu, cuda, cuda:N")
    ap.add_argument("--summary", nargs="+", default=None, metavar="FILE_OR_DIR",
                    help="only summarize these record files/folders (e.g. data/measurements/gpu) and exit")
    ap.add_argument("--quiet", action="store_true")
    return ap

def _write_summary(records: list[dict], out_dir: Optional[Path], verbose: bool) -> pandas.DataFrame:
    df = summarize(records)
    md = summary_markdown(df)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        df.to_csv(out_dir / "summary.csv", index=False)
        (out_dir / "summary.md").write_text(md + "\n", encoding="utf-8")
    if verbose:
        print(md)
    return df


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        argv = argv[1:]
    ap = build_parser()
    args = ap.parse_args(argv)
    verbose = not args.quiet
    if args.summary:
        try:
            records = load_records(*args.summary)
        except ValueError as exc:  # a missing file or folder, another schema
            ap.error(str(exc))
        if not records:
            ap.error(f"--summary: no records in {' '.join(args.summary)} (*.jsonl files written by bench)")
        _write_summary(records, None, verbose)
        return 0
    policy = policy_from_args(ap, args)
    try:
        out_dir = paths.check_writable_output(args.out_dir, args.overwrite_committed, what="--out-dir")
        for p in (out_dir / "codecs.jsonl", out_dir / "ddp.jsonl"):
            paths.check_writable_output(p, True, what="--out-dir", file=True)
    except paths.OutputError as exc:
        ap.error(str(exc))

    from studykit.measure.runtime import finish_dist, init_dist, pick_device
    from studykit.measure.workers import die_with_launcher

    world = int(os.environ.get("WORLD_SIZE", "1"))
    d = None
    if args.ddp or world > 1:
        die_with_launcher()  # a torchrun worker exits when torchrun does
        d = init_dist("auto", None, require_group=True)
    rank = d.rank if d is not None else 0
    main_rank = rank == 0
    codecs_path, ddp_path = out_dir / "codecs.jsonl", out_dir / "ddp.jsonl"
    if main_rank:
        out_dir.mkdir(parents=True, exist_ok=True)
        if args.overwrite:
            for p in (codecs_path, ddp_path):
                p.unlink(missing_ok=True)
    ok = False
    try:
        if d is not None:
            d.barrier()
        # with DDP iterations to time after the codecs, the codecs' kernel counts wait until after them: the
        # profiler leaves CUPTI attached, which slows every later launch (run_codecs)
        deferred: list | None = [] if (args.ddp or world > 1) else None
        codec_writer = None
        if not args.no_codecs and main_rank:
            device = d.device if d is not None else pick_device(args.device)
            if (policy.host_ahead or policy.graph) and torch.device(device).type != "cuda":
                ap.error(f"--{'host-ahead' if policy.host_ahead else 'graph'} needs a CUDA device, got {device}")
            specs = parse_compressor_specs(args.compressors)
            codec_writer = RecordWriter(codecs_path, retry_errors=args.retry_errors)
            run_codecs(specs, codec_writer, device=device,
                       model=args.model, policy=policy, reference=args.reference, split=not args.no_split,
                       phases=args.phases, extras=not args.no_components, deferred=deferred, verbose=verbose)
        if d is not None:
            d.barrier()
        if args.ddp or world > 1:
            from studykit.measure.ddp import run_ddp

            specs = parse_compressor_specs(None if args.ddp_compressors == ["all"] else args.ddp_compressors) \
                if args.ddp_compressors else []
            gc_writer = RecordWriter(ddp_path, enabled=main_rank, retry_errors=args.retry_errors)
            run_ddp(d, args.ddp_models, specs, gc_writer, modes=("syncsgd", "builtin", "hook"),
                    n_iter=args.ddp_iters, n_warmup=args.ddp_warmup, budget_s=args.ddp_budget_s, min_iter=5,
                    verbose=verbose)
        if deferred and codec_writer is not None:
            count_kernels(deferred, codec_writer)
        ok = True
    finally:
        if d is not None:
            finish_dist(d, ok)
    if main_rank:
        records = load_records(*(p for p in (codecs_path, ddp_path) if p.exists()))
        _write_summary(records, out_dir, verbose)
        if verbose:
            print(f"bench: records in {out_dir}")
    return 0
