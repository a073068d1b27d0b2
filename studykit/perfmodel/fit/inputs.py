"""The extended model's inputs and fits (:meth:`ModelOptions.extended`, used by verify and
:func:`fit_calibration`): :class:`RecordInputs` (one platform's constants per configuration), gamma with the
synchronization terms (:func:`fit_sync_terms`), and the compression path's overhead."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import pandas as pd

from studykit.perfmodel.calibration import Calibration, PathOverhead, normalize_params
from studykit.perfmodel.fit.network import NETWORK_SOURCES, Network, fit_network, fit_network_from_probe
from studykit.perfmodel.fit.records import _isnan, _missing, pool_stat
from studykit.perfmodel.model import DEFAULT_BUCKET_BYTES, MIB, Hardware, ModelOptions, Workload, predict


GAMMA_MARGIN = 0.05  # a record is compute-bound when (1 + margin) * overlapped comm <= compute


def _workers(n) -> int | None:
    return int(n["workers"]) if isinstance(n, dict) and n.get("workers") is not None else None


def _mb(bucket_mb) -> float | None:
    """A bucket size in MB as a key: None for DDP's default (missing / NaN)."""
    return None if _missing(bucket_mb) else float(bucket_mb)


def _rate_key(rate) -> float | None:
    """A link rate (Gbit/s) as a key: None for a real network (missing / NaN)."""
    return None if _missing(rate) else float(rate)


class RecordInputs:
    """The single-device constants of one platform's records, per configuration: ``T_comp`` (alone, and
    contended), the non-backward overhead ``O``, the CPU slowdown ``kappa``, ``T_encode_decode`` and the
    :class:`Network` of each (world size, rate). Repeats are pooled by :func:`pool_stat`.

    * ``O`` = ``T_ddp(p=1) - T_comp`` (the DDP record of the same model and batch at world size 1), else
      ``T_fwd_bwd - T_comp`` (``tcomp`` records; no optimizer step), else 0;
    * CPU contention: ``tcomp`` records timed inside a throttled cluster (``network.workers`` = w, every
      worker timing at once) give the contended ``T_comp`` of a w-worker run and ``kappa_w`` = contended /
      alone (median over models and batches), which the model applies to ``O`` and ``T_encode_decode``;
    * ``max_p``: networks above it are fitted on world sizes ``<= max_p`` (:func:`fit_network`) and
      contended ``tcomp`` records of more than ``max_p`` workers are ignored (``kappa`` = 1 there);
    * ``network_from`` (:data:`NETWORK_SOURCES`): ``"sweep"`` fits each network on its own sweep
      (:func:`fit_network`); ``"probe"`` takes BW from the record's probe (``network.measured_busbw_gbps``)
      and alpha / incast from the sweeps at the other rates (:func:`fit_network_from_probe`);
      ``"auto"``: the sweep where the network has one, the probe elsewhere.

    ``tcomp``, ``ddp``, ``sweep``, ``profile``: the platform's records of each kind (DataFrames with
    ``rate_gbps`` and ``params_key`` columns, as :func:`studykit.perfmodel.verify.load_platform` builds)."""

    def __init__(self, tcomp: pd.DataFrame, ddp: pd.DataFrame, sweep: pd.DataFrame, profile: pd.DataFrame,
                 stat: str, max_p: int | None = None, network_from: str = "sweep",
                 buckets: pd.DataFrame | None = None, host_ahead: bool = False, bucket_times: bool = False):
        if network_from not in NETWORK_SOURCES:
            raise ValueError(f"network_from must be one of {NETWORK_SOURCES}, got {network_from!r}")
        self.stat, self.max_p, self.sweep, self.network_from = stat, max_p, sweep, network_from
        #: encode/decode from the host-ahead profile phases (``profile --host-ahead``) where they exist
        self.host_ahead = bool(host_ahead)
        #: (model, batch, bucket_mb or None, world_size) -> [(rate, ready fractions), ...] of ``buckets`` records
        self.ready: dict = {}
        #: (model, batch, world_size) -> [(rate, host ready ms), ...] of ``buckets`` records on DDP's default buckets
        self.ready_host_ms: dict = {}
        #: (model, batch, bucket_mb or None, world_size, rate) -> [last bucket's device ready time, ms] of ``buckets``
        #: records: the backward pass's compute under syncSGD's overlap (:meth:`measured_gamma`)
        self.backward_end_ms: dict = {}
        #: per-bucket encode/decode for hooks (``verify --encode-decode-from buckets``; :meth:`bucket_costs`)
        self.bucket_times = bool(bucket_times)
        if buckets is not None and not buckets.empty:
            for r in buckets.to_dict("records"):
                fr = r.get("ready_fraction")
                if isinstance(fr, (list, tuple)) and fr:
                    self.ready.setdefault((r["model"], int(r["batch_size"]), _mb(r.get("bucket_mb")),
                                           int(r["world_size"])), []).append(
                        (r.get("rate_gbps"), tuple(float(x) for x in fr)))
                rm = r.get("ready_ms")
                if isinstance(rm, (list, tuple)) and rm and r.get("clock") == "cuda_event":
                    self.backward_end_ms.setdefault((r["model"], int(r["batch_size"]), _mb(r.get("bucket_mb")),
                                                     int(r["world_size"]), _rate_key(r.get("rate_gbps"))), []).append(
                        float(rm[-1]))
                hr = r.get("ready_host_ms")
                if isinstance(hr, (list, tuple)) and hr and _missing(r.get("bucket_mb")):
                    self.ready_host_ms.setdefault((r["model"], int(r["batch_size"]), int(r["world_size"])), []).append(
                        (r.get("rate_gbps"), tuple(float(x) for x in hr)))
        st = stat
        t = tcomp.assign(_w=tcomp["network"].map(_workers))
        if max_p is not None:
            t = t[t["_w"].isna() | (t["_w"] <= max_p)]
        alone = t[t["_w"].isna()]
        self.t_comp = {(m, int(b)): pool_stat(g[st], st) / 1e3
                       for (m, b), g in alone[alone["phase"] == "bwd"].groupby(["model", "batch_size"])}
        self.t_fb = {(m, int(b)): pool_stat(g[st], st) / 1e3
                     for (m, b), g in alone[alone["phase"] == "fwd_bwd"].groupby(["model", "batch_size"])}
        cont = t[t["_w"].notna() & (t["phase"] == "bwd")]
        self.t_comp_w = {(m, int(b), int(w)): pool_stat(g[st], st) / 1e3
                         for (m, b, w), g in cont.groupby(["model", "batch_size", "_w"])}
        ratios: dict = {}
        for (m, b, w), v in self.t_comp_w.items():
            if (m, b) in self.t_comp:
                ratios.setdefault(w, []).append(v / self.t_comp[(m, b)])
        self.kappa_w = {w: float(np.median(r)) for w, r in ratios.items()}
        one = ddp[(ddp["world_size"] == 1) & (ddp["mode"] == "syncsgd") & ddp["bucket_mb"].isna()]
        self.t_ws1 = {(m, int(b)): pool_stat(g[st], st) / 1e3 for (m, b), g in one.groupby(["model", "batch_size"])}
        self.profile = profile[profile["phase"].isin(["reduce", "reduce_buckets", "reduce_host_ahead",
                                                      "reduce_buckets_host_ahead"]) | profile["phase"].isna()]
        self._nets: dict = {}

    def kappa(self, p: int) -> float:
        """CPU slowdown of a ``p``-worker run (1 without contended ``tcomp`` records)."""
        return self.kappa_w.get(int(p), 1.0)

    def tcomp(self, model: str, bs: int, p: int, contended: bool = False) -> tuple[float, str]:
        if contended and (model, bs, p) in self.t_comp_w:
            return self.t_comp_w[(model, bs, p)], f"T_comp tcomp bwd with {p} workers timing at once"
        if (model, bs) not in self.t_comp:
            raise KeyError(f"no tcomp bwd record for {model} batch {bs}")
        return self.t_comp[(model, bs)], "T_comp tcomp bwd"

    def overhead(self, model: str, bs: int) -> tuple[float, str]:
        """``(O_s, how)`` alone (the model multiplies by kappa under contention)."""
        key = (model, bs)
        if key not in self.t_comp:
            raise KeyError(f"no tcomp bwd record for {model} batch {bs}")
        if key in self.t_ws1:
            return self.t_ws1[key] - self.t_comp[key], "O = ddp(p=1) - T_comp"
        if key in self.t_fb:
            return self.t_fb[key] - self.t_comp[key], "O = tcomp fwd_bwd - bwd (no optimizer step)"
        return 0.0, "O = 0 (no world-size-1 or fwd_bwd record)"

    def encode_decode(self, model: str, compressor: str, pkey: str, p: int,
                      phase: str = "reduce") -> tuple[float, str]:
        """``(T_encode_decode_s, how)`` alone, from ``profile`` records of ``phase`` at the nearest simulated
        world size: ``reduce`` (the whole gradient, every round, as after the backward pass) or
        ``reduce_buckets`` (bucket by bucket as a DDP hook calls it; ``profile --ddp-buckets``). Records of
        the split phases (``encode``, ``decode``) are never pooled in.

        With ``host_ahead`` (``verify --encode-decode-from host_ahead``) the same phase timed with the host
        ahead of the GPU (``<phase>_host_ahead``, ``profile --host-ahead``: device time without launch gaps,
        as in an iteration, where the backward pass keeps the host ahead) is taken first, then ``phase`` as
        profiled (where the host could not get ahead, e.g. a codec that queues more kernels than CUDA's launch
        queue holds, the time with launch gaps is what the iteration pays), then the whole gradient's
        host-ahead time (``reduce_host_ahead``), then the whole gradient as profiled."""
        if self.host_ahead:
            for ph in dict.fromkeys((phase + "_host_ahead", phase, "reduce_host_ahead")):
                try:
                    t, how = self._encode_decode(model, compressor, pkey, p, ph)
                    return t, how + ("" if ph.endswith("_host_ahead") else " (no host-ahead record)")
                except KeyError:
                    pass
            t, how = self._encode_decode(model, compressor, pkey, p, "reduce")
            return t, how + " (no host-ahead record)"
        return self._encode_decode(model, compressor, pkey, p, phase)

    def _encode_decode(self, model: str, compressor: str, pkey: str, p: int, phase: str) -> tuple[float, str]:
        prof = self.profile
        ph = prof["phase"].fillna("reduce") if "phase" in prof.columns else pd.Series("reduce", index=prof.index)
        g = prof[(prof["model"] == model) & (prof["compressor"] == compressor) & (prof["params_key"] == pkey)
                 & (ph == phase)]
        if g.empty:
            raise KeyError(f"no profile record ({phase}) for {compressor} {pkey} on {model}")
        sws = g["sim_world_size"].fillna(1).astype(int)
        exact = g[sws == p]
        st = self.stat
        if not exact.empty:
            return pool_stat(exact[st], st) / 1e3, f"profile {phase} sim_world_size={p}"
        near = int(sws.iloc[(sws - p).abs().argsort().iloc[0]])
        return pool_stat(g[sws == near][st], st) / 1e3, f"profile {phase} sim_world_size={near} (run has p={p})"

    def ready_fractions(self, model: str, batch_size: int, bucket_mb, world_size: int, rate) -> tuple[tuple | None, str]:
        """When each DDP bucket is ready, as a fraction of the backward pass (``buckets`` records of the same model,
        batch, bucket size and world size): the element-wise median over the records at the *other* rates (never
        the scored run's own record), with how it was got; ``(None, "")`` without such records or when they
        disagree on the number of buckets (the model then assumes the bytes: ``bucket_ready_fractions``)."""
        rows = [fr for x, fr in self.ready.get((model, int(batch_size), _mb(bucket_mb), int(world_size)), [])
                if _missing(rate) or _missing(x) or float(x) != float(rate)]
        if not rows or len({len(fr) for fr in rows}) != 1:
            return None, ""
        med = tuple(float(v) for v in np.median(np.asarray(rows, dtype=float), axis=0))
        return med, f"; bucket ready times measured ({len(rows)} buckets records at other rates)"

    def measured_gamma(self, model: str, batch_size: int, bucket_mb, world_size: int, rate) -> float | None:
        """gamma as the paper measures it (Agarwal et al. 2022, https://arxiv.org/abs/2103.00543, Sec. 4.1 and
        App. C: the backward pass's compute under overlap with communication over ``T_comp`` alone): the last DDP
        bucket's device ready time of the ``buckets`` records of this configuration and rate (median), over the
        ``tcomp`` backward time; None without such records."""
        v = self.backward_end_ms.get((model, int(batch_size), _mb(bucket_mb), int(world_size), _rate_key(rate)))
        if not v or (model, int(batch_size)) not in self.t_comp:
            return None
        return float(np.median(v)) / 1e3 / self.t_comp[(model, int(batch_size))]

    def ready_host(self, model: str, batch_size: int, world_size: int, rate) -> tuple[tuple | None, str]:
        """When the host reaches each DDP bucket's hook (s from the call of ``loss.backward()``, host clock;
        DDP's default buckets): the element-wise median of the ``buckets`` records' ``ready_host_ms`` at the
        *other* rates, as :meth:`ready_fractions`; ``(None, "")`` without such records."""
        rows = [hr for x, hr in self.ready_host_ms.get((model, int(batch_size), int(world_size)), [])
                if _missing(rate) or _missing(x) or float(x) != float(rate)]
        if not rows or len({len(hr) for hr in rows}) != 1:
            return None, ""
        med = tuple(float(v) / 1e3 for v in np.median(np.asarray(rows, dtype=float), axis=0))
        return med, f"; host ready times measured ({len(rows)} buckets records at other rates)"

    def bucket_costs(self, model: str, compressor: str, pkey: str) -> tuple[tuple, tuple, str]:
        """``(device_s, host_s, how)``: per DDP bucket (communication order) the protocol's device time with the
        host ahead and its host time, element-wise medians over the ``reduce_buckets`` profile records that
        hold them (``profile --ddp-buckets --bucket-times``). KeyError where none does, or where a bucket's
        device time could not be taken (``bucket_device_error``)."""
        prof = self.profile
        if "bucket_device_ms" not in prof.columns or "bucket_host_ms" not in prof.columns:
            raise KeyError("no profile record with per-bucket times (profile --bucket-times)")
        ph = prof["phase"].fillna("reduce") if "phase" in prof.columns else pd.Series("reduce", index=prof.index)
        g = prof[(prof["model"] == model) & (prof["compressor"] == compressor) & (prof["params_key"] == pkey)
                 & (ph == "reduce_buckets")]
        rows = [(d, h) for d, h in zip(g["bucket_device_ms"], g["bucket_host_ms"])
                if isinstance(d, (list, tuple)) and isinstance(h, (list, tuple)) and d and len(d) == len(h)]
        if not rows or len({len(d) for d, _ in rows}) != 1:
            raise KeyError(f"no per-bucket times for {compressor} {pkey} on {model}")
        dev = tuple(float(v) / 1e3 for v in np.median(np.asarray([d for d, _ in rows], dtype=float), axis=0))
        host = tuple(float(v) / 1e3 for v in np.median(np.asarray([h for _, h in rows], dtype=float), axis=0))
        return dev, host, f"profile --bucket-times: {len(dev)} buckets, device {sum(dev) * 1e3:.2f} ms, " \
                          f"host {sum(host) * 1e3:.2f} ms ({len(rows)} record{'s' if len(rows) > 1 else ''})"

    def network(self, p: int, rate, probe_gbps: float | None = None, probe_bytes: float | None = None) -> Network:
        """The :class:`Network` of world size ``p`` at link ``rate`` (None: a real network); ``probe_gbps``
        / ``probe_bytes``: the record's probe (used as ``network_from`` says)."""
        rate = None if _isnan(rate) else float(rate)
        probe = None if _isnan(probe_gbps) else float(probe_gbps)
        src = self.network_from
        if src == "auto":
            own = self.sweep[(self.sweep["world_size"] == p) & ((self.sweep["rate_gbps"].isna()) if rate is None
                                                                else (self.sweep["rate_gbps"] == rate))]
            src = "sweep" if len(own) or probe is None else "probe"
        if src == "probe" and not (self.max_p is not None and p > self.max_p):
            if probe is None:
                raise ValueError(f"no probe bandwidth for network {rate}Gbps at world size {p} "
                                 "(records lack network.measured_busbw_gbps)")
            key = (p, rate, probe, probe_bytes)
            if key not in self._nets:
                self._nets[key] = fit_network_from_probe(self.sweep, p, rate, probe,
                                                         float(probe_bytes or 64 * MIB), self.stat)
            return self._nets[key]
        key = (p, rate)
        if key not in self._nets:
            self._nets[key] = fit_network(self.sweep, p, rate, self.stat, max_p=self.max_p)
        return self._nets[key]


@dataclass
class SyncTerms:
    """gamma and the extended syncSGD terms (s), with how they were fitted."""

    gamma: float
    delta_s: float = 0.0
    per_bucket_s: float = 0.0
    per_tensor_s: float = 0.0
    how: str = ""
    fitted: tuple = ()  # which of "gamma", "delta", "per_bucket", "per_tensor" the records determined
    n_used: int = 0  # compute-bound records behind them


#: the per-tensor term is fitted only when the calibration records hold at least this many tensor counts
#: (with two, it is a per-model offset that a model holdout cannot test)
PER_TENSOR_MIN_COUNTS = 3


def fit_sync_terms(rows: Sequence[dict], n_train: int | None = None, *, extended: bool = False,
                   per_tensor: bool = False, margin: float | None = None,
                   comm_fraction: float | None = None) -> SyncTerms:
    """gamma (Sec. 4.1) and, ``extended``, the synchronization terms from syncSGD iterations.

    Each row is one DDP record: ``s`` (measured iteration minus ``O``, s), ``t_comp`` (s),
    ``overlapped_comm`` and ``last_comm`` (s; the model's with gamma 1 and no extra term), ``k``
    (buckets) and ``n_tensors``. Only compute-bound rows count
    (``(1 + margin) overlapped_comm <= s - last_comm``; with ``comm_fraction`` also
    ``overlapped_comm + last_comm <= comm_fraction * t_comp``, which the communication model's own error
    cannot satisfy the way it satisfies the first: :data:`COMPUTE_BOUND_COMM_FRACTION`).

    * paper (App. C's rule): ``gamma = median((s - last_comm) / t_comp)``;
    * ``extended``: least squares (relative errors, non-negative coefficients) of
      ``s - last_comm = gamma t_comp + delta + c_b (k - 1) [+ c_t n_tensors]``. ``delta`` is fitted when
      the backward times are at least 1.5x apart, ``c_b`` when there are two bucket counts, ``c_t``
      (``per_tensor``) when there are :data:`PER_TENSOR_MIN_COUNTS` tensor counts. Backward times less
      than 1.5x apart cannot tell gamma from delta: gamma stays 1 and ``delta`` (and ``c_b``) are fitted to
      ``s - last_comm - t_comp`` (a constant extrapolates as a constant, not as a multiple of the backward).

    gamma = 1 when no row is compute-bound."""
    from scipy.optimize import nnls as _nnls

    n_train = len(rows) if n_train is None else n_train
    m = GAMMA_MARGIN if margin is None else margin
    cb = [r for r in rows if (1.0 + m) * r["overlapped_comm"] <= r["s"] - r["last_comm"]
          and (comm_fraction is None or r["overlapped_comm"] + r["last_comm"] <= comm_fraction * r["t_comp"])]
    if not cb:
        return SyncTerms(1.0, how="gamma=1 (no compute-bound calibration record)")
    x = np.asarray([r["t_comp"] for r in cb])
    y = np.asarray([r["s"] - r["last_comm"] for r in cb])
    n = len(x)
    if extended and len(x) >= 2 and x.max() >= 1.5 * x.min():
        kk = np.asarray([r["k"] - 1 for r in cb], dtype=float)
        nt = np.asarray([r.get("n_tensors", 0) for r in cb], dtype=float)
        if per_tensor and len(np.unique(nt)) >= PER_TENSOR_MIN_COUNTS:
            cols = [x, np.ones_like(x)] + ([kk] if kk.max() > kk.min() else []) + [nt]
            coef, _ = _nnls(np.column_stack(cols) / y[:, None], np.ones_like(y))
            if coef[0] > 0:
                g, d = coef[0], coef[1]
                e = coef[2] if len(coef) == 4 else 0.0
                t = coef[-1]
                return SyncTerms(float(g), float(d), float(e), float(t), (
                    f"gamma={g:.3f}, delta={d * 1e3:.3f} ms + {e * 1e3:.3f} ms per extra bucket + "
                    f"{t * 1e6:.2f} us per tensor: fit to {len(x)} compute-bound of {n_train}"),
                    ("gamma", "delta") + (("per_bucket",) if len(coef) == 4 else ()) + ("per_tensor",), n)
        if kk.max() > kk.min():
            (g, d, e), _ = _nnls(np.column_stack([x, np.ones_like(x), kk]) / y[:, None], np.ones_like(y))
            if g > 0:
                return SyncTerms(float(g), float(d), float(e), 0.0, (
                    f"gamma={g:.3f}, delta={d * 1e3:.3f} ms + {e * 1e3:.3f} ms per extra bucket: "
                    f"fit to {len(x)} compute-bound of {n_train}"), ("gamma", "delta", "per_bucket"), n)
        (g, d), _ = _nnls(np.column_stack([x, np.ones_like(x)]) / y[:, None], np.ones_like(y))  # relative errors
        if g > 0:
            return SyncTerms(float(g), float(d), 0.0, 0.0, (f"gamma={g:.3f}, delta={d * 1e3:.3f} ms: line through "
                                                            f"{len(x)} compute-bound of {n_train}"), ("gamma", "delta"), n)
    if extended:
        # The backward times span less than 1.5x: a line through them cannot tell gamma from delta. The paper's
        # rule (gamma alone) would turn a per-iteration constant into a multiple of the backward pass and
        # extrapolate it so, far outside Sec. 4.1's 1.04-1.1 and far off at larger batches (docs/verify.md
        # section 6). Keep gamma at 1 and fit the constants.
        kk = np.asarray([r["k"] - 1 for r in cb], dtype=float)
        cols = [np.ones_like(x)] + ([kk] if kk.max() > kk.min() else [])
        coef, _ = _nnls(np.column_stack(cols) / y[:, None], (y - x) / y)
        d, e = float(coef[0]), (float(coef[1]) if len(coef) > 1 else 0.0)
        per = f" + {e * 1e3:.3f} ms per extra bucket" if len(coef) > 1 else ""
        return SyncTerms(1.0, d, e, 0.0, (f"gamma=1 (backward times less than 1.5x apart: gamma cannot be told from "
                                          f"delta), delta={d * 1e3:.3f} ms{per}: fit to {len(x)} compute-bound of "
                                          f"{n_train}"), ("delta",) + (("per_bucket",) if len(coef) > 1 else ()), n)
    g = float(np.median(y / x))
    return SyncTerms(g, how=f"gamma={g:.3f} from {len(x)} compute-bound of {n_train}", fitted=("gamma",), n_used=n)


#: gamma values tried by :func:`fit_sync_terms_curve` (the Sec. 4.1 range 1.04-1.1 and far beyond it)
GAMMA_GRID = np.round(np.arange(0.80, 3.0001, 0.005), 3)
#: :func:`fit_sync_terms_curve` fits gamma only if some calibration record's ``T_obs`` moves by at least this
#: fraction of its measured time over the whole grid: a syncSGD median moves by about that much from run to run
#: (``data/measurements/bandwidth/README.md``), so a flatter curve leaves gamma to the noise
GAMMA_MIN_SENSITIVITY = 0.02


def fit_sync_terms_curve(rows: Sequence[dict], grid=GAMMA_GRID, n_train: int | None = None, *,
                         extended: bool = False, given: str | None = None) -> SyncTerms:
    """gamma (and, ``extended``, ``delta`` and the per-bucket term) when ``T_obs`` is not linear in gamma
    (``ModelOptions.overlap = "timeline"``: a bucket's ready time scales with ``gamma T_comp``).

    Each row: ``s`` (measured iteration minus ``O``, s), ``curve`` (the model's ``T_obs`` at every gamma
    of ``grid``, no extra term), ``k`` (buckets). Every row counts (communication-bound ones too: through
    the ready times they still depend on gamma). gamma minimizes the sum of squared relative errors;
    ``extended``: at each gamma, ``delta`` and ``c_b (k-1)`` by non-negative least squares of the
    relative residuals (``c_b`` only with two bucket counts).

    gamma stays 1 (and the extra terms are fitted at 1) when no row's ``T_obs`` moves by
    :data:`GAMMA_MIN_SENSITIVITY` of its measured time over the whole grid: every calibration record is
    communication-bound so deeply that the backward pass hides inside its noise (a large model's
    gradients over a slow link), and the best gamma on the grid is whatever the noise makes it. A
    hook's compressed iteration, compute-bound, would carry that arbitrary gamma in full.

    ``given``: gamma is not fitted but given as ``grid``'s single value (``verify --gamma-from buckets``), the
    text saying where it comes from; only the extra terms are fitted at it."""
    from scipy.optimize import nnls as _nnls

    n_train = len(rows) if n_train is None else n_train
    if not rows:
        return SyncTerms(1.0, how="gamma=1 (no calibration record)")
    grid = np.asarray(grid, dtype=float)
    y = np.asarray([r["s"] for r in rows], dtype=float)
    curves = np.vstack([np.broadcast_to(np.asarray(r["curve"], dtype=float), grid.shape) for r in rows])
    kk = np.asarray([r["k"] - 1.0 for r in rows])
    cols = [np.ones_like(y)] + ([kk] if kk.max() > kk.min() else [])
    best = (np.inf, 1.0, 0.0, 0.0)
    sensitivity = float(np.max((curves.max(axis=1) - curves.min(axis=1)) / y))
    if given is not None and len(grid) != 1:
        raise ValueError(f"a given gamma is one value, got a grid of {len(grid)}")
    identified = given is not None or sensitivity >= GAMMA_MIN_SENSITIVITY or not np.any(grid == 1.0)
    for j, g in enumerate(grid):
        if not identified and g != 1.0:
            continue
        res = y - curves[:, j]
        coef = np.zeros(len(cols))
        if extended:
            coef, _ = _nnls(np.column_stack(cols) / y[:, None], res / y)
        err = float(np.sum(((res - np.column_stack(cols) @ coef) / y) ** 2))
        if err < best[0]:
            best = (err, float(g), float(coef[0]) if extended else 0.0,
                    float(coef[1]) if extended and len(coef) > 1 else 0.0)
    _, g, d, e = best
    edge = " (at the grid's edge)" if identified and g in (grid[0], grid[-1]) else ""
    if given is not None:
        edge = f" {given}"
    if not identified:
        edge = (f" (not identifiable: no calibration record's T_obs moves by {GAMMA_MIN_SENSITIVITY:.0%} over gamma "
                f"{grid[0]:g}-{grid[-1]:g}, at most {sensitivity:.1%})")
    how = f"gamma={g:.3f}{edge}" + (f", delta={d * 1e3:.3f} ms + {e * 1e3:.3f} ms per extra bucket" if extended else "")
    return SyncTerms(g, d, e, 0.0, how + f": per-bucket timeline fitted to {len(rows)} of {n_train}",
                     ("gamma",) if identified and given is None else ())


def fit_path_overheads(records: pd.DataFrame, cal: Calibration, *, stat: str = "ms_median") -> list[PathOverhead]:
    """The compression path's own cost (beyond the paper) per model, batch and mode, for ``cal``: the median
    over that model's compressed DDP records (``post``; ``hook``: the kit's overlapped hook; ``hook_blocking``)
    at world size >= 2 of ``measured - predicted``, predicted as ``predict --calibration --terms extended``
    predicts them (:meth:`ModelOptions.extended`, path overhead off), with the quartiles as interval. Every
    compressor's runs count, the identity ``none`` included: over a slow link a ``none`` run is mostly
    communication, whose error would land in the overhead (``verify --path-overhead-from model`` scores this
    choice leave one rate out). Records whose compressor ``cal`` has no ``T_encode_decode`` for are skipped."""
    from studykit import compressors

    df = records[(records["kind"] == "ddp_other") & records["mode"].isin(["post", "hook"])]
    df = df[pd.to_numeric(df["world_size"], errors="coerce") >= 2]
    if df.empty:
        raise ValueError("cannot fit the path overhead: no compressed DDP record (mode post or hook) at world size >= 2")
    opts = replace(ModelOptions.extended(), path_overhead=False)
    hw = Hardware.from_calibration(cal, opts)
    res: dict[tuple, list[float]] = {}
    skipped: set = set()
    for r in df.to_dict("records"):
        mode = r["mode"] if r["mode"] != "hook" or r.get("hook_overlap") is True else "hook_blocking"
        w = Workload(r["model"], int(r["batch_size"]), bucket_bytes=DEFAULT_BUCKET_BYTES)
        params = normalize_params(r.get("params") if isinstance(r.get("params"), dict) else {})
        try:
            pr = predict(w, hw, int(r["world_size"]), r["compressor"], params, calibration=cal, options=opts, mode=mode)
        except (ValueError, KeyError, compressors.CompressorError) as exc:
            skipped.add(f"{r['compressor']} on {r['model']}: {exc}")
            continue
        res.setdefault((r["model"], int(r["batch_size"]), mode), []).append(
            float(r[stat]) / 1e3 - float(np.asarray(pr.compressed["iteration_s"]).reshape(-1)[0]))
    if not res:
        raise ValueError("cannot fit the path overhead: no compressed DDP record could be predicted ("
                         + "; ".join(sorted(skipped)[:3]) + ")")
    out = []
    for (m, bs, mode), v in sorted(res.items()):
        q1, q3 = np.percentile(v, [25, 75])
        out.append(PathOverhead(value=fit_path_overhead(v), unit="s", low=float(q1), high=float(q3), n=len(v),
                                source=f"median of measured - predicted over {len(v)} compressed '{mode}' DDP "
                                       f"record(s) ({stat}; extended terms, path overhead off)"
                                       + (f"; records of {len(skipped)} compressor/model pair(s) skipped (no "
                                          "prediction, e.g. no T_encode_decode)" if skipped else ""),
                                model=str(m), batch_size=bs, mode=mode))
    return out


def fit_path_overhead(residuals_s: Sequence[float]) -> float:
    """The compression path's overhead (s, beyond the paper): the median of ``measured - predicted`` over
    iterations (copies back into the gradients, Python per bucket, hook futures: what the profile does not
    time). ``verify`` gives it the identity compressor's (``none``) runs by default, whose encode/decode is
    empty; :func:`fit_path_overheads` and ``verify --path-overhead-from model`` every compressed run."""
    if not len(residuals_s):
        raise ValueError("cannot fit the path overhead: no identity-compressor ('none') iteration")
    return float(np.median(np.asarray(residuals_s, dtype=float)))
