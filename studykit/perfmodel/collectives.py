"""Collective communication costs: Agarwal et al. 2022, Table 1 (Sec. 2.2), Eq. 1 (Sec. 4.1), App. B.

Every function is one equation, in seconds, and broadcasts over numpy arrays
(message size, world size, latency, bandwidth may each be arrays), so a whole
sweep is one call. Conventions, as in the paper:

* ``nbytes`` is the message each worker contributes (all-reduce: the whole
  vector ``n``; all-gather: each worker's shard ``b``),
* ``world_size`` is ``p``, the number of workers (GPUs),
* ``alpha_s`` is the latency term (seconds per step),
* ``bandwidth_bytes_s`` is ``BW = 1/beta`` in bytes per second (use
  :func:`gbps_to_bytes_s` for Gbit/s).

The paper writes Table 1 with ``beta`` (inverse bandwidth); here ``beta = 1/BW``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "gbps_to_bytes_s", "bytes_s_to_gbps", "ring_allreduce_s", "tree_allreduce_s",
    "parameter_server_s", "ring_allgather_s", "allgather_incast_s", "COLLECTIVES", "CollectiveTable",
    "measured_collective_s",
]

ArrayLike = "float | np.ndarray"


def gbps_to_bytes_s(gbps):
    """Gbit/s (10^9 bits per second, network convention) -> bytes per second."""
    return np.asarray(gbps, dtype=float) * 1e9 / 8.0


def bytes_s_to_gbps(bytes_s):
    """Bytes per second -> Gbit/s (10^9 bits per second)."""
    return np.asarray(bytes_s, dtype=float) * 8.0 / 1e9


def _prep(nbytes, world_size):
    n = np.asarray(nbytes, dtype=float)
    p = np.asarray(world_size, dtype=float)
    if np.any(p < 1):
        raise ValueError(f"world_size must be >= 1, got min {p.min()}")
    if np.any(n < 0):
        raise ValueError(f"nbytes must be >= 0, got min {n.min()}")
    return n, p


def ring_allreduce_s(nbytes, world_size, alpha_s, bandwidth_bytes_s):
    """Ring all-reduce time (s): Eq. 1 (Sec. 4.1), Table 1 row "Ring Reduce".

    ``T = 2 alpha (p-1) + 2 n (p-1) / (p BW)``: reduce-scatter then all-gather,
    ``p-1`` steps each, every step moving ``n/p`` bytes. ``p = 1`` costs 0.
    """
    n, p = _prep(nbytes, world_size)
    return 2.0 * alpha_s * (p - 1.0) + 2.0 * n * (p - 1.0) / (p * bandwidth_bytes_s)


def tree_allreduce_s(nbytes, world_size, alpha_s, bandwidth_bytes_s):
    """Tree all-reduce time (s): Table 1 row "Tree Reduce" (Sec. 2.2).

    ``T = 2 alpha log2(p) + 2 beta log2(p) n``: reduce up a binary tree and
    broadcast down, ``log2 p`` levels each, the whole vector per level.
    """
    n, p = _prep(nbytes, world_size)
    lg = np.log2(p)
    return 2.0 * alpha_s * lg + 2.0 * lg * n / bandwidth_bytes_s


def parameter_server_s(nbytes, world_size, alpha_s, bandwidth_bytes_s):
    """Parameter-server aggregation time (s): Table 1 row "Parameter Server" (Sec. 2.2).

    ``T = 2 alpha + 2 beta (p-1) n``: one server link receives ``p-1`` vectors and
    sends ``p-1`` back (the server's link is the bottleneck). ``p = 1`` costs 0.
    """
    n, p = _prep(nbytes, world_size)
    return np.where(p > 1, 2.0 * alpha_s + 2.0 * (p - 1.0) * n / bandwidth_bytes_s, 0.0)


def ring_allgather_s(nbytes, world_size, alpha_s, bandwidth_bytes_s):
    """Ring all-gather time (s) of a ``nbytes`` shard per worker: App. B.

    ``T = (p-1) alpha + (p-1) b / BW``: ``p-1`` ring steps, each forwarding one
    worker's shard ``b``. App. B writes the MSTop-K term as ``2 alpha + g (p-1)/BW``
    and the SignSGD term as ``g (p-1)/BW``; the bandwidth term is the same, and the
    kit uses the ring's ``(p-1) alpha`` latency so all collectives share one alpha.
    """
    n, p = _prep(nbytes, world_size)
    return alpha_s * (p - 1.0) + (p - 1.0) * n / bandwidth_bytes_s


def allgather_incast_s(nbytes, world_size, alpha_s, bandwidth_bytes_s, incast_coeff=0.0):
    """Ring all-gather with an optional congestion (incast) penalty (s). BEYOND THE PAPER.

    ``T = (p-1) alpha + (1 + c) (p-1) b / BW`` with ``c = incast_coeff >= 0``
    (default 0: exactly :func:`ring_allgather_s`). App. C reports the model's
    largest error (19.1 %) for SignSGD and blames the all-to-all traffic pattern
    of all-gather (incast); the paper does not model it. ``c`` inflates the
    bandwidth term; it can be fitted from all-gather timings against the all-reduce
    calibration (:func:`studykit.perfmodel.fit.fit_incast`).
    """
    c = np.asarray(incast_coeff, dtype=float)
    if np.any(c < 0):
        raise ValueError(f"incast_coeff must be >= 0, got {c.min()}")
    n, p = _prep(nbytes, world_size)
    return alpha_s * (p - 1.0) + (1.0 + c) * (p - 1.0) * n / bandwidth_bytes_s


#: Every collective cost by name. Each is affine in ``nbytes``: ``T = latency + nbytes * per_byte``,
#: which lets the model add up many collectives of one kind from their count and total bytes.
COLLECTIVES = {
    "ring_allreduce": ring_allreduce_s,
    "tree_allreduce": tree_allreduce_s,
    "parameter_server": parameter_server_s,
    "ring_allgather": ring_allgather_s,
}


@dataclass(frozen=True)
class CollectiveTable:
    """Measured collective times of one network at one world size (BEYOND THE PAPER).

    ``sizes_bytes[op]`` (sorted) and ``times_s[op]`` come from ``sweep`` records of that
    network (repeats pooled); :func:`measured_collective_s` reads them. ``fitted_on`` names
    the records (``sweep p=2 native``).
    """

    world_size: int
    sizes_bytes: dict = field(default_factory=dict)  # op ("all_reduce", "all_gather") -> np.ndarray, sorted
    times_s: dict = field(default_factory=dict)  # op -> np.ndarray (s), same order
    fitted_on: str = ""

    def has(self, op: str) -> bool:
        return op in self.sizes_bytes and len(self.sizes_bytes[op]) > 0


def measured_collective_s(op: str, nbytes, table: CollectiveTable, eq1_s):
    """Collective time (s) read from a measured sweep (BEYOND THE PAPER; App. C names the gaps).

    Log-log interpolation of ``table`` between swept sizes; below the smallest size the
    smallest size's time (latency-bound); above the largest, the largest size's time scaled by
    Eq. 1 / App. B (``eq1_s(nbytes) / eq1_s(largest)``). Sizes ``<= 0`` and ops the table lacks
    fall back to ``eq1_s(nbytes)``. This carries small-message latency (gloo's per-call cost is
    not Eq. 1's ``2 alpha (p-1)``) and all-gather incast into a prediction. Vectorised in ``nbytes``.
    """
    n = np.asarray(nbytes, dtype=float)
    eq1 = np.asarray(eq1_s(n), dtype=float)
    if not table.has(op):
        return eq1
    x, y = table.sizes_bytes[op], table.times_s[op]
    with np.errstate(divide="ignore", invalid="ignore"):
        inside = np.exp(np.interp(np.log(np.maximum(n, x[0])), np.log(x), np.log(y)))
        above = y[-1] * eq1 / float(eq1_s(x[-1]))
    out = np.where(n <= x[0], y[0], np.where(n >= x[-1], above, inside))
    return np.where(n <= 0, eq1, out)
