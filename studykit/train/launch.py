"""Process groups for training: under ``torchrun``, in-process (world size 1), or N spawned
gloo CPU processes (notebooks, tests).

>>> from studykit.train import TrainConfig, train
>>> records = train(TrainConfig(epochs=3), ["none", "dynamic"], world_size=2)  # doctest: +SKIP
"""
from __future__ import annotations

import datetime
import gc
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import torch
import torch.distributed as dist

from studykit.train.loop import TrainConfig, run_methods
from studykit.train.methods import Method, parse_methods
from studykit.measure.workers import die_with_launcher, die_with_parent, under_torchrun

__all__ = ["train", "under_torchrun", "init_from_env", "shutdown", "read_records"]

_TIMEOUT = datetime.timedelta(minutes=10)
#: seconds stopped workers get to exit on SIGTERM before they are killed
_GRACE_S = 5.0


def init_from_env(device: str = "auto") -> str:
    """Initialise the default group from torchrun's environment: NCCL when CUDA is available
    (and ``device`` is not ``cpu``), else gloo; the process exits when its launcher does. Returns the backend."""
    die_with_launcher()
    use_cuda = torch.cuda.is_available() and device != "cpu"
    backend = "nccl" if use_cuda else "gloo"
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend, init_method="env://", timeout=_TIMEOUT)
    return backend


def shutdown() -> None:
    """Tear the group down without gloo's abort-at-exit (MACHINE-NOTES): collect, barrier, destroy."""
    if dist.is_initialized():
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


def _exit_on_sigterm(parent_pid: int, tmp: str) -> None:
    """A spawned worker's signals: SIGINT is the parent's to handle (it stops the workers); SIGTERM (the parent
    stopping the run, or the kernel saying the parent died) ends the run: the worker removes the run's temporary
    folder ``tmp`` (a dead parent cannot) and exits at once."""
    def stop(signum, frame):
        shutil.rmtree(tmp, ignore_errors=True)
        os._exit(128 + signum)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, stop)
    die_with_parent(parent_pid)


def _spawn_worker(rank: int, parent_pid: int, tmp: str, world_size: int, cfg: TrainConfig, methods: list[Method],
                  out, overwrite: bool, seeds=None, resume: bool = False) -> None:
    _exit_on_sigterm(parent_pid, tmp)
    init_file, results = os.path.join(tmp, "init"), os.path.join(tmp, "records.jsonl")
    torch.set_num_threads(cfg.threads or 1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size,
                            timeout=_TIMEOUT)
    try:
        run_methods(cfg, methods, out, overwrite=overwrite, results=results, seeds=seeds, resume=resume)
    finally:
        shutdown()


def read_records(path: str | Path) -> list[dict]:
    """Records of a JSON Lines file (:func:`studykit.measure.records.load_records`, the kit's one reader)."""
    from studykit.measure.records import load_records

    return load_records(path)


def train(cfg: TrainConfig, methods: "Sequence[str | Method] | str", world_size: int = 1,
          out: Optional[str | Path] = None, overwrite: bool = False, seeds: Optional[Sequence[int]] = None,
          resume: bool = False) -> list[dict]:
    """Train ``methods`` with ``cfg`` on ``world_size`` workers, once per seed in ``seeds`` (default:
    ``cfg.seed``); returns rank 0's records (``resume``: skip runs already complete in ``out``).

    * inside an initialised group (torchrun): runs on it (``world_size`` is ignored);
    * ``world_size == 1``: an in-process gloo (CPU) or NCCL (``cfg.device`` cuda) group;
    * ``world_size > 1``: spawns that many gloo CPU processes (``cfg.device`` must be cpu/auto).

    ``out``: a ``.jsonl`` file for all methods, or a folder for one ``LABEL.jsonl`` each
    (appended to; ``overwrite`` truncates first).
    """
    methods = parse_methods(methods)
    seeds = list(seeds) if seeds else None
    if dist.is_initialized():
        return run_methods(cfg, methods, out, overwrite=overwrite, seeds=seeds, resume=resume)
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if world_size == 1:
        use_cuda = cfg.device.startswith("cuda") or (cfg.device == "auto" and torch.cuda.is_available())
        backend = "nccl" if use_cuda else "gloo"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=_TIMEOUT)
        try:
            return run_methods(cfg, methods, out, overwrite=overwrite, seeds=seeds, resume=resume)
        finally:
            shutdown()
    if cfg.device not in ("auto", "cpu"):
        raise ValueError(f"spawned workers use gloo on CPU; got device={cfg.device!r} (use torchrun for GPUs)")
    import dataclasses

    import torch.multiprocessing as mp

    cfg = dataclasses.replace(cfg, device="cpu")
    with tempfile.TemporaryDirectory(prefix="studykit-train-") as tmp:
        ctx = mp.start_processes(_spawn_worker, args=(os.getpid(), tmp, world_size, cfg, methods,
                                                      None if out is None else str(out), overwrite, seeds, resume),
                                 nprocs=world_size, join=False, start_method="spawn")
        try:
            while not ctx.join():
                pass
        except mp.ProcessRaisedException as exc:
            last = [ln for ln in str(exc).strip().splitlines() if ln.strip()][-1]
            if last.split(":", 1)[0].rsplit(".", 1)[-1] in ("DataError", "ValueError", "CompressorError",
                                                             "FileNotFoundError"):
                raise ValueError(f"a training worker stopped: {last}") from None  # bad input: a message
            raise
        finally:  # KeyboardInterrupt, an error: no worker outlives this call, no file of its stays behind
            _stop(ctx)
        results = os.path.join(tmp, "records.jsonl")
        return read_records(results) if os.path.exists(results) else []


def _stop(ctx) -> None:
    """Terminate the spawned workers still running (SIGTERM, then SIGKILL after :data:`_GRACE_S`), join them and
    remove the error files torch's spawn leaves in the system's temporary folder."""
    alive = [p for p in ctx.processes if p.is_alive()]
    for p in alive:
        p.terminate()
    deadline = time.monotonic() + _GRACE_S
    for p in alive:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()
    for f in ctx.error_files:
        Path(f).unlink(missing_ok=True)
