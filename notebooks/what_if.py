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
# # What if? The paper's performance model, redrawn
#
# Agarwal et al. 2022 (MLSys 2022, https://arxiv.org/abs/2103.00543) uses its performance model (Sec. 4.1, App. B) to ask how
# bandwidth, compute speed and the compressor's design change the answer to "does gradient
# compression pay off?". This notebook redraws Figures 3, 12, 18, 19, 20 and 21 with the kit's
# model (`studykit.perfmodel`) from the paper's own V100 inputs (`data/calibrations/paper_v100.json`).
#
# * syncSGD: `T = max(gamma T_comp, (k-1) T_comm(b)) + T_comm(b_last)` (Sec. 4.1, Eq. 1);
# * compressed: `T = T_comp + T_encode_decode + sum of the compressor's collectives` (App. B), where the
#   collectives come from the compressor's real protocol (`compressor.plan()`), not from a table.
#
# Every paper number below is read from `data/paper/claims.csv` and drawn dashed. Where the kit disagrees
# the notebook says so; `data/paper/README.md` explains each disagreement and how the unstated inputs
# (ResNet-101 and BERT backward times) were derived.

# %% tags=["parameters"]
calibration_path: str = "data/calibrations/paper_v100.json"  # calibration JSON, relative to the repo root
world_size: int = 64  # GPUs for the what-if figures (the paper simulates 64)
n_points: int = 60  # points per bandwidth sweep
max_bandwidth_gbps: float = 100.0  # right end of the bandwidth axes (Gbit/s)

# %%
import numpy as np
import pandas as pd
from IPython.display import display

from studykit import paths, plots
from studykit.plots import perfmodel as figures
from studykit.perfmodel import Calibration, claims, paper, whatif

cal = Calibration.load(paths.ROOT / calibration_path)
bw = np.geomspace(1, max_bandwidth_gbps, n_points)
plots.theme()
pd.set_option("display.max_colwidth", 90)

# %% [markdown]
# ## The inputs
#
# What the paper states (`data/paper/inputs.csv`) and what the kit derives for the inputs it does not
# state (`data/paper/derived_inputs.csv`, made by `python -m studykit.perfmodel.paper`).

# %%
display(cal.to_frame()[["constant", "model", "batch_size", "compressor", "params", "value", "low", "high", "unit"]])
display(paper.table("derived_inputs")[["quantity", "model", "compressor", "params", "value_ms", "uses"]])

# %% [markdown]
# ## Fig. 3: ResNet-101, syncSGD vs PowerSGD rank 4 as bandwidth varies
#
# The paper: PowerSGD rank 4 is faster than syncSGD only below its crossover bandwidth. The kit's
# ResNet-101 backward time, and the effective bandwidth of the paper's 96-GPU cluster, are fitted
# jointly to the paper's five 96-GPU measurements (Sec. 1 and 3.3; `derived_inputs.csv` above); the
# crossover drawn here follows from them, and the claims table below says how close it lands to 8.2.
# The effective bandwidth is above the p3.8xlarge's ~10 Gbit/s link: a model-error absorber, not the
# network's rate. The claims table also checks the crossover against the cap Sec. 3.3's "6.3 % slower"
# puts on it, both at that measurement's 96 GPUs and at that one bandwidth.

# %%
c = paper.claim("fig3_crossover_r101")
df = whatif.bandwidth_sweep(c.model, int(c.batch_size), world_size, bw, calibration=cal)
kit = whatif.crossover(c.model, int(c.batch_size), world_size, calibration=cal)
print(f"crossover: paper {c.value:g} Gbit/s, kit {kit:.2f} Gbit/s ({kit / c.value - 1:+.0%})")
figures.bandwidth_sweep_plot(df, c.value, kit, title=f"Fig. 3: {c.model}, batch {int(c.batch_size)}, {world_size} GPUs");

# %% [markdown]
# ## Figs. 12 and 18: how much compression does near-linear scaling need?
#
# The kit's hypothetical compressor is free to encode, all-reduce compatible and applied per DDP bucket;
# "near linear" (undefined in the paper) is the point where the overlapped communication fits under the
# backward pass (`studykit.perfmodel.required_ratio`). The paper: about 4x suffices at 10 Gbit/s even for
# small batches. The kit agrees for ResNet-50 and BERT; for ResNet-101 at batch 16 it needs more.

# %%
c = paper.claim("fig12_required_ratio_r101")
rr = whatif.required_ratio_sweep(("resnet101",), (16, 32, 64), world_size, bw, calibration=cal)
at = whatif.required_ratio_sweep(("resnet101",), (16, 32, 64), world_size, [c.bandwidth_gbps], calibration=cal)
display(at[["model", "batch_size", "bandwidth_gbps", "required_ratio"]].assign(paper=c.value))
figures.required_ratio_plot(rr, c.value, c.bandwidth_gbps, title="Fig. 12: ResNet-101");

# %%
c = paper.claim("fig18_required_ratio_all")
rr = whatif.required_ratio_sweep(("resnet50", "resnet101", "bert_base"), (16, 64), world_size, bw, calibration=cal)
at = whatif.required_ratio_sweep(("resnet50", "resnet101", "bert_base"), (16, 64), world_size, [c.bandwidth_gbps],
                                 calibration=cal)
display(at[["model", "batch_size", "required_ratio"]].assign(paper_at_most=c.high))
figures.required_ratio_plot(rr, c.high, c.bandwidth_gbps, title="Fig. 18: all models (batch -1: unstated)");

# %% [markdown]
# ## Fig. 19: bandwidth sweeps for ResNet-50 and BERT
#
# The paper: PowerSGD helps ResNet-50 below about 7-9 Gbit/s and BERT below about 15 Gbit/s. The kit's BERT
# inputs are derived from the paper's 96-GPU statements (Fig. 10's 200 ms gap, Sec. 3.2's speed-ups) at the
# same effective bandwidth as ResNet-101's, one bandwidth for one cluster; from them both crossovers land
# close to the paper's (the printed values, and the claims table below).

# %%
fig, axes = plots.new(ncols=2, width=5.5)
for ax, cid in zip(axes, ("fig19_crossover_r50", "fig19_crossover_bert")):
    c = paper.claim(cid)
    df = whatif.bandwidth_sweep(c.model, 64, world_size, bw, calibration=cal)
    kit = whatif.crossover(c.model, 64, world_size, calibration=cal)
    print(f"{c.model}: crossover paper {c.value:g} Gbit/s (range {c.low}-{c.high}), kit {kit:.2f} Gbit/s")
    figures.bandwidth_sweep_plot(df, c.value, kit, title=f"Fig. 19: {c.model}", ax=ax)
fig.tight_layout()

# %% [markdown]
# ## Fig. 20: faster compute at 10 Gbit/s
#
# App. D's text says encode/decode speeds up with compute; read that way the kit predicts a much larger
# PowerSGD advantage than the paper's. Keeping encode/decode fixed (dotted) lands closer to the paper's
# number: the figure was probably drawn that way. Either way, the direction holds (the claims table scores
# it "partly": right direction, wrong size): faster GPUs make syncSGD communication-bound and compression
# pays off.

# %%
c = paper.claim("fig20_speedup_r50_compute3p5")
f = np.linspace(1, 4, 31)
df = pd.concat([whatif.compute_speedup_sweep(c.model, 64, world_size, c.bandwidth_gbps, f, calibration=cal,
                                             scale_encode_decode=s) for s in (True, False)], ignore_index=True)
at = df[np.isclose(df.compute_speedup, c.compute_speedup)][["scale_encode_decode", "speedup"]]
display(at.assign(paper=c.value))
figures.compute_speedup_plot(df, (c.compute_speedup, c.value), title=f"Fig. 20: {c.model}, {c.bandwidth_gbps:g} Gbit/s");

# %% [markdown]
# ## Fig. 21: trade encode/decode time for bytes
#
# A hypothetical PowerSGD whose encode/decode is `k` times faster but sends `l k` times the bytes.
# The paper: any such reduction helps. The kit agrees that every `k > 1` beats the baseline; it also
# shows the time rising again from `k = 3` to `k = 4` for `l = 2` and `3`, where the extra bytes cost more
# than the saved encode time.

# %%
tg = whatif.tradeoff_grid("resnet50", 64, world_size, 10.0, calibration=cal)
print("every k > 1 beats the baseline:", whatif.tradeoff_all_help(tg))
figures.tradeoff_plot(tg, title="Fig. 21: resnet50, batch 64, 10 Gbit/s");

# %% [markdown]
# ## Which is fastest at the paper's setting?
#
# The same model ranks syncSGD, the fp16 baseline and every compressor (its main parameter at three values)
# at 64 GPUs and 10 Gbit/s: `studykit.perfmodel.whatif.ranking_at`, i.e. `advise.advise(...).ranking(...)`,
# what `python -m studykit advise` prints and the explorer shows under its bars. Candidates within the
# model's error of the best cannot be told apart by it; the last column says whether the kit has trained
# the candidate to accuracy. Compressors the paper's inputs cannot price (no encode/decode time) are listed
# below the table.

# %%
c = paper.claim("fig3_crossover_r101")
rank = whatif.ranking_at(c.model, int(c.batch_size), world_size, 10.0, calibration=cal, top=10)
display(rank)
print("not ranked (no T_encode_decode in the paper's inputs):", ", ".join(sorted(rank.attrs["unranked"])))

# %% [markdown]
# ## Every claim, kit vs paper
#
# One row per comparison (`studykit.perfmodel.claims.reproduce`). Tolerance: 15 %, just above the
# paper's own largest model error (13.7 %, Fig. 11). A speed-up is scored on its gain, `speed-up - 1`, the
# number the paper's sentence states: within 15 % of the paper's gain is `reproduced`, the right sign at
# the wrong size `partly`, the wrong sign `disagrees`. `input` rows were used to derive unstated inputs, so
# they agree by construction. The "measured" rows compare the model with the paper's hardware results, at
# the cluster's one effective bandwidth (a model-error absorber: above the ~10 Gbit/s link).
#
# The plot draws what the verdict scores: each dot is the row's `rel_diff` (a speed-up's on its gain), each
# grey bar the range its verdict accepts on the same scale (`claims.accepted`: the paper's value, or its
# stated range such as "at most 4x", widened by the row's tolerance). Rows are named as in the table.

# %%
table = claims.reproduce(cal)
display(table[["claim_id", "kind", "setting", "paper_value", "kit_value", "scored_on", "rel_diff", "verdict"]])
print(table["verdict"].value_counts().to_string())
figures.claims_plot(table);

# %% [markdown]
# ## Table 3's compression ratios vs the kit's `plan()`
#
# The kit counts every byte a compressor puts on the wire (its `plan()`); the paper counts MSTop-K's
# values only (its int32 indices double the bytes), and its PowerSGD ratio is slightly higher than what
# the kit's PowerSGD (Vogels et al.'s layer-wise scheme, vectors sent uncompressed) sends.

# %%
display(claims.compression_ratios())

# %% [markdown]
# ## Where the kit disagrees, and why
#
# Every claim the kit does not reproduce, in full or in size only, with the reason (`claims.EXPLANATIONS`:
# each is written for the verdict it explains, and a test fails if the numbers stop giving that verdict).

# %%
table[table["verdict"].isin(["partly", "disagrees"])][["claim_id", "setting", "paper_value", "kit_value", "verdict",
                                                       "explanation"]]

# %% [markdown]
# Details and numbers: `data/paper/README.md`.
