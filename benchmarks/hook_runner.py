"""The DDP hook's runners side by side: per link rate, model and compressor, the iteration time of the hook on the
communication thread and replayed as per-bucket CUDA graphs (``studykit.ddp.register(..., runner="graph")``),
against the same compressor after the backward pass (post), syncSGD and PyTorch's PowerSGD hook, all from one
campaign's ``ddp`` records (every configuration timed in the same run, on the same machine).

    python benchmarks/hook_runner.py data/measurements/hook_runner/h200_p2            # prints the table
    python benchmarks/hook_runner.py FOLDER --write                                  # also FOLDER/hook_runner.md

The records come from ``scripts/gpu_bandwidth.sh`` with ``HOOK_RUNNER="thread graph"`` (the commands are in
``data/campaigns.toml``). Ratios below 1 mean the first is faster; a hook that overlaps communication with the
backward pass should not be slower than post (ratio <= 1.02 is the kit's target).
"""
import argparse
import sys
from pathlib import Path

from studykit.measure.records import load_records

RUNNERS = ("thread", "inline", "graph")


def _rate(r: dict):
    net = r.get("network") or {}
    return net.get("rate_gbps")


def rows(records: list) -> list[dict]:
    """One row per (rate, model, compressor with params) of the hook records: medians in ms and the ratios."""
    ok = [r for r in records if r.get("kind") == "ddp" and r.get("status") == "ok"]
    by: dict = {}
    for r in ok:
        if _variant(r):  # coalesced, or DDP built another way: a row of :func:`variants` only
            continue
        by[(_rate(r), r["model"], r["mode"], r.get("compressor"), _params(r), r.get("hook_runner") or "thread",
            r.get("bucket_mb"))] = r["ms_median"]
    out = []
    for (rate, model, mode, comp, params, runner, bucket), _ in sorted(
            by.items(), key=lambda kv: (-(kv[0][0] or 1e9), kv[0][1], str(kv[0][3]), kv[0][4], str(kv[0][2:]))):
        if mode != "hook" or runner != "thread" or bucket is not None:
            continue
        row = {"rate": rate, "model": model, "compressor": comp, "params": params,
               "world_size": next(r["world_size"] for r in ok if r["model"] == model),
               "syncsgd": by.get((rate, model, "syncsgd", None, "", "thread", None)),
               "pytorch": by.get((rate, model, "builtin", "torch_powersgd", _params_of_builtin(ok), "thread", None))
               if comp == "powersgd" else None,
               "post": by.get((rate, model, "post", comp, params, "thread", None))}
        for run in RUNNERS:
            row[run] = by.get((rate, model, "hook", comp, params, run, None))
        out.append(row)
    return out


def _variant(r: dict) -> bool:
    """Whether ``r`` is a hook that coalesced buckets or ran in a DDP built otherwise than by default."""
    return (r.get("hook_coalesce_mb") is not None or r.get("broadcast_buffers") is False
            or bool(r.get("gradient_as_bucket_view")))


def hook_label(r: dict) -> str:
    """How a hook record ran: its runner, coalescing and DDP options (e.g. "graph, bucket views, no buffer
    broadcast")."""
    from studykit.measure.crossover import coalesce_text

    parts = [r.get("hook_runner") or "thread"]
    mb = coalesce_text(r.get("hook_coalesce_mb")).strip()
    parts += [mb] if mb else []
    parts += ["bucket views"] if r.get("gradient_as_bucket_view") else []
    parts += ["no buffer broadcast"] if r.get("broadcast_buffers") is False else []
    return ", ".join(parts)


def variants(records: list) -> list[dict]:
    """One row per overlapped hook record (every runner, coalescing and DDP option) beside post of the same rate,
    model and compressor: medians in ms, hook / post and the number of timed iterations of each; the hook's
    ``hook_runner``, ``hook_coalesce_mb``, ``gradient_as_bucket_view`` and ``broadcast_buffers`` (DDP's defaults
    where the record has none) and its label (:func:`hook_label`)."""
    ok = [r for r in records if r.get("kind") == "ddp" and r.get("status") == "ok"]
    post = {(_rate(r), r["model"], r.get("compressor"), _params(r)): r for r in ok if r["mode"] == "post"}
    out = []
    for r in ok:
        if r["mode"] != "hook" or r.get("hook_overlap") is False:
            continue
        p = post.get((_rate(r), r["model"], r.get("compressor"), _params(r)))
        out.append({"rate": _rate(r), "world_size": r.get("world_size"), "model": r["model"],
                    "compressor": r.get("compressor"), "params": _params(r), "hook": hook_label(r),
                    "hook_runner": r.get("hook_runner") or "thread", "hook_coalesce_mb": r.get("hook_coalesce_mb"),
                    "gradient_as_bucket_view": bool(r.get("gradient_as_bucket_view")),
                    "broadcast_buffers": r.get("broadcast_buffers") is not False,
                    "hook_ms": r["ms_median"], "hook_n": r.get("n_iter"),
                    "post_ms": p["ms_median"] if p else None, "post_n": p.get("n_iter") if p else None})
    out.sort(key=lambda x: (-(x["rate"] or 1e9), x["model"], str(x["compressor"]), x["params"], x["hook"]))
    return out


def _params(r: dict) -> str:
    p = r.get("params") or {}
    key = {"powersgd": "rank", "topk": "ratio"}.get(r.get("compressor"))
    return f"{key}={p[key]}" if key in p else ""


def _params_of_builtin(ok: list) -> str:
    return next((_params(r) for r in ok if r.get("compressor") == "torch_powersgd"), "")


def _ms(x) -> str:
    return "" if x is None else f"{x:.1f}"


def _ratio(a, b) -> str:
    return "" if a is None or b is None else f"{a / b:.2f}"


def table(records: list, title: str) -> str:
    """The markdown table of :func:`rows`, with the records' machine and commits."""
    rs, vs = rows(records), variants(records)
    if not vs:
        raise ValueError(f"{title}: no hook records with a runner to compare (scripts/gpu_bandwidth.sh "
                         f"HOOK_RUNNER=\"thread graph\" writes them)")
    any_r = next(r for r in records if r.get("kind") == "ddp")
    commits = sorted({str(r.get("git_commit")) for r in records if r.get("kind") == "ddp"})
    inline = any(r["inline"] is not None for r in rs)
    head = ["rate Gbit/s", "p", "model", "compressor", "syncSGD ms", "post ms", "hook thread ms"] + (
        ["hook inline ms"] if inline else []) + ["hook graph ms", "graph / thread", "graph / post", "thread / post",
                                                  "PyTorch hook ms", "graph / PyTorch"]
    lines = [f"# The hook's runners side by side: {title}", "",
             f"Device: {any_r.get('world_size')} x {any_r.get('gpu')}; torch {any_r.get('torch')}, NCCL "
             f"{any_r.get('nccl')}; kit commits {', '.join(commits)}; median of {any_r.get('n_iter')} timed "
             f"iterations after {any_r.get('n_warmup')} warm-up per configuration; rate: the tc tbf setting "
             f"(`probe.jsonl` has what the link delivered), none: NVLink. Generated by "
             f"`python benchmarks/hook_runner.py FOLDER --write`.", "",
             ]
    if rs:
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---|" + "---:|" * (len(head) - 4)]
    for r in rs:
        cells = [("none" if r["rate"] is None else f"{r['rate']:g}"), str(r["world_size"]), r["model"],
                 f"{r['compressor']} {r['params']}".strip(), _ms(r["syncsgd"]), _ms(r["post"]), _ms(r["thread"])]
        cells += [_ms(r["inline"])] if inline else []
        cells += [_ms(r["graph"]), _ratio(r["graph"], r["thread"]), _ratio(r["graph"], r["post"]),
                  _ratio(r["thread"], r["post"]), _ms(r["pytorch"]), _ratio(r["graph"], r["pytorch"])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Every overlapped hook of the campaign beside post (hook: its runner, coalescing and DDP options; "
              "bucket views: `DDP(gradient_as_bucket_view=True)`; no buffer broadcast: `DDP(broadcast_buffers=False)`, "
              "which the plain model of post does not do either):", "",
              "| rate Gbit/s | p | model | compressor | hook | hook ms (n) | post ms (n) | hook / post |",
              "|---|---|---|---|---|---:|---:|---:|"]
    for v in vs:
        lines.append(f"| {'none' if v['rate'] is None else format(v['rate'], 'g')} | {v['world_size']} | {v['model']} | "
                     f"{v['compressor']} {v['params']}".rstrip() + f" | {v['hook']} | {_ms(v['hook_ms'])} ({v['hook_n']}) | "
                     + ("" if v["post_ms"] is None else f"{_ms(v['post_ms'])} ({v['post_n']})")
                     + f" | {_ratio(v['hook_ms'], v['post_ms'])} |")
    return "\n".join(lines) + "\n"


def report(records_path: Path, verbose: bool = True) -> str:
    """The table of the ``ddp`` records in ``records_path`` (a file or its folder); printed with ``verbose``."""
    path = Path(records_path)
    text = table(load_records(path, quiet=True), (path.parent if path.is_file() else path).name)
    if verbose:
        print(text)
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="campaign folders holding ddp.jsonl")
    ap.add_argument("--write", action="store_true", help="write FOLDER/hook_runner.md (replacing it)")
    args = ap.parse_args(argv)
    for folder in args.folders:
        if not (folder / "ddp.jsonl").is_file():
            ap.error(f"{folder}: no ddp.jsonl there")
        text = report(folder / "ddp.jsonl")
        if args.write:
            (folder / "hook_runner.md").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
