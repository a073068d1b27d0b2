"""Training methods: a static compressor, or a ladder of levels driven by a controller.

Spec strings (CLI ``--methods``, notebook parameters):

* a preset from :data:`PRESETS`: ``none``, ``fp16``, ``quantize8``, ``quantize4``, ``topk``,
  ``powersgd``, ``dynamic`` (Tirupati et al.: quantize 4 -> 8 -> 16 bits, step trigger),
  ``dynamic_topk``, ``dynamic_powersgd``, ``accordion`` (PowerSGD rank 1 <-> 4, gradient-norm trigger);
* ``dynamic:FAMILY`` / ``accordion:FAMILY`` for a ladder family from
  :data:`studykit.train.dynamic.LADDERS`;
* any compressor spec ``name:key=value,key=value`` as every other command writes it (``;`` is accepted
  too), e.g. ``topk:ratio=0.05``.

In one string of several specs, a comma separates two methods unless ``key=`` follows it.

Error feedback follows each compressor's default in :func:`studykit.compressors.get`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from studykit.train.dynamic import LADDERS, DynamicController, Level, ladder, make_trigger

__all__ = ["Method", "PRESETS", "parse_method", "parse_methods"]


@dataclass(frozen=True)
class Method:
    """A static compressor (``levels`` of length 1, no trigger) or a dynamic schedule."""

    label: str
    levels: tuple[Level, ...]
    trigger: Optional[str] = None          # "step" | "accordion" | None (static)
    trigger_params: dict = field(default_factory=dict)
    stall_epochs: Optional[int] = None
    boost_epochs: int = 1

    @property
    def dynamic(self) -> bool:
        return self.trigger is not None

    def controller(self, **overrides) -> Optional[DynamicController]:
        """A fresh controller (``None`` for static methods); ``overrides`` replace trigger
        parameters (``acc_thresholds``, ``loss_thresholds``, ``eta``, ``interval``, ...) and
        ``stall_epochs`` / ``boost_epochs``."""
        if not self.dynamic:
            return None
        tp = dict(self.trigger_params)
        stall = overrides.pop("stall_epochs", self.stall_epochs)
        boost = overrides.pop("boost_epochs", self.boost_epochs)
        known = _TRIGGER_KEYS[self.trigger]
        tp.update({k: v for k, v in overrides.items() if k in known and v is not None})
        return DynamicController(self.levels, make_trigger(self.trigger, **tp),
                                 stall_epochs=stall, boost_epochs=boost)

    def describe(self) -> dict:
        return {"label": self.label, "levels": [lv.label for lv in self.levels], "trigger": self.trigger,
                "trigger_params": self.trigger_params, "stall_epochs": self.stall_epochs,
                "boost_epochs": self.boost_epochs}


_TRIGGER_KEYS = {"step": {"acc_thresholds", "loss_thresholds", "loss_window"}, "accordion": {"eta", "interval", "low", "high"}}


def _static(label: str, spec: str) -> Method:
    return Method(label, (Level.parse(spec),))


def _dynamic(label: str, family: str) -> Method:
    return Method(label, ladder(family), "step", {}, stall_epochs=4, boost_epochs=1)


def _accordion(label: str, family: str) -> Method:
    rungs = ladder(family)
    # two rungs as in Accordion: the most compressed and the least compressed *compressed* one
    compressed = [lv for lv in rungs if lv.compressor != "none"] or list(rungs)
    return Method(label, (compressed[0], compressed[-1]), "accordion", {"eta": 0.5, "interval": 1})


PRESETS: dict[str, Method] = {
    "none": _static("none", "none"),
    "fp16": _static("fp16", "fp16"),
    "quantize8": _static("quantize8", "quantize:bits=8"),
    "quantize4": _static("quantize4", "quantize:bits=4"),
    "topk": _static("topk", "topk:ratio=0.01"),
    "powersgd": _static("powersgd", "powersgd:rank=2"),
    "dynamic": _dynamic("dynamic", "quantize"),
    "dynamic_topk": _dynamic("dynamic_topk", "topk"),
    "dynamic_powersgd": _dynamic("dynamic_powersgd", "powersgd"),
    "accordion": _accordion("accordion", "powersgd"),
}


def parse_method(spec: "str | Method") -> Method:
    """A spec string (see the module docstring) -> :class:`Method`."""
    if isinstance(spec, Method):
        return spec
    spec = spec.strip()
    if spec in PRESETS:
        return PRESETS[spec]
    head, _, rest = spec.partition(":")
    if head in ("dynamic", "accordion"):
        if rest not in LADDERS:
            raise ValueError(f"method {spec!r}: unknown ladder family {rest!r}; families: {', '.join(LADDERS)}")
        return (_dynamic if head == "dynamic" else _accordion)(spec, rest)
    level = Level.parse(head + (":" + rest.replace(";", ",") if rest else ""))
    from studykit.compressors import available

    if level.compressor not in available():
        raise ValueError(f"method {spec!r}: unknown compressor {level.compressor!r} and not a preset; "
                         f"presets: {', '.join(PRESETS)}; compressors: {', '.join(available())}")
    return Method(spec, (level,))


def parse_methods(specs) -> list[Method]:
    """A list of specs, or one string of specs separated by whitespace or by commas (a comma followed by
    ``key=`` continues the spec before it: ``"none,topk:ratio=0.01,ef=0"`` is two methods)."""
    if isinstance(specs, str):
        specs = [s for s in re.split(r"\s+|,(?!\s*\w+=)", specs) if s]
    methods = [parse_method(s) for s in specs]
    labels = [m.label for m in methods]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise ValueError(f"methods listed twice: {dup}")
    return methods
