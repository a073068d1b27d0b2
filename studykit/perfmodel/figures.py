"""The paper's measured figures redrawn from the kit's one performance model: Agarwal et al. 2022
(MLSys 2022, https://arxiv.org/abs/2103.00543), Sec. 3, Figs. 4-10 and App. A.

Each function returns a tidy DataFrame; :mod:`studykit.plots.paper` draws them and
``notebooks/paper_figures.py`` orchestrates. Every model number comes from
:func:`studykit.perfmodel.model.predict` (Sec. 4.1 and App. B) on a calibration (default: the paper's
V100 inputs, ``data/calibrations/paper_v100.json``); every paper number from ``data/paper/``
(``claims.csv`` for the numbers the claims table scores, ``figure_statements.csv`` for what the text
and captions of Figs. 4-10 and 14 state); every measured point from committed records
(``data/measurements/``, read by :func:`studykit.measure.records.load_records`).

* :func:`scaling`: Figs. 6-8, iteration time and speed-up over syncSGD against GPUs;
* :func:`batch_scaling`: Fig. 9, PowerSGD rank 4 against syncSGD at batch 16, 32, 64;
* :func:`gap`: Fig. 10, time above linear scaling (syncSGD's, and each compressor's) against GPUs;
* :func:`collectives` / :func:`measured_collectives`: Fig. 4, all-reduce vs all-gather vs parameter server;
  :func:`measured_ps_iterations`: the same three in measured training iterations (``ddp --comm ps``);
* :func:`overlap`, :func:`break_even` / :func:`measured_overlap`: Fig. 5 and App. A, compression overlapped with the backward pass;
* :func:`paper_points`, :func:`measured_points`: the paper's and the kit's measured points beside the lines;
* :func:`statements`: every statement of ``figure_statements.csv``, paper value beside the kit's, with a verdict.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from studykit import models as _models
from studykit.perfmodel import claims as _claims
from studykit.perfmodel import paper, whatif
from studykit.perfmodel.calibration import Calibration
from studykit.perfmodel.model import (
    ModelOptions,
    Workload,
    allreduce_s,
    collective_s,
    parameter_server_plan_s,
    plan_summary,
    predict,
)

__all__ = [
    "FIG5_METHODS",
    "FIGURE_METHODS",
    "GPU_COUNTS",
    "MEASURED_METHODS",
    "MODELS",
    "batch_scaling",
    "break_even",
    "collectives",
    "gap",
    "measured_collectives",
    "measured_overlap",
    "measured_points",
    "measured_ps_iterations",
    "method_name",
    "overlap",
    "paper_points",
    "scaling",
    "statements",
]

#: the GPU counts of Figs. 6-10: App. E runs "from 2 p3.8x large instances to upto 24" (4 V100 each);
#: Sec. 3.2 names 16, 32 and 96 GPUs, Figs. 2-5 use 64 (a reading: the paper does not list them)
GPU_COUNTS = (8, 16, 32, 64, 96)
#: the three models of Sec. 3 ("ResNet-50 (97MB), ResNet-101 (170MB) and BERT_BASE (418MB)")
MODELS = ("resnet50", "resnet101", "bert_base")
#: the compressor settings of each figure (Sec. 3: PowerSGD rank 4/8/16, MSTop-K 1 % and 0.1 %, SignSGD)
FIGURE_METHODS = {
    "fig6": (("powersgd", {"rank": 4}), ("powersgd", {"rank": 8}), ("powersgd", {"rank": 16})),
    "fig7": (("mstopk", {"ratio": 0.01}), ("mstopk", {"ratio": 0.001})),
    "fig8": (("signsgd", {}),),
}
#: the kit's measured method nearest each figure's (``studykit.measure.crossover.method_label`` names):
#: the bandwidth campaign ran PowerSGD rank 4, TopK 1 % (not MSTop-K) and EF-SignSGD (not majority vote)
MEASURED_METHODS = {"fig6": ("powersgd r4 (post)",), "fig7": ("topk 1% (post)",), "fig8": ("ef_signsgd (post)",)}
#: Fig. 5: "ResNet-50 using POWERSGD Rank-4, MSTOP-K-1%, and SIGNSGD" (Sec. 3.1), and the kit's measured nearest
FIG5_METHODS = (("powersgd", {"rank": 4}, "powersgd r4"), ("mstopk", {"ratio": 0.01}, "topk 1%"),
                ("signsgd", {}, "ef_signsgd"))

_NAMES = {"powersgd": "PowerSGD rank {rank}", "mstopk": "MSTop-K {pct}", "signsgd": "SignSGD", "none": "syncSGD"}


def method_name(compressor: str, params: dict | None = None) -> str:
    """The paper's name of a setting: ``PowerSGD rank 4``, ``MSTop-K 0.1%``, ``SignSGD``."""
    params = params or {}
    if compressor not in _NAMES:  # a JSON object's braces are no format fields
        return compressor + (" " + json.dumps(params, sort_keys=True) if params else "")
    return _NAMES[compressor].format(pct=f"{100 * params.get('ratio', 0):g}%", **params)


def _cal(calibration: Calibration | None) -> Calibration:
    return calibration or whatif.paper_calibration()


def _rows(model: str, batch_size: int, world_sizes, bandwidth_gbps: float, methods, cal: Calibration,
          figure: str) -> pd.DataFrame:
    """syncSGD and each method at every world size: one vectorized predict per method."""
    p = np.asarray(world_sizes, dtype=int)
    hw = whatif.hardware(cal, bandwidth_gbps=bandwidth_gbps)
    w = Workload(model, batch_size)
    frames = []
    for comp, params in methods:
        pr = predict(w, hw, p, comp, params, calibration=cal)
        frames.append(pd.DataFrame({"method": method_name(comp, params), "compressor": comp,
                                    "params": json.dumps(params, sort_keys=True), "world_size": p,
                                    "time_ms": pr.compressed["total_s"] * 1e3, "sync_ms": pr.sync["total_s"] * 1e3,
                                    "linear_ms": pr.linear_s * 1e3 + 0 * p}))
    sync = frames[0][["world_size", "sync_ms", "linear_ms"]].assign(
        method="syncSGD", compressor="none", params="{}", time_ms=frames[0]["sync_ms"])
    df = pd.concat([sync] + frames, ignore_index=True)
    df["speedup"] = df["sync_ms"] / df["time_ms"]
    return df.assign(figure=figure, model=model, batch_size=batch_size, bandwidth_gbps=float(bandwidth_gbps))


def scaling(figure: str = "fig6", models=MODELS, world_sizes=GPU_COUNTS, batch_size: int = 64,
            bandwidth_gbps: float = 10.0, calibration: Calibration | None = None) -> pd.DataFrame:
    """Figs. 6 (PowerSGD), 7 (MSTop-K), 8 (SignSGD): per-iteration time (backward + synchronization, the
    paper's ``T_obs``) of syncSGD (Sec. 4.1) and the figure's compressors (App. B, after the backward pass,
    as the paper's main figures) against GPUs, one row per (model, method, GPU count).

    Columns: figure, model, batch_size, bandwidth_gbps, method, compressor, params, world_size, time_ms,
    sync_ms, linear_ms (``T_comp``: linear scaling), speedup (syncSGD / method; 1 for syncSGD)."""
    if figure not in FIGURE_METHODS:
        raise ValueError(f"unknown figure {figure!r}; valid: {sorted(FIGURE_METHODS)}")
    cal = _cal(calibration)
    return pd.concat([_rows(m, batch_size, world_sizes, bandwidth_gbps, FIGURE_METHODS[figure], cal, figure)
                      for m in models], ignore_index=True)


def batch_scaling(model: str = "resnet101", batch_sizes=(16, 32, 64), world_sizes=GPU_COUNTS,
                  bandwidth_gbps: float = 10.0, compressor: str = "powersgd", params: dict | None = None,
                  calibration: Calibration | None = None) -> pd.DataFrame:
    """Fig. 9 (Sec. 3.3): PowerSGD rank 4 against syncSGD on ResNet-101 at several per-worker batch sizes.
    ``T_comp`` of a batch the calibration lacks is linear in batch (the calibration's look-up says so).
    Same columns as :func:`scaling`."""
    cal = _cal(calibration)
    params = {"rank": 4} if params is None and compressor == "powersgd" else (params or {})
    return pd.concat([_rows(model, int(b), world_sizes, bandwidth_gbps, [(compressor, params)], cal, "fig9")
                      for b in batch_sizes], ignore_index=True)


def gap(models=MODELS, world_sizes=GPU_COUNTS, batch_size: int = 64, bandwidth_gbps: float = 10.0,
        methods=(("powersgd", {"rank": 4}),), calibration: Calibration | None = None) -> pd.DataFrame:
    """Fig. 10 (Sec. 3.2): time above linear scaling, ``T_obs - T_comp`` (ms), of syncSGD and of each
    compressor, against GPUs. A compressor pays only where its gap (encode/decode + communication, App. B)
    is below syncSGD's ("they need to perform compression and communication in less than 200ms").
    Columns of :func:`scaling` plus ``gap_ms``."""
    cal = _cal(calibration)
    df = pd.concat([_rows(m, batch_size, world_sizes, bandwidth_gbps, methods, cal, "fig10") for m in models],
                   ignore_index=True)
    return df.assign(gap_ms=df["time_ms"] - df["linear_ms"])


# ------------------------------------------------------------------ Fig. 4
def collectives(model: str = "resnet50", world_sizes=(2, 4, 8, 16, 32, 64, 96), bandwidth_gbps: float = 10.0,
                payloads=(("none", {}), ("signsgd", {})), calibration: Calibration | None = None) -> pd.DataFrame:
    """Fig. 4: time (ms) to aggregate one iteration's gradient by ring all-reduce (Eq. 1), ring all-gather
    (App. B) and a parameter server (Table 1), against GPUs, from the paper's equations.

    ``payloads``: ``("none", {})`` is syncSGD's fp32 gradient, one message; a compressor's is its own
    ``plan()``, each collective priced as all-gather (:func:`~studykit.perfmodel.model.collective_s`; an
    all-reduce-compatible plan keeps its all-reduces) or through the parameter server
    (:func:`~studykit.perfmodel.model.parameter_server_plan_s`). All-reduce is only offered for the fp32
    gradient: SignSGD's majority vote and MSTop-K need a gather (Sec. 3.2). Columns: model, payload, scheme,
    world_size, bandwidth_gbps, nbytes (per worker), time_ms."""
    cal = _cal(calibration)
    hw = whatif.hardware(cal, bandwidth_gbps=bandwidth_gbps)
    opts = ModelOptions.paper()
    shapes = _models.param_shapes(model)
    rows = []
    for comp, params in payloads:
        for p in world_sizes:
            if comp == "none":
                plan = [{"op": "all_reduce", "nbytes": 4 * _models.numel(model)}]
            else:
                plan = list(plan_summary(comp, params, shapes, int(p)).collectives)
            nbytes = float(sum(c["nbytes"] for c in plan))
            schemes = {"all-gather (App. B)": sum(float(collective_s("all_gather", c["nbytes"], p, hw, opts))
                                                  for c in plan),
                       "parameter server (Table 1)": float(parameter_server_plan_s(plan, p, hw))}
            if comp == "none":
                schemes = {"all-reduce (Eq. 1)": float(allreduce_s(nbytes, p, hw, opts)), **schemes}
            for scheme, t in schemes.items():
                rows.append({"model": model, "payload": "fp32 gradient" if comp == "none" else method_name(comp, params),
                             "scheme": scheme, "world_size": int(p), "bandwidth_gbps": float(bandwidth_gbps),
                             "nbytes": nbytes, "time_ms": t * 1e3})
    return pd.DataFrame(rows)


#: sweep ops -> Fig. 4's schemes (the kit's parameter server: gather or reduce to rank 0, then broadcast)
_SWEEP_SCHEMES = {"all_reduce": "all-reduce", "all_gather": "all-gather", "ps_gather": "parameter server (gather)",
                  "ps_reduce": "parameter server (reduce)"}


def measured_collectives(records, nbytes: float | None = None) -> pd.DataFrame:
    """Fig. 4 measured: the kit's ``sweep`` records (NCCL all-reduce, all-gather and its two parameter-server
    emulations) at one message size per worker (default: the largest all four ops share), one row per
    (op, world size). Columns: scheme, op, world_size, nbytes, ms (median), ms_min, ms_max, gpu, network."""
    df = pd.DataFrame([r for r in records if r.get("kind") == "sweep" and r.get("status", "ok") == "ok"])
    if df.empty:
        return pd.DataFrame(columns=["scheme", "op", "world_size", "nbytes", "ms", "ms_min", "ms_max", "gpu", "network"])
    df = df[df["op"].isin(list(_SWEEP_SCHEMES))]
    if nbytes is None:
        common = set.intersection(*(set(g["size_bytes"]) for _, g in df.groupby("op")))
        nbytes = max(common)
    df = df[df["size_bytes"] == nbytes]
    net = df["network"].map(lambda n: "NVLink / host" if not n else f"{n.get('rate_gbps'):g} Gbit/s emulated")
    out = pd.DataFrame({"scheme": df["op"].map(_SWEEP_SCHEMES), "op": df["op"], "world_size": df["world_size"],
                        "nbytes": df["size_bytes"].astype(float), "ms": df["ms_median"], "ms_min": df["ms_min"],
                        "ms_max": df["ms_max"], "gpu": df["gpu"], "network": net})
    return out.sort_values(["op", "world_size"]).reset_index(drop=True)


def _protocol_scheme(compressor: str, params: dict, model: str, world_size: int) -> str:
    """"all-reduce", "all-gather" or "mixed": the collectives of the compressor's own ``plan()`` at ``world_size``."""
    ops = {c["op"] for c in plan_summary(compressor, params, _models.param_shapes(model), int(world_size)).collectives}
    return {frozenset({"all_reduce"}): "all-reduce", frozenset({"all_gather"}): "all-gather"}.get(frozenset(ops), "mixed")


def _payload_name(compressor: str, params: dict) -> str:
    """'fp32 gradient', the paper's name ('SignSGD'), else the bandwidth campaign's short one ('topk 1%')."""
    from studykit.measure.crossover import method_label

    if compressor == "none":
        return "fp32 gradient"
    return method_name(compressor, params) if compressor in _NAMES else method_label("", compressor, params, None)[:-3]


def measured_ps_iterations(records, compressors=("none", "fp16", "signsgd")) -> pd.DataFrame:
    """Fig. 4 in training iterations: the kit's ``ddp`` records of mode post (the compressor after the backward
    pass, one bucket: the paper's non-overlapped implementation, Sec. 3) of ``compressors``, each protocol
    through the backend's collectives (scheme "all-reduce" or "all-gather", from the compressor's ``plan()`` at
    that world size) or through one parameter server on rank 0 (``comm`` "ps": scheme "parameter server";
    :class:`studykit.comm.ParameterServerComm`, Table 1, Sec. 2.2). One row per (network, compressor, scheme,
    world size), the latest record. Columns: network, payload, compressor, scheme, world_size, ms (median),
    ms_min, ms_max, n_iter, model, batch_size, gpu (the GPU, or on CPU runs the CPU: the records' field), backend."""
    cols = ["network", "payload", "compressor", "scheme", "world_size", "ms", "ms_min", "ms_max", "n_iter", "model",
            "batch_size", "gpu", "backend"]
    rows = []
    for r in records:
        if r.get("kind") != "ddp" or r.get("status") != "ok" or r.get("mode") != "post" \
                or r.get("compressor") not in compressors:
            continue
        net = r.get("network") or {}
        params = r.get("params") or {}
        scheme = ("parameter server" if r.get("comm") == "ps"
                  else _protocol_scheme(r["compressor"], params, r["model"], r["world_size"]))
        rows.append({"network": "one host, unshaped" if net.get("rate_gbps") is None
                     else f"{net['rate_gbps']:g} Gbit/s per worker link (emulated)",
                     "payload": _payload_name(r["compressor"], params),
                     "compressor": r["compressor"], "scheme": scheme, "world_size": int(r["world_size"]),
                     "ms": r["ms_median"], "ms_min": r["ms_min"], "ms_max": r["ms_max"], "n_iter": r["n_iter"],
                     "model": r["model"], "batch_size": r["batch_size"], "gpu": r.get("gpu"),
                     "backend": r.get("backend"), "timestamp": r.get("timestamp") or ""})
    if not rows:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame(rows).sort_values("timestamp")
    df = df.drop_duplicates(["network", "compressor", "scheme", "world_size", "model", "batch_size"], keep="last")
    order = {c: i for i, c in enumerate(compressors)}
    return df[cols].sort_values(["network", "compressor", "scheme", "world_size"],
                                key=lambda c: c.map(order) if c.name == "compressor" else c).reset_index(drop=True)


# ------------------------------------------------------------------ Fig. 5 / App. A
def overlap(model: str = "resnet50", batch_size: int = 64, world_size: int = 64, bandwidth_gbps: float = 10.0,
            methods=FIG5_METHODS, hidden_fractions=tuple(i / 10 for i in range(11)),
            calibration: Calibration | None = None) -> pd.DataFrame:
    """Fig. 5 / App. A: a compressor overlapped with the backward pass (as a DDP hook, per bucket) against
    the same compressor after it (App. B), as a function of the fraction ``h`` of encode/decode that hides
    under the backward pass.

    The hook is the kit's per-bucket timeline (``ModelOptions(overlap="timeline")``, mode ``"hook"``): each
    bucket is encoded once its gradients are ready, sent when the link is free and decoded after. ``h = 0`` is
    the kit's default (encode/decode on the backward pass's stream, delaying it: what App. A's Nsight trace,
    Fig. 13, shows); ``h = 1`` is a free encode/decode (what overlap would give if compression used no GPU
    the backward pass needs). Columns: method, compressor, params, hidden_fraction, hook_ms, post_ms,
    sync_ms, t_encode_decode_ms, ratio (hook / post: above 1 overlapping is slower, the paper's finding).
    As in the paper's Sec. 4.1, the backward pass overlapped with communication is slowed by gamma, the hook's
    too (``ModelOptions.hook_gamma``; the kit's own hooks are scored at gamma 1 by default,
    data/verification/bandwidth/README.md)."""
    cal = _cal(calibration)
    hw = whatif.hardware(cal, bandwidth_gbps=bandwidth_gbps)
    w = Workload(model, batch_size)
    tl = ModelOptions(overlap="timeline", hook_gamma=True)
    rows = []
    for comp, params, _ in methods:
        post = predict(w, hw, world_size, comp, params, calibration=cal)
        ted = post.notes["t_encode_decode_s"]
        for h in hidden_fractions:
            hook = predict(w, hw, world_size, comp, params, calibration=cal, mode="hook", options=tl,
                           t_encode_decode_s=(1.0 - float(h)) * ted)
            rows.append({"method": method_name(comp, params), "compressor": comp,
                         "params": json.dumps(params, sort_keys=True), "hidden_fraction": float(h),
                         "hook_ms": float(hook.compressed["total_s"]) * 1e3,
                         "post_ms": float(post.compressed["total_s"]) * 1e3,
                         "sync_ms": float(post.sync["total_s"]) * 1e3, "t_encode_decode_ms": ted * 1e3})
    df = pd.DataFrame(rows)
    df["ratio"] = df["hook_ms"] / df["post_ms"]
    return df.assign(model=model, batch_size=batch_size, world_size=world_size, bandwidth_gbps=float(bandwidth_gbps))


def break_even(df: pd.DataFrame) -> pd.DataFrame:
    """Per method of an :func:`overlap` frame: the fraction of encode/decode that must hide under the
    backward pass for the hook to be as fast as compressing after it (``hook_ms = post_ms``), from a straight
    line through the frame's points (the timeline is piecewise linear in it). Below 0: even an encode/decode
    that delays the backward pass by its whole time beats post; App. A's slower hooks then mean contention
    costs more than encode/decode's own time. Above 1: no overlap can pay. Columns: method, break_even_fraction."""
    rows = []
    for method, g in df.groupby("method", sort=False):
        slope, icept = np.polyfit(g["hidden_fraction"], g["hook_ms"] - g["post_ms"], 1)
        rows.append({"method": method, "break_even_fraction": float(-icept / slope) if slope else np.nan})
    return pd.DataFrame(rows)


def measured_overlap(records, rate_gbps: float = 10.0, methods=FIG5_METHODS) -> pd.DataFrame:
    """Fig. 5 measured: the kit's DDP iterations at one emulated rate with each compressor as an overlapped
    hook and after the backward pass (``data/measurements/bandwidth/``). One row per (model, world size,
    method): hook_ms, post_ms, ratio (hook / post), blocking_ms (the blocking hook, where measured), hook_q25 and
    hook_q75 (quartiles of the hook's timed iterations, ms; NaN where the record has none)."""
    from studykit.measure.crossover import iteration_table

    t = iteration_table(records)
    t = t[np.isclose(t["rate_gbps"].astype(float), rate_gbps)]
    rows = []
    for (model, p, gpu), g in t.groupby(["model", "world_size", "gpu"]):
        ms = dict(zip(g["method"], g["ms"]))
        times = dict(zip(g["method"], g["times_ms"]))
        for _, _, label in methods:
            hook, post = ms.get(f"{label} (hook)"), ms.get(f"{label} (post)")
            if hook is None or post is None:
                continue
            q25, _, q75 = _quartiles(times[f"{label} (hook)"])
            rows.append({"model": model, "world_size": int(p), "gpu": gpu, "rate_gbps": rate_gbps, "method": label,
                         "hook_ms": hook, "post_ms": post, "ratio": hook / post,
                         "blocking_ms": ms.get(f"{label} (blocking hook)", np.nan), "hook_q25": q25, "hook_q75": q75})
    return pd.DataFrame(rows, columns=["model", "world_size", "gpu", "rate_gbps", "method", "hook_ms", "post_ms",
                                       "ratio", "blocking_ms", "hook_q25", "hook_q75"])


def _quartiles(times_ms) -> tuple[float, float, float]:
    """(q25, median, q75) of a record's timed iterations (ms; NaN where it kept none)."""
    from studykit.measure.timing import quartiles

    return quartiles(times_ms) if len(times_ms) else (np.nan, np.nan, np.nan)


# ------------------------------------------------------------------ points beside the lines
def _claim_point(figure: str, cid: str, method: str, quantity: str, value: float, how: str, **extra) -> dict:
    c = paper.claim(cid)
    bs = None if pd.isna(c["batch_size"]) else int(c["batch_size"])
    return {"figure": figure, "model": c["model"], "batch_size": bs, "world_size": int(c["world_size"]),
            "method": method, "quantity": quantity, "value": float(value), "high": extra.get("high", np.nan),
            "source": how, "section": c["section"]}


def paper_points(figure: str) -> pd.DataFrame:
    """The numbers the paper states for one of Figs. 6-10, in the figure's units (speed-up over syncSGD,
    or ms above linear for Fig. 10), read from ``data/paper/claims.csv``. A speed-up the paper gives as two
    times (Sec. 1: syncSGD 262 ms, PowerSGD rank 16 470 ms) is their ratio; ``source`` says which claims.
    Columns: figure, model, batch_size, world_size, method, quantity, value, high (a "less than" bound), source,
    section."""
    def v(cid: str) -> float:
        return float(paper.claim(cid)["value"])

    pts = []
    if figure == "fig6":
        for cid, r in (("sec32_bert_96_rank4", 4), ("sec32_bert_96_rank8", 8)):
            pts.append(_claim_point(figure, cid, f"PowerSGD rank {r}", "speedup", v(cid), cid))
        pts.append(_claim_point(figure, "sec32_bert_96_rank16", "PowerSGD rank 16", "speedup",
                                v("sec32_bert_96_rank16"), "sec32_bert_96_rank16 (slower: below 1)",
                                high=float(paper.claim("sec32_bert_96_rank16")["high"])))
        pts.append(_claim_point(figure, "intro_r101_96_powersgd16", "PowerSGD rank 16", "speedup",
                                v("intro_r101_96_sync") / v("intro_r101_96_powersgd16"),
                                "intro_r101_96_sync / intro_r101_96_powersgd16"))
    elif figure == "fig8":
        pts.append(_claim_point(figure, "intro_r101_96_signsgd", "SignSGD", "speedup",
                                v("intro_r101_96_sync") / v("intro_r101_96_signsgd"),
                                "intro_r101_96_sync / intro_r101_96_signsgd"))
    elif figure == "fig9":
        for cid in ("sec33_r101_96_bs16", "sec33_r101_96_bs32", "sec33_r101_96_bs64"):
            pts.append(_claim_point(figure, cid, "PowerSGD rank 4", "speedup", v(cid), cid))
    elif figure == "fig10":
        pts.append(_claim_point(figure, "fig10_gap_bert_96", "syncSGD", "gap_ms", v("fig10_gap_bert_96"),
                                "fig10_gap_bert_96", high=float(paper.claim("fig10_gap_bert_96")["high"])))
    elif figure != "fig7":  # Fig. 7's numbers are counts of settings: statements()
        raise ValueError(f"unknown figure {figure!r}; valid: fig6, fig7, fig8, fig9, fig10")
    cols = ["figure", "model", "batch_size", "world_size", "method", "quantity", "value", "high", "source", "section"]
    return pd.DataFrame(pts, columns=cols)


def measured_points(records, rate_gbps: float = 10.0, single_gpu_records=None) -> pd.DataFrame:
    """The kit's measured DDP iterations at one emulated rate (``data/measurements/bandwidth/``): per model,
    world size and method, the iteration time, the speed-up over syncSGD at the same setting, and the gap
    above one GPU (``ms - fwd_bwd``, the single-GPU forward + backward of the ``tcomp`` records, the
    measured counterpart of Fig. 10; the DDP iteration has no optimizer step either).

    Columns: model, batch_size, world_size, gpu, rate_gbps, method, ms, speedup, gap_ms, ms_q25 and ms_q75
    (quartiles of the record's timed iterations; NaN where it kept none)."""
    from studykit.measure.crossover import iteration_table

    recs = list(records)
    t = iteration_table(recs)
    t = t[np.isclose(t["rate_gbps"].astype(float), rate_gbps) & t["bucket_mb"].isna()]
    one = {(r["model"], r["batch_size"], r.get("gpu")): r["ms_median"]
           for r in list(single_gpu_records or []) + recs
           if r.get("kind") == "tcomp" and r.get("phase") == "fwd_bwd" and r.get("status", "ok") == "ok"}
    rows = []
    for (model, bs, p, gpu), g in t.groupby(["model", "batch_size", "world_size", "gpu"]):
        sync = g.loc[g["method"] == "syncSGD", "ms"]
        base = float(sync.iloc[0]) if len(sync) else np.nan
        for r in g.itertuples():
            q25, _, q75 = _quartiles(r.times_ms)
            rows.append({"model": model, "batch_size": int(bs), "world_size": int(p), "gpu": gpu,
                         "rate_gbps": rate_gbps, "method": r.method, "ms": float(r.ms), "speedup": base / float(r.ms),
                         "gap_ms": float(r.ms) - one.get((model, bs, gpu), np.nan), "ms_q25": q25, "ms_q75": q75})
    return pd.DataFrame(rows, columns=["model", "batch_size", "world_size", "gpu", "rate_gbps", "method", "ms",
                                       "speedup", "gap_ms", "ms_q25", "ms_q75"])


# ------------------------------------------------------------------ statements
def _count_faster(df: pd.DataFrame) -> int:
    return int((df.loc[df["compressor"] != "none", "speedup"] > 1.0).sum())


def statements(bandwidth_gbps: float = 10.0, world_sizes=GPU_COUNTS,
               calibration: Calibration | None = None) -> pd.DataFrame:
    """Every statement of ``data/paper/figure_statements.csv`` with the kit's value beside the paper's.

    Counts of settings and yes/no statements must match exactly; numbers within
    :data:`studykit.perfmodel.claims.TOLERANCE` (or inside the stated range; speed-ups on their gain,
    :func:`studykit.perfmodel.claims.score`); memory limits are ``not
    modelled`` (the kit's model has no memory term). Columns: statement_id, figure, setting, paper_value,
    paper_low, paper_high, unit, kit_value, verdict, statement, section, page, note."""
    cal = _cal(calibration)
    f6 = scaling("fig6", world_sizes=world_sizes, bandwidth_gbps=bandwidth_gbps, calibration=cal)
    f7 = scaling("fig7", world_sizes=world_sizes, bandwidth_gbps=bandwidth_gbps, calibration=cal)
    f8 = scaling("fig8", world_sizes=world_sizes, bandwidth_gbps=bandwidth_gbps, calibration=cal)
    f7k = f7[f7["params"] == json.dumps({"ratio": 0.001})]
    bert4 = f6[(f6["model"] == "bert_base") & (f6["method"] == "PowerSGD rank 4") & (f6["speedup"] > 1)]
    tl = ModelOptions(overlap="timeline", hook_gamma=True)  # the paper's gamma on every overlapped backward pass (overlap())
    hw = whatif.hardware(cal, bandwidth_gbps=bandwidth_gbps)
    ps_hook_faster = 0
    for m in MODELS:
        for r in (4, 8, 16):
            for p in world_sizes:
                pr = predict(Workload(m, 64), hw, int(p), "powersgd", {"rank": r}, calibration=cal, mode="hook",
                             options=tl)
                ps_hook_faster += int(float(pr.speedup) > 1.0)
    st = paper.table("figure_statements")
    f4 = collectives(world_sizes=[int(st.set_index("statement_id").loc["fig4_order_64", "world_size"])],
                     bandwidth_gbps=bandwidth_gbps, payloads=(("none", {}),), calibration=cal)
    t4 = f4.set_index("scheme")["time_ms"]
    o5 = overlap(hidden_fractions=[0.0], bandwidth_gbps=bandwidth_gbps, calibration=cal).set_index("compressor")
    kit = {
        "fig4_order_64": float(t4.iloc[0] < t4.iloc[1] < t4.iloc[2]),
        "fig5_hook_slower_powersgd4": float(o5.loc["powersgd", "ratio"] > 1),
        "fig5_hook_slower_mstopk1": float(o5.loc["mstopk", "ratio"] > 1),
        "fig5_hook_slower_signsgd": float(o5.loc["signsgd", "ratio"] > 1),
        "appA_powersgd_hook_never_faster": float(ps_hook_faster),
        "fig6_resnets_powersgd_slower": float(_count_faster(f6[f6["model"] != "bert_base"])),
        "fig6_bert_faster_from": float(bert4["world_size"].min()) if len(bert4) else np.nan,
        "fig7_mstopk_faster_setups": float(_count_faster(f7k)),
        "fig7_mstopk_best_speedup": float(f7k.loc[f7k["compressor"] != "none", "speedup"].max()),
        "fig8_signsgd_slower": float(_count_faster(f8)),
    }
    rows = []
    for r in st.itertuples():
        value = float(r.value)
        k = kit.get(r.statement_id, np.nan)
        if r.unit == "GPUs" and r.quantity == "max_world_size":
            verdict = "not modelled"
        elif np.isnan(k):
            verdict = "disagrees"
        elif r.unit in ("bool", "settings"):
            verdict = "reproduced" if k == value else "disagrees"
        else:
            verdict = _claims.score(k, value, None if pd.isna(r.low) else float(r.low),
                                    None if pd.isna(r.high) else float(r.high),
                                    gain=r.quantity in _claims.GAIN_QUANTITIES)[1]
        rows.append({"statement_id": r.statement_id, "figure": r.figure,
                     "setting": f"{bandwidth_gbps:g} Gbit/s, GPUs {', '.join(map(str, world_sizes))}",
                     "paper_value": value, "paper_low": r.low, "paper_high": r.high, "unit": r.unit,
                     "kit_value": k, "verdict": verdict, "statement": r.statement, "section": r.section,
                     "page": r.page, "note": r.note})
    return pd.DataFrame(rows)

