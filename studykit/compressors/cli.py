"""``python -m studykit compressors``: every compressor, its parameters (with their defaults), and its wire bytes
for a model."""
from __future__ import annotations

import argparse
import json

from studykit import compressors as C
from studykit import argtypes, models


def table(model: str, world_size: int) -> list[dict]:
    shapes = models.param_shapes(model)
    rows = []
    for name in C.available():
        comp = C.get(name)
        plan = comp.plan(shapes, world_size)
        rows.append({"compressor": name, "params": C.parameters(name),
                     "allreduce_compatible": comp.allreduce_compatible,
                     "error_feedback": comp.error_feedback,
                     "collectives": [c.as_dict() for c in plan],
                     "wire_bytes": sum(c.nbytes for c in plan), "ratio": round(comp.compression_ratio(shapes, world_size), 2)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studykit compressors", description=__doc__)
    ap.add_argument("--model", default="resnet50", type=argtypes.model_spec, metavar="MODEL",
                    help=f"{argtypes.MODEL_HELP} (default resnet50)")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv[1:] if argv and argv[0] == "compressors" else argv)
    if args.world_size < 1:
        ap.error(f"--world-size must be >= 1, got {args.world_size}")
    rows = table(args.model, args.world_size)
    if args.json:
        print(json.dumps(rows, indent=1, default=str))
        return 0
    print(format_table(rows, args.model, args.world_size))
    return 0


def format_table(rows: list[dict], model: str, world_size: int) -> str:
    """:func:`table` as text: one line per compressor with its wire MiB, ratio, collectives and parameters
    (``name=default``; ``python -m studykit predict --param NAME=VALUE`` and specs ``name:k=v`` set them)."""
    w = max(len("compressor"), *(len(r["compressor"]) for r in rows)) + 2
    ops = [", ".join(f"{c['op']}({c['dtype']})" for c in r["collectives"]) for r in rows]
    wo = max(len("collectives"), *map(len, ops)) + 2
    lines = [f"{model}, {world_size} workers, fp32 gradient {models.size_bytes(model) / 2**20:.1f} MiB",
             f"{'compressor':<{w}}{'all-reduce':<12}{'EF':<5}{'wire MiB':>10}{'ratio':>9}  {'collectives':<{wo}}"
             "parameters (defaults)"]
    for r, op in zip(rows, ops):
        params = ", ".join(f"{k}={v}" for k, v in r["params"].items()) or "-"
        lines.append(f"{r['compressor']:<{w}}{'yes' if r['allreduce_compatible'] else 'no':<12}"
                     f"{'yes' if r['error_feedback'] else '':<5}{r['wire_bytes'] / 2**20:>10.2f}{r['ratio']:>9.1f}  "
                     f"{op:<{wo}}{params}")
    return "\n".join(lines)
