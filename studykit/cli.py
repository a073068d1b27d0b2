"""``python -m studykit COMMAND ...``: the kit's entry points from a shell (also under torchrun).

Each command lives in the module that computes it and exposes ``main(argv) -> int``. Bad input
that surfaces as ``ValueError`` or ``OSError`` (a missing file, a refused output, an invalid value)
ends with ``studykit COMMAND: error: ...`` and exit status 2; ``STUDYKIT_TRACEBACK=1`` shows the traceback.
"""
from __future__ import annotations

import importlib
import os
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "compressors": ("studykit.compressors.cli", "list compressors, their parameters and wire bytes"),
    "profile": ("studykit.measure.cli", "time encode/decode of compressors on real model shapes"),
    "sweep": ("studykit.measure.cli", "time collectives (all-reduce, all-gather, PS) over message sizes"),
    "tcomp": ("studykit.measure.cli", "time forward/backward of a model on one device (T_comp)"),
    "ddp": ("studykit.measure.cli", "time DDP iterations: syncSGD and compressor hooks"),
    "fit": ("studykit.perfmodel.cli", "fit a calibration (alpha, BW, gamma, T_comp) from records"),
    "predict": ("studykit.perfmodel.cli", "predict iteration times (a table; --json for scripts)"),
    "advise": ("studykit.perfmodel.cli", "rank syncSGD, fp16 and every compressor by predicted time"),
    "train": ("studykit.train.cli", "train to accuracy with a compressor (static/dynamic)"),
    "bench": ("studykit.measure.bench", "compressor speed vs memory floor, and DDP hooks vs PyTorch's"),
    "throttle": ("studykit.measure.throttle", "run measurements on a throttled network (netns + tc)"),
    "verify": ("studykit.perfmodel.verify", "score the performance model against measurements"),
    "notebooks": ("studykit.nbtools.runner", "run every notebook with papermill -> reports/"),
    "data": ("studykit.nbtools.datacli", "the index of data/ (list, show) and regen [--check] of its generated files"),
    "env": ("studykit.measure.envinfo", "what a bug report needs: versions, git commit, GPUs, platform"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: python -m studykit COMMAND [options]   (COMMAND --help for its options)", "", "commands:"]
    lines += [f"  {name:<{width}}  {desc}" for name, (_, desc) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from studykit import __version__

        print(f"studykit {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"studykit: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    try:
        return int(module.main([name, *rest]) or 0)
    except (ValueError, OSError) as exc:  # bad input (a path, a file, a value): a message, not a traceback
        if os.environ.get("STUDYKIT_TRACEBACK"):
            raise
        print(f"studykit {name}: error: {exc}", file=sys.stderr)
        return 2
