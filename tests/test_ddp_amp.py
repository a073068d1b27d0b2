"""inf/NaN gradients through the DDP hook and the post-backward reducer (mixed precision: ``GradScaler`` must
see them and skip the step, and training must go on after it), the finite check as an option, and
``start_iter``'s plain all-reduce before compression."""
import os
import tempfile
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from studykit import compressors as C
from studykit import ddp as sk_ddp
from studykit.comm import LocalComm, SimGroup
from studykit.compressors import CompressorError
from studykit.compressors.base import all_finite, views
from studykit.compressors.simulate import Simulation
from tests.test_ddp import _Bucket, _data, _model

torch.set_num_threads(1)

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a GPU")])]
BAD = [float("inf"), float("-inf"), float("nan")]
#: a bucket of a matrix (PowerSGD, ATOMO compress it), a bias and a long vector (1 % of it is a few elements)
SHAPES = [(16, 8), (8,), (400,)]


def _params(seed: int):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g)) for s in SHAPES]


#: the parameters of bucket ``index`` (the same objects at every step: per-bucket state follows parameters)
PARAMS = [[torch.nn.Parameter(torch.empty(s)) for s in SHAPES] for _ in range(2)]


def _bucket(grad, index=0, last=True):
    bucket = _Bucket(PARAMS[index], index, last)
    bucket._buf = grad.clone()
    return bucket


def _hook_step(states, group, grads, index=0, last=True):
    """Every simulated worker's bucket ``grads[r]`` (a flat tensor) through ``compressor_hook`` (each state's own
    communication thread); returns what every worker's future holds. A hung protocol aborts the group."""
    futs = [sk_ddp.compressor_hook(state, _bucket(g, index, last)) for state, g in zip(states, grads)]
    deadline = time.monotonic() + 60
    while not all(f.done() for f in futs):
        if time.monotonic() > deadline:
            group.abort()
            pytest.fail("the hook's protocol did not finish on every worker")
        time.sleep(0.001)
    return [f.wait().clone() for f in futs]


def _workers(name, world_size=2, **kw):
    group = SimGroup(world_size)
    return [sk_ddp.HookState(C.get(name), comm=group.comm(r), **kw) for r in range(world_size)], group


def _grads(world_size, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    n = sum(torch.Size(s).numel() for s in SHAPES)
    return [torch.randn(n, generator=g).to(device) for _ in range(world_size)]


# ------------------------------------------------------------------------------ the compressors' own contract
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", C.available())
def test_compressors_that_say_they_keep_nonfinite_values_keep_them(name, device):
    """``keeps_nonfinite`` (class metadata): an inf/NaN in one worker's gradient leaves one in every worker's
    estimate of the raw protocol (on a GPU, through the fused kernels too). A new compressor that drops them
    must declare False (the hook then flags)."""
    comp = C.get(name)
    if not comp.keeps_nonfinite:
        pytest.skip(f"{name} declares keeps_nonfinite=False: the hook sends a flag for it")
    # on a GPU also ResNet-sized buffers, where the fused kernels pick their large-size methods
    for shapes in [SHAPES] + ([[(1024, 512), (512,), (1 << 20,)]] if device == "cuda" else []):
        n = sum(torch.Size(s).numel() for s in shapes)
        for case, (bad, pos) in enumerate([(b, p) for b in BAD for p in (0, n // 3, n - 1)]):
            g = torch.Generator().manual_seed(case)
            grads = [[torch.randn(s, generator=g).to(device) for s in shapes] for _ in range(2)]
            rank = case % 2
            flat = torch.cat([t.reshape(-1) for t in grads[rank]])
            flat[pos] = bad
            grads[rank] = [v.clone() for v in views(flat, [torch.Size(s) for s in shapes])]
            out = Simulation(name, 2, allow_nonfinite=True).step(grads)
            for r, est in enumerate(out):
                assert not bool(all_finite(est)), f"{name}: {bad} at {pos} of {n} on rank {rank} lost on rank {r}"


# ------------------------------------------------------------------------------ the hook, every compressor
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", C.available())
def test_the_default_hook_passes_nonfinite_buckets_to_every_worker_and_recovers(name, device):
    """Default hook (no check), two workers: a bucket with inf/NaN on one worker comes back non-finite on every
    worker, with no exception; the next, finite step comes back finite (error-feedback residual and PowerSGD's
    warm start are not left poisoned), also after a NaN on the other worker."""
    states, group = _workers(name)
    assert all(s.compressor.allow_nonfinite for s in states), "the default hook must not check (a host sync)"
    for step, (bad, rank) in enumerate([(None, 0), (float("inf"), 0), (None, 0), (float("nan"), 1), (None, 0)]):
        grads = _grads(2, seed=step, device=device)
        if bad is not None:
            grads[rank][37] = bad
        outs = _hook_step(states, group, grads)
        for r, out in enumerate(outs):
            finite = bool(torch.isfinite(out).all())
            if bad is None:
                assert finite, f"{name}: step {step} after an overflow is not finite on worker {r}"
            else:
                assert not finite, f"{name}: {bad} on worker {rank} was lost on worker {r} (GradScaler would step)"
    for s in states:
        s.close()


@pytest.mark.parametrize("name", ["powersgd", "topk", "randomk", "atomo", "signsgd"])
def test_coalesced_buckets_pass_nonfinite_values_and_recover(name):
    """``coalesce_mb=0``: two buckets as one protocol run; an inf in one worker's second bucket reaches that
    bucket on every worker, and the next iteration is finite."""
    states, group = _workers(name, coalesce_mb=0)
    for step, bad in enumerate([None, float("inf"), None]):
        g0, g1 = _grads(2, seed=2 * step), _grads(2, seed=2 * step + 1)
        if bad is not None:
            g1[1][3] = bad  # the second bucket of worker 1
        futs = []
        for state, (a, b) in zip(states, zip(g0, g1)):
            for index, g in enumerate((a, b)):
                futs.append(sk_ddp.compressor_hook(state, _bucket(g, index, last=index == 1)))
        outs = [f.wait() for f in futs]
        finite = [bool(torch.isfinite(o).all()) for o in outs]
        if bad is None:
            assert all(finite), (name, step, finite)
        else:  # worker r's second bucket: futs[2 * r + 1]
            assert not finite[1] and not finite[3], (name, finite)


@pytest.mark.parametrize("name", ["topk", "powersgd", "randomk", "atomo", "ef_signsgd", "fp16"])
def test_post_backward_reducer_passes_nonfinite_values_and_recovers(name):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    reducer = sk_ddp.PostBackwardReducer(model, name, comm=LocalComm())
    assert reducer.compressor.allow_nonfinite
    for step, bad in enumerate([None, float("nan"), None, float("inf"), None]):
        for i, p in enumerate(model.parameters()):
            p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(10 * step + i))
        if bad is not None:
            model[1].weight.grad[2, 3] = bad
        reducer.reduce()
        finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
        assert finite == (bad is None), (name, step, bad)


def test_an_overflow_forgets_the_residual_and_the_warm_start_at_the_next_call():
    state = sk_ddp.HookState(C.get("powersgd", rank=2), comm=LocalComm(), overlap=False)
    comp = state.compressor
    params = _params(0)
    sk_ddp.compressor_hook(state, _Bucket(params)).wait()
    assert 0 in comp.memory.residuals and 0 in comp.state
    bad = _Bucket(params)
    bad._buf[5] = float("inf")
    assert not bool(torch.isfinite(sk_ddp.compressor_hook(state, bad).wait()).all())
    assert not bool(all_finite(comp.memory.residuals[0])), "expected the overflow to reach the residual"
    out = sk_ddp.compressor_hook(state, _Bucket(params)).wait()
    assert bool(torch.isfinite(out).all())
    assert bool(all_finite(comp.memory.residuals[0])) and bool(torch.isfinite(comp.state[0]["q"]).all())
    # a finite step keeps its residual and warm start (they are forgotten only after a non-finite result)
    q = comp.state[0]["q"]
    sk_ddp.compressor_hook(state, _Bucket(params)).wait()
    assert comp.state[0]["q"] is q


# ------------------------------------------------------------------------------ check_finite, bad input
def test_check_finite_true_raises_with_its_message():
    params = _params(0)
    for name in ("topk", "fp16", "powersgd", "randomk"):
        bucket = _Bucket(params)
        bucket._buf[3] = float("nan")
        state = sk_ddp.HookState(C.get(name), comm=LocalComm(), check_finite=True)
        assert not state.compressor.allow_nonfinite
        with pytest.raises(CompressorError, match="tensor 0 contains NaN or Inf"):
            sk_ddp.compressor_hook(state, bucket).wait()
        state.close()
    model = torch.nn.Linear(4, 2)
    reducer = sk_ddp.PostBackwardReducer(model, "topk", comm=LocalComm(), check_finite=True)
    for p in model.parameters():
        p.grad = torch.full_like(p, float("inf"))
    with pytest.raises(CompressorError, match="contains NaN or Inf"):
        reducer.reduce()


class _FakeDDP:
    def register_comm_hook(self, state, hook):
        self.state, self.hook = state, hook


def test_register_lets_nonfinite_values_through_unless_asked_to_check():
    assert sk_ddp.register(_FakeDDP(), "powersgd", rank=4).compressor.allow_nonfinite
    assert not sk_ddp.register(_FakeDDP(), "powersgd", rank=4, check_finite=True).compressor.allow_nonfinite
    assert sk_ddp.register(_FakeDDP(), C.get("topk")).compressor.allow_nonfinite  # an instance too


@pytest.mark.parametrize("kw, match", [({"check_finite": "perhaps"}, "check_finite must be a boolean"),
                                       ({"allow_nonfinite": True}, "pass check_finite=True"),
                                       ({"start_iter": -1}, "start_iter must be an integer >= 0"),
                                       ({"start_iter": 1.5}, "start_iter must be an integer >= 0"),
                                       ({"start_iter": True}, "got True")])
def test_bad_finite_and_start_iter_options_are_refused_with_what_is_valid(kw, match):
    with pytest.raises(ValueError, match=match):
        sk_ddp.register(_FakeDDP(), "topk", **kw)


# ------------------------------------------------------------------------------ start_iter
def test_start_iter_averages_plainly_for_n_iterations_then_compresses():
    """Two buckets per iteration (the iteration counted at the last): iterations 0 and 1 give the exact average
    on every worker, iteration 2 the compressor's estimate (TopK 1 %: most elements zero)."""
    states, group = _workers("topk", start_iter=2)
    for it in range(3):
        for index in (0, 1):
            grads = _grads(2, seed=10 * it + index)
            outs = _hook_step(states, group, grads, index=index, last=index == 1)
            mean = (grads[0] + grads[1]) / 2
            for out in outs:
                if it < 2:
                    assert torch.allclose(out, mean, atol=1e-6), (it, index)
                else:
                    assert (out == 0).float().mean() > 0.9, "expected TopK's sparse estimate from iteration 2"
        assert all(s.iteration == min(it + 1, 2) for s in states)
    assert all(s.compressor.memory.residuals for s in states), "TopK's error feedback starts with compression"


# ------------------------------------------------------------------------------ gloo, two processes, GradScaler
AMP_CASES = [("powersgd", {"rank": 4}), ("topk", {"ratio": 0.01}), ("fp16", {}), ("atomo", {"rank": 2}),
             ("randomk", {"ratio": 0.01}), ("bf16", {}), ("signsgd", {}), ("ef_signsgd", {}),
             ("powersgd", {"rank": 4, "coalesce_mb": 0}), ("randomk", {"comm_kind": "ps"}),
             ("qsgd", {"overlap": False})]
#: (step, rank, value): inf on worker 0 at step 1, NaN on worker 1 at step 3; the other steps are finite
INJECT = {1: (0, float("inf")), 3: (1, float("nan"))}
STEPS = 5


def _amp_run(rank, name, kw):
    model = _model()
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)
    sk_ddp.register(ddp, name, **kw)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step_no = [0]

    def inject(g):  # before DDP reads the gradient: this worker's overflow
        hit = INJECT.get(step_no[0])
        if hit is None or hit[0] != rank:
            return g
        g = g.clone()
        g[0, 0] = hit[1]
        return g

    model[2].weight.register_hook(inject)
    x, y = _data(rank)
    out = []
    for step in range(STEPS):
        step_no[0] = step
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(ddp(x).float(), y)
        scaler.scale(loss).backward()
        finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
        before = [p.detach().clone() for p in model.parameters()]
        scale = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        changed = any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
        out.append({"finite": finite, "changed": changed, "scale": (scale, scaler.get_scale())})
    return out, [p.detach().clone() for p in model.parameters()]


def _plain_vs_start_iter(rank, n):
    """Gradients after backward, plain DDP and the hook with ``start_iter=n``, from the same model and data."""
    grads = {}
    for mode in ("plain", "hook"):
        model = _model()
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)
        if mode == "hook":
            sk_ddp.register(ddp, "topk", ratio=0.01, start_iter=n)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        x, y = _data(rank)
        grads[mode] = []
        for _ in range(n + 1):
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            grads[mode].append([p.grad.clone() for p in model.parameters()])
            opt.step()
    return grads


def _worker(rank, world_size, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        res = {"amp": {(name, tuple(sorted(kw.items()))): _amp_run(rank, name, kw) for name, kw in AMP_CASES},
               "start_iter": _plain_vs_start_iter(rank, 2)}
        torch.save(res, os.path.join(out_dir, f"r{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def gloo_runs():
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(2, os.path.join(tmp, "init"), tmp), nprocs=2, join=True)
        return [torch.load(os.path.join(tmp, f"r{r}.pt")) for r in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize("name, kw", AMP_CASES, ids=[f"{n}-{kw}" for n, kw in AMP_CASES])
def test_grad_scaler_skips_the_overflow_step_and_training_goes_on(gloo_runs, name, kw):
    """The default hook under ``GradScaler`` with an inf (worker 0) and a NaN (worker 1) injected: no exception;
    on every worker the scaler skips those steps (scale halves, parameters unchanged) and the next step is finite
    and applied (scale kept); the workers' models stay identical."""
    key = (name, tuple(sorted(kw.items())))
    for rank, run in enumerate(gloo_runs):
        steps, _ = run["amp"][key]
        for i, s in enumerate(steps):
            before, after = s["scale"]
            if i in INJECT:
                assert not s["finite"] and not s["changed"] and after == pytest.approx(before / 2), (rank, i, s)
            else:
                assert s["finite"] and s["changed"] and after == pytest.approx(before), (rank, i, s)
    for a, b in zip(gloo_runs[0]["amp"][key][1], gloo_runs[1]["amp"][key][1]):
        assert torch.allclose(a, b, atol=1e-6), f"{name}: the workers' models diverged"


@pytest.mark.slow
def test_start_iter_gives_plain_ddp_gradients_for_its_first_iterations(gloo_runs):
    for run in gloo_runs:
        plain, hook = run["start_iter"]["plain"], run["start_iter"]["hook"]
        for it in (0, 1):
            for a, b in zip(plain[it], hook[it]):
                assert torch.allclose(a, b, atol=1e-6), f"iteration {it}: not plain DDP's average"
        assert not all(torch.allclose(a, b, atol=1e-6) for a, b in zip(plain[2], hook[2])), "no compression at 2"


def test_a_compressor_swapped_into_the_state_follows_its_finite_policy():
    """A training loop may swap ``state.compressor`` (a new one checks by default): the hook's policy holds."""
    state = sk_ddp.HookState(C.get("topk"), comm=LocalComm(), overlap=False)
    state.compressor = C.get("topk", ratio=0.1)
    bucket = _Bucket(_params(0))
    bucket._buf[0] = float("inf")
    assert not bool(torch.isfinite(sk_ddp.compressor_hook(state, bucket).wait()).all())
    assert state.compressor.allow_nonfinite


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("name", ["powersgd", "topk", "dgc", "fp16"])
def test_the_default_hook_never_waits_for_the_gpu_on_finite_or_overflowing_buckets(name):
    """The pass-through costs no host synchronisation (``torch.cuda.set_sync_debug_mode("error")`` fails on
    one): a finite and an overflowing step after the first (workspace-building) call, through the communication
    thread; then the overflow's flag, read at the next call, forgets the poisoned state and the step is finite."""
    state = sk_ddp.HookState(C.get(name), comm=LocalComm())
    grads = _grads(1, seed=0, device="cuda")[0]
    bad = grads.clone()
    bad[11] = float("inf")
    sk_ddp.compressor_hook(state, _bucket(grads)).wait()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        outs = [sk_ddp.compressor_hook(state, _bucket(g)).wait() for g in (grads, bad)]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert bool(torch.isfinite(outs[0]).all()) and not bool(torch.isfinite(outs[1]).all())
    assert bool(torch.isfinite(sk_ddp.compressor_hook(state, _bucket(grads)).wait()).all())
    state.close()
