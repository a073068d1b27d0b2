"""What a compressor sends, as a function of the world size: derived from ``plan()`` once, then reused.

:meth:`studykit.compressors.base.Compressor.plan` runs the real protocol on ``meta`` tensors, so the
model's traffic is the code's own; but one call costs 2-200 ms (ATOMO's SVDs on ``meta`` take the
longest) and a sweep over 100 world sizes called it 100 times. The payload of every registered
protocol depends on ``p`` only in steps (the collectives, their element counts and order are fixed;
only a wire dtype widens as ``p`` grows, e.g. ``quantize`` and ``thc`` sum integers in the
smallest dtype that cannot overflow for ``p`` workers). :class:`PayloadLaw` uses that:

* **the contract** (tested for every registered compressor, its main parameter at 3 values, at world
  sizes 1 to 1000 against ``plan()``, on a small model and on ResNet-50:
  ``tests/test_perfmodel_advise.py``): a registered compressor's payload changes with ``p`` only where
  its own methods of ``p`` say so: ``protocol_for(p)`` and, under the packed ``allreduce`` protocol,
  ``lane_width(p)`` (``quantize`` and ``thc`` sum integers in lanes whose width grows with ``p``);
  every other registered protocol sends the same collectives at every ``p`` (:func:`step_key`);
* so a payload is **derived once per step**: the real shapes are planned at one world size of each
  run of equal step keys, and that plan holds for the whole run: one ``plan()`` for most compressors,
  one per lane width for ``quantize`` / ``thc``, however many world sizes are asked;
* **scaled** to the model: a *partition-invariant* compressor (its result depends on the concatenated
  gradient only: ``Compressor.partition_invariant``) is planned on one flat tensor of the gradient's
  size, the same plan by that definition, without the per-tensor work;
* a compressor outside the registry (an instance of another class) is not bound by the contract: its
  plans are found by bisection (the smallest and the largest world size asked are planned, then only
  between two planned world sizes whose plans differ: ``2 + (number of steps) x log2(n)`` calls);
* error feedback adds no collective (it only keeps a residual), so ``Compressor.plan`` leaves the
  error-feedback memory out;
* plans are kept on disk per fingerprint of the code that decides them (the sources of
  ``studykit/compressors/`` and ``studykit/comm.py``, and the torch version:
  :func:`studykit.compressors.registry.fingerprint`) in ``reports/cache/payload-<fingerprint>.json``
  (git-ignored; ``STUDYKIT_CACHE=off`` disables it, ``STUDYKIT_CACHE=DIR`` moves it): a change to any
  compressor starts a new file, so a stale plan is never read. A law that finds on disk the plans it is
  asked for (or, for a compressor whose payload has no steps in ``p``, any one plan) builds no compressor
  and imports no torch: what the law needs to know of the compressor (partition-invariant, steps in ``p``)
  comes from the registry's own cache (:func:`studykit.compressors.check`).
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Sequence

from studykit import compressors
from studykit.compressors import registry

__all__ = ["PayloadLaw", "law", "step_key", "fingerprint", "cache_path", "clear"]

Plan = tuple  # of (op, numel, dtype, nbytes) tuples, in the order issued

_DISK: dict[str, dict[str, list]] | None = None  # key -> {str(p): plan as lists}
_LAWS: dict[tuple, "PayloadLaw"] = {}

#: hash of what decides a plan (the compressors' and communicators' sources, torch's version): the registry's
fingerprint = registry.fingerprint


def cache_path() -> Path | None:
    """The on-disk plan cache of this code (None when ``STUDYKIT_CACHE=off``)."""
    return registry.cache_path("payload")


def _disk() -> dict:
    global _DISK
    if _DISK is None:
        _DISK = registry.read_cache("payload")  # {} when absent or damaged: plans are recomputed
    return _DISK


def _save() -> None:
    if _DISK is not None:
        registry.write_cache("payload", _DISK)


def clear(memory: bool = True, disk: bool = False) -> None:
    """Forget derived plans (``memory``: this process's; ``disk``: this code's cache file)."""
    global _DISK
    if memory:
        _LAWS.clear()
        _DISK = None
    if disk:
        path = cache_path()
        if path is not None and path.exists():
            path.unlink()
        _DISK = None


def _planner(compressor, params: dict | None):
    return compressor if compressors.is_compressor(compressor) else compressors.get(compressor, **(params or {}))


def _partition_invariant(compressor, params: dict | None) -> bool:
    if compressors.is_compressor(compressor):
        return compressor.partition_invariant
    return compressors.check(compressor, **(params or {}))["partition_invariant"]


def _registered(comp) -> bool:
    cls = type(comp)
    try:
        return compressors.registry._lookup(comp.name) is cls
    except Exception:  # noqa: BLE001 - any lookup failure: not bound by the contract
        return False


def step_key(comp, world_size: int):
    """What decides a registered compressor's payload at ``world_size`` (see the contract in the module
    docstring): ``(protocol_for(p), lane_width(p))`` where it has both methods (the lane width only under
    the packed ``allreduce`` protocol), else ``()`` (the same payload at every ``p``); None for a
    compressor outside the registry."""
    if not _registered(comp):
        return None
    proto, width = getattr(comp, "protocol_for", None), getattr(comp, "lane_width", None)
    if not (callable(proto) and callable(width)):
        return ()
    how = proto(int(world_size))
    return (how, width(int(world_size)) if how == "allreduce" else None)


class PayloadLaw:
    """The plans of one compressor (with its parameters) on one list of shapes, per world size."""

    def __init__(self, compressor, params: dict | None, shapes: Sequence, disk_key: str | None = None):
        self._compressor, self._params = compressor, dict(params or {})
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        self._comp = None
        self.disk_key = disk_key
        self.known: dict[int, Plan] = {}
        if disk_key is not None:
            for p, plan in _disk().get(disk_key, {}).items():
                self.known[int(p)] = tuple(tuple(c) for c in plan)
        self.plan_calls = 0  # plan() calls this law made (for the benchmark and tests)

    def _planner(self):
        if self._comp is None:
            self._comp = _planner(self._compressor, self._params)
        return self._comp

    def _plan(self, p: int) -> Plan:
        hit = self.known.get(p)
        if hit is None:
            self._planner()
            hit = tuple((c.op, int(c.numel), str(c.dtype).replace("torch.", ""), int(c.nbytes))
                        for c in self._comp.plan(self.shapes, int(p)))
            self.plan_calls += 1
            self.known[p] = hit
            if self.disk_key is not None:
                _disk().setdefault(self.disk_key, {})[str(p)] = [list(c) for c in hit]
        return hit

    def plans(self, world_sizes) -> dict[int, Plan]:
        """``{p: plan}`` for every distinct ``p`` of ``world_sizes``: one ``plan()`` per step of
        :func:`step_key` (bisection for a compressor outside the registry; see the module docstring)."""
        want = sorted({int(p) for p in world_sizes})
        if not want:
            return {}
        before = self.plan_calls
        keys = None
        facts = compressors.check(self._compressor, **self._params) if isinstance(self._compressor, str) else None
        if self.known and not all(q in self.known for q in want) and facts is not None and \
                not facts["world_size_steps"] and want[-1] <= facts["max_world_size"]:
            # the contract: the same collectives at every p (step_key is () throughout); no compressor to build
            plan = next(iter(self.known.values()))
            return {q: self.known.get(q, plan) for q in want}
        if not all(q in self.known for q in want):
            comp = self._planner()
            if step_key(comp, want[0]) is not None:
                keys = {q: step_key(comp, q) for q in want}
        if keys is None:
            out = self._bisect(want)
        else:
            out = {}
            by_key: dict = {}
            for q in want:
                by_key.setdefault(keys[q], []).append(q)
            for qs in by_key.values():
                plan = self._plan(next((x for x in qs if x in self.known), qs[0]))
                for x in qs:
                    out[x] = self.known.get(x, plan)
        if self.plan_calls != before and self.disk_key is not None:
            _save()
        return {q: out[q] for q in want}

    def _bisect(self, want: list[int]) -> dict[int, Plan]:
        """Plan the smallest and the largest ``p``, and bisect only between two planned ``p`` whose plans differ."""
        self._plan(want[0])
        self._plan(want[-1])
        out: dict[int, Plan] = {}

        def resolve(lo: int, hi: int, inside: list[int]) -> None:
            if not inside:
                return
            if self.known[lo] == self.known[hi]:
                for q in inside:
                    out[q] = self.known[lo]
                return
            m = len(inside) // 2
            mid = inside[m]
            self._plan(mid)
            out[mid] = self.known[mid]
            resolve(lo, mid, inside[:m])
            resolve(mid, hi, inside[m + 1:])

        anchors = sorted(k for k in self.known if want[0] <= k <= want[-1])
        j = 0
        for a, b in zip(anchors, anchors[1:]):
            inside = []
            while j < len(want) and want[j] < b:
                if want[j] > a:
                    inside.append(want[j])
                j += 1
            resolve(a, b, inside)
        for q in want:
            if q in self.known:
                out[q] = self.known[q]
        return out


def _disk_key(compressor, params, shapes) -> str | None:
    if compressors.is_compressor(compressor):
        return None
    shapes_t = [list(map(int, s)) for s in shapes]
    digest = hashlib.sha1(json.dumps(shapes_t).encode()).hexdigest()[:16]
    return json.dumps([compressor, normalize(compressor, params), digest])


def law(compressor, params: dict | None, shapes: Sequence, key: Any) -> PayloadLaw:
    """The (process-wide) :class:`PayloadLaw` of ``key`` (a hashable id of compressor, params and
    shapes; a partition-invariant compressor's on one flat tensor of the same size); compressors given
    by name are also kept on disk."""
    hit = _LAWS.get(key)
    if hit is None:
        if len(shapes) > 1 and _partition_invariant(compressor, params):
            shapes = [(sum(math.prod(int(d) for d in s) for s in shapes),)]  # the same plan, by definition
        hit = _LAWS[key] = PayloadLaw(compressor, params, shapes, _disk_key(compressor, params, shapes))
    return hit


def normalize(compressor: str, params: dict | None) -> dict:
    """Parameters with the compressor's defaults filled in, generic ones (seed, error feedback) left out."""
    from studykit.perfmodel.calibration import normalize_params

    return normalize_params(params, compressor)
