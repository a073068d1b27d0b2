"""MSTopK's fused threshold search (:func:`studykit.compressors._fast.mstopk_search`) at each number of binary-search
steps a pass resolves (``bits``: a histogram of 2**bits leaves per pass over |g|, ceil(samplings / bits) passes)
and each first pass that keeps the entries the next passes read (``keep_from``; ``none``: every pass reads all of
|g|), timed side by side in one process on a flat gradient. CUDA only.

    python benchmarks/mstopk_bits.py --out mstopk_bits.jsonl
    python benchmarks/mstopk_bits.py --models resnet50 --bits 4 5 6 8 10 --min-time-s 1
    python benchmarks/mstopk_bits.py --bits 6 --keep-from 1 0 none

Fewer leaves make a pass cheaper (Triton's histogram costs more the more bins it fills) and the passes more
numerous; every setting gives the same thresholds and counts, bit for bit (checked before timing). Per model it
prints each setting's median (ms, interquartile range, repetitions; ``bench``'s repetition policy and options,
the L2 flushed before every call, plain CUDA events), its ratio to the first setting (the kit's
``_fast._MSTOPK_BITS`` and the first ``--keep-from``) and the floor (one read and one write of the fp32 gradient
at this run's copy bandwidth). Records of kind ``bench`` (``compressor`` ``mstopk``, ``phase`` ``search``,
``params`` ``ratio``, ``samplings``, ``bits``, ``keep_from``) go to ``--out`` with the usual provenance.
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
from studykit.measure import bench  # noqa: E402
from studykit.measure.profile import memory_floor_ms  # noqa: E402
from studykit.measure.records import config_id, make_record  # noqa: E402
from studykit.measure.timing import time_fn  # noqa: E402


def _keep_from(text: str):
    """``--keep-from``'s values: a pass number (0 the first) or ``none``."""
    if text.strip().lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a pass number (0, 1, ...) or none, got {text!r}")
    return value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/mstopk_bits.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["resnet50", "bert_base"], choices=M.available())
    ap.add_argument("--ratio", type=argtypes.fraction, default=0.01)
    ap.add_argument("--samplings", type=argtypes.int_range(1), default=30, help="binary-search steps (MSTopK's)")
    ap.add_argument("--bits", nargs="+", type=argtypes.int_range(1, 10), default=[3, 4, 5, 6, 8, 10],
                    help="steps resolved per pass over |g|")
    ap.add_argument("--keep-from", nargs="+", type=_keep_from, default=[1], metavar="PASS",
                    help="first pass that keeps the entries the next ones read: 0, 1, ... or none (default: 1)")
    bench.add_candidates_args(ap)
    args, policy, writer = bench.start_candidates(ap, argv)
    device, copy_gbps = bench.candidates_gpu("mstopk_bits")
    timing = policy.timing_kw(device)
    bits_list = list(dict.fromkeys([_fast._MSTOPK_BITS, *args.bits]))  # the kit's setting first: the ratios' base
    for model in args.models:
        numel = M.numel(model)
        mag = torch.randn(numel, generator=torch.Generator().manual_seed(0)).to(device).abs()
        lo, hi = mag.mean(), mag.max()
        k = num_selected(numel, args.ratio)
        floor = memory_floor_ms(numel, copy_gbps)
        want = None
        times = {}
        settings = [(b, kf) for b in bits_list for kf in dict.fromkeys(args.keep_from)]
        for bits, keep_from in settings:
            def run(b=bits, kf=keep_from):
                return _fast.mstopk_search(mag, k, args.samplings, lo, hi, torch.int32, bits=b, keep_from=kf)
            got = run()
            if want is None:
                want = got
            elif not all(torch.equal(g, w) for g, w in zip(got, want)):
                raise SystemExit(f"mstopk_bits: bits={bits} keep_from={keep_from} found another threshold than "
                                 f"bits={settings[0][0]} keep_from={settings[0][1]} on {model}")
            t = times[bits, keep_from] = time_fn(run, device=device, **timing)
            base = times[settings[0]].ms_median
            print(f"mstopk {model:10s} bits={bits:<2d} passes={-(-args.samplings // bits):<2d} "
                  f"keep_from={str(keep_from):4s} {t.ms_median:.4f} ms [{t.ms_q25:.4f}-{t.ms_q75:.4f}] n={t.n_iter}  "
                  f"x {t.ms_median / floor:.1f} floor  / first {t.ms_median / base:.3f}", flush=True)
            if writer:
                params = {"ratio": args.ratio, "samplings": args.samplings, "bits": bits, "keep_from": keep_from}
                writer.write(make_record("bench", config_id(kind="bench", model=model, compressor="mstopk",
                                                            params=params, phase="search", device_type="cuda"),
                                         timing=t, device=device, model=model, compressor="mstopk", params=params,
                                         phase="search", numel=numel, k=k, floor_ms=floor, copy_GBps=copy_gbps,
                                         **policy.fields(device)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
