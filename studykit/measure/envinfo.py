"""``python -m studykit env``: what a bug report needs, in one paste.

The kit's version, install folder and git commit (where it runs from a checkout), Python, the platform, torch
with the CUDA and NCCL versions it was built with, numpy, pandas, the CPU and, where CUDA is there, every GPU
with its memory and the driver. The hardware, versions and commit come from the provenance every measurement
record carries (:func:`studykit.measure.records.provenance`)::

    python -m studykit env          # a table to paste into an issue
    python -m studykit env --json   # the same as JSON
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from importlib import metadata
from pathlib import Path

__all__ = ["info", "format_info", "summary", "main"]


def _version(package: str) -> str | None:
    """An installed package's version, from its metadata (without importing it); None where it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def info() -> dict:
    """Everything :func:`format_info` prints, as data (imports torch, to ask it about CUDA)."""
    import torch

    import studykit
    from studykit.measure.records import provenance

    cuda = torch.cuda.is_available()
    prov = provenance("cuda" if cuda else "cpu")
    gpus = []
    for i in range(torch.cuda.device_count() if cuda else 0):
        props = torch.cuda.get_device_properties(i)
        gpus.append({"index": i, "name": props.name, "memory_gib": round(props.total_memory / 2**30, 1)})
    return {"studykit": studykit.__version__, "install": str(Path(studykit.__file__).resolve().parent),
            "git_commit": None if prov["git_commit"] == "unknown" else prov["git_commit"],
            "git_dirty": prov["git_dirty"], "python": prov["python"], "python_executable": sys.executable,
            "platform": platform.platform(), "torch": prov["torch"], "cuda": prov["cuda"], "nccl": prov["nccl"],
            "cuda_available": cuda, "numpy": _version("numpy"), "pandas": _version("pandas"),
            "cpu": prov["cpu"], "cpu_count": os.cpu_count(), "gpus": gpus, "driver": prov["driver"]}


def format_info(d: dict) -> str:
    """:func:`info` as aligned ``name: value`` lines (what ``python -m studykit env`` prints)."""
    commit = d["git_commit"] or "none (not a git checkout; STUDYKIT_GIT_COMMIT names one)"
    if d["git_commit"] and d["git_dirty"]:
        commit += " (with uncommitted changes)"
    gpus = [f"{g['index']}: {g['name']}, {g['memory_gib']:g} GiB" for g in d["gpus"]] or \
        ["none (torch sees no CUDA device)"]
    rows = [("studykit", f"{d['studykit']} ({d['install']})"), ("git commit", commit),
            ("python", f"{d['python']} ({d['python_executable']})"), ("platform", d["platform"]),
            ("torch", d["torch"]), ("CUDA (torch built with)", d["cuda"] or "none (a CPU build)"),
            ("NCCL", d["nccl"] or "none (no CUDA)"), ("numpy", d["numpy"] or "not installed"),
            ("pandas", d["pandas"] or "not installed"), ("CPU", f"{d['cpu']}, {d['cpu_count']} cores"),
            ("GPUs", gpus[0]), *[("", g) for g in gpus[1:]]]
    if d["driver"]:
        rows.append(("NVIDIA driver", d["driver"]))
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def summary(d: dict | None = None) -> str:
    """One line on the machine (for a benchmark's table): CPU and cores, GPUs, Python, torch, the kit's commit."""
    d = d or info()
    gpus = ", ".join(f"{g['name']} ({g['memory_gib']:g} GiB)" for g in d["gpus"]) or "no GPU"
    commit = (d["git_commit"] or "no git checkout")[:10] + (" (with uncommitted changes)" if d["git_dirty"] else "")
    return (f"{d['cpu']}, {d['cpu_count']} cores, {gpus}; Python {d['python']}, torch {d['torch']}; "
            f"{d['platform']}; studykit {d['studykit']} at {commit}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m studykit env", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    try:
        a = ap.parse_args(argv[1:] if argv and argv[0] == "env" else argv)
    except SystemExit as exc:  # argparse exits 2 on bad arguments, 0 on --help
        return int(exc.code or 0)
    d = info()
    print(json.dumps(d, indent=1) if a.json else format_info(d))
    return 0
