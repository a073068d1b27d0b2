"""What each compressor does to a real gradient: wire bytes, ratio, error, what survives.

Used by ``notebooks/compressor_gallery.ipynb`` and ``python -m studykit compressors``.
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import torch

from studykit import compressors as C


def digits_gradients(world_size: int = 4, batch_size: int = 32, hidden: int = 64, seed: int = 0):
    """One real gradient per worker: a small MLP on scikit-learn's digits (offline),
    each worker on its own mini-batch. Returns (list over workers of gradient lists, names)."""
    from sklearn.datasets import load_digits

    if world_size < 1 or batch_size < 1:
        raise ValueError(f"world_size and batch_size must be >= 1, got {world_size}, {batch_size}")
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))
    names = [n for n, _ in model.named_parameters()]
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(x), generator=g)
    grads = []
    for r in range(world_size):
        idx = perm[r * batch_size:(r + 1) * batch_size]
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        grads.append([p.grad.detach().clone() for p in model.parameters()])
    return grads, names


def compare(specs: list[str], grads: list[list[torch.Tensor]]) -> pd.DataFrame:
    """One row per compressor spec (``"topk:ratio=0.1"``): wire bytes, ratio, error of the
    aggregated estimate against the exact average, and the encode+decode time on this CPU."""
    shapes = [tuple(t.shape) for t in grads[0]]
    world_size = len(grads)
    exact = torch.cat([sum(g[i] for g in grads).flatten() / world_size for i in range(len(shapes))])
    rows = []
    for spec in specs:
        name, params = C.parse_spec(spec)
        comp = C.get(name, **params)
        est = torch.cat([t.flatten() for t in C.simulate(comp, grads)[0]])
        t0 = time.perf_counter()
        C.get(name, **params).reduce(grads[0])
        ms = (time.perf_counter() - t0) * 1e3
        rows.append({
            "compressor": spec, "allreduce_compatible": comp.allreduce_compatible,
            "wire_bytes": comp.wire_bytes(shapes, world_size), "ratio": comp.compression_ratio(shapes, world_size),
            "rel_error": float((est - exact).norm() / exact.norm()),
            "cosine": float(torch.nn.functional.cosine_similarity(est, exact, dim=0)),
            "encode_decode_ms_cpu": ms,
        })
    return pd.DataFrame(rows)


def survivors(spec: str, grads: list[list[torch.Tensor]], tensor_index: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(exact average, compressed estimate) of one gradient tensor, as 2-D arrays for imshow."""
    name, params = C.parse_spec(spec)
    world_size = len(grads)
    exact = sum(g[tensor_index] for g in grads) / world_size
    est = C.simulate(C.get(name, **params), grads)[0][tensor_index]
    as2d = (lambda t: t.reshape(t.shape[0], -1).numpy()) if exact.dim() > 1 else (lambda t: t.reshape(1, -1).numpy())
    return as2d(exact), as2d(est)


