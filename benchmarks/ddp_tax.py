"""What DistributedDataParallel itself costs an iteration beside the plain model, and which of its options remove it.

The kit's post-backward path trains the plain model and runs the compressor after ``backward()``; its hook runs
inside DDP. Where a hook is slower than post even without overlap (a hook coalesced into one protocol run at the
end of the backward pass does exactly post's work), the difference is DDP's own. This script times, side by side
in one run (every configuration 30 iterations after 10 warm-up, the max over ranks per iteration, the median
reported):

* ``plain``: the plain model, no communication (the floor);
* ``post none`` / ``post <compressor>``: the plain model, then :class:`studykit.ddp.PostBackwardReducer`;
* ``ddp``: DDP's own all-reduce, with DDP's defaults, with ``gradient_as_bucket_view=True``, without the buffer
  broadcast, and with both;
* ``hook <compressor>``: the kit's hook (graph runner) per bucket and coalesced per iteration, with DDP's defaults
  and with both options.

    python -m torch.distributed.run --standalone --nproc-per-node 2 benchmarks/ddp_tax.py \\
        --models resnet50 bert_base --out ddp_tax.jsonl      # then: python benchmarks/ddp_tax.py --table ddp_tax.jsonl

Each configuration is one JSON line with the kit's provenance (``studykit.measure.records.provenance``). ``--table``
prints the markdown table of a file (``--write`` also writes it next to the file as ``ddp_tax.md``).
"""
import argparse
import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIGS = ("plain", "post none", "post C", "ddp", "ddp gabv", "ddp nobuf", "ddp gabv nobuf",
           "hook C", "hook C c0", "hook C gabv nobuf", "hook C c0 gabv nobuf")


def _build(name: str, model, d, comp_name: str, comp_kw: dict):
    """(forward module, after-backward callable or None, hook state or None) of configuration ``name``."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from studykit import ddp as sk_ddp

    words = name.split()
    comp = None if len(words) < 2 else ("none" if words[1] == "none" else comp_name)
    if words[0] == "plain":
        return model, None, None
    if words[0] == "post":
        reducer = sk_ddp.PostBackwardReducer(model, comp, **(comp_kw if comp != "none" else {}))
        return model, reducer.reduce, None
    kw = {"device_ids": [d.device.index] if d.device.type == "cuda" else None}
    if "gabv" in words:
        kw["gradient_as_bucket_view"] = True
    if "nobuf" in words:
        kw["broadcast_buffers"] = False
    net = DDP(model, **kw)
    if words[0] == "ddp":
        return net, None, None
    state = sk_ddp.register(net, comp, runner="graph" if d.device.type == "cuda" else "thread",
                            coalesce_mb=0 if "c0" in words else None, **comp_kw)
    return net, None, state


def run(argv=None) -> int:
    import torch

    from studykit import compressors as C
    from studykit import models as M
    from studykit.measure.records import provenance
    from studykit.measure.runtime import init_dist, finish_dist
    from studykit.measure.timing import time_fn

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["resnet50", "bert_base"], choices=M.available())
    ap.add_argument("--compressor", default="powersgd:rank=4", help="NAME[:k=v,...] for the post and hook rows")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--out", type=Path, required=True, help="JSON lines, appended")
    args = ap.parse_args(argv)
    from studykit.measure.runtime import parse_compressor_specs
    (spec,) = parse_compressor_specs([args.compressor])
    C.get(spec.name, **spec.kwargs)  # a bad name or parameter fails here, before any GPU work
    d = init_dist(require_group=True)
    ok = False
    try:
        for model_name in args.models:
            torch.manual_seed(0)
            base = M.build(model_name).to(d.device).train()
            batch = M.example_batch(model_name, M.default_batch(model_name), d.device)
            for name in args.configs:
                model = copy.deepcopy(base)
                fwd, after, state = _build(name.replace("C", spec.name), model, d, spec.name, spec.kwargs)
                opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

                def step():
                    opt.zero_grad(set_to_none=True)
                    M.loss(model_name, fwd, batch).backward()
                    if after is not None:
                        after()
                    opt.step()

                t = time_fn(step, n_iter=args.iters, n_warmup=args.warmup, device=d.device, agree=d.agree_max)
                if state is not None:
                    state.close()
                if d.is_main:
                    rec = {"kind": "ddp_tax", "model": model_name, "batch_size": M.default_batch(model_name),
                           "config": name, "compressor": args.compressor, "world_size": d.world_size,
                           "ms_median": t.ms_median, "ms_q25": t.ms_q25, "ms_q75": t.ms_q75, "times_ms": list(t.times_ms),
                           "n_iter": args.iters, "n_warmup": args.warmup, **provenance(d.device)}
                    with open(args.out, "a", encoding="utf-8") as f:
                        f.write(json.dumps(rec) + "\n")
                    print(f"{model_name:12s} {name:22s} {rec['ms_median']:8.2f} ms", flush=True)
                del fwd, model, opt, state, step
        ok = True
    finally:
        finish_dist(d, ok)
    return 0


def table(path: Path) -> str:
    """The markdown table of a ``ddp_tax`` file: per model, every configuration's median and its ratio to post."""
    from studykit.measure.records import load_records

    recs = load_records(path, kind="ddp_tax", quiet=True)
    if not recs:
        raise SystemExit(f"{path}: no ddp_tax records")
    r0 = recs[0]
    lines = [f"# What DDP costs beside the plain model: {path.parent.name}", "",
             f"Device: {r0['world_size']} x {r0.get('gpu')}; torch {r0.get('torch')}, NCCL {r0.get('nccl')}; kit "
             f"commit {r0.get('git_commit')}; compressor `{r0['compressor']}` (C); median of {r0['n_iter']} timed "
             f"iterations after {r0['n_warmup']} warm-up, the max over ranks per iteration. gabv: DDP("
             f"gradient_as_bucket_view=True); nobuf: DDP(broadcast_buffers=False); c0: the hook coalesced into one "
             f"protocol run per iteration; hooks on the graph runner. Generated by "
             f"`python benchmarks/ddp_tax.py --table FILE --write`.", "",
             "| model | configuration | ms | / post none | / post C |", "|---|---|---:|---:|---:|"]
    by = {(r["model"], r["config"]): r["ms_median"] for r in recs}
    for model in dict.fromkeys(r["model"] for r in recs):
        pn, pc = by.get((model, "post none")), by.get((model, "post C"))
        for cfg in CONFIGS:
            ms = by.get((model, cfg))
            if ms is None:
                continue
            lines.append(f"| {model} | {cfg} | {ms:.1f} | {'' if pn is None else f'{ms / pn:.2f}'} | "
                         f"{'' if pc is None else f'{ms / pc:.2f}'} |")
    return "\n".join(lines) + "\n"


def report(records_path, verbose: bool = False) -> str:
    """:func:`table` of ``records_path`` (a ``ddp_tax`` JSON-lines file), printed with ``verbose``."""
    text = table(Path(records_path))
    if verbose:
        print(text)
    return text


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--table":
        text = table(Path(sys.argv[2]))
        print(text)
        if "--write" in sys.argv[3:]:
            (Path(sys.argv[2]).parent / "ddp_tax.md").write_text(text, encoding="utf-8")
        sys.exit(0)
    sys.exit(run())
