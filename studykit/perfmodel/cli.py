"""``python -m studykit predict ...``, ``python -m studykit fit ...`` and ``python -m studykit advise ...``.

predict: iteration times of syncSGD (Sec. 4.1) and of a compressor (App. B) over a
(GPUs x bandwidth) grid, with their intervals and the compressor's crossover bandwidth, as a table
(``--json``: everything)::

    python -m studykit predict --model resnet101 --batch-size 64 --gpus 8 16 64 \\
        --bandwidth-gbps 1 10 25 --compressor powersgd --param rank=4

fit: a calibration from measurement records (JSON Lines)::

    python -m studykit fit data/measurements/RUN.jsonl --out reports/NAME.json

advise: syncSGD, the fp16 baseline and every compressor ranked by predicted iteration time
(:func:`studykit.perfmodel.advise.advise`)::

    python -m studykit advise --model resnet101 --gpus 8 64 --bandwidth-gbps 1 10 [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from studykit import argtypes, compressors, models, paths
from studykit.compressors.registry import coerce_params, param_arg, setting_label
from studykit.perfmodel.calibration import Calibration
from studykit.perfmodel.model import MIB, Hardware, ModelOptions, Workload, predict

DEFAULT_CALIBRATION = paths.CALIBRATIONS / "paper_v100.json"
DEFAULT_GPUS = [8, 16, 32, 64]


_positive_int = argtypes.positive_int
_positive_float = argtypes.positive_float  # finite and > 0


def _setting_args(ap: argparse.ArgumentParser, bandwidth_default: str) -> None:
    """The setting both predict and advise ask about: model, batch, world sizes, bandwidths."""
    # checked once the calibration is loaded (_check_model): a calibration carries the shapes of the models it
    # was fitted on, so a model whose file or package is missing here can still be predicted
    ap.add_argument("--model", required=True, metavar="MODEL",
                    help=f"model whose gradients are sent: {argtypes.MODEL_HELP}")
    ap.add_argument("--batch-size", type=_positive_int, default=None,
                    help="per-worker batch size (default: the one the calibration's T_comp of this model was measured "
                         "at, when it has exactly one; else 64)")
    ap.add_argument("--gpus", type=_positive_int, nargs="+", default=None,
                    help=f"world sizes (default: the calibration's world size, else {DEFAULT_GPUS})")
    ap.add_argument("--bandwidth-gbps", type=_positive_float, nargs="+", default=None,
                    help=f"bandwidths, Gbit/s (default: {bandwidth_default})")


def predict_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m studykit predict",
                                 description="Predict syncSGD and compressed iteration times (a table; --json for everything).")
    _setting_args(ap, "the calibration's fitted bandwidth")
    ap.add_argument("--terms", "--options", dest="terms", choices=["default", "paper", "extended"], default="default",
                    help="model terms: default (the paper's model plus the calibration's incast term), paper "
                         "(as published), extended (ModelOptions.extended: DDP's buckets, the fitted sync and per-bucket "
                         "terms with their own gamma, the path overhead; collectives by Eq. 1 with the calibration's "
                         "incast term)")
    ap.add_argument("--compressor", choices=compressors.available(), default=None,
                    help="compressor to compare with syncSGD; its speed-up is syncSGD's iteration time over its own, "
                         "and its crossover bandwidth is advise's (default: syncSGD only)")
    ap.add_argument("--param", type=param_arg, action="append", default=[], metavar="KEY=VALUE",
                    help="compressor parameter (repeatable), e.g. rank=4")
    ap.add_argument("--calibration", default=str(DEFAULT_CALIBRATION),
                    help=f"calibration JSON (default: {DEFAULT_CALIBRATION.relative_to(paths.ROOT)})")
    ap.add_argument("--alpha-s", type=argtypes.nonneg_float, default=None, help="override alpha (s per ring step)")
    ap.add_argument("--gamma", type=_positive_float, default=None, help="override gamma")
    ap.add_argument("--compute-speedup", type=_positive_float, default=1.0, help="divide T_comp, T_encode_decode")
    ap.add_argument("--t-comp-ms", type=_positive_float, default=None, help="override T_comp (ms)")
    ap.add_argument("--t-encode-decode-ms", type=argtypes.nonneg_float, default=None,
                    help="override T_encode_decode (ms, >= 0)")
    ap.add_argument("--bucket-mb", type=_positive_float, default=25.0, help="DDP bucket size, MiB (default 25)")
    ap.add_argument("--allreduce", choices=["ring", "tree"], default="ring", help="all-reduce algorithm")
    ap.add_argument("--json", action="store_true", help="the whole prediction as JSON (inputs, plans, every term)")
    return ap


def fit_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m studykit fit",
                                 description="Fit a calibration (alpha, BW, gamma, T_comp, T_encode_decode) "
                                             "from measurement records.")
    ap.add_argument("records", nargs="*", help="JSON Lines record files or folders (every constant from them)")
    ap.add_argument("--compute-from", action="append", default=[], metavar="RECORDS",
                    help="a composed calibration: T_comp, T_encode_decode, the overhead O and gamma from bucket stamps "
                         "from these records (one GPU: tcomp, profile; repeatable); needs --network-from")
    ap.add_argument("--network-from", action="append", default=[], metavar="RECORDS",
                    help="a composed calibration: alpha, BW, incast (and gamma from DDP iterations) from these records "
                         "(a sweep on your cluster; repeatable); needs --compute-from")
    ap.add_argument("--allow-mixed", action="store_true",
                    help="pool compute records of different machines (GPU names or hosts) instead of refusing; "
                         "said in the calibration's warnings")
    ap.add_argument("--out", required=True, help="calibration JSON to write (not inside the committed data/ "
                                                  "unless --overwrite-committed)")
    ap.add_argument(paths.OVERWRITE_FLAG, action="store_true", dest="overwrite_committed",
                    help="allow --out inside the repository's committed data/ (e.g. data/calibrations/)")
    ap.add_argument("--name", default=None, help="calibration name (default: the output file's stem)")
    ap.add_argument("--stat", choices=["ms_median", "ms_mean", "ms_min", "ms_max"], default="ms_median",
                    help="timing statistic to fit (default ms_median; the paper reports means)")
    ap.add_argument("--bootstrap", type=argtypes.nonneg_int, default=200, help="bootstrap resamples (default 200)")
    ap.add_argument("--seed", type=argtypes.nonneg_int, default=0, help="bootstrap seed")
    ap.add_argument("--network", default=None, metavar="KEY=VALUE[,KEY=VALUE]",
                    help="fit the records of one network only (rate_gbps=5, rate_gbps=1,workers=4, or native); "
                         "required when the records come from more than one")
    ap.add_argument("--lenient", action="store_true",
                    help="leave out constants the records cannot determine (reasons in provenance.not_fitted) "
                         "instead of failing")
    ap.add_argument("--json", action="store_true", help="the summary as JSON instead of a table")
    return ap


def advise_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m studykit advise",
                                 description="Which way of synchronizing gradients is fastest? A verdict per world "
                                             "size and bandwidth, then syncSGD, the fp16 baseline and every "
                                             "compressor (main parameter swept) ranked by predicted iteration time, "
                                             "with speed-ups over both baselines, crossover bandwidths, intervals "
                                             "from the calibration, the model's error and the kit's accuracy "
                                             "evidence.")
    _setting_args(ap, "the calibration's, with its interval")
    ap.add_argument("--calibration", default=str(DEFAULT_CALIBRATION),
                    help=f"calibration JSON (default: the paper's V100 inputs, "
                         f"{DEFAULT_CALIBRATION.relative_to(paths.ROOT)})")
    ap.add_argument("--compressors", nargs="+", default=None, metavar="NAME",
                    help="compressors to rank (default: every registered one); syncSGD and fp16 always")
    ap.add_argument("--mode", nargs="+", choices=["post", "hook"], default=["post"],
                    help="compression after the backward pass (App. B, default) or as a DDP hook (per DDP bucket on "
                         "the per-bucket timeline; fp16 / bf16 hooks priced as the fp16 baseline in their dtype); "
                         "'post hook': every compressor ranked both ways")
    ap.add_argument("--terms", "--options", dest="terms", choices=["default", "paper", "extended"], default="default",
                    help="model terms, as for predict")
    ap.add_argument("--model-error", type=argtypes.float_range(0, 1, hi_open=True), default=None,
                    help="the model's relative error for every candidate (default: median errors of "
                         "data/verification/summary.csv)")
    ap.add_argument("--platform", choices=["gpu", "throttle"], default="gpu",
                    help="which verification rows give the model's error (default gpu: real networks)")
    ap.add_argument("--t-comp-ms", type=_positive_float, default=None, help="override T_comp (ms)")
    ap.add_argument("--alpha-s", type=argtypes.nonneg_float, default=None, help="override alpha (s per ring step)")
    ap.add_argument("--gamma", type=_positive_float, default=None, help="override gamma")
    ap.add_argument("--compute-speedup", type=_positive_float, default=1.0,
                    help="divide T_comp and T_encode_decode (a faster GPU; default 1), as for predict")
    ap.add_argument("--bucket-mb", type=_positive_float, default=25.0, help="DDP bucket size, MiB (default 25)")
    ap.add_argument("--top", type=_positive_int, default=None,
                    help="show the first N compressors of each ranking (both baselines are always shown)")
    ap.add_argument("--json", action="store_true", help="JSON for scripts instead of a table")
    return ap


#: --terms of predict and advise: one mapping, so both commands predict with the same model
TERMS = {"default": ModelOptions(), "paper": ModelOptions.paper(), "extended": ModelOptions.extended()}


def run_advise(argv: list[str]) -> int:
    from studykit.perfmodel import advise as adv_mod

    ap = advise_parser()
    a = ap.parse_args(argv)
    cal = _load_calibration(ap, a.calibration)
    _check_model(ap, a.model)
    if a.batch_size is None:
        a.batch_size = cal.batch_size_of(a.model)
    if a.gpus is not None:
        gpus = a.gpus
    elif cal.world_size is not None:
        gpus = [cal.world_size]
    else:
        gpus = DEFAULT_GPUS
    try:
        cands = adv_mod.candidates(a.compressors)
        adv = adv_mod.advise(cal, a.model, a.batch_size, gpus, a.bandwidth_gbps, candidate_list=cands,
                             options=TERMS[a.terms], mode=a.mode, model_error=a.model_error,
                             t_comp_s=None if a.t_comp_ms is None else a.t_comp_ms / 1e3, alpha_s=a.alpha_s,
                             gamma=a.gamma, compute_speedup=a.compute_speedup, bucket_bytes=a.bucket_mb * MIB,
                             platform=a.platform)
    except (adv_mod.AdviseError, compressors.CompressorError) as exc:
        ap.error(str(exc))
    if a.json:
        out = adv.to_dict()
        out["calibration"] = {"name": cal.name, "path": a.calibration}
        print(json.dumps(out, indent=1, allow_nan=False))
        return 0
    print(format_advice(adv, a.top))
    return 0


def format_advice(adv, top: int | None = None) -> str:
    """What ``advise`` prints (:meth:`studykit.perfmodel.advise.Advice.format`): the verdicts, the legend, then one
    table per (world size, bandwidth) with the first ``top`` compressors and both baselines."""
    return adv.format(top)


def _load_calibration(ap: argparse.ArgumentParser, path: str) -> Calibration:
    """``--calibration``, refused with a message when it is unreadable or invalid; the warnings it carries are said
    on stderr: records of different machines pooled, each on its own line; constants the records determine poorly,
    named on one line (the calibration file's ``warnings`` and ``fit``'s summary have each in full)."""
    try:
        cal = Calibration.load(path)
    except (FileNotFoundError, ValueError) as exc:
        ap.error(f"--calibration: {exc}")
    poor = [w for w in cal.warnings if "determine" in w and "poorly" in w]
    for w in cal.warnings:
        if w not in poor:
            print(f"{ap.prog}: warning: calibration {cal.name!r}: {w}", file=sys.stderr)
    if poor:
        names = ", ".join(w.split(" ", 1)[0].rstrip(":") for w in poor)
        print(f"{ap.prog}: note: calibration {cal.name!r}: its records determine {len(poor)} constant(s) poorly "
              f"({names}); their intervals carry it (the file's \"warnings\" say how)", file=sys.stderr)
    return cal


def _check_model(ap: argparse.ArgumentParser, model: str) -> None:
    """``--model`` must name a model (after the calibration is loaded: its models' shapes count)."""
    try:
        models.check(model)
    except (ValueError, ImportError) as exc:
        ap.error(f"argument --model: {exc}")


def run_predict(argv: list[str]) -> int:
    ap = predict_parser()
    a = ap.parse_args(argv)
    params = dict(a.param)
    if params and a.compressor is None:
        ap.error("--param needs --compressor")
    if a.compressor is not None:
        valid = compressors.parameters(a.compressor)
        unknown = sorted(set(params) - set(valid) - {"error_feedback", "seed"})
        if unknown:
            ap.error(f"compressor {a.compressor!r} has no parameter(s) {unknown}; valid: {sorted(valid)}")
        try:
            params = coerce_params(a.compressor, params)
        except compressors.CompressorError as exc:
            ap.error(f"--param: {exc}")
    cal = _load_calibration(ap, a.calibration)
    _check_model(ap, a.model)
    if a.batch_size is None:
        a.batch_size = cal.batch_size_of(a.model)
    if a.bandwidth_gbps is not None:
        bws, how_bw = a.bandwidth_gbps, "given (--bandwidth-gbps)"
    elif cal.bandwidth_gbps is not None:
        bws, how_bw = [cal.bandwidth_gbps.value], f"calibration {cal.name!r} ({cal.bandwidth_gbps.source})"
    else:
        ap.error(f"no bandwidth: calibration {cal.name!r} has no bandwidth_gbps; pass --bandwidth-gbps")
    if cal.alpha_s is None and a.alpha_s is None:
        ap.error(f"no latency: calibration {cal.name!r} has no alpha_s; pass --alpha-s")
    if a.gpus is not None:
        gpus_list, how_p = a.gpus, "given (--gpus)"
    elif cal.world_size is not None:
        gpus_list, how_p = [cal.world_size], f"calibration {cal.name!r} (its records' world size)"
    else:
        gpus_list, how_p = DEFAULT_GPUS, "default (the calibration states no world size)"
    opts = TERMS[a.terms]
    extended_gamma = (opts.sync_terms or opts.per_tensor) and cal.gamma_extended is not None
    if a.gamma is None and cal.gamma is None and not extended_gamma:
        ap.error(f"no gamma: calibration {cal.name!r} has none; pass --gamma")  # as advise refuses it
    hw = Hardware.from_calibration(cal, opts, bandwidth_gbps=np.asarray(bws, dtype=float)[:, None], alpha_s=a.alpha_s,
                                   gamma=a.gamma, compute_speedup=a.compute_speedup, allreduce=a.allreduce)
    w = Workload(a.model, a.batch_size, t_comp_s=None if a.t_comp_ms is None else a.t_comp_ms / 1e3,
                 bucket_bytes=a.bucket_mb * MIB)
    gpus = np.asarray(gpus_list)[None, :]
    ted = None if a.t_encode_decode_ms is None else a.t_encode_decode_ms / 1e3
    try:
        pr = predict(w, hw, gpus, a.compressor, params, calibration=cal, t_encode_decode_s=ted, options=opts)
    except (ValueError, compressors.CompressorError) as exc:
        ap.error(f"{exc} (options: --t-comp-ms, --t-encode-decode-ms, --calibration)")
    points = []
    for r in pr.to_records():
        pt = {"world_size": r["world_size"], "bandwidth_gbps": r["bandwidth_gbps"],
              "linear_ms": r["linear_s"] * 1e3,
              "syncsgd": {"iteration_ms": r["sync_iteration_s"] * 1e3, "total_ms": r["sync_total_s"] * 1e3, "compute_ms": r["sync_compute_s"] * 1e3,
                          "exposed_comm_ms": r["sync_exposed_comm_s"] * 1e3, "comm_ms": r["sync_comm_s"] * 1e3,
                          "buckets": int(r["sync_k"]),
                          "scaling_speedup": r["world_size"] * r["linear_s"] / r["sync_total_s"]}}
        if pr.compressed is not None:
            pt["compressed"] = {"iteration_ms": r["compressed_iteration_s"] * 1e3,
                                "total_ms": r["compressed_total_s"] * 1e3,
                                "compute_ms": r["compressed_compute_s"] * 1e3,
                                "encode_decode_ms": r["compressed_encode_decode_s"] * 1e3,
                                "comm_ms": r["compressed_comm_s"] * 1e3,
                                "allreduce_ms": r["compressed_allreduce_s"] * 1e3,
                                "allgather_ms": r["compressed_allgather_s"] * 1e3,
                                "wire_bytes": int(r["wire_bytes"]),
                                "scaling_speedup": r["world_size"] * r["linear_s"] / r["compressed_total_s"]}
            # the ratio of the two iteration times shown beside it (what a user measures); T_obs's ratio apart
            pt["speedup_over_syncsgd"] = r["sync_iteration_s"] / r["compressed_iteration_s"]
            pt["t_obs_speedup_over_syncsgd"] = r["speedup"]
        points.append(pt)
    interval, crossover = _intervals(a, cal, opts, gpus_list, params, points)
    out = {"model": a.model, "batch_size": a.batch_size, "compressor": a.compressor, "params": params,
           "calibration": {"name": cal.name, "path": a.calibration},
           "hardware": {"alpha_s": float(np.max(hw.alpha_s)), "gamma": float(np.max(hw.gamma)),
                        "compute_speedup": a.compute_speedup, "allreduce": a.allreduce, "bucket_mb": a.bucket_mb},
           "inputs": {**pr.notes, "bandwidth": how_bw, "world_size": how_p},
           "columns": {"iteration_ms": "what a user measures: O (forward, optimizer step) + T_obs",
                       "total_ms": "T_obs: backward + synchronization (the paper's Figs. 6-11)",
                       "interval_ms": "iteration_ms at both ends of every calibrated interval (as advise prices it)",
                       "speedup_over_syncsgd": "syncSGD's iteration_ms / the compressor's iteration_ms",
                       "t_obs_speedup_over_syncsgd": "syncSGD's total_ms / the compressor's total_ms"},
           "interval": interval, "crossover": crossover,
           "plans": {str(k): v for k, v in pr.plans.items()},
           "model_equations": {"syncsgd": "Sec. 4.1 with Eq. 1 of Agarwal et al. 2022 (arXiv 2103.00543)",
                               "compressed": "App. B of Agarwal et al. 2022, collectives from compressor.plan()",
                               "terms": a.terms},
           "points": points}
    print(json.dumps(out, indent=2, allow_nan=False) if a.json else format_prediction(out))
    return 0


def _label(compressor: str, params: dict) -> str:
    """The compressor's name in predict's table and crossover: ``powersgd rank=4`` (advise's candidate label,
    :func:`~studykit.compressors.registry.setting_label` ``"kv"``)."""
    return setting_label(compressor, params, "kv")


def _intervals(a, cal, opts, gpus_list, params: dict, points: list[dict]) -> tuple[dict, dict | None]:
    """The interval of every iteration time (``interval_ms`` added to ``points``) and the compressor's crossover
    per world size, both from one :func:`~studykit.perfmodel.advise.advise` call on predict's setting (the
    calibration's intervals; the crossover search of :meth:`~studykit.perfmodel.advise.Advice.crossover_gbps`).
    Returns (how the interval was found, the crossover or None without a compressor); where advise cannot price
    predict's question, the first says why and no interval is added."""
    from studykit.perfmodel import advise as adv_mod

    label = None if a.compressor is None else _label(a.compressor, params)
    why = ("--allreduce tree (advise prices the ring all-reduce of Eq. 1)" if a.allreduce != "ring" else
           "--t-encode-decode-ms (advise takes T_encode_decode from the calibration)"
           if a.t_encode_decode_ms is not None else None)
    adv = None
    if why is None:
        cands = [] if label is None else [adv_mod.Candidate(label, "compressor", a.compressor,
                                                             tuple(sorted(params.items())))]
        try:
            adv = adv_mod.advise(cal, a.model, a.batch_size, gpus_list, a.bandwidth_gbps, candidate_list=cands,
                                 options=opts, model_error=0.0, evidence=False,
                                 t_comp_s=None if a.t_comp_ms is None else a.t_comp_ms / 1e3, alpha_s=a.alpha_s,
                                 gamma=a.gamma, compute_speedup=a.compute_speedup, bucket_bytes=a.bucket_mb * MIB)
        except (adv_mod.AdviseError, ValueError) as exc:
            why = str(exc)
        else:
            why = adv.unranked.get(label)
    if why is not None:
        return {"shown": False, "why": why}, None
    kinds = [c.kind for c in adv.candidates]
    rows = {"syncsgd": kinds.index("syncsgd"), "compressed": 0}
    for pt in points:
        i, j = adv.index(pt["world_size"], pt["bandwidth_gbps"])
        for key, k in rows.items():
            if key in pt:
                t = adv.time_s[k, i, j] * 1e3
                if not np.isclose(t, pt[key]["iteration_ms"], rtol=1e-6):  # one model: never, unless a term differs
                    return {"shown": False, "why": f"advise prices {key} at {t:.6g} ms, predict at "
                                                   f"{pt[key]['iteration_ms']:.6g} ms here"}, None
                pt[key]["interval_ms"] = [float(adv.low_s[k, i, j] * 1e3), float(adv.high_s[k, i, j] * 1e3)]
    interval = {"shown": True, "how": adv.inputs["interval"], "exact_constants": adv.exact_constants}
    if label is None:
        return interval, None
    cross = [float(adv.crossover_gbps(int(p))[0]) for p in adv.world_sizes]
    return interval, {"compressor": label, "baseline": "the faster of syncSGD and the fp16 baseline at each bandwidth",
                      "search": "advise's (Advice.crossover_gbps): central constants, a log grid of bandwidths up to "
                                f"{adv.crossover_top_gbps:g} Gbit/s",
                      "world_sizes": [{"world_size": int(p), "gbps": v if np.isfinite(v) else None,
                                       "text": adv.crossover_text(v)} for p, v in zip(adv.world_sizes, cross)]}


def format_prediction(out: dict) -> str:
    """``predict``'s answer as a table: per world size and bandwidth, syncSGD's and the compressor's iteration
    time (what a user measures) with its interval and T_obs, and the speed-up over syncSGD (the ratio of the two
    iteration times shown); then the compressor's crossover bandwidth per world size (``--json`` gives
    everything)."""
    comp = out["compressor"]
    label = None if comp is None else _label(comp, out["params"])
    shown = out["interval"]["shown"]
    names = {"syncsgd": "syncSGD ms", **({} if label is None else {"compressed": f"{label} ms"})}

    def cells(t: dict, name: str) -> str:
        """One method's cells: iteration time, its interval (where shown), T_obs."""
        iv = f" {'[{:.1f}, {:.1f}]'.format(*t['interval_ms']):>20}" if shown else ""
        return f"  {t['iteration_ms']:>{len(name)}.1f}{iv} {t['total_ms']:>9.1f}"

    head = f"{'GPUs':>6} {'Gbit/s':>7}" + "".join(f"  {n}" + (f" {'interval ms':>20}" if shown else "")
                                                  + f" {'(T_obs)':>9}" for n in names.values())
    lines = [f"{out['model']}, batch {out['batch_size']} per GPU, calibration {out['calibration']['name']!r}",
             "iteration = O (forward, optimizer step) + T_obs (backward + synchronization); "
             f"O: {out['inputs'].get('overhead', '')}", "",
             head + ("" if label is None else f" {'x syncSGD':>10}")]
    for pt in out["points"]:
        row = f"{pt['world_size']:>6} {pt['bandwidth_gbps']:>7g}" + "".join(cells(pt[k], n) for k, n in names.items())
        if label is not None:
            row += f" {pt['speedup_over_syncsgd']:>9.2f}x"
        lines.append(row)
    lines.append("")
    if label is not None:
        lines.append(f"x syncSGD: syncSGD's iteration time over {label}'s, as printed (> 1: {label} is faster).")
    iv = out["interval"]
    lines.append("interval: the model at both ends of every calibrated interval, as advise prices it"
                 + (f" (taken as exact: {', '.join(iv['exact_constants'])})" if iv.get("exact_constants") else "")
                 if shown else f"interval: not shown: {iv['why']}")
    cross = out.get("crossover")
    if cross:
        def above(c: dict) -> str:  # advise's crossover_text: "4.16 Gbit/s", "> 1000 Gbit/s" or "never"
            if c["gbps"] is not None:
                return c["text"]
            return "never ahead" if c["text"] == "never" else f"none (still ahead at {c['text'][2:]}, the search's top)"

        lines.append(f"crossover (advise's search): the bandwidth above which {label} no longer beats the faster of "
                     "syncSGD and the fp16 baseline: "
                     + "; ".join(f"{c['world_size']} GPUs: {above(c)}" for c in cross["world_sizes"]) + ".")
    lines.append("--json: inputs, plans and every term.")
    return "\n".join(lines)


def run_fit(argv: list[str]) -> int:
    ap = fit_parser()
    a = ap.parse_args(argv)  # before the fit's imports (pandas, scipy): --help and bad arguments answer at once
    from studykit.perfmodel import fit
    from studykit.perfmodel.fit import report

    composed = bool(a.compute_from or a.network_from)
    if composed and a.records:
        ap.error("give RECORDS (every constant from them) or --compute-from and --network-from, not both")
    if composed and not (a.compute_from and a.network_from):
        ap.error("a composed calibration needs both --compute-from (one GPU: tcomp, profile) and --network-from "
                 "(a sweep on the cluster)")
    if not composed and not a.records:
        ap.error("no records: give record files or folders, or --compute-from and --network-from")
    try:
        out_path = paths.check_writable_output(a.out, a.overwrite_committed, file=True, sources={
            "RECORDS": a.records, "--compute-from": a.compute_from, "--network-from": a.network_from})
    except paths.OutputError as exc:
        ap.error(str(exc))
    try:
        df = fit.load_frame(*(a.compute_from or a.records))
        net_df = fit.load_frame(*a.network_from) if composed else None
        cal = fit.fit_calibration(df, a.name or Path(a.out).stem, stat=a.stat, n_boot=a.bootstrap, seed=a.seed,
                                  strict=not a.lenient, network=a.network, network_records=net_df,
                                  allow_mixed=a.allow_mixed)
    except (FileNotFoundError, ValueError) as exc:
        print(f"python -m studykit fit: error: {exc}", file=sys.stderr)
        return 2
    path = cal.save(out_path)
    reports = {"records_read": df.attrs.get("report")}
    if composed:
        reports["network_records_read"] = net_df.attrs.get("report")
    for k, why in cal.provenance.get("not_fitted", {}).items():
        print(f"python -m studykit fit: note: {k} {why}" if why.startswith("not fitted")
              else f"python -m studykit fit: note: {k} not fitted: {why}", file=sys.stderr)
    if cal.warnings:  # loud: a calibration a prediction should not trust as it is
        bar = "!" * 78
        print("\n".join([bar, f"python -m studykit fit: WARNING: {len(cal.warnings)} problem(s) with this calibration "
                                "(also saved in its 'warnings'):"]
                         + [f"  ! {w}" for w in cal.warnings] + [bar]), file=sys.stderr)
    print(json.dumps(report.summary(cal, path, reports), indent=2) if a.json
          else report.format_summary(cal, path, reports))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``argv[0]`` is the subcommand: ``predict``, ``fit`` or ``advise``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    runs = {"predict": run_predict, "fit": run_fit, "advise": run_advise}
    if not argv or argv[0] not in runs:
        print("usage: python -m studykit {predict,fit,advise} ...  (subcommand must be one of: predict, fit, advise)",
              file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    try:
        return runs[cmd](rest)
    except SystemExit as exc:  # argparse exits 2 on bad args, 0 on --help
        return int(exc.code or 0)


if __name__ == "__main__":
    sys.exit(main())
