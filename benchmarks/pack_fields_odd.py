"""Quantize's and THC's fused unpack kernel at the widths that do not divide 8 (3, 5, 6, 7, 9-15 bits), two ways
side by side on one GPU: ``gather`` (each group of 8 fields' bytes loaded once, each field gathered from the bytes
it spans by ``tl.gather``) and ``shifts`` (three byte loads per field, shifted together).
:data:`studykit.compressors._fast.quantize.GATHER_BELOW` picks the way per width (gather below it); this script
sets it to 16 (``gather``) and 0 (``shifts``) in turn. CUDA only.

    python benchmarks/pack_fields_odd.py --out pack_fields_odd.jsonl
    python benchmarks/pack_fields_odd.py --widths 3 15 --workers 1 4 --rounds 3

Per width it first checks that both ways decode the same floats, then times, round by round with the order of the
two ways swapped every round, ``quantize_unpack`` of ``--workers`` packed payloads (their sum decoded, as the
all-gather protocol decodes p workers' levels): median ms with the interquartile range and repetitions (plain CUDA
events under ``bench``'s repetition policy, the L2 flushed before every call), and ``gather / shifts`` per round.
Records of kind ``bench`` (``phase`` ``quantize_unpack``, ``params`` ``bits``, ``path``, ``round``,
``workers``) go to ``--out`` with the usual provenance; the table is written beside it (``.md``;
``--report-only`` rewrites it). Records of an earlier version of this script also timed packing both ways
(``phase`` ``quantize_pack``, when the pack kernel had a gather way too); the table shows them where a file
has them.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from studykit import argtypes  # noqa: E402
from studykit import models as M  # noqa: E402
from studykit.compressors import _fast  # noqa: E402
from studykit.compressors._fast import quantize as fq  # noqa: E402
from studykit.compressors.quantization import Quantize  # noqa: E402
from studykit.measure import bench  # noqa: E402
from studykit.measure.records import config_id, make_record  # noqa: E402
from studykit.measure.timing import time_fn  # noqa: E402

#: the widths whose kernels the two ways differ on (the rest unpack whole fields per byte, or int16)
ODD_WIDTHS = (3, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15)
#: each way as the value of fq.GATHER_BELOW that selects it at every width above
PATHS = {"shifts": 0, "gather": 16}
PHASES = ("quantize_pack", "quantize_unpack")


def calls(x: torch.Tensor, bits: int, workers: int) -> dict:
    """``{phase: fn}`` at ``bits``: the call timed (unpacking ``workers`` payloads), reading
    :data:`fq.GATHER_BELOW` when it runs."""
    scale, L = x.abs().amax().reshape(1), Quantize(bits=bits).max_level
    packed = torch.stack([fq.quantize_pack(x, scale, L, bits, _fast.seed_of(Quantize(bits=bits, seed=s), x.device))
                          for s in range(workers)])
    return {"quantize_unpack": lambda: fq.quantize_unpack(packed, scale, L, bits, x.numel())}


def same_results(fns: dict) -> bool:
    """Both ways decode the same floats, bit for bit."""
    got = {}
    for path, below in PATHS.items():
        fq.GATHER_BELOW = below
        got[path] = [fn() for fn in fns.values()]
    return all(torch.equal(a, b) for a, b in zip(got["shifts"], got["gather"]))


def run(args, policy, writer, device) -> None:
    numel, default = M.numel(args.model), fq.GATHER_BELOW
    x = torch.randn(numel, device=device)
    for bits in args.widths:
        for workers in args.workers:
            fns = calls(x, bits, workers)
            same = same_results(fns)
            print(f"bits {bits:2d} workers {workers}: both ways give the same bytes and floats: {same}", flush=True)
            for rnd in range(1, args.rounds + 1):
                order = list(PATHS) if rnd % 2 else list(PATHS)[::-1]
                for phase, fn in fns.items():
                    ms = {}
                    for path in order:
                        fq.GATHER_BELOW = PATHS[path]
                        t = time_fn(fn, device=device, **policy.timing_kw(device))
                        ms[path] = t.ms_median
                        print(f"bits {bits:2d} workers {workers} round {rnd} {phase:15s} {path:6s} {t.ms_median:.4f} ms "
                              f"[{t.ms_q25:.4f}-{t.ms_q75:.4f}] n={t.n_iter}", flush=True)
                        if writer:
                            params = {"bits": bits, "path": path, "round": rnd, "workers": workers}
                            writer.write(make_record("bench", config_id(kind="bench", model=args.model,
                                                                        compressor="quantize", params=params,
                                                                        phase=phase, device_type="cuda"),
                                                     timing=t, device=device, model=args.model, compressor="quantize",
                                                     params=params, phase=phase, numel=numel, same_results=same,
                                                     **policy.fields(device)))
                    print(f"bits {bits:2d} workers {workers} round {rnd} {phase:15s} gather / shifts "
                          f"{ms['gather'] / ms['shifts']:.3f}", flush=True)
    fq.GATHER_BELOW = default


# ------------------------------------------------------------------ the table
def table(records: list[dict]) -> str:
    """Markdown: per phase, width and workers, each way's median ms per round and gather / shifts (median of the
    rounds' ratios, and their range)."""
    by: dict = {}
    for r in records:
        p = r["params"]
        by.setdefault((r["phase"], p["bits"], p["workers"]), {}).setdefault(p["round"], {})[p["path"]] = r
    lines = ["| phase | bits | workers | shifts ms per round | gather ms per round | gather / shifts: median "
             "[min-max] of the rounds | same results |", "|---|---:|---:|---|---|---|---|"]
    for (phase, bits, workers), rounds in sorted(by.items()):
        both = [v for v in rounds.values() if {"shifts", "gather"} <= set(v)]
        ratios = [v["gather"]["ms_median"] / v["shifts"]["ms_median"] for v in both]
        cells = {p: ", ".join(f"{v[p]['ms_median']:.4f}" for _, v in sorted(rounds.items()) if p in v)
                 for p in PATHS}
        ratio = (f"{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]" if ratios else "—")
        same = {bool(r.get("same_results")) for v in rounds.values() for r in v.values()}
        lines.append(f"| {phase} | {bits} | {workers} | {cells['shifts']} | {cells['gather']} | {ratio} | "
                     f"{'yes' if same == {True} else 'NO'} |")
    return "\n".join(lines)


def report(out: Path, verbose: bool = True) -> str:
    """The table of the records in ``out``, with where they came from; written to ``out``.md."""
    records = [r for r in bench.records_of(out, "bench", "benchmarks/pack_fields_odd.py") if r.get("phase") in PHASES]
    line = bench.records_line(out, records, lambda r: f"{r['gpu']} ({r['device']}), torch {r['torch']}, "
                                                       f"numel {r['numel']:,}")
    text = (f"# Quantize's unpack (and pack) at widths that do not divide 8: gather against shifts\n\n{line}\n\n"
            f"`shifts` and `gather`: the two ways of `studykit/compressors/_fast/quantize.py` "
            f"(`benchmarks/pack_fields_odd.py` says which is which), their order swapped every round. `same "
            f"results`: both gave the same bytes and decoded floats.\n\n{table(records)}\n")
    return bench.write_report(out, text, verbose)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/pack_fields_odd.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50", choices=M.available(), help="whose flat gradient (default resnet50)")
    ap.add_argument("--widths", nargs="+", type=argtypes.int_range(2, 16), default=list(ODD_WIDTHS), metavar="B",
                    help="bits per field (default: every width that does not divide 8, 3-15)")
    ap.add_argument("--workers", nargs="+", type=argtypes.int_range(1, 64), default=[1, 4], metavar="W",
                    help="payloads unpacked and summed per call (default 1 4)")
    ap.add_argument("--rounds", type=argtypes.int_range(1, 20), default=2, help="rounds of both ways (default 2)")
    bench.add_candidates_args(ap, report_only=True)
    if bench.candidates_report_only(ap, argv, report):
        return 0
    args, policy, writer = bench.start_candidates(ap, argv)
    device, _ = bench.candidates_gpu("pack_fields_odd.py")
    run(args, policy, writer, device)
    if writer:
        report(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
