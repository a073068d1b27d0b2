"""``python -m studykit throttle``: a measurement command on every worker, once per rate."""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from studykit import paths

from .cluster import ThrottledCluster
from .delayline import _delay_main
from .netns import (
    ENV_IPROUTE2,
    OWNER_DIR,
    PREFIX,
    ThrottleUnavailable,
    cleanup_leftovers,
    unavailable_reason,
    unowned_namespaces,
    use_iproute2,
)
from .probe import _probe_main, append_record, nccl_transports


# ---- records ----------------------------------------------------------------------------------
def merge_network(record: dict, network: dict) -> dict:
    """Set the record's top-level ``network`` field (provenance is flat in studykit.measure's schema)
    unless the writer already filled it from ``STUDYKIT_NETWORK``."""
    if not record.get("network"):
        record["network"] = network
    return record


def _records(path: Path) -> list[dict]:
    """The records of ``path`` through the kit's one reader (damaged lines skipped; none if absent)."""
    from studykit.measure.records import load_records

    return list(load_records(path, missing_ok=True, dedupe=False, quiet=True))


def _last_record(path: Path) -> dict | None:
    """The last complete record in ``path`` (the probe's own output file), or None."""
    recs = _records(path)
    return recs[-1] if recs else None


def _count_lines(path: Path) -> int:
    """Records in ``path``: the lines of a file, or of every ``*.jsonl`` in a folder (``train --out DIR``)."""
    files = [path] if path.is_file() else sorted(path.glob("*.jsonl")) if path.is_dir() else []
    return sum(sum(1 for _ in open(f, "rb")) for f in files)


def _visible_gpus() -> int:
    """How many CUDA devices torch sees (in a subprocess: the parent never creates a CUDA context)."""
    try:
        p = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True, timeout=120)
        return int(p.stdout.strip().splitlines()[-1])
    except Exception:  # noqa: BLE001 - no torch, no driver: no GPUs
        return 0


def _probe_key(rec: dict) -> tuple:
    net = rec.get("network") or {}
    return (net.get("rate_gbps"), net.get("workers"), net.get("topology"), net.get("mtu"), net.get("latency_ms"),
            rec.get("backend"), rec.get("nbytes"))


def _run_probe(cluster: ThrottledCluster, probe_path: Path, size_mb: float, backend: str,
               timeout_s: float) -> dict:
    """Time one all-reduce on the cluster, note NCCL's transport, append the record to ``probe_path``.

    Reuses a record already in ``probe_path`` for the same network (a resumed campaign)."""
    nbytes = int(size_mb * 2**20) // 4 * 4
    key = (cluster.rate_gbps, cluster.n_workers, cluster.topology, cluster.mtu, cluster.latency_ms, backend, nbytes)
    for rec in _records(probe_path):
        if _probe_key(rec) == key and rec.get("transport_ok"):
            return rec
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}-probe-") as tmp:
        tmp_out = Path(tmp) / "probe.jsonl"
        res = cluster.run(lambda r: [sys.executable, "-m", "studykit.measure.throttle", "_probe", "--size-mb", str(size_mb),
                                     "--iters", "3", "--warmup", "1", "--backend", backend,
                                     "--timeout-s", str(timeout_s), "--out", str(tmp_out)],
                          timeout_s=timeout_s)
        rec = _last_record(tmp_out)
    if rec is None or not all(r.ok for r in res):
        tails = "\n".join(f"--- rank {r.rank} (rc {r.returncode}):\n{(r.stderr or r.stdout)[-1500:]}"
                          for r in res if not r.ok)
        raise RuntimeError(f"the {backend} all-reduce probe failed at {cluster.rate_gbps} Gbit/s\n{tails}")
    if backend == "nccl":
        rec["nccl_transport"] = nccl_transports(*(r.stdout + r.stderr for r in res))
        rec["transport_ok"] = rec["nccl_transport"] == ["NET/Socket"]
    else:
        rec["nccl_transport"] = None
        rec["transport_ok"] = True
    append_record(probe_path, rec)
    return rec


def _finite_nonneg(text: str) -> float:
    v = float(text)
    if not (v >= 0 and v < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return v


def _positive(text: str) -> float:
    v = float(text)
    if not (v > 0 and v < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return v


# ---- CLI --------------------------------------------------------------------------------------
def _cluster_main(argv: list[str]) -> int:
    if "--" in argv:
        i = argv.index("--")
        own, sub = argv[:i], argv[i + 1:]
    else:
        own, sub = argv, []
    ap = argparse.ArgumentParser(
        prog="python -m studykit throttle",
        description="Run a studykit subcommand on every worker of a throttled network (netns + tc tbf), "
                    "once per rate. Example: throttle --workers 2 --rate-gbps 0.5 1 --out "
                    "data/measurements/throttle/probe.jsonl -- _probe --size-mb 16. On GPUs (one NCCL rank "
                    "per GPU, sockets over the shaped link): throttle --gpus --workers 2 --rate-gbps 1 10 "
                    "--out DIR -- ddp --models resnet50")
    ap.add_argument("--workers", type=int, default=2, help="2..4 (one network namespace each)")
    ap.add_argument("--rate-gbps", type=_finite_nonneg, nargs="+", required=True,
                    help="link rate of every worker (egress; ingress too on veth/bridge), Gbit/s; "
                         "one run per value; 0 = unshaped")
    ap.add_argument("--mtu", type=int, default=None, help="default 9000; 65000 with --latency-ms")
    ap.add_argument("--latency-ms", type=_finite_nonneg, default=None,
                    help="one-way delay per packet via the user-space delay line (CPU-bound: see docs)")
    ap.add_argument("--burst-bytes", type=int, default=None,
                    help="tbf bucket, bytes (default: --burst-us of traffic, at least two frames)")
    ap.add_argument("--burst-us", type=_positive, default=400.0,
                    help="default bucket as time at the rate: a message may finish at most this early")
    ap.add_argument("--topology", choices=("auto", "veth", "bridge", "tun"), default="auto")
    ap.add_argument("--gpus", nargs="*", default=None, metavar="ID",
                    help="one CUDA GPU per worker (CUDA_VISIBLE_DEVICES), NCCL over sockets on the shaped link "
                         "only (P2P, SHM, IB, NVLS off); IDs, default 0..workers-1")
    ap.add_argument("--iproute2", default=None, metavar="DIR",
                    help=f"run ip/tc from Debian's iproute2 packages in DIR (.deb files, or unpacked); "
                         f"env {ENV_IPROUTE2}; fetch them with scripts/fetch_iproute2.sh")
    ap.add_argument("--probe-mb", type=_finite_nonneg, default=None,
                    help="before each rate's command, time an all-reduce of this many MiB (NCCL with --gpus) and "
                         "stamp the measured rate and NCCL's transport on every record (default 64 with --gpus, "
                         "else 0 = no probe); probe records go to probe.jsonl beside --out")
    ap.add_argument("--timeout-s", type=_positive, default=600.0, help="per rate, all workers")
    ap.add_argument("--out", required=True,
                    help="JSON Lines file (*.jsonl) or folder (records go to <folder>/<subcommand>.jsonl); "
                         "records are written as they are measured, and a rerun skips what is there")
    ap.add_argument(paths.OVERWRITE_FLAG, action="store_true",
                    help="allow --out inside the repository's committed data/ (refused otherwise)")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(own)
    if not sub:
        ap.error("give the studykit subcommand after `--`, e.g. `-- sweep ...` or `-- _probe --size-mb 16`")
    if "--out" in sub or any(s.startswith("--out=") for s in sub):
        ap.error("give --out to throttle, not to the subcommand (throttle passes it on)")
    if not 2 <= a.workers <= 4:
        ap.error(f"--workers must be 2..4, got {a.workers}")
    if a.iproute2:
        try:
            use_iproute2(a.iproute2)
        except (ThrottleUnavailable, RuntimeError) as e:
            print(f"throttle: skipped: {e}", file=sys.stderr)
            return 77
    reason = unavailable_reason()
    if reason:
        print(f"throttle: skipped: {reason}", file=sys.stderr)
        return 77
    gpus = None
    if a.gpus is not None:
        n_visible = _visible_gpus()
        gpus = a.gpus or [str(i) for i in range(a.workers)]
        if n_visible < a.workers:
            print(f"throttle: skipped: --gpus needs one GPU per worker: {a.workers} workers, "
                  f"{n_visible} CUDA GPU(s) visible", file=sys.stderr)
            return 77
        if len(gpus) != a.workers or any(not g.isdigit() or int(g) >= n_visible for g in gpus):
            ap.error(f"--gpus takes {a.workers} distinct ids in 0..{n_visible - 1}, got {' '.join(gpus)}")
    probe_mb = a.probe_mb if a.probe_mb is not None else (64.0 if gpus else 0.0)
    out = Path(a.out)
    if out.suffix != ".jsonl" and sub[0] != "train":
        out = out / f"{sub[0].lstrip('_')}.jsonl"
    try:
        paths.check_writable_output(out, a.overwrite_committed, file=sub[0] != "train")
    except paths.OutputError as e:
        ap.error(str(e))
    (out if sub[0] == "train" else out.parent).mkdir(parents=True, exist_ok=True)
    probe_path = (out if out.is_dir() else out.parent) / "probe.jsonl"
    if sub[0] in ("_probe", "_stream"):
        base_cmd = [sys.executable, "-m", "studykit.measure.throttle", *sub]
        probe_mb = 0.0
    else:
        base_cmd = [sys.executable, "-m", "studykit", *sub]
    failed = 0
    for rate in a.rate_gbps:
        cluster = ThrottledCluster(a.workers, rate or None, mtu=a.mtu, burst_bytes=a.burst_bytes, burst_us=a.burst_us,
                                   latency_ms=a.latency_ms, topology=a.topology, gpus=gpus, verbose=a.verbose)
        before = _count_lines(out)
        res, wall, note = [], 0.0, ""
        with cluster:
            if probe_mb:
                probe = _run_probe(cluster, probe_path, probe_mb, "nccl" if gpus else "gloo",
                                   timeout_s=min(a.timeout_s, 300.0))
                if not probe["transport_ok"]:
                    print(f"throttle: at {rate} Gbit/s NCCL connected via {probe['nccl_transport']}, not only "
                          f"NET/Socket: traffic would bypass the shaped link; nothing measured", file=sys.stderr)
                    return 1
                cluster.extra_info.update(measured_busbw_gbps=round(probe["busbw_gbps"], 4),
                                          measured_probe_bytes=probe["nbytes"],
                                          nccl_transport=probe["nccl_transport"])
                note = f"probe {probe['busbw_gbps']:.3f} Gbit/s busbw via {probe['nccl_transport'] or 'gloo'}; "
            t0 = time.monotonic()
            res = cluster.run(lambda r: [*base_cmd, "--out", str(out)], timeout_s=a.timeout_s)
            wall = time.monotonic() - t0
        n_new = _count_lines(out) - before
        codes = [r.returncode for r in res]
        status = "ok" if all(r.ok for r in res) else "FAILED"
        if gpus and status == "ok":
            seen = nccl_transports(*(r.stdout + r.stderr for r in res))
            if seen and seen != ["NET/Socket"]:
                status = f"FAILED (NCCL connected via {seen})"
        print(f"throttle: rate {rate} Gbit/s x {a.workers} workers: {status} exit codes {codes}, {note}"
              f"{n_new} records -> {out} ({wall:.1f} s)", file=sys.stderr, flush=True)
        if status != "ok":
            failed += 1
            for r in res:
                if not r.ok:
                    tail = (r.stderr or r.stdout)[-2000:]
                    print(f"--- rank {r.rank} (rc {r.returncode}, timed out {r.timed_out}):\n{tail}",
                          file=sys.stderr)
        if sub[0] in ("_probe", "_stream") and out.is_file():
            rec = _last_record(out)
            if rec and rec.get("kind") == "throttle_probe":
                print(f"  all-reduce busbw {rec['busbw_gbps']:.3f} Gbit/s (configured {rate})", file=sys.stderr)
            elif rec and rec.get("kind") == "throttle_stream":
                print(f"  TCP goodput {rec['goodput_gbps']:.3f} Gbit/s (configured {rate})", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """``throttle ...`` (from studykit.cli), or ``_probe`` / ``_cleanup`` (python -m studykit.measure.throttle)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("_probe", "_stream"):
        return _probe_main(argv[1:], stream=argv[0] == "_stream")
    if argv and argv[0] == "_delayline":
        return _delay_main(argv[1:])
    if argv and argv[0] == "_cleanup":
        argparse.ArgumentParser(
            prog="python -m studykit.measure.throttle _cleanup",
            description="delete the namespaces of clusters whose owner process is gone (their owner records "
                        f"are in {OWNER_DIR}); nothing else is ever removed").parse_args(argv[1:])
        removed = cleanup_leftovers()
        print("\n".join(removed) if removed else "nothing to remove")
        others = unowned_namespaces()
        if others:
            print(f"left alone (no owner record: not made by this module, or made by an older version): "
                  f"{' '.join(others)}; remove them with `ip netns del NAME` if they are yours", file=sys.stderr)
        return 0
    if argv and argv[0] == "throttle":
        argv = argv[1:]
    try:
        return _cluster_main(argv)
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM, SIGHUP: the cluster is already torn down
        print(f"throttle: interrupted ({str(e) or 'Ctrl-C'}); cluster torn down", file=sys.stderr)
        return 130
    except (ThrottleUnavailable, ValueError, RuntimeError) as e:
        print(f"throttle: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
