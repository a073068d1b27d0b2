"""studykit: a notebook study kit on the utility of gradient compression.

The parts a script uses are importable from the top (``studykit.ddp``, ``studykit.compressors``,
``studykit.models``, ``studykit.comm``); they load on first use, so ``import studykit`` stays light.
``studykit.advise(model, gpus=..., bandwidth_gbps=...)`` answers whether gradient compression pays there.
"""
import importlib

__version__ = "0.1.0"

_LAZY = ("ddp", "compressors", "models", "comm", "measure", "perfmodel", "train")


def advise(model, *, gpus, bandwidth_gbps, calibration=None, batch_size: int | None = None, mode: str = "post", **kw):
    """Which way of synchronizing gradients is fastest for ``model`` (a name, a model spec or a live
    ``torch.nn.Module``) on ``gpus`` GPUs at ``bandwidth_gbps`` Gbit/s (one value or several each; None: the
    calibration's bandwidth)? Returns a :class:`studykit.perfmodel.advise.Advice`: ``advice.verdict(p, bw)``
    in words, ``str(advice)`` what ``python -m studykit advise`` prints. ``calibration``: a path or a
    ``Calibration`` (default: the paper's V100 inputs); ``batch_size``: per worker (default: the batch the
    calibration measured the model at, when it has one, else 64); ``mode``: ``"post"`` or ``"hook"``; ``kw``: the rest of
    :func:`studykit.perfmodel.advise.answer` (``terms``, ``compressors``, ``model_error``, ``t_comp_s``,
    ``compute_speedup``, ...)."""
    from studykit.perfmodel.advise import answer

    return answer(model, gpus=gpus, bandwidth_gbps=bandwidth_gbps, calibration=calibration, batch_size=batch_size,
                  mode=mode, **kw)


def __getattr__(name: str):
    if name in _LAZY:
        return importlib.import_module(f"studykit.{name}")
    raise AttributeError(f"module 'studykit' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_LAZY])
