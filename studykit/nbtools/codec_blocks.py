"""Builders of the codec blocks: the committed codec reruns side by side (``benchmarks/codec_repeat.py``'s
campaigns: how each was timed, how many configurations agree between its two runs, how many were timed eagerly,
``bench --graph``: no replayable graph, and how many speed targets pass), and the tables of
``data/measurements/codec_kernels_h200/README.md`` (THC's, TopK's and ATOMO's kernels). Named in
:data:`studykit.nbtools.datacli.BUILDERS` like those of :mod:`studykit.nbtools.readme_blocks`, whose readers they
share."""
from __future__ import annotations

import json
from pathlib import Path

from studykit import paths
from studykit.nbtools.readme_blocks import CODEC_KERNELS, _cell, _load

#: how a run timed each call, by its records' ``timer`` (the configurations a graph run timed eagerly: their own)
TIMED = {"cuda_events": "CUDA events, calls queued back to back", "cuda_graph": "CUDA graph replays (bench --graph)",
         "cuda_events_host_ahead": "device time, host ahead (bench --host-ahead)"}


def codec_runs_block(campaigns: list) -> str:
    """One row per codec rerun campaign in ``campaigns`` (data-relative folders holding ``codecs.jsonl``): its
    folder, commit, how its calls were timed, configurations measured twice and how many agree within 10 %, how
    many a graph run timed eagerly, and the speed targets passed of those judged."""
    from studykit.measure import bench
    from studykit.measure.records import load_records

    out = ["| run | commit | timed as | agree within 10 % | timed eagerly | speed targets PASS |",
           "|---|---|---|---:|---:|---:|"]
    for c in campaigns:
        records = load_records(paths.DATA / c / "codecs.jsonl", quiet=True)
        compared = bench.compare_runs(bench.split_repeats(records))
        if "agree" not in compared.columns:
            raise ValueError(f"codec_runs: {c} holds one run, not two")
        judged = compared["agree"].dropna()
        timers = sorted({r.get("timer") for r in records if r.get("kind") == "bench"} - {None, "cuda_events_eager"})
        eager = int((compared.get("timer") == "cuda_events_eager").sum()) if "timer" in compared.columns else 0
        targets = bench.speed_targets(compared)
        verdicts = targets["verdict"].isin(["PASS", "MISS"])
        commits = sorted({str(r.get("git_commit", "unknown"))[:7] for r in records})  # short hashes
        out.append(f"| {Path(c).name} | {', '.join(commits)} | {'; '.join(TIMED.get(t, t) for t in timers)} | "
                   f"{int(judged.sum())} of {len(judged)} | {eager if 'cuda_graph' in timers else ''} | "
                   f"{int((targets['verdict'] == 'PASS').sum())} of {int(verdicts.sum())} |")
    return "\n".join(out) + "\n"


def codec_rerun_block(before: str, after: str) -> str:
    """The same codecs timed in two campaigns (data-relative folders holding ``codecs.jsonl``, each with two runs),
    run ``i`` of ``after`` beside run ``i`` of ``before``: configurations in both, how many agree within 10 %
    (``bench.compare_runs``) and the ratio after / before of their medians."""
    from studykit.measure import bench
    from studykit.measure.records import load_records

    first, second = (bench.split_repeats(load_records(paths.DATA / c / "codecs.jsonl", quiet=True))
                     for c in (before, after))
    if len(first) != 2 or len(second) != 2:
        raise ValueError(f"codec_rerun: {before} and {after} must each hold two runs")
    out = [f"| runs | configurations in both | agree within 10 % | {Path(after).name} / {Path(before).name}: "
           "median [min-max] |", "|---|---:|---:|---|"]
    for i in (0, 1):
        c = bench.compare_runs([first[i], second[i]]).dropna(subset=["ratio"])
        out.append(f"| run {i + 1} of each | {len(c)} | {int(c['agree'].sum())} | {c['ratio'].median():.3f} "
                   f"[{c['ratio'].min():.3f}-{c['ratio'].max():.3f}] |")
    return "\n".join(out) + "\n"


#: cuSOLVER's batched Jacobi eigen/singular-value kernels (ATOMO's decompositions)
ATOMO_SOLVER = ("syevj", "syevbj", "gesvdj", "gesvdbj", "rotate")


# ---------------------------------------------------------------------------------------------------- codec kernels
def _thc_signed_block(sub: str) -> str:
    """``benchmarks/thc_signed.py``'s records in ``sub``: per rotation and direction each fused path found, the
    separate pass (``apart``), and each fused path's time over the separate pass's."""
    recs = _load(CODEC_KERNELS / sub / "thc_signed.jsonl")
    by = {(r["params"]["rotation"], r["phase"], r["params"]["path"]): r for r in recs if r.get("kind") == "bench"}
    fused = list(dict.fromkeys(p for _, _, p in by if p != "apart"))
    rows = ["| rotation | transform | " + " | ".join(f"diagonal {p}: ms [q25-q75] n" for p in fused)
            + " | diagonal apart: ms [q25-q75] n | " + " | ".join(f"{p} / apart" for p in fused) + " |",
            "|---|---|" + "---:|" * (2 * len(fused) + 1)]
    for rot, phase in dict.fromkeys(k[:2] for k in by):
        a = by[(rot, phase, "apart")]
        fs = [by[(rot, phase, p)] for p in fused]
        rows.append(f"| {rot} | {phase.removeprefix('thc_').removesuffix('_signed')} | "
                    + "".join(f"{_cell(f)} | " for f in fs) + f"{_cell(a)} | "
                    + "".join(f"{f['ms_median'] / a['ms_median']:.3f} | " for f in fs).rstrip())
    return "\n".join(rows) + "\n"


def _topk_select_blocks() -> tuple[str, str]:
    """``benchmarks/topk_select.py``'s records: each exact selection against ``torch.topk``, and the counting and
    compacting passes alone per program shape."""
    recs = _load(CODEC_KERNELS / "topk_sampled" / "topk_select.jsonl.gz")
    sel = {(r["model"], r["params"]["ratio"], r["params"]["path"]): r for r in recs if r["phase"] == "topk_select"}
    rows = ["| model | ratio | k | sampled: ms [q25-q75] n (x floor) | radix | torch.topk | sampled / torch | radix / torch |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (model, ratio, path), r in sel.items():
        if path != "sampled":
            continue
        rad, tor = sel[(model, ratio, "radix")], sel[(model, ratio, "torch")]
        rows.append(f"| {model} | {ratio:g} | {r['k']} | {_cell(r)} ({r['ms_median'] / r['floor_ms']:.1f}) | "
                    f"{rad['ms_median']:.4f} | {tor['ms_median']:.4f} | {r['ms_median'] / tor['ms_median']:.3f} | "
                    f"{rad['ms_median'] / tor['ms_median']:.3f} |")
    comp = [r for r in recs if r["phase"] == "compact_ge"]
    shapes = list(dict.fromkeys((r["params"]["block"], r["params"]["rows"]) for r in comp))
    crow = ["| model | ratio | candidates' room | " + " | ".join(
        f"block {b}, {'rows of ' + str(w) if w else 'one prefix sum'}" for b, w in shapes) + " |",
        "|---|---:|---:|" + "---:|" * len(shapes)]
    by = {(r["model"], r["params"]["ratio"], r["params"]["block"], r["params"]["rows"]): r for r in comp}
    for model, ratio in dict.fromkeys((r["model"], r["params"]["ratio"]) for r in comp):
        first = by[(model, ratio, *shapes[0])]
        crow.append(f"| {model} | {ratio:g} | {first['cap']} | " + " | ".join(
            f"{by[(model, ratio, *s)]['ms_median']:.4f} ({by[(model, ratio, *s)]['ms_median'] / first['floor_ms']:.1f})"
            for s in shapes) + " |")
    return "\n".join(rows) + "\n", "\n".join(crow) + "\n"


#: topk_nosync/'s record files, one per commit (the same configurations: loaded apart, not merged)
TOPK_NOSYNC_RUNS = ("9f804a5", "e4a8ed4")
#: topk_select's paths in the order the table shows them
TOPK_PATHS = ("sampled", "sampled_nosync", "radix", "torch")


def topk_nosync_records(commit: str) -> dict:
    """``{(model, path, replayed): record}`` of ``topk_nosync/topk_select_<commit>.jsonl.gz``'s selections."""
    recs = _load(CODEC_KERNELS / "topk_nosync" / f"topk_select_{commit}.jsonl.gz")
    return {(r["model"], r["params"]["path"], bool(r["params"].get("graph"))): r for r in recs
            if r["phase"] == "topk_select"}


def _topk_nosync_block() -> str:
    """TopK's exact selections eager and replayed, per commit and model: ms (x floor)."""
    rows = ["| commit | model | k | " + " | ".join(f"{p} {how}" for p in TOPK_PATHS
                                                   for how in (("eager", "replayed") if p != "sampled" else ("eager",)))
            + " |", "|---|---|---:|" + "---:|" * (2 * len(TOPK_PATHS) - 1)]
    for commit in TOPK_NOSYNC_RUNS:
        sel = topk_nosync_records(commit)
        for model in dict.fromkeys(m for m, _, _ in sel):
            cells = [sel[(model, p, g)] for p in TOPK_PATHS for g in ((False, True) if p != "sampled" else (False,))]
            rows.append(f"| `{commit}` | {model} | {cells[0]['k']} | " + " | ".join(
                f"{r['ms_median']:.3f} ({r['ms_median'] / r['floor_ms']:.1f})" for r in cells) + " |")
    return "\n".join(rows) + "\n"


def topk_bitmask_records() -> tuple[dict, list]:
    """``topk_bitmask/topk_select.jsonl.gz``: ``({(model, path, replayed): selection record}, [compact_ge
    records])``."""
    recs = _load(CODEC_KERNELS / "topk_bitmask" / "topk_select.jsonl.gz")
    sel = {(r["model"], r["params"]["path"], bool(r["params"].get("graph"))): r for r in recs
           if r["phase"] == "topk_select"}
    return sel, [r for r in recs if r["phase"] == "compact_ge"]


def _topk_bitmask_blocks() -> tuple[str, str]:
    """TopK's exact selections at ``topk_bitmask/``'s commit beside ``topk_nosync/``'s last, replayed: ms (x floor);
    and the counting and compacting passes per program shape, eager and replayed."""
    sel, comp = topk_bitmask_records()
    prev = topk_nosync_records(TOPK_NOSYNC_RUNS[-1])
    commit = next(iter(sel.values()))["git_commit"][:7]
    paths = [p for p in TOPK_PATHS if p != "sampled"]
    rows = ["| commit | model | k | " + " | ".join(f"{p} replayed" for p in paths) + " |",
            "|---|---|---:|" + "---:|" * len(paths)]
    for c, recs in ((TOPK_NOSYNC_RUNS[-1], prev), (commit, sel)):
        for model in dict.fromkeys(m for m, _, _ in recs):
            cells = [recs[(model, p, True)] for p in paths]
            rows.append(f"| `{c}` | {model} | {cells[0]['k']} | " + " | ".join(
                f"{r['ms_median']:.3f} ({r['ms_median'] / r['floor_ms']:.1f})" for r in cells) + " |")

    def shape(r):
        p = r["params"]
        return (p["block"], f"bitmask, {p['span']} per program" if "span" in p else
                ("rows of 32" if p["rows"] else "one prefix sum"))

    shapes = list(dict.fromkeys(shape(r) for r in comp))
    by = {(r["model"], shape(r), bool(r["params"].get("graph"))): r for r in comp}
    crow = ["| block | compacting pass | " + " | ".join(
        f"{m} {how}" for m in dict.fromkeys(r["model"] for r in comp) for how in ("eager", "replayed")) + " |",
        "|---:|---|" + "---:|" * (2 * len({r["model"] for r in comp}))]
    for b, form in shapes:
        cells = [by[(m, (b, form), g)] for m in dict.fromkeys(r["model"] for r in comp) for g in (False, True)]
        crow.append(f"| {b} | {form} | " + " | ".join(
            f"{r['ms_median']:.4f} ({r['ms_median'] / r['floor_ms']:.1f})" for r in cells) + " |")
    return "\n".join(rows) + "\n", "\n".join(crow) + "\n"


def _topk_codec_block() -> str:
    """The TopK codecs' ``codec_kernels`` records, fast path beside the reference."""
    recs = _load(CODEC_KERNELS / "topk_sampled" / "codec_kernels.jsonl")

    def key(r):
        return r["compressor"], json.dumps(r["params"], sort_keys=True), r["mode"]

    timed = {key(r): r for r in recs if r["kind"] == "bench"}
    rows = ["| codec | params | path | timed ms [q25-q75] (x floor) | timer | kernels | kernels alone ms (x floor) |",
            "|---|---|---|---:|---|---:|---:|"]
    for k in recs:
        if k["kind"] != "codec_kernels":
            continue
        t = timed[key(k)]
        params = ",".join(f"{a}={b}" for a, b in sorted(k["params"].items()))
        rows.append(f"| {k['compressor']} | {params} | {k['mode'].split(':')[-1]} | {t['ms_median']:.4f} "
                    f"[{t['ms_q25']:.4f}-{t['ms_q75']:.4f}] ({t['ms_median'] / t['floor_ms']:.1f}) | {t['timer']} | "
                    f"{k['n_kernels']} | {k['ms_kernels']:.4f} ({k['ms_kernels'] / t['floor_ms']:.1f}) |")
    return "\n".join(rows) + "\n"


def codec_kernels_blocks() -> dict[str, str]:
    """The codec-kernel tables, by marker: the max |g| trial's components, THC's codec rows of every run, THC's
    fused-diagonal candidates (at "ieee" and at tf32x3), the exact TopK selections and compacting passes, and the
    TopK codecs fast beside reference."""
    recs = _load(CODEC_KERNELS / "abs_max_trial" / "bench_components.jsonl")
    rows = ["| component | ms median [q25-q75] n | x floor |", "|---|---:|---:|"]
    for r in recs:
        label = str(r.get("phase") or "").removeprefix("component:")
        if r.get("kind") == "bench" and label.startswith(("max |g|", "elementwise pass")):
            rows.append(f"| {label.replace('|', chr(92) + '|')} | {_cell(r)} | {r['x_floor']:.2f} |")
    blocks = {"abs-max-components": "\n".join(rows) + "\n"}
    rows = ["| run | kit commit | codec | timed ms (x floor) | kernels | kernels alone ms (x floor) | rotation's kernels ms |",
            "|---|---|---|---:|---:|---:|---:|"]
    for sub in ("", "thc_fused", "thc_diag", "thc_tf32x3"):
        recs = _load(CODEC_KERNELS / sub / "codec_kernels.jsonl")
        timed = {(r["compressor"], r["params"].get("rotation"), r["mode"]): r for r in recs if r["kind"] == "bench"}
        for k in recs:
            if k["kind"] != "codec_kernels" or k["compressor"] != "thc":
                continue
            t = timed[("thc", k["params"]["rotation"], k["mode"])]
            path = " (reference)" if k["mode"].endswith(":reference") else ""
            rot = sum(x["us_median"] for x in k["kernels"] if "gemm" in x["name"] or "hadamard" in x["name"]) / 1e3
            rows.append(f"| `{sub or '.'}/` | `{t['git_commit'][:7]}` | thc rotation={k['params']['rotation']}{path} | "
                        f"{t['ms_median']:.4f} ({t['ms_median'] / t['floor_ms']:.1f}) | {k['n_kernels']} | "
                        f"{k['ms_kernels']:.4f} ({k['ms_kernels'] / t['floor_ms']:.1f}) | {rot:.4f} |")
    blocks["thc-fused"] = "\n".join(rows) + "\n"
    blocks["thc-signed"] = _thc_signed_block("thc_signed")
    blocks["thc-tf32x3"] = _thc_signed_block("thc_tf32x3")
    blocks["topk-select"], blocks["topk-compact"] = _topk_select_blocks()
    blocks["topk-codecs"] = _topk_codec_block()
    blocks["topk-nosync"] = _topk_nosync_block()
    blocks["topk-bitmask"], blocks["topk-bitmask-compact"] = _topk_bitmask_blocks()
    return blocks


def atomo_rows() -> list[tuple]:
    """ATOMO's two decompositions: (svd, timed record, kernels record, the Jacobi solver's kernels in ms)."""
    recs = _load(CODEC_KERNELS / "atomo" / "codec_kernels.jsonl.gz")
    timed = {r["params"]["svd"]: r for r in recs if r["kind"] == "bench"}
    out = []
    for k in recs:
        if k["kind"] == "codec_kernels":
            solver = sum(x["us_median"] for x in k["kernels"] if any(s in x["name"] for s in ATOMO_SOLVER)) / 1e3
            out.append((k["params"]["svd"], timed[k["params"]["svd"]], k, solver))
    return out


def atomo_block() -> str:
    """ATOMO's timed call per decomposition beside its kernels and the Jacobi solver's share of them."""
    rows = ["| svd | timed ms [q25-q75] n | kernels | kernels alone ms | Jacobi solver's kernels ms (share) |",
            "|---|---:|---:|---:|---:|"]
    for svd, t, k, solver in atomo_rows():
        rows.append(f"| {svd} | {_cell(t, 1)} | "
                    f"{k['n_kernels']} | {k['ms_kernels']:.1f} | {solver:.1f} ({100 * solver / k['ms_kernels']:.0f} %) |")
    return "\n".join(rows) + "\n"
