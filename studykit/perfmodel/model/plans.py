"""What a compressor's protocol sends: :func:`plan_summary` of its ``plan()`` (derived once per compressor,
params and shapes: :class:`~studykit.perfmodel.payload.PayloadLaw`), and the kit's inf/NaN flag
(:func:`guard_collectives`)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from studykit import compressors
from studykit.perfmodel.calibration import normalize_params
from studykit.perfmodel.model.options import ModelOptions
from studykit.perfmodel.model.workload import Workload
from studykit.perfmodel.payload import Plan  # one definition: the payload law's

__all__ = ["Plan", "PlanSummary", "plan_summary", "plan_summaries", "FINITE_FLAG", "guard_collectives"]


@dataclass(frozen=True)
class PlanSummary:
    """What one call of a compressor's protocol sends, per collective kind: count and bytes per worker."""

    allreduce_count: int
    allreduce_bytes: int
    allgather_count: int
    allgather_bytes: int
    collectives: tuple  # the plan itself, as dicts

    @property
    def wire_bytes(self) -> int:
        return self.allreduce_bytes + self.allgather_bytes


def _plan_key(compressor, params) -> tuple:
    if compressors.is_compressor(compressor):
        if params:
            raise ValueError("pass either a compressor instance or a name with params, not both")
        return ("instance", compressor.name, repr(compressor))
    return ("name", compressor, json.dumps(normalize_params(params, compressor), sort_keys=True, default=str))


def _summary(plan) -> PlanSummary:
    """A :class:`PlanSummary` of a plan given as ``(op, numel, dtype, nbytes)`` tuples."""
    ar = [c for c in plan if c[0] == "all_reduce"]
    ag = [c for c in plan if c[0] == "all_gather"]
    return PlanSummary(len(ar), sum(c[3] for c in ar), len(ag), sum(c[3] for c in ag),
                       tuple({"op": c[0], "numel": c[1], "dtype": c[2], "nbytes": c[3]} for c in plan))


def _checked(compressor, plan) -> PlanSummary:
    other = sorted({c[0] for c in plan} - {"all_reduce", "all_gather"})
    if other:
        name = compressor.name if compressors.is_compressor(compressor) else compressor
        raise ValueError(f"compressor {name!r} issues collectives {other} the model has no cost for")
    return _summary(plan)


def _law(compressor, params, shapes, shapes_key):
    from studykit.perfmodel import payload

    skey = shapes_key if shapes_key is not None else tuple(map(tuple, shapes))
    return payload.law(compressor, params, shapes, (_plan_key(compressor, params), skey))


def plan_summary(compressor, params: dict | None, shapes: Sequence, world_size: int,
                 shapes_key: Any = None) -> PlanSummary:
    """Summarize ``compressor.plan(shapes, world_size)`` (derived once per compressor, params and shapes:
    :class:`~studykit.perfmodel.payload.PayloadLaw`).

    The plan for a given ``p`` is fixed, and each collective's cost is affine in its
    bytes, so count and total bytes per kind are all the model needs.
    """
    plan = _law(compressor, params, shapes, shapes_key).plans([int(world_size)])[int(world_size)]
    return _checked(compressor, plan)


def plan_summaries(compressor, params: dict | None, shapes: Sequence, world_sizes,
                   shapes_key: Any = None) -> dict[int, PlanSummary]:
    """:func:`plan_summary` for every distinct world size of ``world_sizes`` (one ``plan()`` per step
    of the payload in ``p``, not one per ``p``: :class:`~studykit.perfmodel.payload.PayloadLaw`)."""
    plans = _law(compressor, params, shapes, shapes_key).plans(world_sizes)
    done: dict[Plan, PlanSummary] = {}
    out = {}
    for q, pl in plans.items():
        if pl not in done:
            done[pl] = _checked(compressor, pl)
        out[q] = done[pl]
    return out


#: the kit's inf/NaN flag (:class:`studykit.ddp.NonFinite`) as a plan entry: 4 bytes whatever the compression
FINITE_FLAG = {"op": "all_reduce", "numel": 1, "dtype": "float32", "nbytes": 4, "scaled": False}


def guard_collectives(compressor, options: "ModelOptions") -> tuple:
    """What the kit's hook and post-backward reducer add to one protocol run of ``compressor`` (a name or an
    instance) under ``options``: :data:`FINITE_FLAG` where ``options.finite_flag`` is set and the compressor may drop
    inf/NaN (``keeps_nonfinite`` False), else nothing."""
    if not options.finite_flag or compressors.metadata(compressor).keeps_nonfinite:
        return ()
    return (FINITE_FLAG,)


def _nbytes(c: dict, bytes_scale):
    """A plan entry's bytes, times ``bytes_scale`` unless the entry is not compressed payload (``scaled`` False)."""
    return float(c["nbytes"]) * (bytes_scale if c.get("scaled", True) else 1.0)


def _per_p(compressor, params, workload: Workload, world_size):
    """Vectorized plan summary: arrays (shaped like ``world_size``) of counts and bytes per kind."""
    p = np.asarray(world_size)
    if np.any(p != np.round(p)) or np.any(p < 1):
        raise ValueError(f"world_size must be positive integers, got {world_size!r}")
    uniq, inv = np.unique(p.astype(np.int64), return_inverse=True)
    skey = workload.model if workload.param_shapes is None else workload.param_shapes
    by_p = plan_summaries(compressor, params, workload.shapes(), uniq.tolist(), shapes_key=skey)
    sums = [by_p[int(q)] for q in uniq]
    fields = np.array([[s.allreduce_count, s.allreduce_bytes, s.allgather_count, s.allgather_bytes]
                       for s in sums], dtype=float)
    per = fields[inv.reshape(-1)].reshape(*p.shape, 4)
    return per[..., 0], per[..., 1], per[..., 2], per[..., 3], sums
