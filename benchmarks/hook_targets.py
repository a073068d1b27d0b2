"""Where the kit's DDP hook stands against its speed targets, over every committed ``ddp`` record: the overlapped
hook against the same compressor after the backward pass (post), the kit's PowerSGD rank-4 hook against syncSGD
over NVLink and against PyTorch's PowerSGD hook, the kit's fp16 hook against PyTorch's fp16 hook.

    python benchmarks/hook_targets.py                      # prints the scoreboard (data/measurements)
    python benchmarks/hook_targets.py FOLDER ... --write   # also benchmarks/hook_targets.md

The pairs are :func:`studykit.measure.report.hook_vs_post`'s and :func:`~studykit.measure.report.hook_targets`'s,
taken file by file (a campaign pairs its own records), per hook runner (thread, graph) and coalescing setting. A
pair is judged only when both records have at least ``--min-iter`` timed iterations (30: fewer leave spreads that
look like effects); the shorter pairs are counted beside.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import pandas as pd

from studykit import paths
from studykit.measure import report as R
from studykit.measure.records import load_records

#: the targets against a reference other than post (the hook against post is judged at POST_LIMIT)
TARGETS = (
    R.HookTarget("powersgd vs syncSGD", "powersgd", (("rank", 4),), "syncsgd", None, (), 1.1,
                 "PowerSGD r4 hook <= 1.1 x syncSGD over NVLink"),
    R.HookTarget("powersgd vs PyTorch's", "powersgd", (("rank", 4),), "builtin", "torch_powersgd", (("rank", 4),),
                 1.0, "PowerSGD r4 hook <= PyTorch's PowerSGD hook"),
    R.HookTarget("fp16 vs PyTorch's", "fp16", (), "builtin", "torch_fp16", (), 1.03,
                 "fp16 hook <= 1.03 x PyTorch's fp16 hook"),
)
POST_LIMIT = 1.02
POST_TEXT = f"hook <= {POST_LIMIT} x post"


def _shown(path) -> str:
    """``path`` relative to the repository where it lies inside it."""
    p = Path(path)
    return str(p.relative_to(paths.ROOT)) if p.is_absolute() and p.is_relative_to(paths.ROOT) else str(p)


def pairs(records: list[dict], source: str = "") -> pd.DataFrame:
    """The judged pairs of one campaign's records: target text, the kit hook's label, ratio, the fewer timed
    iterations of the two records, limit, and where (model, GPUs, rate, ``source``)."""
    rows = []
    vp = R.hook_vs_post(records)
    for _, r in vp.iterrows():
        rows.append({"target": POST_TEXT, "hook": r["label"], "ratio": r["ratio"], "limit": POST_LIMIT,
                     "n": min(int(r["hook_n"] or 0), int(r["post_n"] or 0)), "model": r["model"],
                     "world_size": r["world_size"], "rate_gbps": r["rate_gbps"], "source": source})
    hooks = [r for r in records if r.get("kind") == "ddp" and r.get("mode") == "hook"]
    settings = {(r.get("hook_runner") or "thread", r.get("hook_coalesce_mb")) for r in hooks}
    for runner, mb in sorted(settings, key=lambda s: (s[0], s[1] is not None, s[1] or 0)):
        for shaped in (False, True):
            t = R.hook_targets(records, TARGETS, coalesce_mb=mb, shaped=shaped, runner=runner)
            for _, r in t[t["verdict"] != "NOT MEASURED"].iterrows():
                if shaped and r["target"] == "powersgd vs syncSGD":
                    continue  # over NVLink only
                rows.append({"target": r["text"], "hook": r["kit"], "ratio": r["ratio"], "limit": r["limit"],
                             "n": min(int(r["kit_n"] or 0), int(r["reference_n"] or 0)), "model": r["model"],
                             "world_size": r["world_size"], "rate_gbps": r["rate_gbps"], "source": source})
    return pd.DataFrame(rows, columns=["target", "hook", "ratio", "limit", "n", "model", "world_size", "rate_gbps",
                                       "source"])


def scoreboard(table: pd.DataFrame, min_iter: int = 30) -> str:
    """Per target and kit hook: the pairs measured, those with at least ``min_iter`` timed iterations, how many of
    those meet the limit, their median and worst ratio (and where the worst was measured)."""
    order = {t: i for i, t in enumerate([POST_TEXT] + [x.text for x in TARGETS])}
    lines = [f"| target | kit hook | pairs | with >= {min_iter} iterations | meet the limit | median ratio | "
             "worst ratio (where) |", "|---|---|---:|---:|---:|---:|---|"]
    for (target, hook), g in sorted(table.groupby(["target", "hook"]), key=lambda kv: (order[kv[0][0]], kv[0][1])):
        long = g[g["n"] >= min_iter]
        cells = ["", "", ""]
        if len(long):
            w = long.loc[long["ratio"].idxmax()]
            link = "NVLink" if pd.isna(w["rate_gbps"]) else f"{w['rate_gbps']:g} Gbit/s"
            cells = [str(int((long["ratio"] <= long["limit"]).sum())), f"{statistics.median(long['ratio']):.2f}",
                     f"{w['ratio']:.2f} ({w['model']} p={int(w['world_size'])} {link}, `{w['source']}`)"]
        lines.append(f"| {target} | {hook} | {len(g)} | {len(long)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def report(folders: list[Path], min_iter: int = 30) -> str:
    files = sorted({f for folder in folders
                    for f in ([folder] if folder.is_file() else [*folder.rglob("*.jsonl"), *folder.rglob("*.jsonl.gz")])})
    parts, gpus, used = [], set(), 0
    for f in files:
        recs = [r for r in load_records(f, quiet=True) if r.get("kind") == "ddp" and r.get("gpu") != "synthetic"]
        if not recs:
            continue
        gpus |= {f"{r.get('world_size')} x {r.get('gpu')}" for r in recs if r.get("kind") == "ddp" and r.get("gpu")}
        parts.append(pairs(recs, _shown(f)))
        used += 1
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if table.empty:
        raise SystemExit(f"hook_targets: no pairs of an overlapped kit hook and its reference in "
                         f"{', '.join(_shown(f) for f in folders)}")
    head = ["# The kit's DDP hook against its speed targets", "",
            f"Generated by `python benchmarks/hook_targets.py --write` from the `ddp` records under "
            f"{', '.join('`' + _shown(f) + '`' for f in folders)} ({len(table)} pairs from {used} files of ddp records; "
            f"machines: {'; '.join(sorted(gpus))}). A ratio is the kit hook's median iteration time over its "
            f"reference's, both measured in one campaign under the same setting; only pairs whose records both have "
            f"at least {min_iter} timed iterations are judged.", "", ""]
    return "\n".join(head) + scoreboard(table, min_iter)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", type=Path, default=[paths.MEASUREMENTS],
                    help="folders (every record file in them, each a campaign of its own) or files of ddp records "
                         "(default: data/measurements)")
    ap.add_argument("--min-iter", type=int, default=30, help="timed iterations a pair needs to be judged (default 30)")
    ap.add_argument("--write", action="store_true", help="also write benchmarks/hook_targets.md (replacing it)")
    args = ap.parse_args(argv)
    if args.min_iter < 1:
        ap.error(f"--min-iter must be >= 1, got {args.min_iter}")
    for f in args.folders:
        if not f.exists():
            ap.error(f"{f}: no such file or folder")
    text = report([f.resolve() for f in args.folders], args.min_iter)
    print(text)
    if args.write:
        (paths.ROOT / "benchmarks" / "hook_targets.md").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
