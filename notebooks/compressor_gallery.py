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
# # Compressor gallery
#
# What does each gradient compressor from the papers do to a *real* gradient? We take a small MLP on
# scikit-learn's digits, compute one gradient per simulated worker (each on its own mini-batch), and let
# every compressor aggregate them exactly as its protocol would across workers
# (`studykit.compressors.simulate`). For each we report the bytes one worker puts on the wire, the
# compression ratio against an fp32 all-reduce, how far the aggregate is from the exact average, and a
# picture of what survives.

# %% tags=["parameters"]
compressors: list = ["none", "fp16", "bf16", "quantize", "qsgd", "terngrad", "natural", "signsgd", "ef_signsgd", "thc", "topk", "topk_chunked", "mstopk", "dgc", "randomk", "powersgd", "atomo"]  # names from studykit.compressors.available(); full specs (studykit.compressors.parse_spec syntax) also work
ratio: float = 0.05  # fraction of entries the sparsifiers keep (topk, topk_chunked, mstopk, dgc, randomk), for bare names
rank: int = 2  # rank of the low-rank methods (powersgd, atomo), for bare names
bits: int = 4  # bits per entry of quantize and thc, for bare names
world_size: int = 4  # simulated workers
batch_size: int = 32  # mini-batch per worker
hidden: int = 64  # hidden units of the MLP (its first weight is hidden x 64)
seed: int = 0  # data order and initialisation

# %%
from studykit import compressors as C
from studykit.lessons import gallery
from studykit.plots import theme
from studykit.plots.lessons import plot_survivors, plot_tradeoff

theme()
# papermill's --help-notebook cannot read a default containing "=", so shared values fill in bare names here
shared = {"ratio": ratio, "rank": rank, "bits": bits}
available = [s if ":" in s else C.spec_string(s, {k: v for k, v in shared.items() if v != C.parameters(s).get(k, v)})
             for s in compressors if s.partition(":")[0] in C.available()]
missing = sorted(s for s in compressors if s.partition(":")[0] not in C.available())
grads, names = gallery.digits_gradients(world_size, batch_size, hidden, seed)
print(f"{world_size} workers; tensors: " + ", ".join(f"{n} {tuple(t.shape)}" for n, t in zip(names, grads[0])))
if missing:
    print("not available here:", missing)

# %% [markdown]
# ## Wire bytes, ratio and error
# `rel_error` is ‖estimate − exact average‖ / ‖exact average‖ after one aggregation step (for methods
# with error feedback, the first step, before any residual is carried over).

# %%
table = gallery.compare(available, grads)
table.sort_values("ratio")

# %%
fig, axes = plot_tradeoff(table)

# %% [markdown]
# ## What survives
# The first layer's gradient (hidden × 64 inputs): the exact average, then each compressor's estimate,
# all on one colour scale. Sparsifiers keep a few large entries, quantizers keep signs and coarse levels,
# low-rank methods keep the dominant row/column structure.

# %%
fig, axes = plot_survivors(available, grads, tensor_index=0)
