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


def pytest_collection_modifyitems(config, items):
    """Tests that need root and network namespaces, or Chromium, belong to the slow tier too, so that
    ``pytest -m "not slow"`` (the quick unit tier) leaves every heavy test out."""
    for item in items:
        if item.get_closest_marker("netns") or item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.slow)
