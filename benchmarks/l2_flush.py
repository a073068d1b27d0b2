"""What the L2 flush before each timed call does to the memory floor, a read of the gradient and the elementwise
codecs, side by side on one GPU. CUDA only.

    python benchmarks/l2_flush.py --out l2_flush.jsonl
    python benchmarks/l2_flush.py --compressors quantize:bits=2 terngrad --rounds 3

``bench`` writes 256 MiB before every repetition (``triton.testing.do_bench``'s flush): the L2 is then full of
written lines, which the timed call's first reads must write back to memory before they can use them. This
script times the same calls after three flushes, round by round with their order rotated every round:

* ``write``: ``bench``'s flush (256 MiB written, ``--l2-flush-mib`` changes the size);
* ``read``: as many bytes read (a maximum over them): the L2 is as full, of lines that need no write-back;
* ``none``: no flush (what the previous call left in the L2).

The calls: ``floor copy`` (256 MiB copied: the copy whose bandwidth sets ``bench``'s memory floor, 8 bytes per element of the
gradient at that bandwidth), then on the flat gradient of ``--model``: ``copy`` (one read and one write of the
gradient itself), ``max abs(g)`` (``torch.linalg.vector_norm(g, inf)``, the first pass of quantize and TernGrad),
``g * 2`` (one read and one write, out of place) and each of ``--compressors``' encode+decode as ``bench`` times it
with ``--graph`` (world size 1, error feedback off; each call captured once as a CUDA graph and its replays timed,
as the committed codec tables were). Plain CUDA events under ``bench``'s repetition policy.

Records of kind ``bench`` (``phase`` ``l2_flush``, ``params`` ``call``, ``flush``, ``round``) go to ``--out`` with
the usual provenance; the table is written beside it (``.md``; ``--report-only`` rewrites it): the memory floor, and
per call and flush the median ms of the rounds and the call against the floor of the same flush and round.
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
from studykit.ddp.hook import replay_fingerprint  # noqa: E402
from studykit.measure import bench  # noqa: E402
from studykit.measure.profile import memory_floor_ms  # noqa: E402
from studykit.measure.records import config_id, make_record  # noqa: E402
from studykit.measure.runtime import CompressorSpec, parse_compressor_specs  # noqa: E402
from studykit.measure.timing import time_fn  # noqa: E402

FLUSHES = ("write", "read", "none")
#: the calls that are not codecs, in the table's order; FLOOR (bench's floor copy) gives each round's memory floor
FLOOR = "floor copy"
PASSES = (FLOOR, "copy", "max abs(g)", "g * 2")
DEFAULT_COMPRESSORS = ("quantize:bits=2", "quantize:bits=4", "quantize:bits=8", "terngrad", "qsgd", "natural", "fp16",
                       "bf16", "signsgd", "ef_signsgd")


def calls(model: str, specs: list[CompressorSpec], device) -> dict:
    """``{label: (fn, timer)}``: the four passes (one kernel each), then each codec's encode+decode (``bench``'s
    ``encdec`` call), on CUDA captured as a CUDA graph whose replays are timed as ``bench --graph`` times them
    (``timer`` ``cuda_graph``); ``timer`` None: the call itself, timed with the policy's timer."""
    numel = M.numel(model)
    x = torch.randn(numel, device=device)
    y = torch.empty_like(x)
    src = torch.ones(bench.FLOOR_COPY_BYTES[device.type == "cuda"] // 4, device=device)
    dst = torch.empty_like(src)
    out = {FLOOR: (lambda: dst.copy_(src), None), "copy": (lambda: y.copy_(x), None),
           "max abs(g)": (lambda: torch.linalg.vector_norm(x, float("inf")), None),
           "g * 2": (lambda: torch.mul(x, 2, out=y), None)}
    per_tensor = [torch.randn(s, device=device) for s in M.param_shapes(model)] if any(
        s.name in bench.LOW_RANK for s in specs) else []
    for spec in specs:
        comp, _, fn = bench.encdec_call(spec, x, per_tensor)
        bench._settle(fn, device)
        graph = bench.capture_call(fn, device, lambda: replay_fingerprint(comp, 0)) if device.type == "cuda" else None
        # the replay reads the compressor's state tensors (its device step): the call keeps them alive
        out[str(spec)] = ((lambda g=graph, _alive=(comp, fn): g.replay()), "cuda_graph") if graph is not None else (fn, None)
    return out


def flush_kw(flush: str, flush_bytes: int, device) -> dict:
    """``time_fn``'s keyword arguments for ``flush``: ``bench``'s own write, a read of as many bytes before every
    call (its ``setup``, untimed), or nothing."""
    if flush == "write":
        return {"flush_bytes": flush_bytes}
    if flush == "none":
        return {"flush_bytes": 0}
    buf = torch.ones(max(1, flush_bytes // 4), dtype=torch.int32, device=device)
    return {"flush_bytes": 0, "setup": lambda: torch.amax(buf)}


def run(args, specs, policy, writer, device) -> None:
    fns = calls(args.model, specs, device)
    timing_kw = policy.timing_kw(device)
    flush_bytes = timing_kw.pop("flush_bytes")
    kws = {f: flush_kw(f, flush_bytes, device) for f in FLUSHES}
    for rnd in range(1, args.rounds + 1):
        order = FLUSHES[(rnd - 1) % 3:] + FLUSHES[:(rnd - 1) % 3]  # each flush first in one round of three
        for label, (fn, timer) in fns.items():
            for flush in order:
                t = time_fn(fn, device=device, **timing_kw, **kws[flush])
                print(f"round {rnd} {label:22s} flush {flush:5s} {t.ms_median:.4f} ms [{t.ms_q25:.4f}-{t.ms_q75:.4f}] "
                      f"n={t.n_iter}", flush=True)
                if writer:
                    params = {"call": label, "flush": flush, "round": rnd}
                    writer.write(make_record("bench", config_id(kind="bench", model=args.model, params=params,
                                                                phase="l2_flush", device_type="cuda"),
                                             timing=t, device=device, model=args.model, params=params,
                                             phase="l2_flush", numel=M.numel(args.model), flush_bytes=flush_bytes,
                                             floor_copy_bytes=bench.FLOOR_COPY_BYTES[device.type == "cuda"],
                                             **dict(policy.fields(device), timer=timer or policy.timer(device))))


# ------------------------------------------------------------------ the table
def floor_ms(records: list[dict]) -> dict:
    """``{(flush, round): ms}``: the memory floor as ``bench`` sets it (8 bytes per element of the gradient at the
    bandwidth of :data:`FLOOR`'s copy), from that copy timed after ``flush`` in ``round``."""
    return {(r["params"]["flush"], r["params"]["round"]):
            memory_floor_ms(r["numel"], 2 * r["floor_copy_bytes"] / (r["ms_median"] * 1e-3) / 1e9)
            for r in records if r["params"]["call"] == FLOOR}


def table(records: list[dict]) -> str:
    """Markdown: the memory floor, then per call each flush's median ms of the rounds and, in brackets, the median
    over the rounds of the call against the floor of the same flush and round; then read / write of the ms."""
    floors = floor_ms(records)
    ms: dict = {}
    x: dict = {}
    timers: dict = {}
    for r in records:
        p = r["params"]
        ms.setdefault((p["call"], p["flush"]), []).append(r["ms_median"])
        if (p["flush"], p["round"]) in floors:
            x.setdefault((p["call"], p["flush"]), []).append(r["ms_median"] / floors[(p["flush"], p["round"])])
        timers.setdefault(p["call"], set()).add(r["timer"])
    for (f, _), t in floors.items():
        ms.setdefault(("memory floor", f), []).append(t)
        x.setdefault(("memory floor", f), []).append(1.0)
    timers["memory floor"] = {f"from `{FLOOR}`"}
    order = ["memory floor"] + [c for c in PASSES[1:] if any(k[0] == c for k in ms)] + sorted(
        {c for c, _ in ms} - set(PASSES) - {"memory floor"})
    head = " | ".join(f"{f}: ms (x floor)" for f in FLUSHES)
    lines = [f"| call | timer | {head} | read / write, ms |", "|---|---|" + "---:|" * (len(FLUSHES) + 1)]
    for call in order:
        cells = []
        for f in FLUSHES:
            t, q = ms.get((call, f)), x.get((call, f))
            cells.append("—" if not t else f"{statistics.median(t):.4f} ({statistics.median(q):.2f})" if q
                         else f"{statistics.median(t):.4f}")
        rw = (f"{statistics.median(ms[(call, 'read')]) / statistics.median(ms[(call, 'write')]):.3f}"
              if ms.get((call, "read")) and ms.get((call, "write")) else "—")
        lines.append(f"| {call} | {', '.join(sorted(timers[call]))} | {' | '.join(cells)} | {rw} |")
    return "\n".join(lines)


def report(out: Path, verbose: bool = True) -> str:
    """The table of the records in ``out``, with where they came from; written to ``out``.md."""
    records = [r for r in bench.records_of(out, "bench", "benchmarks/l2_flush.py") if r.get("phase") == "l2_flush"]
    line = bench.records_line(out, records, lambda r: f"{r['gpu']} ({r['device']}), torch {r['torch']}, "
                                                       f"numel {r['numel']:,}, flush {r['flush_bytes'] // 2**20} MiB")
    rounds = sorted({r["params"]["round"] for r in records})
    text = (f"# The L2 flush before each timed call: written, read or none\n\n{line}\n\n"
            f"Each cell: the median over {len(rounds)} round(s) of the call's median ms, and in brackets the median "
            f"over the rounds of the call against the memory floor as `bench` sets it (8 bytes per element at the "
            f"bandwidth of `{FLOOR}`, bench's 256 MiB copy, timed after the same flush in the same round). "
            f"`benchmarks/l2_flush.py` says what each flush and call is.\n\n{table(records)}\n")
    return bench.write_report(out, text, verbose)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/l2_flush.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50", choices=M.available(), help="whose flat gradient (default resnet50)")
    ap.add_argument("--compressors", nargs="*", default=list(DEFAULT_COMPRESSORS), metavar="NAME[:k=v,...]",
                    help=f"codecs timed after the passes (default: {' '.join(DEFAULT_COMPRESSORS)}; none: only the passes)")
    ap.add_argument("--rounds", type=argtypes.int_range(1, 20), default=3,
                    help="rounds of every call after every flush (default 3: each flush first once)")
    bench.add_candidates_args(ap, report_only=True)
    if bench.candidates_report_only(ap, argv, report):
        return 0
    args = ap.parse_args(argv)
    try:
        specs = parse_compressor_specs(args.compressors) if args.compressors else []
    except ValueError as exc:
        ap.error(str(exc))
    args, policy, writer = bench.start_candidates(ap, argv)
    device, _ = bench.candidates_gpu("l2_flush.py")
    run(args, specs, policy, writer, device)
    if writer:
        report(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
