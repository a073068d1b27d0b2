"""Every compressor through DDP's comm hook and through the post-backward reducer, on gloo,
with several buckets; and training with a hook converges like training without one."""
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from studykit import compressors as C
from studykit import ddp as sk_ddp

torch.set_num_threads(1)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                               torch.nn.ReLU(), torch.nn.Linear(32, 1))


def _data(rank, n=64):
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(n, 8, generator=g)
    w = torch.linspace(-1, 1, 8)
    return x, (x @ w).unsqueeze(1)


def _train(mode, name, rank, steps, coalesce_mb=None):
    model = _model()
    opt_model = model
    state = None
    if mode == "hook":
        # tiny buckets -> several buckets per step
        opt_model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)
        if name is not None:
            state = sk_ddp.register(opt_model, name, coalesce_mb=coalesce_mb)
    elif mode == "post":
        state = sk_ddp.PostBackwardReducer(model, name, bucket_bytes=1000)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = _data(rank)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(opt_model(x), y)
        loss.backward()
        if mode == "post":
            state.reduce()
        opt.step()
        losses.append(loss.item())
    nbytes = state.bytes_sent if state is not None else 0
    calls = state.calls if state is not None else 0
    del opt_model, opt
    return losses, nbytes, calls, [p.detach().clone() for p in model.parameters()]


def _worker(rank, world_size, init_file, out_dir, names, steps):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        res = {("hook", None): _train("hook", None, rank, steps)}
        for name in names:
            for mode in ("hook", "post"):
                res[(mode, name)] = _train(mode, name, rank, steps)
        torch.save(res, os.path.join(out_dir, f"r{rank}.pt"))
        import gc
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _run(world_size, names, steps):
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(world_size, os.path.join(tmp, "init"), tmp, names, steps),
                 nprocs=world_size, join=True)
        return [torch.load(os.path.join(tmp, f"r{r}.pt")) for r in range(world_size)]


@pytest.fixture(scope="module")
def runs():
    return _run(2, C.available(), steps=60)


@pytest.mark.slow
def test_every_compressor_runs_as_hook_and_reducer_with_identical_models_on_all_ranks(runs):
    for key in runs[0]:
        assert key in runs[1]
        for a, b in zip(runs[0][key][3], runs[1][key][3]):
            assert torch.allclose(a, b, atol=1e-5), f"{key}: ranks' models diverged"
        if key[1] is not None:
            assert runs[0][key][1] > 0, f"{key}: no bytes counted"


@pytest.mark.slow
def test_hook_ran_over_several_buckets(runs):
    losses, nbytes, calls, _ = runs[0][("hook", "none")]
    assert calls > 60 + 50, "expected several buckets per step"


@pytest.mark.slow
def test_dense_hook_equals_plain_ddp(runs):
    plain = runs[0][("hook", None)][3]
    hooked = runs[0][("hook", "none")][3]
    for a, b in zip(plain, hooked):
        assert torch.allclose(a, b, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fp16", "powersgd", "ef_signsgd", "topk", "quantize"])
def test_training_with_a_hook_converges_like_uncompressed(runs, name):
    if name not in C.available():
        pytest.skip(f"{name} not available")
    base = runs[0][("hook", None)][0]
    for mode in ("hook", "post"):
        losses = runs[0][(mode, name)][0]
        assert losses[-1] < 0.2 * losses[0], f"{mode}/{name} did not converge: {losses[0]:.3f} -> {losses[-1]:.3f}"
        assert losses[-1] < max(5 * base[-1], 0.05), f"{mode}/{name} much worse than uncompressed"


class _Bucket:
    """What DDP hands a comm hook, without DDP: a flat buffer, its parameters, an index."""

    def __init__(self, params, index=0, last=True):
        self._params = params
        self._buf = torch.cat([p.detach().reshape(-1) for p in params])
        self._index = index
        self._last = last

    def is_last(self):
        return self._last

    def buffer(self):
        return self._buf

    def parameters(self):
        return self._params

    def index(self):
        return self._index


class _GatedComm:
    """World size 1; every collective waits until the test opens the gate."""

    rank, world_size = 0, 1

    def __init__(self):
        self.gate = __import__("threading").Event()
        self.calls = 0

    def all_reduce(self, t):
        assert self.gate.wait(10), "gate never opened"
        self.calls += 1
        return t

    def all_gather(self, t):
        assert self.gate.wait(10), "gate never opened"
        self.calls += 1
        return [t]


@pytest.mark.parametrize("name", ["fp16", "powersgd", "topk"])
def test_hook_returns_before_its_collectives_finish(name):
    """The overlapped hook hands the bucket to the communication thread and returns a pending future:
    the backward pass goes on while the collectives run; the future completes after the decode."""
    params = [torch.nn.Parameter(torch.randn(16, 8)), torch.nn.Parameter(torch.randn(8))]
    comm = _GatedComm()
    state = sk_ddp.HookState(C.get(name), comm=comm)
    bucket = _Bucket(params)
    fut = sk_ddp.compressor_hook(state, bucket)
    assert not fut.done(), "the hook waited for its collectives"
    comm.gate.set()
    out = fut.wait()
    assert comm.calls >= 1 and out.shape == bucket.buffer().shape and state.calls == 1
    from studykit.comm import LocalComm

    ref = sk_ddp.compressor_hook(sk_ddp.HookState(C.get(name), comm=LocalComm(), overlap=False), _Bucket(params)).wait()
    assert torch.allclose(out, ref), "overlapped and blocking hooks disagree"


class _AsyncComm(_GatedComm):
    """World size 1 with an asynchronous all-reduce whose futures the test completes."""

    def __init__(self):
        super().__init__()
        self.pending = []

    def all_reduce_async(self, t):
        fut = torch.futures.Future()
        self.pending.append((fut, t))
        return fut


@pytest.mark.parametrize("name", ["fp16", "bf16", "none"])
def test_one_round_codecs_chain_the_async_all_reduce_without_the_thread(name):
    """fp16 / bf16 / none: the hook encodes, issues the all-reduce asynchronously and decodes in the future's
    callback, as PyTorch's own hooks do: no communication thread, the same numbers as the blocking hook."""
    params = [torch.nn.Parameter(torch.randn(16, 8)), torch.nn.Parameter(torch.randn(8))]
    comm = _AsyncComm()
    state = sk_ddp.HookState(C.get(name), comm=comm)
    fut = sk_ddp.compressor_hook(state, _Bucket(params))
    assert not fut.done() and len(comm.pending) == 1 and state._worker is None
    for f, t in comm.pending:
        f.set_result([t])  # world size 1: the sum is the payload itself
    out = fut.wait()
    from studykit.comm import LocalComm

    ref = sk_ddp.compressor_hook(sk_ddp.HookState(C.get(name), comm=LocalComm(), overlap=False), _Bucket(params)).wait()
    assert torch.equal(out, ref) and state.calls == 1 and state.bytes_sent == comm.pending[0][1].numel() * \
        comm.pending[0][1].element_size()
    # multi-round or error-feedback protocols keep the thread
    assert not C.get("powersgd").one_round_allreduce and not C.get("fp16", error_feedback=True).one_round_allreduce


class _TwinComm:
    """World size 2 whose other worker holds the same gradient: an all-reduce doubles."""

    rank, world_size = 0, 2

    def all_reduce(self, t):
        return t * 2

    def all_gather(self, t):
        return [t, t]


@pytest.mark.parametrize("name", ["fp16", "bf16", "none"])
def test_one_round_codecs_outside_the_async_chain_decode_into_the_bucket(name):
    """A one-round codec run as one call of the protocol (a coalesced group of one bucket here; a bucket the graph
    runner captures on CUDA) decodes the average straight into the bucket: the values of ``Compressor.reduce``, one
    step counted, the payload's bytes sent."""
    params = [torch.nn.Parameter(torch.randn(16, 8)), torch.nn.Parameter(torch.randn(8))]
    state = sk_ddp.HookState(C.get(name), comm=_TwinComm(), coalesce_mb=0)
    into = []
    decode = state.compressor.decompress_mean_into
    state.compressor.decompress_mean_into = lambda s, c, w, out: into.append(out.data_ptr()) or decode(s, c, w, out)
    bucket = _Bucket(params)
    grad = bucket.buffer().clone()
    out = sk_ddp.compressor_hook(state, bucket).wait()
    ref = C.get(name).reduce(grad, _TwinComm())
    assert into == [bucket.buffer().data_ptr()] == [out.data_ptr()], "not decoded into the bucket"
    assert torch.allclose(out, ref, rtol=0, atol=0), f"{name}: {out[:4]} != {ref[:4]}"
    width = 4 if name == "none" else 2
    assert state.compressor.step == 1 and state.calls == 1 and state.bytes_sent == grad.numel() * width
    state.close()


def test_hook_error_reaches_the_future():
    class Broken(_GatedComm):
        def all_reduce(self, t):
            raise RuntimeError("link down")

    state = sk_ddp.HookState(C.get("fp16"), comm=Broken())
    fut = sk_ddp.compressor_hook(state, _Bucket([torch.nn.Parameter(torch.randn(4))]))
    with pytest.raises(RuntimeError, match="link down"):
        fut.wait()


def test_readme_hook_snippet_uses_the_real_api():
    """The README's 'compress your own DDP training' lines call what the package exports."""
    import ast
    import inspect
    import re

    import studykit
    from studykit import paths

    text = (paths.ROOT / "README.md").read_text()
    block = re.search(r"## Compress your own DDP training.*?```python\n(.*?)```", text, re.S).group(1)
    tree = ast.parse(block)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "studykit.ddp.register"]
    assert calls, "the snippet should call studykit.ddp.register"
    sig = inspect.signature(studykit.ddp.register)
    for call in calls:
        sig.bind(*[None] * len(call.args), **{k.arg: None for k in call.keywords})
        name = call.args[1].value
        assert name in C.available()
        own = set(sig.parameters)  # register's own options (runner, ...); the rest are the compressor's
        C.get(name, **{k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg not in own})
        for k in call.keywords:
            if k.arg == "runner":
                assert ast.literal_eval(k.value) in studykit.ddp.RUNNERS


def test_a_discarded_hook_state_stops_its_thread():
    import gc
    import threading

    from studykit.comm import LocalComm

    before = {t for t in threading.enumerate() if t.name == "studykit-ddp-comm"}
    state = sk_ddp.HookState(C.get("fp16"), comm=LocalComm())
    sk_ddp.compressor_hook(state, _Bucket([torch.nn.Parameter(torch.randn(8))])).wait()
    thread = state._worker._thread
    assert thread.is_alive()
    del state
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert {t for t in threading.enumerate() if t.name == "studykit-ddp-comm"} <= before


def _coalesce_worker(rank, world_size, init_file, out_dir, names, steps):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        res = {(name, mb): _train("hook", name, rank, steps, coalesce_mb=mb) for name in names for mb in (None, 0)}
        torch.save(res, os.path.join(out_dir, f"r{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_coalesced_hooks_run_one_protocol_per_iteration_and_train_alike_on_every_rank():
    """``coalesce_mb=0`` on gloo, DDP with several buckets: one protocol run per iteration (calls == steps),
    the ranks' models stay identical, and training converges as with a protocol per bucket."""
    steps = 40
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_coalesce_worker, args=(2, os.path.join(tmp, "init"), tmp, ["powersgd", "topk"], steps),
                 nprocs=2, join=True)
        runs = [torch.load(os.path.join(tmp, f"r{r}.pt")) for r in range(2)]
    for name in ("powersgd", "topk"):
        per_bucket, coalesced = runs[0][(name, None)], runs[0][(name, 0)]
        assert per_bucket[2] > steps + 10 and coalesced[2] == steps, (name, per_bucket[2], coalesced[2])
        for a, b in zip(coalesced[3], runs[1][(name, 0)][3]):
            assert torch.allclose(a, b, atol=1e-5), f"{name}: ranks' models diverged"
        assert coalesced[0][-1] < 0.5 * coalesced[0][0], f"{name}: coalesced training did not converge"
        assert coalesced[0][-1] < 2 * per_bucket[0][-1] + 1e-3


@pytest.mark.parametrize("name", ["topk", "ef_signsgd", "none"])
def test_coalesced_buckets_wait_for_the_group_and_equal_one_call_over_all_of_them(name):
    """With ``coalesce_mb=0`` no bucket completes before the iteration's last one arrives; then all complete with
    what one call of the protocol over every bucket's gradients gives (a partition-invariant codec)."""
    from studykit.comm import LocalComm

    torch.manual_seed(1)
    groups = [[torch.nn.Parameter(torch.randn(16, 8)), torch.nn.Parameter(torch.randn(8))],
              [torch.nn.Parameter(torch.randn(40))], [torch.nn.Parameter(torch.randn(6, 5))]]
    state = sk_ddp.HookState(C.get(name), comm=LocalComm(), coalesce_mb=0)
    buckets = [_Bucket(ps, index=i, last=i == len(groups) - 1) for i, ps in enumerate(groups)]
    futs = []
    for b in buckets:
        assert not any(f.done() for f in futs), "a bucket completed before the group was complete"
        futs.append(sk_ddp.compressor_hook(state, b))
    outs = [f.wait() for f in futs]
    ref = C.get(name).reduce([_Bucket(ps).buffer() for ps in groups], LocalComm(), key="all")
    for o, r in zip(outs, ref):
        assert torch.allclose(o, r)
    assert state.calls == 1


def test_coalescing_flushes_when_enough_bytes_are_waiting():
    from studykit.comm import LocalComm

    state = sk_ddp.HookState(C.get("powersgd"), comm=LocalComm(), coalesce_mb=1e-9)  # every bucket is enough
    futs = [sk_ddp.compressor_hook(state, _Bucket([torch.nn.Parameter(torch.randn(16, 8))], index=i, last=i == 2))
            for i in range(3)]
    [f.wait() for f in futs]
    assert state.calls == 3


@pytest.mark.parametrize("bad, overlap, match", [(-1, True, "finite number of MB >= 0"),
                                                 (float("inf"), True, "finite number of MB >= 0"),
                                                 (float("nan"), True, "finite number of MB >= 0"),
                                                 ("25", True, "got '25'"), (True, True, "got True"),
                                                 (25, False, "needs overlap=True")])
def test_bad_coalesce_values_are_refused_with_what_is_valid(bad, overlap, match):
    with pytest.raises(ValueError, match=match):
        sk_ddp.HookState(C.get("powersgd"), coalesce_mb=bad, overlap=overlap)
