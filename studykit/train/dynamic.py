"""Dynamic gradient compression: choose the compression level epoch by epoch.

Tirupati et al., "Distributed Model Training With Dynamic Gradient Compression" (Sec. III-D,
"Proposed Approach"; Sec. IV-B, scenario 3): start with aggressive compression (4-bit
quantization), relax it "based on predefined thresholds" of a step function of the
*validation accuracy* and the *difference in cross-entropy training loss*, "ranging from 4-bit
to 16-bit quantization", and "temporarily remove compression if the model remains trapped at
the same step of the compression step function for an extended period across multiple epochs".
Each rung is the ``quantize`` compressor at that bit width, which puts that many bits per
element on the wire (see :class:`studykit.compressors.quantization.Quantize`).

Here that controller is generic:

* a **ladder** of :class:`Level` (compressor name + parameters), most compressed first:
  bits for ``quantize`` (4 -> 8 -> 16, the paper's), density ``ratio`` for ``topk``, ``rank``
  for ``powersgd`` (:data:`LADDERS`), or any list you write. No ladder ends in "no
  compression" unless asked: ``FAMILY+none`` (e.g. ``quantize+none``) appends it;
* pluggable **triggers**, each proposing a ladder index from the epoch metrics seen so far:
  :class:`AccuracyLossStep` (Tirupati et al.'s step function) and :class:`GradNormChange`
  (Accordion, Agarwal et al. 2021: low compression in "critical regimes", detected by a
  large relative change of the accumulated gradient's norm); several triggers combine by
  taking the least compression any of them asks for;
* a **controller** (:class:`DynamicController`), pure: feed it one :class:`EpochMetrics`
  per epoch, it returns the level for the next epoch. No clocks, no randomness, no I/O,
  so a schedule can be replayed from recorded metrics (:func:`schedule`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Protocol, Sequence, runtime_checkable

from studykit.compressors.base import CompressorError
from studykit.compressors.registry import setting_label, split_spec

__all__ = ["Level", "UNCOMPRESSED", "LADDERS", "ladder", "EpochMetrics", "Trigger", "AccuracyLossStep",
           "GradNormChange", "TRIGGERS", "make_trigger", "DynamicController", "schedule"]


@dataclass(frozen=True)
class Level:
    """One rung of a ladder: a compressor name and its parameters (hashable)."""

    compressor: str
    params: tuple[tuple[str, object], ...] = ()

    @classmethod
    def make(cls, compressor: str, **params) -> "Level":
        return cls(compressor, tuple(sorted(params.items())))

    @classmethod
    def parse(cls, spec: "str | Level | tuple") -> "Level":
        """``"quantize:bits=4"`` / ``("quantize", {"bits": 4})`` / a Level -> Level (names not checked)."""
        if isinstance(spec, Level):
            return spec
        if isinstance(spec, tuple):
            name, params = spec
            return cls.make(name, **dict(params))
        try:
            name, params = split_spec(spec)
        except CompressorError as exc:
            raise ValueError(f"level spec {spec!r}: {exc}") from None
        return cls.make(name, **params)

    @property
    def kwargs(self) -> dict:
        return dict(self.params)

    @property
    def label(self) -> str:
        """``quantize:bits=4``; ``none`` for the uncompressed level."""
        return setting_label(self.compressor, dict(self.params), "spec")

    def build(self, **extra):
        """A fresh compressor for this level (``extra``: e.g. ``seed``)."""
        from studykit.compressors import get

        return get(self.compressor, **self.kwargs, **extra)

    def as_dict(self) -> dict:
        return {"compressor": self.compressor, "params": self.kwargs, "label": self.label}


UNCOMPRESSED = Level("none")

_COMPRESSED_LADDERS: dict[str, tuple[Level, ...]] = {
    "quantize": (Level.make("quantize", bits=4), Level.make("quantize", bits=8), Level.make("quantize", bits=16)),
    "topk": (Level.make("topk", ratio=0.01), Level.make("topk", ratio=0.05), Level.make("topk", ratio=0.25)),
    "powersgd": (Level.make("powersgd", rank=1), Level.make("powersgd", rank=2), Level.make("powersgd", rank=4)),
}
#: the ladders the notebooks use, most compressed first (Tirupati et al.'s is ``quantize``: 4 -> 8 -> 16
#: bits); ``FAMILY+none`` is the same ladder with "no compression" as an explicit last rung
LADDERS: dict[str, tuple[Level, ...]] = {
    **_COMPRESSED_LADDERS, **{f"{k}+none": v + (UNCOMPRESSED,) for k, v in _COMPRESSED_LADDERS.items()}}


def ladder(spec: "str | Sequence") -> tuple[Level, ...]:
    """A family name from :data:`LADDERS`, a ``;``-separated string of level specs
    (``"quantize:bits=4;quantize:bits=8;none"``) or a sequence of specs -> tuple of Level."""
    if isinstance(spec, str):
        if spec in LADDERS:
            return LADDERS[spec]
        items: Sequence = [s for s in spec.split(";") if s.strip()]
    else:
        items = spec
    levels = tuple(Level.parse(s) for s in items)
    if not levels:
        raise ValueError(f"empty ladder {spec!r}; families: {', '.join(LADDERS)}")
    return levels


@dataclass(frozen=True)
class EpochMetrics:
    """What a trigger may look at after one epoch (accuracies are fractions in [0, 1])."""

    epoch: int
    train_loss: float
    val_acc: float
    train_acc: float = math.nan
    grad_norm: float = math.nan  # norm of the gradient accumulated over the epoch (Accordion)


@runtime_checkable
class Trigger(Protocol):
    """Proposes a ladder index (0 = most compressed) from the metrics of all epochs so far."""

    name: str
    #: whether its proposals may only relax compression (Tirupati et al.) or also tighten it (Accordion)
    monotone: bool

    def initial(self, n_levels: int) -> int: ...

    def propose(self, history: Sequence[EpochMetrics], n_levels: int, current: int) -> int: ...


def _step(value: float, thresholds: Sequence[float], *, below: bool = False) -> int:
    """Number of thresholds ``value`` has reached (>=), or, with ``below``, is under (<)."""
    if math.isnan(value):
        return 0
    return sum((value < t) if below else (value >= t) for t in thresholds)


@dataclass(frozen=True)
class AccuracyLossStep:
    """Tirupati et al.'s step function: the ladder index is the larger of

    * the number of ``acc_thresholds`` the validation accuracy has reached, and
    * the number of ``loss_thresholds`` the change of training loss is below (a flattening
      loss relaxes compression). The change is ``|loss[e] - loss[e - w]| / w`` with
      ``w = loss_window``: ``1`` is the plain epoch-to-epoch difference; the default 3
      averages it over three epochs, since one epoch's difference is noisy (a single flat
      epoch would otherwise remove compression for good under the ratchet),

    capped at the last level. With the controller's ratchet the level never tightens again.
    Thresholds are the algorithm's tuning parameters (the paper does not publish its own);
    the defaults suit MNIST-1D (``data/training/README.md``).
    """

    acc_thresholds: tuple[float, ...] = (0.7, 0.85, 0.92)
    loss_thresholds: tuple[float, ...] = (0.05, 0.02, 0.01)
    loss_window: int = 3
    name: str = "accuracy_loss_step"
    monotone: bool = True

    def __post_init__(self):
        for nm in ("acc_thresholds", "loss_thresholds"):
            object.__setattr__(self, nm, tuple(float(t) for t in getattr(self, nm)))
        if self.loss_window < 1:
            raise ValueError(f"AccuracyLossStep: loss_window must be >= 1, got {self.loss_window}")

    def initial(self, n_levels: int) -> int:
        return 0

    def propose(self, history, n_levels, current):
        m = history[-1]
        s = _step(m.val_acc, self.acc_thresholds)
        w = self.loss_window
        if len(history) > w and self.loss_thresholds:
            change = abs(m.train_loss - history[-1 - w].train_loss) / w
            s = max(s, _step(change, self.loss_thresholds, below=True))
        return min(s, n_levels - 1)


@dataclass(frozen=True)
class GradNormChange:
    """Accordion (Agarwal et al., MLSys 2021, Alg. 1): every ``interval`` epochs compare the
    norm of the gradient accumulated over the epoch with the one ``interval`` epochs earlier;
    a relative change ``|old - new| / old >= eta`` marks a critical regime, which gets the
    ``low`` compression level (default: the least compressed rung), otherwise ``high``
    (default: the most compressed). The first ``interval`` epochs count as critical."""

    eta: float = 0.5
    interval: int = 1
    low: int = -1
    high: int = 0
    name: str = "grad_norm_change"
    monotone: bool = False

    def __post_init__(self):
        if self.interval < 1:
            raise ValueError(f"GradNormChange: interval must be >= 1, got {self.interval}")
        if self.eta <= 0:
            raise ValueError(f"GradNormChange: eta must be > 0, got {self.eta}")

    def initial(self, n_levels: int) -> int:
        return self.low % n_levels

    def propose(self, history, n_levels, current):
        if len(history) % self.interval != 0:
            return current  # decide only at interval boundaries, hold in between
        if len(history) <= self.interval:
            return self.low % n_levels
        old, new = history[-1 - self.interval].grad_norm, history[-1].grad_norm
        if math.isnan(old) or math.isnan(new):
            raise ValueError("GradNormChange needs EpochMetrics.grad_norm (got NaN)")
        critical = old == 0 or abs(old - new) / old >= self.eta
        return (self.low if critical else self.high) % n_levels


TRIGGERS = {"step": AccuracyLossStep, "accordion": GradNormChange}


def make_trigger(name: str, **params) -> Trigger:
    """``"step"`` -> :class:`AccuracyLossStep`, ``"accordion"`` -> :class:`GradNormChange`."""
    if name not in TRIGGERS:
        raise ValueError(f"unknown trigger {name!r}; available: {', '.join(TRIGGERS)}")
    return TRIGGERS[name](**params)


@dataclass(frozen=True)
class _State:
    step: int             # ladder index the triggers settled on
    epochs_at_step: int   # consecutive (non-boost) epochs trained at ``step`` (stall detection)
    boost_left: int       # epochs of temporary uncompressed training still to run
    history: tuple[EpochMetrics, ...] = field(default=())


class DynamicController:
    """Chooses the compression level per epoch; see the module docstring.

    ``stall_epochs``: after this many consecutive epochs at one step, train ``boost_epochs``
    epochs with ``boost_level`` (uncompressed), then return to the step; ``None`` disables it.
    This is Tirupati et al.'s release (Sec. III-D): compression is removed *temporarily* when
    the model is "trapped at the same step of the compression step function", i.e. at a step
    that has a next step to reach. The last rung (16 bits on their ladder) is where the
    function ends, not a trap, so it never triggers a release, nor does a rung that is
    already the boost level. ``monotone`` (default: all triggers monotone) ratchets the
    step so compression only ever relaxes.
    """

    def __init__(self, levels: "str | Sequence", triggers: "Trigger | Sequence[Trigger]" = (), *,
                 monotone: Optional[bool] = None, stall_epochs: Optional[int] = None, boost_epochs: int = 1,
                 boost_level: "Level | str" = UNCOMPRESSED):
        self.levels = ladder(levels)
        if isinstance(triggers, (AccuracyLossStep, GradNormChange)) or not isinstance(triggers, Sequence):
            triggers = [triggers]
        self.triggers = list(triggers) or [AccuracyLossStep()]
        self.monotone = all(t.monotone for t in self.triggers) if monotone is None else bool(monotone)
        if stall_epochs is not None and stall_epochs < 1:
            raise ValueError(f"stall_epochs must be >= 1 or None, got {stall_epochs}")
        if boost_epochs < 1:
            raise ValueError(f"boost_epochs must be >= 1, got {boost_epochs}")
        self.stall_epochs = stall_epochs
        self.boost_epochs = int(boost_epochs)
        self.boost_level = Level.parse(boost_level)
        n = len(self.levels)
        self.state = _State(step=max(t.initial(n) for t in self.triggers), epochs_at_step=0, boost_left=0)

    # ------------------------------------------------------------------ reading
    @property
    def boosting(self) -> bool:
        """Whether the current epoch runs with compression temporarily removed."""
        return self.state.boost_left > 0

    @property
    def index(self) -> int:
        """Ladder index of the current step (also while boosting)."""
        return self.state.step

    @property
    def level(self) -> Level:
        """The level to train the current epoch with."""
        return self.boost_level if self.boosting else self.levels[self.state.step]

    def describe(self) -> dict:
        """Configuration, for run records."""
        return {"ladder": [lv.label for lv in self.levels],
                "triggers": [{"name": t.name, **{k: v for k, v in vars(t).items() if k not in ("name",)}}
                             for t in self.triggers],
                "monotone": self.monotone, "stall_epochs": self.stall_epochs, "boost_epochs": self.boost_epochs,
                "boost_level": self.boost_level.label}

    # ------------------------------------------------------------------ update
    def update(self, metrics: EpochMetrics) -> Level:
        """Record the metrics of the epoch just trained; return the level for the next epoch."""
        self.state = _next_state(self, self.state, metrics)
        return self.level


def _next_state(ctl: DynamicController, s: _State, m: EpochMetrics) -> _State:
    history = s.history + (m,)
    n = len(ctl.levels)
    target = max(t.propose(history, n, s.step) for t in ctl.triggers)
    step = max(s.step, target) if ctl.monotone else target
    if s.boost_left > 0:  # a boost epoch just ran: count it down; it does not count as time at the step
        return _State(step=step, epochs_at_step=0, boost_left=s.boost_left - 1, history=history)
    # epochs trained at ``step`` so far (the one just trained counts if the step did not move)
    at_step = s.epochs_at_step + 1 if step == s.step else 0
    boost_left = 0
    trapped = step < n - 1 and ctl.levels[step] != ctl.boost_level  # a step with a next step to reach
    if ctl.stall_epochs is not None and at_step >= ctl.stall_epochs and trapped:
        boost_left, at_step = ctl.boost_epochs, 0  # stuck at this step: remove compression for a while
    return _State(step=step, epochs_at_step=at_step, boost_left=boost_left, history=history)


def schedule(controller: DynamicController, metrics: Sequence[EpochMetrics]) -> list[Level]:
    """Levels used for epochs ``0 .. len(metrics)``: the initial one, then one per update."""
    out = [controller.level]
    for m in metrics:
        out.append(controller.update(m))
    return out

