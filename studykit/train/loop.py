"""Train one model per method inside an initialised process group, one record per epoch.

Every rank runs :func:`run_methods`; rank 0 appends one JSON line per epoch. The compressor
runs as a DDP communication hook (:func:`studykit.ddp.compressor_hook`) wrapped with timers,
so each epoch splits its wall time into

* ``comm_s``: inside the collectives the compressor issues (incl. waiting for peers),
* ``compress_s``: the rest of the hook (encode, decode, error feedback, copies),
* ``compute_s``: the rest of the training step (forward, backward, optimizer, batching).

With ``split_timing`` (default) on a GPU the hook synchronises the device around itself
and around each collective so these are attributable; that removes DDP's overlap of
communication with the backward pass (negligible for these small models). On CPU (gloo)
collectives block anyway. Evaluation time is recorded apart and never counted as training.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F

from studykit.comm import TorchComm
from studykit.measure.records import SCHEMA_VERSION
from studykit.ddp import HookState, compressor_hook
from studykit.train import data as data_mod
from studykit.train import nets
from studykit.train.dynamic import EpochMetrics, Level
from studykit.train.methods import Method
from studykit.measure.records import loadavg_1m, provenance

__all__ = ["TrainConfig", "run_methods", "RECORD_KIND"]

RECORD_KIND = "train_epoch"


@dataclass
class TrainConfig:
    """Everything a training run depends on (recorded in every record under ``params``)."""

    dataset: str = "mnist1d"             # one of studykit.train.data.DATASETS
    data_root: Optional[str] = None      # CIFAR-10 archive or folder
    limit_train: Optional[int] = None    # keep the first N training examples (None: all)
    limit_test: Optional[int] = None     # keep the first N test examples
    synthetic_shape: tuple = (64,)       # input shape of the synthetic data set
    model: str = "auto"                  # one of studykit.train.nets.ARCHS
    width: Optional[int] = None          # model width (None: the model's default)
    epochs: int = 20
    batch_size: int = 32                 # per worker; the global batch is batch_size * world_size
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    lr_schedule: str = "constant"        # "constant" or "cosine" (over ``epochs``)
    seed: int = 0                        # model init, data order, compressor randomness
    val_fraction: float = 0.1            # held out of the training set for the controller
    bucket_cap_mb: float = 25.0          # DDP bucket size
    split_timing: bool = True            # synchronise around hook/collectives on GPU (see module doc)
    progress: bool = True                # one line per epoch on rank 0's stderr
    target_acc: Optional[float] = None   # stop a method once test accuracy reaches this (fraction)
    device: str = "auto"                 # "auto": cuda:LOCAL_RANK if available, else cpu
    threads: Optional[int] = 1           # torch CPU threads per process (None: leave as is)
    warmup_steps: int = 10               # untimed steps of a throwaway model first (lazy init, caches)
    # dynamic-compression overrides (None: the method's defaults)
    acc_thresholds: Optional[tuple] = None
    loss_thresholds: Optional[tuple] = None
    loss_window: Optional[int] = None
    stall_epochs: Optional[int] = None
    boost_epochs: Optional[int] = None
    eta: Optional[float] = None
    interval: Optional[int] = None

    def __post_init__(self):
        def bad(name, rng, v):
            return ValueError(f"TrainConfig.{name} must be {rng}, got {v!r}")

        def integer(v):
            return isinstance(v, int) and not isinstance(v, bool)

        for name in ("epochs", "batch_size"):
            v = getattr(self, name)
            if not integer(v) or v < 1:
                raise bad(name, "an integer >= 1", v)
        for name in ("limit_train", "limit_test", "width", "loss_window", "stall_epochs", "boost_epochs", "interval"):
            v = getattr(self, name)
            if v is not None and (not integer(v) or v < 1):
                raise bad(name, "None or an integer >= 1", v)
        for name, lo_ok in (("lr", False), ("bucket_cap_mb", False), ("weight_decay", True)):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (v == 0 and not lo_ok):
                raise bad(name, "a finite number " + (">= 0" if lo_ok else "> 0"), v)
        if not isinstance(self.momentum, (int, float)) or not 0 <= self.momentum < 1:
            raise bad("momentum", "a number in [0, 1)", self.momentum)
        if not isinstance(self.val_fraction, (int, float)) or not 0 <= self.val_fraction < 1:
            raise bad("val_fraction", "a number in [0, 1)", self.val_fraction)
        if self.target_acc is not None and (not isinstance(self.target_acc, (int, float))
                                            or not 0 < self.target_acc <= 1):
            raise bad("target_acc", "None or a fraction in (0, 1] (test accuracy)", self.target_acc)
        if self.acc_thresholds is not None and not all(isinstance(t, (int, float)) and 0 < t <= 1
                                                       for t in self.acc_thresholds):
            raise bad("acc_thresholds", "fractions in (0, 1]", self.acc_thresholds)
        if self.device != "auto":
            from studykit.measure.runtime import pick_device

            pick_device(self.device)  # ValueError naming the device and the valid ones

    def as_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(self).items()}

    def controller_overrides(self) -> dict:
        keys = ("acc_thresholds", "loss_thresholds", "loss_window", "stall_epochs", "boost_epochs", "eta", "interval")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}


# ------------------------------------------------------------------ timed hook
class _Clock:
    def __init__(self, device: torch.device, sync: bool):
        self.cuda = device.type == "cuda"
        self.sync = sync and self.cuda
        self.device = device

    def now(self) -> float:
        if self.sync:
            torch.cuda.synchronize(self.device)
        return time.perf_counter()


class TimedComm:
    """A :class:`TorchComm` that adds the seconds spent in each collective to ``seconds``."""

    def __init__(self, inner: TorchComm, clock: _Clock):
        self.inner, self.clock = inner, clock
        self.rank, self.world_size = inner.rank, inner.world_size
        self.seconds = 0.0

    def all_reduce(self, tensor):
        t0 = self.clock.now()
        out = self.inner.all_reduce(tensor)
        self.seconds += self.clock.now() - t0
        return out

    def all_gather(self, tensor):
        t0 = self.clock.now()
        out = self.inner.all_gather(tensor)
        self.seconds += self.clock.now() - t0
        return out


class TimedHookState(HookState):
    """:class:`studykit.ddp.HookState` plus hook time and the shapes of each bucket."""

    def __init__(self, compressor, comm: TimedComm, clock: _Clock):
        # the protocol runs inside the hook (blocking), so the hook's wall time is its cost
        super().__init__(compressor, comm=comm, overlap=False)
        self.clock = clock
        self.hook_s = 0.0


def timed_hook(state: TimedHookState, bucket):
    """``compressor_hook`` with its wall time added to ``state.hook_s``."""
    t0 = state.clock.now()
    fut = compressor_hook(state, bucket)
    state.hook_s += state.clock.now() - t0
    return fut


# ------------------------------------------------------------------ helpers
def _device(cfg: TrainConfig) -> torch.device:
    if cfg.device != "auto":
        return torch.device(cfg.device)
    if torch.cuda.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _planned_bytes(level: Level, bucket_shapes: dict, world_size: int, seed: int) -> int:
    """Bytes per step that ``Compressor.plan`` predicts for these buckets (a fresh compressor)."""
    comp = level.build(seed=seed)
    return int(sum(comp.wire_bytes(shapes, world_size) for shapes in bucket_shapes.values()))


def _numel(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _swap_compressor(state: HookState, new):
    """Install ``new``, carrying error-feedback memory over when old and new both keep one
    (the residual is still owed to the model); otherwise the residual is dropped."""
    old = state.compressor
    if old.memory is not None and new.memory is not None:
        new.memory.residuals = old.memory.residuals
    state.compressor = new


@torch.no_grad()
def _evaluate(model, x, y, rank, world, device, batch=1024) -> torch.Tensor:
    """[loss sum, correct, count] over this rank's shard (rank::world) of (x, y)."""
    acc = torch.zeros(3, dtype=torch.float64, device=device)
    idx = torch.arange(rank, len(y), world)
    for i in range(0, len(idx), batch):
        j = idx[i:i + batch]
        out = model(x[j])
        acc[0] += F.cross_entropy(out, y[j], reduction="sum").double()
        acc[1] += (out.argmax(1) == y[j]).sum()
        acc[2] += len(j)
    return acc


def _lr_factor(cfg: TrainConfig, epoch: int) -> float:
    if cfg.lr_schedule == "constant":
        return 1.0
    if cfg.lr_schedule == "cosine":
        return 0.5 * (1 + math.cos(math.pi * epoch / max(cfg.epochs, 1)))
    raise ValueError(f"unknown lr_schedule {cfg.lr_schedule!r}; use 'constant' or 'cosine'")


def _append(path: Optional[Path], rec: dict) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def out_path_for(out: Optional[str | Path], label: str) -> Optional[Path]:
    """``out`` ending in ``.jsonl``: that file for every method; otherwise a folder with ``LABEL.jsonl``."""
    if out is None:
        return None
    out = Path(out)
    if out.suffix == ".jsonl":
        return out
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
    return out / f"{safe}.jsonl"


# ------------------------------------------------------------------ training
@dataclass
class _Data:
    ds: data_mod.Dataset
    x_val: torch.Tensor
    y_val: torch.Tensor
    summary: dict = field(default_factory=dict)


def prepare_data(cfg: TrainConfig, device: torch.device) -> _Data:
    ds = data_mod.load(cfg.dataset, root=cfg.data_root, limit_train=cfg.limit_train, limit_test=cfg.limit_test,
                       seed=cfg.seed, synthetic_shape=tuple(cfg.synthetic_shape))
    ds, x_val, y_val = ds.split_validation(cfg.val_fraction, seed=cfg.seed)
    summary = {**ds.summary(), "num_val": len(y_val)}
    ds.x_train, ds.y_train = ds.x_train.to(device), ds.y_train.to(device)
    ds.x_test, ds.y_test = ds.x_test.to(device), ds.y_test.to(device)
    return _Data(ds, x_val.to(device), y_val.to(device), summary)


def run_methods(cfg: TrainConfig, methods: list[Method], out: Optional[str | Path] = None,
                overwrite: bool = False, results: Optional[str | Path] = None) -> list[dict]:
    """Train every method in turn (same seed, same data order) in the current process group.

    Rank 0 appends each epoch's record to :func:`out_path_for` ``(out, label)`` (truncated
    first with ``overwrite``) and, if given, to ``results``; returns the records (rank 0;
    other ranks return ``[]``).
    """
    if not dist.is_initialized():
        raise RuntimeError("run_methods needs an initialised process group; use studykit.train.train()")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = _device(cfg)
    if device.type == "cuda":
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    data = prepare_data(cfg, device)
    rank = dist.get_rank()
    records: list[dict] = []
    if overwrite and rank == 0:
        for m in methods:
            p = out_path_for(out, m.label)
            if p is not None and p.exists():
                p.unlink()
    _warmup(cfg, data, device)
    for method in methods:
        recs = _train_one(cfg, method, data, device, out_path_for(out, method.label) if rank == 0 else None,
                          Path(results) if (results and rank == 0) else None)
        records.extend(recs if rank == 0 else [])
        dist.barrier()
    return records


def _warmup(cfg: TrainConfig, data: _Data, device) -> None:
    """A few steps of a throwaway model through the same hook and collectives, so one-time
    costs (DDP and gloo/NCCL set-up, allocator, kernels) do not land on the first method."""
    if cfg.warmup_steps <= 0:
        return
    model = nets.build(cfg.model, data.ds.input_shape, data.ds.num_classes, cfg.width).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, bucket_cap_mb=cfg.bucket_cap_mb)
    clock = _Clock(device, cfg.split_timing)
    state = TimedHookState(Level("none").build(), TimedComm(TorchComm(), clock), clock)
    ddp.register_comm_hook(state, timed_hook)
    n = min(cfg.batch_size, len(data.ds.y_train))
    for _ in range(cfg.warmup_steps):
        ddp.zero_grad(set_to_none=True)
        F.cross_entropy(ddp(data.ds.x_train[:n]), data.ds.y_train[:n]).backward()
    _evaluate(model, data.x_val[:n], data.y_val[:n], dist.get_rank(), dist.get_world_size(), device)
    del ddp, model, state
    dist.barrier()


def _train_one(cfg: TrainConfig, method: Method, data: _Data, device, path, results_path) -> list[dict]:
    rank, world = dist.get_rank(), dist.get_world_size()
    ds = data.ds
    torch.manual_seed(cfg.seed)
    model = nets.build(cfg.model, ds.input_shape, ds.num_classes, cfg.width).to(device)
    numel = _numel(model)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, bucket_cap_mb=cfg.bucket_cap_mb)
    clock = _Clock(device, cfg.split_timing)
    controller = method.controller(**cfg.controller_overrides())
    level = controller.level if controller is not None else method.levels[0]
    comm = TimedComm(TorchComm(), clock)
    state = TimedHookState(level.build(seed=cfg.seed), comm, clock)
    ddp.register_comm_hook(state, timed_hook)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)

    n_train = len(ds.y_train)
    steps = n_train // (world * cfg.batch_size)
    if steps < 1:
        raise ValueError(f"{n_train} training examples are fewer than one global batch "
                         f"({world} workers x batch_size {cfg.batch_size})")
    run_id = f"{method.label}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    prov = provenance(device, backend=dist.get_backend(), world_size=world, device=str(device),
                      device_type=device.type, loadavg_1m=loadavg_1m()) if rank == 0 else {}
    common = {"schema": SCHEMA_VERSION, "kind": RECORD_KIND, "run_id": run_id, "method": method.label,
              "method_spec": method.describe(),
              "controller": controller.describe() if controller is not None else None,
              "dataset": data.summary, "model": {"arch": cfg.model, "class": type(model).__name__, "numel": numel},
              "world_size": world, "global_batch": world * cfg.batch_size, "steps_per_epoch": steps,
              "params": cfg.as_dict(), "seeds": {"model": cfg.seed, "data_order": cfg.seed,
                                                  "compressor": cfg.seed, "val_split": cfg.seed},
              "provenance": prov}
    recs: list[dict] = []
    total_bytes, total_train_s = 0, 0.0
    for epoch in range(cfg.epochs):
        for g in opt.param_groups:
            g["lr"] = cfg.lr * _lr_factor(cfg, epoch)
        perm = torch.randperm(n_train, generator=torch.Generator().manual_seed(cfg.seed * 100_003 + epoch))
        mine = perm[rank::world][: steps * cfg.batch_size].to(device)
        grad_sum = [torch.zeros_like(p) for p in model.parameters()]
        bytes0, comm0, hook0 = state.bytes_sent, comm.seconds, state.hook_s
        sums = torch.zeros(3, dtype=torch.float64, device=device)
        model.train()
        t_epoch = clock.now()
        for i in range(steps):
            idx = mine[i * cfg.batch_size:(i + 1) * cfg.batch_size]
            xb, yb = ds.x_train[idx], ds.y_train[idx]
            opt.zero_grad(set_to_none=True)
            out = ddp(xb)
            loss = F.cross_entropy(out, yb)
            loss.backward()
            opt.step()
            with torch.no_grad():
                for a, p in zip(grad_sum, model.parameters()):
                    a += p.grad
                sums[0] += loss.detach().double() * len(yb)
                sums[1] += (out.argmax(1) == yb).sum()
                sums[2] += len(yb)
        train_s = clock.now() - t_epoch
        hook_s, comm_s = state.hook_s - hook0, comm.seconds - comm0
        epoch_bytes = state.bytes_sent - bytes0

        t_eval = clock.now()
        model.eval()
        val = _evaluate(model, data.x_val, data.y_val, rank, world, device)
        test = _evaluate(model, ds.x_test, ds.y_test, rank, world, device)
        agg = torch.cat([sums, val, test])
        dist.all_reduce(agg)
        grad_norm = torch.sqrt(sum((a.double() ** 2).sum() for a in grad_sum)).reshape(1)
        dist.broadcast(grad_norm, 0)  # identical on every rank already; make the controller's input so
        agg, grad_norm = agg.tolist(), float(grad_norm.item())
        eval_s = clock.now() - t_eval

        total_bytes += epoch_bytes
        total_train_s += train_s
        train_loss, train_acc = agg[0] / agg[2], agg[1] / agg[2]
        val_loss = agg[3] / agg[5] if agg[5] else math.nan
        val_acc = agg[4] / agg[5] if agg[5] else math.nan
        test_loss, test_acc = agg[6] / agg[8], agg[7] / agg[8]
        planned = _planned_bytes(level, state.bucket_shapes, world, cfg.seed)
        rec = {**common, "epoch": epoch, "level": level.as_dict(),
               "level_index": controller.index if controller is not None else 0,
               "boost": bool(controller.boosting) if controller is not None else False,
               "bits_per_element": 8 * planned / numel,
               "train_loss": train_loss, "train_acc": train_acc, "val_loss": val_loss, "val_acc": val_acc,
               "test_loss": test_loss, "test_acc": test_acc, "grad_norm": grad_norm, "lr": opt.param_groups[0]["lr"],
               "iterations": steps, "train_s": train_s, "compute_s": train_s - hook_s,
               "compress_s": hook_s - comm_s, "comm_s": comm_s, "eval_s": eval_s,
               "time_s": total_train_s,  # cumulative training wall time (evaluation excluded)
               "bytes_sent": epoch_bytes, "bytes_sent_total": total_bytes,
               "bytes_planned_per_step": planned, "buckets": len(state.bucket_shapes),
               "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        if rank == 0:
            _append(path, rec)
            _append(results_path, rec)
            recs.append(rec)
            if cfg.progress:  # one line per epoch on rank 0 (stderr: stdout stays for tables)
                print(f"train {method.label} epoch {epoch + 1}/{cfg.epochs}: test acc {test_acc:.3f}, "
                      f"val acc {val_acc:.3f}, loss {train_loss:.3f}, {train_s:.2f} s training, "
                      f"{epoch_bytes / 1e6:.3g} MB sent, level {level.as_dict().get('label')}",
                      file=sys.stderr, flush=True)
        if cfg.target_acc is not None and test_acc >= cfg.target_acc:
            break
        if controller is not None:
            new = controller.update(EpochMetrics(epoch, train_loss, val_acc, train_acc, grad_norm))
            if new != level:
                _swap_compressor(state, new.build(seed=cfg.seed))
                level = new

    # gloo shutdown quirks (MACHINE-NOTES): drop DDP/model/optimizer references; the full
    # gc.collect() + barrier run once in launch.shutdown() (a collection costs ~0.3 s here)
    del ddp, opt, model, state, grad_sum
    return recs
