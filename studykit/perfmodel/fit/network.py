"""The network's constants: Eq. 1 alpha and BW, the all-gather incast coefficient, one network's records and
probes, and :class:`Network` (Agarwal et al. 2022, https://arxiv.org/abs/2103.00543)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from studykit.perfmodel import collectives as col
from studykit.perfmodel.calibration import Constant
from studykit.perfmodel.fit.records import (_interval, _isnan, _missing, _need, _of_kind, _r2, _times_s, normalize,
                                            pool_stat)
from studykit.perfmodel.model import MIB


@dataclass
class AlphaBWFit:
    """Fitted Eq. 1 constants plus what the plots need."""

    alpha_s: Constant
    bandwidth_gbps: Constant
    per_world_size: pd.DataFrame  # world_size, intercept_s, bw_eff_gbps, bw_gbps, r2, n
    data: pd.DataFrame  # the records used: world_size, size_bytes, t_s, t_fit_s


def _eq1_design(size_bytes, world_size):
    p = np.asarray(world_size, dtype=float)
    b = np.asarray(size_bytes, dtype=float)
    return np.column_stack([2.0 * (p - 1.0), 2.0 * b * (p - 1.0) / p])


def _wls_nonneg(X, y):
    w = 1.0 / y  # relative errors: small messages weigh as much as large ones
    coef, _ = nnls(X * w[:, None], y * w)
    return coef


def fit_alpha_bw(records: pd.DataFrame, *, stat: str = "ms_median", n_boot: int = 200,
                 seed: int = 0) -> AlphaBWFit:
    """alpha (s) and BW (Gbit/s) of Eq. 1 (Sec. 4.1) from all-reduce records.

    Needs all-reduce records at world size >= 2 and at least two distinct message
    sizes (one size cannot separate latency from bandwidth). Records at world size 1
    move nothing and are ignored.
    """
    what = "alpha and BW (Eq. 1)"
    df = _of_kind(normalize(records), "allreduce", what)
    _need(df, ["size_bytes", "world_size"], what)
    df = df[df["world_size"].astype(float) >= 2]
    if df.empty:
        raise ValueError(f"cannot fit {what}: all all-reduce records are at world_size 1 (p=1 moves no bytes); "
                         "need records at world_size >= 2")
    if df["size_bytes"].nunique() < 2:
        raise ValueError(f"cannot fit {what}: one message size only ({int(df['size_bytes'].iloc[0])} bytes); "
                         "need at least 2 distinct size_bytes to separate latency from bandwidth")
    t = _times_s(df, stat, what)
    p = df["world_size"].to_numpy(dtype=float)
    b = df["size_bytes"].to_numpy(dtype=float)
    X = _eq1_design(b, p)
    alpha, inv_bw = _wls_nonneg(X, t)
    if inv_bw <= 0 or np.max(X[:, 1] * inv_bw / t) < 1e-6:  # the bandwidth term explains nothing
        raise ValueError(f"cannot fit {what}: times do not grow with message size; bandwidth undetermined")
    t_fit = X @ np.array([alpha, inv_bw])
    r2 = _r2(t, t_fit)
    rng = np.random.default_rng(seed)
    boot_a, boot_bw = [], []
    n = len(t)
    for _ in range(n_boot):
        i = rng.integers(0, n, n)
        if len(np.unique(b[i])) < 2:
            continue
        a_i, ib_i = _wls_nonneg(X[i], t[i])
        if ib_i > 0:
            boot_a.append(a_i)
            boot_bw.append(float(col.bytes_s_to_gbps(1.0 / ib_i)))
    bw_gbps = float(col.bytes_s_to_gbps(1.0 / inv_bw))
    a_lo, a_hi = _interval(boot_a)
    b_lo, b_hi = _interval(boot_bw)
    src = f"fit of Eq. 1 to {n} all-reduce records ({stat}), weighted least squares"
    per = []
    for q, g in df.assign(t_s=t).groupby("world_size"):
        if g["size_bytes"].nunique() < 2:
            continue
        Xq = np.column_stack([np.ones(len(g)), g["size_bytes"].to_numpy(float)])
        a_q, s_q = _wls_nonneg(Xq, g["t_s"].to_numpy(float))
        if s_q <= 0:
            continue
        bw_eff = 1.0 / s_q
        per.append({"world_size": int(q), "intercept_s": a_q, "bw_eff_gbps": float(col.bytes_s_to_gbps(bw_eff)),
                    "bw_gbps": float(col.bytes_s_to_gbps(bw_eff * 2.0 * (q - 1.0) / q)),
                    "r2": _r2(g["t_s"], Xq @ np.array([a_q, s_q])), "n": len(g)})
    data = pd.DataFrame({"world_size": p.astype(int), "size_bytes": b, "t_s": t, "t_fit_s": t_fit})
    return AlphaBWFit(
        alpha_s=Constant(float(alpha), "s", src, low=a_lo, high=a_hi, r2=r2, n=n),
        bandwidth_gbps=Constant(bw_gbps, "Gbit/s", src, low=b_lo, high=b_hi, r2=r2, n=n),
        per_world_size=pd.DataFrame(per), data=data)


def fit_incast(records: pd.DataFrame, alpha_s: float, bandwidth_gbps: float, *, stat: str = "ms_median",
               n_boot: int = 200, seed: int = 0) -> Constant:
    """All-gather congestion coefficient ``c`` (beyond the paper; App. C names the gap).

    ``T - (p-1) alpha = (1 + c) (p-1) b / BW`` over all-gather records (p >= 2),
    with alpha and BW from the all-reduce fit; ``c`` is clipped at 0. When the
    records hold the all-reduce sweep too, the bootstrap refits alpha and BW in each
    resample, so the interval carries their uncertainty.
    """
    what = "the all-gather incast coefficient"
    norm = normalize(records)
    df = _of_kind(norm, "allgather", what)
    _need(df, ["size_bytes", "world_size"], what)
    df = df[df["world_size"].astype(float) >= 2]
    if df.empty:
        raise ValueError(f"cannot fit {what}: need all-gather records at world_size >= 2")
    t = _times_s(df, stat, what)
    p = df["world_size"].to_numpy(float)
    b = df["size_bytes"].to_numpy(float)

    def slope(i, a_s, bw_gbps):
        x = (p[i] - 1.0) * b[i] / col.gbps_to_bytes_s(bw_gbps)
        y = t[i] - (p[i] - 1.0) * a_s
        w = 1.0 / t[i]
        return float(np.sum(w * w * x * y) / np.sum(w * w * x * x))

    idx = np.arange(len(t))
    s = slope(idx, alpha_s, bandwidth_gbps)
    ar = norm[(norm["kind"] == "allreduce")]
    if len(ar) and {"size_bytes", "world_size", stat} <= set(ar.columns):
        ar = ar[ar["world_size"].astype(float) >= 2]
    joint = len(ar) >= 2 and ar["size_bytes"].nunique() >= 2
    if joint:
        Xa = _eq1_design(ar["size_bytes"].to_numpy(float), ar["world_size"].to_numpy(float))
        ta = ar[stat].to_numpy(float) / 1e3
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(n_boot):
        a_s, bw_g = alpha_s, bandwidth_gbps
        if joint:
            j = rng.integers(0, len(ta), len(ta))
            a_j, ib_j = _wls_nonneg(Xa[j], ta[j])
            if ib_j <= 0:
                continue
            a_s, bw_g = a_j, float(col.bytes_s_to_gbps(1.0 / ib_j))
        boot.append(max(slope(rng.integers(0, len(t), len(t)), a_s, bw_g) - 1.0, 0.0))
    lo, hi = _interval(boot)
    x = (p - 1.0) * b / col.gbps_to_bytes_s(bandwidth_gbps)
    return Constant(max(s - 1.0, 0.0), "ratio", f"all-gather records ({len(t)}, {stat}) vs ring all-gather "
                    "with the fitted alpha/BW (beyond Agarwal et al. 2022)" + ("; bootstrap refits alpha/BW" if joint else ""),
                    low=lo, high=hi, r2=_r2(t, (p - 1.0) * alpha_s + s * x), n=len(t))


#: kinds of the link's bandwidth probe (``throttle_probe``: ``python -m studykit throttle``; ``probe``)
PROBE_KINDS = ("throttle_probe", "probe")
#: kinds whose times depend on the network (records of other kinds are kept whatever their network)
_NETWORK_KINDS = ("allreduce", "allgather", "ps", "ddp", "ddp_other", *PROBE_KINDS)


def parse_network(text: str) -> dict:
    """``rate_gbps=5,workers=2`` (or ``native``) -> the fields a record's ``network`` must match."""
    text = text.strip()
    if text in ("native", "none", "null"):
        return {}
    out = {}
    for part in text.split(","):
        if "=" not in part:
            raise ValueError(f"network selector {text!r}: expected KEY=VALUE[,KEY=VALUE] "
                             "(keys: rate_gbps, latency_ms, workers) or 'native'")
        k, v = (x.strip() for x in part.split("=", 1))
        if k not in ("rate_gbps", "latency_ms", "workers"):
            raise ValueError(f"network selector {text!r}: unknown key {k!r}; valid: rate_gbps, latency_ms, workers")
        out[k] = float(v)
    return out


def select_network(df: pd.DataFrame, network: str | dict | None = None) -> tuple[pd.DataFrame, dict | None]:
    """The records of one network: ``(records, network)``, ``network`` the records' ``network`` field (None:
    a real network). Records of kinds that do not depend on the network (``tcomp`` alone, ``profile``) are
    kept. Records on more than one network (a different ``rate_gbps``, ``latency_ms`` or ``workers``) raise
    naming them, unless ``network`` picks one (``"rate_gbps=5"``, ``"native"``, or a dict of fields)."""
    net = df["network"] if "network" in df.columns else pd.Series([None] * len(df), index=df.index)
    keys = net.map(network_of)
    dep = df["kind"].isin(_NETWORK_KINDS)
    if "world_size" in df.columns:  # world size 1 moves nothing: on no network
        dep &= ~(pd.to_numeric(df["world_size"], errors="coerce") == 1)
    found = sorted(set(keys[dep]), key=lambda t: tuple(-1 if v is None else v for v in t))
    if network is None:
        if len(found) > 1:
            raise ValueError(f"records from {len(found)} networks: {', '.join(network_label(t) for t in found)}; "
                             "fit one at a time (fit --network rate_gbps=5, or --network native)")
        chosen = found[0] if found else (None, None, None)
    else:
        want = parse_network(network) if isinstance(network, str) else dict(network)
        names = ("rate_gbps", "latency_ms", "workers")
        match = [t for t in found if (not want and all(v is None for v in t)) or
                 (want and all(dict(zip(names, t)).get(k) == v for k, v in want.items()))]
        if len(match) != 1:
            raise ValueError(f"network {network!r} matches {len(match)} of the networks in the records "
                             f"({', '.join(network_label(t) for t in found) or 'none'}); name exactly one")
        chosen = match[0]
    keep = ~dep | (keys == chosen)
    sel = None if all(v is None for v in chosen) else {k: v for k, v in zip(("rate_gbps", "latency_ms", "workers"),
                                                                           chosen) if v is not None}
    return df[keep].reset_index(drop=True), sel


def network_of(n) -> tuple:
    """``(rate_gbps, latency_ms, workers)`` of a record's ``network`` field; ``(None, None, None)`` on a
    real network (``network`` null). Records with different tuples are on different networks."""
    if isinstance(n, dict) and n:
        rate = float(n["rate_gbps"]) if n.get("rate_gbps") is not None else None
        lat = float(n["latency_ms"]) if n.get("latency_ms") is not None else None
        return (rate, lat, int(n["workers"]) if n.get("workers") is not None else None)
    return (None, None, None)


def network_label(net: tuple) -> str:
    """``native`` for a real network, else ``rate_gbps=5,workers=2`` (the fields that are set)."""
    if all(v is None for v in net):
        return "native"
    return ",".join(f"{k}={v:g}" for k, v in zip(("rate_gbps", "latency_ms", "workers"), net) if v is not None)


@dataclass
class Network:
    """Communication constants of one network at one world size: Eq. 1 alpha / BW, the all-gather
    incast coefficient, and (unless extrapolated in p) the measured collective table."""

    world_size: int
    rate_gbps: float | None
    alpha_s: float
    bandwidth_gbps: float
    incast_coeff: float
    table: Any  # studykit.perfmodel.collectives.CollectiveTable, or None when extrapolated
    r2: float = float("nan")
    #: the sweep records the constants come from (``sweep p=2 native``; ``sweep p<=2 native`` extrapolated)
    fitted_on: str = ""
    extrapolated: bool = False


def fit_network(sweep: pd.DataFrame, world_size: int, rate_gbps: float | None, stat: str,
                max_p: int | None = None, label: str | None = None) -> Network:
    """Eq. 1 alpha/BW (:func:`fit_alpha_bw`), the incast coefficient (:func:`fit_incast`) and the measured
    collective table of one network's ``sweep`` records (a ``rate_gbps`` column selects the network).

    ``max_p``: when ``world_size > max_p`` the constants are fitted on the network's sweep at world
    sizes ``2..max_p`` only and no table is kept (Eq. 1 / App. B extrapolate in p)."""
    label = label or ("native" if rate_gbps is None else (f"{rate_gbps:g}Gbps" if rate_gbps > 0 else "unshaped"))
    s = sweep[sweep["rate_gbps"].isna()] if rate_gbps is None else sweep[sweep["rate_gbps"] == rate_gbps]
    extrapolated = max_p is not None and world_size > max_p
    if extrapolated:
        s = s[(s["world_size"] >= 2) & (s["world_size"] <= max_p)]
        fitted_on = f"sweep p<={max_p} {label}"
    else:
        s = s[s["world_size"] == world_size]
        fitted_on = f"sweep p={world_size} {label}"
    if s.empty:
        raise ValueError(f"no sweep records at world size {world_size if not extrapolated else f'<= {max_p}'}, "
                         f"network {label}")
    ab = fit_alpha_bw(s, stat=stat, n_boot=0)
    try:
        inc = fit_incast(s, ab.alpha_s.value, ab.bandwidth_gbps.value, stat=stat, n_boot=0).value
    except ValueError:
        inc = 0.0
    table = None
    if not extrapolated:
        sizes, times = {}, {}
        for op, g in s.groupby("op"):
            g = g.groupby("size_bytes")[stat].agg(lambda v: pool_stat(v, stat)).sort_index()
            sizes[op], times[op] = g.index.to_numpy(float), g.to_numpy(float) / 1e3
        table = col.CollectiveTable(int(world_size), sizes, times, fitted_on)
    return Network(int(world_size), rate_gbps, ab.alpha_s.value, ab.bandwidth_gbps.value, inc, table,
                   r2=ab.alpha_s.r2 or float("nan"), fitted_on=fitted_on, extrapolated=extrapolated)


#: where :class:`RecordInputs` takes a network's constants from (``network_from``)
NETWORK_SOURCES = ("sweep", "probe", "auto")


def eq1_bandwidth_from_busbw(busbw_gbps: float, nbytes: float, world_size: int, alpha_s: float) -> float:
    """Eq. 1's BW (Gbit/s) from one all-reduce's bus bandwidth (nccl-tests convention,
    ``busbw = 2 (p-1)/p * nbytes / T``): ``T = 2 (p-1)/p * nbytes / busbw``, and Eq. 1
    ``T = 2 alpha (p-1) + 2 nbytes (p-1) / (p BW)`` solved for BW. With ``alpha = 0`` it is ``busbw``."""
    p = float(world_size)
    f = 2.0 * (p - 1.0) / p
    t = f * float(nbytes) / col.gbps_to_bytes_s(busbw_gbps)
    rest = t - 2.0 * (p - 1.0) * float(alpha_s)
    if rest <= 0:
        raise ValueError(f"probe of {nbytes:g} bytes at {busbw_gbps:g} Gbit/s is faster than Eq. 1's latency "
                         f"alone (alpha={alpha_s:g} s); cannot derive BW")
    return float(col.bytes_s_to_gbps(f * float(nbytes) / rest))


def fit_network_from_probe(sweep: pd.DataFrame, world_size: int, rate_gbps: float | None, busbw_gbps: float,
                           probe_bytes: float, stat: str, label: str | None = None) -> Network:
    """A network's constants when its bandwidth is known from one large all-reduce (a throttle
    probe, the record's ``network.measured_busbw_gbps``) rather than a full sweep (beyond the paper;
    App. C measures BW with iperf3, which is the same idea):

    * BW: :func:`eq1_bandwidth_from_busbw` of the probe;
    * alpha and the all-gather incast coefficient: the median of :func:`fit_network` over the sweeps of
      the same world size at the *other* rates of the same machine (the rate's own sweep, if any, is not
      read: leave-one-rate-out), or over every sweep of that world size on a real network;
    * no measured table: Eq. 1 / App. B price every collective.

    Why not the sweep's own Eq. 1 fit: on a ``tc tbf`` link the token bucket's burst lets messages
    below a few MB through faster than the rate, and the fit's relative weights follow those small
    messages, so the fitted BW comes out above what a large all-reduce gets."""
    label = label or ("native" if rate_gbps is None else f"{rate_gbps:g}Gbps")
    s = sweep[sweep["world_size"] == world_size]
    rates = sorted({None if _isnan(r) else float(r) for r in s["rate_gbps"]}, key=lambda r: -1 if r is None else r)
    others = [r for r in rates if r != rate_gbps] or rates
    fits = []
    for r in others:
        try:
            fits.append(fit_network(sweep, world_size, r, stat))
        except ValueError:
            continue
    if not fits:
        raise ValueError(f"no sweep records at world size {world_size} on this machine to fit alpha "
                         f"(network {label} has a probe only)")
    alpha = float(np.median([f.alpha_s for f in fits]))
    inc = float(np.median([f.incast_coeff for f in fits]))
    bw = eq1_bandwidth_from_busbw(busbw_gbps, probe_bytes, world_size, alpha)
    used = ",".join("native" if f.rate_gbps is None else f"{f.rate_gbps:g}" for f in fits)
    fitted_on = f"probe {busbw_gbps:.4g}Gbps {label}; alpha, incast: sweep p={world_size} at {used}"
    return Network(int(world_size), rate_gbps, alpha, bw, inc, None, fitted_on=fitted_on)


def _probe_gbps(df: pd.DataFrame, alpha_s: float) -> list[float]:
    """Eq. 1 bandwidths (Gbit/s, :func:`eq1_bandwidth_from_busbw`) of the link's probes among ``df``'s records of
    the network (kinds that :func:`select_network` selects): records of :data:`PROBE_KINDS` (``busbw_gbps``,
    ``nbytes``) and the probe that sweep and DDP records carry (``network.measured_busbw_gbps``,
    ``measured_probe_bytes``)."""
    df = df[df["kind"].isin(_NETWORK_KINDS)]
    found = set()
    if "busbw_gbps" in df.columns:
        for r in df[df["kind"].isin(PROBE_KINDS) & df["busbw_gbps"].notna()].to_dict("records"):
            found.add((float(r["busbw_gbps"]), float(r.get("nbytes") or 64 * MIB), int(r.get("world_size") or 2)))
    if "network" in df.columns:
        for n, p in zip(df["network"], df.get("world_size", pd.Series([2] * len(df), index=df.index))):
            if isinstance(n, dict) and n.get("measured_busbw_gbps") is not None and not _missing(p):
                found.add((float(n["measured_busbw_gbps"]), float(n.get("measured_probe_bytes") or 64 * MIB),
                           max(int(p), 2)))
    out = []
    for busbw, nbytes, p in sorted(found):
        try:
            out.append(eq1_bandwidth_from_busbw(busbw, nbytes, p, alpha_s))
        except ValueError:
            out.append(busbw)
    return out
