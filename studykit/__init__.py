"""studykit: a notebook study kit on the utility of gradient compression.

The parts a script uses are importable from the top (``studykit.ddp``, ``studykit.compressors``,
``studykit.models``, ``studykit.comm``); they load on first use, so ``import studykit`` stays light.
"""
import importlib

__version__ = "0.1.0"

_LAZY = ("ddp", "compressors", "models", "comm", "measure", "perfmodel", "train")


def __getattr__(name: str):
    if name in _LAZY:
        return importlib.import_module(f"studykit.{name}")
    raise AttributeError(f"module 'studykit' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])
