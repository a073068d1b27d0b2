"""What each candidate is priced from: the calibration's constants with both ends of their intervals
(T_comp, T_encode_decode, the network's), the terms that price a compressor run as a DDP hook, and the bytes
a compressor's ``plan()`` puts on the link."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np

from studykit import compressors
from studykit.perfmodel.advise.candidates import AdviseError
from studykit.perfmodel.calibration import Calibration, normalize_params
from studykit.perfmodel.model import ModelOptions, Workload, plan_summaries, plan_summary


# ------------------------------------------------------------------ inputs
def _ends(c, what: str, notes: dict, exact: list) -> tuple[float, float, float]:
    """(value, low, high) of a calibration constant; an absent end counts as the value (named in ``exact``)."""
    lo = c.low if c.low is not None else c.value
    hi = c.high if c.high is not None else c.value
    if c.low is None or c.high is None:
        exact.append(what)
    notes[what] = c.source
    return float(c.value), float(min(lo, c.value)), float(max(hi, c.value))


def _tcomp_ends(cal: Calibration, model: str, batch_size: int, notes: dict, exact: list):
    try:
        v, how = cal.t_comp_s(model, batch_size)
    except ValueError as exc:
        raise AdviseError(f"{exc} (--t-comp-ms)") from None
    notes["t_comp"] = how
    entry = next((c for c in cal.t_comp if c.model == model and c.batch_size == batch_size), None)
    if entry is None or entry.low is None or entry.high is None:
        exact.append("t_comp_s")
        return v, v, v
    return v, float(entry.low), float(entry.high)


def _ted_ends(cal: Calibration, name: str, params: dict, model: str):
    """(value, low, high, per_worker, how) of T_encode_decode; raises ValueError when unknown.

    The calibration's look-up first (exact, interpolated, scaled from another model); a parameter value
    it cannot price takes the look-up of the nearest parameter value it can (log distance), flagged
    ``assumed`` (T_encode_decode of most compressors changes little with their main parameter; Agarwal et al. 2022
    Table 3: MSTopK 103 / 104 ms at 1 % / 0.1 %)."""
    q = normalize_params(params, name)
    try:
        v, pw, how = cal.t_encode_decode_s(name, params, model)
        used = q
    except ValueError:
        def dist(ep):
            d = 0.0
            for k in set(q) | set(ep):
                a, b = q.get(k), ep.get(k)
                if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 and b > 0:
                    d += abs(math.log(float(a) / float(b)))
                elif a != b:
                    d += 100.0
            return d

        others = {json.dumps(normalize_params(e.params, name), sort_keys=True, default=str)
                  for e in cal.t_encode_decode if e.compressor == name}
        for ep in sorted((json.loads(o) for o in others), key=dist):
            try:
                v, pw, how = cal.t_encode_decode_s(name, ep, model)
            except ValueError:
                continue
            shown = {k: x for k, x in ep.items() if q.get(k) != x}
            how = f"assumed equal to {json.dumps(shown)}'s, not measured at these parameters: {how}"
            used = ep
            break
        else:
            raise
    entry = next((e for e in cal.t_encode_decode if e.compressor == name and e.model == model
                  and normalize_params(e.params, name) == used), None)
    if entry is not None and entry.low is not None and entry.high is not None and how.startswith(("exact", "assumed")):
        return v, min(float(entry.low), v), max(float(entry.high), v), pw, how
    return v, v, v, pw, how


# ------------------------------------------------------------------ hooks
def hook_options(options: ModelOptions) -> tuple[ModelOptions, str]:
    """The terms that price a compressor run as a DDP hook (``mode="hook"``), and how to say so.

    The kit's hook model as ``python -m studykit verify --overlap timeline`` scores it on the hook
    campaigns: the protocol issued per DDP bucket (``hook_buckets``) on the per-bucket timeline
    (``overlap="timeline"``: :func:`~studykit.perfmodel.model.hook_timeline_s`), the backward pass at
    ``T_comp`` (``hook_gamma`` off, verify's default), and the one-element inf/NaN flag the kit's hook sends per
    bucket for a compressor that may drop inf/NaN (``finite_flag``). The timeline needs nothing that compression after
    the backward pass does not: a calibration holds no per-bucket profile, so each bucket is ready once its
    bytes are done and takes its share of ``T_encode_decode`` by bytes. No host work is chained bucket by bucket:
    the hook as the graph runner runs it (``register(..., runner="graph")``), the one ``verify`` scores without the
    host chain. :meth:`ModelOptions.paper` stays
    the model as published, which has no hook model: App. B, as after the backward pass."""
    if options == ModelOptions.paper():
        return options, "App. B, as after the backward pass (the paper's model has no hook model)"
    return (replace(options, hook_buckets=True, overlap="timeline", finite_flag=True),
            "per DDP bucket on the per-bucket timeline (ModelOptions hook_buckets, overlap='timeline'; each "
            "bucket ready once its bytes are done, encode/decode shared among buckets by bytes, no host work per "
            "bucket: the hook as register(..., runner='graph') runs it; the hook's inf/NaN flag where the "
            "compressor may drop them, finite_flag)")


def cast_bytes_scale(compressor: str, params: dict, workload: Workload) -> float | None:
    """For a one-round all-reduce codec whose payload is the gradient cast to a narrower type (fp16, bf16:
    ``Compressor.one_round_allreduce`` and a plan of all-reduces of every gradient element): its bytes over
    the fp32 gradient's (0.5 for a 2-byte type). None for any other compressor."""
    if not compressors.check(compressor, **params)["one_round_allreduce"]:
        return None
    s = plan_summary(compressor, params, workload.shapes(), 2, shapes_key=workload.model or workload.param_shapes)
    numel = sum(int(c["numel"]) for c in s.collectives)
    if s.allgather_count or numel != workload.gradient_bytes // 4 or s.allreduce_bytes >= workload.gradient_bytes:
        return None
    return s.allreduce_bytes / workload.gradient_bytes


def wire_bits(compressor: str, params: dict, workload: Workload, world_sizes: np.ndarray) -> dict[int, dict]:
    """Per world size: bits per gradient element one worker puts on the link (``plan()``'s bytes, as the
    training loop's ``bits_per_element``) and the integer type its payload is summed in, if any."""
    numel = workload.gradient_bytes / 4
    sums = plan_summaries(compressor, params, workload.shapes(), world_sizes.tolist(),
                          shapes_key=workload.model or workload.param_shapes)
    out = {}
    for q, s in sums.items():
        summed = sorted({c["dtype"] for c in s.collectives if c["op"] == "all_reduce"
                         and str(c["dtype"]).startswith(("int", "uint"))})
        integer = any(str(c["dtype"]).startswith(("int", "uint")) for c in s.collectives)
        out[int(q)] = {"bits_per_element": 8 * s.wire_bytes / numel, "summed_in": summed[0] if summed else None,
                       "integer_payload": integer}
    return out
