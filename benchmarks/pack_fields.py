"""Bit packing at any width: the kit's ``pack_fields`` / ``unpack_fields`` against the bit-by-bit definition.

    python benchmarks/pack_fields.py                                  # CPU, flat ResNet-50 size, widths 1..16
    python benchmarks/pack_fields.py --device cuda                    # on a GPU
    python benchmarks/pack_fields.py --numel 4194304 --widths 3 5 9   # smaller, some widths
    python benchmarks/pack_fields.py --report-only --out FILE.jsonl   # the table of an earlier (or cut) run

The packed layout (``studykit.compressors.quantization.pack_fields``): value ``i`` on bits
``[i * width, (i + 1) * width)`` of the little-endian bit stream, ``ceil(numel * width / 8)`` bytes.
The kit once packed every width that does not divide 8 by expanding every value into ``width`` one-bit
elements, which put ``quantize`` far above the memory floor at those widths; it now packs them straight into
this layout
(the before/after runs are described in ``data/benchmarks/pack_fields_cpu/README.md``). This script times
pack+unpack (``unpack_fields(pack_fields(v, w),
w, numel)``) of ``--numel`` random int32 values in ``[0, 2^w)`` per width, twice: the kit's code
(``impl`` ``kit``) and :func:`pack_fields_bitwise` / :func:`unpack_fields_bitwise`, the layout's
definition bit by bit (``impl`` ``bitwise``; the kit's former general path, kept here as the
reference it is; ``tests/test_pack_fields.py`` checks the kit against it). Before timing a width
it checks that both give the same bytes and values (``matches_reference`` in the record).

Timing: :func:`studykit.measure.timing.time_fn` under the repetition policy of ``python -m studykit
bench`` (:class:`studykit.measure.bench.RepPolicy`, options below). Records stream to ``--out`` (JSON
Lines with provenance, one per width and impl; a rerun with the same ``--out`` resumes); the table
(median ms with IQR and n, the ratio bitwise / kit) is printed and written beside ``--out`` (``.md``).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from studykit import argtypes  # noqa: E402
from studykit.compressors.quantization import (MAX_FIELD_WIDTH, pack_bits, pack_fields, unpack_bits,  # noqa: E402
                                               unpack_fields)
from studykit.measure import bench  # noqa: E402
from studykit.measure.records import (RecordWriter, config_id, loadavg_1m,  # noqa: E402
                                      make_record)
from studykit.measure.runtime import pick_device  # noqa: E402
from studykit.measure.timing import time_fn  # noqa: E402

#: the flat ResNet-50 gradient (the one ``python -m studykit bench`` times codecs on)
RESNET50_NUMEL = 25_557_032
KIND = "pack_fields"
IMPLS = ("kit", "bitwise")


# ------------------------------------------------------------------ the layout's definition, bit by bit
def _bit_dtype(width: int) -> torch.dtype:
    return torch.int64 if width >= 32 else torch.int32


def pack_fields_bitwise(values: torch.Tensor, width: int) -> torch.Tensor:
    """The packed layout by its definition: bit ``k`` of value ``i`` is bit ``i * width + k`` of the
    little-endian bit stream, packed 8 bits a byte by :func:`~studykit.compressors.quantization.pack_bits`.
    Builds a tensor of ``numel * width`` single bits, int32 as the kit's former general path did (int64 at
    width 32, where a field does not fit a non-negative int32)."""
    dtype = _bit_dtype(width)
    shifts = torch.arange(width, dtype=dtype, device=values.device)
    bits = (values.reshape(-1).to(dtype).unsqueeze(-1) >> shifts) & 1
    return pack_bits(bits.reshape(-1))


def unpack_fields_bitwise(packed: torch.Tensor, width: int, numel: int) -> torch.Tensor:
    """Inverse of :func:`pack_fields_bitwise` on the last dim: ``(..., nbytes)`` uint8 -> ``(..., numel)``
    int32 (for width 32 the int32 with those 32 bits)."""
    dtype = _bit_dtype(width)
    bits = unpack_bits(packed, numel * width).reshape(*packed.shape[:-1], numel, width).to(dtype)
    shifts = torch.arange(width, dtype=dtype, device=packed.device)
    return (bits << shifts).sum(-1, dtype=dtype).to(torch.int32)


IMPL_FNS = {"kit": (pack_fields, unpack_fields), "bitwise": (pack_fields_bitwise, unpack_fields_bitwise)}


# ------------------------------------------------------------------ timing
def _values(numel: int, width: int, device) -> torch.Tensor:
    g = torch.Generator().manual_seed(width)
    return torch.randint(0, 2**width, (numel,), generator=g, dtype=torch.int64).to(torch.int32).to(device)


def _cid(width: int, impl: str, numel: int, device) -> str:
    return config_id(kind=KIND, op="pack+unpack", mode=impl, params={"width": width}, size_bytes=4 * numel,
                     device_type=torch.device(device).type)


def _round_trip(impl: str, v: torch.Tensor, width: int):
    """The timed call: pack ``v`` and unpack it again with ``impl``'s functions."""
    pack, unpack = IMPL_FNS[impl]
    return lambda: unpack(pack(v, width), width, v.numel())


def run(widths, impls, writer: RecordWriter, *, device, numel: int, policy: bench.RepPolicy,
        verbose: bool = True) -> list[dict]:
    """Time pack+unpack of ``numel`` int32 values per width and impl; one record each, written as timed
    (configurations already in ``writer``'s file are skipped)."""
    done = writer.done()
    out = []
    for width in widths:
        todo = [i for i in impls if _cid(width, i, numel, device) not in done]
        if not todo:
            continue
        v = _values(numel, width, device)
        kit = pack_fields(v, width)
        ref = pack_fields_bitwise(v, width)
        matches = bool(torch.equal(kit, ref) and torch.equal(unpack_fields(ref, width, numel), v)
                       and torch.equal(unpack_fields_bitwise(kit, width, numel), v))
        del kit, ref
        for impl in todo:
            timing = time_fn(_round_trip(impl, v, width), device=device, **policy.timing_kw(device))
            rec = make_record(KIND, _cid(width, impl, numel, device), device=device, timing=timing, op="pack+unpack",
                              mode=impl, params={"width": width}, width=width, numel=numel,
                              size_bytes=4 * numel, packed_bytes=math.ceil(numel * width / 8),
                              matches_reference=matches, reps_capped=policy.capped(timing),
                              loadavg_1m=loadavg_1m(), **policy.fields(device))
            if timing.n_iter > bench.RAW_TIMES_MAX:
                rec["times_ms"] = None
            out.append(writer.write(rec))
            if verbose:
                print(f"width {width:2d} {impl:7s} {timing.ms_median:10.3f} ms [{timing.ms_q25:.3f}-"
                      f"{timing.ms_q75:.3f}] n={timing.n_iter}  matches reference: {matches}", flush=True)
    return out


# ------------------------------------------------------------------ the table
def table(records) -> str:
    """Markdown: per width the median ms of both impls (IQR, n), bitwise / kit, whether they agree, the load."""
    by = {(r["width"], r["mode"]): r for r in records if r.get("kind") == KIND and r.get("status") == "ok"}
    lines = ["| width | kit ms [q25-q75] n | bitwise ms [q25-q75] n | bitwise / kit | same bytes | load 1 min (kit, bitwise) |",
             "|---:|---|---|---:|---|---|"]

    def cell(r):
        return "—" if r is None else f"{r['ms_median']:.3f} [{r['ms_q25']:.3f}-{r['ms_q75']:.3f}] {r['n_iter']}"

    for width in sorted({w for w, _ in by}):
        kit, ref = by.get((width, "kit")), by.get((width, "bitwise"))
        ratio = f"{ref['ms_median'] / kit['ms_median']:.1f}" if kit and ref else "—"
        same = {bool(r["matches_reference"]) for r in (kit, ref) if r is not None}
        load = ", ".join("—" if r is None or r.get("loadavg_1m") is None else f"{r['loadavg_1m']:.2f}" for r in (kit, ref))
        lines.append(f"| {width} | {cell(kit)} | {cell(ref)} | {ratio} | {'yes' if same == {True} else 'NO'} | {load} |")
    return "\n".join(lines)


def report(out: Path, verbose: bool = True) -> str:
    """The table of the records in ``out``, with where they came from; written to ``out``.md."""
    records = bench.records_of(out, KIND, "benchmarks/pack_fields.py")
    line = bench.records_line(out, records, lambda r: f"{r['gpu']} ({r['device']}, {r['num_threads']} torch threads), "
                                                       f"torch {r['torch']}, numel {r['numel']:,}")
    text = (f"# pack_fields / unpack_fields: pack+unpack per width, median ms\n\n{line}\n\n"
            f"`kit`: `studykit.compressors.quantization.pack_fields` + `unpack_fields`; `bitwise`: the layout's "
            f"definition bit by bit (`benchmarks/pack_fields.py`). `same bytes`: both gave the same packed bytes "
            f"and both unpacks gave the values back; `load 1 min`: the machine's load average when each was timed.\n\n{table(records)}\n")
    return bench.write_report(out, text, verbose)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python benchmarks/pack_fields.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N, auto (GPU if any)")
    ap.add_argument("--numel", type=argtypes.positive_int, default=RESNET50_NUMEL,
                    help=f"values packed per call (default {RESNET50_NUMEL:,}: the flat ResNet-50 gradient)")
    ap.add_argument("--widths", nargs="+", type=argtypes.int_range(1, MAX_FIELD_WIDTH), default=list(range(1, 17)), metavar="W",
                    help=f"field widths in bits (default 1..16; any of 1..{MAX_FIELD_WIDTH})")
    ap.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS,
                    help="kit (the package's code) and/or bitwise (the definition, bit by bit); default both")
    bench.add_policy_args(ap)
    bench.add_output_args(ap, "pack_fields.jsonl", "table")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args, policy, out = bench.start(ap, argv, report)
    if out is None:  # --report-only
        return 0
    try:
        device = pick_device(args.device)
    except ValueError as exc:
        ap.error(str(exc))
    run(args.widths, args.impls, RecordWriter(out), device=device, numel=args.numel, policy=policy,
        verbose=not args.quiet)
    report(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
