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
# # Calibrate the performance model from measurements
#
# Fits the constants of Agarwal et al.'s model (App. C) from timing records (`data/measurements/`,
# JSON Lines written by `python -m studykit sweep/tcomp/profile/ddp`):
#
# * **alpha, BW** (Eq. 1) from all-reduce times across message sizes and world sizes,
# * **gamma** (Sec. 4.1) from DDP iteration times vs the single-GPU backward time,
# * **T_comp** and **T_encode_decode** from profiles,
# * optionally the all-gather **incast** coefficient (beyond the paper).
#
# Each constant comes with a bootstrap interval and an R^2 (`studykit.perfmodel.fit`). By default it fits
# the committed GPU records, else the CPU records, else a **synthetic** demo file
# (`data/measurements/synthetic/`, generated from known constants). The paper's V100 values are drawn
# dashed for comparison. The same fit from a shell: `python -m studykit fit RECORDS --out CAL.json`.

# %% tags=["parameters"]
records: str = ""  # JSONL file or folder (repo-relative); empty: data/measurements/gpu, else cpu, else the synthetic demo
reference_path: str = "data/calibrations/paper_v100.json"  # calibration drawn dashed for comparison
out: str = ""  # repo-relative path to write the fitted calibration JSON; empty: do not write
n_boot: int = 200  # bootstrap resamples per constant
stat: str = "ms_median"  # timing statistic to fit: ms_median, ms_mean (the paper's), ms_min, ms_max

# %%
from pathlib import Path
from IPython.display import display

from studykit import paths
from studykit.nbtools.display import short_path
from studykit.plots import measure as figures
from studykit.perfmodel import Calibration, fit

src = Path(records) if records else fit.default_records()
src = src if src.is_absolute() else paths.ROOT / src
ref = Calibration.load(paths.ROOT / reference_path)
df = fit.normalize(fit.load_frame(src))
synthetic = "synthetic" in df and df["synthetic"].fillna(False).astype(bool).any()
print(f"{len(df)} records from {short_path(src)}" + ("  -- SYNTHETIC demo data, not measurements" if synthetic else ""))
display(df["kind"].value_counts().rename("records"))

# %% [markdown]
# ## Fit every constant the records determine
#
# Constants the records cannot determine are listed with the reason (e.g. one message size only).

# %%
cal = fit.fit_calibration(df, src.stem, stat=stat, n_boot=n_boot, strict=False)
display(cal.to_frame()[["constant", "model", "batch_size", "compressor", "params", "value", "low", "high",
                        "unit", "r2", "n"]])
for what, why in cal.provenance.get("not_fitted", {}).items():
    print(f"not fitted: {what}: {why}")

# %% [markdown]
# ## All-reduce times vs Eq. 1
#
# Points: measurements; solid: the Eq. 1 fit; dashed: the reference calibration (the paper's V100
# cluster by default) at the same world sizes.

# %%
if cal.alpha_s is not None:
    ab = fit.fit_alpha_bw(df, stat=stat, n_boot=0)
    reference = {"label": ref.name, "alpha_s": ref.alpha_s.value, "bandwidth_gbps": ref.bandwidth_gbps.value}
    figures.allreduce_fit_plot(ab.data, cal.alpha_s.value, cal.bandwidth_gbps.value, reference)
    display(ab.per_world_size)
else:
    print("no all-reduce fit (see above)")

# %% [markdown]
# ## Fitted constants next to the reference
#
# Each fitted constant with its bootstrap interval; the reference's value for the same quantity dashed
# (only where the reference has one, e.g. the paper's ResNet-50 backward time and Table 3's encode times).

# %%
figures.calibration_compare_plot(cal.to_frame(), ref.to_frame(), labels=(cal.name, ref.name));

# %%
if out:
    print("wrote", cal.save(paths.ROOT / out))

# %% [markdown]
# ## Your own model and cluster
#
# The same loop works for a model the kit does not list: a Python file whose function returns the
# `nn.Module` (`examples/vit_b16.py:build` shows the contract). Time it on **one GPU** of your cluster's kind,
# run a collective `sweep` and a few `ddp` runs at one link rate on the **cluster** (or on two GPUs behind a
# shaped link: `throttle --gpus`), fit, and ask:
#
# ```bash
# python -m studykit tcomp --model FILE.py:FUNC --out ONE_GPU/tcomp.jsonl   # and profile, the same way
# python -m studykit sweep ... --out CLUSTER/sweep.jsonl                    # and ddp; both under torchrun
# python -m studykit fit --compute-from ONE_GPU --network-from CLUSTER --out CAL.json
# python -m studykit advise --model FILE.py:FUNC --calibration CAL.json --gpus ... --bandwidth-gbps ...
# ```
#
# `benchmarks/own_model_check.py` runs this loop on the committed ViT-B/16 records
# (`data/measurements/own_model/`): it fits at one link rate and asks `advise` for the other rates.
#
# The table lists each group's median and max |relative error| (fractions) against its targets; `met`
# says whether both hold, and a `False` names the group to look for in the figure. There, points inside the
# grey band are predicted within 10 % of the measurement; a colour shows the world size, a marker the group.

# %%
from studykit.plots import verify as verify_figures

own_model = sorted(s.parent for s in (paths.DATA / "verification" / "own_model").glob("*/summary.json"))
display(verify_figures.own_model_table(own_model))

# %%
verify_figures.own_model_figure(own_model);

# %% [markdown]
# What the calibration of the 4-GPU run advises for ViT-B/16 at 10 Gbit/s on 2, 4 and 64 GPUs, with
# compressors as DDP hooks. The calibration carries the model's gradient shapes, so this cell needs neither
# torchvision nor a GPU. With no batch size given, `advise` asks at the batch the records measured (at another
# batch it would scale `T_comp` linearly and have no overhead `O` for it). Beyond 4 GPUs the answer is an
# extrapolation of the model.

# %%
import studykit

own_calibration = paths.DATA / "verification" / "own_model" / "vit_b16_p4" / "calibration.json"
print(studykit.advise("examples/vit_b16.py:build", gpus=[2, 4, 64], bandwidth_gbps=[10],
                      calibration=own_calibration, mode="hook"))
