# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Explorer: when does a compressor beat syncSGD?
#
# Move the sliders: bandwidth, GPUs, compute speed-up, backward time, bucket size, alpha, gamma, the
# compressor and its main parameter (rank / ratio / bits). Left: the iteration-time breakdown (compute,
# exposed communication, encode/decode) of syncSGD (Sec. 4.1) and of the compressor (App. B, its
# communication from its own `plan()`); right: its speed-up over syncSGD vs the number of GPUs.
#
# Under the bars, a table ranks syncSGD, the fp16 baseline and every compressor (its main parameter at three
# values) at the same setting: `python -m studykit advise`'s ranking (`studykit.perfmodel.advise`), with each
# time's interval from the calibration (moved with the T_comp, alpha and gamma sliders), whether it is within
# the model's error of the best, and whether the kit has accuracy evidence for it.
#
# `T_comp` starts at the calibration's backward time for the chosen model and batch; change it after
# changing the model. Encode/decode times missing from the calibration are interpolated in the main
# parameter, or scaled from another model by parameter count (the right panel's title says which).
#
# One call, `studykit.lessons.explore.app`, draws the figure and the table once and puts the sliders over
# them; they redraw both on release (`continuous_update=False`) and need a live kernel. With
# `interactive = False` the figure and table are drawn once, without sliders.

# %% tags=["parameters"]
calibration_path: str = "data/calibrations/paper_v100.json"  # calibration JSON (repo-relative): T_comp, T_encode_decode, alpha, gamma
model: str = "resnet101"  # a name from studykit.models.available() or a model spec (FILE.py:FUNC, torchvision:NAME)
batch_size: int = 64  # per-GPU batch size
compressor: str = "powersgd"  # a compressor with an encode/decode time in the calibration, or none
param_value: float = 4.0  # the compressor's main parameter (rank / ratio / bits)
bandwidth_gbps: float = 10.0  # network bandwidth (Gbit/s)
world_size: int = 64  # number of GPUs
interactive: bool = True  # sliders over the figure and table (they move only with a live kernel); False: drawn once

# %%
from studykit import paths
from studykit.lessons import explore
from studykit.perfmodel import Calibration

cal = Calibration.load(paths.ROOT / calibration_path)
explore.app(cal, model, batch_size, bandwidth_gbps, world_size, compressor, param_value, interactive=interactive)
