"""``python -m studykit bench``: compressors against the memory floor, DDP hooks against PyTorch's.

One run on one card (issue #7)::

    python -m studykit bench --overwrite-committed --out-dir data/benchmarks/h200          # codecs only, one GPU
    torchrun --standalone --nproc-per-node 2 -m studykit bench --ddp --overwrite-committed --out-dir data/benchmarks/h200x2 --overwrite

Codecs (rank 0, one card): every registered compressor's encode+decode on the *flat*
ResNet-50 gradient (25.6M fp32 elements, one tensor) beside the memory floor -- one read and
one write of that fp32 gradient at the copy bandwidth measured in the same run
(:func:`studykit.measure.profile.measure_copy_bandwidth`). Phases (all at world size 1, so
collectives are identities and only compute is timed):

* ``encdec``: ``compressor.reduce(flat)`` with error feedback off: the whole codec protocol
  (encode, decode, the protocol's own passes); the number the targets are judged on;
* ``encode`` / ``decode``: the two halves apart, for single-round codecs
  (:func:`studykit.measure.profile.single_round`);
* ``default``: the registered default (error feedback on where the method's convention is),
  i.e. what a training run pays;
* low-rank methods (PowerSGD, ATOMO) are timed on the model's real parameter shapes
  (``layout`` ``per_tensor``): on one flat vector they would have no matrix to factor.

With ``--reference`` every codec is timed again with ``STUDYKIT_FAST=0`` (plain PyTorch, the
fused GPU kernels of :mod:`studykit.compressors._fast` off): before/after in one run. Each
record also has ``host_ms`` (Python + launch time per call, no synchronisation: when it is
close to ``ms_median`` the codec is launch-bound) and ``kernels`` (device kernels per call,
from the profiler), the two numbers behind "kernel count x launch overhead".

DDP (``--ddp``; every rank): iteration time of syncSGD, the kit's hooks and PyTorch's
built-in hooks for each model through :func:`studykit.measure.ddp.run_ddp` (the same code
as ``python -m studykit ddp``): ``--ddp-warmup`` discarded and ``--ddp-iters`` timed iterations per
configuration (5 + 20 by default: about 2.5 minutes for the four models on two GPUs).

Records (JSON Lines, provenance-stamped by :mod:`studykit.measure.records`) go to
``OUT_DIR/codecs.jsonl`` and ``OUT_DIR/ddp.jsonl``; ``OUT_DIR/summary.csv`` and
``OUT_DIR/summary.md`` hold :func:`summarize`, which also reads the committed
``data/measurements/gpu/*.jsonl`` (``python -m studykit bench --summary FILES``).
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from pathlib import Path
from typing import Iterable, Optional, Sequence

import torch

from studykit import compressors as C
from studykit import models as M
from studykit import argtypes, paths
from studykit.comm import LocalComm
from studykit.compressors import _fast, fastpath
from studykit.measure.profile import _plan, _timed_call, effective_params, measure_copy_bandwidth, single_round
from studykit.measure.records import RecordWriter, config_id, load_records, make_record
from studykit.measure.runtime import CompressorSpec, note, parse_compressor_specs
from studykit.measure.timing import time_fn

__all__ = ["TARGETS", "ELEMENTWISE", "TOPK_FAMILY", "summarize", "run_codecs", "main"]

#: issue #7's groups and limits
ELEMENTWISE, TOPK_FAMILY, LOW_RANK = (C.in_group(g) for g in ("elementwise", "topk", "lowrank"))  # class metadata
TARGETS = {
    "elementwise": "encode+decode of the flat ResNet-50 gradient <= 3x the memory floor",
    "topk": "encode+decode of the flat ResNet-50 gradient <= 10x the memory floor",
    "powersgd": "PowerSGD rank 4 encode+decode on ResNet-50's matrices < 3 ms",
    "ddp_powersgd": "2-GPU DDP iteration with the kit's PowerSGD rank-4 hook <= 1.2x syncSGD (ResNet-50, batch 64)",
    "ddp_half": "kit fp16/bf16 hook no slower than PyTorch's fp16/bf16 hook",
}
#: ddp hooks timed by default (the targets' ones); --ddp-compressors all adds the rest
DDP_SPECS = ("none", "fp16", "bf16", "powersgd:rank=4")
DDP_MODELS = ("resnet50", "resnet101", "bert_base", "vgg19")


# ====================================================================== codecs
def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)


@contextlib.contextmanager
def _fast_paths(on: bool):
    """``STUDYKIT_FAST`` set for the block (the fused kernels read it on every call)."""
    old = os.environ.get("STUDYKIT_FAST")
    os.environ["STUDYKIT_FAST"] = "1" if on else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("STUDYKIT_FAST", None)
        else:
            os.environ["STUDYKIT_FAST"] = old


def _host_ms(fn, device: torch.device, reps: int = 20) -> float:
    """Mean wall time of a call *without* synchronising: the host's side (Python, dispatch,
    launches). On a GPU, a codec whose host time is close to its device time is launch-bound."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    ms = (time.perf_counter() - t0) / reps * 1e3
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return ms


def _settle(fn, device: torch.device) -> None:
    """Two untimed calls before timing: Triton compiles a kernel on its first launch and
    :func:`studykit.compressors._fast.pick` times its candidates once, both far longer than a
    call; left in, they would make ``time_fn``'s budget estimate cut the run to ``min_iter``."""
    for _ in range(2):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _kernels(fn, device: torch.device) -> Optional[int]:
    """Device kernels (and memsets/copies) one call launches, from torch.profiler; None on CPU."""
    if device.type != "cuda":
        return None
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize(device)
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    except Exception:  # noqa: BLE001 - a profiler problem must not stop the benchmark
        return None


def _group(name: str) -> str:
    return C.metadata(name).bench_group if name in C.available() else "dense"


def _codec_plan(specs: Sequence[CompressorSpec], split: bool) -> list[tuple[CompressorSpec, str, str]]:
    """(spec, phase, layout) to time, in order."""
    out = []
    for spec in specs:
        layout = "per_tensor" if spec.name in LOW_RANK else "flat"
        plain = C.get(spec.name, allow_nonfinite=True, **_no_ef(spec))
        out.append((spec, "encdec", layout))
        if split and layout == "flat" and single_round(plain):
            out += [(spec, "encode", layout), (spec, "decode", layout)]
        if C.get(spec.name, allow_nonfinite=True, **spec.kwargs).error_feedback:
            out.append((spec, "default", layout))
    return out


def _no_ef(spec: CompressorSpec) -> dict:
    """The spec's parameters with error feedback off (a generic parameter of every compressor)."""
    return dict(spec.kwargs, error_feedback=False)


#: codecs with a fused-kernel path (the others run the same code with --reference): read from the overrides
FAST_CODECS = fastpath.accelerated()


def run_codecs(specs: Sequence[CompressorSpec], writer: RecordWriter, *, device: torch.device,
               model: str = "resnet50", n_iter: int = 50, n_warmup: int = 10, budget_s: Optional[float] = 1.0,
               reference: bool = False, split: bool = True, extras: bool = True,
               copy_bytes: Optional[int] = None, verbose: bool = True) -> int:
    """Time every codec of ``specs`` on ``model``'s flat gradient (low-rank ones on its real
    shapes) beside the memory floor; returns records written. Resumes: configurations whose
    ``config_id`` is in ``writer``'s file are skipped."""
    device = torch.device(device)
    timing_kw = dict(n_iter=n_iter, n_warmup=n_warmup, budget_s=budget_s)
    done = writer.done()
    written = 0
    dev_type = device.type

    copy_bytes = copy_bytes or (256 * 2**20 if dev_type == "cuda" else 64 * 2**20)
    t, copy_gbps = measure_copy_bandwidth(device, copy_bytes, n_iter=n_iter, n_warmup=n_warmup)
    writer.write(make_record("copy_bw", config_id(kind="copy_bw", size_bytes=copy_bytes, device_type=dev_type),
                             device=device, timing=t, size_bytes=copy_bytes, copy_GBps=copy_gbps))
    written += 1
    shapes = [tuple(s) for s in M.param_shapes(model)]
    numel = sum(math.prod(s) for s in shapes)
    floor_ms = 8 * numel / (copy_gbps * 1e9) * 1e3
    note(f"bench: copy bandwidth {copy_gbps:.0f} GB/s -> floor for {model} ({numel} fp32) {floor_ms:.4f} ms; "
         f"fused kernels {'available' if _fast.HAVE_TRITON and dev_type == 'cuda' else 'not available'}", verbose)

    gen = torch.Generator(device=device).manual_seed(0)
    flat = torch.randn(numel, generator=gen, device=device)
    per_tensor = list(flat.split([math.prod(s) for s in shapes]))
    per_tensor = [p.view(s).clone() for p, s in zip(per_tensor, shapes)]  # separate tensors, like real grads

    variants = [True, False] if reference else [True]
    pending: list = []  # (record, fast, function): kernels are counted after all timings
    base = dict(model=model, numel=numel, grad_bytes=4 * numel, floor_bytes=8 * numel, copy_GBps=copy_gbps,
                floor_ms=floor_ms, sim_world_size=1)
    for fast in variants:
        for spec, phase, layout in _codec_plan(specs, split):
            if not fast and (spec.name not in FAST_CODECS or phase in ("encode", "decode")):
                continue  # nothing to compare: no fused path
            kwargs = spec.kwargs if phase == "default" else _no_ef(spec)
            comp = C.get(spec.name, allow_nonfinite=True, **kwargs)
            params = effective_params(comp)
            mode = f"{layout}:{'fast' if fast else 'reference'}"
            cid = config_id(kind="bench", model=model, compressor=spec.name, params=params, phase=phase,
                            mode=mode, device_type=dev_type)
            if cid in done:
                continue
            grads = [flat] if layout == "flat" else per_tensor
            wire, ratio = _plan(comp, [flat.shape] if layout == "flat" else shapes)
            fields = dict(base, compressor=spec.name, params=params, phase=phase, layout=layout, mode=mode,
                          fast=bool(fast and _fast.HAVE_TRITON and dev_type == "cuda"), group=_group(spec.name),
                          wire_bytes=wire, ratio=ratio, allreduce_compatible=bool(comp.allreduce_compatible))
            fn = None
            try:
                with _fast_paths(fast):
                    if phase in ("encdec", "default"):
                        comm = LocalComm()
                        fn = (lambda c=comp, g=grads, m=comm: c.reduce(g, m, key=0))
                    else:
                        fn = _timed_call(comp, phase, grads, 1)
                    _settle(fn, device)  # kernel compilation and the fast paths' one-time choices
                    t = time_fn(fn, device=device, **timing_kw)
                    host = _host_ms(fn, device, reps=max(2, min(20, int(200 / max(t.ms_median, 0.01)))))
                rec = make_record("bench", cid, device=device, timing=t, x_floor=t.ms_median / floor_ms,
                                  host_ms=host, kernels=None, **fields)
            except Exception as exc:  # noqa: BLE001 - one codec failing must not stop the run
                if dev_type == "cuda":
                    torch.cuda.empty_cache()
                rec = make_record("bench", cid, device=device, status="error",
                                  reason=f"{type(exc).__name__}: {exc}"[:500], **fields)
            pending.append((rec, fast, fn if rec["status"] == "ok" and dev_type == "cuda" else None))
            fn = None
            if rec["status"] == "ok":
                note(f"{spec.name:>13} {phase:<8} {mode:<21} {rec['ms_median']:8.4f} ms  x{rec['x_floor']:6.1f} floor"
                     f"  host {rec['host_ms']:.3f} ms", verbose)
            else:
                note(f"{spec.name:>13} {phase:<8} {mode:<21} ERROR {rec['reason'][:100]}", verbose)
    comps = _components(flat, device, base, timing_kw, done, verbose) if extras else []
    # The profiler goes last: once CUPTI is attached, every later launch costs more host time,
    # which would inflate the timings of launch-bound codecs measured after it.
    for rec, fast, fn in pending + comps:
        if fn is not None:
            with _fast_paths(fast):
                rec["kernels"] = _kernels(fn, device)
        writer.write(rec)
        written += 1
    return written


def _components(flat, device, base, timing_kw, done, verbose) -> list:
    """Building blocks behind the explanations: torch.topk alone, one MSTopK counting pass,
    a plain elementwise pass (x * 2) and an empty launch."""
    numel = flat.numel()
    k = max(1, math.ceil(0.01 * numel))
    mag = flat.abs()
    mid = mag.mean()
    chunks = -(-numel // 4096)
    rows = torch.nn.functional.pad(flat, (0, chunks * 4096 - numel)).view(chunks, 4096).abs()
    tiny = torch.zeros(1, device=device)
    from studykit.compressors.thc import rotate, unrotate

    size = 1 << max(numel - 1, 0).bit_length()  # THC's full rotation: the next power of two
    padded = torch.nn.functional.pad(flat, (0, size - numel)).view(1, size)
    parts = {
        "THC rotate (full, 2^k padded)": lambda: rotate(padded),
        "THC rotate + unrotate (full)": lambda: unrotate(rotate(padded), 1, size),
        "torch.topk(|g|, 1%)": lambda: torch.topk(mag, k, sorted=False),
        "torch.topk rows 4096, k=41": lambda: torch.topk(rows, 41, dim=1, sorted=False),
        "one count pass (|g| >= t).sum()": lambda: (mag >= mid).sum(dtype=torch.int32),
        "elementwise pass g * 2": lambda: flat * 2,
        "fused-kernel radix select top-k (1%)": (lambda: _fast._radix_topk(flat, k)) if _fast.enabled(flat) else None,
        "empty launch (1-element add)": lambda: tiny.add_(1),
    }
    out = []
    for label, fn in parts.items():
        if fn is None:
            continue
        cid = config_id(kind="bench", model=base["model"], compressor=None, phase="component:" + label,
                        device_type=device.type)
        if cid in done:
            continue
        _settle(fn, device)
        t = time_fn(fn, device=device, **timing_kw)
        rec = make_record("bench", cid, device=device, timing=t, x_floor=t.ms_median / base["floor_ms"],
                          host_ms=_host_ms(fn, device), kernels=None,
                          **dict(base, phase="component:" + label, layout="flat", group="component"))
        out.append((rec, True, fn if device.type == "cuda" else None))
        note(f"{'component':>13} {label:<34} {t.ms_median:8.4f} ms  x{rec['x_floor']:6.1f} floor", verbose)
    return out


# ====================================================================== summary
def _params_str(p) -> str:
    if not p:
        return ""
    if isinstance(p, str):
        return p
    return ",".join(f"{k}={v}" for k, v in sorted(p.items()))


def _is_default(name: str, params: dict) -> bool:
    """Whether ``params`` are the registered defaults of ``name`` (error_feedback aside)."""
    try:
        ref = effective_params(C.get(name))
    except Exception:  # noqa: BLE001
        return False
    a = {k: v for k, v in (params or {}).items() if k != "error_feedback"}
    b = {k: v for k, v in ref.items() if k != "error_feedback" and k in a}  # parameters added since: default
    return a == b


def _codec_target(name: str, params: dict) -> tuple[Optional[str], Optional[float], str]:
    """(target key, limit, unit) for a codec row."""
    if name in ELEMENTWISE:
        return "elementwise", 3.0, "x_floor"
    if name in TOPK_FAMILY:
        return "topk", 10.0, "x_floor"
    if name == "powersgd" and (params or {}).get("rank") == 4:
        return "powersgd", 3.0, "ms"
    return None, None, ""


def summarize(records: Iterable[dict]) -> "pandas.DataFrame":  # noqa: F821
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
    PyTorch hook it competes with); then ``target``, ``limit`` and ``passed`` (None where no
    target applies or it cannot be judged).
    """
    import pandas as pd

    records = [r for r in records if r.get("status") == "ok"]
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
                   kernels=r.get("kernels"), target=None, limit=None, passed=None)
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
            row.update(target=TARGETS[key], limit=limit)
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
                   target=None, limit=None, passed=None)
        multi = (r.get("world_size") or 1) >= 2
        if mode == "hook" and name == "powersgd" and params.get("rank") == 4 and _is_default(name, params):
            row.update(target=TARGETS["ddp_powersgd"] + ("" if r.get("model") == "resnet50" else " (reported)"),
                       limit=1.2)
            if multi and row["x_syncsgd"] is not None and r.get("model") == "resnet50":
                row["passed"] = bool(row["x_syncsgd"] <= 1.2)
        if mode == "hook" and name in ("fp16", "bf16"):
            peer = "torch_" + name
            pm = peers.get(k + (peer,))
            row.update(peer=peer, peer_ms=pm, x_peer=r["ms_median"] / pm if pm else None,
                       target=TARGETS["ddp_half"], limit=1.0)
            if multi and pm:
                row["passed"] = bool(r["ms_median"] <= pm)
        rows.append(row)
    cols = ["section", "source", "gpu", "torch", "model", "compressor", "params", "phase", "layout", "impl",
            "world_size", "batch_size", "ms", "floor_ms", "x_floor", "host_ms", "kernels", "syncsgd_ms",
            "x_syncsgd", "peer", "peer_ms", "x_peer", "target", "limit", "passed"]
    df = pd.DataFrame(rows)
    for c in cols:
        if c not in df:
            df[c] = None
    return df[cols]


def summary_markdown(df) -> str:
    """The target rows of :func:`summarize` as a Markdown table (plus the counts)."""
    t = df[df["target"].notna()]
    lines = ["| model | compressor | phase / mode | impl | ms | x floor | x syncSGD | x PyTorch hook | limit | passed |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def f(x, d=3):
        return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"

    for _, r in t.iterrows():
        lines.append(f"| {r['model']} | {r['compressor']} {r['params']} | {r['phase']}"
                     f"{'' if r['section'] == 'codec' else ' ws' + str(int(r['world_size']))} | {r['impl']} | {f(r['ms'])} | "
                     f"{f(r['x_floor'], 1)} | {f(r['x_syncsgd'], 3)} | {f(r['x_peer'], 3)} | {r['limit']} | "
                     f"{'' if r['passed'] is None else ('yes' if r['passed'] else 'NO')} |")
    judged = t[t["passed"].notna()]
    lines.append("")
    lines.append(f"{int(judged['passed'].sum())} of {len(judged)} judged target rows pass.")
    return "\n".join(lines)


# ====================================================================== CLI
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m studykit bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default=str(paths.REPORTS / "benchmarks" / "run"),
                    help="folder for codecs.jsonl, ddp.jsonl, summary.csv, summary.md (default reports/benchmarks/run; "
                         f"inside the committed data/ only with {paths.OVERWRITE_FLAG})")
    ap.add_argument(paths.OVERWRITE_FLAG, action="store_true",
                    help="allow --out-dir inside the repository's committed data/ (refused otherwise)")
    ap.add_argument("--retry-errors", action="store_true",
                    help="measure again the configurations whose records in --out-dir are errors")
    ap.add_argument("--overwrite", action="store_true", help="start the record files afresh (else: resume)")
    ap.add_argument("--model", default="resnet50", choices=M.available(), help="gradient for the codecs")
    ap.add_argument("--compressors", nargs="*", default=None, metavar="NAME[:k=v,...]",
                    help="codecs to time (default: every registered one)")
    ap.add_argument("--no-codecs", action="store_true", help="skip the codec part")
    ap.add_argument("--reference", action="store_true",
                    help="also time every codec with the fused kernels off (STUDYKIT_FAST=0): before/after")
    ap.add_argument("--no-split", action="store_true", help="skip the separate encode/decode timings")
    ap.add_argument("--iters", type=argtypes.positive_int, default=50, help="timed iterations (default 50)")
    ap.add_argument("--warmup", type=argtypes.nonneg_int, default=10, help="discarded warm-up iterations (default 10)")
    ap.add_argument("--budget-s", type=argtypes.positive_float, default=1.0, help="seconds per codec configuration (default 1)")
    ap.add_argument("--ddp", action="store_true",
                    help="also time DDP iterations (every rank; under torchrun for 2+ GPUs)")
    ap.add_argument("--ddp-models", nargs="+", default=list(DDP_MODELS), choices=M.available(), metavar="MODEL")
    ap.add_argument("--ddp-compressors", nargs="*", default=list(DDP_SPECS), metavar="NAME[:k=v,...]",
                    help=f"kit hooks to time (default: {' '.join(DDP_SPECS)}; 'all' for every compressor)")
    ap.add_argument("--ddp-iters", type=argtypes.positive_int, default=20, help="timed DDP iterations per configuration (default 20)")
    ap.add_argument("--ddp-warmup", type=argtypes.nonneg_int, default=5,
                    help="discarded DDP iterations first (default 5; the first one builds DDP's buckets)")
    ap.add_argument("--ddp-budget-s", type=argtypes.positive_float, default=None,
                    help="cap seconds per DDP configuration (default: none, exactly --ddp-iters; a budget "
                         "estimates from the first, slow iteration and may cut a run to 5 iterations)")
    ap.add_argument("--device", default="auto", help="codec device: auto (GPU if any), cpu, cuda, cuda:N")
    ap.add_argument("--summary", nargs="+", default=None, metavar="FILE_OR_DIR",
                    help="only summarize these record files/folders (e.g. data/measurements/gpu) and exit")
    ap.add_argument("--quiet", action="store_true")
    return ap


def _write_summary(records: list[dict], out_dir: Optional[Path], verbose: bool) -> "pandas.DataFrame":  # noqa: F821
    df = summarize(records)
    md = summary_markdown(df)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        df.to_csv(out_dir / "summary.csv", index=False)
        (out_dir / "summary.md").write_text(md + "\n", encoding="utf-8")
    if verbose:
        print(md)
    return df


def main(argv: Optional[list[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        argv = argv[1:]
    ap = build_parser()
    args = ap.parse_args(argv)
    verbose = not args.quiet
    if args.summary:
        try:
            records = load_records(*args.summary)
        except ValueError as exc:  # a missing file or folder, another schema
            ap.error(str(exc))
        if not records:
            ap.error(f"--summary: no records in {' '.join(args.summary)} (*.jsonl files written by bench)")
        _write_summary(records, None, verbose)
        return 0
    try:
        out_dir = paths.check_writable_output(args.out_dir, args.overwrite_committed, what="--out-dir")
        for p in (out_dir / "codecs.jsonl", out_dir / "ddp.jsonl"):
            paths.check_writable_output(p, True, what="--out-dir", file=True)
    except paths.OutputError as exc:
        ap.error(str(exc))

    from studykit.measure.runtime import finish_dist, init_dist, pick_device

    world = int(os.environ.get("WORLD_SIZE", "1"))
    d = None
    if args.ddp or world > 1:
        d = init_dist("auto", None, require_group=True)
    rank = d.rank if d is not None else 0
    main_rank = rank == 0
    codecs_path, ddp_path = out_dir / "codecs.jsonl", out_dir / "ddp.jsonl"
    if main_rank:
        out_dir.mkdir(parents=True, exist_ok=True)
        if args.overwrite:
            for p in (codecs_path, ddp_path):
                p.unlink(missing_ok=True)
    ok = False
    try:
        if d is not None:
            d.barrier()
        if not args.no_codecs and main_rank:
            device = d.device if d is not None else pick_device(args.device)
            specs = parse_compressor_specs(args.compressors)
            run_codecs(specs, RecordWriter(codecs_path, retry_errors=args.retry_errors), device=device, model=args.model, n_iter=args.iters,
                       n_warmup=args.warmup, budget_s=args.budget_s, reference=args.reference,
                       split=not args.no_split, verbose=verbose)
        if d is not None:
            d.barrier()
        if args.ddp or world > 1:
            from studykit.measure.ddp import run_ddp

            specs = parse_compressor_specs(None if args.ddp_compressors == ["all"] else args.ddp_compressors) \
                if args.ddp_compressors else []
            gc_writer = RecordWriter(ddp_path, enabled=main_rank, retry_errors=args.retry_errors)
            run_ddp(d, args.ddp_models, specs, gc_writer, modes=("syncsgd", "builtin", "hook"),
                    n_iter=args.ddp_iters, n_warmup=args.ddp_warmup, budget_s=args.ddp_budget_s, min_iter=5,
                    verbose=verbose)
        ok = True
    finally:
        if d is not None:
            finish_dist(d, ok)
    if main_rank:
        records = load_records(*(p for p in (codecs_path, ddp_path) if p.exists()))
        _write_summary(records, out_dir, verbose)
        if verbose:
            print(f"bench: records in {out_dir}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
