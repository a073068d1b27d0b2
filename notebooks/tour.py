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
# # A tour: does gradient compression make data-parallel training faster?
#
# You know SGD: compute the gradient of the loss on a mini-batch, step against it. This tour shows what
# changes when `p` GPUs train one model together, why that costs network time, how systems hide most of
# that time, and why, as Agarwal et al. 2022 (*On the Utility of Gradient Compression in Distributed
# Training Systems*, MLSys 2022) finds, squeezing the gradient rarely makes training faster at data-center
# bandwidth. Then it goes past that paper with Han et al. 2024 (time to accuracy, the FP16 baseline) and
# Tirupati et al. (dynamic compression).
#
# Every number below is computed by the `studykit` package (`studykit.perfmodel`, `studykit.lessons.tour`,
# `studykit.lessons.gallery`) from the paper's V100 inputs (`data/calibrations/paper_v100.json`) or from
# committed measurements; none is typed in. Change the parameters in the next cell and rerun to see
# your own setting. Exercises end most sections; their answers are folded away: click to reveal.

# %% tags=["parameters"]
model: str = "resnet50"  # model whose gradient the tour follows: resnet50, resnet101 or bert_base (the calibration has their backward times)
batch_size: int = 64  # per-GPU batch size (the paper's default)
world_size: int = 64  # number of GPUs p (the paper's standard scale)
bandwidth_gbps: float = 10.0  # network bandwidth per GPU in Gbit/s (the paper's AWS p3.8xlarge)
slow_bandwidth_gbps: float = 1.0  # a slow network, where communication no longer hides (Gbit/s)
max_world_size: int = 1024  # right end of the GPU axis in the collective-cost figure
calibration_path: str = "data/calibrations/paper_v100.json"  # calibration JSON (repo-relative): alpha, gamma, T_comp, T_encode_decode
gallery_workers: int = 4  # simulated workers whose real gradients each compressor aggregates
runs_dir: str = "cpu"  # folder under data/training/ with committed training runs (Tirupati et al. / 002 section)
target_acc: float = 0.9  # time-to-accuracy target for those runs (test accuracy, fraction)

# %%
from dataclasses import replace

import numpy as np
import pandas as pd
from IPython.display import display

from studykit import models, paths, plots
from studykit.lessons import gallery, tour
from studykit.perfmodel import DEFAULT_BUCKET_BYTES, Calibration, Workload, predict, required_ratio, whatif
from studykit.train import analysis
from studykit.plots import lessons as lplots
from studykit.plots import train as tplots

# %%
plots.theme()
cal = Calibration.load(paths.ROOT / calibration_path)
hw = whatif.hardware(cal, bandwidth_gbps=bandwidth_gbps)
work = Workload(model, batch_size)
t_comp_s, _ = work.resolve_t_comp(cal)
MB = 1e6
print(f"{model}, batch {batch_size}, {world_size} GPUs, {bandwidth_gbps:g} Gbit/s; from {calibration_path}: "
      f"backward pass T_comp = {t_comp_s * 1e3:.0f} ms, alpha = {hw.alpha_s * 1e6:.1f} us, gamma = {hw.gamma:g}")

# %% [markdown]
# ## 1. What data-parallel training sends, and when
#
# Every GPU (a *worker*) holds a full copy of the model. In each iteration each worker draws its own
# mini-batch, runs the forward and backward pass, and gets *its* gradient. Before anyone may take the SGD
# step, all workers need the **average** of the `p` gradients, so that the copies stay identical. That
# average is computed by a collective operation, **all-reduce**: every worker contributes a vector of
# `n` bytes (the whole gradient: four bytes per parameter in fp32) and every worker ends with the sum.
#
# So, once per iteration, the whole gradient crosses the network. PyTorch's DistributedDataParallel (DDP)
# does not wait for the backward pass to finish: gradients appear layer by layer, last layer first, and
# DDP groups them into **buckets** (`bucket_cap_mb`, Sec. 2.2) and all-reduces each bucket as soon as it is
# full, while the backward pass continues on earlier layers.

# %%
traffic = pd.DataFrame([tour.gradient_traffic(m, world_size) for m in ("resnet50", "resnet101", "bert_base", "vgg19")])
traffic.assign(gradient_mb=traffic.gradient_bytes / MB, bucket_mb=traffic.bucket_bytes / MB,
               ring_sent_mb=traffic.ring_sent_bytes / MB, server_link_mb=traffic.server_link_bytes / MB)[
    ["model", "numel", "gradient_mb", "buckets", "bucket_mb", "ring_sent_mb", "server_link_mb"]].round(1)

# %% [markdown]
# `ring_sent_mb` is what each worker sends per iteration in a ring all-reduce; `server_link_mb` is what a
# single parameter server's link would carry instead. The next section explains the difference.
#
# **Exercise 1.** Each GPU trains BERT-base with `max_world_size` GPUs in all. How many megabytes does
# each GPU send per iteration in a ring all-reduce?
#
# <details><summary>Hint</summary>
#
# A ring worker sends `2 (p-1)/p` times the gradient size (Table 1); the gradient is four bytes per
# parameter. `tour.gradient_traffic("bert_base", max_world_size)` has it.
# </details>

# %% jupyter={"source_hidden": true}
tour.Answer(tour.gradient_traffic("bert_base", max_world_size)["ring_sent_bytes"] / MB, "MB",
            note="barely twice the gradient size, however many GPUs there are")

# %% [markdown]
# ## 2. Ring all-reduce: why the bandwidth term barely grows with `p`
#
# Arrange the `p` workers in a ring and cut the gradient into `p` chunks. In `p-1` steps of
# *reduce-scatter* each worker passes one chunk to its neighbour, which adds its own; afterwards each
# worker owns the full sum of one chunk. In `p-1` steps of *all-gather* the finished chunks travel once
# around the ring. Every step moves one chunk of `n/p` bytes per worker, all links busy at once, so
# (Eq. 1, Table 1, with `alpha` the per-message latency and `BW` the bandwidth):
#
# `T_ring(n, p) = 2 (p-1) alpha + 2 (p-1)/p * n / BW`
#
# The bandwidth term `2 (p-1)/p * n / BW` approaches `2 n / BW` and stays there: adding GPUs adds
# latency steps but almost no transfer time per worker. A parameter server, in contrast, receives
# `p-1` gradients over one link (`2 (p-1) n / BW`), and a binary tree sends the whole vector at
# each of its `log2 p` levels. The figure computes all three with `studykit.perfmodel.collectives` for
# the tour's model at the tour's bandwidth and the paper's `alpha`.

# %%
sizes = 2 ** np.arange(1, int(np.log2(max_world_size)) + 1)
costs = tour.collective_costs(work.gradient_bytes, sizes, hw.alpha_s, bandwidth_gbps)
fig, ax = lplots.plot_collectives(costs, title=f"{model} gradient ({work.gradient_bytes / MB:.0f} MB), "
                                                   f"{bandwidth_gbps:g} Gbit/s")
first, last = costs.iloc[0], costs.iloc[-1]
p0, p1 = int(first.world_size), int(last.world_size)
print(f"ring all-reduce: {first.ring_s * 1e3:.0f} ms on {p0} GPUs, {last.ring_s * 1e3:.0f} ms on {p1} GPUs "
      f"({last.ring_s / first.ring_s:.2f}x for {p1 // p0}x the GPUs); parameter server on {p1}: "
      f"{last.parameter_server_s:.0f} s")

# %% [markdown]
# **Exercise 2.** With the tour's model, bandwidth and `world_size`, how many times longer than the ring
# all-reduce does a parameter server take?
#
# <details><summary>Hint</summary>
#
# Compare `parameter_server_s` and `ring_s` of `tour.collective_costs` at `world_size`: roughly `p/2`,
# since the server's link carries `(p-1) n` each way while a ring worker sends about `2 n`.
# </details>

# %% jupyter={"source_hidden": true}
_c = tour.collective_costs(work.gradient_bytes, [world_size], hw.alpha_s, bandwidth_gbps).iloc[0]
tour.Answer(_c.parameter_server_s / _c.ring_s, "times", note=f"{_c.parameter_server_s:.1f} s against "
            f"{_c.ring_s * 1e3:.0f} ms at {world_size} GPUs")

# %% [markdown]
# ## 3. Overlap and bucketing: most of the communication is hidden
#
# Sec. 4.1 models one iteration's backward pass plus synchronization with `k` buckets (`k-1` of size `b`,
# a last one of size `b_last`):
#
# `T_obs = max(gamma * T_comp, (k-1) * T_comm(b)) + T_comm(b_last)`
#
# While the backward pass runs (slowed by a factor `gamma` because it shares the GPU with communication),
# the first `k-1` buckets are all-reduced; only the **last** bucket, whose gradients (of the first layers)
# appear at the very end, is always exposed. As long as `(k-1) * T_comm(b)` fits under the backward pass,
# syncSGD costs barely more than computing alone. The figure draws this model in time
# (`tour.overlap_timeline`, which ends exactly at the model's `T_obs`), without overlap (backward first,
# then every bucket), and with overlap on a slow network.

# %%
slow = replace(hw, bandwidth_gbps=slow_bandwidth_gbps)
timelines = {
    f"no overlap, {bandwidth_gbps:g} Gbit/s": tour.overlap_timeline(t_comp_s, work.gradient_bytes, world_size, hw,
                                                                    overlap=False),
    f"overlap, {bandwidth_gbps:g} Gbit/s": tour.overlap_timeline(t_comp_s, work.gradient_bytes, world_size, hw),
    f"overlap, {slow_bandwidth_gbps:g} Gbit/s": tour.overlap_timeline(t_comp_s, work.gradient_bytes, world_size, slow),
}
fig, ax = lplots.plot_timelines(timelines, title=f"{model}, batch {batch_size}, {world_size} GPUs: one iteration")
ends = {name: float(tl.end_s.max()) for name, tl in timelines.items()}
names = list(ends)
print(f"overlap saves {1 - ends[names[1]] / ends[names[0]]:.0%} of the iteration at {bandwidth_gbps:g} Gbit/s; "
      f"linear scaling would be {t_comp_s * 1e3:.0f} ms")

# %% [markdown]
# **Bucket size.** Few large buckets leave a long last bucket exposed (one bucket: nothing overlaps at all);
# many small ones pay the latency term `2 (p-1) alpha` once per bucket. DDP's default sits near the
# bottom of the curve, which is why the paper takes it as given.

# %%
sweep = tour.bucket_sweep(t_comp_s, work.gradient_bytes, world_size, hw, np.geomspace(0.25, 1024, 41))
fig, ax = lplots.plot_bucket_sweep(sweep, t_comp_s, DEFAULT_BUCKET_BYTES / 2**20,
                                   title=f"{model}, {world_size} GPUs, {bandwidth_gbps:g} Gbit/s")

# %% [markdown]
# **Exercise 3.** Below which bandwidth does syncSGD stop hiding the first `k-1` buckets of the tour's
# model under its backward pass (the `max` in Sec. 4.1 switches to communication)?
#
# <details><summary>Hint</summary>
#
# Solve `(k-1) * T_comm(b) = gamma * T_comp` for `BW` with Eq. 1: `tour.hiding_bandwidth_gbps`.
# </details>

# %% jupyter={"source_hidden": true}
tour.Answer(tour.hiding_bandwidth_gbps(t_comp_s, work.gradient_bytes, world_size, hw), "Gbit/s",
            note=f"for {model}, batch {batch_size}, {world_size} GPUs; above it syncSGD runs at compute speed "
                 "plus the last bucket")

# %% [markdown]
# ## 4. The compressor families, on a real gradient
#
# Gradient compression sends less than the `n` bytes per iteration. The papers group the methods in
# families:
#
# * **precision** (the baseline): cast to FP16 or BF16 before the all-reduce;
# * **quantization**: few bits per entry (`quantize`, QSGD, TernGrad, SignSGD, THC);
# * **sparsification**: only some entries with their indices (Top-K, Random-K, MSTop-K, DGC);
# * **low-rank**: a rank-`r` factorization of each weight matrix's gradient (PowerSGD, ATOMO).
#
# Here `gallery_workers` workers each take the gradient of a small MLP on scikit-learn's digits on their
# own mini-batch (`studykit.lessons.gallery`), and every compressor aggregates them with its real protocol
# (`studykit.compressors.simulate`). `ratio` is bytes saved against the fp32 all-reduce, `rel_error` how far
# the aggregate is from the exact average.

# %%
specs = ["fp16", "quantize:bits=4", "signsgd", "thc", "topk:ratio=0.05", "randomk:ratio=0.05", "powersgd:rank=2"]
grads, names = gallery.digits_gradients(gallery_workers, 32, 64, 0)
real = gallery.compare(specs, grads).assign(family=[tour.family(s.split(":")[0]) for s in specs])
display(real[["compressor", "family", "allreduce_compatible", "ratio", "rel_error", "cosine"]].round(3))
fig, axes = lplots.plot_survivors(specs, grads, tensor_index=0)

# %% [markdown]
# SignSGD's estimate is a vector of signs (its scale is left to the learning rate), so judge it by
# `cosine`, the alignment with the exact average, rather than by `rel_error`.
#
# What survives: the exact average gradient of the first layer, then each estimate on the same colour
# scale. Sparsifiers keep a few large entries, quantizers keep signs and coarse levels, low-rank keeps
# the dominant row and column structure.
#
# **All-reduce compatibility** decides how the bytes scale. A compressor whose payloads can simply be
# *summed* (`quantize`, Random-K with shared indices, PowerSGD) rides the ring all-reduce. One whose
# payloads cannot (Top-K's different indices, SignSGD's majority vote) must **all-gather** every worker's
# payload, and each worker then sends `p-1` payloads. Each compressor's `plan()` records the collectives its
# real code issues; here on the tour's model at `world_size` GPUs:

# %%
plan_specs = ["none", "fp16", "quantize:bits=8", "qsgd", "signsgd", "thc", "topk:ratio=0.01", "randomk:ratio=0.01",
              "mstopk:ratio=0.01", "powersgd:rank=4", "atomo:rank=4"]
fam = tour.family_table(plan_specs, model, world_size)
fam.assign(bytes_per_worker_mb=fam.bytes_per_worker / MB, ring_sent_mb=fam.ring_sent_bytes / MB)[
    ["compressor", "family", "allreduce_compatible", "collectives", "bytes_per_worker_mb", "ratio", "ring_sent_mb"]
].round(2)

# %% [markdown]
# Look at `quantize:bits=8`: summing `p` integer levels on the wire needs headroom, so at many workers
# the levels travel in wider integers and the ratio collapses. And the all-gather methods send far more
# than their `ratio` suggests once `p` is large (`ring_sent_mb`).

# %% [markdown]
# ## 5. Does compression pay? The paper's answer
#
# Compressed training, as App. B models it, cannot overlap (Takeaway 1: compression and the backward
# pass compete for the GPU), so it pays the encode/decode time on top of the backward pass:
#
# `T_obs = T_comp + T_encode_decode + the time of the compressor's collectives`
#
# The paper's V100 inputs give these speed-ups over syncSGD (`speedup > 1`: compression is faster) at the tour's
# bandwidth and `world_size`:

# %%
pays = tour.speedup_table(("resnet50", "resnet101", "bert_base"),
                         {"PowerSGD rank 4": ("powersgd", {"rank": 4}), "SignSGD": ("signsgd", {}),
                          "MSTop-K 1%": ("mstopk", {"ratio": 0.01})}, hw, world_size, batch_size, cal)
fig, ax = lplots.plot_speedups(pays, f"Paper's V100 inputs, batch {batch_size}, {world_size} GPUs, {bandwidth_gbps:g} Gbit/s")
pays.round(2)

# %% [markdown]
# The paper's three takeaways, in the model's terms:
#
# 1. **Takeaway 1** Compression does not overlap well with the backward pass on V100s (both need the
#    GPU), so it is done after it, and its encode/decode time is fully exposed.
# 2. **Takeaway 2** Existing methods give limited benefit: they either cost too much to encode
#    (see `encode_decode_ms`) or cannot use all-reduce (SignSGD, MSTop-K pay all-gather's growth with `p`).
#    Only for the communication-heavy BERT does PowerSGD win at the paper's scale.
# 3. **Takeaway 3** Larger batches lengthen the backward pass, which hides more communication, so
#    compression helps least there (Sec. 3.3):

# %%
bs = np.array([16, 32, 64, 128])
sp = [float(predict(Workload("resnet101", int(b)), hw, world_size, "powersgd", {"rank": 4}, calibration=cal).speedup)
      for b in bs]
pd.DataFrame({"batch_size": bs, "powersgd_rank4_speedup": sp}).round(3)

# %% [markdown]
# Where would compression pay? Sec. 4.2 asks the model: below the **crossover bandwidth**, `powersgd:rank=4`
# beats syncSGD (Fig. 3); and an ideal compressor that keeps overlap would need only a modest
# **compression ratio** for near-linear scaling (Fig. 12), far below what most methods offer. The
# `what_if` notebook redraws those figures; the `explorer` notebook puts sliders on the same model.

# %%
print(f"crossover bandwidth for {model}, batch {batch_size}, {world_size} GPUs, PowerSGD rank 4: "
      f"{whatif.crossover(model, batch_size, world_size, calibration=cal):.1f} Gbit/s")
for h in (hw, slow):
    print(f"compression ratio an ideal compressor needs for near-linear scaling at {h.bandwidth_gbps:g} Gbit/s: "
          f"{float(required_ratio(work, h, world_size, calibration=cal)):.2f}x")

# %% [markdown]
# **Exercise 4.** Compute gets faster every GPU generation; the network, less so. If the backward pass
# (and encode/decode) became four times faster, what would `powersgd:rank=4`'s speed-up over syncSGD be for
# the tour's model, batch and bandwidth (App. D, Fig. 20)?
#
# <details><summary>Hint</summary>
#
# `predict(work, replace(hw, compute_speedup=4.0), world_size, "powersgd", {"rank": 4}, calibration=cal).speedup`
# </details>

# %% jupyter={"source_hidden": true}
tour.Answer(float(predict(work, replace(hw, compute_speedup=4.0), world_size, "powersgd", {"rank": 4},
                          calibration=cal).speedup), "x",
            note="faster compute shrinks what overlap can hide, so communication savings start to count")

# %% [markdown]
# ## 6. Beyond the paper: time to accuracy (Han et al. 2024) and dynamic compression (Tirupati et al.)
#
# Agarwal et al. 2022 measures time *per iteration*, which is generous to compression: lossy gradients can need
# more iterations. **Han et al. 2024** (Han et al., *Beyond Throughput and Compression Ratios*) asks for
# **time to accuracy** (TTA), and for **FP16** as the baseline to beat, since casting to FP16 already halves
# the bytes at no accuracy cost and rides all-reduce. **Tirupati et al.** (Tirupati et al., *Distributed Model
# Training With Dynamic Gradient Compression*) changes the compression *level* during training: coarse
# quantization early, relaxing as validation accuracy and the loss change cross thresholds, and none
# when learning stalls.
#
# The kit trains every method as a real DDP communication hook (`python -m studykit train`); the runs
# committed under `data/training/` (see its README for the command) are read here.

# %%
runs = analysis.latest_runs(analysis.to_frame(analysis.load_runs(paths.DATA / "training" / runs_dir)))
r0 = runs.iloc[0]
tta = analysis.time_to_accuracy(runs, target_acc, baseline="fp16")
display(tta.round(3))
fig, ax = tplots.accuracy_vs_time(runs[runs.method.isin(["none", "fp16", "quantize8", "dynamic"])], target=target_acc)

# %%
fig, ax = tplots.bits_over_epochs(runs[runs.method.isin(["fp16", "quantize8", "dynamic"])])

# %% [markdown]
# The bits per gradient entry over epochs: static `quantize8` stays put, the dynamic controller
# starts coarse and relaxes (Tirupati et al.'s step function). These runs come from small models on a shared CPU,
# where every collective is latency-bound: timings are noisy and bytes saved barely shorten an
# iteration, Agarwal et al.'s regime again. The `time_to_accuracy` notebook has the whole analysis
# (Table I, accuracy curves, time split).
#
# **Exercise 5.** Han et al. 2024 says FP16 is the baseline to beat. On the tour's model at `world_size` GPUs,
# how many times *more* bytes than FP16 does `quantize:bits=8` put into its all-reduce?
#
# <details><summary>Hint</summary>
#
# Divide the two rows' `bytes_per_worker` in the `tour.family_table` of the compressor-families section; think about the
# headroom the sum of `p` levels needs.
# </details>

# %% jupyter={"source_hidden": true}
_f = tour.family_table(["fp16", "quantize:bits=8"], model, world_size).set_index("compressor").bytes_per_worker
tour.Answer(_f["quantize:bits=8"] / _f["fp16"], "times FP16's bytes",
            note=f"at {world_size} workers the sum of 8-bit levels travels as about "
                 f"{8 * _f['quantize:bits=8'] / models.numel(model):.0f} bits per entry; FP16 sends 16")

# %% [markdown]
# ## Where next
#
# * `compressor_gallery`: every compressor on the real gradient, with its parameters.
# * `what_if`: the paper's what-if figures and every claim, kit against paper.
# * `explorer`: sliders on the same model (`voila notebooks/explorer.ipynb`).
# * `profile`, `calibrate`: measure your own GPUs and network and fit the model's constants.
# * `time_to_accuracy`: Tirupati et al. and Han et al. 2024 in full.
