"""Builders of the generated blocks about the kit's DDP hook runs (``data/measurements/hook_runner/``): the runners
side by side (:func:`hook_runners_block`) and the hook in a DDP built like post's plain model
(:func:`hook_views_block`), from ``benchmarks/hook_runner.py``'s rows. Named in
:data:`studykit.nbtools.datacli.BUILDERS` like those of :mod:`studykit.nbtools.readme_blocks`."""
from __future__ import annotations

from pathlib import Path

from studykit import paths


def hook_runners_block(campaigns: list) -> str:
    """The hook's runners side by side over the ``hook_runner`` campaigns ``campaigns`` (data-relative folders of
    ``ddp`` records, ``benchmarks/hook_runner.py``'s rows): per compressor, in how many configurations (world size,
    rate, model) the graph runner beat the thread, the range of graph / thread, graph / post and graph / PyTorch's
    hook, and whether any graph hook met the kit's target of at most 1.02x post."""
    from studykit.nbtools.datacli import _module

    from studykit.measure.records import load_records

    bench = _module("benchmarks/hook_runner.py")
    rows = [r for c in campaigns for r in bench.rows(load_records(paths.DATA / c / "ddp.jsonl", quiet=True))]
    out = ["| compressor | configurations | graph faster than thread | graph / thread | graph / post | "
           "graph / PyTorch's hook | graph <= 1.02 x post |", "|---|---:|---:|---:|---:|---:|---:|"]

    def span(xs):
        return f"{min(xs):.2f}-{max(xs):.2f}" if xs else ""

    for comp in sorted({(r["compressor"], r["params"]) for r in rows}):
        both = [r for r in rows if (r["compressor"], r["params"]) == comp and r["graph"] and r["thread"]]
        post = [r["graph"] / r["post"] for r in both if r["post"]]
        torch_ = [r["graph"] / r["pytorch"] for r in both if r["pytorch"]]
        out.append(f"| {comp[0]} {comp[1]} | {len(both)} | {sum(r['graph'] < r['thread'] for r in both)} | "
                   f"{span([r['graph'] / r['thread'] for r in both])} | {span(post)} | {span(torch_)} | "
                   f"{sum(x <= 1.02 for x in post)} of {len(post)} |")
    return "\n".join(out) + "\n"



def hook_views_block(campaigns: list, limit: float = 1.02) -> str:
    """The kit's hook in a DDP built like post's plain model (gradients as bucket views, no buffer broadcast) against
    post, over the ``hook_runner`` campaigns ``campaigns`` (``benchmarks/hook_runner.py``'s :func:`variants`): one
    row per campaign (its folder's name), world size, model and compressor, hook / post per link rate, then how
    many of them are at most ``limit``."""
    from studykit.measure.records import load_records
    from studykit.nbtools.datacli import _module

    bench = _module("benchmarks/hook_runner.py")
    by = {}
    for c in campaigns:
        for v in bench.variants(load_records(paths.DATA / c / "ddp.jsonl", quiet=True)):
            if v["post_ms"] and v["gradient_as_bucket_view"] and not v["broadcast_buffers"]:
                key = (Path(c).name, v["world_size"], v["model"], f"{v['compressor']} {v['params']}".strip(), v["rate"])
                by[key] = v["hook_ms"] / v["post_ms"]
    if not by:
        raise ValueError(f"hook_views: no hook records on bucket views without the buffer broadcast in {campaigns}")
    rates = sorted({k[-1] for k in by if k[-1] is not None})
    out = ["| run | p | model | compressor | " + " | ".join(f"{r:g} Gbit/s" for r in rates) + " |",
           "|---|---:|---|---|" + "---:|" * len(rates)]
    for run, p, model, comp in sorted({k[:4] for k in by}, key=lambda k: (k[1], k[2], k[3], k[0])):
        cells = [by.get((run, p, model, comp, r)) for r in rates]
        out.append(f"| {run} | {p} | {model} | {comp} | "
                   + " | ".join("" if x is None else f"{x:.2f}" for x in cells) + " |")
    met = sum(x <= limit for x in by.values())
    return ("\n".join(out) + f"\n\nhook / post, medians of 30 timed iterations after 10 warm-up each; at most "
            f"{limit:g}: {met} of {len(by)}.\n")
