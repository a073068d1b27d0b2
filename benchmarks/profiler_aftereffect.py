"""Does a finished ``torch.profiler`` session slow later kernel launches? (CUDA only)

    python benchmarks/profiler_aftereffect.py --out reports/benchmarks/profiler_aftereffect.jsonl

Why: when ``benchmarks/codec_repeat.py`` counted the first timing pass's kernels under ``torch.profiler``
before the second pass, the launch-bound codecs (PowerSGD, whose reduce launches hundreds of small kernels)
ran markedly slower in the second pass than in the first, while the bandwidth-bound ones agreed.
PyTorch does not detach CUPTI when a profile ends unless the environment variable
``TEARDOWN_CUPTI=1`` is set (https://github.com/pytorch/pytorch/issues/144455).

Each case runs in a fresh process (the environment must be set before CUDA starts): a launch-bound call
(PowerSGD's reduce on real gradient shapes: rank 32 on BERT-base, rank 4 on ResNet-50; error feedback off, world size 1) is timed
by ``bench``'s repetition policy, then one call runs under ``torch.profiler`` (CUDA activity, as
``bench`` counts kernels), then the same call is timed again. Cases: ``default`` (the environment as it
comes) and ``teardown`` (``TEARDOWN_CUPTI=1``). One record per case and pass (kind ``profiler_aftereffect``,
``phase`` ``before``/``after``, ``mode`` the case) with provenance; the table is printed and written beside
``--out`` (.md). If ``after / before`` is near 1 with ``teardown`` and well above 1 without, every timing
after a profile must either come before it (``bench.count_kernels``) or run with ``TEARDOWN_CUPTI=1``.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES = {"default": {}, "teardown": {"TEARDOWN_CUPTI": "1"}}
#: (model, PowerSGD parameters): rank 32 on BERT-base (the hooks' "host wait"), rank 4 on ResNet-50 (the codec
#: speed target's setting)
WORKLOADS = [("bert_base", {"rank": 32, "error_feedback": False}), ("resnet50", {"rank": 4, "error_feedback": False})]


def child(case: str, out: str, policy) -> None:
    """One case: time, profile one call, time again; two records to ``out``."""
    import math

    import torch

    from studykit import compressors as C
    from studykit import models as M
    from studykit.comm import LocalComm
    from studykit.measure import bench
    from studykit.measure.records import RecordWriter, config_id, make_record

    device = torch.device("cuda:0")
    writer = RecordWriter(out)
    for model, spec in WORKLOADS:
        grads = [torch.randn(s, device=device) for s in M.param_shapes(model) if math.prod(s) > 0]
        comp, comm = C.get("powersgd", **spec), LocalComm()

        def fn():
            return comp.reduce(grads, comm, key=0)

        for _ in range(3):
            fn()
        torch.cuda.synchronize(device)
        for phase in ("before", "after"):
            if phase == "after":
                bench._kernels(fn, device)  # one profiled call, as bench's kernel counts
            t = bench.time_fn(fn, device=device, **policy.timing_kw(device))
            ident = dict(model=model, compressor="powersgd", params=spec, phase=phase, mode=case)
            writer.write(make_record("profiler_aftereffect", config_id(kind="profiler_aftereffect", device_type="cuda",
                                                                       **ident), device=device, timing=t,
                                     env={k: os.environ.get(k) for k in ("TEARDOWN_CUPTI", "DISABLE_CUPTI_LAZY_REINIT")},
                                     **ident, **policy.fields(device)))
            print(f"{case:>9} {model:>9} rank {spec['rank']:>2} {phase:<6} {t.ms_median:8.3f} ms  n={t.n_iter}",
                  flush=True)


def report(out: Path) -> str:
    """The table of the records in ``out``, printed and written beside it (.md)."""
    from studykit.measure.records import load_records

    recs = {(r["mode"], r["model"], r["phase"]): r for r in load_records(out, kind="profiler_aftereffect")}
    rows = ["| case | model | PowerSGD rank | before ms [q25-q75] | after ms [q25-q75] | after / before |",
            "|---|---|---:|---:|---:|---:|"]
    for case in CASES:
        for model, spec in WORKLOADS:
            b, a = recs.get((case, model, "before")), recs.get((case, model, "after"))
            if not (b and a):
                continue
            cell = lambda r: f"{r['ms_median']:.3f} [{r['ms_q25']:.3f}-{r['ms_q75']:.3f}] n={r['n_iter']}"  # noqa: E731
            rows.append(f"| {case} | {model} | {spec['rank']} | {cell(b)} | {cell(a)} | "
                        f"{a['ms_median'] / b['ms_median']:.2f} |")
    any_rec = next(iter(recs.values()), {})
    md = (f"# Kernel launches after a torch.profiler session\n\nRecords: `{out.name}`; device: {any_rec.get('gpu')}; "
          f"torch {any_rec.get('torch')}; kit commit: {any_rec.get('git_commit')}. PowerSGD's reduce on the model's "
          f"gradient shapes (error feedback off, world size 1), timed by bench's repetition policy before and "
          f"after one call under torch.profiler; each case in a fresh process.\n\n" + "\n".join(rows) + "\n")
    out.with_suffix(".md").write_text(md, encoding="utf-8")
    print(md)
    return md


def build_parser() -> argparse.ArgumentParser:
    from studykit.measure import bench

    ap = argparse.ArgumentParser(prog="python benchmarks/profiler_aftereffect.py",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--child", choices=sorted(CASES), help=argparse.SUPPRESS)
    bench.add_policy_args(ap)
    bench.add_output_args(ap, "profiler_aftereffect.jsonl", "table")
    return ap


def main(argv: list[str] | None = None) -> int:
    from studykit.measure import bench
    from studykit.measure.records import load_records

    ap = build_parser()
    args, policy, out = bench.start(ap, argv, report)
    if out is None:  # --report-only
        return 0
    if args.child:
        child(args.child, str(out), policy)
        return 0
    import torch

    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU: CUPTI, the profiler's CUDA tracer, is what is measured")
    done = {r["mode"] for r in load_records(out, kind="profiler_aftereffect", missing_ok=True, quiet=True)
            if r.get("phase") == "after" and r.get("model") == WORKLOADS[-1][0]}
    passed = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--overwrite"]
    for case, env in CASES.items():
        if case in done:  # resumed: this case is measured already
            continue
        subprocess.run([sys.executable, __file__, "--child", case, *passed], env={**os.environ, **env}, check=True)
    report(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
