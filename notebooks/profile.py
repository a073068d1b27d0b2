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
# # How expensive is each compressor here? (Agarwal et al. 2022, Tables 2 and 3)
#
# Agarwal et al. time the encode and decode of nine gradient compressors on ResNet-50's gradients
# (Table 2, 64 V100s) and find most take around 100 ms, a large share of a backward pass of about
# 122 ms (Table 3). This notebook rebuilds both tables **for the machine in the records**, side by side
# with the paper's V100 numbers, and shows how far each codec sits above two references: the
# memory-bandwidth floor (read the fp32 gradient once, write the output once: 8 bytes per element at
# the measured copy bandwidth) and the backward pass of the same model.
#
# The numbers come from `python -m studykit profile / tcomp / ddp` records (`data/measurements/`,
# schema in its README); the smoke run reads a small committed CPU run, the full profile reads the GPU
# records of `scripts/gpu_measure.sh`.

# %% tags=["parameters"]
records_dir: str = "data/measurements/cpu"  # folder (from the repo root) of *.jsonl measurement records
model: str = "resnet50"  # model of Tables 2-3; a name from studykit.models.available() or a spec (FILE.py:FUNC)
sim_world_size: int = 1  # profile records that decode this many workers' payloads (64: the paper's Table 2 setting)
tcomp_batch_size: int = 0  # batch size of the backward pass drawn for scale (0: the largest measured)
ddp_model: str = "cnn_small"  # model of the overlapped-vs-after-backward DDP table (Sec. 3.1)
paper_dir: str = "data/paper"  # folder of the paper's CSVs; a missing table only drops the V100 column

# %%
from studykit.measure import report
from studykit.plots import measure as figures

batch = tcomp_batch_size or None
df = report.load_frame(records_dir)
if df.empty:
    raise FileNotFoundError(f"no records under {records_dir}; run scripts/gpu_measure.sh or the commands "
                            "in data/measurements/cpu/README.md")
paper2 = report.paper_table("table2_encode_decode", paper_dir)
paper3 = report.paper_table("table3_compression", paper_dir)
report.provenance_summary(df)

# %% [markdown]
# ## Table 2: encode-decode time of every compressor
#
# `ms_mean` with `ms_min`/`ms_max` (the paper's statistic and error bars) of one
# `compressor.reduce` at world size 1, `ratio` against the fp32 all-reduce, `x_floor` the multiple
# of the memory floor; `paper_v100_ms` is the paper's ResNet-50 number on V100s.

# %%
report.table2(df, model, paper2, sim_world_size=sim_world_size).round(3)

# %% [markdown]
# ## Table 3: the paper's settings against the backward pass
#
# PowerSGD rank 4/8/16, MS-TopK 1% and 0.1%, SignSGD; `backward_ms` is this machine's backward pass of
# the same model (`tcomp`, NaN without such records), `x_backward` the codec's share of it.

# %%
report.table3(df, model, paper3, batch_size=batch).round(3)

# %% [markdown]
# ## Encode-decode against the memory floor and the backward pass

# %%
fig, ax = figures.plot_encode_decode(df, model, batch_size=batch, paper=paper2)

# %%
fig, axes = figures.plot_overheads(df, batch_size=batch)

# %% [markdown]
# ## Overlapped with the backward pass, or after it? (Sec. 3.1)
#
# DDP iteration time (ms) of syncSGD (DDP's default bucket and other `bucket_mb`), PyTorch's built-in
# hooks, and every compressor as a DDP comm hook (`hook`, overlapped) and after the backward (`post`).
# The paper found `post` faster on V100s: compression competes with the backward for the GPU.

# %%
ddp = report.ddp_table(df, ddp_model)
ddp.round(2) if not ddp.empty else print(f"no ddp records for {ddp_model} under {records_dir}")
