"""The kit's DDP hook under ``DistributedDataParallel(..., find_unused_parameters=True)`` on gloo, two processes.

DDP then all-reduces a bitmap of the parameters each rank used, on the process group the hook's protocol uses,
right after the last bucket's hook returns. Every compressor must still finish (a hang fails the test after a
deadline instead of hanging the run) and train as with ``find_unused_parameters=False``; a parameter that the
forward pass never uses must be left alone."""
import os
import tempfile
import threading

import pytest
import torch
import torch.distributed as dist

from studykit import compressors as C
from studykit import ddp as sk_ddp
from tests.test_ddp import _Bucket, _GatedComm
from tests.conftest import spawn_until

torch.set_num_threads(1)

#: id -> (compressor, register's keywords): multi-round protocols on the communication thread, fp16 (one
#: all-reduce, no thread), coalesced buckets and the parameter server
CASES = {"topk": ("topk", {}), "dgc": ("dgc", {}), "qsgd": ("qsgd", {}), "powersgd": ("powersgd", {"rank": 2}),
         "fp16": ("fp16", {}), "powersgd-coalesced": ("powersgd", {"rank": 2, "coalesce_mb": 0}),
         "topk-ps": ("topk", {"comm_kind": "ps"})}
SIDE, LAYERS, STEPS = 16, 4, 5
WEIGHT_MB = SIDE * SIDE * 4 / 2**20
#: one weight per bucket: DDP then holds the same buckets, in the same order, with and without
#: find_unused_parameters (it rebuilds its buckets after the first iteration only without it)
ONE_WEIGHT_BUCKETS = {"bucket_cap_mb_list": [WEIGHT_MB] * LAYERS}
DEADLINE_S = 180


class _Net(torch.nn.Module):
    """LAYERS square bias-free layers (equal sizes: DDP's bucket layout is predictable), and with ``unused`` one
    more that ``forward`` never calls."""

    def __init__(self, unused: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(SIDE, SIDE, bias=False) for _ in range(LAYERS))
        self.unused = torch.nn.Linear(SIDE, SIDE, bias=False) if unused else None

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def _train(rank, name, params, find_unused, overlap=True, unused=False):
    """STEPS of SGD through DDP with the kit's hook (``overlap=False``: the blocking hook, never coalesced); returns
    the parameters and the unused layer's gradient."""
    net = _Net(unused)
    buckets = {"bucket_cap_mb": 2 * WEIGHT_MB} if unused else ONE_WEIGHT_BUCKETS  # unused: shares a bucket
    ddp = torch.nn.parallel.DistributedDataParallel(net, find_unused_parameters=find_unused, **buckets)
    if not overlap:
        params = {k: v for k, v in params.items() if k != "coalesce_mb"}
    state = sk_ddp.register(ddp, name, overlap=overlap, **params)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(32, SIDE, generator=g), torch.randn(32, SIDE, generator=g).tanh()
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    state.close()
    unused_grad = None if net.unused is None or net.unused.weight.grad is None else net.unused.weight.grad.clone()
    return [p.detach().clone() for p in net.parameters()], unused_grad


def _worker(rank, world_size, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        res = {}
        for case, (name, params) in CASES.items():
            for key, kw in {"used": dict(find_unused=True), "reference": dict(find_unused=False),
                            "unused": dict(find_unused=True, unused=True),
                            "unused_blocking": dict(find_unused=True, unused=True, overlap=False)}.items():
                with open(os.path.join(out_dir, f"progress{rank}"), "w") as f:
                    f.write(f"{case} {key}")  # what a hang was in
                res[(case, key)] = _train(rank, name, params, **kw)
        torch.save(res, os.path.join(out_dir, f"r{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def runs():
    with tempfile.TemporaryDirectory() as tmp:
        spawn_until(_worker, (2, os.path.join(tmp, "init"), tmp), tmp, DEADLINE_S,
                    "DDP with find_unused_parameters=True")
        return [torch.load(os.path.join(tmp, f"r{r}.pt")) for r in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_find_unused_parameters_trains_as_without_it(runs, case):
    """Every parameter used: the hook's run finishes and gives the parameters of the same run without
    find_unused_parameters, on both ranks."""
    for rank, res in enumerate(runs):
        got, _ = res[(case, "used")]
        ref, _ = res[(case, "reference")]
        for a, b in zip(got, ref):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), f"{case}: rank {rank} trained differently"
    initial = [p.detach() for p in _Net().parameters()]
    assert any(not torch.allclose(a, b) for a, b in zip(runs[0][(case, "used")][0], initial)), "nothing trained"


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_a_parameter_unused_in_forward_is_left_alone(runs, case):
    """One layer never used (it shares a bucket with a used one): the overlapped hook finishes, gives the blocking
    hook's parameters (per bucket: a coalesced hook's protocol runs over all buckets at once, so it is compared to
    nothing), the ranks agree, and the unused layer keeps its initial weights and gets no gradient."""
    coalesced = "coalesce_mb" in CASES[case][1]
    initial = [p.detach() for p in _Net(unused=True).parameters()]
    for rank, res in enumerate(runs):
        got, grad = res[(case, "unused")]
        ref, _ = res[(case, "unused_blocking")]
        assert grad is None, f"{case}: rank {rank}: DDP wrote a gradient for a parameter no rank used"
        assert torch.allclose(got[-1], initial[-1]), f"{case}: rank {rank}: the unused layer changed"
        for a, b, c in zip(got, ref, runs[0][(case, "unused")][0]):
            assert torch.isfinite(a).all(), f"{case}: rank {rank}: non-finite parameters"
            assert coalesced or torch.allclose(a, b, rtol=1e-5, atol=1e-6), f"{case}: rank {rank}: != blocking hook"
            assert torch.allclose(a, c, rtol=1e-5, atol=1e-6), f"{case}: ranks diverged"
    assert any(not torch.allclose(a, b) for a, b in zip(runs[0][(case, "unused")][0][:-1], initial[:-1]))



@pytest.mark.parametrize("find_unused", [True, False])
def test_the_last_bucket_waits_for_the_thread_only_under_find_unused_parameters(find_unused):
    """With ``find_unused_parameters`` the hook's call for a non-last bucket returns at once, the call for the last
    one only once the thread has run every bucket's protocol (every future is then done); without it, at once."""
    comm = _GatedComm()  # every collective waits for the gate
    state = sk_ddp.HookState(C.get("topk"), comm=comm, find_unused_parameters=find_unused)
    params = [[torch.nn.Parameter(torch.randn(16, 8))] for _ in range(2)]
    first = sk_ddp.compressor_hook(state, _Bucket(params[0], index=0, last=False))
    assert not first.done(), "a bucket before the last waited for its collectives"
    opener = threading.Timer(0.2, comm.gate.set) if find_unused else None  # else the waiting call never returns
    if opener is not None:
        opener.start()
    last = sk_ddp.compressor_hook(state, _Bucket(params[1], index=1, last=True))
    assert first.done() == last.done() == find_unused
    comm.gate.set()
    first.wait(), last.wait()
    state.close()


def test_a_bad_find_unused_parameters_value_is_refused():
    with pytest.raises(ValueError, match="find_unused_parameters must be a boolean"):
        sk_ddp.HookState(C.get("topk"), find_unused_parameters="sometimes")
