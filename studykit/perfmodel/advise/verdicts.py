"""The answer of :func:`~studykit.perfmodel.advise.advise` as data (:class:`Advice`): the ranking per
grid point, each candidate's interval widened by the model's error, speed-ups over both baselines, the
bandwidth above which a compressor stops paying (its crossover), the verdict per grid point, and tidy views
(a DataFrame, JSON-able data). The words and tables it prints come from
:mod:`~studykit.perfmodel.advise.text`."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from studykit.perfmodel.advise import text
from studykit.perfmodel.advise.candidates import AdviseError, Candidate

#: the crossover search (:meth:`Advice.crossover_gbps`): a log grid of bandwidths (Gbit/s), so many points a
#: decade, from the lowest to at least the highest (4x the highest bandwidth asked, where that is more)
CROSSOVER_MIN_GBPS = 0.01
CROSSOVER_MAX_GBPS = 1000.0
CROSSOVER_PER_DECADE = 24


@dataclass
class Advice:
    """The ranking over a (bandwidth x world size) grid. Arrays are ``(candidate, bandwidth, world size)``.

    ``time_s`` / ``low_s`` / ``high_s``: predicted iteration time and its interval (NaN for a candidate
    the calibration cannot price: see ``unranked``); ``error``: the model's relative error used per
    candidate; ``evidence``: :func:`accuracy_evidence` per candidate; ``wire``: per compressor and world
    size, the bits per element on the link (:func:`wire_bits`); ``pricer``: the same prices at central
    constants for other bandwidths (what :meth:`crossover_gbps` searches). ``str(advice)`` is what
    ``python -m studykit advise`` prints (:meth:`format`).
    """

    candidates: list[Candidate]
    world_sizes: np.ndarray
    bandwidths_gbps: np.ndarray
    time_s: np.ndarray
    low_s: np.ndarray
    high_s: np.ndarray
    error: np.ndarray
    evidence: list[dict]
    unranked: dict[str, str] = field(default_factory=dict)  # label -> why
    how: dict[str, dict] = field(default_factory=dict)  # label -> how its inputs were found
    inputs: dict = field(default_factory=dict)
    exact_constants: list[str] = field(default_factory=list)
    error_groups: list[str] = field(default_factory=list)  # per candidate: whose verification error it takes
    wire: dict[str, dict[int, dict]] = field(default_factory=dict)
    #: (bandwidths_gbps, world_size) -> central iteration times (s), (candidate, bandwidth)
    pricer: Any = field(default=None, repr=False, compare=False)
    _crossovers: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def order(self) -> np.ndarray:
        """Candidate indices by predicted time, per grid point: ``(rank, bandwidth, world size)``; unranked last."""
        t = np.where(np.isnan(self.time_s), np.inf, self.time_s)
        return np.argsort(t, axis=0, kind="stable")

    @property
    def best(self) -> np.ndarray:
        """Index of the fastest candidate per grid point ``(bandwidth, world size)``."""
        return self.order[0]

    def _widened(self):
        e = self.error[:, None, None]
        return self.low_s * (1 - e), self.high_s * (1 + e)

    @property
    def within_error_of_best(self) -> np.ndarray:
        """``(candidate, bandwidth, world size)``: its interval, widened by the model's error, overlaps the best's."""
        lo, hi = self._widened()
        b = self.best
        hi_best = np.take_along_axis(hi, b[None], axis=0)
        return (lo <= hi_best) & ~np.isnan(self.time_s)

    def index(self, world_size: int, bandwidth_gbps: float) -> tuple[int, int]:
        """Grid indices ``(bandwidth, world size)`` of a point of the grid."""
        i = np.flatnonzero(np.isclose(self.bandwidths_gbps, bandwidth_gbps))
        j = np.flatnonzero(self.world_sizes == world_size)
        if not len(i) or not len(j):
            raise AdviseError(f"({world_size} GPUs, {bandwidth_gbps} Gbit/s) is not on the grid: world sizes "
                              f"{self.world_sizes.tolist()}, bandwidths {self.bandwidths_gbps.tolist()}")
        return int(i[0]), int(j[0])

    # -------------------------------------------------------------- answers
    def _baselines(self) -> tuple[int, int]:
        kinds = [c.kind for c in self.candidates]
        return kinds.index("syncsgd"), kinds.index("fp16_hook")

    def speedups(self) -> tuple[np.ndarray, np.ndarray]:
        """Speed-up of every candidate over syncSGD and over the fp16 baseline (their time / its time; > 1:
        faster), each ``(candidate, bandwidth, world size)``."""
        s, f = self._baselines()
        return self.time_s[s] / self.time_s, self.time_s[f] / self.time_s

    @property
    def crossover_top_gbps(self) -> float:
        """The top of :meth:`crossover_gbps`'s bandwidth grid (Gbit/s)."""
        return float(max(CROSSOVER_MAX_GBPS, 4 * float(np.max(self.bandwidths_gbps))))

    def crossover_gbps(self, world_size: int) -> np.ndarray:
        """Per candidate: the bandwidth (Gbit/s) above which it stops beating the best baseline (the faster of
        syncSGD and the fp16 baseline at each bandwidth) on ``world_size`` GPUs. Central constants, the same
        prices on a log grid of bandwidths (:data:`CROSSOVER_PER_DECADE` a decade, from
        :data:`CROSSOVER_MIN_GBPS` to :attr:`crossover_top_gbps`, plus the asked bandwidths), the last
        crossing refined by linear interpolation of the log time ratio in log bandwidth. ``inf``: it still
        beats the best baseline at the grid's top; NaN: it never does (and for the baselines)."""
        world_size = int(world_size)
        if world_size in self._crossovers:
            return self._crossovers[world_size]
        if world_size not in self.world_sizes:
            raise AdviseError(f"world size {world_size} is not on the grid: {self.world_sizes.tolist()}")
        lo, hi = math.log10(CROSSOVER_MIN_GBPS), math.log10(self.crossover_top_gbps)
        grid = np.unique(np.concatenate([np.logspace(lo, hi, int(round((hi - lo) * CROSSOVER_PER_DECADE)) + 1),
                                         self.bandwidths_gbps]))
        T = self.pricer(grid, world_size)
        s, f = self._baselines()
        best = np.fmin(T[s], T[f])
        out = np.full(len(self.candidates), np.nan)
        for k, c in enumerate(self.candidates):
            if c.kind != "compressor" or np.isnan(T[k]).all():
                continue
            r = np.log(T[k] / best)  # < 0: it pays
            pays = r < 0
            if not pays.any():
                continue
            if pays[-1]:
                out[k] = np.inf
                continue
            i = int(np.flatnonzero(pays)[-1])
            x0, x1 = np.log(grid[i]), np.log(grid[i + 1])
            out[k] = float(np.exp(x0 - r[i] * (x1 - x0) / (r[i + 1] - r[i])))
        self._crossovers[world_size] = out
        return out

    def crossover_text(self, value: float) -> str:
        """A crossover bandwidth in words: ``"18 Gbit/s"``, ``"> 1000 Gbit/s"`` (pays at the grid's top) or
        ``"never"``."""
        if np.isnan(value):
            return "never"
        if np.isinf(value):
            return f"> {self.crossover_top_gbps:g} Gbit/s"
        return f"{value:.3g} Gbit/s"

    def verdict_data(self, world_size: int, bandwidth_gbps: float) -> dict:
        """The answer at one grid point, as data. The best baseline is the faster of syncSGD and the fp16
        baseline; the winner is the fastest compressor whose interval, widened by the model's error, lies
        wholly below the best baseline's (the identity compressor ``none`` is the compression path's cost, never
        a winner); None when no compressor beats the best baseline beyond the model's error. ``intervals_decide``:
        there is no winner, yet the fastest compressor's central time beats the best baseline's by more than the
        model's error: the calibration's intervals alone withhold the verdict."""
        i, j = self.index(world_size, bandwidth_gbps)
        s, f = self._baselines()
        t = self.time_s[:, i, j]
        lo, hi = (a[:, i, j] for a in self._widened())
        base = s if t[s] <= t[f] else f
        comps = [int(k) for k in self.order[:, i, j] if self.candidates[k].kind == "compressor"
                 and self.candidates[k].compressor != "none" and not np.isnan(t[k])]
        clear = [k for k in comps if hi[k] < lo[base]]
        k = clear[0] if clear else (comps[0] if comps else None)
        cross = self.crossover_gbps(world_size) if k is not None else None
        out = {"world_size": int(world_size), "bandwidth_gbps": float(bandwidth_gbps),
               "mode": None if k is None else self.candidates[k].mode,
               "best_baseline": self.candidates[base].label, "winner": self.candidates[k].label if clear else None,
               "candidate": None if k is None else self.candidates[k].label,
               "speedup_over_syncsgd": None if k is None else float(t[s] / t[k]),
               "speedup_over_fp16": None if k is None else float(t[f] / t[k]),
               "model_error": None if k is None else float(self.error[k]),
               "crossover_gbps": None if k is None or not np.isfinite(cross[k]) else float(cross[k]),
               "crossover": None if k is None else self.crossover_text(cross[k]),
               # no winner although the central times differ by more than both model errors: the calibration's
               # intervals (its poorly determined constants) are what withhold the verdict
               "intervals_decide": bool(k is not None and not clear
                                        and t[k] * (1 + self.error[k]) < t[base] * (1 - self.error[base]))}
        out["text"] = text.verdict_text(self, out)
        return out

    def verdict(self, world_size: int, bandwidth_gbps: float) -> str:
        """The answer at one grid point in words (:meth:`verdict_data`'s ``text``)."""
        return self.verdict_data(world_size, bandwidth_gbps)["text"]

    def verdicts(self) -> list[dict]:
        """:meth:`verdict_data` of every grid point (bandwidth-major, as the tables)."""
        return [self.verdict_data(int(p), float(b)) for b in self.bandwidths_gbps for p in self.world_sizes]

    # -------------------------------------------------------------- views
    def ranking(self, world_size: int, bandwidth_gbps: float) -> list[dict]:
        """The ranking at one grid point: one dict per ranked candidate, fastest first, with its speed-ups over
        both baselines, its crossover bandwidth (:meth:`crossover_gbps`) and its bits on the link."""
        i, j = self.index(world_size, bandwidth_gbps)
        lo, hi = self._widened()
        over_sync, over_fp16 = self.speedups()
        cross = self.crossover_gbps(world_size)
        rows, prev = [], None
        within = self.within_error_of_best[:, i, j]
        for r, c in enumerate(self.order[:, i, j]):
            if np.isnan(self.time_s[c, i, j]):
                break
            tie_prev = prev is not None and lo[c, i, j] <= hi[prev, i, j]
            cand = self.candidates[c]
            wire = self.wire.get(cand.label, {}).get(int(world_size))
            rows.append({"rank": r + 1, "candidate": cand.label, "compressor": cand.compressor,
                         "params": cand.param_dict, "kind": cand.kind,
                         "iteration_ms": 1e3 * float(self.time_s[c, i, j]),
                         "low_ms": 1e3 * float(self.low_s[c, i, j]), "high_ms": 1e3 * float(self.high_s[c, i, j]),
                         "speedup_over_syncsgd": float(over_sync[c, i, j]),
                         "speedup_over_fp16": float(over_fp16[c, i, j]),
                         "crossover_gbps": float(cross[c]) if np.isfinite(cross[c]) else None,
                         "crossover": self.crossover_text(cross[c]) if cand.kind == "compressor"
                         and cand.compressor != "none" else None,
                         "bits_per_element": None if wire is None else wire["bits_per_element"],
                         "summed_in": None if wire is None else wire["summed_in"],
                         "model_error": float(self.error[c]), "within_error_of_best": bool(within[c]),
                         "within_error_of_previous": bool(tie_prev),
                         "accuracy_evidence": self.evidence[c]["status"],
                         "evidence_note": self.evidence[c]["note"], "inputs": self.how.get(cand.label, {})})
            prev = c
        return rows

    def frame(self):
        """Tidy pandas DataFrame: one row per (candidate, bandwidth, world size), with ``rank``."""
        import pandas as pd

        ranks = np.empty_like(self.order)
        np.put_along_axis(ranks, self.order, np.arange(len(self.candidates))[:, None, None], axis=0)
        nb, npp = len(self.bandwidths_gbps), len(self.world_sizes)
        n = len(self.candidates)
        over_sync, over_fp16 = self.speedups()
        return pd.DataFrame({
            "candidate": np.repeat([c.label for c in self.candidates], nb * npp),
            "bandwidth_gbps": np.tile(np.repeat(self.bandwidths_gbps, npp), n),
            "world_size": np.tile(self.world_sizes, n * nb),
            "iteration_s": self.time_s.ravel(), "low_s": self.low_s.ravel(), "high_s": self.high_s.ravel(),
            "speedup_over_syncsgd": over_sync.ravel(), "speedup_over_fp16": over_fp16.ravel(),
            "rank": np.where(np.isnan(self.time_s), -1, ranks + 1).ravel(),
            "within_error_of_best": self.within_error_of_best.ravel(),
            "accuracy_evidence": np.repeat([e["status"] for e in self.evidence], nb * npp)})

    def to_dict(self) -> dict:
        """Everything as JSON-able data (what ``advise --json`` prints): the verdicts first."""
        return {"verdicts": self.verdicts(), "inputs": self.inputs, "exact_constants": self.exact_constants,
                "unranked": self.unranked,
                "candidates": [{"label": c.label, "kind": c.kind, "compressor": c.compressor, "params": c.param_dict,
                                "mode": c.mode,
                                "model_error": float(e), "accuracy_evidence": ev["status"],
                                "evidence_note": ev["note"], "inputs": self.how.get(c.label, {}),
                                "wire": {str(q): w for q, w in self.wire.get(c.label, {}).items()}}
                               for c, e, ev in zip(self.candidates, self.error, self.evidence)],
                "points": [{"world_size": int(p), "bandwidth_gbps": float(b),
                            "ranking": [{k: v for k, v in r.items() if k not in ("inputs", "evidence_note", "params",
                                                                                 "compressor", "kind")}
                                        for r in self.ranking(int(p), float(b))]}
                           for b in self.bandwidths_gbps for p in self.world_sizes]}

    def format(self, top: int | None = None) -> str:
        """The human answer (what ``python -m studykit advise`` prints): one verdict per (world size,
        bandwidth), the legend, then one table per point. ``top``: the first ``top`` compressors of each
        ranking, and both baselines always (:func:`~studykit.perfmodel.advise.text.format_advice`)."""
        return text.format_advice(self, top)

    def __str__(self) -> str:
        return self.format()
