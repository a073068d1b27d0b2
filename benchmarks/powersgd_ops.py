"""PowerSGD's encode+decode: tensor operations per call and CPU time per call, on real model shapes.

    python benchmarks/powersgd_ops.py                                      # ResNet-50, ResNet-101, BERT-base
    python benchmarks/powersgd_ops.py --models resnet50 --variants default  # a subset
    python benchmarks/powersgd_ops.py --report-only --out FILE.jsonl        # the table of earlier records

On a GPU, PowerSGD rank 4 on ResNet-50's real shapes takes more host time per call (``host_ms``) than
device time: the codec is launch-bound, so what has to fall is the number of operations per call (the
runs before and after the kit cut them: ``data/benchmarks/powersgd_ops_cpu/README.md``). This script counts
them (every aten operation the dispatcher runs, views included: each costs host time, each non-view one a
kernel launch on a GPU) with a ``TorchDispatchMode`` (:func:`count_ops`), and times the call on the CPU.

Per model (``studykit.models.param_shapes``: one gradient tensor per parameter, fp32, world size 1 through
``LocalComm``) and variant of ``compressors.get("powersgd", rank=4, ...)``:

* ``default``: the registered default (error feedback on, warm start);
* ``no_ef``: error feedback off (``encdec`` in ``python -m studykit bench``, what the codec speed target judges);
* ``once_reuse4``: ``orthogonalize="once", reuse=4`` (Han et al. 2024's low-overhead variants);
* ``rank32``: rank 32; ``buckets``, ``rank32_buckets``: rank 4 and 32 called once per DDP bucket, as the kit's
  hook calls it (the iteration's calls together); ``cholesky_buckets``, ``rank32_cholesky_buckets``: the same
  with ``orthogonalize="cholesky"`` (CholeskyQR2 instead of Gram-Schmidt).

The count is the mean over ``reuse`` consecutive calls (one full step and, for ``reuse=4``, three that
reuse P) after warm-up calls; ``ops_by_site`` says where they go: the innermost line of the kit that
issued each operation (``file:function:line source``). The time is :func:`studykit.measure.timing.time_fn`
under ``bench``'s repetition policy (:class:`studykit.measure.bench.RepPolicy`; here at least 20
repetitions and 1 s by default). ``--label`` names the code measured (``mode`` in each record): the
committed records name the code before the op cuts ``before`` (its implementation is kept nowhere but in
git history; ``data/benchmarks/powersgd_ops_cpu/README.md`` names its commit) and ``after``. Records
stream to ``--out`` (JSON Lines with provenance;
a rerun resumes), and the table is written beside it (``.md``).
"""
from __future__ import annotations

import argparse
import collections
import sys
import traceback
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from studykit import compressors, models
from studykit.comm import LocalComm
from studykit.measure import bench
from studykit.measure.records import (
    RecordWriter,
    config_id,
    loadavg_1m,
    make_record,
)
from studykit.measure.timing import time_fn

KIND = "powersgd_ops"
MODELS = ("resnet50", "resnet101", "bert_base")
#: variant -> parameters of ``compressors.get("powersgd", rank=4, **params)`` (``rank`` overrides 4);
#: ``ddp_buckets``: the call is the DDP hook's, one ``reduce`` per DDP bucket (25 MB, ``ddp_bucket_grads``)
VARIANTS = {"default": {}, "no_ef": {"error_feedback": False}, "once_reuse4": {"orthogonalize": "once", "reuse": 4},
            "rank32": {"rank": 32}, "buckets": {"ddp_buckets": True}, "rank32_buckets": {"rank": 32, "ddp_buckets": True},
            "cholesky_buckets": {"orthogonalize": "cholesky", "ddp_buckets": True},
            "rank32_cholesky_buckets": {"rank": 32, "orthogonalize": "cholesky", "ddp_buckets": True}}
RANK = 4
#: calls before counting (the layout cache, the warm-start state and the reuse cycle settle)
SETTLE_CALLS = 5


class _OpCounter(TorchDispatchMode):
    """Counts every aten operation dispatched inside it, by name and by the kit's line that issued it."""

    def __init__(self, sites: bool):
        super().__init__()
        self.ops: collections.Counter = collections.Counter()
        self.views = 0  # operations whose output aliases an input (no kernel on a GPU)
        self.sites: collections.Counter = collections.Counter()
        self._want_sites = sites

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        self.views += bool(func.is_view)
        if self._want_sites:
            kit = [f for f in traceback.extract_stack() if "studykit" in Path(f.filename).parts]
            f = kit[-1] if kit else None
            self.sites["outside the kit" if f is None else
                       f"{Path(f.filename).name}:{f.name}:{f.lineno} {(f.line or '').strip()[:70]}"] += 1
        return func(*args, **(kwargs or {}))


def count_ops(fn, calls: int = 1, sites: bool = False, views: bool = False) -> tuple:
    """Aten operations that ``calls`` calls of ``fn`` dispatch, per call: ``(total, by op name, by site)``
    (the per-call mean; ``sites=True`` also attributes each operation to the kit's innermost line;
    ``views=True`` appends the number of them that are views, ``OpOverload.is_view``)."""
    counter = _OpCounter(sites)
    with counter:
        for _ in range(calls):
            fn()
    per = {k: v / calls for k, v in counter.ops.most_common()}
    out = (sum(counter.ops.values()) / calls, per, {k: v / calls for k, v in counter.sites.most_common()})
    return (*out, counter.views / calls) if views else out


def make_call(variant: str, grads: list[torch.Tensor]):
    """``(compressor, call)`` of ``variant`` on ``grads``: one ``reduce`` over the whole gradient, or (``ddp_buckets``)
    one per DDP bucket as the kit's hook calls it (the bucket's per-parameter views, key = bucket index)."""
    from studykit.compressors.base import copy_back
    from studykit.measure.profile import ddp_bucket_grads

    params = dict(VARIANTS[variant])
    per_bucket = params.pop("ddp_buckets", False)
    comp = compressors.get("powersgd", **{"rank": RANK, **params})
    comm = LocalComm()
    if not per_bucket:
        return comp, lambda: comp.reduce(grads, comm, key="grads")
    buckets = ddp_bucket_grads(grads)

    def call():
        for i, (_, views) in enumerate(buckets):
            copy_back(views, comp.reduce(views, comm, key=i))
    return comp, call


def _grads(model: str) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g) for s in models.param_shapes(model)]


def _cid(model: str, variant: str, label: str) -> str:
    return config_id(kind=KIND, model=model, compressor="powersgd", mode=label, phase=variant,
                     params={"rank": RANK, **VARIANTS[variant]}, device_type="cpu")


def run(model_names, variants, label: str, writer: RecordWriter, *, policy: bench.RepPolicy,
        verbose: bool = True) -> list[dict]:
    """Count and time one ``reduce`` per model and variant; one record each, written as measured."""
    done = writer.done()
    out = []
    for model in model_names:
        todo = [v for v in variants if _cid(model, v, label) not in done]
        if not todo:
            continue
        grads = _grads(model)
        for variant in todo:
            params = VARIANTS[variant]
            comp, call = make_call(variant, grads)
            for _ in range(SETTLE_CALLS):
                call()
            cycle = int(params.get("reuse", 1))
            total, by_op, by_site, n_views = count_ops(call, calls=cycle, sites=True, views=True)
            timing = time_fn(call, device="cpu", **policy.timing_kw("cpu"))
            lay = comp.layout([t.shape for t in grads])
            rec = make_record(KIND, _cid(model, variant, label), device="cpu", timing=timing, model=model,
                              compressor="powersgd", mode=label, phase=variant, params={"rank": RANK, **params},
                              ops_per_call=total, views_per_call=n_views, ops_by_name=by_op, ops_by_site=by_site, calls_counted=cycle,
                              n_tensors=len(grads), n_dense=len(lay.dense), n_groups=len(lay.groups),
                              n_ortho_batches=len(lay.ortho), reps_capped=policy.capped(timing),
                              loadavg_1m=loadavg_1m(), **policy.fields("cpu"))
            if timing.n_iter > bench.RAW_TIMES_MAX:
                rec["times_ms"] = None
            out.append(writer.write(rec))
            if verbose:
                print(f"{label:7s} {model:10s} {variant:12s} {total:7.1f} ops/call  {timing.ms_median:9.3f} ms "
                      f"[{timing.ms_q25:.3f}-{timing.ms_q75:.3f}] n={timing.n_iter}", flush=True)
    return out


# ------------------------------------------------------------------ the tables
def table(records) -> str:
    """Markdown: per model and variant the ops per call and the median ms, before and after."""
    by = {(r["model"], r["phase"], r["mode"]): r for r in records if r.get("kind") == KIND and r.get("status") == "ok"}
    labels = [x for x in ("before", "after") if any(k[2] == x for k in by)]
    labels += sorted({k[2] for k in by} - set(labels))
    head = " | ".join(f"ops/call {x} (not views) | ms {x} [q25-q75] n" for x in labels)
    lines = [f"| model | variant | groups (tensors) | {head} | ops before / after | load 1 min |",
             "|---|---|---:|" + "---:|---|" * len(labels) + "---:|---|"]
    for model in [m for m in MODELS if any(k[0] == m for k in by)] + sorted({k[0] for k in by} - set(MODELS)):
        for variant in [v for v in VARIANTS if (model, v) in {k[:2] for k in by}]:
            recs = [by.get((model, variant, x)) for x in labels]
            some = next(r for r in recs if r is not None)
            cells = []
            for r in recs:
                cells += (["—", "—"] if r is None else
                          [f"{r['ops_per_call']:.0f} ({r['ops_per_call'] - r['views_per_call']:.0f})", f"{r['ms_median']:.1f} [{r['ms_q25']:.1f}-{r['ms_q75']:.1f}] {r['n_iter']}"])
            b, a = by.get((model, variant, "before")), by.get((model, variant, "after"))
            ratio = f"{b['ops_per_call'] / a['ops_per_call']:.2f}" if a and b else "—"
            load = ", ".join("—" if r is None or r.get("loadavg_1m") is None else f"{r['loadavg_1m']:.2f}" for r in recs)
            lines.append(f"| {model} | {variant} | {some['n_groups']} ({some['n_tensors']}) | {' | '.join(cells)} | "
                         f"{ratio} | {load} |")
    return "\n".join(lines)


def sites_table(records, model: str = "resnet50", variant: str = "default", top: int = 25) -> str:
    """Markdown per label: where the operations of one call go (the kit's line that issued them)."""
    parts = []
    for r in records:
        if r.get("kind") != KIND or r.get("status") != "ok" or (r["model"], r["phase"]) != (model, variant):
            continue
        rows = sorted(r["ops_by_site"].items(), key=lambda kv: -kv[1])
        lines = [f"**{r['mode']}** ({r['ops_per_call']:.0f} ops per call; the {top} busiest lines):", "",
                 "| ops/call | where (file:function:line source) |", "|---:|---|"]
        lines += [f"| {n:g} | `{site.replace('|', '/')}` |" for site, n in rows[:top]]
        if len(rows) > top:
            lines.append(f"| {sum(n for _, n in rows[top:]):g} | ({len(rows) - top} other lines) |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def report(out: Path, verbose: bool = True) -> str:
    """The tables of the records in ``out``, with where they came from; written to ``out``.md."""
    records = bench.records_of(out, KIND, "benchmarks/powersgd_ops.py")
    first = records[0]
    facts = sorted({f"{r['cpu']} ({r['num_threads']} torch threads), torch {r['torch']}" for r in records})
    commits = ", ".join(f"{label}: {', '.join(sorted({str(r.get('git_commit')) for r in records if r['mode'] == label}))}"
                        for label in sorted({r["mode"] for r in records}))
    text = (f"# PowerSGD (rank {RANK} unless the variant says): aten operations and CPU time per call\n\n"
            f"Records: `{out.name}` ({len(records)} records); {'; '.join(facts)}; kit commits ({commits}); "
            f"policy: {bench.policy_text(first)}; world size 1 (`LocalComm`).\n\n"
            f"`ops/call`: aten operations dispatched per call (views included), mean over `reuse` consecutive "
            f"calls, in brackets those that are not views (each launches one or more kernels on a GPU); `ms`: median wall time per call on the CPU; `load 1 min`: the machine's load average "
            f"when each was timed.\n\n{table(records)}\n\n## Where they go: ResNet-50, default variant\n\n"
            f"{sites_table(records)}\n")
    return bench.write_report(out, text, verbose)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python benchmarks/powersgd_ops.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=models.available(), metavar="MODEL",
                    help=f"models whose parameter shapes are the gradients (default {' '.join(MODELS)}; any of "
                         f"{', '.join(models.available())})")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                    help="PowerSGD variants (default all: " + "; ".join(f"{k}: {v or 'registered default'}"
                                                                         for k, v in VARIANTS.items()) + ")")
    ap.add_argument("--label", default="after",
                    help="names the code measured (the records' mode; default after; the committed 'before' "
                         "records were taken at commit 531fb59)")
    bench.add_policy_args(ap)
    ap.set_defaults(min_reps=20, budget_s=10.0)
    bench.add_output_args(ap, "powersgd_ops.jsonl", "table")
    return ap


def main(argv: list[str] | None = None) -> int:
    args, policy, out = bench.start(build_parser(), argv, report)
    if out is None:  # --report-only
        return 0
    run(args.models, args.variants, args.label, RecordWriter(out), policy=policy, verbose=not args.quiet)
    report(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
