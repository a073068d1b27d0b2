"""Bits per gradient element each training method puts on the link, at world sizes beyond the runs'.

An all-reduce compatible quantizer (``quantize``, the rungs of Tirupati et al.'s dynamic ladder) sums
the b-bit levels of all ``p`` workers in integers, so every field needs ``ceil(log2 p)`` bits of headroom
and the bits on the link grow with ``p``; fp16 and fp32 stay at 16 and 32. A result measured at ``p = 2``
therefore does not carry to data-center scale unsaid. The bits come from each compressor's ``plan()``
through the wire accounting of :mod:`studykit.perfmodel.advise` (the bytes one worker puts into its
collectives, what the training loop records as ``bits_per_element``).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from studykit.perfmodel.advise import wire_bits
from studykit.perfmodel.model import Workload
from studykit.train.methods import parse_method

__all__ = ["link_bits", "integer_sums", "summary"]

#: fp16 and fp32 references: the bits a half- and a full-precision all-reduce put on the link
_REFERENCES = {"vs_fp16": ("fp16", 16.0), "vs_fp32": ("none", 32.0)}


def link_bits(methods: Sequence[str], world_sizes: Sequence[int] = (2, 64, 256), numel: int = 1 << 20,
              shapes: Sequence[tuple] | None = None) -> pd.DataFrame:
    """Bits per element on the link for every rung of every method at each world size.

    ``shapes``: the model's parameter shapes; default one flat tensor of ``numel`` elements, which is exact
    for quantizers and casts but not for compressors that treat tensors by shape (PowerSGD sends 1-D
    tensors whole). Columns: method, level (the rung's ``Level.label``), world_size, bits_per_element,
    summed_in (the integer type the payload is all-reduced in, None when gathered or sent as floats),
    vs_fp16 and vs_fp32 (bits over 16 and 32)."""
    ws = [int(p) for p in world_sizes]
    if not ws or min(ws) < 1:
        raise ValueError(f"world_sizes must be positive integers, got {list(world_sizes)!r}")
    if shapes is None and int(numel) < 1:
        raise ValueError(f"numel must be a positive number of gradient elements, got {numel!r}")
    shapes = tuple(tuple(int(d) for d in s) for s in shapes) if shapes is not None else ((int(numel),),)
    work = Workload(model=None, t_comp_s=1.0, param_shapes=shapes)
    rows = []
    for spec in methods:
        method = parse_method(spec)
        for level in method.levels:
            for p, w in wire_bits(level.compressor, level.kwargs, work, np.asarray(ws)).items():
                rows.append({"method": method.label, "level": level.label,
                             "world_size": p, "bits_per_element": w["bits_per_element"], "summed_in": w["summed_in"],
                             **{k: w["bits_per_element"] / bits for k, (_, bits) in _REFERENCES.items()}})
    return pd.DataFrame(rows, columns=["method", "level", "world_size", "bits_per_element", "summed_in", "vs_fp16",
                                       "vs_fp32"])


def integer_sums(df: pd.DataFrame) -> pd.DataFrame:
    """Bits per element (rows: method and rung, columns: world size) of the rungs of :func:`link_bits` that
    are summed in integers at some world size, with fp16 and fp32 as reference rows."""
    summed = df.groupby(["method", "level"], sort=False)["summed_in"].transform(lambda s: s.notna().any())
    refs = link_bits([name for name, _ in _REFERENCES.values()], sorted(df["world_size"].unique()))
    out = pd.concat([df[summed], refs], ignore_index=True)
    return out.pivot_table(index=["method", "level"], columns="world_size", values="bits_per_element", sort=False)


def summary(df: pd.DataFrame) -> list[str]:
    """One line per rung summed in integers at some world size of ``df`` (:func:`link_bits`): its bits at each
    world size and the nearer of fp16 / fp32 it matches or exceeds."""
    lines = []
    for (method, level), g in df.groupby(["method", "level"], sort=False):
        if not g["summed_in"].notna().any():
            continue
        parts = []
        for r in g.sort_values("world_size").itertuples():
            ref, ratio = ("fp32", r.vs_fp32) if r.vs_fp32 >= 1 - 1e-3 else ("fp16", r.vs_fp16)
            how = f", {ratio:.2f}x {ref}" if ratio >= 1 - 1e-3 else ""
            parts.append(f"{r.bits_per_element:.1f} at {r.world_size} GPUs{how}")
        lines.append(f"{method} ({level}): bits per element on the link " + "; ".join(parts))
    return lines
