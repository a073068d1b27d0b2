"""Does a rerun agree? Every codec timed twice in one process, both medians side by side.

    python benchmarks/codec_repeat.py                                   # every codec, flat ResNet-50 gradient, GPU if any
    python benchmarks/codec_repeat.py --device cpu --model mlp_large --compressors fp16 signsgd topk powersgd
    python benchmarks/codec_repeat.py --report-only --out FILE.jsonl    # the tables of an earlier (or cut) run

The codec timing of ``python -m studykit bench`` (:func:`studykit.measure.bench.run_codecs`, with
its repetition policy: at least ``--min-reps`` repetitions and ``--min-time-s`` seconds of timed
calls, whichever is more, the L2 flushed before each on CUDA) runs twice over the same
codecs: the whole list once (``repeat`` 1), then the whole list again (``repeat`` 2) (the slow ones, ATOMO, of
both passes after all the others), each pass
with its own copy-bandwidth measurement and memory floor. Records stream to ``--out`` (JSON
Lines, provenance-stamped, ``repeat`` in every record and in its ``config_id``); a rerun with the
same ``--out`` resumes where a cut run stopped (``--overwrite`` starts afresh).

At the end (and with ``--report-only``, from the file alone) it prints and writes beside
``--out`` (same name, ``.md``; and a summary into the block of ``README.md`` beside it between
:data:`README_MARKERS`, where it has them) two tables from :func:`studykit.measure.bench.compare_runs`:
per configuration both medians with their interquartile ranges and n, their ratio and whether
they agree within 10 % (:data:`studykit.measure.bench.AGREE_TOL`); and the codecs' speed targets
(:data:`studykit.measure.bench.SPEED_TARGETS`, the worst of the two runs judged), PASS/MISS on
ResNet-50 on a GPU, reported but not judged elsewhere.

Default codecs: every registered compressor with its default parameters, ``quantize`` at every
b it accepts (2..16 today; the elementwise target holds at every b), PowerSGD's low-overhead variants
(:data:`VARIANTS`: one Gram-Schmidt pass, the subspace reused for 4 steps, both), the slow
ATOMO last (so a run cut by its deadline loses least), with its exact SVD then ``svd=gram``. Default phase:
``encdec`` (encode+decode, the number the targets judge).
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
from studykit.measure.records import RecordError, RecordWriter, load_records  # noqa: E402
from studykit.measure.runtime import CompressorSpec, parse_compressor_specs, pick_device  # noqa: E402

#: two passes over the codecs: two runs should agree within 10 % (:data:`studykit.measure.bench.AGREE_TOL`)
RUNS = (1, 2)
#: run last: ATOMO's exact SVD is by far the slowest codec call
SLOW_LAST = ("atomo",)
#: timed after a codec's defaults: PowerSGD's low-overhead options (Han et al. 2024, https://arxiv.org/abs/2407.01378,
#: the PowerSGD case study; ``studykit.compressors.lowrank.PowerSGD``): one Gram-Schmidt pass, the P subspace reused.
#: With ``reuse=4`` three calls in four skip the P round: the median is the cheap call, the IQR shows both.
#: ATOMO's SVD from the eigendecomposition of the smaller Gram matrix (``studykit.compressors.lowrank.Atomo``,
#: ``svd="gram"``), timed after the exact SVD.
VARIANTS = {"powersgd": [(("orthogonalize", "once"),), (("reuse", 4),), (("orthogonalize", "once"), ("reuse", 4)),
                         (("orthogonalize", "cholesky"),)],
            "atomo": [(("svd", "gram"),)]}


def _accepted_bits(name: str, candidates=range(1, 33)) -> list[int]:
    """The ``bits`` values compressor ``name`` accepts (asked of the compressor, not copied here)."""
    ok = []
    for b in candidates:
        try:
            C.get(name, bits=b)
        except (ValueError, TypeError):
            continue
        ok.append(b)
    return ok


def default_specs() -> list[CompressorSpec]:
    """Every registered codec at its defaults, quantize at every b it accepts, the slow ones last."""
    specs = []
    for name in C.available():
        if name == "quantize":
            specs += [CompressorSpec("quantize", (("bits", b),)) for b in _accepted_bits(name)]
        else:
            specs.append(CompressorSpec(name, ()))
        specs += [CompressorSpec(name, v) for v in VARIANTS.get(name, [])]
    return sorted(specs, key=lambda s: s.name in SLOW_LAST)  # stable: registry order otherwise


#: a run folder's README.md may hold a block between these markers: :func:`report` rewrites it (summary_block)
README_MARKERS = ("<!-- codecs-summary:begin -->\n", "<!-- codecs-summary:end -->")


def _names(rows, compared) -> str:
    """`codec` per row, with the parameters that tell its settings in ``compared`` apart (e.g. quantize's bits)."""
    def split(params: str) -> dict:
        return dict(kv.split("=", 1) for kv in params.split(",") if "=" in kv) if isinstance(params, str) else {}

    out = []
    for _, r in rows.iterrows():
        same = [split(p) for p in compared.loc[compared["compressor"] == r["compressor"], "params"]]
        mine = split(r.get("params"))
        varying = [k for k in mine if len({d.get(k) for d in same}) > 1]
        out.append(f"`{r['compressor']}`" + (f" ({','.join(f'{k}={mine[k]}' for k in varying)})" if varying else ""))
    return "; ".join(out) or "none"


def summary_block(agreement: str, targets: str, compared, target_table) -> str:
    """The README's summary of a run: the closing lines of each table in ``codecs.md`` (the agreement count and,
    where the records say, how many were host-bound), copied verbatim, and the configurations behind them (those
    whose runs disagree, those that PASS), from the same tables."""
    disagree = compared[compared["agree"].eq(False)] if "agree" in compared.columns else compared.iloc[:0]
    passed = target_table[target_table["verdict"] == "PASS"] if len(target_table) else target_table
    paragraphs = agreement.split("\n\n")  # the table, then its closing lines
    tail = paragraphs[-1].splitlines() if len(paragraphs) > 1 else agreement.splitlines()[-1:]
    return (f"- {tail[0]}\n" + "".join(f"  {line}\n" for line in tail[1:])
            + f"  Not within 10 %: {_names(disagree, compared)}.\n"
            f"- {targets.splitlines()[-1]}\n  PASS: {_names(passed, compared)}.\n")


def _refresh_readme(folder: Path, block: str) -> None:
    """Rewrite the marked block of ``folder``/README.md, where the README has the markers."""
    readme = folder / "README.md"
    if not readme.exists():
        return
    text = readme.read_text(encoding="utf-8")
    a, b = README_MARKERS
    if a in text and b in text:
        readme.write_text(text[:text.index(a) + len(a)] + block + text[text.index(b):], encoding="utf-8")


def report(out: Path, verbose: bool = True) -> tuple[str, str]:
    """The agreement table and the speed-target table of the records in ``out``; written to ``out``.md, and
    their summary (:func:`summary_block`) into the marked block of the README.md beside ``out``, if it has one."""
    records = load_records(out, quiet=True)
    runs = bench.split_repeats(records)
    if not runs:
        raise RecordError(f"{out}: no bench records (written by benchmarks/codec_repeat.py)")
    compared = bench.compare_runs(runs[:2])
    agreement = bench.compare_markdown(compared)
    target_table = bench.speed_targets(compared)
    targets = bench.speed_targets_markdown(target_table)
    commits = sorted({str(r.get("git_commit")) for r in records})
    devices = sorted({f"{r.get('gpu')} ({r.get('device')})" for r in records if r.get("kind") == "bench"})
    head = (f"# Codec timing, run twice in one process\n\nRecords: `{out.name}` ({len(records)} records, "
            f"{len(runs)} run(s)); device: {', '.join(devices)}; kit commit: {', '.join(commits)}.\n")
    text = (f"{head}\n## Both runs side by side (median ms [q25-q75] n)\n\n{agreement}\n\n"
            f"## The speed targets (studykit.measure.bench.SPEED_TARGETS)\n\n{targets}\n")
    out.with_suffix(".md").write_text(text, encoding="utf-8")
    _refresh_readme(out.parent, summary_block(agreement, targets, compared, target_table))
    if verbose:
        print(text)
    return agreement, targets


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python benchmarks/codec_repeat.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto", help="auto (GPU if any), cpu, cuda, cuda:N")
    ap.add_argument("--model", default="resnet50", choices=M.available(),
                    help="whose gradient (default resnet50: 25.6 M fp32, flat; low-rank codecs on its shapes)")
    ap.add_argument("--compressors", nargs="+", default=None, metavar="NAME[:k=v,...]",
                    help="codecs to time (default: every registered one, quantize at every b, ATOMO last)")
    ap.add_argument("--phases", nargs="+", default=["encdec"], choices=bench.PHASES, metavar="PHASE",
                    help=f"phases to time (default encdec; any of {' '.join(bench.PHASES)})")
    ap.add_argument("--components", action="store_true",
                    help="also time the building blocks (torch.topk alone, THC's rotation, ...) in the first run")
    bench.add_policy_args(ap)
    bench.add_output_args(ap, "codec_repeat.jsonl", "tables")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args, policy, out = bench.start(ap, argv, report)
    if out is None:  # --report-only
        return 0
    try:
        device = pick_device(args.device)
        specs = parse_compressor_specs(args.compressors) if args.compressors else default_specs()
    except ValueError as exc:
        ap.error(str(exc))
    if (policy.host_ahead or policy.graph) and device.type != "cuda":
        ap.error(f"--{'host-ahead' if policy.host_ahead else 'graph'} needs a CUDA device, got {device}")
    writer = RecordWriter(out)
    # the slow codecs (ATOMO's SVD) of both runs go after every other codec of both runs: codecs timed right
    # after ATOMO were seen to disagree between the two runs
    fast = [s for s in specs if s.name not in SLOW_LAST]
    slow = [s for s in specs if s.name in SLOW_LAST]
    passes = [(run, fast) for run in RUNS] + [(run, slow) for run in RUNS if slow]
    deferred: list = []  # the kernel counts go after every pass: the profiler slows every launch after it
    for run, todo in passes:
        if not todo:
            continue
        print(f"== run {run} of {len(RUNS)}: {len(todo)} codec settings on {args.model}, {device}", flush=True)
        bench.run_codecs(todo, writer, device=device, model=args.model, policy=policy, phases=args.phases,
                         extras=args.components and run == RUNS[0] and todo is fast, repeat=run,
                         deferred=deferred, verbose=not args.quiet)
    if deferred:
        print(f"== kernel counts of {len(deferred)} timings (torch.profiler, after every timing)", flush=True)
        bench.count_kernels(deferred, writer)
    report(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
