"""One collective's cost on a :class:`~studykit.perfmodel.model.Hardware`: Eq. 1 / Table 1 all-reduce, App. B
all-gather or the measured table (:func:`collective_s`), and a plan routed through a parameter server."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from studykit.perfmodel import collectives as col
from studykit.perfmodel.model.options import Hardware, ModelOptions

__all__ = ["allreduce_s", "collective_s", "parameter_server_plan_s"]


def allreduce_s(nbytes, world_size, hw: Hardware, options: ModelOptions | None = None):
    """All-reduce time (s) on ``hw``: Eq. 1 ring (default) or Table 1 tree; with
    ``options.collectives == "measured"``, the measured table (:func:`collective_s`)."""
    if options is not None and options.collectives == "measured":
        return collective_s("all_reduce", nbytes, world_size, hw, options)
    fn = col.ring_allreduce_s if hw.allreduce == "ring" else col.tree_allreduce_s
    return fn(nbytes, world_size, hw.alpha_s, hw.bandwidth_bytes_s)


def _table_for(hw: Hardware, world_size, options: ModelOptions | None):
    """The measured table to use, or None (Eq. 1). Raise when a table is asked for at another p."""
    if options is None or options.collectives != "measured" or hw.collective_table is None:
        return None
    t = hw.collective_table
    if np.any(np.asarray(world_size) != t.world_size):
        raise ValueError(f"the measured collective table is for world size {t.world_size}, asked for {world_size!r}; "
                         "use ModelOptions(collectives='eq1') to extrapolate in p")
    return t


def collective_s(op: str, nbytes, world_size, hw: Hardware, options: ModelOptions | None = None):
    """One collective's time (s): ``all_reduce`` by Eq. 1 (or Table 1 tree), ``all_gather`` by App. B's
    ring all-gather (with ``hw.incast_coeff`` when ``options.incast``); or, with
    ``options.collectives == "measured"`` and a ``hw.collective_table``, read from the measured sweep
    (Eq. 1 / App. B incast-free beyond it; :func:`~studykit.perfmodel.collectives.measured_collective_s`).
    With measured collectives and no table (e.g. a world size never swept), Eq. 1 / App. B with incast."""
    opts = options or ModelOptions()
    bw = hw.bandwidth_bytes_s
    if op == "all_reduce":
        def eq1(n):
            fn = col.ring_allreduce_s if hw.allreduce == "ring" else col.tree_allreduce_s
            return fn(n, world_size, hw.alpha_s, bw)
        with_incast = eq1
    elif op == "all_gather":
        def eq1(n):
            return col.ring_allgather_s(n, world_size, hw.alpha_s, bw)

        def with_incast(n):
            return col.allgather_incast_s(n, world_size, hw.alpha_s, bw, hw.incast_coeff)
    else:
        raise ValueError(f"no cost model for collective {op!r} (all_reduce, all_gather)")
    table = _table_for(hw, world_size, opts)
    if table is not None:
        return col.measured_collective_s(op, nbytes, table, eq1)
    return with_incast(nbytes) if opts.incast else eq1(nbytes)


def parameter_server_plan_s(plan: Sequence[dict], world_size, hw: Hardware):
    """A compressor's protocol routed through one parameter server (s): Agarwal et al. 2022 Table 1 row
    "Parameter Server" (Sec. 2.2), the third scheme of Sec. 3's Fig. 4.

    Every collective of ``plan`` (dicts with ``nbytes`` per worker, as :func:`plan_summary` gives) becomes
    the server receiving the ``p-1`` other workers' payloads, aggregating them and sending the aggregate
    back: ``2 alpha + 2 (p-1) b / BW`` per collective (:func:`~studykit.perfmodel.collectives.parameter_server_s`).
    The aggregate is assumed as large as one payload: exact for sums and SignSGD's majority vote, a lower
    bound for sparse payloads (TopK's union grows with p). Broadcasts over ``world_size`` and ``hw`` arrays.
    """
    out = 0.0
    for c in plan:
        out = out + col.parameter_server_s(float(c["nbytes"]), world_size, hw.alpha_s, hw.bandwidth_bytes_s)
    return np.asarray(out, dtype=float)
