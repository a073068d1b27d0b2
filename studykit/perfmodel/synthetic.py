"""Synthetic measurement records generated from known constants (for tests and the calibrate demo).

The records follow the measurement schema of :mod:`studykit.measure.records`
(``sweep`` with ``op``, ``tcomp`` with ``phase``, ``profile`` with ``phase``,
``ddp`` with ``mode``) and are stamped ``synthetic: true`` with the generating
constants, so they can never be mistaken for measurements. Times follow the
kit's own model (Eq. 1, App. B ring all-gather, Sec. 4.1) times log-normal noise.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from studykit import paths
from studykit.perfmodel import collectives as col
from studykit.perfmodel.model import (
    DEFAULT_BUCKET_BYTES,
    Hardware,
    ModelOptions,
    Workload,
    predict,
)

__all__ = ["Truth", "synthetic_records", "write_jsonl", "DEMO_PATH", "main"]


@dataclass
class Truth:
    """The constants the synthetic records are generated from."""

    alpha_s: float = 20e-6
    bandwidth_gbps: float = 100.0
    gamma: float = 1.06
    incast_coeff: float = 0.3
    t_comp_s: dict = field(default_factory=lambda: {("resnet50", 32): 0.060, ("resnet50", 64): 0.118,
                                                    ("resnet101", 64): 0.200})
    t_forward_fraction: float = 0.5  # forward time / backward time
    t_encode_decode_s: dict = field(default_factory=lambda: {("powersgd", '{"rank": 4}', "resnet50"): 0.030,
                                                             ("signsgd", "{}", "resnet50"): 0.008})
    # beyond the paper: DDP iterations from the extended model's syncSGD terms (ModelOptions.extended) when
    # ``ddp_options`` is "extended"; the default "paper" generates Sec. 4.1 as published
    ddp_options: str = "paper"
    sync_delta_s: float = 0.0
    per_bucket_s: float = 0.0
    per_tensor_s: float = 0.0

    def options(self):
        """The :class:`~studykit.perfmodel.model.ModelOptions` the DDP records follow (Eq. 1 collectives)."""
        from dataclasses import replace

        return replace(ModelOptions.named(self.ddp_options), collectives="eq1")

    def hardware(self) -> Hardware:
        """The cluster as the model sees it."""
        return Hardware(bandwidth_gbps=self.bandwidth_gbps, alpha_s=self.alpha_s, gamma=self.gamma,
                        incast_coeff=self.incast_coeff, sync_delta_s=self.sync_delta_s,
                        per_bucket_s=self.per_bucket_s, per_tensor_s=self.per_tensor_s)


#: Truth fields of the extended model, stamped on the records only when they differ from the default
_EXTENDED = ("ddp_options", "sync_delta_s", "per_bucket_s", "per_tensor_s")


def _noise(rng, n, sigma):
    return np.exp(rng.normal(0.0, sigma, n))


def _timing(rng, t_s: float, sigma: float, n_iter: int = 20) -> dict:
    times = t_s * 1e3 * _noise(rng, n_iter, sigma)
    return {"ms_median": float(np.median(times)), "ms_mean": float(times.mean()), "ms_min": float(times.min()),
            "ms_max": float(times.max()), "n_iter": n_iter, "n_warmup": 5,
            "times_ms": [round(float(x), 6) for x in times]}


def synthetic_records(truth: Truth | None = None, *, world_sizes=(2, 4, 8), sizes_bytes=None, ddp_world_sizes=(2, 4),
                      noise: float = 0.03, seed: int = 0, n_iter: int = 20) -> list[dict]:
    """Records of every kind, generated from ``truth`` with multiplicative noise ``noise``."""
    truth = truth or Truth()
    rng = np.random.default_rng(seed)
    sizes = np.asarray(sizes_bytes if sizes_bytes is not None else np.geomspace(2**10, 2**28, 10), dtype=float)
    bw = col.gbps_to_bytes_s(truth.bandwidth_gbps)
    stamp = datetime(2024, 1, 1, tzinfo=timezone.utc).isoformat()
    base = {"schema": 1, "status": "ok", "reason": None, "synthetic": True,
            "truth": json.dumps({k: v for k, v in truth.__dict__.items() if not isinstance(v, dict)
                                 and (k not in _EXTENDED or v != getattr(Truth, k))}),
            "gpu": "synthetic", "host": "synthetic", "torch": None, "nccl": None, "git_commit": "synthetic",
            "timestamp": stamp, "device": "synthetic", "backend": "synthetic"}
    out: list[dict] = []
    for p in world_sizes:
        for b in sizes:
            t_ar = float(col.ring_allreduce_s(b, p, truth.alpha_s, bw))
            out.append({**base, "kind": "sweep", "op": "all_reduce", "world_size": int(p), "size_bytes": int(b),
                        "dtype": "float32", "model": None, "compressor": None, "params": {}, "batch_size": None,
                        **_timing(rng, t_ar, noise, n_iter)})
            t_ag = float(col.allgather_incast_s(b, p, truth.alpha_s, bw, truth.incast_coeff))
            out.append({**base, "kind": "sweep", "op": "all_gather", "world_size": int(p), "size_bytes": int(b),
                        "dtype": "float32", "model": None, "compressor": None, "params": {}, "batch_size": None,
                        **_timing(rng, t_ag, noise, n_iter)})
    for (m, bs), t in truth.t_comp_s.items():
        out.append({**base, "kind": "tcomp", "phase": "bwd", "model": m, "batch_size": bs, "world_size": 1,
                    "compressor": None, "params": {}, **_timing(rng, t, noise, n_iter)})
        out.append({**base, "kind": "tcomp", "phase": "fwd_bwd", "model": m, "batch_size": bs, "world_size": 1,
                    "compressor": None, "params": {}, **_timing(rng, t * (1 + truth.t_forward_fraction), noise,
                                                                  n_iter)})
        for p in ddp_world_sizes:
            w = Workload(m, bs, t_comp_s=t, bucket_bytes=DEFAULT_BUCKET_BYTES, overhead_s=0.0)
            s = float(predict(w, truth.hardware(), p, options=truth.options()).sync["total_s"])
            out.append({**base, "kind": "ddp", "mode": "syncsgd", "model": m, "batch_size": bs, "world_size": int(p),
                        "compressor": None, "params": {}, "bucket_mb": None,
                        **_timing(rng, s + t * truth.t_forward_fraction, noise, n_iter)})
    for (c, pk, m), t in truth.t_encode_decode_s.items():
        out.append({**base, "kind": "profile", "phase": "reduce", "model": m, "compressor": c,
                    "params": json.loads(pk), "world_size": 1, "sim_world_size": None, "batch_size": None,
                    **_timing(rng, t, noise, n_iter)})
    return out


def write_jsonl(records: list[dict], path: str | Path) -> Path:
    """Write records as JSON Lines (one object per line)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    return path


#: the committed demo file (``python -m studykit.perfmodel.synthetic --overwrite-committed`` rewrites it)
DEMO_PATH = paths.MEASUREMENTS / "synthetic" / "demo.jsonl"


def main(argv: list[str] | None = None) -> int:
    """Write the synthetic demo records: to ``--out`` (default ``reports/synthetic/demo.jsonl``), or to the
    committed ``data/measurements/synthetic/demo.jsonl`` with ``--out`` there and ``--overwrite-committed``."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m studykit.perfmodel.synthetic", description=main.__doc__)
    ap.add_argument("--out", default=str(paths.REPORTS / "synthetic" / "demo.jsonl"),
                    help=f"records file (default reports/synthetic/demo.jsonl; the committed one: {DEMO_PATH})")
    ap.add_argument(paths.OVERWRITE_FLAG, action="store_true", help="allow --out inside the committed data/")
    args = ap.parse_args(argv)
    try:
        out = paths.check_writable_output(args.out, args.overwrite_committed, what="--out", file=True)
    except paths.OutputError as exc:
        ap.error(str(exc))
    records = synthetic_records()
    path = write_jsonl(records, out)
    print(f"wrote {path} ({len(records)} synthetic records; truth: {Truth()})")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
