"""The kit's DDP hook in every common DDP configuration, two processes: ``static_graph=True``, gradient
accumulation under ``no_sync()``, ``gradient_as_bucket_view=True``, fp16 autocast with ``GradScaler``, bf16
parameters, frozen layers and a process group of one. On gloo always; on NCCL (with the graph runner too) where
two GPUs are present.

In each configuration every compressor's overlapped hook must finish (a hang fails the test after a deadline) and
give the parameters of the kit's blocking hook (``overlap=False``) in the same configuration; fp16, exact up to its
rounding, must give the parameters of DDP without a hook."""
import contextlib
import os
import tempfile

import pytest
import torch
import torch.distributed as dist

from studykit import ddp as sk_ddp
from tests.conftest import spawn_until

torch.set_num_threads(1)

#: id -> (compressor, its parameters)
CASES = {"topk": ("topk", {}), "dgc": ("dgc", {}), "qsgd": ("qsgd", {}), "powersgd": ("powersgd", {"rank": 2}),
         "fp16": ("fp16", {}), "quantize": ("quantize", {"bits": 8})}
#: id -> DDP's keywords; the other configurations differ in the training loop or the model
#: (no_sync: MICRO_BATCHES per step; fp16_autocast: GradScaler; bf16_params: the model in bfloat16;
#: frozen: FROZEN layers without gradients; world_size_1: each rank alone in a process group of one)
CONFIGS = {"default": {}, "static_graph": {"static_graph": True}, "no_sync": {},
           "bucket_view": {"gradient_as_bucket_view": True}, "fp16_autocast": {}, "bf16_params": {}, "frozen": {},
           "world_size_1": {}}
SIDE, LAYERS, STEPS, MICRO_BATCHES = 16, 4, 6, 3
FROZEN = (0, 2)
#: fp16_autocast: (step, rank) whose last layer's gradient gets an inf (GradScaler must skip that step everywhere)
OVERFLOW = (2, 0)
INIT_SCALE = 2.0**8
#: about one layer (weight and bias) per bucket: several buckets per step
BUCKET_MB = (SIDE + 1) * SIDE * 4 / 2**20
DEADLINE_S = 300
BACKENDS = ["gloo", pytest.param("nccl", marks=[pytest.mark.gpu, pytest.mark.skipif(
    torch.cuda.device_count() < 2, reason="needs two GPUs")])]
#: how the kit's hook runs, as register's keywords ("graph": CUDA only)
MODES = {"overlap": {}, "blocking": {"overlap": False}, "graph": {"runner": "graph"}}


class _Net(torch.nn.Module):
    """LAYERS square layers with biases; ``frozen``: the FROZEN ones take no gradient."""

    def __init__(self, frozen: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(SIDE, SIDE) for _ in range(LAYERS))
        for i in FROZEN if frozen else ():
            self.layers[i].requires_grad_(False)

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def _train(rank, device, config, groups, name=None, params=None, mode="plain"):
    """STEPS of SGD through DDP in ``config`` (``mode`` "plain": no hook, else a key of MODES); returns the
    parameters (float32, on the CPU), whether every frozen parameter was left without a gradient, and the
    GradScaler's final scale (None without one)."""
    net = _Net(frozen=config == "frozen").to(device)
    dtype = torch.bfloat16 if config == "bf16_params" else torch.float32
    net = net.to(dtype)
    group = groups[rank] if config == "world_size_1" else None
    ddp = torch.nn.parallel.DistributedDataParallel(
        net, device_ids=[device.index] if device.type == "cuda" else None, process_group=group,
        bucket_cap_mb=BUCKET_MB, **CONFIGS[config])
    state = None if mode == "plain" else sk_ddp.register(ddp, name, **MODES[mode], **params)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device.type, init_scale=INIT_SCALE) if config == "fp16_autocast" else None
    step_no = [0]

    def overflow(grad):  # before DDP reads the gradient: this rank's overflow at OVERFLOW's step
        return grad if (step_no[0], rank) != OVERFLOW else torch.full_like(grad, float("inf"))

    if scaler is not None:
        net.layers[-1].weight.register_hook(overflow)
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(12 * MICRO_BATCHES, SIDE, generator=g).to(device, dtype)
    y = torch.randn(12 * MICRO_BATCHES, SIDE, generator=g).tanh().to(device, dtype)
    micro = MICRO_BATCHES if config == "no_sync" else 1
    for step in range(STEPS):
        step_no[0] = step
        opt.zero_grad()
        for m, (xs, ys) in enumerate(zip(x.chunk(micro), y.chunk(micro))):
            with ddp.no_sync() if m < micro - 1 else contextlib.nullcontext(), \
                    torch.autocast(device.type, dtype=torch.float16, enabled=scaler is not None):
                loss = torch.nn.functional.mse_loss(ddp(xs).float(), ys.float())
            (loss if scaler is None else scaler.scale(loss)).backward()
        if scaler is None:
            opt.step()
        else:
            scaler.step(opt)
            scaler.update()
    if device.type == "cuda":
        torch.cuda.synchronize()
    if state is not None:
        state.close()
    no_grad = all(p.grad is None for p in net.parameters() if not p.requires_grad)
    scale = None if scaler is None else scaler.get_scale()
    return [p.detach().float().cpu() for p in net.parameters()], no_grad, scale


def _worker(rank, world_size, backend, init_file, out_dir):
    torch.set_num_threads(1)
    if backend == "nccl":
        os.environ["NCCL_NVLS_ENABLE"] = "0"
        torch.cuda.set_device(rank)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        groups = [dist.new_group([r]) for r in range(world_size)]  # every rank joins the creation of each
        modes = [m for m in MODES if m != "graph" or backend == "nccl"]
        res = {}
        for config in CONFIGS:
            runs = [(config, None, "plain")] + [(config, case, m) for case in CASES for m in modes]
            for config, case, mode in runs:
                with open(os.path.join(out_dir, f"progress{rank}"), "w") as f:
                    f.write(f"{config} {case} {mode}")  # what a hang was in
                name, params = CASES[case] if case is not None else (None, None)
                res[(config, case, mode)] = _train(rank, device, config, groups, name, params, mode)
        torch.save(res, os.path.join(out_dir, f"r{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module", params=BACKENDS)
def runs(request):
    """Every configuration, compressor and mode on two processes of ``request.param``'s backend: one dict of
    (config, case, mode) -> what :func:`_train` returns, per rank."""
    backend = request.param
    with tempfile.TemporaryDirectory() as tmp:
        spawn_until(_worker, (2, backend, os.path.join(tmp, "init"), tmp), tmp, DEADLINE_S,
                    f"{backend}: DDP with the kit's hook")
        return backend, [torch.load(os.path.join(tmp, f"r{r}.pt")) for r in range(2)]


def _tol(config, backend):
    """allclose's (rtol, atol) for two runs of the same arithmetic in ``config``."""
    if config == "bf16_params":
        return 2.0**-7, 1e-3
    return (1e-4, 1e-5) if backend == "nccl" else (1e-5, 1e-6)


def _hook_modes(runs):
    """The modes of the kit's hook that ``runs`` holds besides the blocking one (the reference)."""
    ran = {key[2] for key in runs[1][0]}
    return [m for m in MODES if m in ran and m != "blocking"]


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("config", list(CONFIGS))
def test_the_overlapped_hook_gives_the_blocking_hooks_parameters(runs, config, case):
    """Each configuration finished; the overlapped hook (and on NCCL the graph runner) gives the blocking hook's
    parameters, finite and trained, on both ranks; the ranks agree, except each alone in a group of one."""
    backend, res = runs
    rtol, atol = _tol(config, backend)
    initial = [p.detach() for p in _Net().parameters()]
    for rank in range(2):
        ref = res[rank][(config, case, "blocking")][0]
        assert any(not torch.allclose(a, b) for a, b in zip(ref, initial)), f"{config}/{case}: nothing trained"
        for mode in _hook_modes(runs):
            got = res[rank][(config, case, mode)][0]
            for i, (a, b) in enumerate(zip(got, ref)):
                assert torch.isfinite(a).all(), f"{config}/{case}/{mode}: rank {rank}: parameter {i} not finite"
                assert torch.allclose(a, b, rtol=rtol, atol=atol), \
                    f"{config}/{case}/{mode}: rank {rank}: parameter {i} differs from the blocking hook's " \
                    f"by {(a - b).abs().max():.3g}"
    for mode in ["blocking"] + _hook_modes(runs):
        same = all(torch.allclose(a, b, rtol=rtol, atol=atol)
                   for a, b in zip(res[0][(config, case, mode)][0], res[1][(config, case, mode)][0]))
        if config == "world_size_1":
            assert not same, f"{case}/{mode}: in groups of one the ranks (other data) trained alike: the hook " \
                             f"averaged over the world instead of DDP's process group"
        else:
            assert same, f"{config}/{case}/{mode}: the ranks' parameters diverged"


@pytest.mark.slow
@pytest.mark.parametrize("config", list(CONFIGS))
def test_the_fp16_hook_gives_plain_ddps_parameters_within_fp16_rounding(runs, config):
    """fp16 (the gradient rounded to half precision, summed, averaged) against DDP without a hook: the same
    parameters up to fp16's rounding of each step's gradient (bf16 parameters: up to bf16's)."""
    backend, res = runs
    rtol, atol = (2.0**-7, 1e-4) if config == "bf16_params" else (0.0, 1e-4)
    for rank in range(2):
        plain = res[rank][(config, None, "plain")][0]
        for mode in ["blocking"] + _hook_modes(runs):
            got = res[rank][(config, "fp16", mode)][0]
            for i, (a, b) in enumerate(zip(got, plain)):
                assert torch.allclose(a, b, rtol=rtol, atol=atol), \
                    f"{config}/{mode}: rank {rank}: parameter {i} is {(a - b).abs().max():.3g} from plain DDP's"


@pytest.mark.slow
@pytest.mark.parametrize("config", ["static_graph", "bucket_view"])
def test_static_graph_and_bucket_views_train_as_default_ddp(runs, config):
    """``static_graph`` and ``gradient_as_bucket_view`` change how DDP runs, not what it computes: a run (the
    blocking hook, the reference, included) gives the parameters of the same run in the default configuration.
    Under ``static_graph`` DDP rebuilds its buckets one iteration later, so only what does not depend on the
    bucket layout is compared there: DDP without a hook and fp16 (element-wise)."""
    backend, res = runs
    rtol, atol = _tol(config, backend)
    for key in [k for k in res[0] if k[0] == config and (config != "static_graph" or k[1] in (None, "fp16"))]:
        for rank in range(2):
            for a, b in zip(res[rank][key][0], res[rank][("default",) + key[1:]][0]):
                assert torch.allclose(a, b, rtol=rtol, atol=atol), f"{key}: rank {rank} != default DDP"


@pytest.mark.slow
def test_frozen_layers_keep_their_weights_and_get_no_gradient(runs):
    backend, res = runs
    initial = [p.detach() for p in _Net(frozen=True).parameters()]
    frozen = [i for i, p in enumerate(_Net(frozen=True).parameters()) if not p.requires_grad]
    assert frozen
    for key in [k for k in res[0] if k[0] == "frozen"]:
        for rank in range(2):
            params, no_grad, _ = res[rank][key]
            assert no_grad, f"{key}: rank {rank}: a frozen parameter got a gradient"
            for i in frozen:
                assert torch.equal(params[i], initial[i]), f"{key}: rank {rank}: frozen parameter {i} changed"


@pytest.mark.slow
def test_grad_scaler_skips_one_ranks_fp16_overflow_on_every_rank(runs):
    """fp16 autocast, an inf in one rank's gradient at one step: with every compressor, overlapped or not, the
    scaler on both ranks sees it and skips that step alone (its scale halves once), as without a hook."""
    backend, res = runs
    for key in [k for k in res[0] if k[0] == "fp16_autocast"]:
        for rank in range(2):
            assert res[rank][key][2] == pytest.approx(INIT_SCALE / 2), f"{key}: rank {rank}: scale {res[rank][key][2]}"
