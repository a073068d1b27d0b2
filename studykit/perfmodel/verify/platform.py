"""Loading one platform's records for ``verify``: :class:`Platform`, :func:`load_platform` and the
per-record names and inputs (:func:`_label`, :func:`_inputs`, :func:`_network`)."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd

from studykit.compressors.registry import setting_label
from studykit.perfmodel.fit import RecordInputs, unpriced_ddp

STATS = ("ms_median", "ms_mean", "ms_min")


# ------------------------------------------------------------------ records -> platform
def _pkey(params) -> str:
    from studykit.perfmodel.calibration import normalize_params

    return json.dumps(normalize_params(params if isinstance(params, dict) else {}), sort_keys=True)


def _net(n) -> tuple:
    """(rate_gbps or None, workers) of a record's ``network`` field; (None, None) on a real network."""
    if isinstance(n, dict) and n:
        return (float(n["rate_gbps"]) if n.get("rate_gbps") is not None else None, n.get("workers"))
    return (None, None)


def _net_label(rate, world_size) -> str:
    return "native" if rate is None else (f"{rate:g}Gbps" if rate > 0 else "unshaped")


@dataclass
class Platform:
    """The records of one platform (folder), split by kind, with the statistic chosen."""

    name: str
    stat: str
    tcomp: pd.DataFrame
    ddp: pd.DataFrame
    sweep: pd.DataFrame
    profile: pd.DataFrame
    device: str = ""
    #: ``buckets`` records (``ddp --bucket-times``): when each DDP bucket was ready in the backward pass
    buckets: pd.DataFrame = field(default_factory=pd.DataFrame)
    notes: list = field(default_factory=list)


def load_platform(source: str | Path | Sequence[str | Path], stat: str = "ms_median", name: str | None = None,
                  sweep_from: str | Path | None = None,
                  inputs_from: Sequence[str | Path] | None = None, score_coalesced: bool = False) -> Platform:
    """Read a records folder (or file) into a :class:`Platform` (ok records only).

    ``source`` may be several folders of one machine kind (campaigns of the same cards, world size and
    link method, e.g. models measured in different sessions): they form one platform, named ``name``
    (required then); refused when their GPUs differ.
    ``sweep_from``: another folder whose collective sweeps stand in for this one's (a campaign that ran
    no sweep of its own, on the same card kind and shaped-link method); refused when ``source`` has
    sweeps of its own or the two folders' GPUs differ.
    ``inputs_from``: folders whose single-device records (``tcomp``, ``profile``, ``copy_bw``) stand in for
    this one's (a campaign that measured only DDP iterations, e.g. ``LOCAL=0``, or only its hooks' per-bucket
    times, ``gpu_bandwidth.sh``'s ``HOOK_PROFILE``); where ``source`` measured a configuration itself (the same
    ``config_id``), its own records are kept and the borrowed ones skipped, as the notes say; refused when a
    folder's GPUs differ.
    ``score_coalesced``: keep the hooks that coalesced buckets (``hook_coalesce_mb``), each coalescing its own
    configuration, priced by the hook timeline's coalesced groups; left out by default.
    """
    from studykit.measure.records import load_records

    if stat not in STATS:
        raise ValueError(f"unknown statistic {stat!r}; valid: {list(STATS)}")
    many = not isinstance(source, (str, Path))
    srcs = [Path(x) for x in source] if many else [Path(source)]
    if many and not name:
        raise ValueError("several record folders form one platform only with a name for it (verify --pool NAME)")
    if many:
        kinds = {str(x): sorted({str(r["gpu"]) for r in load_records(x, quiet=True) if r.get("gpu")}) for x in srcs}
        if len({tuple(v) for v in kinds.values()}) > 1:
            raise ValueError("folders pooled into one platform must come from one card kind: "
                             + "; ".join(f"{k}: {v or 'no GPU'}" for k, v in kinds.items()))
    src = srcs[0]
    loaded = load_records(*srcs, quiet=True)  # damaged lines, duplicates: reported in the notes, not hidden
    recs = [r for r in loaded if r.get("status", "ok") == "ok" and r.get(stat) is not None]
    if not recs:
        raise ValueError(f"no usable records in {', '.join(map(str, srcs))}")
    borrowed = []
    if sweep_from is not None:
        borrowed += _borrow(recs, src, [sweep_from], ("sweep",), "--sweep-from", "sweep", "collective sweeps", stat)
    if inputs_from:
        borrowed += _borrow(recs, src, inputs_from, ("tcomp", "profile", "copy_bw"), "--inputs-from",
                            "tcomp, profile or copy_bw", "single-device records", stat, fill=True)
    df = pd.DataFrame(recs)
    for c in ("network", "mode", "bucket_mb", "phase", "op", "compressor", "params", "sim_world_size", "size_bytes",
              "batch_size", "model", "times_ms", "n_iter", "gpu", "device"):
        if c not in df.columns:
            df[c] = None
    net = df["network"].map(_net)
    df["rate_gbps"] = net.map(lambda t: t[0])
    df["probe_gbps"] = df["network"].map(lambda n: n.get("measured_busbw_gbps") if isinstance(n, dict) else None)
    df["probe_bytes"] = df["network"].map(lambda n: n.get("measured_probe_bytes") if isinstance(n, dict) else None)
    df["params_key"] = df["params"].map(_pkey)
    # a hook that ran its protocol inside DDP's callback (``hook_overlap`` false, or absent: the kit's first
    # hook) blocks the backward pass: its own mode, model and scores (``hook_blocking``)
    ov = df["hook_overlap"] if "hook_overlap" in df.columns else pd.Series([None] * len(df), index=df.index)
    df.loc[(df["mode"] == "hook") & (ov != True), "mode"] = "hook_blocking"  # noqa: E712 (None/NaN are not True)
    if "comm" in df.columns:  # the model prices the backend's collectives; a parameter server's runs are not scored
        df = df[df["comm"].isna() | (df["kind"] != "ddp")]
    # variants no model term prices (a DDP built unlike the platform's others; coalesced hooks unless asked): not
    # scored
    df = df[~unpriced_ddp(df, ("hook_coalesce_mb",) if score_coalesced else ())]
    dev = sorted({str(g) for g in df["gpu"].dropna()})
    return Platform(name=name or (src.name if src.is_dir() else src.stem), stat=stat,
                    tcomp=df[df["kind"] == "tcomp"].copy(), ddp=df[df["kind"] == "ddp"].copy(),
                    sweep=df[df["kind"] == "sweep"].copy(), profile=df[df["kind"] == "profile"].copy(),
                    device=", ".join(dev[:2]), notes=_read_notes(loaded.report) + borrowed,
                    buckets=df[df["kind"] == "buckets"].copy())


def _borrow(recs: list[dict], src: Path, folders: Sequence[str | Path], kinds: tuple, flag: str, kinds_text: str,
            what: str, stat: str, fill: bool = False) -> list[str]:
    """Append to ``recs`` the ok records of ``kinds`` in each of ``folders`` (``--sweep-from``, ``--inputs-from``);
    the notes saying so. Refused when a folder has none, or its records come from another card kind. Where
    ``recs`` has records of those kinds already: refused, or with ``fill`` the borrowed records of a
    configuration ``recs`` measured itself (the same ``config_id``) are skipped (the folder's own measurement of
    a configuration is never pooled with another machine's)."""
    from studykit.measure.records import load_records

    own = sorted({r.get("kind") for r in recs if r.get("kind") in kinds})
    if own and not fill:
        raise ValueError(f"{src} has {what} of its own ({', '.join(own)} records): {flag} would mix two sets")
    own_ids = {r.get("config_id") for r in recs if r.get("kind") in kinds}
    mine = {str(r["gpu"]) for r in recs if r.get("gpu")}
    notes = []
    for folder in folders:
        other = [r for r in load_records(Path(folder), quiet=True)
                 if r.get("kind") in kinds and r.get("status", "ok") == "ok" and r.get(stat) is not None]
        if not other:
            raise ValueError(f"{flag} {folder}: no {kinds_text} records there")
        theirs = {str(r["gpu"]) for r in other if r.get("gpu")}
        if theirs != mine:
            raise ValueError(f"{flag} {folder}: its records ran on {sorted(theirs) or 'no GPU'}, {src}'s on "
                             f"{sorted(mine) or 'no GPU'}; borrow only from the same card kind")
        taken = [r for r in other if r.get("config_id") not in own_ids]
        recs += taken
        skipped = len(other) - len(taken)
        notes.append(f"{what} borrowed from {folder} ({len(taken)} records"
                     + (f"; {skipped} skipped: {src} measured those configurations itself" if skipped else "") + ")")
    return notes


def _read_notes(rep) -> list[str]:
    """What the reader skipped or dropped, for verify's notes (file and line of each damaged line)."""
    notes = [f"skipped a damaged line: {f}:{line} ({why})" for f, line, why in rep.damaged]
    if rep.n_duplicates:
        notes.append(f"dropped {rep.n_duplicates} duplicate record(s) (same configuration, network and machine)")
    return notes


# ------------------------------------------------------------------ per-configuration names
def _label(r) -> str:
    """A configuration's name, unique within a platform."""
    parts = [str(r["model"]), f"b{int(r['batch_size'])}", str(r["mode"])]
    if r["mode"] == "syncsgd":
        parts.append("bucket=" + ("default" if _isnull(r["bucket_mb"]) else f"{float(r['bucket_mb']):g}MB"))
    else:
        parts.append(setting_label(str(r["compressor"]), json.loads(r.get("params_key") or "{}"), "key"))
    if not _isnull(r.get("hook_coalesce_mb")):  # a coalescing hook is its own configuration
        parts.append(f"coalesce={float(r['hook_coalesce_mb']):g}MB")
    if not _isnull(r.get("hook_runner")) and r["hook_runner"] != "thread":  # so is a hook run by the graph runner
        parts.append(f"runner={r['hook_runner']}")
    parts.append(f"p={int(r['world_size'])}")
    parts.append(_net_label(r.get("rate_gbps"), r["world_size"]) if not _isnull(r.get("rate_gbps")) else "native")
    return " ".join(parts)


_COALESCE = re.compile(r" coalesce=([^ ]+)MB")


def coalesce_of(config: str) -> float | None:
    """The ``coalesce_mb`` a configuration's name (:func:`_label`) carries; None for a hook run per bucket."""
    m = _COALESCE.search(config)
    return None if m is None else float(m.group(1))


def without_coalesce(config: str) -> str:
    """A configuration's name without its coalescing: the name every coalescing of one hook shares."""
    return _COALESCE.sub("", config)


def _isnull(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _inputs(plat: Platform, max_p: int | None = None, network_from: str = "sweep",
            host_ahead: bool = False, bucket_times: bool = False) -> RecordInputs:
    """The platform's single-device constants and networks (:class:`studykit.perfmodel.fit.RecordInputs`)."""
    return RecordInputs(plat.tcomp, plat.ddp, plat.sweep, plat.profile, plat.stat, max_p=max_p,
                        network_from=network_from, buckets=plat.buckets, host_ahead=host_ahead,
                        bucket_times=bucket_times)


def _network(inp: RecordInputs, r):
    """The :class:`~studykit.perfmodel.fit.Network` a DDP record ran on (its probe, if any, passed along)."""
    return inp.network(int(r["world_size"]), r["rate_gbps"], r.get("probe_gbps"), r.get("probe_bytes"))

