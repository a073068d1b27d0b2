"""How the overlapped hook runs a bucket's protocol (``studykit.ddp.register(..., runner=...)``): on the communication
thread, or as a CUDA graph captured per bucket and replayed from DDP's callback. The graph runner must give the
thread's results; the graph runner must keep a graph only where a replay is the next call (no host-seeded
randomness, state kept in the same tensors) and recapture when DDP rebuilds its buckets."""
import os
import tempfile
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from studykit import compressors as C
from studykit import ddp as sk_ddp
from studykit.comm import LocalComm
from studykit.ddp.hook import CAPTURE_AFTER
from tests.test_ddp import _Bucket as _DDPBucket

torch.set_num_threads(1)

SHAPES = [(16, 8), (8,), (400,)]
GPU = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]


def _Bucket(params, buf, index=0, last=True):
    """What DDP hands a comm hook, with ``buf`` as its buffer: one tensor that stays the same from call to call
    (DDP's bucket buffer after its rebuild)."""
    bucket = _DDPBucket(params, index, last)
    bucket._buf = buf
    return bucket


def _grad(seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(sum(torch.Size(s).numel() for s in SHAPES), generator=g).to(device)


PARAMS = [torch.nn.Parameter(torch.empty(s)) for s in SHAPES]


# ------------------------------------------------------------------------------------------ validation
@pytest.mark.parametrize("kw, match", [
    ({"runner": "inline"}, "runner must be one of thread, graph, got 'inline'"),
    ({"runner": "graph", "overlap": False}, "needs overlap=True"),
])
def test_a_bad_runner_is_refused_with_the_valid_choices(kw, match):
    with pytest.raises(ValueError, match=match):
        sk_ddp.HookState(C.get("powersgd"), comm=LocalComm(), **kw)


# ------------------------------------------------------------------------------------------ graph (one GPU)
def _steps(state, buf, grads, index=0):
    outs = []
    for g in grads:
        buf.copy_(g)
        outs.append(sk_ddp.compressor_hook(state, _Bucket(PARAMS, buf, index)).wait().clone())
        torch.cuda.synchronize()  # an overflow's note lands before the next call reads it
        _until_idle(state)
    return outs


def _until_idle(state):
    """The thread completes a future just before it counts the job done: wait for the count (the graph runner
    captures and replays only with the thread idle)."""
    deadline = time.monotonic() + 10
    while not state.idle() and time.monotonic() < deadline:
        time.sleep(0.0005)


@pytest.mark.parametrize("name", C.available())
@pytest.mark.parametrize("marks", [pytest.param(None, marks=GPU)])
def test_the_graph_runner_gives_the_threads_results_and_keeps_graphs_only_where_replays_are_right(name, marks):
    """One GPU (LocalComm): eight steps through the thread and through the graph runner, with a buffer that stays
    the same tensor; the same average at every step. A protocol that draws host-seeded random numbers keeps no
    graph (it runs eagerly after its capture); PowerSGD, TopK, the identity and the codecs whose fused kernels
    seed their random numbers from the step on the device keep one."""
    grads = [_grad(s, "cuda") for s in range(8)]
    ref_state = sk_ddp.HookState(C.get(name), comm=LocalComm())
    ref = _steps(ref_state, torch.zeros_like(grads[0]), grads[:-1])
    draws = ref_state.compressor.random_draws
    ref += _steps(ref_state, torch.zeros_like(grads[0]), grads[-1:])
    draws_every_call = ref_state.compressor.random_draws > draws
    state = sk_ddp.HookState(C.get(name), comm=LocalComm(), runner="graph")
    got = _steps(state, torch.zeros_like(grads[0]), grads)
    for step, (a, b) in enumerate(zip(ref, got)):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True), f"{name}: step {step} differs"
    entry = state._graphs.get(0)
    assert entry is not None, f"{name}: not captured after {CAPTURE_AFTER} calls with one buffer"
    if draws_every_call:
        assert entry.graph is None, f"{name} draws host-seeded random numbers: a replay would repeat them"
    if name in ("powersgd", "topk", "none", "quantize", "qsgd", "terngrad", "natural", "thc", "randomk", "mstopk"):
        assert entry.graph is not None, f"{name}: no graph kept"
    assert state.calls == len(grads)
    ref_state.close()
    state.close()


@pytest.mark.parametrize("marks", [pytest.param(None, marks=GPU)])
def test_replayed_buckets_never_wait_for_the_gpu_and_recover_after_an_overflow(marks):
    """Once captured, a PowerSGD bucket replays without a host synchronisation (sync-debug mode "error"); an inf
    comes back as a non-finite average, the next call forgets the poisoned warm start and residual (eagerly),
    the bucket is captured again and later steps match the thread runner's."""
    grads = [_grad(s, "cuda") for s in range(12)]
    grads[6] = grads[6].clone()
    grads[6][5] = float("inf")
    ref = _steps(sk_ddp.HookState(C.get("powersgd"), comm=LocalComm()), torch.zeros_like(grads[0]), grads)
    state = sk_ddp.HookState(C.get("powersgd"), comm=LocalComm(), runner="graph")
    buf = torch.zeros_like(grads[0])
    got = _steps(state, buf, grads[:CAPTURE_AFTER + 1])
    torch.cuda.set_sync_debug_mode("error")
    try:
        got += _steps_nosync(state, buf, grads[CAPTURE_AFTER + 1:7])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    got += _steps(state, buf, grads[7:])
    assert not bool(torch.isfinite(got[6]).all()), "the overflow was lost (GradScaler would step)"
    for step in [s for s in range(12) if s != 6]:
        assert torch.allclose(ref[step], got[step], rtol=1e-5, atol=1e-6), f"step {step} differs"
    assert state._graphs[0].graph is not None, "not captured again after the overflow"


def _steps_nosync(state, buf, grads):
    outs = []
    for g in grads:
        buf.copy_(g)
        fut = sk_ddp.compressor_hook(state, _Bucket(PARAMS, buf))
        outs.append(fut.wait().clone())  # a replay completes the future in the hook: no wait for the device
    torch.cuda.synchronize()
    return outs


class _Syncing(C.get("none").__class__):
    """The identity, but its protocol reads a value on the host (a synchronisation no graph can capture)."""
    name = "syncing_test_only"

    def _reduce(self, tensors, comm, key, return_local):
        self.seen = float(tensors[0].sum())
        return super()._reduce(tensors, comm, key, return_local)


@pytest.mark.parametrize("marks", [pytest.param(None, marks=GPU)])
def test_a_protocol_that_cannot_be_captured_runs_eagerly_and_leaves_random_numbers_working(marks):
    """A capture that fails (the protocol waits for the device) leaves the bucket eager, with the right averages,
    and the default generator usable: dropout after it works (a failed capture used to leave the generator in
    capture mode, failing the next dropout)."""
    grads = [_grad(s, "cuda") for s in range(6)]
    state = sk_ddp.HookState(_Syncing(allow_nonfinite=True), comm=LocalComm(), runner="graph")
    got = _steps(state, torch.zeros_like(grads[0]), grads)
    assert state._graphs[0].graph is None, "a capture that cannot succeed left a graph"
    for step, (g, out) in enumerate(zip(grads, got)):
        assert torch.allclose(g, out), f"step {step}: the identity changed the gradient"
    torch.nn.functional.dropout(torch.ones(64, device="cuda"), 0.5)
    torch.cuda.synchronize()


@pytest.mark.parametrize("marks", [pytest.param(None, marks=GPU)])
def test_a_new_bucket_buffer_is_captured_again(marks):
    """DDP rebuilds its buckets after the first iteration: a bucket index with a new buffer drops its graph, runs
    eagerly, is captured again, and replays write into the new buffer."""
    grads = [_grad(s, "cuda") for s in range(10)]
    ref = _steps(sk_ddp.HookState(C.get("topk"), comm=LocalComm()), torch.zeros_like(grads[0]), grads)
    state = sk_ddp.HookState(C.get("topk"), comm=LocalComm(), runner="graph")
    old = torch.zeros_like(grads[0])  # kept alive: the new buffer must not get its address
    got = _steps(state, old, grads[:5])
    first = state._graphs[0]
    new = torch.zeros_like(grads[0])
    got += _steps(state, new, grads[5:])
    assert state._graphs[0] is not first and state._graphs[0].ptr == new.data_ptr()
    for step, (a, b) in enumerate(zip(ref, got)):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), f"step {step} differs"


@pytest.mark.parametrize("marks", [pytest.param(None, marks=GPU)])
def test_close_frees_the_captured_graphs_and_the_hook_captures_again_after_it(marks):
    """close() drops the captured buckets (their collectives hold NCCL's communicator, which
    destroy_process_group cannot free while a graph lives); the hook goes on afterwards, capturing again, with the
    thread runner's results."""
    grads = [_grad(s, "cuda") for s in range(10)]
    ref_state = sk_ddp.HookState(C.get("topk"), comm=LocalComm())
    ref = _steps(ref_state, torch.zeros_like(grads[0]), grads)
    state = sk_ddp.HookState(C.get("topk"), comm=LocalComm(), runner="graph")
    buf = torch.zeros_like(grads[0])
    got = _steps(state, buf, grads[:5])
    assert state._graphs and state._graphs[0].graph is not None
    state.close()
    assert not state._graphs and not state._streak
    got += _steps(state, buf, grads[5:])
    assert state._graphs[0].graph is not None
    for step, (a, b) in enumerate(zip(ref, got)):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), f"step {step} differs"
    ref_state.close()
    state.close()


# ------------------------------------------------------------------------------------------ coalesced groups
PARAMS2 = [torch.nn.Parameter(torch.empty(s)) for s in SHAPES]


def _group_steps(state, bufs, grads):
    """One step: bucket 0 (not the last) then bucket 1 (the iteration's last) of ``bufs`` filled from the pair in
    ``grads``; returns each step's two averages."""
    outs = []
    for g0, g1 in grads:
        bufs[0].copy_(g0)
        bufs[1].copy_(g1)
        futs = [sk_ddp.compressor_hook(state, _Bucket(params, buf, i, last=i == 1))
                for i, (params, buf) in enumerate(zip((PARAMS, PARAMS2), bufs))]
        outs.append([f.wait().clone() for f in futs])
        if bufs[0].is_cuda:
            torch.cuda.synchronize()
        _until_idle(state)
    return outs


def test_the_graph_runner_with_coalescing_runs_the_threads_way_on_the_cpu():
    """On the CPU the graph runner of a coalesced hook gives the thread runner's averages (nothing to capture)."""
    grads = [(_grad(s), _grad(100 + s)) for s in range(4)]
    ref = _group_steps(sk_ddp.HookState(C.get("powersgd"), comm=LocalComm(), coalesce_mb=0),
                       [torch.zeros_like(grads[0][0]) for _ in range(2)], grads)
    state = sk_ddp.HookState(C.get("powersgd"), comm=LocalComm(), coalesce_mb=0, runner="graph")
    got = _group_steps(state, [torch.zeros_like(grads[0][0]) for _ in range(2)], grads)
    for step, (a, b) in enumerate(zip(ref, got)):
        for x, y in zip(a, b):
            assert torch.allclose(x, y, rtol=1e-5, atol=1e-6), f"step {step} differs"
    assert not state._graphs


@pytest.mark.parametrize("name", ["powersgd", "topk", "none", "quantize", "qsgd", "fp16"])
@pytest.mark.parametrize("marks", [pytest.param(None, marks=GPU)])
def test_the_graph_runner_captures_a_coalesced_group_as_one_graph_with_the_threads_results(name, marks):
    """One GPU (LocalComm), two buckets coalesced per iteration (``coalesce_mb=0``): the graph runner's averages
    equal the thread's at every step; the group is kept under one key, with a graph unless the protocol draws
    host-seeded random numbers at every call."""
    grads = [(_grad(s, "cuda"), _grad(100 + s, "cuda")) for s in range(8)]
    ref_state = sk_ddp.HookState(C.get(name), comm=LocalComm(), coalesce_mb=0)
    bufs = [torch.zeros_like(grads[0][0]) for _ in range(2)]
    ref = _group_steps(ref_state, bufs, grads[:-1])
    draws = ref_state.compressor.random_draws
    ref += _group_steps(ref_state, bufs, grads[-1:])
    draws_every_call = ref_state.compressor.random_draws > draws
    state = sk_ddp.HookState(C.get(name), comm=LocalComm(), coalesce_mb=0, runner="graph")
    got = _group_steps(state, [torch.zeros_like(grads[0][0]) for _ in range(2)], grads)
    for step, (a, b) in enumerate(zip(ref, got)):
        for x, y in zip(a, b):
            assert torch.allclose(x, y, rtol=1e-5, atol=1e-6, equal_nan=True), f"{name}: step {step} differs"
    assert list(state._graphs) == [("group", 0, 1)], f"{name}: the group was not captured under its key"
    assert (state._graphs[("group", 0, 1)].graph is None) == draws_every_call, f"{name}: wrong graph kept"
    assert state.calls == len(grads)
    ref_state.close()
    state.close()


# ------------------------------------------------------------------------------------------ graph (two GPUs, NCCL)
def _ddp_worker(rank, world_size, port, name, out_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_NVLS_ENABLE="0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    try:
        finals = {}
        for runner, coalesce in (("thread", None), ("graph", None), ("thread_c0", 0), ("graph_c0", 0)):
            torch.manual_seed(0)
            net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                                      torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
            ddp = torch.nn.parallel.DistributedDataParallel(net, device_ids=[rank], bucket_cap_mb=0.03)
            state = sk_ddp.register(ddp, name, runner=runner.split("_")[0], coalesce_mb=coalesce)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
            g = torch.Generator(device="cuda").manual_seed(rank)
            for _ in range(10):
                x = torch.randn(32, 64, device="cuda", generator=g)
                loss = ddp(x).square().mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            torch.cuda.synchronize()
            finals[runner] = [p.detach().cpu() for p in net.parameters()]
            finals[runner + "_graphs"] = sum(e.graph is not None for e in state._graphs.values())
            state.close()
        torch.save(finals, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.barrier()
        dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("name", ["powersgd", "topk", "ef_signsgd", "qsgd", "none"])
def test_ddp_on_two_gpus_trains_the_same_through_replayed_graphs(name):
    """Real DDP on NCCL, a model of several buckets, 10 steps: the graph runner's parameters equal the thread
    runner's on both ranks (collectives captured in the graphs), per bucket and coalesced per iteration, and
    deterministic protocols were replayed (coalesced: one graph for the whole iteration)."""
    with tempfile.TemporaryDirectory() as out:
        port = 29500 + os.getpid() % 1000
        ctx = mp.spawn(_ddp_worker, args=(2, port, name, out), nprocs=2, join=False)
        deadline = time.monotonic() + 120
        while not ctx.join(timeout=5):
            if time.monotonic() > deadline:
                for proc in ctx.processes:
                    proc.kill()
                pytest.fail(f"{name}: DDP on two GPUs did not finish in 120 s")
        for rank in range(2):
            finals = torch.load(os.path.join(out, f"rank{rank}.pt"))
            for a, b in zip(finals["thread"], finals["graph"]):
                assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), f"{name}: rank {rank} trained differently"
            for a, b in zip(finals["thread_c0"], finals["graph_c0"]):
                assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), f"{name}: rank {rank}, coalesced differs"
            if name != "qsgd":
                assert finals["graph_c0_graphs"] == 1, f"{name}: the coalesced iteration was not one replayed graph"
            if name != "qsgd":  # qsgd draws host-seeded random numbers: eager (one-round "none" is captured too)
                assert finals["graph_graphs"] > 0, f"{name}: no bucket was replayed as a graph"


# ------------------------------------------------------------------------------------------ records
def test_graph_runner_records_are_hooks_of_their_own_not_an_unpriced_variant():
    """The model prices a graph-runner hook (its timeline without the host chain, verify's ``_bucket_costs``): its
    records are hooks like the thread's (``ddp_other`` for fits), and verify names their configurations apart."""
    from studykit.perfmodel.fit.records import normalize
    from studykit.perfmodel.verify.platform import _label

    recs = [{"kind": "ddp", "status": "ok", "mode": "hook", "compressor": "powersgd", "hook_runner": runner,
             "ms_median": 40.0} for runner in (None, "graph")]
    assert list(normalize(recs)["kind"]) == ["ddp_other", "ddp_other"]
    base = {"model": "resnet50", "batch_size": 64, "mode": "hook", "compressor": "powersgd", "params_key": "{}",
            "world_size": 2, "rate_gbps": 10.0}
    assert _label(base) == "resnet50 b64 hook powersgd p=2 10Gbps"
    assert _label({**base, "hook_runner": "graph"}) == "resnet50 b64 hook powersgd runner=graph p=2 10Gbps"
    assert _label({**base, "hook_runner": "thread"}) == _label(base)
