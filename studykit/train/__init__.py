"""Training to accuracy with any compressor as a DDP communication hook, static or dynamic.

* :mod:`studykit.train.data`: MNIST-1D (generated), digits, CIFAR-10 (local copy), synthetic
* :mod:`studykit.train.nets`: small models for them
* :mod:`studykit.train.dynamic`: compression ladders, triggers, the pure controller (Tirupati et al.)
* :mod:`studykit.train.methods`: method specs (``none``, ``fp16``, ``quantize8``, ``dynamic``, ...)
* :mod:`studykit.train.loop` / :mod:`studykit.train.launch`: the training loop and its process groups
* :mod:`studykit.train.analysis`: Table I, time to accuracy (figures: :mod:`studykit.plots.train`)
* :mod:`studykit.train.headroom`: bits per element each method puts on the link at larger world sizes

Shell: ``python -m studykit train --help`` (also under ``torchrun``).
"""
from studykit.train.launch import read_records, train
from studykit.train.loop import TrainConfig, run_methods
from studykit.train.methods import PRESETS, Method, parse_method, parse_methods

__all__ = ["TrainConfig", "train", "run_methods", "read_records", "Method", "PRESETS", "parse_method",
           "parse_methods"]
