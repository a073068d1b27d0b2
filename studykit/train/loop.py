"""Train one model per method (and seed) inside an initialised process group, one record per round.

Every rank runs :func:`run_methods`; rank 0 appends one JSON line per *round* (an epoch by default;
``eval_every`` iterations when set, e.g. for the text workload). The compressor runs as the kit's
overlapped DDP communication hook (:func:`studykit.ddp.compressor_hook`, ``overlap=True``): encode,
collectives and decode of a bucket run on a communication thread while the backward pass goes on, as
they would in a user's training (Agarwal et al. 2022, https://arxiv.org/abs/2103.00543, Sec. 3
"Implementation Details": syncSGD and fp16 rely on this overlap, Sec. 4.1 Eq. 1).

Timing keeps that overlap:

* **timed iterations** are whole training iterations (forward, backward with the hook, optimizer step),
  bracketed by CUDA events on a GPU (read once at the end of the round: no synchronisation between
  iterations) or ``time.perf_counter`` on CPU. ``train_s`` is the round's training wall time, ``iter_ms``
  the statistics of its iterations (:class:`studykit.measure.timing.Timing`).
* **profiled iterations** (``profile_steps`` after each round, never counted as training) give the
  per-phase split: the hook then runs the protocol blocking on a *copy* of the compressor, with the device
  synchronised around the hook and around every collective, so ``split_ms`` holds compute (forward and
  backward outside the hook), encode (before the first collective and between collectives), communicate
  (inside the collectives, waiting for peers included) and decode (after the last collective), per
  iteration. Their gradients are discarded and BatchNorm statistics restored, so they change nothing.

Bytes: ``bytes_sent`` is what this worker put into collectives (measured, ``HookState.bytes_sent``);
``bytes_received`` what every worker receives, from the compressor's ``plan()`` (the one definition of
the wire) with nccl-tests' accounting (:func:`received_bytes`): ``2 (p-1)/p`` of an all-reduced buffer,
``p-1`` shards of an all-gather (Agarwal et al. 2022, App. B). Evaluation time is recorded apart and
never counted as training.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F

from studykit.comm import Collective, TorchComm
from studykit.ddp import HookState, compressor_hook
from studykit.measure.records import SCHEMA_VERSION, loadavg_1m, provenance
from studykit.measure.timing import Timing
from studykit.train import data as data_mod
from studykit.train import nets
from studykit.train import text as text_mod
from studykit.train.dynamic import EpochMetrics, Level
from studykit.train.methods import Method

__all__ = ["TrainConfig", "run_methods", "RECORD_KIND", "received_bytes", "plan_traffic", "out_path_for", "optimizer_state",
           "completed_runs"]

RECORD_KIND = "train_epoch"
#: keys of ``TrainConfig`` that do not change what is trained (a resumed run may differ in them)
_VOLATILE = ("seed", "progress", "threads", "warmup_steps", "device", "resume", "deadline_s")


@dataclass
class TrainConfig:
    """Everything a training run depends on (recorded in every record under ``params``)."""

    dataset: str = "mnist1d"             # one of studykit.train.data.DATASETS, or "text" (studykit.train.text)
    data_root: Optional[str] = None      # CIFAR-10 archive or folder; text: a folder of *.py (default: stdlib)
    limit_train: Optional[int] = None    # keep the first N training examples (text: bytes) (None: all)
    limit_test: Optional[int] = None     # keep the first N test examples (text: validation and test bytes)
    test_percent: int = 0                # text: % of files held out as a test stream (0: test = validation)
    synthetic_shape: tuple = (64,)       # input shape of the synthetic data set
    model: str = "auto"                  # one of studykit.train.nets.ARCHS
    width: Optional[int] = None          # model width (None: the model's default)
    epochs: int = 20                     # passes over the training set (ignored when ``steps`` is set)
    steps: Optional[int] = None          # total iterations (default: epochs x steps per epoch)
    eval_every: Optional[int] = None     # iterations per round (record, evaluation, controller) (None: an epoch)
    seq_len: int = 128                   # text: tokens (bytes) per training window
    optimizer: str = "sgd"               # "sgd" (with momentum) or "adamw" (betas 0.9, 0.95)
    batch_size: int = 32                 # per worker; the global batch is batch_size * world_size
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 0.0
    lr_schedule: str = "constant"        # "constant" or "cosine" (per iteration, down to lr / 10 at the end)
    lr_warmup_steps: int = 0             # linear learning-rate warm-up over the first N iterations
    seed: int = 0                        # model init, data order, compressor randomness
    val_fraction: float = 0.1            # held out of the training set for the controller
    bucket_cap_mb: float = 25.0          # DDP bucket size
    profile_steps: int = 2               # profiled (untimed, discarded) iterations after each round: the split
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
        for name in ("limit_train", "limit_test", "width", "loss_window", "stall_epochs", "boost_epochs", "interval",
                     "steps", "eval_every"):
            v = getattr(self, name)
            if v is not None and (not integer(v) or v < 1):
                raise bad(name, "None or an integer >= 1", v)
        for name, lo_ok in (("lr", False), ("bucket_cap_mb", False), ("weight_decay", True)):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (v == 0 and not lo_ok):
                raise bad(name, "a finite number " + (">= 0" if lo_ok else "> 0"), v)
        for name in ("lr_warmup_steps", "profile_steps"):
            v = getattr(self, name)
            if not integer(v) or v < 0:
                raise bad(name, "an integer >= 0", v)
        if not integer(self.test_percent) or not 0 <= self.test_percent <= 50:
            raise bad("test_percent", "an integer in 0..50 (percent of the text corpus's files)", self.test_percent)
        if self.test_percent and self.dataset != "text":
            raise bad("test_percent", "0 unless dataset is 'text' (the other data sets have their own test split)",
                      self.test_percent)
        if not integer(self.seq_len) or self.seq_len < 2:
            raise bad("seq_len", "an integer >= 2", self.seq_len)
        if self.optimizer not in ("sgd", "adamw"):
            raise bad("optimizer", "'sgd' or 'adamw'", self.optimizer)
        if self.lr_schedule not in ("constant", "cosine"):
            raise bad("lr_schedule", "'constant' or 'cosine'", self.lr_schedule)
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

    def fingerprint(self) -> dict:
        """What decides the numbers of a run, seed aside (resume matches on it)."""
        return {k: v for k, v in self.as_dict().items() if k not in _VOLATILE}

    def controller_overrides(self) -> dict:
        keys = ("acc_thresholds", "loss_thresholds", "loss_window", "stall_epochs", "boost_epochs", "eta", "interval")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}


#: every data set ``TrainConfig.dataset`` takes: the classification sets and the text corpus
DATASETS = (*data_mod.DATASETS, "text")


# ------------------------------------------------------------------ wire accounting
def received_bytes(c: Collective, world_size: int) -> int:
    """Bytes one worker receives in collective ``c`` on a ring of ``world_size``: nccl-tests' bus factor times
    its message size (:mod:`studykit.measure.sweep`): ``2 (p-1)/p`` x the buffer for an all-reduce (Eq. 1's
    ring), ``p-1`` shards for an all-gather (Agarwal et al. 2022, App. B). On a ring a worker sends as much."""
    from studykit.measure.sweep import bus_factor, nccl_tests_bytes

    return int(round(bus_factor(c.op, world_size) * nccl_tests_bytes(c.op, c.nbytes, world_size)))


def plan_traffic(level: Level, bucket_shapes: dict, world_size: int, seed: int) -> tuple[int, int]:
    """``(sent, received)`` bytes per worker and step that ``Compressor.plan`` gives for these buckets."""
    comp = level.build(seed=seed)
    sent = received = 0
    for shapes in bucket_shapes.values():
        for c in comp.plan(shapes, world_size):
            sent += c.nbytes
            received += received_bytes(c, world_size)
    return sent, received


# ------------------------------------------------------------------ hook: overlapped, or profiled
class _PhaseComm:
    """A communicator that notes (start, end) of every collective, the device synchronised around it."""

    def __init__(self, inner: TorchComm, now: Callable[[], float]):
        self.inner, self.now = inner, now
        self.rank, self.world_size = inner.rank, inner.world_size
        self.marks: list[tuple[float, float]] = []

    def _timed(self, fn, tensor):
        t0 = self.now()
        out = fn(tensor)
        self.marks.append((t0, self.now()))
        return out

    def all_reduce(self, tensor):
        return self._timed(self.inner.all_reduce, tensor)

    def all_gather(self, tensor):
        return self._timed(self.inner.all_gather, tensor)


class _Profiler:
    """Runs buckets blocking on a copy of the compressor and adds each phase's seconds (module doc)."""

    def __init__(self, state: HookState, device: torch.device):
        cuda = device.type == "cuda"
        self.now = (lambda: (torch.cuda.synchronize(device), time.perf_counter())[1]) if cuda else time.perf_counter
        self.comm = _PhaseComm(TorchComm(), self.now)
        self.shadow = HookState(copy.deepcopy(state.compressor), comm=self.comm, overlap=False)
        self.shadow.bucket_params = dict(state.bucket_params)
        self.shadow.bucket_shapes = dict(state.bucket_shapes)
        self.phases = {"hook": 0.0, "encode": 0.0, "comm": 0.0, "decode": 0.0}

    def hook(self, bucket):
        self.comm.marks = []
        t0 = self.now()
        fut = compressor_hook(self.shadow, bucket)
        t1 = self.now()
        marks = self.comm.marks
        self.phases["hook"] += t1 - t0
        if not marks:
            self.phases["encode"] += t1 - t0
            return fut
        inside = sum(e - s for s, e in marks)
        self.phases["comm"] += inside
        self.phases["decode"] += t1 - marks[-1][1]
        self.phases["encode"] += (marks[-1][1] - t0) - inside  # before the first and between collectives
        return fut


class TrainHookState(HookState):
    """:class:`studykit.ddp.HookState` (overlapped) that a :class:`_Profiler` can take over for a while."""

    def __init__(self, compressor, comm: TorchComm):
        super().__init__(compressor, comm=comm, overlap=True)
        self.profiler: Optional[_Profiler] = None

    def __getstate__(self):
        d = super().__getstate__()
        d["profiler"] = None
        return d


def train_hook(state: TrainHookState, bucket):
    """The overlapped ``compressor_hook``, or the profiler's blocking one while profiling."""
    if state.profiler is not None:
        return state.profiler.hook(bucket)
    return compressor_hook(state, bucket)


class _IterationTimer:
    """Whole-iteration times without synchronising between iterations: CUDA events on a GPU (read at
    :meth:`read`), ``perf_counter`` on CPU. ``studykit.measure.timing.time_fn`` synchronises before
    each call, which a training loop must not do (the CPU runs ahead of the GPU between iterations)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device
        self.marks: list = []

    def mark(self) -> None:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self.marks.append(ev)
        else:
            self.marks.append(time.perf_counter())

    def read(self) -> list[float]:
        """Milliseconds between consecutive marks; resets."""
        m, self.marks = self.marks, []
        if self.cuda:
            m[-1].synchronize()
            return [float(a.elapsed_time(b)) for a, b in zip(m, m[1:])]
        return [(b - a) * 1e3 for a, b in zip(m, m[1:])]


# ------------------------------------------------------------------ helpers
def _device(cfg: TrainConfig) -> torch.device:
    if cfg.device != "auto":
        return torch.device(cfg.device)
    if torch.cuda.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _numel(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _swap_compressor(state: HookState, new):
    """Install ``new``, carrying error-feedback memory over when old and new both keep one
    (the residual is still owed to the model); otherwise the residual is dropped."""
    old = state.compressor
    if old.memory is not None and new.memory is not None:
        new.memory.residuals = old.memory.residuals
    state.compressor = new


def _loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over every prediction (a class per example, or a token per position)."""
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


@torch.no_grad()
def _evaluate(model, x, y, rank, world, device, batch=1024) -> torch.Tensor:
    """[loss sum, correct, count] over this rank's shard (rank::world) of (x, y); per token for text."""
    acc = torch.zeros(3, dtype=torch.float64, device=device)
    idx = torch.arange(rank, len(y), world)
    for i in range(0, len(idx), batch):
        j = idx[i:i + batch]
        out = model(x[j])
        acc[0] += F.cross_entropy(out.reshape(-1, out.shape[-1]), y[j].reshape(-1), reduction="sum").double()
        acc[1] += (out.argmax(-1) == y[j]).sum()
        acc[2] += y[j].numel()
    return acc


def optimizer_state(opt: torch.optim.Optimizer) -> Optional[dict]:
    """What the optimizer's state does to the step, over every coordinate of every parameter.

    AdamW (Loshchilov & Hutter 2019, https://arxiv.org/abs/1711.05101): ``m_rms`` and ``sqrt_v_mean``, the
    root mean square of the bias-corrected first moment and the mean of the square root of the
    bias-corrected second moment, and ``step_rms``, the root mean square of ``m_hat / (sqrt(v_hat) + eps)``,
    the direction the learning rate multiplies. Noise added to the gradient (a coarse quantizer's) raises
    ``v`` and lowers ``step_rms``: logging them tests that explanation on the real runs. SGD with momentum:
    ``momentum_rms``. ``None`` before the first step."""
    sums = None
    n = 0
    kind = "adamw" if isinstance(opt, torch.optim.AdamW) else "sgd"
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p)
            if not st:
                continue
            if sums is None:
                sums = torch.zeros(3, dtype=torch.float64, device=p.device)
            n += p.numel()
            if kind == "adamw":
                b1, b2 = group["betas"]
                t = float(st["step"])
                m = st["exp_avg"].double() / (1 - b1 ** t)
                sv = (st["exp_avg_sq"].double() / (1 - b2 ** t)).sqrt()
                sums += torch.stack([(m * m).sum(), sv.sum(), ((m / (sv + group["eps"])) ** 2).sum()])
            elif st.get("momentum_buffer") is not None:
                sums[0] += st["momentum_buffer"].double().pow(2).sum()
    if sums is None or n == 0:
        return None
    a, b, c = sums.tolist()
    if kind == "adamw":
        return {"optimizer": kind, "m_rms": math.sqrt(a / n), "sqrt_v_mean": b / n, "step_rms": math.sqrt(c / n)}
    return {"optimizer": kind, "momentum_rms": math.sqrt(a / n)}


def _lr_factor(cfg: TrainConfig, step: int, total: int) -> float:
    """Learning-rate multiplier at iteration ``step`` of ``total``: linear warm-up, then constant or a
    cosine down to 1/10 (nanoGPT's schedule)."""
    w = cfg.lr_warmup_steps
    if step < w:
        return (step + 1) / w
    if cfg.lr_schedule == "constant":
        return 1.0
    progress = min(1.0, (step - w) / max(1, total - w))
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


_REPAIRED: set = set()


def _append(path: Optional[Path], rec: dict) -> None:
    """Append one record as a line; the first append to a file in this process first removes a last line an
    interrupted run left cut short (:func:`studykit.measure.records.repair`), so the new line is not glued to it."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.resolve() not in _REPAIRED:
        from studykit.measure.records import repair

        repair(path)
        _REPAIRED.add(path.resolve())
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")
        f.flush()


def out_path_for(out: Optional[str | Path], label: str) -> Optional[Path]:
    """``out`` ending in ``.jsonl``: that file for every method; otherwise a folder with ``LABEL.jsonl``."""
    if out is None:
        return None
    out = Path(out)
    if out.suffix == ".jsonl":
        return out
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
    return out / f"{safe}.jsonl"


def completed_runs(path: Optional[Path]) -> set:
    """``(method, seed, fingerprint)`` of every run in ``path`` whose last round was written (``final``)."""
    if path is None or not path.is_file():
        return set()
    from studykit.measure.records import load_records

    done = set()
    for r in load_records(path, kind=RECORD_KIND, missing_ok=True, dedupe=False, quiet=True):
        if r.get("final"):
            fp = {k: v for k, v in r["params"].items() if k not in _VOLATILE}
            done.add((r["method"], r["params"]["seed"], json.dumps(fp, sort_keys=True)))
    return done


# ------------------------------------------------------------------ data: one task per data set
@dataclass
class _Task:
    """What the loop needs of a data set: this rank's batch of any iteration, and the evaluation sets."""

    kind: str                      # "classify" or "lm"
    summary: dict
    input_shape: tuple
    num_classes: int               # classes, or the vocabulary
    steps_per_epoch: int           # iterations per pass over the training set (text: as many tokens)
    batch: Callable[[int], tuple]  # step -> (x, y) of this rank
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: Optional[torch.Tensor]  # None: the test set is the validation set (text)
    y_test: Optional[torch.Tensor]
    eval_batch: int = 1024


def prepare_task(cfg: TrainConfig, device: torch.device, rank: int, world: int) -> _Task:
    """The data set of ``cfg`` on ``device``, batched for ``rank`` of ``world``."""
    if cfg.dataset not in DATASETS:
        raise data_mod.DataError(f"unknown dataset {cfg.dataset!r}; available: {', '.join(DATASETS)}")
    B = cfg.batch_size
    if cfg.dataset == "text":
        corpus = text_mod.load_corpus(cfg.data_root, limit_train=cfg.limit_train, limit_val=cfg.limit_test,
                                      test_percent=cfg.test_percent)
        stream = corpus.train.to(device)
        x_val, y_val = corpus.windows("val", cfg.seq_len)
        x_test, y_test = corpus.windows("test", cfg.seq_len) if corpus.test is not None else (None, None)
        steps = max(1, len(corpus.train) // (world * B * cfg.seq_len))

        def lm_batch(step: int):
            starts = text_mod.batch_starts(len(stream), cfg.seq_len, world * B, cfg.seed, step)
            return text_mod.gather_windows(stream, starts[rank * B:(rank + 1) * B], cfg.seq_len)

        summary = {**corpus.summary(), "seq_len": cfg.seq_len, "num_val_windows": len(y_val)}
        if x_test is not None:
            summary["num_test_windows"] = len(y_test)
            x_test, y_test = x_test.to(device), y_test.to(device)
        return _Task("lm", summary, (cfg.seq_len,), corpus.vocab_size, steps, lm_batch, x_val.to(device),
                     y_val.to(device), x_test, y_test, eval_batch=max(1, 65536 // cfg.seq_len))
    ds = data_mod.load(cfg.dataset, root=cfg.data_root, limit_train=cfg.limit_train, limit_test=cfg.limit_test,
                       seed=cfg.seed, synthetic_shape=tuple(cfg.synthetic_shape))
    ds, x_val, y_val = ds.split_validation(cfg.val_fraction, seed=cfg.seed)
    n_train = len(ds.y_train)
    steps = n_train // (world * B)
    if steps < 1:
        raise ValueError(f"{n_train} training examples are fewer than one global batch "
                         f"({world} workers x batch_size {B})")
    x_train, y_train = ds.x_train.to(device), ds.y_train.to(device)
    order: dict = {}

    def cls_batch(step: int):
        epoch, i = divmod(step, steps)
        if epoch not in order:  # this rank's share of the epoch's permutation (the same as before rounds)
            order.clear()
            perm = torch.randperm(n_train, generator=torch.Generator().manual_seed(cfg.seed * 100_003 + epoch))
            order[epoch] = perm[rank::world][: steps * B].to(device)
        idx = order[epoch][i * B:(i + 1) * B]
        return x_train[idx], y_train[idx]

    return _Task("classify", {**ds.summary(), "num_val": len(y_val)}, ds.input_shape, ds.num_classes, steps,
                 cls_batch, x_val.to(device), y_val.to(device), ds.x_test.to(device), ds.y_test.to(device))


def _build_model(cfg: TrainConfig, task: _Task, device) -> torch.nn.Module:
    arch = cfg.model
    if task.kind == "lm" and arch == "auto":
        arch = "gpt_mini"
    elif task.kind == "lm" and arch not in nets.GPT_CONFIGS:
        raise ValueError(f"the text data set needs a language model: one of {', '.join(nets.GPT_CONFIGS)}, "
                         f"got model {arch!r}")
    return nets.build(arch, task.input_shape, task.num_classes, cfg.width).to(device)


# ------------------------------------------------------------------ training
def run_methods(cfg: TrainConfig, methods: list[Method], out: Optional[str | Path] = None,
                overwrite: bool = False, results: Optional[str | Path] = None,
                seeds: Optional[list[int]] = None, resume: bool = False) -> list[dict]:
    """Train every method for every seed (seed-major: all methods at the first seed, then the next) in
    the current process group, each from the same initialisation and data order as the others.

    Rank 0 appends each round's record to :func:`out_path_for` ``(out, label)`` (truncated first with
    ``overwrite``) and, if given, to ``results``; with ``resume``, a (method, seed) whose complete run
    (same settings) is already in ``out`` is skipped. Returns the records (rank 0; others ``[]``).
    """
    if not dist.is_initialized():
        raise RuntimeError("run_methods needs an initialised process group; use studykit.train.train()")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = _device(cfg)
    if device.type == "cuda":
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    rank, world = dist.get_rank(), dist.get_world_size()
    seeds = list(seeds) if seeds else [cfg.seed]
    records: list[dict] = []
    if overwrite and rank == 0:
        for m in methods:
            p = out_path_for(out, m.label)
            if p is not None and p.exists():
                p.unlink()
    warmed = False
    for seed in seeds:
        scfg = dataclasses.replace(cfg, seed=seed)
        task = prepare_task(scfg, device, rank, world)
        fp = json.dumps(scfg.fingerprint(), sort_keys=True)
        for method in methods:
            path = out_path_for(out, method.label) if rank == 0 else None
            skip = [resume and rank == 0 and (method.label, seed, fp) in completed_runs(path)]
            dist.broadcast_object_list(skip, src=0)
            if skip[0]:
                if rank == 0 and cfg.progress:
                    print(f"train {method.label} seed {seed}: complete in {path}, skipped", file=sys.stderr)
                continue
            if not warmed:
                _warmup(scfg, task, device)
                warmed = True
            recs = _train_one(scfg, method, task, device, path, Path(results) if (results and rank == 0) else None)
            records.extend(recs if rank == 0 else [])
            dist.barrier()
    return records


def _warmup(cfg: TrainConfig, task: _Task, device) -> None:
    """A few steps of a throwaway model through the same hook and collectives, so one-time
    costs (DDP and gloo/NCCL set-up, allocator, kernels) do not land on the first method."""
    if cfg.warmup_steps <= 0:
        return
    model = _build_model(cfg, task, device)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, bucket_cap_mb=cfg.bucket_cap_mb)
    state = TrainHookState(Level("none").build(), TorchComm())
    ddp.register_comm_hook(state, train_hook)
    x, y = task.batch(0)
    for _ in range(cfg.warmup_steps):
        ddp.zero_grad(set_to_none=True)
        _loss(ddp(x), y).backward()
    _evaluate(model, task.x_val[:8], task.y_val[:8], dist.get_rank(), dist.get_world_size(), device)
    state.close()
    del ddp, model, state
    dist.barrier()


def _profile(ddp, model, state: TrainHookState, batch, steps: int, device) -> Optional[dict]:
    """``steps`` profiled iterations on ``batch`` (module doc): mean ms per iteration of each phase."""
    if steps <= 0:
        return None
    buffers = [b.detach().clone() for b in model.buffers()]
    prof = _Profiler(state, device)
    state.profiler = prof
    x, y = batch
    total = 0.0
    try:
        for _ in range(steps):
            ddp.zero_grad(set_to_none=True)
            t0 = prof.now()
            _loss(ddp(x), y).backward()
            total += prof.now() - t0
    finally:
        state.profiler = None
        ddp.zero_grad(set_to_none=True)
        with torch.no_grad():
            for b, saved in zip(model.buffers(), buffers):
                b.copy_(saved)
    ph = prof.phases
    ms = {"compute": total - ph["hook"], "encode": ph["encode"], "comm": ph["comm"], "decode": ph["decode"],
          "iteration": total}
    return {k: 1e3 * v / steps for k, v in ms.items()} | {"iterations": steps}


def _train_one(cfg: TrainConfig, method: Method, task: _Task, device, path, results_path) -> list[dict]:
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(cfg.seed)
    model = _build_model(cfg, task, device)
    numel = _numel(model)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, bucket_cap_mb=cfg.bucket_cap_mb)
    controller = method.controller(**cfg.controller_overrides())
    level = controller.level if controller is not None else method.levels[0]
    state = TrainHookState(level.build(seed=cfg.seed), TorchComm())
    ddp.register_comm_hook(state, train_hook)
    if cfg.optimizer == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)

    spe = task.steps_per_epoch
    total_steps = cfg.steps or cfg.epochs * spe
    round_len = cfg.eval_every or spe
    n_rounds = -(-total_steps // round_len)
    run_id = f"{method.label}-s{cfg.seed}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    prov = provenance(device, backend=dist.get_backend(), world_size=world, device=str(device),
                      device_type=device.type, loadavg_1m=loadavg_1m()) if rank == 0 else {}
    common = {"schema": SCHEMA_VERSION, "kind": RECORD_KIND, "run_id": run_id, "method": method.label,
              "method_spec": method.describe(),
              "controller": controller.describe() if controller is not None else None,
              "dataset": task.summary, "task": task.kind,
              "model": {"arch": cfg.model, "class": type(model).__name__, "numel": numel},
              "world_size": world, "global_batch": world * cfg.batch_size, "steps_per_epoch": spe,
              "total_steps": total_steps, "round_steps": round_len, "seed": cfg.seed,
              "params": cfg.as_dict(), "seeds": {"model": cfg.seed, "data_order": cfg.seed,
                                                  "compressor": cfg.seed, "val_split": cfg.seed},
              "timing": {"method": "cuda_events" if device.type == "cuda" else "perf_counter",
                         "overlap": True, "profile_steps": cfg.profile_steps},
              "network": prov.get("network"), "provenance": prov}
    timer = _IterationTimer(device)
    recs: list[dict] = []
    total_sent = total_received = 0
    total_train_s = 0.0
    step = 0
    for rnd in range(n_rounds):
        n_it = min(round_len, total_steps - step)
        grad_sum = [torch.zeros_like(p) for p in model.parameters()]
        bytes0 = state.bytes_sent
        sums = torch.zeros(3, dtype=torch.float64, device=device)
        model.train()
        timer.mark()
        for _ in range(n_it):
            f = _lr_factor(cfg, step, total_steps)
            for g in opt.param_groups:
                g["lr"] = cfg.lr * f
            xb, yb = task.batch(step)
            opt.zero_grad(set_to_none=True)
            out = ddp(xb)
            loss = _loss(out, yb)
            loss.backward()
            opt.step()
            with torch.no_grad():
                torch._foreach_add_(grad_sum, [p.grad for p in model.parameters()])
                sums[0] += loss.detach().double() * yb.numel()
                sums[1] += (out.argmax(-1) == yb).sum()
                sums[2] += yb.numel()
            timer.mark()
            step += 1
        iter_ms = timer.read()
        train_s = sum(iter_ms) / 1e3
        epoch_bytes = state.bytes_sent - bytes0
        split = _profile(ddp, model, state, (xb, yb), cfg.profile_steps, device)

        t_eval = time.perf_counter()
        model.eval()
        val = _evaluate(model, task.x_val, task.y_val, rank, world, device, task.eval_batch)
        test = (_evaluate(model, task.x_test, task.y_test, rank, world, device, task.eval_batch)
                if task.x_test is not None else val.clone())
        agg = torch.cat([sums, val, test])
        dist.all_reduce(agg)
        grad_norm = torch.sqrt(sum((a.double() ** 2).sum() for a in grad_sum)).reshape(1)
        dist.broadcast(grad_norm, 0)  # identical on every rank already; make the controller's input so
        agg, grad_norm = agg.tolist(), float(grad_norm.item())
        eval_s = time.perf_counter() - t_eval

        sent, received = plan_traffic(level, state.bucket_shapes, world, cfg.seed)
        total_sent += epoch_bytes
        total_received += received * n_it
        total_train_s += train_s
        train_loss, train_acc = agg[0] / agg[2], agg[1] / agg[2]
        val_loss = agg[3] / agg[5] if agg[5] else math.nan
        val_acc = agg[4] / agg[5] if agg[5] else math.nan
        test_loss, test_acc = agg[6] / agg[8], agg[7] / agg[8]
        timing = Timing.from_times(iter_ms, n_warmup=0).as_dict(raw=False)
        final = rnd == n_rounds - 1 or (cfg.target_acc is not None and test_acc >= cfg.target_acc)
        rec = {**common, "epoch": rnd, "step": step, "epoch_frac": step / spe, "level": level.as_dict(),
               "level_index": controller.index if controller is not None else 0,
               "boost": bool(controller.boosting) if controller is not None else False,
               "bits_per_element": 8 * sent / numel,
               "train_loss": train_loss, "train_acc": train_acc, "val_loss": val_loss, "val_acc": val_acc,
               "test_loss": test_loss, "test_acc": test_acc, "grad_norm": grad_norm, "lr": opt.param_groups[0]["lr"],
               "optimizer_state": optimizer_state(opt) if rank == 0 else None,
               "iterations": n_it, "train_s": train_s, "iter_ms": timing, "split_ms": split, "eval_s": eval_s,
               "time_s": total_train_s,  # cumulative training wall time (evaluation and profiling excluded)
               "bytes_sent": epoch_bytes, "bytes_sent_total": total_sent,
               "bytes_planned_per_step": sent, "bytes_received": received * n_it,
               "bytes_received_total": total_received, "bytes_received_per_step": received,
               "buckets": len(state.bucket_shapes), "final": final,
               "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        if rank == 0:
            _append(path, rec)
            _append(results_path, rec)
            recs.append(rec)
            if cfg.progress:  # one line per round on rank 0 (stderr: stdout stays for tables)
                what = (f"val loss {val_loss:.3f}" if task.kind == "lm" else f"test acc {test_acc:.3f}, "
                        f"val acc {val_acc:.3f}")
                print(f"train {method.label} seed {cfg.seed} round {rnd + 1}/{n_rounds} (step {step}): {what}, "
                      f"loss {train_loss:.3f}, {train_s:.2f} s training, {epoch_bytes / 1e6:.3g} MB sent, "
                      f"level {level.as_dict().get('label')}", file=sys.stderr, flush=True)
        if final:
            break
        if controller is not None:
            new = controller.update(EpochMetrics(rnd, train_loss, val_acc, train_acc, grad_norm))
            if new != level:
                _swap_compressor(state, new.build(seed=cfg.seed))
                level = new

    # gloo shutdown quirks (MACHINE-NOTES): drop DDP/model/optimizer references; the full
    # gc.collect() + barrier run once in launch.shutdown() (a collection costs ~0.3 s here)
    state.close()
    del ddp, opt, model, state, grad_sum
    return recs
