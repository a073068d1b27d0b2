"""What the kit's data folders say about a candidate: whether a time-to-accuracy run of it is in
``data/training/`` (:func:`accuracy_evidence`), and the model's median error per group of candidates from
``verify``'s summary (:func:`model_errors`) and on the hook campaigns (:func:`hook_model_error`)."""
from __future__ import annotations

import csv
import functools
import json
from pathlib import Path

from studykit import compressors, paths
from studykit.perfmodel.advise.candidates import AdviseError, Candidate
from studykit.perfmodel.calibration import normalize_params

SUMMARY_CSV = paths.DATA / "verification" / "summary.csv"
#: ``verify``'s scores of the graph runner's hook, one folder per campaign (``*/summary.csv``)
HOOK_VERIFICATION = paths.DATA / "verification" / "hook_runner"
TRAINING = paths.DATA / "training"


# ------------------------------------------------------------------ evidence
def _key(compressor: str, params: dict) -> str:
    return json.dumps([compressor, normalize_params(params, compressor)], sort_keys=True, default=str)


@functools.lru_cache(maxsize=8)
def _evidence_index(folder: str, stamp: tuple) -> dict:
    from studykit.measure.records import RecordError, load_records

    runs: dict[str, dict] = {}
    for f in sorted(Path(folder).rglob("*.jsonl")):
        try:
            recs = load_records(f, kind="train_epoch", quiet=True)
        except RecordError:
            continue
        for r in recs:
            rid = r.get("run_id")
            spec = r.get("method_spec") or {}
            levels = spec.get("levels") or []
            run = runs.setdefault(rid, {"method": r.get("method"), "levels": levels, "folder":
                                        str(f.parent.relative_to(paths.ROOT)) if f.is_relative_to(paths.ROOT)
                                        else str(f.parent), "dataset": (r.get("dataset") or {}).get("dataset"),
                                        "world_size": r.get("world_size"), "epochs": 0, "test_acc": None})
            run["epochs"] = max(run["epochs"], int(r.get("epoch", 0)) + 1)
            if r.get("test_acc") is not None:
                run["test_acc"] = r["test_acc"]  # the last epoch's (records are in epoch order)
    index: dict[str, dict] = {"static": {}, "other": {}}
    for run in runs.values():
        for level in run["levels"]:
            try:
                name, params = compressors.parse_spec(level)
            except (compressors.CompressorError, ValueError):
                continue
            entry = {k: run[k] for k in ("method", "folder", "dataset", "world_size", "epochs", "test_acc")}
            entry["spec"] = level
            kind = "static" if len(run["levels"]) == 1 else "other"
            index[kind].setdefault(_key(name, params), []).append(entry)
            index.setdefault("by_compressor", {}).setdefault(name, set()).add(level)
    return index


def _index(folder: Path) -> dict | None:
    if not folder.is_dir():
        return None
    stamp = tuple(sorted((str(f), f.stat().st_mtime_ns) for f in folder.rglob("*.jsonl")))
    return _evidence_index(str(folder), stamp)


def accuracy_evidence(candidate: Candidate, folder: Path | str = TRAINING, *, index: dict | None = None) -> dict:
    """What ``folder`` (``data/training/``) holds on the accuracy of ``candidate``: ``status`` is ``"yes"``
    (a run that trained with exactly this compressor and these parameters), ``"other parameters"``,
    ``"adaptive runs only"`` (only inside a dynamic ladder) or ``"none"``; ``runs`` lists them."""
    folder = Path(folder)
    index = index if index is not None else _index(folder)
    if index is None:
        return {"status": "none", "runs": [], "note": f"no training records at {folder}"}
    if candidate.kind == "syncsgd":
        name, params = "none", {}
    elif candidate.kind == "fp16_hook":
        name, params = "fp16", {}
    else:
        name, params = candidate.compressor, candidate.param_dict
    key = _key(name, params)
    if key in index["static"]:
        runs = index["static"][key]
        return {"status": "yes", "runs": runs,
                "note": "; ".join(sorted({f"{r['folder']} ({r['dataset']}, p={r['world_size']}, {r['epochs']} epochs, "
                                          f"test acc {r['test_acc']:.3f})" for r in runs}))}
    others = sorted(index.get("by_compressor", {}).get(name, set()))
    if key in index["other"]:
        return {"status": "adaptive runs only", "runs": index["other"][key],
                "note": f"only as a level of adaptive runs ({', '.join(others)})"}
    if others:
        return {"status": "other parameters", "runs": [], "note": f"runs of {', '.join(others)} only"}
    return {"status": "none", "runs": [], "note": f"no run of {name} in {folder.name}/"}


# ------------------------------------------------------------------ model error
def model_errors(path: Path | str = SUMMARY_CSV, platform: str = "gpu", variant: str = "paper") -> dict[str, float]:
    """Median |relative error| of the model per group (``syncSGD``, ``compressors (post)``,
    ``compressors (hook)``) on ``platform`` for ``variant`` (paper / extended), from ``verify``'s summary."""
    path = Path(path)
    if not path.is_file():
        raise AdviseError(f"no verification summary at {path}: run `python -m studykit verify` or pass "
                          "--model-error (e.g. 0.05 for 5 %)")
    out = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if row.get("platform") == platform and row.get("variant") == variant:
                out[row["group"]] = float(row["median_abs_rel_error"])
    if not out:
        raise AdviseError(f"{path} has no rows for platform {platform!r}, variant {variant!r}; pass --model-error")
    return out


def hook_model_error(folder: Path | str = HOOK_VERIFICATION) -> tuple[float, str] | None:
    """The model's error on a compressor's DDP hook as :func:`~studykit.perfmodel.advise.advise` prices it (the
    graph runner's hook on the per-bucket timeline, extended terms): the largest median |relative error| of the
    ``compressors (hook)`` rows, extended variant, among the campaigns ``verify`` scored under ``folder``
    (``*/summary.csv``), and in words where it is from. The largest, not the campaign nearest the world size
    asked: the model is scored at few world sizes, and ``advise`` prices a bucket's readiness and codec time
    more simply than ``verify`` does with measured inputs. None where no campaign scored hooks."""
    folder = Path(folder)
    scores = []
    for f in sorted(folder.glob("*/summary.csv")):
        with f.open(newline="") as fh:
            scores += [(float(r["median_abs_rel_error"]), f.parent.name, int(r["n"])) for r in csv.DictReader(fh)
                       if r.get("group") == "compressors (hook)" and r.get("variant") == "extended"]
    if not scores:
        return None
    err, worst, n = max(scores)
    shown = folder.relative_to(paths.ROOT) if folder.is_relative_to(paths.ROOT) else folder
    return err, (f"{shown}: the largest median |error| of its {len(scores)} hook campaigns ({worst}, {n} "
                 "configurations; extended model, the graph runner's hook)")
