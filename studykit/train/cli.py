"""``python -m studykit train``: train to accuracy with compressors as DDP comm hooks.

Examples::

    # Tirupati et al.'s three scenarios plus the FP16 baseline, 2 gloo CPU workers spawned here
    python -m studykit train --methods none fp16 quantize8 dynamic --epochs 30 --world-size 2 \\
        --overwrite-committed --out data/training/cpu/

    # the same under torchrun (gloo on CPU, NCCL on GPUs)
    torchrun --nproc-per-node 2 -m studykit train --methods none fp16 dynamic --out $OUT/

    # a ladder and thresholds of your own
    python -m studykit train --methods dynamic:topk --acc-thresholds 0.5 0.7 0.85 --stall-epochs 3

    # the real workload: a GPT-2-shaped byte-level model on the Python standard library, 3 seeds
    # (scripts/gpu_tta.sh runs this on 2 throttled GPUs; --model gpt_tiny --steps 20 runs on a CPU)
    python -m studykit train --dataset text --model gpt_mini --optimizer adamw --lr 0.002 --steps 300 \
        --eval-every 25 --seq-len 256 --batch-size 16 --seeds 0 1 2 --methods none fp16 quantize8 dynamic \
        powersgd:rank=4 topk --out $OUT/ --resume

Methods: presets (``--list-methods``), ``dynamic:FAMILY``, ``accordion:FAMILY`` or any compressor
spec ``name:key=value,key=value``. One JSON line per round (an epoch, or ``--eval-every`` iterations) goes
to ``--out`` (a ``.jsonl`` file, or a folder getting ``METHOD.jsonl`` each); a table is printed at the end.
Iterations are timed whole with DDP's overlap kept; the compute/encode/communicate/decode split comes from
``--profile-steps`` separate profiled iterations per round (studykit.train.loop).
"""
from __future__ import annotations

import argparse
import sys

from studykit import argtypes, paths
from studykit.train import nets
from studykit.train.dynamic import LADDERS
from studykit.train.loop import DATASETS, TrainConfig
from studykit.train.methods import PRESETS

__all__ = ["main", "build_parser", "config_from_args"]


def build_parser() -> argparse.ArgumentParser:
    d = TrainConfig()
    ap = argparse.ArgumentParser(prog="python -m studykit train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", nargs="+", default=["none", "fp16", "quantize8", "dynamic"],
                    help="methods to train in turn (default: %(default)s)")
    ap.add_argument("--list-methods", action="store_true", help="print the presets and ladders, then exit")
    g = ap.add_argument_group("data and model")
    g.add_argument("--dataset", default=d.dataset, choices=DATASETS,
                   help="text: the Python standard library's *.py as bytes (studykit.train.text)")
    g.add_argument("--data-root", default=None,
                   help="CIFAR-10: cifar-10-python.tar.gz or cifar-10-batches-py/; text: a folder of *.py "
                        "(default: the standard library)")
    g.add_argument("--limit-train", type=argtypes.positive_int, default=None,
                   help="keep the first N training examples (text: bytes)")
    g.add_argument("--limit-test", type=argtypes.positive_int, default=None,
                   help="keep the first N test examples (text: validation bytes)")
    g.add_argument("--test-percent", type=argtypes.int_range(0, 50), default=0,
                   help="text: percent of the files held out as a test stream, beside validation's 5 %% "
                        "(0: the validation stream is also the test stream)")
    g.add_argument("--seq-len", type=argtypes.int_range(2, 1 << 20), default=d.seq_len,
                   help="text: tokens per training window (default: %(default)s)")
    g.add_argument("--synthetic-shape", type=argtypes.positive_int, nargs="+", default=list(d.synthetic_shape),
                   help="input shape of --dataset synthetic, e.g. 3 32 32 (default: %(default)s)")
    g.add_argument("--model", default=d.model, choices=nets.ARCHS)
    g.add_argument("--width", type=argtypes.positive_int, default=None, help="model width (default: the model's own)")
    g = ap.add_argument_group("optimisation")
    g.add_argument("--epochs", type=argtypes.positive_int, default=d.epochs)
    g.add_argument("--steps", type=argtypes.positive_int, default=None,
                   help="total iterations (default: --epochs passes over the training set)")
    g.add_argument("--eval-every", type=argtypes.positive_int, default=None,
                   help="iterations per round: one record, one evaluation, one controller decision (default: an epoch)")
    g.add_argument("--optimizer", default=d.optimizer, choices=("sgd", "adamw"))
    g.add_argument("--lr-warmup-steps", type=argtypes.nonneg_int, default=d.lr_warmup_steps)
    g.add_argument("--batch-size", type=argtypes.positive_int, default=d.batch_size, help="per worker (default: %(default)s)")
    g.add_argument("--lr", type=argtypes.positive_float, default=d.lr)
    g.add_argument("--momentum", type=argtypes.float_range(0, 1, hi_open=True), default=d.momentum)
    g.add_argument("--weight-decay", type=argtypes.nonneg_float, default=d.weight_decay)
    g.add_argument("--lr-schedule", default=d.lr_schedule, choices=("constant", "cosine"))
    g.add_argument("--seed", type=argtypes.int_range(0, 2**32 - 1), default=d.seed)
    g.add_argument("--seeds", type=argtypes.int_range(0, 2**32 - 1), nargs="+", default=None,
                   help="train every method once per seed (seed-major; overrides --seed)")
    g.add_argument("--val-fraction", type=argtypes.float_range(0, 1, hi_open=True), default=d.val_fraction,
                   help="held out of the training set; its accuracy drives the controller")
    g.add_argument("--quiet", action="store_true", help="no per-epoch progress lines (stderr)")
    g.add_argument("--target-acc", type=argtypes.fraction, default=None,
                   help="stop each method once test accuracy reaches this fraction")
    g = ap.add_argument_group("dynamic compression (override the method's defaults)")
    g.add_argument("--acc-thresholds", type=argtypes.fraction, nargs="+", default=None,
                   help="validation-accuracy steps (fractions), Tirupati et al.'s step function")
    g.add_argument("--loss-thresholds", type=argtypes.positive_float, nargs="+", default=None,
                   help="|change of training loss| steps: below each one relaxes a level")
    g.add_argument("--loss-window", type=argtypes.positive_int, default=None,
                   help="epochs the loss change is averaged over (1: epoch-to-epoch difference)")
    g.add_argument("--stall-epochs", type=argtypes.positive_int, default=None,
                   help="epochs at one step before compression is removed temporarily")
    g.add_argument("--boost-epochs", type=argtypes.positive_int, default=None, help="epochs of that temporary removal")
    g.add_argument("--eta", type=argtypes.positive_float, default=None, help="Accordion: relative gradient-norm change threshold")
    g.add_argument("--interval", type=argtypes.positive_int, default=None, help="Accordion: epochs between decisions")
    g = ap.add_argument_group("execution")
    g.add_argument("--world-size", type=argtypes.int_range(1, 1024), default=1,
                   help="without torchrun: 1 = in this process, N > 1 = spawn N gloo CPU workers")
    g.add_argument("--device", default=d.device, help="auto | cpu | cuda (default: %(default)s)")
    g.add_argument("--threads", type=argtypes.positive_int, default=d.threads, help="torch CPU threads per worker")
    g.add_argument("--bucket-cap-mb", type=argtypes.positive_float, default=d.bucket_cap_mb)
    g.add_argument("--warmup-steps", type=argtypes.nonneg_int, default=d.warmup_steps,
                   help="untimed steps of a throwaway model before the first method")
    g.add_argument("--profile-steps", type=argtypes.nonneg_int, default=d.profile_steps,
                   help="profiled iterations after each round, for the compute/encode/communicate/decode split "
                        "(not training, never timed as training; 0: none)")
    g.add_argument("--out", default=None, help="a .jsonl file, or a folder for one METHOD.jsonl per method")
    g.add_argument("--overwrite", action="store_true", help="truncate the output file(s) first")
    g.add_argument("--resume", action="store_true",
                   help="skip (method, seed) runs already complete in --out with the same settings")
    g.add_argument(paths.OVERWRITE_FLAG, action="store_true",
                   help="allow --out inside the repository's committed data/ (refused otherwise)")
    return ap


def config_from_args(a: argparse.Namespace) -> TrainConfig:
    return TrainConfig(
        dataset=a.dataset, data_root=a.data_root, limit_train=a.limit_train, limit_test=a.limit_test,
        test_percent=a.test_percent,
        synthetic_shape=tuple(a.synthetic_shape), model=a.model, width=a.width, epochs=a.epochs,
        steps=a.steps, eval_every=a.eval_every, seq_len=a.seq_len, optimizer=a.optimizer,
        batch_size=a.batch_size, lr=a.lr, momentum=a.momentum, weight_decay=a.weight_decay,
        lr_schedule=a.lr_schedule, lr_warmup_steps=a.lr_warmup_steps, seed=a.seeds[0] if a.seeds else a.seed,
        val_fraction=a.val_fraction, bucket_cap_mb=a.bucket_cap_mb, profile_steps=a.profile_steps,
        progress=not a.quiet, target_acc=a.target_acc, device=a.device, threads=a.threads,
        warmup_steps=a.warmup_steps,
        acc_thresholds=tuple(a.acc_thresholds) if a.acc_thresholds else None,
        loss_thresholds=tuple(a.loss_thresholds) if a.loss_thresholds else None, loss_window=a.loss_window,
        stall_epochs=a.stall_epochs, boost_epochs=a.boost_epochs, eta=a.eta, interval=a.interval)


def _list_methods() -> str:
    lines = ["presets:"]
    for name, m in PRESETS.items():
        kind = f"{m.trigger} trigger over " if m.dynamic else ""
        lines.append(f"  {name:<17} {kind}{' -> '.join(lv.label for lv in m.levels)}")
    lines.append("ladders (dynamic:FAMILY, accordion:FAMILY):")
    for fam, levels in LADDERS.items():
        lines.append(f"  {fam:<17} {' -> '.join(lv.label for lv in levels)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "train":
        argv = argv[1:]
    a = build_parser().parse_args(argv)
    if a.list_methods:
        print(_list_methods())
        return 0
    from studykit.train import analysis
    from studykit.train.launch import init_from_env, shutdown, train, under_torchrun
    from studykit.train.methods import parse_methods

    ap = build_parser()
    if a.out is not None:
        try:
            paths.check_writable_output(a.out, a.overwrite_committed, file=a.out.endswith(".jsonl"))
        except paths.OutputError as exc:
            ap.error(str(exc))
    try:
        from studykit.measure.runtime import pick_device

        if a.device != "auto":
            pick_device(a.device)
        methods = parse_methods(a.methods)  # fail early on a bad spec
    except ValueError as exc:
        ap.error(str(exc))
    cfg = config_from_args(a)
    if under_torchrun():
        init_from_env(cfg.device)
        try:
            records = train(cfg, methods, out=a.out, overwrite=a.overwrite, seeds=a.seeds, resume=a.resume)
        finally:
            shutdown()
    else:
        records = train(cfg, methods, world_size=a.world_size, out=a.out, overwrite=a.overwrite, seeds=a.seeds,
                        resume=a.resume)
    if records:
        print(analysis.summary_table(analysis.to_frame(records)).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
