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
# Two of the kit's papers judge compression by what it does to *training*, not to one step:
#
# * **Tirupati et al.** (*Distributed Model Training With Dynamic Gradient Compression*) compare three
#   scenarios on two GPUs: no compression, static 8-bit quantization, and *dynamic* compression, which starts
#   at 4-bit quantization and relaxes to 8, 16 bits and none as a step function of validation accuracy and of
#   the change in training loss crosses thresholds, removing compression for a while when training stalls at
#   one step (Table I: accuracy, training time, data transferred; Figs. 1-3: accuracy and loss per epoch).
# * **Han et al. 2024** (https://arxiv.org/abs/2407.01378) ask for **time to accuracy** (TTA) against an
#   **FP16** baseline, since FP16 all-reduce already halves the bytes at no accuracy cost.
#
# This notebook trains (or reads committed runs of) every method with each compressor as an overlapped DDP
# communication hook (`studykit.train`). Iterations are timed whole, so syncSGD and FP16 keep the overlap
# with the backward pass that Agarwal et al. 2022 (https://arxiv.org/abs/2103.00543, Sec. 4.1) credit them
# with; the compute / encode / communicate / decode split comes from separate profiled iterations. With
# several seeds per method, tables give the median and the min-max over seeds, figures one line per run.
#
# The real workload is a GPT-2-shaped byte-level language model on the Python standard library's source
# (`dataset="text"`, on every machine, no download), run on two H200s over a link shaped to 10 and to
# 2.5 Gbit/s by `scripts/gpu_tta.sh` (committed in `data/training/tta_gpu2/`, read through `gpu_runs`, last
# section); the smoke parameters train its tiny variant on CPU and read those committed GPU records.

# %% tags=["parameters"]
source: str = "data"  # "data": read committed runs from data/training/<runs_dir>; "run": train here (CPU, gloo)
runs_dir: str = "cpu"  # folder under data/training/ holding *.jsonl training records (source: data)
methods: list = ["none", "fp16", "quantize8", "dynamic"]  # methods to train (source: run); see `python -m studykit train --list-methods`
dataset: str = "mnist1d"  # mnist1d | digits | synthetic | cifar10 | text (the stdlib as bytes) (source: run)
model: str = "auto"  # auto | cnn1d | mlp | resnetish | gpt_tiny | gpt_mini | gpt2_small (source: run)
world_size: int = 2  # gloo CPU worker processes (source: run)
epochs: int = 30  # epochs per method, the same for all (source: run; ignored when steps > 0)
steps: int = 0  # total iterations per run, 0: epochs x steps per epoch (source: run)
eval_every: int = 0  # iterations per round (one record, evaluation, controller decision); 0: an epoch (source: run)
batch_size: int = 32  # per worker (source: run)
seq_len: int = 128  # text: tokens per training window (source: run)
limit_train: int = 0  # keep the first N training examples (text: bytes); 0: all (source: run)
limit_test: int = 0  # keep the first N test examples (text: validation bytes); 0: all (source: run)
optimizer: str = "sgd"  # sgd (momentum 0.9) | adamw (source: run)
lr: float = 0.05  # learning rate (source: run)
seeds: list = [0]  # every method trains once per seed (source: run)
acc_thresholds: list = [0.7, 0.85, 0.92]  # dynamic: validation-accuracy steps (fractions) of Tirupati et al.'s step function
loss_thresholds: list = [0.05, 0.02, 0.01]  # dynamic: mean |change of training loss| per round below which compression relaxes
stall_epochs: int = 4  # dynamic: rounds at one step before compression is removed for a round
fig_methods: list = ["none", "fp16", "quantize8", "dynamic"]  # methods drawn in the line figures: at most 6 (tables and bars show all)
target_metric: str = "test_acc"  # test_acc | val_acc | val_loss | test_loss: what the target is set on
target: float = 0.9  # time-to-target threshold on target_metric (accuracies as fractions, losses in nats per prediction: per byte on text)
baseline: str = "fp16"  # Han et al.'s baseline method for the speed-up
gpu_runs: list = ["tta_gpu2/tta_10g", "tta_gpu2/tta_2.5g"]  # folders under data/training/ of GPU runs of one workload, one per emulated rate (last section)
gpu_target: float = -1.0  # gpu_runs: target validation loss (nats per byte); negative: the baseline's worst final loss
tuned_runs: str = "tta_tuned"  # folder under data/training/ of a tuned campaign (sweep/, seeds/, rates/); "" skips that section
interval: float = 0.9  # gpu_runs: confidence level of the intervals over seeds (Student t; 0.9 is 90 %)
headroom_world_sizes: list = [2, 64, 256]  # GPU counts at which the bits on the link are stated (integer sums need headroom)

# %%
from studykit import paths
from studykit.plots import train as plots
from studykit.train import TrainConfig, analysis, headroom, train

# %%
if source == "run":
    cfg = TrainConfig(dataset=dataset, model=model, epochs=epochs, steps=steps or None, eval_every=eval_every or None,
                      batch_size=batch_size, seq_len=seq_len, limit_train=limit_train or None,
                      limit_test=limit_test or None, optimizer=optimizer, lr=lr, acc_thresholds=tuple(acc_thresholds),
                      loss_thresholds=tuple(loss_thresholds), stall_epochs=stall_epochs)
    records = train(cfg, methods, world_size=world_size, seeds=seeds)
elif source == "data":
    records = analysis.load_runs(paths.DATA / "training" / runs_dir)
else:
    raise ValueError(f"source must be 'run' or 'data', got {source!r}")

# %%
df = analysis.latest_runs(analysis.to_frame(records))
dfig = df[df["method"].isin(fig_methods)] if df["method"].isin(fig_methods).any() else df
r0 = records[0]
print(f"{df['method'].nunique()} methods x {df.groupby('method')['seed'].nunique().min()}+ seeds, "
      f"{r0['dataset']['dataset']} ({r0['model']['class']}, {r0['model']['numel']:,} parameters), "
      f"{r0['world_size']} workers, {r0['provenance']['backend']}, "
      f"{r0['provenance'].get('gpu') or r0['provenance']['cpu']}, network {r0.get('network') or 'not emulated'}")

# %% [markdown]
# ## Han et al.'s table: time to the target against FP16
# Per method over its seeds: runs that reached the target, the training time to it (median, min, max; s),
# the speed-up over the baseline (its median TTA over the method's, > 1: faster; interval from the extreme
# pairs), iterations and bytes received per worker to the target (MB; for all-gather methods `p - 1` shards),
# the final value, and the iteration: timed (`iteration_ms`, overlapped) and the profiled split (ms).

# %%
table = analysis.han_table(df, target_metric, target, baseline)
table.round(3)

# %%
fig, ax = plots.tta_bars(table, baseline=baseline, what=f"{target_metric} {target:g}")

# %% [markdown]
# ## Bits on the link beyond two workers
# Every run here has two workers. `quantize` (static 8-bit, and every rung of the dynamic ladder) is all-reduce
# compatible: at `p = 2` it gathers the packed b-bit levels, at larger `p` it sums them in integers, and each
# field then needs `ceil(log2 p)` bits of headroom so that the sum of `p` workers fits. The bits per element
# one worker puts on the link, from each compressor's `plan()` (`studykit.train.headroom`), at the GPU counts of
# `headroom_world_sizes`: where a quantized method sends as many bits as fp16 (or fp32) at 64 or 256 GPUs, its
# gain over fp16 at `p = 2` does not carry to data-center scale. The sections below repeat these lines
# wherever quantization or dynamic results appear.

# %%
link = headroom.link_bits(df["method"].unique(), headroom_world_sizes, numel=r0["model"]["numel"])
for line in headroom.summary(link):
    print(line)
headroom.integer_sums(link).round(1)

# %%
fig, ax = plots.metric_vs_time(dfig, target_metric, target)

# %% [markdown]
# ## Where an iteration's time goes, and the bytes
# Bars stack the profiled phases (blocking: what the iteration costs without overlap); the black mark is
# the timed iteration (overlapped). syncSGD and FP16 hide much of their communication under the backward
# pass; compressors that run after it expose theirs (Agarwal et al. 2022, Takeaway 1). The timed iteration
# also holds the optimizer step and the batch's preparation, which the profiled phases leave out: where that
# work is larger than what overlap hides (a small model on CPU), the mark sits *above* its bar. On CPU with
# gloo and a small model every collective is latency-bound, the regime in which compression rarely pays.

# %%
split = analysis.time_split(df)
fig, ax = plots.time_split_bars(split)
split.round(3)

# %%
summary = analysis.summary_table(df)
fig, ax = plots.bytes_bars(summary)

# %% [markdown]
# ## Table I and Figs. 1-3 of Tirupati et al., analogue
# Final training and test accuracy, training wall time and data put on the wire (per worker, and by all
# workers as the paper's "data transferred"), at the runs' two workers; the curves per round (one line per
# method: the first seed). The quantized methods' bits per element at more workers are printed below the table.

# %%
print("\n".join(headroom.summary(link)))
summary.round(2)

# %%
first = dfig[dfig["seed"] == dfig["seed"].min()]
fig, ax = plots.accuracy_curves(first, "test")

# %%
fig, ax = plots.loss_curves(first)

# %% [markdown]
# ## When the compression level changes
# Bits on the wire per gradient element against the training iteration: a level change is drawn at the
# iteration it took effect (after the round whose metrics triggered it), one line per run. These are the runs'
# two workers, where `quantize` gathers its packed b-bit levels; at more workers it sums them in integers and
# each rung needs headroom (`studykit.compressors.quantization`; the lines printed below). ▲ marks rounds in
# which the controller removed compression because training stalled at one step.

# %%
print("\n".join(headroom.summary(link)))
fig, ax = plots.bits_over_epochs(df)

# %%
analysis.level_changes(df)

# %% [markdown]
# ## The real workload on two GPUs: a language model at two bandwidths
# `gpu_runs` (full and smoke profiles: `data/training/tta_gpu2/`, see its README for the commands and caveats):
# `gpt_mini` (GPT-2 small's architecture at 6 layers x 256 wide, a 19.5 MB gradient) on the standard
# library's source, 2 ranks on one H200 each, NCCL over a link shaped to each rate, six methods x 3 seeds x
# 300 iterations. One target for both rates (by default the highest final validation loss of any fp16 run, so
# every fp16 run reaches it); times to it are interpolated between evaluations; means over seeds with Student-t
# intervals (times: geometric means over the runs that reached the target; speed-ups paired by seed).
# What the sentences below print, read from the records:
#
# * **At 2.5 Gbit/s communication dominates the uncompressed iteration**: syncSGD (`none`) and fp16 spend most
#   of a profiled iteration communicating, and every compressor shortens the iteration, TopK and PowerSGD most.
# * **A shorter iteration is not an earlier target.** TopK (1 %, error feedback) has the shortest iterations but
#   learns too slowly per iteration to reach the target in 300 iterations at either rate; PowerSGD rank 4 and
#   static 8-bit reach it in some seeds, not all.
# * **`dynamic` reaches the target in every seed and has the shortest mean time to it at both rates, with
#   fewer iterations as well as shorter ones**: its loss per iteration is lower than uncompressed training's at
#   this one learning rate, which is too high for `none` and `fp16`. The next section compares every method at
#   its own best rate, and there most of that lead goes.
# * Three seeds make wide intervals: a speed-up interval that spans 1 is no detectable difference from fp16.
#   300 iterations are a quarter of one pass over the data: early training, not convergence.
# * Two GPUs only: static 8-bit and `dynamic` gather b-bit levels here; at 64 and 256 GPUs their integer sums
#   need headroom, and the bits per element printed last say how many each rung then sends next to fp16's.

# %%
gpu = analysis.load_rates([paths.DATA / "training" / folder for folder in gpu_runs])
gpu_target_loss, gpu_tables = analysis.rate_tables(gpu, "val_loss", gpu_target, baseline, interval) if gpu else (None, {})
for line in analysis.rate_findings(gpu_tables, baseline):
    print(line)
gpu_methods = sorted({m for frame in gpu.values() for m in frame["method"].unique()})
for line in headroom.summary(headroom.link_bits(gpu_methods, headroom_world_sizes)) if gpu else []:
    print(line)

# %%
for rate, t in gpu_tables.items():
    print(f"{rate}: time to validation loss {gpu_target_loss:.4f} nats per byte, {100 * interval:g} % intervals")
    display(t.round(3))  # noqa: F821 - IPython's display

# %%
if gpu:
    bands = {rate: analysis.curve_band(frame, "val_loss", interval) for rate, frame in gpu.items()}
    fig, axes = plots.metric_bands_by_rate(bands, "val_loss", gpu_target_loss, interval)

# %% [markdown]
# ## Against tuned baselines: each method at its own best learning rate
# `tuned_runs` (`data/training/tta_tuned/`, made by `scripts/gpu_tta_tuned.sh`; its README has the design and the
# reading): the same model and data, every method at its best of three peak learning rates chosen on a
# **validation** split, 3 seeds at that rate, 2,000 iterations (more than a pass over the data), the gradient in
# four DDP buckets, losses on held-out **test** files. The loss runs trained over NVLink (the loss does not depend
# on the link); each round is priced at each rate by its level's iteration time measured on a shaped link
# (`studykit.train.tuning`). The figure and tables below are read from the records; the printed lines say what
# they show, with their numbers:
#
# * the learning rate each method chose, and where it sits at the edge of the grid (the best may lie beyond);
# * per rate, the speed-up over fp16 at the strictest target, split into throughput and iterations;
# * how much of AdamW's step a method's gradient noise changes (the second-moment explanation of the runs above).

# %%
if tuned_runs:
    from studykit.train import tuning

    tuned = tuning.load_campaign(paths.DATA / "training" / tuned_runs)
    for line in tuning.findings(tuned, "test_loss", baseline):
        print("*", line)
    fig, ax = plots.tuned_speedups(tuned["tables"], baseline)
    display(tuned["lrs"].round(4))  # noqa: F821 - IPython's display

# %%
if tuned_runs:
    for (rate, tgt), t in tuned["tables"].items():
        print(f"{rate:g} Gbit/s: time to test loss {tgt:.4f} nats per byte, {100 * interval:g} % intervals over seeds")
        display(t[["reached", "runs", "steps_to_target", "steps_lo", "steps_hi", "tta_s", "tta_lo_s", "tta_hi_s",  # noqa: F821
                   "speedup_vs_baseline", "speedup_lo", "speedup_hi", "iter_ms", "throughput_vs_baseline"]].round(3))

# %% [markdown]
# ## Reading it
# * Compare accuracy at equal rounds (Table I) *and* at equal time (TTA): a method can match accuracy per
#   iteration while losing on time, because encoding costs more than the bytes it saves.
# * Timings from a shared CPU machine are noisy (`provenance.loadavg_1m` in each record says how busy it
#   was); accuracies and bytes are exact and reproducible (fixed seeds, tested).
# * `data/training/README.md` says which command produced the committed runs; `scripts/gpu_tta.sh` makes
#   the GPU runs of the language model at two emulated bandwidths (`data/training/tta_gpu2/`, shown in the
#   section above through `gpu_runs`; one folder can also be read alone with `runs_dir="tta_gpu2/tta_10g"`,
#   `target_metric="val_loss"`).
