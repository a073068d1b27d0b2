"""Process groups for training: under ``torchrun``, in-process (world size 1), or N spawned
gloo CPU processes (notebooks, tests).

>>> from studykit.train import TrainConfig, train
>>> records = train(TrainConfig(epochs=3), ["none", "dynamic"], world_size=2)  # doctest: +SKIP
"""
from __future__ import annotations

import datetime
import gc
import os
import tempfile
from pathlib import Path
from typing import Optional, Sequence

import torch
import torch.distributed as dist

from studykit.train.loop import TrainConfig, run_methods
from studykit.train.methods import Method, parse_methods

__all__ = ["train", "under_torchrun", "init_from_env", "shutdown", "read_records"]

_TIMEOUT = datetime.timedelta(minutes=10)


def under_torchrun() -> bool:
    """Whether torchrun (or another launcher) set RANK / WORLD_SIZE / MASTER_ADDR."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def init_from_env(device: str = "auto") -> str:
    """Initialise the default group from torchrun's environment: NCCL when CUDA is available
    (and ``device`` is not ``cpu``), else gloo. Returns the backend."""
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


def _spawn_worker(rank: int, world_size: int, init_file: str, cfg: TrainConfig, methods: list[Method],
                  out, overwrite: bool, results: str, seeds=None, resume: bool = False) -> None:
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
        results = os.path.join(tmp, "records.jsonl")
        try:
            mp.spawn(_spawn_worker, args=(world_size, os.path.join(tmp, "init"), cfg, methods,
                                          None if out is None else str(out), overwrite, results, seeds, resume),
                     nprocs=world_size, join=True)
        except mp.ProcessRaisedException as exc:
            last = [ln for ln in str(exc).strip().splitlines() if ln.strip()][-1]
            if last.split(":", 1)[0].rsplit(".", 1)[-1] in ("DataError", "ValueError", "CompressorError",
                                                             "FileNotFoundError"):
                raise ValueError(f"a training worker stopped: {last}") from None  # bad input: a message
            raise
        return read_records(results) if os.path.exists(results) else []
