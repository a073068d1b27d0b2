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
from studykit.plots import measure as figures
from studykit.perfmodel import Calibration, fit

src = Path(records) if records else fit.default_records()
src = src if src.is_absolute() else paths.ROOT / src
ref = Calibration.load(paths.ROOT / reference_path)
df = fit.normalize(fit.load_records(src))
synthetic = "synthetic" in df and df["synthetic"].fillna(False).astype(bool).any()
print(f"{len(df)} records from {src}" + ("  -- SYNTHETIC demo data, not measurements" if synthetic else ""))
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
