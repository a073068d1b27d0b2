"""What each codec's kernels alone cost, beside its timed call: where a codec misses its speed target, the
measured bound below which no codec built from the same kernels can go. CUDA only.

    python benchmarks/codec_kernels.py --host-ahead                       # default codecs, flat ResNet-50 gradient
    python benchmarks/codec_kernels.py --compressors quantize:bits=8 terngrad --reps 50
    python benchmarks/codec_kernels.py --report-only --out FILE.jsonl     # the table of an earlier (or cut) run

Two passes over the codecs, in one process:

1. each codec's ``encdec`` call (encode + decode, error feedback off, world size 1) timed as ``python -m
   studykit bench`` times it (:func:`studykit.measure.bench.run_codecs`, its repetition policy; records of
   kind ``bench``, with the copy bandwidth and memory floor of this run);
2. then, after every timing (the profiler slows every later launch), the same call ``--reps`` times under
   ``torch.profiler`` (:func:`studykit.measure.bench.kernel_times`): each kernel's median device time
   (records of kind ``codec_kernels``). With ``--graph`` the call is captured as a CUDA graph and its replays are
   profiled, since a capture may run other kernels than an eager call (TopK's selection is picked apart for
   replays); a call that cannot be replayed is profiled eagerly (``profiled``: ``replay`` or ``eager``).

The sum of a codec's kernel medians is what its kernels alone cost: no codec built from these kernels can
be timed below it. What the timed call takes beyond that sum is launch gaps and small waits between
kernels. The table (printed and written beside ``--out`` as ``.md``) gives both against the floor,
and names each codec's largest kernels. Default codecs: every registered codec at its defaults,
``quantize`` at b = 2, 3, 4, 8 and 16, PowerSGD rank 4 with CholeskyQR2; not ATOMO (tens of thousands of
kernels a call) and not PowerSGD with ``reuse`` (its calls alternate).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from studykit import compressors as C  # noqa: E402
from studykit import models as M  # noqa: E402
from studykit.measure import bench  # noqa: E402
from studykit.ddp.hook import replay_fingerprint  # noqa: E402
from studykit.measure.records import RecordWriter, config_id, load_records, make_record  # noqa: E402
from studykit.measure.runtime import CompressorSpec, note, parse_compressor_specs  # noqa: E402

#: left out of the default list: ATOMO launches tens of thousands of kernels a call (one SVD per matrix)
SKIP = ("atomo",)
EXTRA = [CompressorSpec("quantize", (("bits", b),)) for b in (2, 3, 4, 16)] + [
    CompressorSpec("powersgd", (("orthogonalize", "cholesky"),))]


def default_specs() -> list[CompressorSpec]:
    """Every registered codec at its defaults (not :data:`SKIP`), then :data:`EXTRA`."""
    return [CompressorSpec(n, ()) for n in C.available() if n not in SKIP] + EXTRA


def measure(specs, out: Path, device, model: str, policy, reps: int, verbose: bool, reference: bool = False) -> None:
    """Pass 1 (timings) then pass 2 (kernel profiles) into ``out``; resumes both. With ``reference`` each codec
    is also timed and profiled with ``STUDYKIT_FAST=0`` (mode ``<layout>:reference``); both passes set
    ``STUDYKIT_FAST`` themselves, so the one in the environment changes nothing."""
    import torch

    writer = RecordWriter(out)
    bench.run_codecs(specs, writer, device=device, model=model, policy=policy, split=False, extras=False,
                     phases=("encdec",), kernels=False, verbose=verbose, reference=reference)
    done = writer.done()
    shapes = [tuple(s) for s in M.param_shapes(model)]
    flat, per_tensor = bench.codec_inputs(shapes, device)
    for spec, fast in ((s, f) for s in specs for f in ((True, False) if reference else (True,))):
        with bench._fast_paths(fast):
            _profile_one(spec, fast, flat, per_tensor, writer, done, device, model, policy, reps, verbose)
        torch.cuda.empty_cache()


def _profile_one(spec, fast: bool, flat, per_tensor, writer, done, device, model, policy, reps, verbose) -> None:
    """One codec's kernel profile (pass 2) with the fast paths ``fast``, unless ``done`` has it."""
    comp, layout, fn = bench.encdec_call(spec, flat, per_tensor)
    params = bench.effective_params(comp)
    mode = f"{layout}:{'fast' if fast else 'reference'}"
    ident = dict(model=model, compressor=spec.name, params=params, phase="encdec", mode=mode)
    cid = config_id(kind="codec_kernels", device_type=device.type, **ident)
    if cid in done:
        return
    try:
        call, profiled = fn, "eager"
        if policy.graph:  # the kernels a replay runs (a capture may choose otherwise than an eager call)
            fn()  # eager first, as the timing pass did: the picks a capture replays
            graph = bench.capture_call(fn, device, lambda: replay_fingerprint(comp, 0))
            if graph is not None:
                call, profiled = graph.replay, "replay"
        kernels = bench.kernel_times(call, device, reps=reps, flush_bytes=policy.flush_for(device))
        rec = make_record("codec_kernels", cid, device=device, reps=reps, kernels=kernels, n_kernels=len(kernels),
                          ms_kernels=sum(k["us_median"] for k in kernels) / 1e3, profiled=profiled, **ident)
    except (ValueError, RuntimeError) as exc:
        rec = make_record("codec_kernels", cid, device=device, status="error", reps=reps,
                          reason=f"{type(exc).__name__}: {exc}"[:500], **ident)
    writer.write(rec)
    note(f"{spec.name:>13} {bench._params_str(params)[:40]:<40} {mode:<15} "
         + (f"{rec['n_kernels']:4d} kernels {rec['ms_kernels']:.4f} ms" if rec["status"] == "ok"
            else rec["reason"][:80]), verbose)


def _codec_cell(r: dict) -> str:
    """The codec's name, and "(reference)" for its plain-PyTorch rows (``--reference``)."""
    return r["compressor"] + (" (reference)" if str(r.get("mode", "")).endswith(":reference") else "")


def _key(r: dict) -> tuple:
    return r.get("compressor"), bench._params_str(r.get("params")), r.get("mode")


def report(out: Path, verbose: bool = True, write: bool = True) -> str:
    """The table of ``out``'s records: per codec its timed call and the sum of its kernels, each against the
    floor, and its three largest kernels; printed (``verbose``) and written beside ``out`` (.md; ``write``)."""
    recs = load_records(out, quiet=True)
    timed = {_key(r): r for r in recs if r.get("kind") == "bench" and r.get("status") == "ok"}
    kern = [r for r in recs if r.get("kind") == "codec_kernels"]
    if not kern:
        raise bench.RecordError(f"{out}: no codec_kernels records (written by benchmarks/codec_kernels.py)")
    floor = next((r["floor_ms"] for r in timed.values()), None)
    rows = ["| codec | params | timed ms (x floor) | kernels | kernels alone ms (x floor) | timed - kernels ms | "
            "largest kernels: us (share of the kernels' time) |", "|---|---|---:|---:|---:|---:|---|"]
    for k in kern:
        t = timed.get(_key(k))
        cell_t = f"{t['ms_median']:.4f} ({t['ms_median'] / t['floor_ms']:.2f})" if t else "not timed"
        if k.get("status") != "ok":
            rows.append(f"| {_codec_cell(k)} | {bench._params_str(k['params'])} | {cell_t} | | {k['reason'][:80]} | | |")
            continue
        total = k["ms_kernels"]
        top = sorted(k["kernels"], key=lambda x: -x["us_median"])[:3]
        names = "; ".join(f"{x['name'][:48]}: {x['us_median']:.1f} ({100 * x['us_median'] / 1e3 / total:.0f} %)"
                          for x in top)
        cell_k = (f"{total:.4f} ({total / floor:.2f})" if floor else f"{total:.4f}") + (
            ", replayed" if k.get("profiled") == "replay" else "")
        gap = f"{t['ms_median'] - total:.4f}" if t else ""
        rows.append(f"| {_codec_cell(k)} | {bench._params_str(k['params'])} | {cell_t} | {k['n_kernels']} | "
                    f"{cell_k} | {gap} | {names} |")
    any_k = kern[0]
    head = (f"# What each codec's kernels alone cost\n\nRecords: `{out.name}`; device: {any_k.get('gpu')}; "
            f"torch {any_k.get('torch')}; kit commit: {any_k.get('git_commit')}; {any_k.get('reps')} profiled calls "
            f"per codec, the L2 flushed before each; floor {floor:.4f} ms (one read and one write of the fp32 "
            f"gradient at this run's copy bandwidth). Timed: `bench`'s encode+decode, "
            f"{bench.policy_text(next(iter(timed.values()))) if timed else 'not timed'}.\n\n") if floor else (
            f"# What each codec's kernels alone cost\n\nRecords: `{out.name}` (no timings).\n\n")
    text = head + "\n".join(rows) + "\n"
    if not write:
        return text
    return bench.write_report(out, text, verbose)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python benchmarks/codec_kernels.py", description=__doc__.split("\n")[0])
    ap.add_argument("--compressors", nargs="*", default=None, metavar="NAME[:k=v,...]",
                    help="codecs (default: every registered one at its defaults but ATOMO, quantize at b = 2, 3, 4, "
                         "8, 16, PowerSGD rank 4 with CholeskyQR2)")
    ap.add_argument("--model", default="resnet50", choices=M.available(), help="whose gradient (default resnet50)")
    ap.add_argument("--reps", type=int, default=20, help="profiled calls per codec (default 20)")
    ap.add_argument("--reference", action="store_true",
                    help="also time and profile each codec with its fast paths off (STUDYKIT_FAST=0; rows of mode "
                         "<layout>:reference), side by side with the fast ones")
    bench.add_policy_args(ap)
    bench.add_output_args(ap, "codec_kernels.jsonl", "table")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args, policy, out = bench.start(ap, argv, report)
    if out is None:  # --report-only
        return 0
    if args.reps < 1:
        ap.error(f"--reps must be >= 1, got {args.reps}")
    import torch

    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU: the kernels' device times come from the profiler's CUDA tracer")
    try:
        specs = parse_compressor_specs(args.compressors) if args.compressors else default_specs()
    except ValueError as exc:
        ap.error(str(exc))
    measure(specs, out, torch.device("cuda:0"), args.model, policy, args.reps, not args.quiet, args.reference)
    report(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
