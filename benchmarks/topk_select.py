"""The three exact top-k selections that :func:`studykit.compressors._fast.topk_abs` chooses between with
:func:`studykit.compressors._fast.pick`, timed side by side in one process on a flat gradient: the sampled
threshold (``_sampled_topk``: a count pass and a compact pass keep the candidates, ``torch.topk`` on those;
one host synchronisation checks them), radix select (``_radix_topk``) and ``torch.topk`` itself. CUDA only.

    python benchmarks/topk_select.py --out topk_select.jsonl
    python benchmarks/topk_select.py --models resnet50 --ratios 0.01 --min-time-s 1

Per model and ratio it prints each method's median (ms, interquartile range, repetitions; timed under
``bench``'s repetition policy and its options, the L2 flushed before every call, with plain CUDA events, so the
sampled method's synchronisation and the host's launches count), its ratio to ``torch.topk``, the floor (one read and one write of the fp32 gradient at this
run's copy bandwidth), and which one ``pick`` took in this process; where the sampled method applies, also its
counting and compacting passes alone (``_fast._compact_ge``) in every program shape ``pick`` chooses among
(``_fast.COMPACT_SHAPES``). Records of kind ``bench`` (``phase`` ``topk_select``, ``params`` ``ratio`` and
``path`` ``sampled`` / ``radix`` / ``torch``; ``phase`` ``compact_ge``, ``params`` ``ratio``, ``block``, ``rows``)
go to ``--out`` with the usual provenance.
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
from studykit.measure.records import config_id, make_record  # noqa: E402
from studykit.measure.timing import time_fn  # noqa: E402



def candidates(x: torch.Tensor, k: int) -> dict:
    """``{path: fn}`` in ``topk_abs``'s order (the sampled method only where it applies)."""
    fns = {}
    if _fast._sampled_ok(x.numel(), k):
        fns["sampled"] = lambda: _fast._sampled_topk(x, k)
    fns["radix"] = lambda: _fast._radix_topk(x, k)
    fns["torch"] = lambda: torch.topk(x.abs(), k, sorted=False).indices
    return fns


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/topk_select.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["resnet50", "bert_base"], choices=M.available())
    ap.add_argument("--ratios", nargs="+", type=argtypes.fraction, default=[0.01, 0.001])
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
                if writer:
                    params = {"ratio": ratio, "path": path}
                    writer.write(make_record("bench", config_id(kind="bench", model=model, compressor="topk",
                                                                params=params, phase="topk_select", device_type="cuda"),
                                             timing=t, device=device, model=model, compressor="topk", params=params,
                                             phase="topk_select", numel=numel, k=k, floor_ms=floor, copy_GBps=copy_gbps,
                                             **policy.fields(device)))
            if "sampled" in fns:  # the compacting passes alone, at the sampled threshold, per program shape
                t_bits, cap = _fast._threshold_from_sample(x, k)
                for shape in _fast.COMPACT_SHAPES:
                    t = time_fn(lambda s=shape: _fast._compact_ge(x, t_bits, cap, *s), device=device, **timing)
                    print(f"topk {model:10s} ratio={ratio:<6g} compact_ge block={shape[0]} rows={shape[1]} "
                          f"{t.ms_median:.4f} ms [{t.ms_q25:.4f}-{t.ms_q75:.4f}] n={t.n_iter}  x {t.ms_median / floor:.1f} floor",
                          flush=True)
                    if writer:
                        params = {"ratio": ratio, "block": shape[0], "rows": shape[1]}
                        writer.write(make_record("bench", config_id(kind="bench", model=model, compressor="topk",
                                                                    params=params, phase="compact_ge", device_type="cuda"),
                                                 timing=t, device=device, model=model, compressor="topk", params=params,
                                                 phase="compact_ge", numel=numel, k=k, cap=cap, floor_ms=floor,
                                                 copy_GBps=copy_gbps, **policy.fields(device)))
            picked = list(fns)[_fast.pick(("topk", x.device, numel, k), list(fns.values()))]
            ratios = "  ".join(f"{p} / torch {t.ms_median / times['torch'].ms_median:.3f}"
                               for p, t in times.items() if p != "torch")
            print(f"topk {model:10s} ratio={ratio:<6g} {ratios}  pick took: {picked}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
