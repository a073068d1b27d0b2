"""Where the kit's DDP hook stands against its speed targets, over every committed ``ddp`` record: the hook against
the same compressor after the backward pass (post), the kit's PowerSGD rank-4 hook against syncSGD over NVLink and
against PyTorch's PowerSGD hook, the kit's fp16 hook against PyTorch's fp16 hook.

    python benchmarks/hook_targets.py                      # prints the scoreboard (data/measurements)
    python benchmarks/hook_targets.py FOLDER ... --write   # also benchmarks/hook_targets.md

Each ratio pairs two records of one campaign folder (and round) with the same model, batch, world size, link rate,
GIL switch interval and buffer broadcast, both at DDP's default bucket size. A pair counts toward a target only when
both records have at least ``--min-iter`` timed iterations (30: fewer leave spreads that look like effects); the
shorter pairs are counted beside, not judged. Hooks are the overlapped ones (``hook_overlap`` true), per runner
(thread, graph) and coalescing setting.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from studykit import paths
from studykit.compressors.registry import setting_label
from studykit.measure.records import load_records

#: (name, what is compared, the bound on the ratio)
TARGETS = (("hook <= 1.02 x post", "every compressor's overlapped hook / the same compressor after the backward pass",
            1.02),
           ("PowerSGD r4 hook <= 1.1 x syncSGD over NVLink", "the kit's PowerSGD rank-4 hook / syncSGD, no shaping", 1.1),
           ("PowerSGD r4 hook <= PyTorch's PowerSGD hook", "the kit's PowerSGD rank-4 hook / PyTorch's PowerSGD hook",
            1.0),
           ("fp16 hook <= 1.03 x PyTorch's fp16 hook", "the kit's fp16 hook / PyTorch's fp16 hook", 1.03))


def _setting(r: dict) -> tuple:
    """What a pair must share besides the method: folder (and round), model, batch, world size, rate, GIL switch
    interval, buffer broadcast."""
    net = r.get("network") or {}
    src = Path(str(r.get("source", ""))).parent
    return (str(src), r.get("model"), r.get("batch_size"), r.get("world_size"), net.get("rate_gbps"),
            r.get("switch_interval_ms"), r.get("broadcast_buffers"))


def _shown(path) -> str:
    """``path`` relative to the repository where it lies inside it."""
    p = Path(path)
    return str(p.relative_to(paths.ROOT)) if p.is_absolute() and p.is_relative_to(paths.ROOT) else str(p)


def _hook_kind(r: dict) -> str | None:
    """``thread``, ``graph``, ``thread coalesce=X MB``: how an overlapped kit hook ran; None for other records."""
    if r.get("mode") != "hook" or r.get("hook_overlap") is not True or r.get("comm") not in (None, "collective"):
        return None
    runner = r.get("hook_runner") or "thread"
    mb = r.get("hook_coalesce_mb")
    return runner if mb is None else f"{runner} coalesce={mb:g} MB"


def pairs(records: list[dict]) -> list[dict]:
    """Every (target, pair) of the records: target name, compressor label, hook kind, the two medians, the ratio,
    the fewer timed iterations of the two and the setting."""
    by: dict = defaultdict(dict)
    for r in records:
        if r.get("kind") != "ddp" or r.get("status") != "ok" or r.get("bucket_mb") is not None:
            continue
        label = setting_label(r["compressor"], r.get("params") or {}, "short") if r.get("compressor") else None
        mode, hook = r["mode"], _hook_kind(r)
        if hook is not None:
            key = ("hook", label, hook)
        elif mode in ("post", "syncsgd") and r.get("comm") in (None, "collective"):
            key = (mode, label)
        elif mode == "builtin":
            key = ("builtin", r["compressor"])
        else:
            continue
        by[_setting(r)][key] = r
    out = []
    for setting, recs in by.items():
        for key, h in recs.items():
            if key[0] != "hook":
                continue
            label, hook = key[1], key[2]
            name = str(h["compressor"])
            params = h.get("params") or {}
            against = [(TARGETS[0][0], recs.get(("post", label)))]
            if name == "powersgd" and params.get("rank") == 4:
                if setting[4] is None:
                    against.append((TARGETS[1][0], recs.get(("syncsgd", None))))
                against.append((TARGETS[2][0], recs.get(("builtin", "torch_powersgd"))))
            if name == "fp16":
                against.append((TARGETS[3][0], recs.get(("builtin", "torch_fp16"))))
            for target, other in against:
                if other is None:
                    continue
                out.append({"target": target, "compressor": label, "hook": hook, "hook_ms": h["ms_median"],
                            "other_ms": other["ms_median"], "ratio": h["ms_median"] / other["ms_median"],
                            "n_iter": min(int(h.get("n_iter") or 0), int(other.get("n_iter") or 0)),
                            "folder": setting[0], "model": setting[1], "world_size": setting[3], "rate": setting[4]})
    return out


def scoreboard(rows: list[dict], min_iter: int = 30) -> str:
    """The markdown: per target (and, for the hook against post, per compressor and hook kind) the pairs measured,
    those with at least ``min_iter`` timed iterations, how many of those meet the bound, and their median and worst
    ratio."""
    lines = ["| target | compressor | hook | pairs | with >= %d iterations | meet the bound | median ratio | "
             "worst ratio (where) |" % min_iter, "|---|---|---|---:|---:|---:|---:|---|"]
    bound = {t[0]: t[2] for t in TARGETS}
    groups: dict = defaultdict(list)
    for r in rows:
        groups[(r["target"], r["compressor"], r["hook"])].append(r)
    order = {t[0]: i for i, t in enumerate(TARGETS)}
    for (target, comp, hook), rs in sorted(groups.items(), key=lambda kv: (order[kv[0][0]], kv[0][1], kv[0][2])):
        long = [r for r in rs if r["n_iter"] >= min_iter]
        if long:
            worst = max(long, key=lambda r: r["ratio"])
            where = (f"{worst['model']} p={worst['world_size']} "
                     f"{'NVLink' if worst['rate'] is None else format(worst['rate'], 'g') + ' Gbit/s'}, "
                     f"`{_shown(worst['folder'])}`")
            cells = [str(sum(r["ratio"] <= bound[target] for r in long)),
                     f"{statistics.median(r['ratio'] for r in long):.2f}", f"{worst['ratio']:.2f} ({where})"]
        else:
            cells = ["", "", ""]
        lines.append(f"| {target} | {comp} | {hook} | {len(rs)} | {len(long)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def report(folders: list[Path], min_iter: int = 30) -> str:
    # each file's records as written (the latest of a configuration wins in pairs()): across campaigns one setting
    # is measured more than once, and each campaign pairs its own records
    records = [r for r in load_records(*folders, quiet=True, dedupe=False) if r.get("gpu") != "synthetic"]
    rows = pairs(records)
    if not rows:
        raise SystemExit(f"hook_targets: no pairs of an overlapped kit hook and its reference in {folders}")
    gpus = sorted({f"{r.get('world_size')} x {r.get('gpu')}" for r in records
                   if r.get("kind") == "ddp" and r.get("gpu")})
    head = [f"# The kit's DDP hook against its speed targets", "",
            f"Generated by `python benchmarks/hook_targets.py --write` from the `ddp` records under "
            f"{', '.join('`' + _shown(f) + '`' for f in folders)} "
            f"({len(rows)} pairs; machines: {'; '.join(gpus)}). A ratio is the hook's median iteration time over the "
            f"reference's, both measured in one campaign under the same setting; only pairs whose records both have "
            f"at least {min_iter} timed iterations are judged.", "", ""]
    return "\n".join(head) + scoreboard(rows, min_iter)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*", type=Path, default=[paths.MEASUREMENTS],
                    help="folders or files of ddp records (default: data/measurements)")
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
