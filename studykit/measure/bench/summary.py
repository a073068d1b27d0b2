"""``bench``'s summary: one row per measured codec or DDP configuration with the ratios the targets use
and pass/fail per target (:func:`summarize`, also of the committed measurement records), and its target rows
as Markdown (:func:`summary_markdown`)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable

from studykit import compressors as C
from studykit.measure.bench.codecs import attach_kernels
from studykit.measure.bench.targets import TARGETS, _codec_target
from studykit.measure.profile import effective_params

if TYPE_CHECKING:  # pandas is imported where a table is built
    import pandas


def _params_str(p) -> str:
    """``rank=4``: a record's parameters as its spec writes them (a string is kept as it is)."""
    if isinstance(p, str):
        return p
    return C.registry.setting_label("", p, "spec", params_only=True)


def _is_default(name: str, params: dict) -> bool:
    """Whether ``params`` are the registered defaults of ``name`` (error_feedback aside)."""
    try:
        ref = effective_params(C.get(name))
    except Exception:  # noqa: BLE001
        return False
    a = {k: v for k, v in (params or {}).items() if k != "error_feedback"}
    b = {k: v for k, v in ref.items() if k != "error_feedback" and k in a}  # parameters added since: default
    return a == b

def summarize(records: Iterable[dict]) -> pandas.DataFrame:
    """One row per measured codec or DDP configuration, with the ratios the targets use and
    pass/fail per target.

    Reads bench records (``kind`` bench: codecs on the flat gradient; ddp) and the committed
    measurement records (``kind`` profile: per-tensor ``reduce``/``encode``/``decode`` with
    ``floor_ms``; ddp), so ``summarize(load_records("data/measurements/gpu"))`` works too.
    Columns: ``section`` (codec | ddp), ``source``, ``model``, ``compressor``, ``params``,
    ``phase``, ``layout``, ``impl`` (fast | reference | kit for older records), ``ms``
    (median), ``floor_ms``, ``x_floor`` (ms / floor), ``host_ms``, ``kernels``; for DDP
    ``world_size``, ``batch_size``, ``mode``, ``syncsgd_ms``, ``x_syncsgd`` (ms / syncSGD of
    the same model, batch and world size), ``peer``, ``peer_ms``, ``x_peer`` (kit hook / the
    PyTorch hook it competes with); then ``target``, ``limit``, ``limit_unit`` (the column the limit bounds:
    ``ms``, ``x_floor``, ``x_syncsgd`` or ``x_peer``) and ``passed`` (None where no target applies or it cannot
    be judged).
    """
    import pandas as pd

    records = [r for r in attach_kernels(records) if r.get("status") == "ok"]
    rows = []
    for r in records:
        kind = r.get("kind")
        if kind not in ("bench", "profile"):
            continue
        phase = r.get("phase") or ""
        layout = r.get("layout") or ("per_tensor" if kind == "profile" else "flat")
        mode = r.get("mode") or ""
        impl = mode.split(":")[1] if ":" in mode else "kit"
        name = r.get("compressor")
        params = r.get("params") or {}
        row = dict(section="codec", source=kind, gpu=r.get("gpu"), torch=r.get("torch"), model=r.get("model"),
                   compressor=name, params=_params_str(params), phase=phase, layout=layout, impl=impl,
                   ms=r.get("ms_median"), floor_ms=r.get("floor_ms"), host_ms=r.get("host_ms"),
                   kernels=r.get("kernels"), target=None, limit=None, limit_unit=None, passed=None)
        row["x_floor"] = row["ms"] / row["floor_ms"] if row["ms"] is not None and row["floor_ms"] else None
        key, limit, unit = _codec_target(name or "", params)
        judged = (name and r.get("model") == "resnet50" and phase == ("encdec" if kind == "bench" else "reduce")
                  and (kind == "bench" or r.get("sim_world_size", 1) == 1) and _is_default(name, params))
        if kind == "bench" and key == "powersgd" and phase == "default":
            judged = bool(name and r.get("model") == "resnet50" and _is_default(name, params))
        judged = judged and impl != "reference"  # the plain-PyTorch rows are for comparison
        if key == "powersgd":
            judged = judged and layout == "per_tensor"
        elif key is not None:
            judged = judged and (layout == "flat" or kind == "profile")
        if key is not None and judged:
            row.update(target=TARGETS[key], limit=limit, limit_unit=unit)
            value = row["x_floor"] if unit == "x_floor" else row["ms"]
            row["passed"] = bool(value is not None and value <= limit) if unit == "x_floor" else \
                bool(value is not None and value < limit)
        rows.append(row)

    ddp = [r for r in records if r.get("kind") == "ddp"]
    base = {}
    for r in ddp:
        if r.get("mode") == "syncsgd" and r.get("bucket_mb") is None:
            base[(r.get("model"), r.get("batch_size"), r.get("world_size"), r.get("source"))] = r["ms_median"]
    peers = {}
    for r in ddp:
        if r.get("mode") == "builtin":
            peers[(r.get("model"), r.get("batch_size"), r.get("world_size"), r.get("source"), r.get("compressor"))] = \
                r["ms_median"]
    for r in ddp:
        if r.get("bucket_mb") is not None:
            continue
        k = (r.get("model"), r.get("batch_size"), r.get("world_size"), r.get("source"))
        sync = base.get(k)
        params = r.get("params") or {}
        name, mode = r.get("compressor"), r.get("mode")
        row = dict(section="ddp", source="ddp", gpu=r.get("gpu"), torch=r.get("torch"), model=r.get("model"),
                   compressor=name or "syncsgd", params=_params_str(params), phase="iteration",
                   layout=None, impl=mode, mode=mode, world_size=r.get("world_size"),
                   batch_size=r.get("batch_size"), ms=r["ms_median"], syncsgd_ms=sync,
                   x_syncsgd=r["ms_median"] / sync if sync else None, peer=None, peer_ms=None, x_peer=None,
                   target=None, limit=None, limit_unit=None, passed=None)
        multi = (r.get("world_size") or 1) >= 2
        if mode == "hook" and name == "powersgd" and params.get("rank") == 4 and _is_default(name, params):
            row.update(target=TARGETS["ddp_powersgd"] + ("" if r.get("model") == "resnet50" else " (reported)"),
                       limit=1.2, limit_unit="x_syncsgd")
            if multi and row["x_syncsgd"] is not None and r.get("model") == "resnet50":
                row["passed"] = bool(row["x_syncsgd"] <= 1.2)
        if mode == "hook" and name in ("fp16", "bf16"):
            peer = "torch_" + name
            pm = peers.get(k + (peer,))
            row.update(peer=peer, peer_ms=pm, x_peer=r["ms_median"] / pm if pm else None,
                       target=TARGETS["ddp_half"], limit=1.0, limit_unit="x_peer")
            if multi and pm:
                row["passed"] = bool(r["ms_median"] <= pm)
        rows.append(row)
    cols = ["section", "source", "gpu", "torch", "model", "compressor", "params", "phase", "layout", "impl",
            "world_size", "batch_size", "ms", "floor_ms", "x_floor", "host_ms", "kernels", "syncsgd_ms",
            "x_syncsgd", "peer", "peer_ms", "x_peer", "target", "limit", "limit_unit", "passed"]
    df = pd.DataFrame(rows)
    for c in cols:
        if c not in df:
            df[c] = None
    return df[cols]


#: the measured columns of :func:`summary_markdown`, each followed by its limit in the same unit: (column, header)
MARKDOWN_COLUMNS = (("ms", "ms"), ("x_floor", "x floor"), ("x_syncsgd", "x syncSGD"), ("x_peer", "x PyTorch hook"))


def summary_markdown(df) -> str:
    """The target rows of :func:`summarize` as a Markdown table (plus the counts): each measured column (ms, x
    floor, x syncSGD, x PyTorch hook) followed by the limit a target sets on it, so every column has one unit."""
    t = df[df["target"].notna()]
    head = " | ".join(f"{h} | {h} limit" for _, h in MARKDOWN_COLUMNS)
    lines = [f"| model | compressor | phase / mode | impl | {head} | passed |",
             "|---|---|---|---|" + "---|" * (2 * len(MARKDOWN_COLUMNS)) + "---|"]

    def f(x, d=3):
        return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"

    digits = {"ms": 3, "x_floor": 1, "x_syncsgd": 3, "x_peer": 3}
    for _, r in t.iterrows():
        unit = r.get("limit_unit")
        cells = " | ".join(f"{f(r[c], digits[c])} | {f'{r.limit:g}' if unit == c else ''}"
                           for c, _ in MARKDOWN_COLUMNS)
        where = "" if r["section"] == "codec" else f" ws{int(r['world_size'])}"
        lines.append(f"| {r['model']} | {r['compressor']} {r['params']} | {r['phase']}{where} | {r['impl']} | {cells} | "
                     f"{'' if r['passed'] is None else ('yes' if r['passed'] else 'NO')} |")
    judged = t[t["passed"].notna()]
    lines.append("")
    lines.append(f"{int(judged['passed'].sum())} of {len(judged)} judged target rows pass.")
    return "\n".join(lines)
