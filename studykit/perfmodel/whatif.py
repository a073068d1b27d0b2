"""The paper's what-if analyses (Sec. 4.2, App. D) as functions returning tidy DataFrames.

Each function is one figure of Agarwal et al. 2022, computed by :func:`studykit.perfmodel.model.predict`
(one vectorized call per sweep) from a :class:`~studykit.perfmodel.calibration.Calibration`
(default: the paper's V100 inputs, ``data/calibrations/paper_v100.json``):

* :func:`bandwidth_sweep`: Fig. 3 (ResNet-101) and Fig. 19 (all models);
* :func:`required_ratio_sweep`: Fig. 12 (ResNet-101) and Fig. 18 (all models);
* :func:`compute_speedup_sweep`: Fig. 20;
* :func:`tradeoff_grid`: Fig. 21 (encode/decode time vs compression ratio);
* :func:`ranking`: which of syncSGD, the fp16 baseline and every compressor is fastest
  (:func:`studykit.perfmodel.advise.advise`, what ``python -m studykit advise`` prints);
  :func:`ranking_at`: the same at one setting, as a table (the explorer's and what_if's), with the
  calibration's constants moved to the sliders' values by :func:`moved`.

App. D uses PowerSGD rank 4 as the baseline compressor throughout.
"""
from __future__ import annotations

import functools
import math
from dataclasses import replace

import numpy as np
import pandas as pd

from studykit import paths
from studykit.perfmodel.calibration import Calibration, Constant, TComp
from studykit.perfmodel.model import (DEFAULT_BUCKET_BYTES, Hardware, Workload, crossover_bandwidth_gbps, predict,
                                      required_ratio)

__all__ = ["paper_calibration", "hardware", "bandwidth_sweep", "required_ratio_sweep", "compute_speedup_sweep",
           "tradeoff_grid", "tradeoff_all_help", "crossover", "ranking", "ranking_at", "moved", "BASELINE"]

#: App. D: "we use PowerSGD with Rank-4 as the baseline for these what-if analyses"
BASELINE = ("powersgd", {"rank": 4})


@functools.lru_cache(maxsize=None)
def _load(path: str) -> Calibration:
    return Calibration.load(path)


def paper_calibration() -> Calibration:
    """``data/calibrations/paper_v100.json`` (the paper's V100 inputs)."""
    return _load(str(paths.CALIBRATIONS / "paper_v100.json"))


def hardware(calibration: Calibration | None = None, **overrides) -> Hardware:
    """Hardware from a calibration (default: the paper's), with overrides."""
    return Hardware.from_calibration(calibration or paper_calibration(), **overrides)


def _workload(model: str, batch_size: int, t_comp_s=None, bucket_bytes=DEFAULT_BUCKET_BYTES) -> Workload:
    return Workload(model, batch_size, t_comp_s=t_comp_s, bucket_bytes=bucket_bytes)


def bandwidth_sweep(model: str = "resnet101", batch_size: int = 64, world_size: int = 64,
                    bandwidths_gbps=None, compressor: str = BASELINE[0], params: dict | None = None,
                    calibration: Calibration | None = None, **hw_overrides) -> pd.DataFrame:
    """Figs. 3 and 19: syncSGD vs a compressor as the bandwidth varies (one predict call).

    Columns: bandwidth_gbps, sync_s, compressed_s, speedup (sync / compressed),
    sync_scaling and compressed_scaling (``p T_comp / T``, the paper's speed-up
    over one GPU; linear = ``world_size``).
    """
    cal = calibration or paper_calibration()
    params = dict(BASELINE[1]) if params is None and compressor == BASELINE[0] else (params or {})
    bw = np.asarray(np.geomspace(1, 30, 60) if bandwidths_gbps is None else bandwidths_gbps, dtype=float)
    pr = predict(_workload(model, batch_size), hardware(cal, bandwidth_gbps=bw, **hw_overrides), world_size,
                 compressor, params, calibration=cal)
    return pd.DataFrame({
        "model": model, "batch_size": batch_size, "world_size": world_size, "bandwidth_gbps": bw,
        "sync_s": pr.sync["total_s"], "compressed_s": pr.compressed["total_s"], "speedup": pr.speedup,
        "sync_scaling": pr.scaling_speedup("sync"), "compressed_scaling": pr.scaling_speedup("compressed"),
        "linear_scaling": float(world_size)})


def crossover(model: str = "resnet101", batch_size: int = 64, world_size: int = 64,
              compressor: str = BASELINE[0], params: dict | None = None,
              calibration: Calibration | None = None, **hw_overrides) -> float:
    """Bandwidth (Gbit/s) where the compressor stops paying off (Fig. 3: 8.2 Gbps for ResNet-101)."""
    cal = calibration or paper_calibration()
    params = dict(BASELINE[1]) if params is None and compressor == BASELINE[0] else (params or {})
    return crossover_bandwidth_gbps(_workload(model, batch_size), hardware(cal, **hw_overrides), world_size,
                                    compressor, params, calibration=cal)


def required_ratio_sweep(models=("resnet50", "resnet101", "bert_base"), batch_sizes=(16, 32, 64),
                         world_size: int = 64, bandwidths_gbps=None, calibration: Calibration | None = None,
                         slack: float = 0.0, include_last_bucket: bool = False, **hw_overrides) -> pd.DataFrame:
    """Figs. 12 and 18: compression ratio needed for near-linear scaling vs bandwidth.

    One row per (model, batch size, bandwidth); see
    :func:`studykit.perfmodel.model.required_ratio` for the definition. Models whose
    ``T_comp`` the calibration stores without a batch size (BERT in the paper) get
    ``batch_size`` = -1 and one curve.
    """
    cal = calibration or paper_calibration()
    bw = np.asarray(np.geomspace(1, 100, 80) if bandwidths_gbps is None else bandwidths_gbps, dtype=float)
    hw = hardware(cal, bandwidth_gbps=bw, **hw_overrides)
    frames = []
    for m in models:
        entries = [c for c in cal.t_comp if c.model == m]
        unstated = entries and all(c.batch_size is None for c in entries)
        for bs in ([-1] if unstated else batch_sizes):
            t, how = cal.t_comp_s(m, 64 if bs == -1 else bs)
            c = required_ratio(_workload(m, 64 if bs == -1 else bs, t_comp_s=t), hw, world_size,
                               slack=slack, include_last_bucket=include_last_bucket)
            frames.append(pd.DataFrame({"model": m, "batch_size": bs, "world_size": world_size,
                                        "bandwidth_gbps": bw, "required_ratio": c, "t_comp_s": t,
                                        "t_comp_how": how}))
    return pd.concat(frames, ignore_index=True)


def compute_speedup_sweep(model: str = "resnet50", batch_size: int = 64, world_size: int = 64,
                          bandwidth_gbps: float = 10.0, factors=None, compressor: str = BASELINE[0],
                          params: dict | None = None, calibration: Calibration | None = None,
                          scale_encode_decode: bool = True, **hw_overrides) -> pd.DataFrame:
    """Fig. 20: faster compute at fixed bandwidth. T_comp and T_encode_decode both shrink
    by the factor (App. D: "the encode-decode time also reduces by the same factor");
    ``scale_encode_decode=False`` keeps T_encode_decode fixed (an alternative reading)."""
    cal = calibration or paper_calibration()
    params = dict(BASELINE[1]) if params is None and compressor == BASELINE[0] else (params or {})
    f = np.asarray(np.linspace(1, 4, 31) if factors is None else factors, dtype=float)
    hw = hardware(cal, bandwidth_gbps=bandwidth_gbps, compute_speedup=f, **hw_overrides)
    pr = predict(_workload(model, batch_size), hw, world_size, compressor, params, calibration=cal,
                 encode_decode_scale=1.0 if scale_encode_decode else f)
    return pd.DataFrame({"model": model, "batch_size": batch_size, "world_size": world_size,
                         "bandwidth_gbps": bandwidth_gbps, "compute_speedup": f,
                         "scale_encode_decode": scale_encode_decode,
                         "sync_s": pr.sync["total_s"], "compressed_s": pr.compressed["total_s"],
                         "speedup": pr.speedup, "sync_exposed_comm_s": pr.sync["exposed_comm_s"]})


def tradeoff_grid(model: str = "resnet50", batch_size: int = 64, world_size: int = 64, bandwidth_gbps: float = 10.0,
                  ks=(1, 2, 3, 4), ls=(1, 2, 3), compressor: str = BASELINE[0], params: dict | None = None,
                  calibration: Calibration | None = None, **hw_overrides) -> pd.DataFrame:
    """Fig. 21: encode/decode ``k`` times faster at the price of ``l k`` times more bytes.

    App. D: "if we decrease encode-decode time by a factor k the size of gradients
    communicated increases by lk" (k = 1..4, l = 1, 2, 3). The kit applies the
    formula literally, so at ``k = 1`` the bytes are ``l`` times the baseline's
    (the paper does not say what its k = 1 points are). Bytes scale the
    compressor's own plan.
    """
    cal = calibration or paper_calibration()
    params = dict(BASELINE[1]) if params is None and compressor == BASELINE[0] else (params or {})
    hw = hardware(cal, bandwidth_gbps=bandwidth_gbps, **hw_overrides)
    w = _workload(model, batch_size)
    base = predict(w, hw, world_size, compressor, params, calibration=cal)
    rows = []
    for l in ls:
        for k in ks:
            pr = predict(w, hw, world_size, compressor, params, calibration=cal, bytes_scale=l * k,
                         encode_decode_scale=1.0 / k)
            rows.append({"model": model, "l": l, "k": k, "bytes_scale": l * k, "encode_decode_scale": 1.0 / k,
                         "compressed_s": float(pr.compressed["total_s"]), "sync_s": float(pr.sync["total_s"]),
                         "baseline_s": float(base.compressed["total_s"]), "speedup": float(pr.speedup)})
    return pd.DataFrame(rows)


def tradeoff_all_help(grid: pd.DataFrame) -> bool:
    """Fig. 21's claim on a :func:`tradeoff_grid`: every point with ``k > 1`` beats the baseline."""
    better = grid[grid["k"] > 1]
    return bool((better["compressed_s"] < better["baseline_s"]).all())


def ranking(model: str = "resnet50", batch_size: int = 64, world_sizes=(8, 16, 32, 64), bandwidths_gbps=(1, 10, 25),
            calibration: Calibration | None = None, compressors=None, mode: str = "post",
            model_error: float | None = None) -> pd.DataFrame:
    """Every candidate's predicted iteration time and rank per (bandwidth, world size), with its interval,
    whether it is within the model's error of the best, and whether the kit has accuracy evidence for it:
    :meth:`studykit.perfmodel.advise.Advice.frame` of one :func:`~studykit.perfmodel.advise.advise` call
    (default: the paper's V100 inputs). Candidates the calibration cannot price have ``rank`` -1."""
    from studykit.perfmodel import advise as _advise

    cands = None if compressors is None else _advise.candidates(compressors)
    return _advise.advise(calibration or paper_calibration(), model, batch_size, world_sizes, bandwidths_gbps,
                          candidate_list=cands, mode=mode, model_error=model_error).frame()


#: the columns :func:`ranking_at` shows
RANKING_COLUMNS = ["rank", "candidate", "iteration_ms", "low_ms", "high_ms", "within_error_of_best", "accuracy_evidence"]


def moved(calibration: Calibration, model: str, batch_size: int, *, t_comp_s: float | None = None,
          alpha_s: float | None = None, gamma: float | None = None) -> Calibration:
    """``calibration`` with ``T_comp`` (s) of ``model`` at ``batch_size``, ``alpha`` (s) and ``gamma`` set to the
    given values (None: as calibrated), each interval scaled by the same factor as its value.

    A what-if value keeps the calibration's relative uncertainty, so :func:`ranking_at` shows intervals at any
    slider setting (advise's own ``t_comp_s`` / ``alpha_s`` / ``gamma`` overrides are exact: an explorer passing
    every slider through them would show ``low == high``). A ``T_comp`` the calibration only finds by a fallback
    (another batch size, a batch size the source does not state) becomes an entry without an interval, as the
    look-up's was. ValueError naming the value when one is not finite or out of range."""
    given = {"t_comp_s": (t_comp_s, True), "alpha_s": (alpha_s, False), "gamma": (gamma, True)}
    for name, (v, strict) in given.items():
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and (v > 0 if strict else v >= 0)):
            raise ValueError(f"{name} must be a finite number {'>' if strict else '>='} 0, got {v!r}")

    def move(c, value: float):
        f = value / c.value if c.value else None  # a zero value has no relative interval to keep
        scale = (lambda end: None if end is None or f is None else end * f)  # noqa: E731
        return replace(c, value=float(value), low=scale(c.low), high=scale(c.high),
                       source=f"{c.source}; moved to {value:g} (interval scaled with it)")

    changes = {}
    for name in ("alpha_s", "gamma"):
        value = given[name][0]
        if value is not None:
            c = getattr(calibration, name)
            changes[name] = (move(c, value) if c is not None
                             else Constant(float(value), Calibration.UNITS[name], "given (no interval)"))
    if t_comp_s is not None:
        i = next((i for i, c in enumerate(calibration.t_comp) if c.model == model and c.batch_size == batch_size), None)
        entries = list(calibration.t_comp)
        if i is None:
            entries.append(TComp(float(t_comp_s), "s", "given (no interval)", model=model, batch_size=batch_size))
        else:
            entries[i] = move(entries[i], t_comp_s)
        changes["t_comp"] = entries
    return replace(calibration, **changes) if changes else calibration


def ranking_at(model: str = "resnet50", batch_size: int = 64, world_size: int = 64, bandwidth_gbps: float = 10.0,
               calibration: Calibration | None = None, *, t_comp_s: float | None = None, alpha_s: float | None = None,
               gamma: float | None = None, compute_speedup: float = 1.0, bucket_bytes: float = DEFAULT_BUCKET_BYTES,
               top: int | None = None, mode: str = "post") -> pd.DataFrame:
    """The ranking at one setting: ``advise.advise(...).ranking(world_size, bandwidth_gbps)`` as a DataFrame
    (:data:`RANKING_COLUMNS`, fastest first, ``top`` rows; ``df.attrs["unranked"]``: candidates the
    calibration cannot price, with why). ``t_comp_s`` / ``alpha_s`` / ``gamma`` move the calibration's values,
    keeping their intervals' relative width (:func:`moved`); ``compute_speedup`` divides ``T_comp`` and
    ``T_encode_decode`` (App. D), as :func:`studykit.perfmodel.model.predict` does."""
    from studykit.perfmodel import advise as _advise

    cal = moved(calibration or paper_calibration(), model, batch_size, t_comp_s=t_comp_s, alpha_s=alpha_s, gamma=gamma)
    adv = _advise.advise(cal, model, batch_size, [int(world_size)], [float(bandwidth_gbps)],
                         compute_speedup=compute_speedup, bucket_bytes=bucket_bytes, mode=mode)
    rows = adv.ranking(int(world_size), float(bandwidth_gbps))
    df = pd.DataFrame(rows[:top] if top else rows, columns=RANKING_COLUMNS + ["compressor", "params", "kind"])[RANKING_COLUMNS]
    df.attrs["unranked"] = dict(adv.unranked)
    df.attrs["model_error"] = adv.inputs.get("model_error", "")
    return df
