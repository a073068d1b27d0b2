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
from pathlib import Path
from typing import Optional

import pandas as pd

from studykit import compressors, paths
from studykit.measure.records import load_records

__all__ = ["load_frame", "provenance_summary", "label", "encode_decode_table", "table2", "table3",
           "backward_ms", "paper_table", "ddp_table"]

#: the paper's families (Table 2's "Type" column); the kit's other compressors go under "Dense / other"
_FAMILY_LABEL = {"sparsification": "Sparsification", "quantization": "Quantization", "low-rank": "Low rank",
                 "precision": "Dense"}
FAMILY = {n: _FAMILY_LABEL[compressors.metadata(n).family] for n in compressors.available()}
FAMILY_ORDER = ["Sparsification", "Quantization", "Low rank", "Dense", "Dense / other"]
#: Table 3 of Agarwal et al. 2022: (compressor, the parameter it varies, values)
TABLE3 = [("powersgd", "rank", [4, 8, 16]), ("mstopk", "ratio", [0.01, 0.001]), ("signsgd", None, [None])]
_KEY_PARAM = {n: compressors.metadata(n).key_param for n in compressors.available()}  # from the classes


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
    """Readable method label: ``topk 1%``, ``powersgd rank 4``, ``signsgd``."""
    params = params if isinstance(params, dict) else json.loads(params or "{}")
    key = _KEY_PARAM.get(compressor)
    if key is None or key not in params:
        return compressor
    v = params[key]
    if key == "ratio":
        return f"{compressor} {v * 100:g}%"
    return f"{compressor} {key} {v}"


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
