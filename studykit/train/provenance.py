"""Where and with what a training record was made (STYLE.md rule 5)."""
from __future__ import annotations

import functools
import json
import os
import platform
import socket
import subprocess
import time

import torch

from studykit import paths
from studykit.measure.records import cpu_name, nvidia_driver

__all__ = ["provenance", "git_commit"]


@functools.lru_cache(maxsize=1)
def git_commit() -> dict:
    """``{"commit": sha or None, "dirty": bool or None}`` of the kit's checkout."""
    def run(*args):
        return subprocess.run(["git", "-C", str(paths.ROOT), *args], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    try:
        sha = run("rev-parse", "HEAD") or None
        dirty = bool(run("status", "--porcelain", "--untracked-files=no")) if sha else None
    except (OSError, subprocess.SubprocessError):
        sha, dirty = None, None
    return {"commit": sha, "dirty": dirty}


@functools.lru_cache(maxsize=1)
def _static() -> dict:
    info = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    try:
        import numpy

        info["numpy"] = numpy.__version__
    except ImportError:  # pragma: no cover
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
        info["gpu_count"] = torch.cuda.device_count()
        try:
            v = torch.cuda.nccl.version()
            info["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:  # noqa: BLE001 - NCCL missing from this build
            info["nccl"] = None
        info["driver"] = nvidia_driver()
    else:
        info["gpu"] = None
    info.update(git_commit())
    return info


def provenance(**extra) -> dict:
    """Hardware, versions, git commit, timestamp, plus ``extra`` (backend, world size, ...).
    A throttled network (``STUDYKIT_NETWORK``, set by :mod:`studykit.throttle`) is included."""
    info = dict(_static())
    info["timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    try:  # a busy shared machine explains noisy timings
        info["loadavg_1m"] = round(os.getloadavg()[0], 2)
    except OSError:
        info["loadavg_1m"] = None
    net = os.environ.get("STUDYKIT_NETWORK")
    if net:
        try:
            info["network"] = json.loads(net)
        except json.JSONDecodeError:
            info["network"] = net
    info.update(extra)
    return info
