import os

import pytest
import torch

os.environ.setdefault("MPLBACKEND", "Agg")
torch.set_num_threads(1)


def worker_grads(world_size: int, shapes=((6, 5), (7,), (2, 3, 4)), seed: int = 0, dtype=torch.float32):
    """Deterministic per-worker gradients: list over workers of list over tensors."""
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=g).to(dtype) for s in shapes] for _ in range(world_size)]


@pytest.fixture
def grads():
    return worker_grads
