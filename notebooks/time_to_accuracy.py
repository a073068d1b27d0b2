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
# # Time to accuracy: static, dynamic and no compression
#
# Two of the seed papers judge compression by what it does to *training*, not to one step:
#
# * **Tirupati et al.** (Tirupati et al.) compare three scenarios on two GPUs: no compression, static 8-bit
#   quantization, and *dynamic* compression, which starts at 4-bit quantization and relaxes to 8, 16 bits
#   and none as a step function of validation accuracy and of the change in training loss crosses
#   thresholds, removing compression for a while when training stalls at one step (Table I: accuracy,
#   training time, data transferred; Figs. 1-3: accuracy and loss per epoch).
# * **Han et al.** (Han et al. 2024) ask for **time to accuracy** (TTA) against an **FP16** baseline, since FP16
#   all-reduce already halves the bytes at no accuracy cost.
#
# This notebook trains (or reads committed runs of) every method with each compressor as a DDP
# communication hook (`studykit.train`), and shows both views. The controller is generic: `dynamic_topk`,
# `dynamic_powersgd` and `accordion` (Agarwal et al. 2021's gradient-norm trigger) use the same machinery.

# %% tags=["parameters"]
source: str = "data"  # "data": read committed runs from data/training/<runs_dir>; "run": train here (CPU, gloo)
runs_dir: str = "cpu"  # folder under data/training/ holding *.jsonl training records (source: data)
methods: list = ["none", "fp16", "quantize8", "dynamic"]  # methods to train (source: run); see `python -m studykit train --list-methods`
dataset: str = "mnist1d"  # mnist1d | digits | synthetic | cifar10 (source: run)
world_size: int = 2  # gloo CPU worker processes (source: run)
epochs: int = 30  # epochs per method, the same for all (source: run)
batch_size: int = 32  # per worker (source: run)
lr: float = 0.05  # SGD learning rate, momentum 0.9 (source: run)
seed: int = 0  # model init, data order, compressor randomness (source: run)
acc_thresholds: list = [0.7, 0.85, 0.92]  # dynamic: validation-accuracy steps (fractions) of Tirupati et al.'s step function
loss_thresholds: list = [0.05, 0.02, 0.01]  # dynamic: mean |change of training loss| per epoch below which compression relaxes
stall_epochs: int = 4  # dynamic: epochs at one step before compression is removed for an epoch
fig_methods: list = ["none", "fp16", "quantize8", "dynamic"]  # methods drawn in the per-epoch figures (tables show all)
target_acc: float = 0.9  # time-to-accuracy target, test accuracy as a fraction
baseline: str = "fp16"  # Han et al.'s baseline method for the TTA speed-up

# %%
import pandas as pd

from studykit import paths
from studykit.plots import train as plots
from studykit.train import TrainConfig, analysis, train

# %%
if source == "run":
    cfg = TrainConfig(dataset=dataset, epochs=epochs, batch_size=batch_size, lr=lr, seed=seed,
                      acc_thresholds=tuple(acc_thresholds), loss_thresholds=tuple(loss_thresholds),
                      stall_epochs=stall_epochs)
    records = train(cfg, methods, world_size=world_size)
elif source == "data":
    records = analysis.load_runs(paths.DATA / "training" / runs_dir)
else:
    raise ValueError(f"source must be 'run' or 'data', got {source!r}")

# %%
df = analysis.latest_runs(analysis.to_frame(records))
dfig = df[df["method"].isin(fig_methods)] if df["method"].isin(fig_methods).any() else df
r0 = records[0]
print(f"{len(df['method'].unique())} methods, {r0['dataset']['dataset']} ({r0['model']['class']}, "
      f"{r0['model']['numel']:,} parameters), {r0['world_size']} workers, {r0['provenance']['backend']}, "
      f"{r0['provenance'].get('gpu') or r0['provenance']['cpu']}")

# %% [markdown]
# ## Table I, analogue
# Final training and test accuracy, training wall time (evaluation excluded) and data put on the wire
# (per worker, and by all workers as the paper's "data transferred"). Bytes are counted in the hook from
# the collectives each compressor issues; they equal `Compressor.plan` × steps (tested).

# %%
table = analysis.summary_table(df)
table.round(2)

# %% [markdown]
# ## Figs. 1-3, analogues: accuracy and loss per epoch
# Tirupati et al.'s scenarios (and the FP16 baseline); `fig_methods` picks others.

# %%
fig, ax = plots.accuracy_curves(dfig, "train")

# %%
fig, ax = plots.accuracy_curves(dfig, "test")

# %%
fig, ax = plots.loss_curves(dfig)

# %% [markdown]
# ## The compression level over epochs
# Bits on the wire per gradient element in each epoch. `quantize` is all-reduce compatible, so the b-bit
# levels of all workers are *summed* on the wire and need headroom: 4-bit levels travel as int8, 8-bit as
# float16 (exact integers up to 2048), 16-bit as int32 (`studykit.compressors.quantization`). The ladder
# 4 → 8 → 16 bits → none therefore moves 8 → 16 → 32 → 32 bits per element (for 2 workers). ▲ marks epochs in which the
# controller removed compression because training stalled at one step.

# %%
fig, ax = plots.bits_over_epochs(df)

# %%
sched = analysis.level_schedule(df)
dyn = [m for m in df["method"].unique() if df[df["method"] == m]["level"].nunique() > 1]
sched[sched["method"].isin(dyn)].pivot(index="epoch", columns="method", values="level")

# %% [markdown]
# ## Time to accuracy against the FP16 baseline (Han et al. 2024)
# Training time until the test accuracy first reaches the target; `speedup_vs_baseline` > 1 means faster
# than FP16. "Not reached" methods never got there within the epochs run.

# %%
tta = analysis.time_to_accuracy(df, target_acc, baseline=baseline)
tta.round(3)

# %%
fig, ax = plots.tta_bars(tta, baseline=baseline)
ax.set_title(f"Time to {100 * target_acc:.0f}% test accuracy");

# %%
fig, ax = plots.accuracy_vs_time(df, target=target_acc)

# %% [markdown]
# ## Bytes sent and where an iteration's time goes
# Per-iteration time split into compute (forward, backward, optimizer), compression (encode, decode,
# error feedback) and communication (inside the collectives, waiting for peers included). On CPU with
# gloo and a model of a few thousand parameters, every collective is latency-bound: fewer bytes barely
# shorten communication, while encoding adds work, the regime in which Agarwal et al. 2022 finds compression rarely pays.

# %%
fig, ax = plots.bytes_bars(table)

# %%
split = analysis.time_split(df)
fig, ax = plots.time_split_bars(split)
split.round(3)

# %% [markdown]
# ## Reading it
# * Compare accuracy at equal epochs (Table I) *and* at equal time (TTA): a method can match accuracy per
#   epoch while losing on time, because encoding costs more than the bytes it saves.
# * Timings from a shared CPU machine are noisy (`provenance.loadavg_1m` in each record says how busy it
#   was); accuracies and bytes are exact and reproducible (fixed seeds, tested).
# * `data/training/README.md` says which command produced the committed runs; `scripts/gpu_train.sh` makes
#   the GPU counterpart (`runs_dir="gpu1"`, `"gpu2"` once committed).
