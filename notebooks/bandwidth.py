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
# # At which network bandwidth does compression start to pay? (measured on GPUs)
#
# Agarwal et al. 2022 ([arXiv 2103.00543](https://arxiv.org/abs/2103.00543)) throttled a 64-V100
# cluster with `tc` and found that PowerSGD rank 4 beats syncSGD only below about 8.2 Gbit/s for
# ResNet-101 (Sec. 1 and 4.2, Fig. 3), 9 for ResNet-50 and 15 for BERT (App. D, Fig. 19). Han et al.
# 2024 ([arXiv 2407.01378](https://arxiv.org/abs/2407.01378)) add that the baseline to beat is not
# fp32 syncSGD but FP16 all-reduce.
#
# This notebook reads the kit's own version of that experiment: real DDP iterations on lent GPUs,
# each rank in its own network namespace with NCCL over sockets on a link shaped with `tc tbf` to
# 1-25 Gbit/s (`python -m studykit throttle --gpus`, `scripts/gpu_bandwidth.sh`, records in
# `data/measurements/bandwidth/<campaign>`, their README says how they were made): p = 2 on a veth
# pair, p = 4 on a bridge. Every compressor runs both as a DDP communication hook and after the
# backward pass (`post`, the paper's implementation), beside PyTorch's own fp16 and PowerSGD hooks.
# The records of `h200_p2` were taken with the kit's first hook, which ran each bucket's protocol
# inside the hook and so made the backward pass wait for every collective ("blocking hook" below);
# the kit's hook now overlaps (`studykit/ddp/`, "hook" below: `h200_p4`, and `h200_p2b`, which adds
# VGG19 and GPT-2 small at p = 2).
#
# **Careful with the comparison.** The paper's crossovers are for 64 GPUs; these are for p = 2 and 4.
# A ring all-reduce sends 2(p-1)/p of the gradient per GPU: 1.0x at p = 2, 1.5x at p = 4, 1.97x at
# p = 64. At the same bandwidth, syncSGD's communication at 64 GPUs costs about twice what it costs at
# p = 2, which moves its crossovers up, while faster GPUs (H200 against V100) shrink the compute that
# hides it, which moves them up as well.
# %% tags=["parameters"]
campaigns: list = ["h200_p2", "h200_p2b", "h200_p4"]  # folders under data/measurements/bandwidth (one card kind and world size each)
stat: str = "ms_median"  # statistic of every record: ms_median, ms_mean or ms_min
model_lines: bool = True  # draw the model's predictions (data/verification/bandwidth/<campaign>/predictions.csv.gz)
n_boot: int = 500  # bootstrap resamples of the timed iterations for each crossover's interval
hook_stamps: str = "gpu_checks_h200/hooks.jsonl"  # under data/measurements: a ddp call with --hook-times beside syncSGD and post (last section)
hook_campaign: str = "h200_p2c"  # folder under data/measurements/bandwidth with every compressor as hook and post (hook vs post section)
hook_compressors: list = ["none", "fp16", "qsgd s4", "topk 1%", "powersgd r4", "powersgd r32"]  # drawn there (at most 6; labels as in its table)
methods: list = ["PyTorch PowerSGD r4 hook", "powersgd r4 (post)", "powersgd r4 (hook)", "powersgd r4 (blocking hook)", "topk 1% (post)", "syncSGD"]  # the methods drawn (at most 6); labels as in the tables below
# %%
import pandas as pd
from studykit import paths
from studykit.measure import crossover as X
from studykit.measure.records import load_records
from studykit.plots import theme
from studykit.plots.measure import bandwidth_grid_plot
theme()
folders = {c: paths.MEASUREMENTS / "bandwidth" / c for c in campaigns}
tables = {c: X.iteration_table(load_records(f / "ddp.jsonl"), stat=stat) for c, f in folders.items()}
table = pd.concat(tables.values(), ignore_index=True)
probes = pd.DataFrame([{"campaign": c, "rate_gbps": r["network"]["rate_gbps"], "measured_gbps": r["busbw_gbps"],
                        "transport": " ".join(r.get("nccl_transport") or [])}
                       for c, f in folders.items() for r in load_records(f / "probe.jsonl")])
for c, t in tables.items():
    print(f"{c}: {len(t)} iteration records, models {sorted(t['model'].unique())}, rates {sorted(t['rate_gbps'].unique())}"
          f" Gbit/s, on {', '.join(t['gpu'].unique())} x {', '.join(map(str, t['world_size'].unique()))}")
# %% [markdown]
# ## Does the shaped link give the rate it is set to?
#
# Before each rate's measurements a 64 MiB NCCL all-reduce timed what the link really delivers, and
# NCCL's own log said which transport it used (only `NET/Socket` is accepted: anything else would
# bypass the shaped link).

# %%
probes.groupby(["campaign", "rate_gbps"]).agg(measured_gbps=("measured_gbps", "mean"), runs=("measured_gbps", "size"),
                                              transport=("transport", "first")).assign(
    fraction=lambda d: d["measured_gbps"] / d.index.get_level_values("rate_gbps")).round(3)

# %% [markdown]
# ## Iteration time and speed-up against bandwidth (Figs. 3 and 19, measured)
#
# The x-axis is the rate the link delivered (the probe's bus bandwidth above, median per set rate), not the
# rate it was set to: at p = 4 the bridge gives less than the set rate at the highest rates, so those points
# sit left of 20 and 25. The model's lines are drawn at the same delivered rates. Bars: the quartiles of each
# record's timed iterations (these campaigns ran each configuration once; a speed-up's bars are the method's
# quartiles at syncSGD's median). Between runs a hook moves more than within one (the repeat campaigns of
# `data/measurements/bandwidth/README.md`), so read differences of a few percent as noise.

# %%
def predictions_of(campaign):
    f = paths.DATA / "verification" / "bandwidth" / campaign / "predictions.csv.gz"
    return X.predicted_table(pd.read_csv(f)) if model_lines and f.exists() else None


for c, t in tables.items():
    bandwidth_grid_plot(t, X.speedup_table(t, "syncSGD"), methods, predicted=predictions_of(c))
# %% [markdown]
# ## Measured crossovers
#
# For every method: the bandwidth below which it is faster than syncSGD (DDP at its default
# 25 MB buckets) and than the FP16 baseline (PyTorch's `fp16_compress_hook`), interpolated in log
# bandwidth between the two measured rates around the change of sign, with a 90 % bootstrap
# interval over the timed iterations. `> 25` means faster at every measured rate (the crossover is
# above the range), `< 1` slower at every one; `*` marks a method that is also slower at some rate
# below its crossover.

# %%
out = X.crossovers(table, n_boot=n_boot)
X.crossover_summary(out)

# %% [markdown]
# ## Beside the paper's values
#
# The paper's crossovers (from `data/paper/claims.csv`) are for PowerSGD rank 4 against syncSGD on
# V100s, at 64 GPUs for ResNet-101 ("paper p"); the measured ones are for the lent machines at their
# world size ("kit p").

# %%
paper = X.paper_crossovers(pd.read_csv(paths.DATA / "paper" / "claims.csv"))
X.beside_paper(out, paper, ["PyTorch PowerSGD r4 hook", "powersgd r4 (post)", "powersgd r4 (hook)",
                            "powersgd r4 (blocking hook)"])

# %% [markdown]
# ## Where the model misses, measured
#
# The model's errors on these records (`data/verification/bandwidth/README.md`) are largest for PowerSGD
# after the backward pass and for the hooks. Two measurements say which terms are wrong. First, after the
# backward pass nothing overlaps, so `measured - O - T_comp - T_comm` is the encode/decode an iteration
# actually paid: for PowerSGD it is a fraction of the profiled one, the codec timed alone
# (`verify.implied_encode_decode` on the pooled p = 2 records, the eight worst configurations; `verify
# --encode-decode-from iterations` calibrates the term this way).

# %%
from studykit.perfmodel import verify
pooled = paths.DATA / "verification" / "bandwidth" / "h200_p2_all" / "predictions.csv.gz"
verify.implied_encode_decode(pd.read_csv(pooled), worst=8).round(3) if pooled.exists() else "no pooled verification"

# %% [markdown]
# Second, one ResNet-50 call on a shaped link stamped the kit's hook bucket by bucket (`ddp --hook-times`)
# beside syncSGD and the post-backward path: each hooked iteration split into the terms the model adds up
# (ms, `hook_times.hook_budget_table`). The model has the exposed tail; it has neither the hook's slowdown of
# the backward pass itself (`+ slowdown`) nor the work the hook path adds outside the backward pass
# (`+ extra outside`).

# %%
from IPython.display import Markdown
from studykit.measure.hook_times import hook_budget_markdown, hook_budget_table
Markdown(hook_budget_markdown(hook_budget_table(load_records(paths.MEASUREMENTS / hook_stamps))))

# %% [markdown]
# ## Is the kit's hook faster than its own post-backward path?
#
# A hook can overlap a bucket's communication with the rest of the backward pass; post cannot, so every kit
# hook should be at most as slow as post at every rate. The hook campaign (`hook_campaign`) ran
# each compressor both ways at each rate: below 1 the hook wins (`report.hook_vs_post`; its README has the
# same numbers as a table). Bars: the hook's iteration quartiles over post's median; x: the set rate (at p = 2
# the link delivers close to it, the probe table above).

# %%
from studykit.measure.report import hook_vs_post
from studykit.plots.measure import hook_vs_post_plot
hvp = hook_vs_post(load_records(paths.MEASUREMENTS / "bandwidth" / hook_campaign / "ddp.jsonl"))
print(f"{(hvp['verdict'] == 'PASS').sum()} of {len(hvp)} configurations: hook <= post")
hook_vs_post_plot(hvp[hvp["label"].isin(hook_compressors)]);

