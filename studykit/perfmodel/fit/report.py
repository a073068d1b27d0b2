"""What ``python -m studykit fit`` prints about the calibration it wrote: :func:`summary` (``--json``) and
:func:`format_summary` (the default), each constant with its interval, record count, R^2 and source, what the
record reader read and dropped, and what a poor fit means for predictions."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from studykit.perfmodel.calibration import Calibration, Constant
from studykit.perfmodel.fit.calibration import MIN_R2

#: list entries shown per list in the text summary (the file and ``--json`` hold every one)
SHOWN_PER_LIST = 8
#: the characters of a constant's source shown in the text summary
SOURCE_CHARS = 90
#: the term of the model each fitted constant belongs to: what a poor R^2 says does not explain the records
TERMS = {"alpha_s": "the network term (Eq. 1)", "bandwidth_gbps": "the network term (Eq. 1)",
         "incast_coeff": "the all-gather term (App. B with the incast coefficient)",
         "gamma": "the overlap term (Sec. 4.1)", "gamma_extended": "the extended syncSGD fit",
         "sync_delta_s": "the extended syncSGD fit", "per_bucket_s": "the extended syncSGD fit",
         "per_tensor_s": "the extended syncSGD fit",
         "t_encode_decode": "encode/decode linear in world size (Fig. 8)"}


def summary(cal: Calibration, path: str | Path, reports: dict[str, Any]) -> dict:
    """The summary ``fit --json`` prints: the name and scalar constants, counts of the list constants, world
    size, network, what was not fitted, the warnings, what the record reader read (``reports``: key ->
    :class:`~studykit.measure.records.LoadReport` or None) and the file written."""
    out = {k: v for k, v in cal.to_dict().items() if k in ("name", *Calibration.SCALARS)}
    out.update({k: len(getattr(cal, k)) for k in ("t_comp", "t_encode_decode", "overhead")})
    out.update(world_size=cal.world_size, network=cal.network, not_fitted=cal.provenance.get("not_fitted", {}),
               warnings=cal.warnings)
    for key, rep in reports.items():
        if rep is not None:  # what the one record reader read, skipped and merged
            out[key] = {"summary": rep.summary(), "files": len(rep.files), "records": rep.records,
                        "damaged_lines": [f"{f}:{i}: {why}" for f, i, why in rep.damaged],
                        "duplicates_dropped": rep.n_duplicates, "superseded": rep.superseded,
                        "unversioned": rep.unversioned}
    out["written"] = str(path)
    return out


def _scaled(c: Constant) -> tuple[float, str]:
    """(factor, unit) a constant is shown in: seconds as ms, or as us below 1 ms."""
    if c.unit != "s":
        return 1.0, "" if c.unit == "ratio" else f" {c.unit}"
    return (1e3, " ms") if c.value == 0 or abs(c.value) >= 1e-3 else (1e6, " us")


def _row(name: str, of: str, c: Constant) -> list[str]:
    f, unit = _scaled(c)
    interval = "-" if c.low is None or c.high is None else f"[{c.low * f:.4g}, {c.high * f:.4g}]{unit}"
    poor = c.r2 is not None and math.isfinite(c.r2) and c.r2 < MIN_R2
    r2 = "-" if c.r2 is None or not math.isfinite(c.r2) else f"{c.r2:.2f}" + (" !" if poor else "  ")
    src = c.source if len(c.source) <= SOURCE_CHARS else c.source[:SOURCE_CHARS - 3] + "..."
    return [name, of, f"{c.value * f:.4g}{unit}", interval, "-" if c.n is None else str(c.n), r2, src]


def _label(c: Constant) -> str:
    bits = [getattr(c, "compressor", "")]
    bits += [f"{k}={v}" for k, v in sorted(getattr(c, "params", {}).items())]
    bits += [getattr(c, "model", "")]
    bs = getattr(c, "batch_size", None)
    bits += [f"b{bs}" if bs is not None else ""]
    if hasattr(c, "mode"):
        bits.append(c.mode)
    return " ".join(b for b in bits if b)


def format_summary(cal: Calibration, path: str | Path, reports: dict[str, Any]) -> str:
    """``fit``'s answer as text: where the calibration went, what was read, one aligned row per constant
    (value, interval, records, R^2 with ``!`` below :data:`~studykit.perfmodel.fit.MIN_R2`, source; at most
    :data:`SHOWN_PER_LIST` entries of each list), and a line per model term whose fit is poor saying that
    predictions from it are unreliable."""
    net = cal.network or {}
    where = (f"a shaped link ({', '.join(f'{k}={v}' for k, v in net.items())})" if net else "a real network")
    lines = [f"calibration {cal.name!r} written to {path}"
             + (f" (world size {cal.world_size}, {where})" if cal.world_size else "")]
    for key, rep in reports.items():
        if rep is not None:
            lines.append(f"{key.replace('_', ' ')}: {rep.summary()}")
    rows = [["constant", "of", "value", "interval", "n", "R^2", "source"]]
    poor: dict[str, list[str]] = {}
    more = []
    for name in Calibration.SCALARS:
        c = getattr(cal, name)
        if c is not None:
            rows.append(_row(name, "", c))
    for name in Calibration.LISTS:
        entries = getattr(cal, name)
        for c in entries[:SHOWN_PER_LIST]:
            rows.append(_row(name, _label(c), c))
        if len(entries) > SHOWN_PER_LIST:
            more.append(f"{len(entries) - SHOWN_PER_LIST} more {name} entries")
    for name in (*Calibration.SCALARS, *Calibration.LISTS):
        got = getattr(cal, name)
        for c in (got if isinstance(got, list) else [got] if got is not None else []):
            if c.r2 is not None and math.isfinite(c.r2) and c.r2 < MIN_R2:
                poor.setdefault(TERMS.get(name, f"the fit of {name}"), []).append(name)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {2, 3, 4}  # numbers: right-aligned
    lines.append("")
    for r in rows:
        cells = [cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
    if more:
        lines.append(f"({'; '.join(more)}: every entry is in the file)")
    lines.append("")
    for term, names in poor.items():
        lines.append(f"R^2 below {MIN_R2:g} (!) for {', '.join(dict.fromkeys(names))}: {term} does not explain "
                     "these records; predictions from it are unreliable")
    if not poor:
        lines.append(f"every fitted R^2 is at least {MIN_R2:g}: the model's terms explain these records")
    if cal.warnings:
        lines.append(f"{len(cal.warnings)} warning(s) above (stderr; also in the calibration's 'warnings')")
    lines.append("interval: a fit's bootstrap 2.5-97.5 % (the path overhead's: quartiles; a paper value's: its "
                 "stated range); n: records behind it; --json: this summary as JSON")
    return "\n".join(lines)
