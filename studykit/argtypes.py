"""Checked ``argparse`` types: every numeric argument names its valid range when refused.

argparse prefixes the message with the argument's name (``argument --epochs: must be an
integer >= 1, got '0'``), exits with status 2 and prints no traceback.
"""
from __future__ import annotations

import argparse
import math

from studykit import models

__all__ = ["positive_int", "nonneg_int", "positive_float", "nonneg_float", "fraction", "int_range",
           "float_range", "model_spec", "MODEL_HELP"]


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


def _float(text: str, what: str) -> float:
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be {what} (finite), got {text!r}")
    return v


def int_range(lo: int | None = None, hi: int | None = None):
    """An ``argparse`` type: an integer in ``[lo, hi]`` (either end open when None)."""
    what = ("an integer" + (f" >= {lo}" if lo is not None and hi is None else "")
            + (f" <= {hi}" if hi is not None and lo is None else "")
            + (f" in [{lo}, {hi}]" if lo is not None and hi is not None else ""))

    def check(text: str) -> int:
        v = _int(text, what)
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return v

    check.__name__ = "int"
    return check


def float_range(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
                hi_open: bool = False):
    """An ``argparse`` type: a finite number between ``lo`` and ``hi`` (open ends when ``*_open``)."""
    left = "" if lo is None else f"{'>' if lo_open else '>='} {lo:g}"
    right = "" if hi is None else f"{'<' if hi_open else '<='} {hi:g}"
    what = "a number" + (f" {left}" if left else "") + (" and" if left and right else "") + (f" {right}" if right else "")

    def check(text: str) -> float:
        v = _float(text, what)
        if lo is not None and (v <= lo if lo_open else v < lo):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        if hi is not None and (v >= hi if hi_open else v > hi):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return v

    check.__name__ = "float"
    return check


positive_int = int_range(1)
nonneg_int = int_range(0)
positive_float = float_range(0, lo_open=True)
nonneg_float = float_range(0)
#: a fraction in (0, 1] (accuracies, ratios)
fraction = float_range(0, 1, lo_open=True)


#: ``--model`` help: the forms :func:`model_spec` takes
MODEL_HELP = (f"a built-in model ({', '.join(models.available())}), FILE.py:FUNC (FUNC() returns the nn.Module; "
              "the file may define example_batch and loss: see studykit.models), torchvision:NAME or "
              "transformers:MODEL_TYPE[:k=v,...]")


def model_spec(text: str) -> str:
    """An ``argparse`` type: a model name or spec accepted by :func:`studykit.models.check`."""
    try:
        return models.check(text)
    except (ValueError, ImportError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
