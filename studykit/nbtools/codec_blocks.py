"""Builder of the generated block that sets the committed codec reruns side by side (``benchmarks/codec_repeat.py``'s
campaigns): how each was timed, how many configurations agree between its two runs, how many were timed eagerly
(``bench --graph``: no replayable graph) and how many speed targets pass. Named in
:data:`studykit.nbtools.datacli.BUILDERS` like those of :mod:`studykit.nbtools.readme_blocks`."""
from __future__ import annotations

from pathlib import Path

from studykit import paths

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
