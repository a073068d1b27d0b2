"""``studykit.advise``: :func:`answer` sets up one call of :func:`~studykit.perfmodel.advise.advise` for a
model name, spec or live ``torch.nn.Module`` as ``python -m studykit advise`` sets it up (calibration,
batch size, terms)."""
from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from studykit.perfmodel.advise.candidates import AdviseError, candidates
from studykit.perfmodel.advise.pricing import advise
from studykit.perfmodel.advise.verdicts import Advice
from studykit.perfmodel.calibration import Calibration


def answer(model, *, gpus, bandwidth_gbps, calibration=None, batch_size: int | None = None, mode: str = "post",
           terms: str = "default", compressors: Sequence[str] | None = None, **kw) -> Advice:
    """``studykit.advise``: which way of synchronizing gradients is fastest for ``model`` on ``gpus`` GPUs at
    ``bandwidth_gbps`` Gbit/s? One call of :func:`advise`, set up as ``python -m studykit advise`` sets it up.

    ``model``: a model name or spec :mod:`studykit.models` knows, or a live ``torch.nn.Module`` (registered
    with ``studykit.models.register`` under its class name); ``gpus`` / ``bandwidth_gbps``: one value or
    several (``bandwidth_gbps=None``: the calibration's); ``calibration``: a :class:`Calibration`, a path to
    one, or None for the paper's V100 inputs; ``terms``: ``"default"``, ``"paper"`` or ``"extended"`` (as
    ``--terms``); ``compressors``: the names to rank (default every registered one); ``kw``: :func:`advise`'s
    keywords (``model_error``, ``t_comp_s``, ``compute_speedup``, ...). ``str(result)`` is what the command
    prints, verdicts first."""
    from studykit.perfmodel.cli import DEFAULT_CALIBRATION, TERMS

    if not isinstance(model, str):
        import torch

        if not isinstance(model, torch.nn.Module):
            raise AdviseError(f"model must be a model name, a model spec or a torch.nn.Module, "
                              f"got {type(model).__name__}")
        from studykit import models

        if not hasattr(models, "register"):
            raise AdviseError("a torch.nn.Module needs studykit.models.register, which this version lacks; "
                              f"pass a model name ({', '.join(models.available())})")
        # the class name and a digest of the parameter shapes: another architecture gets another name, so no
        # cache keyed by the model's name (its shapes, its payloads) can answer for it
        shapes = [tuple(t.shape) for t in model.parameters() if t.requires_grad]
        model = models.register(f"{type(model).__name__}_{hashlib.sha1(repr(shapes).encode()).hexdigest()[:8]}",
                                model)
    if terms not in TERMS:
        raise AdviseError(f"terms must be one of {', '.join(TERMS)}, got {terms!r}")
    if not isinstance(calibration, Calibration):
        where = DEFAULT_CALIBRATION if calibration is None else calibration
        try:
            calibration = Calibration.load(where)
        except (FileNotFoundError, ValueError) as exc:
            raise AdviseError(f"calibration: {exc}") from None
    else:  # built in memory: the checks a file gets when it is loaded (a NaN or a negative T_comp ranks nonsense)
        try:
            calibration.check()
        except ValueError as exc:
            raise AdviseError(f"calibration {calibration.name!r}: {exc}") from None
    if batch_size is None:
        batch_size = calibration.batch_size_of(model)
    gpus = [gpus] if np.ndim(gpus) == 0 else list(gpus)
    bws = None if bandwidth_gbps is None else [bandwidth_gbps] if np.ndim(bandwidth_gbps) == 0 else list(bandwidth_gbps)
    cands = None if compressors is None else candidates(compressors)
    return advise(calibration, model, batch_size, gpus, bws, candidate_list=cands, options=TERMS[terms], mode=mode,
                  **kw)
