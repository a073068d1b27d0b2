"""Measured crossovers: below which bandwidth does a compressor make an iteration faster?

Agarwal et al. 2022 (https://arxiv.org/abs/2103.00543) report the bandwidth below which PowerSGD
rank 4 beats syncSGD (Sec. 1 and 4.2, Fig. 3: 8.2 Gbit/s for ResNet-101 at 64 V100s; App. D,
Fig. 19: about 9 for ResNet-50, about 15 for BERT). Han et al. 2024
(https://arxiv.org/abs/2407.01378) argue that the baseline to beat is FP16 all-reduce, not fp32
syncSGD. This module finds both crossovers in DDP records measured at several emulated rates
(``python -m studykit throttle --gpus ... -- ddp``, ``data/measurements/bandwidth/``):

* :func:`iteration_table`: one row per measured configuration and rate (iteration time, the
  raw per-iteration times, the emulated and the measured rate);
* :func:`crossover`: the rate at which a method's time equals the baseline's, interpolated
  between the two measured rates that bracket the sign change of log(speed-up), linear in
  log(rate);
* :func:`crossovers`: that for every method against syncSGD and against the fp16 baseline, with
  a bootstrap interval over the timed iterations and, given ``drift`` (:func:`rerun_drift`: how far the
  same configuration's median moved between repeated campaigns), over run-to-run drift as well; the
  bracket between the two measured rates is reported beside it.

The speed-up of a method is the baseline's iteration time over the method's (above 1: faster).
"""
from __future__ import annotations

import json
import math
import zlib
from typing import Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from studykit.compressors.registry import setting_label

__all__ = ["BASELINES", "method_label", "iteration_table", "crossover", "crossovers", "speedup_table",
           "format_crossover", "crossover_summary", "predicted_table", "beside_paper", "markdown_table",
           "paper_crossovers", "delivered_gbps", "delivered_text", "SCALE_COLUMN",
           "crossovers_at_scale", "inversions", "rerun_drift"]

#: the baselines a compressor must beat: DDP's syncSGD at its default 25 MB bucket, and the FP16
#: baseline of Han et al. 2024 (PyTorch's own ``fp16_compress_hook``, what a user would turn on)
BASELINES = {"syncSGD": ("syncsgd", None), "fp16": ("builtin", "torch_fp16")}


def method_label(mode: str, compressor: Optional[str], params: dict | None, bucket_mb: Optional[float],
                 hook_overlap: Optional[bool] = True) -> str:
    """A short human name of a DDP configuration: 'syncSGD', 'syncSGD 100 MB', 'PyTorch fp16 hook',
    'powersgd r4 (post)', 'topk 1% (hook)', 'topk 1% (blocking hook)' (``hook_overlap`` false or unknown); the
    compressor's part is its ``"short"`` label (:func:`~studykit.compressors.registry.setting_label`)."""
    params = params or {}
    if mode == "hook_blocking" or (mode == "hook" and not hook_overlap):
        mode = "blocking hook"
    if mode == "syncsgd":
        return "syncSGD" if bucket_mb is None else f"syncSGD {bucket_mb:g} MB"
    if mode == "builtin":
        kit = (compressor or "").replace("torch_", "")  # PyTorch's hook of the kit's compressor of that name
        p = setting_label(kit, params, "short", params_only=True)
        name = {"powersgd": "PowerSGD"}.get(kit, kit)
        return f"PyTorch {name}{' ' + p if p else ''} hook"
    return f"{setting_label(compressor, params, 'short')} ({mode})"


def _switch_text(r: dict) -> str:
    """' GIL 0.5 ms' for a record run with ``ddp --switch-interval-ms`` (part of its configuration), else ''."""
    if '"switch_interval_ms"' not in str(r.get("config_id") or ""):
        return ""
    return f" GIL {r.get('switch_interval_ms'):g} ms"


def buffers_text(broadcast_buffers: Optional[bool]) -> str:
    """' no buffer broadcast' for a record of ``ddp --no-broadcast-buffers`` (``broadcast_buffers`` false, an
    A/B of its own), else ''."""
    return " no buffer broadcast" if broadcast_buffers is False else ""


def coalesce_text(mb: Optional[float]) -> str:
    """' coalesced per iteration' (``hook_coalesce_mb`` 0), ' coalesced 25 MB', or '' (a protocol per bucket)."""
    if mb is None or (isinstance(mb, float) and math.isnan(mb)):
        return ""
    return " coalesced per iteration" if mb == 0 else f" coalesced {mb:g} MB"


def iteration_table(records: Iterable[dict], stat: str = "ms_median") -> pd.DataFrame:
    """One row per ok DDP record on an emulated network: who, where, and its iteration time ``ms``.

    Columns: gpu, world_size, model, batch_size, mode, compressor, params (JSON), bucket_mb, method
    (:func:`method_label`), rate_gbps (emulated), measured_gbps (the probe's bus bandwidth, if any),
    ms (``stat``), times_ms (the raw timed iterations), n_iter. Records without an emulated rate
    (a real network) are left out. Where one configuration was measured more than once at a rate,
    the latest record is kept.
    """
    if stat not in ("ms_median", "ms_mean", "ms_min"):
        raise ValueError(f"stat must be ms_median, ms_mean or ms_min, got {stat!r}")
    rows = []
    for r in records:
        net = r.get("network") or {}
        if r.get("kind") != "ddp" or r.get("status") != "ok" or net.get("rate_gbps") is None:
            continue
        params = r.get("params") or {}
        rows.append({
            "gpu": r.get("gpu"), "world_size": r.get("world_size"), "model": r.get("model"),
            "batch_size": r.get("batch_size"), "mode": r.get("mode"), "compressor": r.get("compressor"),
            "params": json.dumps(params, sort_keys=True), "bucket_mb": r.get("bucket_mb"),
            # hook records written before the field hook_overlap existed ran the blocking hook
            "method": method_label(r.get("mode"), r.get("compressor"), params, r.get("bucket_mb"),
                                   r.get("hook_overlap")) + (" via PS" if r.get("comm") == "ps" else "")
                      + _switch_text(r) + coalesce_text(r.get("hook_coalesce_mb"))
                      + buffers_text(r.get("broadcast_buffers")),
            "rate_gbps": float(net["rate_gbps"]), "measured_gbps": net.get("measured_busbw_gbps"),
            "ms": r.get(stat), "times_ms": list(r.get("times_ms") or []), "n_iter": r.get("n_iter"),
            "timestamp": r.get("timestamp", ""),
        })
    cols = ["gpu", "world_size", "model", "batch_size", "mode", "compressor", "params", "bucket_mb", "method",
            "rate_gbps", "measured_gbps", "ms", "times_ms", "n_iter"]
    if not rows:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame(rows).sort_values("timestamp")
    # the method's label tells the overlapped hook from the blocking one (same mode, compressor, params)
    key = ["gpu", "world_size", "model", "batch_size", "method", "params", "bucket_mb", "rate_gbps"]
    df = df.drop_duplicates(subset=key, keep="last")
    return df[cols].sort_values(["model", "method", "rate_gbps"]).reset_index(drop=True)


def crossover(rates_gbps: Sequence[float], t_base_ms: Sequence[float], t_method_ms: Sequence[float]) -> dict:
    """The bandwidth below which a method beats a baseline, from times measured at ``rates_gbps``.

    With speed-up s_i = t_base_i / t_method_i at increasing rates r_i, the crossover lies between
    the highest rate r_k where the method is faster (s_k > 1) and the next rate r_(k+1); it is
    where log s, linear in log r between those two points, is 0. Returns a dict:

    * ``gbps``: the crossover (None when censored);
    * ``status``: "crossover", "faster at every rate" (the crossover is above the highest rate),
      "slower at every rate" (below the lowest);
    * ``bracket``: (r_k, r_(k+1)) or the censoring bound;
    * ``non_monotone``: the method is slower at some rate below r_k (noise, or a real dip).
    """
    r = np.asarray(rates_gbps, dtype=float)
    if len(r) < 2 or len(r) != len(t_base_ms) or len(r) != len(t_method_ms):
        raise ValueError("crossover needs at least two rates and one time of each per rate")
    order = np.argsort(r)
    r = r[order]
    if np.any(np.diff(r) <= 0):
        raise ValueError(f"rates must be distinct, got {sorted(rates_gbps)}")
    tb = np.asarray(t_base_ms, dtype=float)[order]
    tm = np.asarray(t_method_ms, dtype=float)[order]
    if not (np.all(tb > 0) and np.all(tm > 0)):
        raise ValueError("iteration times must be positive")
    log_s = np.log(tb / tm)
    faster = np.flatnonzero(log_s > 0)
    if len(faster) == 0:
        return {"gbps": None, "status": "slower at every rate", "bracket": (None, float(r[0])),
                "non_monotone": False}
    k = int(faster[-1])
    non_monotone = bool(np.any(log_s[:k] <= 0))
    if k == len(r) - 1:
        return {"gbps": None, "status": "faster at every rate", "bracket": (float(r[-1]), None),
                "non_monotone": non_monotone}
    x0, x1 = math.log(r[k]), math.log(r[k + 1])
    y0, y1 = log_s[k], log_s[k + 1]
    x = x0 + (x1 - x0) * y0 / (y0 - y1)  # y0 > 0 >= y1
    return {"gbps": float(math.exp(x)), "status": "crossover", "bracket": (float(r[k]), float(r[k + 1])),
            "non_monotone": non_monotone}


def _median_resample(times: list[float], fallback: float, rng: np.random.Generator) -> float:
    if not times:
        return fallback
    return float(np.median(rng.choice(times, size=len(times), replace=True)))


def rerun_drift(spreads: Iterable[pd.DataFrame]) -> dict[str, np.ndarray]:
    """Run-to-run drift per DDP mode ("syncsgd", "builtin", "post", "hook"): the log ratios
    ``log(ms_second / ms_first)`` of every configuration measured in two campaigns
    (:func:`studykit.measure.report.rerun_spread` tables), with both signs (which run came first is arbitrary).
    :func:`crossovers` draws one run's deviation from them as ``ratio / sqrt(2)`` (the ratio of two runs has
    twice one run's variance)."""
    logs: dict[str, list[float]] = {}
    for t in spreads:
        for mode, first, second in zip(t["mode"], t["ms_first"], t["ms_second"]):
            d = math.log(float(second) / float(first))
            logs.setdefault(str(mode), []).extend((d, -d))
    if not logs:
        raise ValueError("rerun_drift: no configuration measured twice in the tables given")
    return {m: np.asarray(v) for m, v in logs.items()}


def _drifted(ms: float, mode: str, drift: Optional[dict], rng: np.random.Generator) -> float:
    if not drift:
        return ms
    pool = drift.get(mode)
    if pool is None or not len(pool):
        pool = np.concatenate(list(drift.values()))  # a mode never rerun: the drift of every mode
    return ms * math.exp(float(rng.choice(pool)) / math.sqrt(2))


def crossovers(table: pd.DataFrame, n_boot: int = 500, seed: int = 0, level: float = 0.9,
               drift: Optional[dict] = None) -> pd.DataFrame:
    """Every method's crossover against each of :data:`BASELINES`, per GPU, world size, model and batch.

    The interval (``low``, ``high``, central ``level``) resamples each record's timed iterations
    (medians of bootstrap samples) and recomputes the crossover; it says how much measurement noise
    moves the crossover, within or across the measured rates. With ``drift`` (:func:`rerun_drift`), each
    resampled median is also moved by one draw of its mode's run-to-run drift, so the interval holds what a
    repeated campaign could give, not only the noise of one run's iterations. Censored crossovers have no
    interval. Each (group, baseline, method) draws from its own generator, seeded by ``seed`` and its labels, so
    a crossover's interval does not change when other campaigns join the table.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got {n_boot}")
    out = []
    group_cols = ["gpu", "world_size", "model", "batch_size"]
    for key, g in table.groupby(group_cols, dropna=False):
        for base_name, (base_mode, base_comp) in BASELINES.items():
            base = g[(g["mode"] == base_mode) & (g["bucket_mb"].isna())]
            base = base[base["compressor"].isna()] if base_comp is None else base[base["compressor"] == base_comp]
            if base.empty:
                continue
            base_method = base["method"].iloc[0]
            base = base.set_index("rate_gbps")
            for method, m in g.groupby("method"):
                if method == base_method:
                    continue
                m = m.set_index("rate_gbps")
                rates = sorted(set(m.index) & set(base.index))
                if len(rates) < 2:
                    continue
                tb = [base.loc[x, "ms"] for x in rates]
                tm = [m.loc[x, "ms"] for x in rates]
                c = crossover(rates, tb, tm)
                low = high = None
                if c["status"] == "crossover" and n_boot:
                    label = repr((tuple(str(k) for k in key), base_name, method)).encode()
                    rng = np.random.default_rng([seed, zlib.crc32(label)])
                    boots = []
                    for _ in range(n_boot):
                        tb_b = [_drifted(_median_resample(base.loc[x, "times_ms"], base.loc[x, "ms"], rng),
                                         base.loc[x, "mode"], drift, rng) for x in rates]
                        tm_b = [_drifted(_median_resample(m.loc[x, "times_ms"], m.loc[x, "ms"], rng),
                                         m.loc[x, "mode"], drift, rng) for x in rates]
                        cb = crossover(rates, tb_b, tm_b)
                        # censored resamples sit at the edge of the measured range
                        boots.append(cb["gbps"] if cb["gbps"] is not None else
                                     (rates[-1] if cb["status"] == "faster at every rate" else rates[0]))
                    low, high = (float(v) for v in np.quantile(boots, [(1 - level) / 2, (1 + level) / 2]))
                first = m.iloc[0]
                out.append({**dict(zip(group_cols, key)), "baseline": base_name, "method": method,
                            "mode": first["mode"], "compressor": first["compressor"], "params": first["params"],
                            "crossover_gbps": c["gbps"], "low_gbps": low, "high_gbps": high, "status": c["status"],
                            "bracket_low_gbps": c["bracket"][0], "bracket_high_gbps": c["bracket"][1],
                            "non_monotone": c["non_monotone"], "rates_gbps": " ".join(f"{x:g}" for x in rates),
                            "speedup_at_min_rate": tb[0] / tm[0], "speedup_at_max_rate": tb[-1] / tm[-1]})
    return pd.DataFrame(out)


def speedup_table(table: pd.DataFrame, baseline: str = "syncSGD") -> pd.DataFrame:
    """Speed-up of every configuration over ``baseline`` (a key of :data:`BASELINES`) at each rate:
    the table plus columns ``base_ms`` and ``speedup`` (base_ms / ms)."""
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {list(BASELINES)}, got {baseline!r}")
    mode, comp = BASELINES[baseline]
    base = table[(table["mode"] == mode) & table["bucket_mb"].isna()]
    base = base[base["compressor"].isna()] if comp is None else base[base["compressor"] == comp]
    key = ["gpu", "world_size", "model", "batch_size", "rate_gbps"]
    merged = table.merge(base[key + ["ms"]].rename(columns={"ms": "base_ms"}), on=key, how="inner")
    merged["speedup"] = merged["base_ms"] / merged["ms"]
    return merged


def paper_crossovers(claims: pd.DataFrame) -> pd.DataFrame:
    """The crossover bandwidths Agarwal et al. 2022 state (rows of ``data/paper/claims.csv`` whose
    quantity is ``crossover_bandwidth``): model, compressor, params, world size, value, source."""
    c = claims[claims["quantity"] == "crossover_bandwidth"]
    return pd.DataFrame({
        "model": c["model"], "compressor": c["compressor"], "params": c["params"],
        "world_size": c["world_size"], "paper_gbps": c["value"],
        "source": c["figure"].fillna("") + " (" + c["section"].fillna("") + ")", "statement": c["statement"],
    }).reset_index(drop=True)


def beside_paper(out: pd.DataFrame, paper: pd.DataFrame, methods: Sequence[str], baseline: str = "syncSGD") -> pd.DataFrame:
    """The paper's crossovers (:func:`paper_crossovers`) beside the measured ones (:func:`crossovers`) of
    ``methods`` against ``baseline``: one row per paper value, measured world size and method; "not
    measured" where the campaigns hold no such method for that model."""
    rows = []
    for _, p in paper.iterrows():
        mine = out[(out["model"] == p["model"]) & (out["baseline"] == baseline)]
        for q in sorted(mine["world_size"].unique()) or [None]:
            for method in methods:
                m = mine[(mine["world_size"] == q) & (mine["method"] == method)]
                rows.append({"model": p["model"], "paper p": p["world_size"], "paper (V100, Gbit/s)": p["paper_gbps"],
                             "paper source": p["source"], "kit p": q, "kit method": method,
                             "kit (measured, Gbit/s)": format_crossover(m.iloc[0]) if len(m) else "not measured"})
    return pd.DataFrame(rows)


def format_crossover(row) -> str:
    """'17.9 [17.4, 18.3]', '> 25' (faster at every measured rate), '< 1' (slower at every one);
    a trailing '*' marks a method that is also slower at some rate below its crossover."""
    star = "*" if row.get("non_monotone") else ""
    if row["status"] == "faster at every rate":
        return f"> {row['bracket_low_gbps']:g}{star}"
    if row["status"] == "slower at every rate":
        return f"< {row['bracket_high_gbps']:g}"
    interval = ""
    if row.get("low_gbps") is not None and not pd.isna(row.get("low_gbps")):
        interval = f" [{row['low_gbps']:.1f}, {row['high_gbps']:.1f}]"
    return f"{row['crossover_gbps']:.1f}{interval}{star}"


def crossover_summary(out: pd.DataFrame, methods: Optional[Sequence[str]] = None) -> pd.DataFrame:
    """One row per method, one column per (model, baseline): :func:`format_crossover` text, in Gbit/s."""
    if out.empty:
        return pd.DataFrame()
    d = out if methods is None else out[out["method"].isin(methods)]
    several_p = d["world_size"].nunique() > 1  # campaigns at several world sizes: say which
    d = d.assign(text=[format_crossover(r) for _, r in d.iterrows()],
                 column=[f"{m}{f' p={int(q)}' if several_p else ''} vs {b}"
                         for m, q, b in zip(d["model"], d["world_size"], d["baseline"])])
    table = d.pivot_table(index="method", columns="column", values="text", aggfunc="first")
    if methods is not None:
        table = table.reindex([m for m in methods if m in table.index])
    # each column's baseline is marked as such; a method that campaign did not measure stays visible as such
    for base_name, (mode, comp) in BASELINES.items():
        label = method_label(mode, comp, {}, None)
        for col in table.columns:
            if col.endswith(f" vs {base_name}") and label in table.index:
                table.loc[label, col] = "(baseline)"
    return table.fillna("not measured")


def markdown_table(out: pd.DataFrame, methods: Sequence[str]) -> str:
    """Measured crossovers (:func:`crossovers`) of ``methods`` as Markdown: one row per model, world size
    and method, one column per baseline (:func:`format_crossover` text in Gbit/s). The committed
    campaigns' README holds exactly this in its ``crossovers`` block
    (``python -m studykit data regen --only measurements/bandwidth/README.md#crossovers``)."""
    lines = ["| model | p | method | vs syncSGD (Gbit/s) | vs fp16 baseline (Gbit/s) |", "|---|---:|---|---|---|"]
    for (model, p), g in out.groupby(["model", "world_size"], sort=True):
        for method in methods:
            m = g[g["method"] == method]
            if m.empty:
                continue
            cell = {b: format_crossover(m[m["baseline"] == b].iloc[0]) if (m["baseline"] == b).any() else "(baseline)"
                    for b in BASELINES}
            lines.append(f"| {model} | {int(p)} | {method} | {cell['syncSGD']} | {cell['fp16']} |")
    return "\n".join(lines) + "\n"


def predicted_table(predictions: pd.DataFrame, variant: str = "extended") -> pd.DataFrame:
    """The model's predictions (a ``verify`` predictions.csv.gz) as method, model, rate_gbps, predicted_ms,
    with ``base_ms`` the predicted syncSGD time of the same model and rate (for predicted speed-ups)."""
    need = {"variant", "model", "mode", "compressor", "params", "bucket_mb", "rate_gbps", "predicted_ms"}
    missing = need - set(predictions.columns)
    if missing:
        raise ValueError(f"predictions lack columns {sorted(missing)}: give the predictions.csv.gz written by "
                         f"`python -m studykit verify`")
    p = predictions[predictions["variant"] == variant].copy()
    if p.empty:
        raise ValueError(f"no predictions of variant {variant!r}; found {sorted(predictions['variant'].unique())}")
    # verify scores the blocking hook as its own mode (hook_blocking): its "hook" rows are the overlapped hook
    overlap = p["hook_overlap"] if "hook_overlap" in p.columns else [True] * len(p)
    p["method"] = [method_label(m, c if isinstance(c, str) else None, json.loads(par) if isinstance(par, str) else {},
                                None if pd.isna(b) else float(b), None if pd.isna(o) else bool(o))
                   for m, c, par, b, o in zip(p["mode"], p["compressor"], p["params"], p["bucket_mb"], overlap)]
    key = ["world_size", "model", "rate_gbps"] if "world_size" in p.columns else ["model", "rate_gbps"]
    base = p[p["method"] == "syncSGD"][key + ["predicted_ms"]].rename(columns={"predicted_ms": "base_ms"})
    return p.merge(base, on=key, how="left")[key + ["method", "predicted_ms", "base_ms"]]


def delivered_gbps(out: pd.DataFrame, table: pd.DataFrame) -> pd.Series:
    """Per row of :func:`crossovers`: its crossover (or, when censored, the measured bound: ``> R`` / ``< R``) as
    the rate the link delivered (Gbit/s), not the rate it was set to. The delivered rate at a set rate is the median
    of the records' probed bus bandwidth (``measured_gbps`` of :func:`iteration_table`, the probe's
    ``network.measured_busbw_gbps``) in that group; a crossover between two set rates is interpolated linearly in
    log rate between their delivered rates, as :func:`crossover` interpolates. NaN where no probe was recorded."""
    group_cols = ["gpu", "world_size", "model", "batch_size"]
    probed = table.dropna(subset=["measured_gbps"]).astype({"measured_gbps": float})
    medians = probed.groupby(group_cols + ["rate_gbps"], dropna=False)["measured_gbps"].median()

    def at(key: tuple, rate) -> float:
        return float(medians.get(key + (float(rate),), np.nan)) if rate is not None and not pd.isna(rate) else np.nan

    values = []
    for _, r in out.iterrows():
        key = tuple(r[c] for c in group_cols)
        lo, hi = r["bracket_low_gbps"], r["bracket_high_gbps"]
        if r["status"] == "faster at every rate":
            values.append(at(key, lo))
        elif r["status"] == "slower at every rate":
            values.append(at(key, hi))
        else:
            d0, d1 = at(key, lo), at(key, hi)
            w = math.log(r["crossover_gbps"] / lo) / math.log(hi / lo)
            values.append(float(math.exp(math.log(d0) + w * (math.log(d1) - math.log(d0)))))
    return pd.Series(values, index=out.index, dtype=float, name="delivered_gbps")


def delivered_text(row, delivered: float) -> str:
    """:func:`format_crossover`'s bound or value, at the delivered rate ``delivered`` (Gbit/s, :func:`delivered_gbps`):
    '> 21.7', '< 0.98', '17.2'; '?' where no probe was recorded."""
    if delivered is None or pd.isna(delivered):
        return "?"
    sign = {"faster at every rate": "> ", "slower at every rate": "< "}.get(row["status"], "")
    return f"{sign}{delivered:.3g}"


#: the column of :func:`crossovers_at_scale`: the bandwidth below which a method beats BOTH baselines
SCALE_COLUMN = "beats_syncsgd_and_fp16_below_gbps"


def crossovers_at_scale(calibration, model: str, batch_size: int, methods: Sequence[str],
                        world_sizes: Sequence[int] = (2, 4, 16, 64, 256), mode: str = "post",
                        **advise_kw) -> pd.DataFrame:
    """The model's crossovers of ``methods`` at each world size: the bandwidth (Gbit/s) below which each beats both
    syncSGD and the fp16 baseline (the faster of the two at each bandwidth), as
    :meth:`studykit.perfmodel.advise.Advice.crossover_gbps` finds it from one :func:`~studykit.perfmodel.advise.advise`
    call on ``calibration`` (a :class:`~studykit.perfmodel.calibration.Calibration` or a path to one).

    ``methods``: compressor specs (``"powersgd:rank=4"``, ``"topk:ratio=0.01"``); ``mode``: ``"post"`` or ``"hook"``;
    ``advise_kw``: more keywords of ``advise`` (``options``, ``alpha_s``, ``model_error``, ...). One row per method
    and world size: model, batch_size, mode, method (:func:`method_label`, as the measured tables name it), spec,
    collective (``"all-gather"`` where the method's protocol gathers, else ``"all-reduce"``), world_size,
    :data:`SCALE_COLUMN` (``inf``: it beats both up to the search's top; NaN: at no bandwidth) and ``text`` (the
    same in words, :meth:`~studykit.perfmodel.advise.Advice.crossover_text`)."""
    from studykit import compressors
    from studykit.perfmodel.advise import Candidate, advise
    from studykit.perfmodel.calibration import Calibration
    from studykit.perfmodel.model import Workload, plan_summary

    if isinstance(methods, str) or not methods:
        raise ValueError(f"methods must be a non-empty list of compressor specs such as 'powersgd:rank=4', "
                         f"got {methods!r}")
    if not isinstance(calibration, Calibration):
        calibration = Calibration.load(calibration)
    parsed = []
    for spec in methods:
        try:
            name, params = compressors.parse_spec(spec)
        except (compressors.CompressorError, ValueError) as exc:
            raise ValueError(f"method {spec!r}: {exc}; valid names: {', '.join(compressors.available())}") from None
        parsed.append((spec, name, params, method_label(mode, name, params, None)))
    cands = [Candidate(label, "compressor", name, tuple(sorted(params.items()))) for _, name, params, label in parsed]
    advice = advise(calibration, model, batch_size, list(world_sizes), None, candidate_list=cands, mode=mode,
                    **{"evidence": False, **advise_kw})
    missing = {c.label: advice.unranked[c.label] for c in cands if c.label in advice.unranked}
    if missing:
        raise ValueError(f"the model cannot price {sorted(missing)}: {'; '.join(missing.values())}")
    shapes = Workload(model, batch_size).shapes()
    index = {c.label: k for k, c in enumerate(advice.candidates)}
    rows = []
    for spec, name, params, label in parsed:
        gathers = plan_summary(name, params, shapes, 2, shapes_key=model).allgather_count > 0
        for p in advice.world_sizes:
            v = float(advice.crossover_gbps(int(p))[index[label]])
            rows.append({"model": model, "batch_size": batch_size, "mode": mode, "method": label, "spec": spec,
                         "collective": "all-gather" if gathers else "all-reduce", "world_size": int(p),
                         SCALE_COLUMN: v, "text": advice.crossover_text(v)})
    return pd.DataFrame(rows)


def inversions(scale: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Where an all-gather method's modelled crossover (:func:`crossovers_at_scale`) falls below the ``reference``
    method's (an all-reduce method, e.g. 'powersgd r4 (post)'): per model and all-gather method, ``first_p``, the
    least world size at which it beats both baselines only below a lower bandwidth than ``reference`` does (NaN,
    "at no bandwidth", counts as lowest; ``inf`` as highest), ``above_at`` the world sizes before it (where it was at
    or above), NaN where it never falls below."""
    if reference not in set(scale["method"]):
        raise ValueError(f"reference {reference!r} is not among the methods {sorted(set(scale['method']))}")
    rows = []
    for model, g in scale.groupby("model", sort=False):
        ref = g[g["method"] == reference].set_index("world_size")[SCALE_COLUMN].fillna(-np.inf)
        for method, m in g[g["collective"] == "all-gather"].groupby("method", sort=False):
            v = m.set_index("world_size")[SCALE_COLUMN].fillna(-np.inf)
            below = [int(p) for p in sorted(v.index) if p in ref.index and v[p] < ref[p]]
            first = below[0] if below else np.nan
            rows.append({"model": model, "method": method, "first_p": first,
                         "above_at": [int(p) for p in sorted(v.index) if not below or p < first]})
    return pd.DataFrame(rows, columns=["model", "method", "first_p", "above_at"])
