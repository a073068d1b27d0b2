"""``python -m studykit {profile,sweep,tcomp,ddp} ...``: the measurement commands.

Single device::

    python -m studykit profile --models resnet50 --compressors powersgd:rank=4 topk:ratio=0.01 --out p.jsonl
    python -m studykit tcomp --models resnet50 --batch-sizes 32 64 --out t.jsonl

Under torchrun (NCCL on GPUs, gloo on CPUs)::

    torchrun --standalone --nproc-per-node 2 -m studykit sweep --min-bytes 1K --max-bytes 1G --out s.jsonl
    torchrun --standalone --nproc-per-node 2 -m studykit ddp --models resnet50 --bucket-mb 5 100 --out d.jsonl

Records are appended to ``--out`` as they are measured; rerunning with the same
``--out`` skips what is there. Timing defaults to the paper's method (10 warm-up
iterations discarded, 50 timed); ``--budget-s`` caps the time per configuration.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from studykit import models as M
from studykit.comm import COMM_KINDS
from studykit import argtypes, paths
from studykit.measure.runtime import parse_compressor_specs, parse_size

__all__ = ["main", "build_parser"]

COMMANDS = ("profile", "sweep", "tcomp", "ddp")


_positive_int = argtypes.positive_int
_nonneg_int = argtypes.nonneg_int
_positive_float = argtypes.positive_float


def _coalesce_mb(text: str):
    """``--hook-coalesce-mb``: a number of MB >= 0, or ``off`` (None: a protocol per bucket)."""
    if text.strip().lower() == "off":
        return None
    try:
        return argtypes.nonneg_float(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"must be a number of MB >= 0 or 'off', got {text!r}") from None


def _size(text: str) -> int:
    try:
        v = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a size >= 1 byte (e.g. 4K, 64M), got {text!r}")
    return v


def _common(p: argparse.ArgumentParser, cmd: str) -> None:
    p.add_argument("--out", default=str(paths.REPORTS / "measurements" / f"{cmd}.jsonl"),
                   help="JSON Lines file to append records to; a rerun skips what it holds "
                        "(default: reports/measurements/%(prog)s.jsonl)".replace("%(prog)s", cmd))
    p.add_argument("--iters", type=_positive_int, default=50, help="timed iterations (default 50, the paper's)")
    p.add_argument("--warmup", type=_nonneg_int, default=10,
                   help="discarded warm-up iterations after two settling calls (default 10; at least 1)")
    p.add_argument("--budget-s", type=_positive_float, default=None,
                   help="cap seconds per configuration: fewer iterations (never below --min-iter) when slow")
    p.add_argument("--min-iter", type=_positive_int, default=3, help="timed iterations kept under --budget-s")
    p.add_argument(paths.OVERWRITE_FLAG, action="store_true",
                   help="allow --out inside the repository's committed data/ (refused otherwise)")
    p.add_argument("--retry-errors", action="store_true",
                   help="measure again the configurations whose records in --out are errors")
    p.add_argument("--quiet", action="store_true", help="no progress bar or per-record lines")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m studykit", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="{" + ",".join(COMMANDS) + "}")

    ap.commands = {}  # name -> subparser, so errors print the command's own usage
    p = ap.commands["profile"] = sub.add_parser("profile", help="encode/decode time of compressors on a model's gradient shapes")
    p.add_argument("--models", "--model", nargs="+", default=["resnet50"], type=argtypes.model_spec, metavar="MODEL",
                   help=f"models whose parameter shapes to use, each {argtypes.MODEL_HELP}")
    p.add_argument("--compressors", "--compressor", nargs="+", default=None, metavar="NAME[:k=v,...]",
                   help="compressors with parameters, e.g. powersgd:rank=4 topk:ratio=0.01 (default: all)")
    p.add_argument("--paper", action="store_true",
                   help="also the paper's Table 2-3 settings (PowerSGD rank 4/8/16, MS-TopK 1%%/0.1%%, ...) "
                        "of the compressors named in --compressors (all when none are named)")
    p.add_argument("--no-split", action="store_true", help="skip the separate encode/decode timings")
    p.add_argument("--ddp-buckets", action="store_true",
                   help="also time the protocol bucket by bucket at DDP's default bucket caps, as the kit's DDP "
                        "hook runs it (phase reduce_buckets; the performance model's hook input)")
    p.add_argument("--bucket-times", type=_positive_int, default=None, metavar="REPS",
                   help="with --ddp-buckets: also each bucket's host time (the hook's thread: Python, dispatch, "
                        "launches) and, on CUDA, its device time with the host ahead, median of REPS rounds "
                        "(fields bucket_host_ms, bucket_device_ms; the hook model's host chain)")
    p.add_argument("--sim-world-size", type=_positive_int, default=1,
                   help="decode as if this many workers sent payloads (all-gather codecs; no communication)")
    p.add_argument("--host-ahead", action="store_true",
                   help="CUDA: time each call's device work with the host ahead of the GPU (a GPU busy-wait first, "
                        "so every kernel is queued before it runs), as inside a training iteration; phases are "
                        "recorded as <phase>_host_ahead")
    p.add_argument("--copy-bytes", type=_size, default=None,
                   help="tensor size for the copy-bandwidth measurement (default 256M on GPU, 64M on CPU)")
    p.add_argument("--device", default="auto", help="auto (GPU if any), cpu, cuda, cuda:N")
    _common(p, "profile")

    p = ap.commands["sweep"] = sub.add_parser("sweep", help="collectives over message sizes (under torchrun)")
    p.add_argument("--ops", nargs="+", default=["all_reduce", "all_gather", "ps_gather", "ps_reduce"],
                   choices=["all_reduce", "all_gather", "ps_gather", "ps_reduce"], metavar="OP",
                   help="all_reduce all_gather ps_gather ps_reduce (default: all)")
    p.add_argument("--sizes", nargs="+", type=_size, default=None, metavar="SIZE",
                   help="explicit message sizes per rank, e.g. 1K 64K 1M (overrides --min/--max-bytes)")
    p.add_argument("--min-bytes", type=_size, default=parse_size("1K"), help="smallest message (default 1K)")
    p.add_argument("--max-bytes", type=_size, default=None,
                   help="largest message (default 1G on GPUs, 4M on CPUs)")
    p.add_argument("--factor", type=argtypes.int_range(2), default=2, help="size multiplier between steps (default 2)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"], help="element type")
    p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"], help="default: nccl on GPUs")
    p.add_argument("--timeout-s", type=_positive_float, default=300.0, help="process-group timeout")
    _common(p, "sweep")

    p = ap.commands["tcomp"] = sub.add_parser("tcomp", help="forward+backward and backward-only time on one device (T_comp)")
    p.add_argument("--models", "--model", nargs="+", default=["resnet50"], type=argtypes.model_spec, metavar="MODEL",
                   help=f"models, each {argtypes.MODEL_HELP}")
    p.add_argument("--batch-sizes", nargs="+", type=_positive_int, default=None,
                   help="per-device batch sizes (default: each model's usual one)")
    p.add_argument("--phases", nargs="+", default=["fwd_bwd", "bwd"], choices=["fwd_bwd", "bwd"])
    p.add_argument("--seq-len", type=_positive_int, default=M.BERT_SEQ_LEN,
                   help="tokens per sequence of bert_base and transformers: models")
    p.add_argument("--device", default="auto", help="auto (GPU if any), cpu, cuda, cuda:N")
    _common(p, "tcomp")

    p = ap.commands["ddp"] = sub.add_parser("ddp", help="DDP iteration time: syncSGD, compressor hooks, PyTorch's hooks (torchrun)")
    p.add_argument("--models", "--model", nargs="+", default=["resnet50"], type=argtypes.model_spec, metavar="MODEL",
                   help=f"models, each {argtypes.MODEL_HELP}")
    p.add_argument("--batch-sizes", nargs="+", type=_positive_int, default=None,
                   help="per-worker batch sizes (default: each model's usual one)")
    p.add_argument("--compressors", "--compressor", nargs="*", default=None, metavar="NAME[:k=v,...]",
                   help="compressors for hook/post modes (default: all; give none with an empty list)")
    p.add_argument("--modes", nargs="+", default=["syncsgd", "builtin", "hook", "post"],
                   choices=["syncsgd", "builtin", "hook", "post", "hook_blocking"],
                   help="hook: compressor as DDP comm hook, overlapped with the backward pass; hook_blocking: "
                        "the same protocol run inside the hook (blocking); post: after the backward pass")
    p.add_argument("--bucket-mb", nargs="*", type=_positive_float, default=[],
                   help="extra syncSGD bucket sizes in MB, besides DDP's default (25)")
    p.add_argument("--comm", nargs="+", default=["collective"], choices=list(COMM_KINDS),
                   help="how the hook and post modes' protocols cross workers, each given runs: collective (the "
                        "backend's all-reduce/all-gather), ps (one parameter server on rank 0, the paper's "
                        "Fig. 4); syncSGD and PyTorch's hooks use DDP's all-reduce and run once")
    p.add_argument("--builtin", nargs="*", default=["torch_fp16", "torch_bf16", "torch_powersgd"],
                   choices=["torch_fp16", "torch_bf16", "torch_powersgd"], help="PyTorch hooks (NCCL only)")
    p.add_argument("--seq-len", type=_positive_int, default=M.BERT_SEQ_LEN,
                   help="tokens per sequence of bert_base and transformers: models")
    p.add_argument("--backend", default="auto", choices=["auto", "nccl", "gloo"], help="default: nccl on GPUs")
    p.add_argument("--device", default=None, help="default: cuda:LOCAL_RANK with NCCL, cpu with gloo")
    p.add_argument("--timeout-s", type=_positive_float, default=300.0, help="process-group timeout")
    p.add_argument("--bucket-times", action="store_true",
                   help="also record when each DDP bucket is ready during the backward pass (kind 'buckets', "
                        "one record per syncSGD configuration; for the model's per-bucket timeline)")
    p.add_argument("--hook-times", action="store_true",
                   help="also record, per bucket of the kit's DDP hook, when it was ready, encoded, communicated "
                        "and decoded, and when the backward pass ended (kind 'hook_times', one record per hook "
                        "configuration, overlapped and blocking; also for hook configurations already in --out)")
    p.add_argument("--hook-coalesce-mb", type=_coalesce_mb, nargs="+", default=[None], metavar="MB|off",
                   help="overlapped hooks hold buckets back until this many MB of them are ready (0: the "
                        "iteration's last bucket) and run the protocol once over them; each hook configuration "
                        "once per value, 'off' a protocol per bucket (the default); part of its identity")
    p.add_argument("--hook-runner", nargs="+", default=["thread"], choices=["thread", "graph"],
                   help="how overlapped hooks run a bucket's protocol (studykit.ddp.register's runner): thread (the "
                        "default) or graph (captured as a CUDA graph once a bucket is known, then replayed from DDP's "
                        "callback); each hook configuration once per value (with every --hook-coalesce-mb)")
    p.add_argument("--pair-hook-post", nargs="?", const="configs", default="off", choices=["off", "configs", "iterations"],
                   help="time each compressor's hooks beside its post (default off: every post first, then every "
                        "hook, so a run cut short still has post for each compressor): 'configs' (the flag alone) "
                        "times them right after its post, 'iterations' also builds them side by side, with PyTorch's "
                        "hook of the same codec, and times a round of each per iteration (records name each other "
                        "in timed_with); on a shared machine "
                        "a slow spell then falls on both sides of a hook / post ratio; the ids are unchanged")
    p.add_argument("--trace-dir", default=None, metavar="DIR",
                   help="after timing each configuration, profile 3 more iterations with torch.profiler and write "
                        "rank 0's Chrome trace (.json.gz) into DIR (a diagnosis aid; records are unchanged; sets "
                        "TEARDOWN_CUPTI=1 so that the profiler does not slow the configurations timed after it)")
    p.add_argument("--no-broadcast-buffers", dest="broadcast_buffers", action="store_false",
                   help="DDP(broadcast_buffers=False) in the syncsgd, builtin and hook modes: no buffer broadcast "
                        "at every forward (BatchNorm statistics stay per rank); part of each such configuration's "
                        "identity (an A/B of what DDP's forward costs beside post, which runs the plain model)")
    p.add_argument("--gradient-as-bucket-view", dest="bucket_view", action="store_true",
                   help="DDP(gradient_as_bucket_view=True) in the syncsgd, builtin and hook modes: the gradients are "
                        "views into DDP's buckets (no copy of each bucket's average into them); part of each such "
                        "configuration's identity")
    p.add_argument("--switch-interval-ms", type=_positive_float, default=None,
                   help="Python's GIL switch interval for the run, ms (default: Python's, 5); part of each "
                        "configuration's identity when given (an A/B of the hook's communication thread)")
    _common(p, "ddp")
    return ap


def _timing(args) -> dict:
    return dict(n_iter=args.iters, n_warmup=args.warmup, budget_s=args.budget_s, min_iter=args.min_iter)


def _single_device(parser, args):
    from studykit.measure.runtime import pick_device

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        parser.error(f"{args.cmd} runs on one device; start it with python -m studykit {args.cmd}, not torchrun")
    try:
        return pick_device(args.device)
    except (ValueError, RuntimeError) as exc:
        parser.error(str(exc))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    top = build_parser()
    args = top.parse_args(argv)
    parser = top.commands[args.cmd]
    from studykit.measure.records import RecordWriter

    if args.budget_s is not None and args.warmup < 1:
        parser.error("--budget-s needs --warmup >= 1 (the warm-up estimates the time per iteration)")
    try:
        out = paths.check_writable_output(args.out, args.overwrite_committed, file=True)
    except paths.OutputError as exc:
        parser.error(str(exc))
    verbose = not args.quiet
    specs = []
    if args.cmd in ("profile", "ddp"):
        if args.cmd == "ddp" and args.compressors == []:
            specs = []
        else:
            try:
                specs = parse_compressor_specs(args.compressors)
            except ValueError as exc:
                parser.error(str(exc))
        if args.cmd == "profile" and args.paper:
            from studykit.measure.profile import paper_specs

            named = {s.name for s in specs} if args.compressors else None  # --paper: only the named ones
            specs += [s for s in paper_specs() if s not in specs and (named is None or s.name in named)]

    if args.cmd == "profile":
        from studykit.measure.profile import run_profile

        device = _single_device(parser, args)
        if args.host_ahead and torch.device(device).type != "cuda":
            parser.error(f"profile --host-ahead needs a CUDA device (the GPU runs ahead of the host), got {device}")
        if args.bucket_times and not args.ddp_buckets:
            parser.error("profile --bucket-times times the buckets of --ddp-buckets: pass both")
        writer = RecordWriter(out, retry_errors=args.retry_errors)
        n = run_profile(args.models, specs, writer, device=device, split=not args.no_split,
                        sim_world_size=args.sim_world_size, copy_bytes=args.copy_bytes,
                        ddp_buckets=args.ddp_buckets, host_ahead=args.host_ahead, verbose=verbose,
                        bucket_reps=args.bucket_times or 0,
                        **_timing(args))
    elif args.cmd == "tcomp":
        from studykit.measure.tcomp import run_tcomp

        device = _single_device(parser, args)
        writer = RecordWriter(out, retry_errors=args.retry_errors)
        n = 0
        for model in args.models:  # default batch size per model unless given
            n += run_tcomp([model], args.batch_sizes or [M.default_batch(model)], writer, device=device,
                           phases=args.phases, seq_len=args.seq_len, verbose=verbose, **_timing(args))
    else:
        from studykit.measure.runtime import finish_dist, init_dist
        from studykit.measure.workers import die_with_launcher

        if args.cmd == "sweep":
            sizes = args.sizes
            if sizes is None:
                from studykit.measure.sweep import sizes_between

                gpu = args.backend == "nccl" or (args.backend == "auto" and torch.cuda.is_available())
                max_bytes = args.max_bytes or parse_size("1G" if gpu else "4M")
                try:
                    sizes = sizes_between(args.min_bytes, max_bytes, args.factor)
                except ValueError as exc:
                    parser.error(str(exc))
        die_with_launcher()  # a torchrun worker exits when torchrun does
        try:
            d = init_dist(args.backend, getattr(args, "device", None), require_group=args.cmd == "ddp",
                          timeout_s=args.timeout_s)
        except ValueError as exc:
            parser.error(str(exc))
        if args.cmd == "sweep" and d.world_size < 2:
            finish_dist(d)
            parser.error("sweep needs at least 2 processes: torchrun --standalone --nproc-per-node 2 -m studykit sweep")
        writer = RecordWriter(out, enabled=d.is_main, retry_errors=args.retry_errors)
        ok = False
        try:
            if args.cmd == "sweep":
                from studykit.measure.sweep import run_sweep

                dtype = getattr(torch, args.dtype)
                n = run_sweep(d, args.ops, sizes, writer, dtype=dtype, verbose=verbose, **_timing(args))
            else:
                from studykit.measure.ddp import run_ddp

                n = run_ddp(d, args.models, specs, writer, batch_sizes=args.batch_sizes, modes=args.modes,
                            bucket_mbs=args.bucket_mb, builtins=args.builtin, seq_len=args.seq_len,
                            verbose=verbose, bucket_times=args.bucket_times, hook_times=args.hook_times,
                            comms=args.comm,
                            switch_interval_ms=args.switch_interval_ms,
                            hook_coalesce_mbs=list(dict.fromkeys(args.hook_coalesce_mb)), trace_dir=args.trace_dir,
                            hook_runners=list(dict.fromkeys(args.hook_runner)),
                            broadcast_buffers=args.broadcast_buffers, bucket_view=args.bucket_view,
                            pair_hook_post=args.pair_hook_post, **_timing(args))
            ok = True
        finally:
            writer = None
            finish_dist(d, ok)
        if not d.is_main:
            return 0
    if verbose:
        print(f"{args.cmd}: wrote {n} records to {out}")
    return 0
