# %% [markdown]
# # Compressor gallery
#
# What does each gradient compressor from the papers do to a *real* gradient? We take a small MLP on
# scikit-learn's digits, compute one gradient per simulated worker (each on its own mini-batch), and let
# every compressor aggregate them exactly as its protocol would across workers
# (`studykit.compressors.simulate`). For each we report the bytes one worker puts on the wire, the
# compression ratio against an fp32 all-reduce, how far the aggregate is from the exact average, and a
# picture of what survives.

# %% parameters
compressors: list = ["none", "fp16", "bf16", "quantize:bits=4", "qsgd", "terngrad", "natural", "signsgd", "ef_signsgd", "thc", "topk:ratio=0.05", "topk_chunked:ratio=0.05", "mstopk:ratio=0.05", "dgc:ratio=0.05", "randomk:ratio=0.05", "powersgd:rank=2", "atomo:rank=2"]  # specs "name:key=value,..."; any name from studykit.compressors.available()
world_size: int = 4  # simulated workers
batch_size: int = 32  # mini-batch per worker
hidden: int = 64  # hidden units of the MLP (its first weight is hidden x 64)
seed: int = 0  # data order and initialisation

# %%
import matplotlib.pyplot as plt
from studykit import compressors as C, gallery
from studykit.plots import theme

theme()
available = [s for s in compressors if s.partition(":")[0] in C.available()]
missing = sorted(set(compressors) - set(available))
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
fig, ax = plt.subplots(figsize=(6, 4))
ax.scatter(table["ratio"], table["rel_error"])
for _, r in table.iterrows():
    ax.annotate(r["compressor"].split(":")[0], (r["ratio"], r["rel_error"]), fontsize=8)
ax.set_xscale("log")
ax.set_xlabel("compression ratio vs fp32 all-reduce (×)")
ax.set_ylabel("relative error of the aggregate")
ax.set_title("Bytes saved against accuracy of the aggregate (one step)");

# %% [markdown]
# ## What survives
# The first layer's gradient (hidden × 64 inputs): the exact average, then each compressor's estimate,
# all on one colour scale. Sparsifiers keep a few large entries, quantizers keep signs and coarse levels,
# low-rank methods keep the dominant row/column structure.

# %%
fig, axes = gallery.plot_survivors(available, grads, tensor_index=0)
