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
# `data/measurements/bandwidth/`, their README says how they were made). Every compressor runs both
# as a DDP communication hook and after the backward pass (`post`, the paper's implementation),
# beside PyTorch's own fp16 and PowerSGD hooks. The committed records of `h200_p2` were taken
# with the kit's first hook, which ran each bucket's protocol inside the hook and so made the
# backward pass wait for every collective ("blocking hook" below); the kit's hook now overlaps
# (`studykit/ddp.py`), and its records say so (`hook_overlap`).
#
# **Careful with the comparison.** The paper's crossovers are for 64 GPUs; these are for p = 2.
# A ring all-reduce sends 2(p-1)/p of the gradient per GPU: 1.0x at p = 2, 1.97x at p = 64. At the
# same bandwidth, syncSGD's communication at 64 GPUs costs about twice what it costs here, which
# moves its crossovers up, while faster GPUs (H200 against V100) shrink the compute that hides it,
# which moves them up as well.

# %% tags=["parameters"]
records_dir: str = "data/measurements/bandwidth/h200_p2"  # one campaign folder (one card kind, one world size), relative to the repository root
stat: str = "ms_median"  # statistic of every record: ms_median, ms_mean or ms_min
predictions: str = "data/verification/bandwidth/predictions.csv"  # a `verify` predictions.csv on the same records: the model's lines (empty: none)
n_boot: int = 500  # bootstrap resamples of the timed iterations for each crossover's interval
methods: list = ["PyTorch PowerSGD r4 hook", "powersgd r4 (post)", "powersgd r4 (blocking hook)", "topk 1% (post)", "PyTorch fp16 hook", "syncSGD"]  # the methods drawn (at most 6); labels as in the tables below

# %%
import pandas as pd

from studykit import paths
from studykit.measure import crossover as X
from studykit.measure.records import load_records
from studykit.plots import theme
from studykit.plots.measure import bandwidth_grid_plot

theme()
folder = paths.ROOT / records_dir
table = X.iteration_table(load_records(folder / "ddp.jsonl"), stat=stat)
probes = pd.DataFrame([{"rate_gbps": r["network"]["rate_gbps"], "measured_gbps": r["busbw_gbps"],
                        "transport": " ".join(r.get("nccl_transport") or [])} for r in load_records(folder / "probe.jsonl")])
print(f"{len(table)} iteration records, {table['model'].nunique()} models, rates {sorted(table['rate_gbps'].unique())} Gbit/s,"
      f" on {', '.join(table['gpu'].unique())} x {', '.join(map(str, table['world_size'].unique()))}")

# %% [markdown]
# ## Does the shaped link give the rate it is set to?
#
# Before each rate's measurements a 64 MiB NCCL all-reduce timed what the link really delivers, and
# NCCL's own log said which transport it used (only `NET/Socket` is accepted: anything else would
# bypass the shaped link).

# %%
probes.groupby("rate_gbps").agg(measured_gbps=("measured_gbps", "mean"), runs=("measured_gbps", "size"),
                                transport=("transport", "first")).assign(
    fraction=lambda d: d["measured_gbps"] / d.index).round(3)

# %% [markdown]
# ## Iteration time and speed-up against bandwidth (Figs. 3 and 19, measured)

# %%
predicted = X.predicted_table(pd.read_csv(paths.ROOT / predictions)) if predictions else None
speedups = X.speedup_table(table, "syncSGD")
fig, axes = bandwidth_grid_plot(table, speedups, methods, predicted=predicted, baseline="syncSGD")

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
X.crossover_summary(out).fillna("(baseline)")

# %% [markdown]
# ## Beside the paper's values
#
# The paper's crossovers (from `data/paper/claims.csv`) are for PowerSGD rank 4 against syncSGD on
# V100s, at 64 GPUs for ResNet-101; the measured ones are for this machine at its world size.

# %%
paper = X.paper_crossovers(pd.read_csv(paths.ROOT / "data" / "paper" / "claims.csv"))
rows = []
for _, p in paper.iterrows():
    for method in ("PyTorch PowerSGD r4 hook", "powersgd r4 (post)", "powersgd r4 (blocking hook)"):
        m = out[(out["model"] == p["model"]) & (out["method"] == method) & (out["baseline"] == "syncSGD")]
        rows.append({"model": p["model"], "paper (V100, Gbit/s)": p["paper_gbps"], "paper source": p["source"],
                     "kit method": method, "kit (measured, Gbit/s)": X.format_crossover(m.iloc[0]) if len(m) else "not measured"})
pd.DataFrame(rows)
