"""The exact top-k selections that :func:`studykit.compressors._fast.topk_abs` chooses between with
:func:`studykit.compressors._fast.pick`, timed side by side in one process on a flat gradient: the sampled
threshold (``_sampled_topk_nosync``: a count pass and a compact pass keep the candidates, radix select on the
sample and on the candidates, whether they hold the top k decided on the device), radix select (``_radix_topk``)
and ``torch.topk`` itself. CUDA only. Records before kit commit 92636bf also time ``sampled``, a form of the
sampled method whose host decided (one synchronisation; removed from the kit, since a hook must not wait for the
GPU).

    python benchmarks/topk_select.py --out topk_select.jsonl
    python benchmarks/topk_select.py --models resnet50 --ratios 0.01 --min-time-s 1

Per model and ratio it prints each method's median (ms, interquartile range, repetitions; timed under
``bench``'s repetition policy and its options, the L2 flushed before every call, with plain CUDA events, so the
host's launches count), its ratio to ``torch.topk``, the floor (one read and one write of the fp32 gradient at
this run's copy bandwidth), and which one ``topk_abs`` picked in this process. Every method is also timed as a
CUDA graph's replay (records with ``params`` ``graph`` true; checked against ``torch.topk`` first), and the kit's
own ones per kernel (device times, ``bench.kernel_times``, printed only). Where the sampled method applies, also its counting and
compacting passes alone (``_fast._compact_ge``) in every program shape ``pick`` chooses among
(``_fast.COMPACT_SHAPES``), eagerly and replayed. Records of kind ``bench`` (``phase`` ``topk_select``, ``params``
``ratio`` and ``path`` ``sampled`` / ``sampled_nosync`` / ``radix`` / ``torch``; ``phase`` ``compact_ge``,
``params`` ``ratio``, ``block``, ``span`` (elements per program of the bitmask's walk; records before
``topk_bitmask/`` have ``rows`` instead: a prefix sum over x's elements), ``graph`` true where replayed) go to
``--out`` with the usual provenance.

The chunked top-k's per-row selection (``_fast.row_topk``, rows of ``--chunk`` elements) is timed the same way in
every program shape ``pick`` chooses among (``_fast.ROW_TOPK_SHAPES``: stopping once exactly k reach the
threshold or taking all 31 steps, warps per row),
each checked against ``torch.topk`` on the rows first, and its decoding (``_fast.row_scatter``): records of
``phase`` ``row_topk`` (``params`` ``ratio``, ``chunk``, ``stop``, ``warps``) and ``row_scatter``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from studykit import argtypes  # noqa: E402
from studykit import models as M  # noqa: E402
from studykit.compressors import _fast  # noqa: E402
from studykit.compressors.sparsification import num_selected  # noqa: E402
from studykit.measure.profile import memory_floor_ms  # noqa: E402
from studykit.measure import bench  # noqa: E402
from studykit.measure.bench.calls import capture_call, kernel_times  # noqa: E402
from studykit.measure.records import config_id, make_record  # noqa: E402
from studykit.measure.timing import time_fn  # noqa: E402



def candidates(x: torch.Tensor, k: int) -> dict:
    """``{path: fn}``: the sampled method (only where it applies), radix select, ``torch.topk``."""
    fns = {}
    if _fast._sampled_ok(x.numel(), k):
        fns["sampled_nosync"] = lambda: _fast._sampled_topk_nosync(x, k)
    fns["radix"] = lambda: _fast._radix_topk(x, k)
    fns["torch"] = lambda: torch.topk(x.abs(), k, sorted=False).indices
    return fns


def rows_per_chunk(x, model, ratio, chunk, floor, copy_gbps, device, timing, policy, writer) -> None:
    """The per-row selection of the chunked top-k in each of ``ROW_TOPK_SHAPES`` and its decoding, timed side by
    side (each shape first checked against ``torch.topk`` on the zero-padded rows)."""
    n = x.numel()
    kr = num_selected(chunk, ratio)  # topk_chunked's entries per chunk
    if not _fast.row_topk_ok(chunk, kr):
        return
    rows = -(-n // chunk)
    want = torch.topk(torch.nn.functional.pad(x, (0, rows * chunk - n)).view(rows, chunk).abs(), kr, dim=1).values
    best = None
    for stop, warps in _fast.ROW_TOPK_SHAPES:
        vals, offs = _fast.row_topk(x, chunk, kr, shape=(stop, warps))
        if not torch.equal(vals.view(rows, kr).abs().sort(dim=1, descending=True).values, want):
            raise SystemExit(f"topk_select: row_topk stop={stop} warps={warps} did not select each row's top {kr}")
        t = time_fn(lambda s=(stop, warps): _fast.row_topk(x, chunk, kr, shape=s), device=device, **timing)
        best = t.ms_median if best is None else min(best, t.ms_median)
        print(f"topk {model:10s} ratio={ratio:<6g} row_topk chunk={chunk} stop={int(stop)} warps={warps} "
              f"{t.ms_median:.4f} ms [{t.ms_q25:.4f}-{t.ms_q75:.4f}] n={t.n_iter}  x {t.ms_median / floor:.1f} floor",
              flush=True)
        _write(writer, policy, device, t, model, "row_topk", n, kr, floor, copy_gbps,
               {"ratio": ratio, "chunk": chunk, "stop": stop, "warps": warps})
    t = time_fn(lambda: _fast.row_scatter(vals, offs, n, chunk, kr), device=device, **timing)
    print(f"topk {model:10s} ratio={ratio:<6g} row_scatter chunk={chunk} {t.ms_median:.4f} ms "
          f"[{t.ms_q25:.4f}-{t.ms_q75:.4f}] n={t.n_iter}  x {t.ms_median / floor:.1f} floor; "
          f"fastest row_topk x {best / floor:.1f} floor", flush=True)
    _write(writer, policy, device, t, model, "row_scatter", n, kr, floor, copy_gbps, {"ratio": ratio, "chunk": chunk})


def compact_shapes(x, model, ratio, k, floor, copy_gbps, device, timing, policy, writer) -> None:
    """The counting and compacting passes alone at the sampled method's threshold, in each of ``COMPACT_SHAPES``
    (each first checked against ``torch.nonzero_static``), timed eagerly and as a CUDA graph's replay."""
    n = x.numel()
    t_bits, cap = _fast._threshold_from_sample(x, k)
    want = torch.nonzero_static(x.abs().view(torch.int32) >= t_bits, size=cap, fill_value=n).view(-1)
    for block, span in _fast.COMPACT_SHAPES:
        shape = {"block": block, "span": span}
        label = f"block={block} span={span}"
        fn = lambda b=block, s=span: _fast._compact_ge(x, t_bits, cap, b, s)  # noqa: E731
        if not torch.equal(fn()[0], want):
            raise SystemExit(f"topk_select: compact_ge {label} did not keep the entries at the threshold")
        held = {}
        graph = capture_call(lambda: held.setdefault("out", fn()), device)
        if graph is None:
            raise SystemExit(f"topk_select: compact_ge {label} could not be captured as a CUDA graph")
        for replayed, call in ((False, fn), (True, graph.replay)):
            t = time_fn(call, device=device, **timing)
            print(f"topk {model:10s} ratio={ratio:<6g} compact_ge {label}{' graph' if replayed else ''} "
                  f"{t.ms_median:.4f} ms [{t.ms_q25:.4f}-{t.ms_q75:.4f}] n={t.n_iter}  "
                  f"x {t.ms_median / floor:.1f} floor", flush=True)
            _write(writer, policy, device, t, model, "compact_ge", n, k, floor, copy_gbps,
                   {"ratio": ratio, **shape, **({"graph": True} if replayed else {})}, cap=cap)


def _write(writer, policy, device, t, model, phase, numel, k, floor, copy_gbps, params, **extra) -> None:
    """One ``bench`` record of this script (nothing without ``--out``)."""
    if writer:
        writer.write(make_record("bench", config_id(kind="bench", model=model, compressor="topk", params=params,
                                                    phase=phase, device_type="cuda"),
                                 timing=t, device=device, model=model, compressor="topk", params=params, phase=phase,
                                 numel=numel, k=k, floor_ms=floor, copy_GBps=copy_gbps, **extra, **policy.fields(device)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/topk_select.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["resnet50", "bert_base"], choices=M.available())
    ap.add_argument("--ratios", nargs="+", type=argtypes.fraction, default=[0.01, 0.001])
    ap.add_argument("--chunk", type=argtypes.positive_int, default=4096,
                    help="row length of the chunked top-k's per-row selection (default 4096, topk_chunked's)")
    bench.add_candidates_args(ap)
    args, policy, writer = bench.start_candidates(ap, argv)
    device, copy_gbps = bench.candidates_gpu("topk_select")
    timing = policy.timing_kw(device)
    for model in args.models:
        numel = M.numel(model)
        x = torch.randn(numel, generator=torch.Generator().manual_seed(0)).to(device)
        floor = memory_floor_ms(numel, copy_gbps)
        for ratio in args.ratios:
            k = num_selected(numel, ratio)
            fns = candidates(x, k)
            want = torch.topk(x.abs(), k).values
            times = {}
            for path, fn in fns.items():
                got = fn()
                if not torch.equal(x[got].abs().sort(descending=True).values, want):
                    raise SystemExit(f"topk_select: {path} did not select the top {k} of {model}")
                t = time_fn(fn, device=device, **timing)
                times[path] = t
                print(f"topk {model:10s} ratio={ratio:<6g} {path:8s} {t.ms_median:.4f} ms [{t.ms_q25:.4f}-{t.ms_q75:.4f}] "
                      f"n={t.n_iter}  x {t.ms_median / floor:.1f} floor", flush=True)
                _write(writer, policy, device, t, model, "topk_select", numel, k, floor, copy_gbps,
                       {"ratio": ratio, "path": path})
                # also replayed as a CUDA graph, and per kernel
                held = {}
                graph = capture_call(lambda f=fn: held.setdefault("out", f()), device)
                if graph is None:
                    raise SystemExit(f"topk_select: {path} could not be captured as a CUDA graph")
                graph.replay()
                if not torch.equal(x[held["out"]].abs().sort(descending=True).values, want):
                    raise SystemExit(f"topk_select: {path} replayed did not select the top {k} of {model}")
                t = time_fn(graph.replay, device=device, **timing)
                print(f"topk {model:10s} ratio={ratio:<6g} {path + ' graph':21s} {t.ms_median:.4f} ms "
                      f"[{t.ms_q25:.4f}-{t.ms_q75:.4f}] n={t.n_iter}  x {t.ms_median / floor:.1f} floor",
                      flush=True)
                _write(writer, policy, device, t, model, "topk_select", numel, k, floor, copy_gbps,
                       {"ratio": ratio, "path": path, "graph": True})
                if path != "torch":
                    for kt in kernel_times(fn, device):
                        print(f"    {kt['us_median']:8.1f} us  {kt['name'][:90]}", flush=True)
            if "sampled_nosync" in fns:  # the compacting passes alone, at the sampled threshold, per program shape
                compact_shapes(x, model, ratio, k, floor, copy_gbps, device, timing, policy, writer)
            rows_per_chunk(x, model, ratio, args.chunk, floor, copy_gbps, device, timing, policy, writer)
            before = set(_fast.common._PICKED)
            _fast.topk_abs(x, k)
            ratios = "  ".join(f"{p} / torch {t.ms_median / times['torch'].ms_median:.3f}"
                               for p, t in times.items() if p != "torch")
            print(f"topk {model:10s} ratio={ratio:<6g} {ratios}  topk_abs picked: {_fast.picks_since(before)}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
