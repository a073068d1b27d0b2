"""Real multi-process runs (torch.distributed, gloo, CPU): every compressor's aggregate
equals what ``simulate`` computes for the same gradients, over two steps (state kept)."""
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from studykit import compressors as C
from studykit.comm import TorchComm
from tests.conftest import worker_grads

pytestmark = pytest.mark.slow  # multi-process: the full suite (make test) only

STEPS = 2


def _worker(rank, world_size, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        comm = TorchComm()
        results = {}
        for name in C.available():
            comp = C.get(name)
            results[name] = [comp.reduce(worker_grads(world_size, seed=s)[rank], comm, key="b0")
                             for s in range(STEPS)]
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world_size", [2, 4])
def test_gloo_matches_simulate(world_size):
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(world_size, os.path.join(tmp, "init"), tmp), nprocs=world_size, join=True)
        got = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(world_size)]
    for name in C.available():
        # gloo may sum in another order than rank order: allow the wire dtype's rounding
        wire = {c.dtype for c in C.get(name).plan([(6, 5)], world_size)}
        tol = 3e-2 if torch.bfloat16 in wire else 3e-3 if torch.float16 in wire else 1e-5
        sim = C.Simulation(name, world_size)
        expected = [sim.step(worker_grads(world_size, seed=s), key="b0") for s in range(STEPS)]
        for rank in range(world_size):
            for step in range(STEPS):
                for a, b in zip(got[rank][name][step], expected[step][rank]):
                    assert torch.allclose(a, b, rtol=tol, atol=tol), f"{name} rank {rank} step {step}"
