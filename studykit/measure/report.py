"""Records -> the paper's Tables 2 and 3 for this hardware, and the overhead plots.

Agarwal et al. 2022, Table 2: encode-decode time of nine compressors on ResNet-50 (V100) and
whether they aggregate by all-reduce; Table 3: PowerSGD rank 4/8/16, MS-TopK
1%/0.1% and SignSGD with their compression ratios, against a backward pass of
about 122 ms. Here the same tables come from ``profile`` records (statistic: the
paper's mean, with min and max), side by side with the paper's V100 numbers read
from ``data/paper/`` when those CSVs are present.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd

from studykit import compressors, paths
from studykit.compressors.registry import setting_label
from studykit.measure.records import load_records

__all__ = ["load_frame", "provenance_summary", "label", "encode_decode_table", "table2", "table3",
           "backward_ms", "paper_table", "ddp_table", "HookTarget", "HOOK_TARGETS", "hook_targets",
           "hook_vs_post", "hook_vs_post_markdown",
           "hook_targets_markdown", "ps_vs_collective", "ps_vs_collective_markdown", "plain_runs"]

#: the paper's families (Table 2's "Type" column); the kit's other compressors go under "Dense / other"
_FAMILY_LABEL = {"sparsification": "Sparsification", "quantization": "Quantization", "low-rank": "Low rank",
                 "precision": "Dense"}
FAMILY = {n: _FAMILY_LABEL[compressors.metadata(n).family] for n in compressors.available()}
FAMILY_ORDER = ["Sparsification", "Quantization", "Low rank", "Dense", "Dense / other"]
#: Table 3 of Agarwal et al. 2022: (compressor, the parameter it varies, values)
TABLE3 = [("powersgd", "rank", [4, 8, 16]), ("mstopk", "ratio", [0.01, 0.001]), ("signsgd", None, [None])]


def load_frame(*sources, status: Optional[str] = "ok") -> pd.DataFrame:
    """Records under ``sources`` (files or folders; relative paths from the repo root) as a DataFrame."""
    resolved = [s if Path(s).is_absolute() else paths.ROOT / s for s in sources]
    recs = load_records(*resolved)
    df = pd.DataFrame(recs)
    if df.empty:
        return df
    if status is not None:
        df = df[df["status"] == status]
    return df.reset_index(drop=True)


def provenance_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Which machines and software the records come from, with record counts and time span."""
    cols = [c for c in ("kind", "gpu", "driver", "torch", "cuda", "nccl", "backend", "world_size", "host",
                        "git_commit") if c in df]
    g = df.fillna({c: "-" for c in cols}).groupby(cols, dropna=False)
    return g.agg(records=("kind", "size"), first=("timestamp", "min"), last=("timestamp", "max")).reset_index()


def _fmt_ratio(r: float) -> str:
    return f"{r:g}" if r >= 0.01 else f"{r * 100:g}%"


def label(compressor: str, params) -> str:
    """Readable method label, ``params`` a dict or its JSON: ``topk 1%``, ``powersgd r4``, ``signsgd`` (the
    ``"short"`` style of :func:`~studykit.compressors.registry.setting_label`)."""
    return setting_label(compressor, params if isinstance(params, dict) else json.loads(params or "{}"), "short")


def _profile(df: pd.DataFrame, model: str, sim_world_size: int = 1, phase: str = "reduce") -> pd.DataFrame:
    need = {"kind", "model", "phase"}
    if df.empty or not need <= set(df):
        return pd.DataFrame()
    sel = df[(df["kind"] == "profile") & (df["model"] == model) & (df["phase"] == phase)]
    if "sim_world_size" in sel:
        sel = sel[sel["sim_world_size"].fillna(1) == sim_world_size]
    # the latest record per configuration (a rerun on another day may add one)
    return sel.sort_values("timestamp").drop_duplicates("config_id", keep="last")


def encode_decode_table(df: pd.DataFrame, model: str = "resnet50", sim_world_size: int = 1) -> pd.DataFrame:
    """One row per profiled (compressor, params): mean/min/max ms, ratio, all-reduce, x memory floor."""
    sel = _profile(df, model, sim_world_size)
    if sel.empty:
        return pd.DataFrame(columns=["type", "method", "ms_mean", "ms_min", "ms_max", "ratio", "all_reduce",
                                     "x_floor", "gpu"])
    out = pd.DataFrame({
        "type": [FAMILY.get(c, "Dense / other") for c in sel["compressor"]],
        "method": [label(c, p) for c, p in zip(sel["compressor"], sel["params"])],
        "compressor": sel["compressor"].values,
        "params": [json.dumps(p, sort_keys=True) for p in sel["params"]],
        "ms_mean": sel["ms_mean"].values, "ms_min": sel["ms_min"].values, "ms_max": sel["ms_max"].values,
        "ms_median": sel["ms_median"].values, "ratio": sel["ratio"].values, "all_reduce": sel["allreduce_compatible"].values,
        "x_floor": sel["x_floor"].values, "floor_ms": sel["floor_ms"].values, "n_iter": sel["n_iter"].values,
        "gpu": sel["gpu"].values,
    })
    out["type"] = pd.Categorical(out["type"], FAMILY_ORDER, ordered=True)
    return out.sort_values(["type", "compressor", "ms_mean"]).reset_index(drop=True)


# ----------------------------------------------------------------- the paper's numbers
def paper_table(name: str, directory: Path | str = paths.PAPER) -> Optional[pd.DataFrame]:
    """``data/paper/<name>.csv`` (``name`` with or without ``.csv``), or None with a printed note."""
    directory = Path(directory) if Path(directory).is_absolute() else paths.ROOT / directory
    path = directory / (name if name.endswith(".csv") else f"{name}.csv")
    if not path.exists():
        print(f"note: {path.relative_to(paths.ROOT) if path.is_relative_to(paths.ROOT) else path} not found; "
              "the paper's V100 column is left out")
        return None
    return pd.read_csv(path, comment="#")


def _paper_columns(paper: pd.DataFrame) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """(compressor column, encode-decode ms column, compression-ratio column) of a paper CSV."""
    cols = list(paper.columns)
    low = {c: c.lower() for c in cols}
    comp = next((c for c in cols if low[c] in ("compressor", "studykit_compressor", "studykit_name", "name")), None)
    ms = next((c for c in cols if "encode" in low[c] and "ms" in low[c]), None) or \
        next((c for c in cols if low[c].endswith("_ms") or low[c] == "ms"), None)
    ratio = next((c for c in cols if "ratio" in low[c] and ("compression" in low[c] or low[c].endswith("_x"))), None)
    return comp, ms, ratio


def _paper_params(row: pd.Series) -> dict:
    for col in ("params", "studykit_params", "parameters"):
        if col in row and isinstance(row[col], str) and row[col].strip():
            text = row[col].strip()
            try:
                return json.loads(text)
            except json.JSONDecodeError:  # k=v;k=v, read by the kit's one spec parser
                from studykit.compressors.registry import parse_params

                return parse_params(text.replace(";", ","), f"paper table params {text!r}")
    return {k: _num(row[k]) for k in ("ratio", "rank", "levels", "bits") if k in row and pd.notna(row[k])}


def _num(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v
    return int(f) if f.is_integer() else f


def _match(params: dict, want: dict) -> bool:
    for k, v in want.items():
        if k not in params:
            return False
        a, b = params[k], v
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            if not math.isclose(a, b, rel_tol=1e-6):
                return False
        elif a != b:
            return False
    return True


def _with_paper(ours: pd.DataFrame, paper: Optional[pd.DataFrame], prefix: str = "paper_") -> pd.DataFrame:
    """Add the paper's ms (and ratio) per row, matching on compressor and the paper row's parameters."""
    if paper is None or ours.empty:
        return ours
    comp_col, ms_col, ratio_col = _paper_columns(paper)
    if comp_col is None or ms_col is None:
        print(f"note: the paper table has no compressor/ms columns I recognise ({list(paper.columns)}); "
              "the paper's column is left out")
        return ours
    ours = ours.copy()
    ms, ratio = [], []
    for _, r in ours.iterrows():
        params = json.loads(r["params"])
        hits = [p for _, p in paper[paper[comp_col] == r["compressor"]].iterrows() if _match(params, _paper_params(p))]
        ms.append(hits[0][ms_col] if hits else float("nan"))
        ratio.append(hits[0][ratio_col] if hits and ratio_col else float("nan"))
    ours[prefix + "v100_ms"] = pd.to_numeric(pd.Series(ms, index=ours.index), errors="coerce")
    if ratio_col:
        ours[prefix + "ratio"] = pd.to_numeric(pd.Series(ratio, index=ours.index), errors="coerce")
    return ours


def table2(df: pd.DataFrame, model: str = "resnet50", paper: Optional[pd.DataFrame] = None,
           sim_world_size: int = 1) -> pd.DataFrame:
    """Agarwal et al. 2022 Table 2 for this hardware: every profiled method, with the paper's V100 ms where known."""
    t = encode_decode_table(df, model, sim_world_size)
    if t.empty and sim_world_size != 1 and not encode_decode_table(df, model, 1).empty:
        print(f"note: no {model} profiles decoding {sim_world_size} workers' payloads; showing world size 1")
        t = encode_decode_table(df, model, 1)
    t = _with_paper(t, paper)
    cols = ["type", "method", "ms_mean", "ms_min", "ms_max", "ms_median", "all_reduce", "ratio", "x_floor"]
    cols += [c for c in t.columns if c.startswith("paper_")]
    return t[cols] if not t.empty else t


def backward_ms(df: pd.DataFrame, model: str, batch_size: Optional[int] = None) -> Optional[float]:
    """Mean backward-only time (tcomp ``bwd``) of ``model``, at ``batch_size`` or the largest measured."""
    if df.empty or "kind" not in df:
        return None
    sel = df[(df["kind"] == "tcomp") & (df["model"] == model) & (df["phase"] == "bwd")]
    if batch_size is not None:
        sel = sel[sel["batch_size"] == batch_size]
    if sel.empty:
        return None
    return float(sel.sort_values(["batch_size", "timestamp"]).iloc[-1]["ms_mean"])


def table3(df: pd.DataFrame, model: str = "resnet50", paper: Optional[pd.DataFrame] = None,
           batch_size: Optional[int] = None) -> pd.DataFrame:
    """Agarwal et al. 2022 Table 3 for this hardware: the paper's settings, their ratio and encode-decode ms,
    and the backward time of the same model (``tcomp``) for scale."""
    t = encode_decode_table(df, model)
    rows = []
    for comp, key, values in TABLE3:
        for v in values:
            sel = t[t["compressor"] == comp]
            if key is not None:
                sel = sel[[_match(json.loads(p), {key: v}) for p in sel["params"]]]
            if sel.empty:
                continue
            r = sel.iloc[0]
            param = "" if key is None else (f"{v * 100:g}%" if key == "ratio" else f"{key} {v}")
            rows.append({"method": comp, "parameter": param, "ratio": r["ratio"], "ms_mean": r["ms_mean"],
                         "ms_min": r["ms_min"], "ms_max": r["ms_max"], "compressor": comp, "params": r["params"]})
    out = pd.DataFrame(rows, columns=["method", "parameter", "ratio", "ms_mean", "ms_min", "ms_max",
                                      "compressor", "params"])
    out = _with_paper(out, paper)
    bwd = backward_ms(df, model, batch_size)
    out["backward_ms"] = bwd if bwd is not None else float("nan")
    out["x_backward"] = out["ms_mean"] / out["backward_ms"]
    return out.drop(columns=["compressor", "params"])


# ----------------------------------------------------------------------------- plots
def ddp_table(df: pd.DataFrame, model: str = "resnet50") -> pd.DataFrame:
    """Sec. 3.1 for this hardware: DDP iteration ms of syncSGD, PyTorch's hooks, and each compressor
    overlapped (hook) vs after the backward (post)."""
    if df.empty or "mode" not in df:
        return pd.DataFrame()
    sel = df[(df["kind"] == "ddp") & (df["model"] == model)].copy()
    if sel.empty:
        return pd.DataFrame()
    sel["method"] = [("syncsgd" + ("" if pd.isna(b) else f" {b:g}MB")) if m == "syncsgd" else label(c, p)
                     for m, c, p, b in zip(sel["mode"], sel["compressor"], sel["params"], sel["bucket_mb"])]
    sel["mode"] = sel["mode"].replace({"syncsgd": "ddp", "builtin": "ddp"})
    t = sel.pivot_table(index="method", columns="mode", values="ms_mean", aggfunc="last")
    if {"hook", "post"} <= set(t.columns):
        both = t["post"].notna() & t["hook"].notna()
        t["post_faster"] = (t["post"] < t["hook"]).where(both).astype("boolean").where(both)
    return t.sort_index()


# ----------------------------------------------------------------------------- DDP hook targets over NVLink
@dataclass(frozen=True)
class HookTarget:
    """One DDP hook target: the kit's overlapped hook ``compressor`` (with ``params``)
    at most ``limit`` times the iteration of the ``reference`` configuration (a ``ddp`` record's ``mode``
    and ``compressor``, with ``reference_params``), on 2 GPUs over NVLink, for the same model and batch."""

    key: str
    compressor: str
    params: tuple
    reference_mode: str
    reference_compressor: str | None
    reference_params: tuple
    limit: float
    text: str


#: the hook targets over NVLink (2 x H100/H200; ResNet-50, ResNet-101, BERT-base): the one copy
HOOK_TARGETS = (
    HookTarget("powersgd vs syncSGD", "powersgd", (("rank", 4),), "syncsgd", None, (), 1.1,
               "the kit's PowerSGD rank-4 hook <= 1.1x syncSGD"),
    HookTarget("powersgd vs PyTorch's", "powersgd", (("rank", 4),), "builtin", "torch_powersgd", (("rank", 4),), 1.0,
               "the kit's PowerSGD rank-4 hook <= PyTorch's PowerSGD rank-4 hook"),
    HookTarget("fp16 vs PyTorch's", "fp16", (), "builtin", "torch_fp16", (), 1.0,
               "the kit's fp16 hook <= PyTorch's fp16 hook"),
)


def _has(params: dict | None, want: tuple) -> bool:
    return all((params or {}).get(k) == v for k, v in want)


def plain_runs(records: Iterable[dict]) -> list[dict]:
    """The records of plain configurations: DDP's default bucket, Python's GIL switch interval (not a
    ``ddp --switch-interval-ms`` A/B run, whose records would otherwise stand in for the plain ones), DDP's
    buffer broadcast (not ``ddp --no-broadcast-buffers``), DDP's own gradients (not ``ddp --gradient-as-bucket-view``)."""
    return [r for r in records if r.get("bucket_mb") is None and r.get("broadcast_buffers") is not False
            and not r.get("gradient_as_bucket_view") and '"switch_interval_ms"' not in str(r.get("config_id") or "")]


def _default_run(r: dict) -> bool:
    """An ok ``ddp`` record of a plain configuration: DDP's default bucket, Python's GIL switch interval
    (not a ``--switch-interval-ms`` A/B run), the backend's collectives (not ``--comm ps``)."""
    return (r.get("kind") == "ddp" and r.get("status") == "ok" and bool(plain_runs([r]))
            and r.get("comm") in (None, "collective"))


def _latest(records: Iterable[dict]) -> list[dict]:
    return sorted(records, key=lambda r: r.get("timestamp") or "")


def hook_targets(records: Iterable[dict], targets: Sequence[HookTarget] = HOOK_TARGETS,
                 coalesce_mb: Optional[float] = None, shaped: bool = False, runner: str = "thread") -> pd.DataFrame:
    """The NVLink hook targets (:data:`HOOK_TARGETS`) judged on ``ddp`` records without an emulated network: per
    (GPU, world size, model, batch) and target, the kit's overlapped hook (mode ``hook``, ``hook_overlap``
    true) against its reference (syncSGD or PyTorch's built-in hook), median iteration times, ``ratio`` =
    kit / reference and ``verdict`` PASS (ratio <= limit), MISS, or NOT MEASURED where either record is
    missing. The hook judged runs a protocol per bucket (``register``'s default) or, with ``coalesce_mb``,
    the hook that coalesced buckets so (``hook_coalesce_mb``; its label says so). Nothing is judged at world
    size 1 or for a model and batch where no kit hook ran (e.g. a batch sweep of syncSGD alone). The latest record of a configuration counts. Columns: gpu, world_size, model,
    batch_size, rate_gbps, target, text, kit, kit_ms, kit_n, reference, reference_ms, reference_n, ratio, limit,
    verdict. ``shaped``: the same targets judged per emulated rate instead (records with ``network.rate_gbps``;
    the fp16 and PowerSGD hooks have to hold at every rate, not only over NVLink). ``runner``: the hook judged ran
    its protocols so (``hook_runner``: "thread", the default and records without the field, or "graph")."""
    from studykit.measure.crossover import coalesce_text, method_label

    def rate(r):
        return (r.get("network") or {}).get("rate_gbps")
    recs = [r for r in _latest(records) if _default_run(r) and bool(rate(r)) == shaped
            and (r.get("mode") != "hook" or (r.get("hook_coalesce_mb") == coalesce_mb
                                             and (r.get("hook_runner") or "thread") == runner))]
    groups: dict[tuple, dict] = {}
    for r in recs:
        key = (r.get("gpu"), r.get("world_size"), r.get("model"), r.get("batch_size"), rate(r))
        groups.setdefault(key, {})[(r.get("mode"), r.get("compressor"), json.dumps(r.get("params") or {},
                                                                                    sort_keys=True))] = r
    rows = []
    for key, by in groups.items():
        if (key[1] or 1) < 2 or not any(m == "hook" for m, _, _ in by):  # judged where the kit's hooks ran
            continue
        for t in targets:
            kit = [r for (m, c, _), r in by.items() if m == "hook" and c == t.compressor and _has(r.get("params"), t.params)
                   and r.get("hook_overlap")]
            ref = [r for (m, c, _), r in by.items() if m == t.reference_mode and c == t.reference_compressor
                   and _has(r.get("params"), t.reference_params)]
            k, f = (_latest(kit) or [None])[-1], (_latest(ref) or [None])[-1]
            ratio = k["ms_median"] / f["ms_median"] if k and f else None
            verdict = "NOT MEASURED" if ratio is None else ("PASS" if ratio <= t.limit else "MISS")
            rows.append({"gpu": key[0], "world_size": key[1], "model": key[2], "batch_size": key[3],
                         "rate_gbps": key[4], "target": t.key,
                         "text": t.text,
                         "kit": method_label("hook", t.compressor, dict(t.params), None, True)
                         + coalesce_text(coalesce_mb) + runner_text(runner),
                         "kit_ms": k["ms_median"] if k else None, "kit_n": k.get("n_iter") if k else None,
                         "reference": method_label(t.reference_mode, t.reference_compressor, dict(t.reference_params),
                                                   None),
                         "reference_ms": f["ms_median"] if f else None, "reference_n": f.get("n_iter") if f else None,
                         "ratio": ratio, "limit": t.limit, "verdict": verdict})
    cols = ["gpu", "world_size", "model", "batch_size", "rate_gbps", "target", "text", "kit", "kit_ms", "kit_n", "reference",
            "reference_ms", "reference_n", "ratio", "limit", "verdict"]
    return pd.DataFrame(rows, columns=cols)


def runner_text(runner: Optional[str]) -> str:
    """' (graph runner)' for a hook whose buckets were replayed as CUDA graphs; '' for the communication thread."""
    return "" if runner in (None, "thread") else f" ({runner} runner)"


def _ms_n(ms, n) -> str:
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "not measured"
    return f"{ms:.1f} (n={int(n)})" if n is not None and not pd.isna(n) else f"{ms:.1f}"


def hook_targets_markdown(table: pd.DataFrame) -> str:
    """:func:`hook_targets` as a Markdown table (median iteration ms with the number of timed iterations),
    with the count of judged rows that PASS."""
    shaped = "rate_gbps" in table and table["rate_gbps"].notna().any()
    lines = [("| model (batch) | GPUs | " + ("link | " if shaped else "") + "target | kit hook ms (n) | reference | "
              "reference ms (n) | kit / reference | limit | verdict |"),
             "|---|---:|" + ("---:|" if shaped else "") + "---|---:|---|---:|---:|---:|---|"]
    for _, r in table.iterrows():
        ratio = "" if r["ratio"] is None or pd.isna(r["ratio"]) else f"{r['ratio']:.3f}"
        link = f"{r['rate_gbps']:g} Gbit/s | " if shaped else ""
        lines.append(f"| {r['model']} ({int(r['batch_size'])}) | {int(r['world_size'])} | {link}{r['text']} | "
                     f"{_ms_n(r['kit_ms'], r['kit_n'])} | {r['reference']} | "
                     f"{_ms_n(r['reference_ms'], r['reference_n'])} | {ratio} | {r['limit']:g}x | {r['verdict']} |")
    v = table["verdict"]
    lines += ["", (f"{int((v == 'PASS').sum())} of {int(v.isin(['PASS', 'MISS']).sum())} judged rows PASS; "
                   f"{int((v == 'NOT MEASURED').sum())} not measured.")]
    return "\n".join(lines) + "\n"


def hook_vs_post(records: Iterable[dict]) -> pd.DataFrame:
    """Whether the overlapped hook beats the post-backward path, judged on ``ddp`` records of an emulated
    network: per (GPU, world size, model, batch, rate, compressor and parameters), the kit's overlapped hook
    (mode ``hook``, ``hook_overlap`` true) against its own post-backward path for the same compressor, median iteration
    times; ``ratio`` = hook / post, ``verdict`` PASS (ratio <= 1) or MISS. Configurations with only one of
    the two are left out. The latest record of a configuration counts. A hook that coalesced buckets
    (``hook_coalesce_mb``), ran without DDP's buffer broadcast (``broadcast_buffers`` false), with its gradients as
    views into DDP's buckets (``gradient_as_bucket_view`` true) or replayed its buckets as CUDA graphs
    (``hook_runner`` graph) is a row of its own beside the per-bucket hook on the
    communication thread, its label saying so (post runs the plain model either way). Columns: gpu,
    world_size, model, batch_size, rate_gbps, compressor, params, label, hook_coalesce_mb, broadcast_buffers,
    hook_runner, gradient_as_bucket_view, hook_ms, hook_n, post_ms, post_n, ratio, verdict, hook_q25, hook_q75 (quartiles of the hook's timed
    iterations, ms; NaN where the record kept none)."""
    from studykit.measure.crossover import buffers_text, coalesce_text
    from studykit.measure.timing import quartiles

    by: dict[tuple, dict] = {}
    for r in _latest(records):
        rate = (r.get("network") or {}).get("rate_gbps")
        nobuf = r.get("broadcast_buffers") is False and r.get("mode") == "hook"
        view = bool(r.get("gradient_as_bucket_view")) and r.get("mode") == "hook"
        if not _default_run({**r, "broadcast_buffers": None, "gradient_as_bucket_view": None}
                            if r.get("mode") == "hook" else r) or not rate \
                or r.get("mode") not in ("hook", "post"):
            continue
        if r.get("mode") == "hook" and not r.get("hook_overlap"):
            continue
        key = (r.get("gpu"), r.get("world_size"), r.get("model"), r.get("batch_size"), float(rate),
               r.get("compressor"), json.dumps(r.get("params") or {}, sort_keys=True))
        mode = (("hook", r.get("hook_coalesce_mb"), not nobuf, r.get("hook_runner") or "thread", view)
                if r["mode"] == "hook" else ("post", None, True, None, False))
        by.setdefault(key, {})[mode] = r
    rows = []
    for key, found in sorted(by.items(), key=lambda kv: tuple(str(x) for x in kv[0][:4]) + kv[0][4:5]
                             + tuple(str(x) for x in kv[0][5:])):
        p = found.get(("post", None, True, None, False))
        if p is None:
            continue
        hooks = [(mb, bb, run, view, h) for (m, mb, bb, run, view), h in found.items() if m == "hook"]
        # per bucket first (DDP's buffer broadcast, then without), then coalesced by MB; the thread before the graph;
        # DDP's own gradients before views into its buckets
        for mb, bb, run, view, h in sorted(hooks, key=lambda x: (x[0] is not None, x[0] or 0, not x[1],
                                                                 x[2] != "thread", x[3])):
            ratio = h["ms_median"] / p["ms_median"]
            q25, _, q75 = quartiles(h["times_ms"]) if h.get("times_ms") else (math.nan,) * 3
            rows.append({"gpu": key[0], "world_size": key[1], "model": key[2], "batch_size": key[3],
                         "rate_gbps": key[4], "compressor": key[5], "params": json.loads(key[6]),
                         "label": setting_label(key[5], json.loads(key[6]), "short")
                         + coalesce_text(mb) + runner_text(run) + (" bucket views" if view else "")
                         + buffers_text(None if bb else False),
                         "hook_coalesce_mb": mb, "broadcast_buffers": None if bb else False, "hook_runner": run,
                         "gradient_as_bucket_view": view,
                         "hook_ms": h["ms_median"], "hook_n": h.get("n_iter"), "post_ms": p["ms_median"],
                         "post_n": p.get("n_iter"), "ratio": ratio, "verdict": "PASS" if ratio <= 1.0 else "MISS",
                         "hook_q25": q25, "hook_q75": q75})
    cols = ["gpu", "world_size", "model", "batch_size", "rate_gbps", "compressor", "params", "label",
            "hook_coalesce_mb", "broadcast_buffers", "hook_runner", "gradient_as_bucket_view", "hook_ms", "hook_n", "post_ms", "post_n", "ratio",
            "verdict", "hook_q25", "hook_q75"]
    return pd.DataFrame(rows, columns=cols)


def hook_vs_post_markdown(table: pd.DataFrame) -> str:
    """:func:`hook_vs_post` as a Markdown table: one row per model, batch, world size and compressor, one
    column per rate (hook / post, ``*`` where the hook is slower), then the count of rows that PASS, per
    compressor and in all."""
    rates = sorted(table["rate_gbps"].unique())
    lines = ["| model (batch) | GPUs | compressor | " + " | ".join(f"{r:g} Gbit/s" for r in rates) + " |",
             "|---|---:|---|" + "---:|" * len(rates)]
    for (m, b, w, lab), g in table.groupby(["model", "batch_size", "world_size", "label"], sort=True):
        cells = []
        for rate in rates:
            x = g[g["rate_gbps"] == rate]
            cells.append("" if x.empty else f"{x['hook_ms'].iloc[0]:.1f} / {x['post_ms'].iloc[0]:.1f}"
                         + (" *" if x["verdict"].iloc[0] == "MISS" else ""))
        lines.append(f"| {m} ({int(b)}) | {int(w)} | {lab} | " + " | ".join(cells) + " |")
    v = table["verdict"]
    per = [f"{lab} {int((g['verdict'] == 'PASS').sum())}/{len(g)}" for lab, g in table.groupby("label", sort=True)]
    lines += ["", f"Hook / post median ms; `*`: the hook is slower. {int((v == 'PASS').sum())} of {len(table)} "
                  f"configurations PASS (hook <= post): {', '.join(per)}."]
    return "\n".join(lines) + "\n"


def profile_phases_markdown(records: Iterable[dict]) -> str:
    """``profile`` records as a Markdown table: one row per model and compressor setting (its label names
    options that differ from their default: 'powersgd r32 cholesky'), one column per phase found (``reduce``,
    ``reduce_buckets``, their ``_host_ahead`` timings, ...), mean ms, or ``error`` where the timing failed (the
    reason is in the record). The latest record of a configuration counts."""
    cells: dict[tuple, dict] = {}
    phases: list[str] = []
    for r in _latest(records):
        if r.get("kind") != "profile":
            continue
        key = (r.get("model"), setting_label(r.get("compressor"), r.get("params") or {}, "short"))
        phase = r.get("phase")
        if phase not in phases:
            phases.append(phase)
        cells.setdefault(key, {})[phase] = (f"{r['ms_mean']:.2f}" if r.get("status") == "ok" else "error")
    if not cells:
        raise ValueError("profile_phases_markdown: no profile records")
    lines = ["| model | compressor | " + " | ".join(f"{ph} ms" for ph in phases) + " |",
             "|---|---|" + "---:|" * len(phases)]
    for (model, lab), by in cells.items():
        lines.append(f"| {model} | {lab} | " + " | ".join(by.get(ph, "") for ph in phases) + " |")
    return "\n".join(lines) + "\n"


def rerun_spread(first: Iterable[dict], second: Iterable[dict]) -> pd.DataFrame:
    """The same DDP configurations measured in two campaigns (another lent machine, another day): per
    ``config_id`` with an ok ``ddp`` record in both (the latest of each; one record copied into both files
    by a resumed campaign, same ``timestamp``, is not a rerun and is left out), both medians and ``spread`` =
    larger / smaller - 1. This is how far a measurement itself moves from run to run: no model can be
    expected to predict one campaign from the other more closely. Columns: config_id, model, batch_size, mode,
    group, compressor, params, rate_gbps, ms_first, ms_second, spread."""
    from studykit.measure.crossover import buffers_text, coalesce_text, method_label

    def latest(records) -> dict:
        return {r["config_id"]: r for r in _latest(records)
                if r.get("kind") == "ddp" and r.get("status") == "ok" and r.get("config_id")}

    a, b = latest(first), latest(second)
    rows = []
    for cid in sorted(set(a) & set(b)):
        ra, rb = a[cid], b[cid]
        if ra.get("timestamp") == rb.get("timestamp"):  # one measurement in both files (a resumed campaign's copy)
            continue
        lo, hi = sorted((float(ra["ms_median"]), float(rb["ms_median"])))
        mode = ra.get("mode")
        group = {"syncsgd": "syncSGD", "builtin": "PyTorch's hooks", "post": "compressors (post)"}.get(
            mode, "compressors (hook)" if mode == "hook" and ra.get("hook_overlap") else "compressors (blocking hook)")
        rows.append({"config_id": cid, "model": ra.get("model"), "batch_size": ra.get("batch_size"), "mode": mode,
                     "group": group,
                     "label": method_label(mode, ra.get("compressor"), ra.get("params"), ra.get("bucket_mb"),
                                           ra.get("hook_overlap")) + coalesce_text(ra.get("hook_coalesce_mb"))
                              + buffers_text(ra.get("broadcast_buffers")),
                     "compressor": ra.get("compressor"), "params": ra.get("params"),
                     "rate_gbps": (ra.get("network") or {}).get("rate_gbps"),
                     "ms_first": float(ra["ms_median"]), "ms_second": float(rb["ms_median"]), "spread": hi / lo - 1})
    cols = ["config_id", "model", "batch_size", "mode", "group", "label", "compressor", "params", "rate_gbps",
            "ms_first", "ms_second", "spread"]
    return pd.DataFrame(rows, columns=cols)


def rerun_spread_markdown(pairs: Mapping[str, pd.DataFrame]) -> str:
    """:func:`rerun_spread` of several campaign pairs (name -> table) as one Markdown table: per pair and group,
    the number of configurations measured in both, the median and largest spread, and the configuration with
    the largest."""
    lines = ["| campaigns | group | n | median spread | max spread | largest: configuration (ms, ms) |",
             "|---|---|---:|---:|---:|---|"]
    for name, t in pairs.items():
        if t.empty:
            raise ValueError(f"rerun_spread_markdown: {name}: no configuration measured in both campaigns")
        for group, g in t.groupby("group", sort=True):
            w = g.loc[g["spread"].idxmax()]
            rate = "" if w["rate_gbps"] is None or pd.isna(w["rate_gbps"]) else f" {w['rate_gbps']:g} Gbit/s"
            lines.append(f"| {name} | {group} | {len(g)} | {100 * g['spread'].median():.1f} % | "
                         f"{100 * g['spread'].max():.1f} % | {w['model']} b{int(w['batch_size'])} {w['label']}{rate} "
                         f"({w['ms_first']:.1f}, {w['ms_second']:.1f}) |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- parameter server beside Table 1
def ps_vs_collective(ps_records: Iterable[dict], collective_sources: Mapping[str, Iterable[dict]]) -> pd.DataFrame:
    """A compressor's protocol through one parameter server against the same protocol on the backend's
    collectives, measured in DDP iterations on an emulated network, beside what Agarwal et al. 2022
    (https://arxiv.org/abs/2103.00543) Table 1 (Sec. 2.2; Fig. 4) predicts for the difference.

    ``ps_records``: ``ddp`` records of mode ``post`` with ``comm`` "ps" (``ddp --comm ps``) on an emulated
    network; ``collective_sources``: named record sets searched in order for the same configuration
    (GPU, world size, model, batch, compressor, params, rate) without ``comm`` (the first set that has it
    wins; its name is the row's ``collective_from``). Plain configurations only (no GIL A/B, default bucket).

    The model's side (the paper's model, :meth:`~studykit.perfmodel.model.ModelOptions.paper`, at the
    records' emulated rate, the paper's alpha): the compressor's own ``plan()`` at that world size priced
    collective by collective by Eq. 1 / App. B (``model_collective_ms``) and through the server by Table 1's
    ``2 alpha + 2 (p-1) b / BW`` (:func:`~studykit.perfmodel.model.parameter_server_plan_s`, ``model_ps_ms``).
    Both runs compute and encode alike, so Table 1 predicts the server's iteration as the measured
    collective iteration plus the difference: ``predicted_ratio = (collective_ms + model_extra_ms) /
    collective_ms``. The server's aggregate is priced as one payload (exact for sums; for all-gather payloads
    the kit's server returns all ``p`` of them, so Table 1 is a lower bound there).

    Columns: gpu, world_size, model, batch_size, rate_gbps, compressor, params, payload, scheme, collective_from,
    collective_ms, collective_n, ps_ms, ps_n, measured_ratio, measured_extra_ms, model_collective_ms, model_ps_ms,
    model_extra_ms, predicted_ratio (None where the collective path was not measured)."""
    # the model is the layer below the records; imported here, as the table is the one place they meet
    from studykit import models
    from studykit.perfmodel import model as pm

    def key(r: dict) -> tuple:
        return (r.get("gpu"), r.get("world_size"), r.get("model"), r.get("batch_size"), r.get("compressor"),
                json.dumps(r.get("params") or {}, sort_keys=True), float((r.get("network") or {}).get("rate_gbps")))

    def post(records, comm) -> dict:
        return {key(r): r for r in _latest(plain_runs(records))
                if r.get("kind") == "ddp" and r.get("status") == "ok" and r.get("mode") == "post"
                and (r.get("network") or {}).get("rate_gbps") and r.get("comm") == comm}

    servers = post(ps_records, "ps")
    sources = {name: post(recs, None) for name, recs in collective_sources.items()}
    opts = pm.ModelOptions.paper()
    rows = []
    for k, s in servers.items():
        gpu, p, model, batch, comp, params_json, rate = k
        params = json.loads(params_json)
        found = next(((name, by[k]) for name, by in sources.items() if k in by), (None, None))
        plan = list(pm.plan_summary(comp, params, models.param_shapes(model), int(p)).collectives)
        hw = pm.Hardware(bandwidth_gbps=rate)
        coll_ms = 1e3 * sum(float(pm.collective_s(c["op"], float(c["nbytes"]), p, hw, opts)) for c in plan)
        ps_ms = 1e3 * float(pm.parameter_server_plan_s(plan, p, hw))
        ops = {c["op"] for c in plan}
        c = found[1]
        rows.append({"gpu": gpu, "world_size": p, "model": model, "batch_size": batch, "rate_gbps": rate,
                     "compressor": comp, "params": params_json,
                     "payload": "fp32 gradient" if comp == "none" else setting_label(comp, params, "short"),
                     "scheme": {"all_reduce": "all-reduce", "all_gather": "all-gather"}.get(ops.pop(), "mixed")
                     if len(ops) == 1 else "mixed",
                     "collective_from": found[0], "collective_ms": c["ms_median"] if c else None,
                     "collective_n": c.get("n_iter") if c else None, "ps_ms": s["ms_median"], "ps_n": s.get("n_iter"),
                     "measured_ratio": s["ms_median"] / c["ms_median"] if c else None,
                     "measured_extra_ms": s["ms_median"] - c["ms_median"] if c else None,
                     "model_collective_ms": coll_ms, "model_ps_ms": ps_ms, "model_extra_ms": ps_ms - coll_ms,
                     "predicted_ratio": (c["ms_median"] + ps_ms - coll_ms) / c["ms_median"] if c else None})
    cols = ["gpu", "world_size", "model", "batch_size", "rate_gbps", "compressor", "params", "payload", "scheme",
            "collective_from", "collective_ms", "collective_n", "ps_ms", "ps_n", "measured_ratio", "measured_extra_ms",
            "model_collective_ms", "model_ps_ms", "model_extra_ms", "predicted_ratio"]
    return pd.DataFrame(rows, columns=cols)


def ps_vs_collective_markdown(table: pd.DataFrame) -> str:
    """:func:`ps_vs_collective` as a Markdown table: measured iterations (median ms, n), their ratio and
    difference, and Table 1's difference and predicted ratio."""
    def num(x, d=1):
        return "—" if x is None or pd.isna(x) else f"{x:.{d}f}"

    lines = [("| model (batch), p, rate | payload | collective path | collective ms (n) | via PS ms (n) "
              "| PS / collective, measured | PS - collective, measured ms | PS - collective, Table 1 ms "
              "| PS / collective, Table 1 predicts | collective record |"),
             "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for _, r in table.iterrows():
        lines.append(f"| {r['model']} ({int(r['batch_size'])}), {int(r['world_size'])}, {r['rate_gbps']:g} Gbit/s | "
                     f"{r['payload']} | {r['scheme']} | {_ms_n(r['collective_ms'], r['collective_n'])} | "
                     f"{_ms_n(r['ps_ms'], r['ps_n'])} | {num(r['measured_ratio'], 2)} | {num(r['measured_extra_ms'])} | "
                     f"{num(r['model_extra_ms'])} | {num(r['predicted_ratio'], 2)} | "
                     f"{r['collective_from'] if isinstance(r['collective_from'], str) else '—'} |")
    return "\n".join(lines) + "\n"
