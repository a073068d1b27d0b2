"""Runs compared: the codec records of one or two runs side by side (:func:`compare_runs`, their medians
and whether they agree), the speed-target verdicts on them (:func:`speed_targets`), and both as Markdown."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable, Sequence

from studykit.measure.bench.summary import _params_str
from studykit.measure.bench.targets import AGREE_TOL, SPEED_TARGETS, TARGET_MODEL, _target_of

if TYPE_CHECKING:  # pandas is imported where a table is built
    import pandas


def split_repeats(records: Iterable[dict]) -> list[list[dict]]:
    """The bench records of a file, one list per ``repeat`` (1, 2, ...; records without one form one run)."""
    runs: dict = {}
    for r in records:
        if r.get("kind") == "bench":
            runs.setdefault(r.get("repeat"), []).append(r)
    return [runs[k] for k in sorted(runs, key=lambda k: (k is not None, k or 0))]


def _run_key(r: dict) -> tuple:
    return (r.get("model"), r.get("compressor"), _params_str(r.get("params")), r.get("phase"), r.get("layout"),
            r.get("mode"), r.get("device"))


#: a call whose host needs at least this share of its timed duration to issue it is host-bound (compare_runs)
HOST_BOUND = 0.8


def compare_runs(runs: Sequence[Iterable[dict]]) -> pandas.DataFrame:
    """One row per codec configuration (model, compressor, params, phase, layout, mode, device)
    measured ``ok`` in the first run: per run ``i`` (1-based) ``ms_i`` (median), ``q25_i``, ``q75_i``,
    ``n_i``, ``x_floor_i`` (ms / the memory floor of that run), ``capped_i``, ``host_i`` (the host's time to issue
    one call, ``host_ms``); ``host_bound``: in some run the host needed at least :data:`HOST_BOUND` of the timed
    call to issue it (the GPU then waits for its launches: such a timing moves with the host's load); with two runs
    ``ratio`` (``ms_2 / ms_1``) and ``agree`` (the two medians within :data:`AGREE_TOL` of each
    other: ``max(ratio, 1 / ratio) <= 1 + AGREE_TOL``). Records of other kinds are ignored."""
    import pandas as pd

    if not runs:
        raise ValueError("compare_runs: no runs given (a list of one or two runs' records)")
    tables = []
    for recs in runs:
        table = {}
        for r in recs:
            if r.get("kind") == "bench" and r.get("status") == "ok":
                table[_run_key(r)] = r  # the latest record of a configuration
        tables.append(table)
    rows = []
    for key, first in tables[0].items():
        row = {"model": first.get("model"), "compressor": first.get("compressor"), "params": key[2],
               "params_obj": first.get("params") or {}, "phase": first.get("phase"), "layout": first.get("layout"),
               "mode": first.get("mode"), "device": first.get("device"), "gpu": first.get("gpu"),
               "floor_ms": first.get("floor_ms"), "git_commit": first.get("git_commit"), "timer": first.get("timer")}
        for i, table in enumerate(tables, 1):
            r = table.get(key) or {}
            ms, floor = r.get("ms_median"), r.get("floor_ms")
            row.update({f"ms_{i}": ms, f"q25_{i}": r.get("ms_q25"), f"q75_{i}": r.get("ms_q75"),
                        f"n_{i}": r.get("n_iter"), f"x_floor_{i}": ms / floor if ms is not None and floor else None,
                        f"capped_{i}": r.get("reps_capped"), f"host_{i}": r.get("host_ms")})
        hb = [row[f"host_{i}"] / row[f"ms_{i}"] for i in range(1, len(tables) + 1)
              if row[f"host_{i}"] is not None and row[f"ms_{i}"]]
        row["host_bound"] = max(hb) >= HOST_BOUND if hb else None
        if len(tables) >= 2:
            a, b = row["ms_1"], row["ms_2"]
            row["ratio"] = b / a if a and b is not None else None
            row["agree"] = (None if row["ratio"] is None or row["ratio"] <= 0
                            else bool(max(row["ratio"], 1 / row["ratio"]) <= 1 + AGREE_TOL + 1e-12))
        rows.append(row)
    return pd.DataFrame(rows)

def speed_targets(compared: pandas.DataFrame) -> pandas.DataFrame:
    """The speed-target table from :func:`compare_runs`: one row per judged codec setting
    (phase ``encdec``, not the plain-PyTorch ``reference`` mode) with ``target``, ``limit``,
    ``unit``, ``value`` (the worst run: largest ``x_floor`` or ms) and ``verdict``: PASS or MISS
    on ``resnet50`` on a GPU, ``n/a (...)`` elsewhere (the targets are set there), and a row
    ``NOT MEASURED`` for each target codec no run measured."""
    import pandas as pd

    runs = sorted(int(c[3:]) for c in compared.columns if c.startswith("ms_")) if len(compared) else [1]
    rows = []
    seen = set()
    for _, r in compared.iterrows():
        if r["phase"] != "encdec" or str(r["mode"]).endswith(":reference"):
            continue
        t = _target_of(r["compressor"], r["params_obj"])
        if t is None:
            continue
        seen.add(r["compressor"])
        col = "x_floor" if t.unit == "x_floor" else "ms"
        vals = [r[f"{col}_{i}"] for i in runs if r.get(f"{col}_{i}") is not None and not pd.isna(r[f"{col}_{i}"])]
        value = max(vals) if vals else None
        if value is None:
            verdict = "NOT MEASURED"
        elif r["model"] != TARGET_MODEL:
            verdict = f"n/a ({r['model']}: targets are on {TARGET_MODEL})"
        elif not str(r["device"]).startswith("cuda"):
            verdict = "n/a (CPU: targets are on one H100/H200)"
        else:
            verdict = "PASS" if value <= t.limit else "MISS"
        rows.append(dict(r.drop(labels=["params_obj"]), target=t.key, target_text=t.text, limit=t.limit,
                         unit=t.unit, value=value, verdict=verdict))
    for t in SPEED_TARGETS:
        for name in t.compressors:
            if name not in seen:
                rows.append({"compressor": name, "params": _params_str(dict(t.params)),
                             "phase": "encdec", "target": t.key, "target_text": t.text, "limit": t.limit,
                             "unit": t.unit, "value": None, "verdict": "NOT MEASURED"})
    return pd.DataFrame(rows)


def _f(x, d: int = 4) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"


def _ms_cell(r, i: int) -> str:
    ms = r.get(f"ms_{i}")
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "—"
    q25, q75, n = r.get(f"q25_{i}"), r.get(f"q75_{i}"), r.get(f"n_{i}")
    iqr = f" [{_f(q25)}-{_f(q75)}]" if q25 is not None and not (isinstance(q25, float) and math.isnan(q25)) else ""
    return f"{_f(ms)}{iqr} n={int(n)}" if n is not None and not math.isnan(n) else f"{_f(ms)}{iqr}"


def compare_markdown(compared: pandas.DataFrame) -> str:
    """:func:`compare_runs` as a Markdown table: both medians (IQR, n), their ratio, agreement; a configuration
    that ``--graph`` timed eagerly (its call cannot be replayed as a CUDA graph) says so in its mode."""
    two = "ratio" in compared.columns
    head = "| codec | params | phase | mode | run 1 ms [q25-q75] | x floor |"
    head += " run 2 ms [q25-q75] | run 2 / run 1 | within 10 % |" if two else ""
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for _, r in compared.iterrows():
        eager = " (eager: no replayable graph)" if r.get("timer") == "cuda_events_eager" else ""
        line = (f"| {r['compressor'] or r['phase']} | {r['params']} | {r['phase']} | {r['mode'] or ''}{eager} | "
                f"{_ms_cell(r, 1)} | {_f(r.get('x_floor_1'), 1)} |")
        if two:
            agree = r.get("agree")
            line += (f" {_ms_cell(r, 2)} | {_f(r.get('ratio'), 3)} | "
                     f"{'' if agree is None or (isinstance(agree, float) and math.isnan(agree)) else ('yes' if agree else 'NO')} |")
        lines.append(line)
    if two and len(compared):
        judged = compared["agree"].dropna()
        lines += ["", (f"{int(judged.sum())} of {len(judged)} configurations measured twice agree within "
                       f"{AGREE_TOL:.0%} (the larger median at most {1 + AGREE_TOL:g}x the smaller).")]
        known = compared.dropna(subset=["agree"])
        known = known[known["host_bound"].notna()] if "host_bound" in known.columns else known.iloc[:0]
        if len(known):
            bound = known["host_bound"].astype(bool)
            lines.append(f"Host-bound in a run (the host needed at least {HOST_BOUND:g}x the timed call to issue it, "
                         f"`host_ms`): {int((~known.loc[bound, 'agree'].astype(bool)).sum())} of the "
                         f"{int((~known['agree'].astype(bool)).sum())} that disagree, "
                         f"{int(known.loc[bound, 'agree'].astype(bool).sum())} of the "
                         f"{int(known['agree'].astype(bool).sum())} that agree.")
    return "\n".join(lines)


def speed_targets_markdown(table: pandas.DataFrame) -> str:
    """:func:`speed_targets` as a Markdown table with PASS/MISS, and the count."""
    lines = ["| target | codec | params | run 1 ms | run 2 ms | x floor (worst) | limit | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        r = r.to_dict()
        limit = f"{r['limit']:g}x floor" if r["unit"] == "x_floor" else f"{r['limit']:g} ms"
        xs = [r.get(f"x_floor_{i}") for i in (1, 2)]
        xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
        lines.append(f"| {r['target']} | {r['compressor']} | {r.get('params') or ''} | {_ms_cell(r, 1)} | "
                     f"{_ms_cell(r, 2)} | {_f(max(xs), 1) if xs else ''} | {limit} | {r['verdict']} |")
    v = table["verdict"] if len(table) else []
    n_pass, n_judged = int((v == "PASS").sum()), int(v.isin(["PASS", "MISS"]).sum()) if len(table) else 0
    lines += ["", (f"{n_pass} of {n_judged} judged target rows PASS (the worst of the runs is judged); "
                   f"{int((v == 'NOT MEASURED').sum()) if len(table) else 0} not measured.")]
    return "\n".join(lines)
