"""Does ``advise`` predict a model the kit does not list, on a cluster it has not seen? The loop a user runs.

    python benchmarks/own_model_check.py data/measurements/own_model/vit_b16_p2 --fit-rate 12
    python benchmarks/own_model_check.py FOLDER --fit-rate 12 --out data/verification/own_model/vit_b16_p2 \\
        --overwrite-committed          # the committed check

FOLDER holds what ``scripts/gpu_bandwidth.sh`` wrote with ``LOCAL=1 SWEEP=1`` for the user's model (``MODELS=FILE.py:FUNC``):
``tcomp.jsonl`` and ``profile.jsonl`` (one GPU), ``sweep.jsonl`` (collectives on the shaped link at the fit rate),
``ddp.jsonl`` and ``probe.jsonl`` (DDP iterations and the link's probe at every rate). The check:

1. fits a calibration as ``docs/calibrate.md`` tells a user to: ``python -m studykit fit --compute-from`` the one-GPU
   records and the DDP bucket stamps *of the fit rate only* ``--network-from`` the sweep (so nothing measured at
   the other rates enters the fit);
2. at every other rate, asks ``studykit.advise`` (post and hook) for the model's iteration times on that many GPUs
   at the link's probed bandwidth (Eq. 1's BW from the probe's all-reduce), and sets each measured configuration
   (syncSGD, PyTorch's fp16 hook = the fp16 baseline, each compressor as a hook and after the backward pass) beside
   its prediction;
3. prints the table and the median / max relative error per group against the targets (syncSGD, fp16 and post:
   5 % median, 10 % max; hooks: 5 % / 15 %), and with ``--out`` writes ``calibration.json``, ``predictions.csv.gz``
   and ``summary.json`` (with provenance) there.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import studykit  # noqa: E402
from studykit import paths  # noqa: E402
from studykit.measure.records import load_records, provenance  # noqa: E402
from studykit.perfmodel.calibration import Calibration  # noqa: E402
from studykit.perfmodel.fit import eq1_bandwidth_from_busbw  # noqa: E402
from studykit.perfmodel.verify.files import write_predictions  # noqa: E402

#: (median, max) relative error targets: syncSGD, the fp16 baseline and post together, and hooks; each group alone too
TARGETS = {"syncSGD, fp16 baseline and post": (0.05, 0.10), "hook": (0.05, 0.15), "syncSGD": (0.05, 0.10),
           "fp16 baseline": (0.05, 0.10), "post": (0.05, 0.10)}


def _rate(rec: dict):
    n = rec.get("network") or {}
    return None if n.get("rate_gbps") is None else float(n["rate_gbps"])


def _label(compressor: str, params: dict) -> str:
    """advise's candidate label of a measured compressor (its main parameter only, as advise sweeps it)."""
    from studykit.perfmodel.advise import _main_parameter

    main = _main_parameter(compressor)
    if main is None or main[0] not in params:
        return compressor
    v = params[main[0]]
    return f"{compressor} {main[0]}={v:g}" if isinstance(v, float) else f"{compressor} {main[0]}={v}"


def fit_calibration(folder: Path, fit_rate: float, work: Path) -> Path:
    """``python -m studykit fit --compute-from ... --network-from ...`` on the records of ``fit_rate`` only."""
    stamps = work / "buckets_fit_rate.jsonl"
    with open(stamps, "w") as f:
        for r in load_records(folder / "ddp.jsonl"):
            if r.get("kind") == "buckets" and _rate(r) == fit_rate:
                f.write(json.dumps(r) + "\n")
    sweep = work / "sweep_fit_rate.jsonl"
    with open(sweep, "w") as f:
        for r in load_records(folder / "sweep.jsonl"):
            if _rate(r) == fit_rate:
                f.write(json.dumps(r) + "\n")
    out = work / "calibration.json"
    cmd = [sys.executable, "-m", "studykit", "fit", "--compute-from", str(folder / "tcomp.jsonl"),
           "--compute-from", str(folder / "profile.jsonl"), "--compute-from", str(stamps),
           "--network-from", str(sweep), "--name", f"{folder.name} (fit at {fit_rate:g} Gbit/s)", "--out", str(out)]
    print("$", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    return out


def measured(folder: Path) -> pd.DataFrame:
    """One row per measured DDP configuration: group, advise's label, mode, rate, world size, batch, ms."""
    rows = []
    for r in load_records(folder / "ddp.jsonl"):
        if r.get("kind") != "ddp" or r.get("status") not in (None, "ok") or r.get("bucket_mb") is not None:
            continue
        mode, comp, params = r["mode"], r.get("compressor"), r.get("params") or {}
        if mode == "syncsgd":
            group, label, how = "syncSGD", "syncSGD", "post"
        elif mode == "builtin" and comp == "torch_fp16":
            group, label, how = "fp16 baseline", "fp16 baseline", "post"
        elif mode in ("hook", "post") and comp not in (None, "none"):
            group, label, how = mode, _label(comp, params), mode
        else:
            continue  # PyTorch's PowerSGD hook and the identity path: advise does not price them
        rows.append({"group": group, "candidate": label, "compressor": comp, "advise_mode": how, "mode": mode,
                     "rate_gbps": _rate(r), "world_size": int(r["world_size"]), "model": r["model"],
                     "batch_size": int(r["batch_size"]), "measured_ms": float(r["ms_median"]),
                     "n_iter": int(r.get("n_iter") or 0)})
    return pd.DataFrame(rows)


def probed_gbps(folder: Path, alpha_s: float) -> dict:
    """Eq. 1's bandwidth (Gbit/s) at each (rate, world size) from the link's probe."""
    out = {}
    for r in load_records(folder / "probe.jsonl"):
        if r.get("kind") == "throttle_probe" and r.get("busbw_gbps"):
            key = (_rate(r), int(r["world_size"]))
            out[key] = eq1_bandwidth_from_busbw(float(r["busbw_gbps"]), float(r["nbytes"]), key[1], alpha_s)
    return out


def predict(meas: pd.DataFrame, cal: Calibration, bws: dict, fit_rate: float) -> pd.DataFrame:
    out = []
    held = meas[meas["rate_gbps"] != fit_rate]
    comps = sorted({c for c in held["compressor"].dropna() if not str(c).startswith("torch_")})
    for (model, bs, p, rate, how), g in held.groupby(["model", "batch_size", "world_size", "rate_gbps",
                                                      "advise_mode"]):
        bw = bws.get((rate, p))
        if bw is None:
            print(f"no probe at {rate} Gbit/s, p = {p}: skipped", file=sys.stderr)
            continue
        adv = studykit.advise(model, gpus=[p], bandwidth_gbps=[bw], calibration=cal, batch_size=bs, mode=how,
                              compressors=comps, evidence=False)
        pred = {row["candidate"]: row["iteration_ms"] for row in adv.ranking(p, bw)}
        for rec in g.to_dict("records"):
            ms = pred.get(rec["candidate"])
            out.append({**rec, "bandwidth_gbps": bw, "predicted_ms": ms,
                        "rel_error": None if ms is None else (ms - rec["measured_ms"]) / rec["measured_ms"]})
    return pd.DataFrame(out)


def ratios(folder: Path) -> pd.DataFrame:
    """Per (world size, rate): each compressor's hook time over its post-backward time, and the kit's PowerSGD and
    fp16 hooks over PyTorch's (measured side by side in one call)."""
    t = {}
    for r in load_records(folder / "ddp.jsonl"):
        if r.get("kind") == "ddp" and r.get("status") in (None, "ok") and r.get("bucket_mb") is None:
            t[(int(r["world_size"]), _rate(r), r["mode"], r.get("compressor"))] = float(r["ms_median"])
    rows = []
    for p, rate in sorted({k[:2] for k in t}):
        row = {"world_size": p, "rate_gbps": rate}
        for c in sorted({k[3] for k in t if k[:3] == (p, rate, "hook")}):
            if (p, rate, "post", c) in t:
                row[f"{c} hook/post"] = t[(p, rate, "hook", c)] / t[(p, rate, "post", c)]
        for kit, torch_name in (("powersgd", "torch_powersgd"), ("fp16", "torch_fp16")):
            if (p, rate, "hook", kit) in t and (p, rate, "builtin", torch_name) in t:
                row[f"kit {kit} hook/PyTorch's"] = t[(p, rate, "hook", kit)] / t[(p, rate, "builtin", torch_name)]
        rows.append(row)
    return pd.DataFrame(rows)


def summarize(pred: pd.DataFrame) -> list[dict]:
    rows = []
    for group, (tmed, tmax) in TARGETS.items():
        members = ("syncSGD", "fp16 baseline", "post") if group.startswith("syncSGD,") else (group,)
        e = pred.loc[pred["group"].isin(members), "rel_error"].dropna().abs()
        if e.empty:
            continue
        rows.append({"group": group, "n": int(len(e)), "median_abs_rel_error": float(e.median()),
                     "max_abs_rel_error": float(e.max()), "target_median": tmed, "target_max": tmax,
                     "met": bool(e.median() <= tmed and e.max() <= tmax)})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="records of one model on one cluster (see the module docstring)")
    ap.add_argument("--fit-rate", type=float, required=True, help="the emulated rate (Gbit/s) the fit may use")
    ap.add_argument("--out", type=Path, default=None, help="write calibration.json, predictions.csv.gz, summary.json")
    ap.add_argument(paths.OVERWRITE_FLAG, action="store_true", help="allow --out inside data/")
    a = ap.parse_args(argv)
    for f in ("tcomp", "profile", "sweep", "ddp", "probe"):
        if not (a.folder / f"{f}.jsonl").is_file():
            ap.error(f"{a.folder} has no {f}.jsonl (needs tcomp, profile, sweep, ddp and probe records)")
    if a.out is not None:
        try:
            paths.check_writable_output(a.out, a.overwrite_committed)
        except paths.OutputError as exc:
            ap.error(str(exc))
    with tempfile.TemporaryDirectory() as tmp:
        cal_path = fit_calibration(a.folder, a.fit_rate, Path(tmp))
        cal = Calibration.load(cal_path)
        cal_text = cal_path.read_text()
    meas = measured(a.folder)
    if meas.empty or not (meas["rate_gbps"] != a.fit_rate).any():
        ap.error(f"{a.folder}/ddp.jsonl has no DDP configurations at rates other than {a.fit_rate:g} Gbit/s")
    bws = probed_gbps(a.folder, cal.alpha_s.value if cal.alpha_s is not None else 0.0)
    pred = predict(meas, cal, bws, a.fit_rate)
    summary = summarize(pred)
    with pd.option_context("display.width", 200, "display.max_rows", 200):
        print(pred[["rate_gbps", "world_size", "group", "candidate", "measured_ms", "predicted_ms", "rel_error"]]
              .sort_values(["world_size", "rate_gbps", "group", "candidate"]).to_string(index=False,
                                                                                  float_format="%.3f"))
    print()
    for s in summary:
        print(f"{s['group']:<32} n={s['n']:<3} median {100 * s['median_abs_rel_error']:5.1f} %  max "
              f"{100 * s['max_abs_rel_error']:5.1f} %   target {100 * s['target_median']:.0f} / "
              f"{100 * s['target_max']:.0f} %: {'met' if s['met'] else 'NOT met'}")
    print("\nmeasured ratios (median iteration times, one call):")
    print(ratios(a.folder).to_string(index=False, float_format="%.3f", na_rep="-"))
    for w in cal.warnings or []:
        print(f"fit warning: {w}")
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "calibration.json").write_text(cal_text)
        write_predictions(pred, a.out)  # predictions.csv.gz, as verify writes it
        (a.out / "summary.json").write_text(json.dumps(
            {"records": str(a.folder), "fit_rate_gbps": a.fit_rate, "groups": summary,
             "argv": " ".join(sys.argv), "provenance": provenance()}, indent=1, default=str) + "\n")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
