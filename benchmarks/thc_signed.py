"""THC's random diagonal fused into the rotation's first Hadamard pass (and the inverse's last), against the
diagonal in a pass of its own: the two candidates that :func:`studykit.compressors._fast.rotate_signed` and
``unrotate_signed`` choose between with :func:`studykit.compressors._fast.pick`, each timed side by side in one
process on a flat gradient (ResNet-50's by default). CUDA only.

    python benchmarks/thc_signed.py --out thc_signed.jsonl
    python benchmarks/thc_signed.py --model bert_base --rotation full partial --min-time-s 1

Per rotation and direction it prints each candidate's median (ms, interquartile range, repetitions; timed
with plain CUDA events under ``bench``'s repetition policy and its options, the L2 flushed before every call), each fused candidate's ratio to the separate pass, and which one
``pick`` took in this process (pick times two calls once, so on a close race its choice may differ from the
medians'). The fused candidates are one per ``tl.dot`` precision of the Hadamard passes
(``_fast.HADAMARD_PRECISIONS``: ``fused`` is fp32 FMA, ``fused-tf32x3`` tensor cores). Records of kind ``bench``
(``phase`` ``thc_rotate_signed`` / ``thc_unrotate_signed``, ``params.path`` ``fused``, ``fused-tf32x3`` or
``apart``) go to ``--out`` with the usual provenance.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from studykit import models as M  # noqa: E402
from studykit.compressors import _fast  # noqa: E402
from studykit.compressors.thc import THC  # noqa: E402
from studykit.measure import bench  # noqa: E402
from studykit.measure.records import config_id, make_record  # noqa: E402
from studykit.measure.timing import time_fn  # noqa: E402



def candidates(numel: int, rotation: str, device) -> dict:
    """``{direction: (pick key, {"fused": fn, "apart": fn})}`` for a ``numel`` gradient (the functions of
    ``_fast.rotate_signed`` / ``unrotate_signed``); empty where the diagonal cannot ride on a pass."""
    c = THC(rotation=rotation, seed=1234)
    size, padded, seed = c.rotation_size(numel), c.padded_numel(numel), _fast.seed_of(c, torch.device(device))
    flat = torch.randn(numel, device=device)
    z = torch.randn(padded, device=device)
    sign = (numel, padded, size, seed)
    out = {}
    name = lambda p: "fused" if p == "ieee" else f"fused-{p}"  # noqa: E731 - the committed runs' "fused" is ieee
    if _fast._signed_fusable(size, False):
        fns = {name(p): (lambda p=p: _fast._fwht_passes(flat, size, False, sign, p)) for p in _fast.HADAMARD_PRECISIONS}
        fns["apart"] = lambda: _fast.rotate(_fast.thc_sign(flat, numel, padded, size, seed).view(-1, size))
        out["rotate"] = (("thc_rotate_signed", flat.device, numel, size), fns)
    if _fast._signed_fusable(size, True):
        fns = {name(p): (lambda p=p: _fast._fwht_passes(z, size, True, sign, p)) for p in _fast.HADAMARD_PRECISIONS}
        fns["apart"] = lambda: _fast.thc_sign(_fast.unrotate(z, padded // size, size).reshape(-1), padded, numel,
                                              size, seed)
        out["unrotate"] = (("thc_unrotate_signed", z.device, numel, size), fns)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/thc_signed.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50", choices=M.available())
    ap.add_argument("--rotation", nargs="+", default=["full", "partial"], choices=["full", "partial"])
    bench.add_candidates_args(ap)
    args, policy, writer = bench.start_candidates(ap, argv)
    device = torch.device("cuda:0")
    numel = M.numel(args.model)
    for rot in args.rotation:
        for direction, (key, fns) in candidates(numel, rot, device).items():
            times = {}
            for path, fn in fns.items():
                t = time_fn(fn, device=device, **policy.timing_kw(device))
                times[path] = t
                print(f"thc rotation={rot:7s} {direction:8s} {path:5s} {t.ms_median:.4f} ms "
                      f"[{t.ms_q25:.4f}-{t.ms_q75:.4f}] n={t.n_iter}", flush=True)
                if writer:
                    params = {"rotation": rot, "path": path}
                    phase = f"thc_{direction}_signed"
                    writer.write(make_record("bench", config_id(kind="bench", model=args.model, compressor="thc",
                                                                params=params, phase=phase, device_type="cuda"),
                                             timing=t, device=device, model=args.model, compressor="thc",
                                             params=params, phase=phase, numel=numel, **policy.fields(device)))
            picked = list(fns)[_fast.pick(key, list(fns.values()))]
            ratios = "  ".join(f"{k} / apart {t.ms_median / times['apart'].ms_median:.3f}"
                               for k, t in times.items() if k != "apart")
            print(f"thc rotation={rot:7s} {direction:8s} {ratios}  pick took: {picked}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
