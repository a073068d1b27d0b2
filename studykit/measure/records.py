"""Measurement records: JSON Lines, one object per measurement, with provenance.

Records are appended and flushed (and fsync'ed) one line at a time as they are
measured, so an interrupted run loses nothing; a rerun with the same ``--out``
skips every configuration already in the file (its ``config_id``). A line cut
short by a crash is removed when the file is reopened, and skipped (with a
warning) when read. The schema is :data:`FIELDS` (documented again in
``data/measurements/README.md``; a test keeps the two in step).
"""
from __future__ import annotations

import functools
import gzip
import json
import math
import os
import platform
import socket
import subprocess
import sys
import warnings
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Optional

from studykit import paths

__all__ = ["SCHEMA_VERSION", "repair", "FIELDS", "KIND_FIELDS", "IDENTITY", "config_id", "provenance", "loadavg_1m", "make_record",
           "RecordWriter", "load_records", "done_ids", "LoadReport", "Records", "RecordError", "STATUSES", "TIME_FIELDS",
           "MAX_TIME_MS", "bad_time"]

SCHEMA_VERSION = 1

#: fields every record carries (null where they do not apply)
FIELDS: dict[str, str] = {
    "schema": "record schema version (1)",
    "kind": "what was measured: profile, copy_bw, sweep, tcomp, ddp",
    "status": "ok, skipped (not measurable here; see reason), error (raised; see reason)",
    "reason": "why a record is skipped or an error (null when ok)",
    "config_id": "identity of the configuration (JSON of the identifying fields); resume key",
    "model": "model name (studykit.models), null for collectives and copy_bw",
    "compressor": "compressor name (studykit.compressors), torch_* for PyTorch's built-in DDP hooks, null otherwise",
    "params": "compressor parameters in full, defaults included, seed left out (JSON object; {} without one)",
    "world_size": "number of processes (1 for single-device kinds)",
    "batch_size": "per-worker batch size (tcomp, ddp), null otherwise",
    "ms_median": "median of the timed iterations, ms (null unless status is ok)",
    "ms_mean": "mean of the timed iterations, ms (the paper's statistic)",
    "ms_min": "minimum, ms (the paper's lower error bar)",
    "ms_max": "maximum, ms (the paper's upper error bar)",
    "ms_q25": "first quartile of the timed iterations, ms (interquartile range ms_q25..ms_q75; null in older records)",
    "ms_q75": "third quartile of the timed iterations, ms (null in older records)",
    "n_iter": "timed iterations (paper: 50)",
    "n_warmup": "discarded warm-up iterations actually run (paper: 10)",
    "times_ms": "raw per-iteration times, ms (in a process group: max over ranks per iteration)",
    "device": "torch device the work ran on (cpu, cuda:0, ...)",
    "backend": "torch.distributed backend (nccl, gloo) or none for single-device kinds",
    "gpu": "GPU name, or the CPU's model name on CPU runs",
    "driver": "NVIDIA driver version (null on CPU)",
    "tf32_matmul": "torch.backends.cuda.matmul.allow_tf32 (GPU runs; null on CPU)",
    "tf32_cudnn": "torch.backends.cudnn.allow_tf32 (GPU runs; null on CPU)",
    "cpu": "CPU model name",
    "num_threads": "torch intra-op threads",
    "torch": "torch version",
    "cuda": "CUDA version torch was built with (null on CPU builds)",
    "nccl": "NCCL version (null without CUDA)",
    "python": "Python version",
    "host": "host name",
    "git_commit": "commit of the kit (env STUDYKIT_GIT_COMMIT, else git rev-parse HEAD; unknown without git)",
    "git_dirty": "true when the working tree had uncommitted changes (null if unknown)",
    "timestamp": "UTC time the record was written, ISO 8601",
    "argv": "the command line that produced the record",
    "network": "emulated network (JSON object from STUDYKIT_NETWORK, set by `python -m studykit throttle`: "
               "rate_gbps, mtu, workers, latency_ms, shaper, ...); null on real networks",
}

#: extra fields per kind
KIND_FIELDS: dict[str, dict[str, str]] = {
    "profile": {
        "phase": "reduce (compressor.reduce with world size 1: encode+decode incl. flatten), "
                 "encode (compress on the flat gradient), decode (decompress/combine); "
                 "encode/decode only for single-round codecs without error feedback; reduce_buckets (the protocol "
                 "bucket by bucket, as the DDP hook runs it); each with the suffix _host_ahead where host_ahead",
        "host_ahead": "true: the device time of each call with the host ahead of the GPU (a GPU busy-wait before "
                      "the start event, so the call's kernels run back to back, as inside an iteration; profile "
                      "--host-ahead); false: each call alone, launch gaps included",
        "sim_world_size": "workers whose payloads are decoded: reduce runs under a RecordingComm that "
                          "pretends this world size (all-gather codecs combine that many payloads; no communication)",
        "numel": "gradient elements (sum over the model's parameters)",
        "grad_bytes": "fp32 gradient bytes (4 * numel)",
        "wire_bytes": "bytes one worker puts into collectives per step at world size 2 (compressor.plan)",
        "ratio": "compression ratio against the fp32 all-reduce (compressor.ratio)",
        "allreduce_compatible": "whether the payloads are summed by all-reduce (else all-gather)",
        "floor_bytes": "bytes the codec must touch at least: read fp32 gradient + write output = 8 * numel",
        "copy_GBps": "device copy bandwidth measured in the same run (copy_bw record), GB/s (1e9 B/s, read+write)",
        "floor_ms": "memory-bandwidth floor: floor_bytes / copy bandwidth, ms",
        "x_floor": "ms_mean / floor_ms (how far above the memory floor)",
        "timer": "the clock of the timed calls (studykit.measure.bench.calls.time_call, the codec timer bench also "
                 "uses): cuda_events, cuda_events_host_ahead, cuda_events_host_sync (a call that waits for the GPU, "
                 "timed without the host ahead) or perf_counter; null in records written before this field existed",
        "host_ms": "mean host-clock ms of one call without synchronising (Python, dispatch, launches); null in "
                   "records written before this field existed",
        "picked": "bench: the fast path's choices this call made (studykit.compressors._fast.pick: "
                  "{\"name/size/...\": index of the candidate taken}); null when it made none (a choice made for an "
                  "earlier codec of the same sizes in the process is that record's) and in records written before "
                  "this field existed",
    },
    "copy_bw": {
        "size_bytes": "bytes of the copied tensor",
        "copy_GBps": "2 * size_bytes / ms_median (bytes read + written per second), GB/s",
    },
    "sweep": {
        "op": "all_reduce, all_gather, ps_gather (gather to rank 0, sum, broadcast), "
              "ps_reduce (reduce to rank 0, broadcast)",
        "size_bytes": "bytes each rank contributes (the swept message size)",
        "dtype": "element type of the message",
        "nccl_tests_bytes": "the size nccl-tests reports: size_bytes, or world_size * size_bytes for all_gather",
        "algbw_GBps": "nccl_tests_bytes / ms_mean, GB/s (1e9 B/s)",
        "bus_factor": "nccl-tests factor: 2(p-1)/p all_reduce, (p-1)/p all_gather, 1 for PS emulations",
        "busbw_GBps": "algbw_GBps * bus_factor, GB/s",
    },
    "tcomp": {
        "phase": "fwd_bwd (zero_grad excluded, forward + loss + backward), bwd (backward only: T_comp)",
        "seq_len": "sequence length for BERT, null otherwise",
        "param_shapes": "a model given by a spec (FILE.py:FUNC, torchvision:, transformers:): its parameter shapes "
                        "in parameters() order, so the records predict where the model cannot be built; null for "
                        "built-in names",
    },
    "ddp": {
        "mode": "syncsgd (plain DDP), hook (studykit.ddp.register, overlapped with backward), "
                "post (PostBackwardReducer after backward, one bucket), builtin (PyTorch DDP hook)",
        "bucket_mb": "DDP bucket_cap_mb (null: DDP's default, 25)",
        "seq_len": "sequence length for BERT, null otherwise",
        "wire_bytes_per_iter": "bytes this worker put into collectives per iteration (hook/post modes)",
        "optimizer": "optimizer of the timed step",
        "hook_overlap": "mode hook: true when the protocol ran on the hook's communication thread, overlapped "
                        "with the backward pass; false when it ran inside the hook (blocking); null in records "
                        "written before this field existed, whose hooks were blocking",
        "comm": "modes hook/post: ps when the compressor's protocol ran through one parameter server on rank 0 "
                "(studykit.comm.ParameterServerComm, `ddp --comm ps`); null: the backend's own collectives "
                "(TorchComm), as in every record written before this field existed",
        "switch_interval_ms": "Python's GIL switch interval (sys.getswitchinterval) the ranks ran with, ms; part of "
                              "the configuration only when set with `ddp --switch-interval-ms` (the default is "
                              "Python's, 5 ms; null in records written before this field existed)",
        "hook_coalesce_mb": "mode hook: the hook held buckets back until this many MB of them (0: the iteration's "
                            "last bucket) were ready and ran the protocol once over them (`ddp --hook-coalesce-mb`, "
                            "studykit.ddp.register's coalesce_mb); null: a protocol run per bucket, as in every "
                            "record written before this field existed",
        "hook_runner": "mode hook: how the overlapped hook ran a bucket's protocol (studykit.ddp.register's runner, "
                       "`ddp --hook-runner`): graph (each bucket's protocol captured as a CUDA graph and replayed from "
                       "DDP's callback) or inline (the whole protocol in DDP's callback: a runner measured once and "
                       "removed, slower than the thread); null: the communication thread, as in every record "
                       "written before this field existed. One-round codecs (fp16, bf16, none) skip the thread in "
                       "both runners' records before kit commit 9c341fc: an asynchronous all-reduce, decoded in its "
                       "callback; since then the graph runner captures them too",
        "broadcast_buffers": "modes syncsgd/builtin/hook: false when DDP ran without its buffer broadcast at every "
                             "forward (`ddp --no-broadcast-buffers`; an A/B that fits and scores leave out); null: "
                             "DDP's default (broadcast), as in every record written before this field existed",
        "gradient_as_bucket_view": "modes syncsgd/builtin/hook: true when DDP was built with "
                                   "gradient_as_bucket_view=True (`ddp --gradient-as-bucket-view`; an A/B that fits "
                                   "and scores leave out); null: DDP's default, as in every record written before "
                                   "this field existed",
        "picked": "the fast path's choices (studykit.compressors._fast.pick) rank 0's process had made by the end of "
                  "this configuration: which method each codec call, and so a captured hook, runs; null when none "
                  "and in records written before this field existed",
        "timed_with": "the configuration ids this one was built beside and timed with iteration by iteration "
                      "(`ddp --pair-hook-post iterations`: one compressor's post and hooks, a round of each per "
                      "timed iteration; studykit.measure.timing.time_interleaved); null when it was timed alone, as in every record written before this field existed",
    },
    "buckets": {  # `ddp --bucket-times` (syncSGD configurations): studykit.measure.ddp.measure_bucket_times
        "bucket_index": "DDP bucket indices, in communication order; every per-bucket list below follows it",
        "bucket_bytes": "bytes of each bucket's gradient buffer",
        "ready_ms": "per bucket, median ms from the call of loss.backward() to DDP handing the bucket to its comm "
                    "hook (all its gradients computed), on the device clock on GPUs (a CUDA event on the stream "
                    "that calls the hook), the host clock on CPU (clock); the last bucket's is the backward "
                    "pass's compute under overlap (verify --gamma-from buckets)",
        "ready_host_ms": "per bucket, the same moment on the host clock (time.perf_counter): when the host reaches "
                         "the bucket's hook (the host runs ahead of the kernels; the hook model's host chain)",
        "ready_fraction": "ready_ms over the last bucket's ready_ms (the bucket ready times as fractions of the "
                          "backward pass; null when the last is 0)",
        "backward_ms": "median host ms of loss.backward() with the device synchronized after it (the backward "
                       "pass and DDP's wait for its all-reduces)",
        "clock": "cuda_event (ready_ms on the device clock) or perf_counter (host clock, CPU runs)",
    },
    "hook_times": {  # `ddp --hook-times`: studykit.measure.hook_times.measure_hook_times
        "mode": "hook (the ddp record's identity: mode, bucket_mb, seq_len, optimizer, hook_overlap, comm, "
                "switch_interval_ms, as in that record)",
        "bucket_mb": "as in the ddp record (null: DDP's default bucket, 25 MB)",
        "seq_len": "as in the ddp record",
        "optimizer": "as in the ddp record",
        "hook_overlap": "as in the ddp record: true overlapped (communication thread), false blocking",
        "comm": "as in the ddp record: ps (parameter server) or null (the backend's collectives)",
        "switch_interval_ms": "as in the ddp record",
        "hook_coalesce_mb": "as in the ddp record: always null (hooks that coalesce buckets are not stamped)",
        "hook_runner": "as in the ddp record",
        "broadcast_buffers": "as in the ddp record: always null (hooks without DDP's buffer broadcast are not stamped)",
        "gradient_as_bucket_view": "as in the ddp record: always null (hooks on bucket views are not stamped)",
        "bucket_index": "DDP bucket indices, in communication order; every per-bucket list below follows it",
        "bucket_bytes": "bytes of each bucket's gradient buffer",
        "ready_ms": "per bucket, median ms from the start of loss.backward() to DDP calling the hook (all the "
                    "bucket's gradients computed), on the stream that calls it",
        "encode_end_ms": "per bucket, median ms from the start of the backward pass to its first collective being "
                         "issued (encode done), on the issuing stream; null where no collective was stamped",
        "comm_ms": "per bucket, median of the sum of its collectives' durations, ms, each bracketed on the stream "
                   "that issues it (an async all-reduce: until its future's callback); null where none was stamped",
        "decode_end_ms": "per bucket, median ms from the start of the backward pass to the hook's future being done "
                         "(decode finished; stamped in a callback on that future)",
        "n_collectives": "per bucket, collectives stamped per iteration (median)",
        "ready_host_ms": "per bucket, median ms on the host clock (time.perf_counter, from just before "
                         "loss.backward()) to the host calling the hook",
        "issue_host_ms": "per bucket, median host-clock ms to the bucket's first collective being issued (the host "
                         "has encoded it); null where no collective was stamped",
        "done_host_ms": "per bucket, median host-clock ms to the hook's future being completed (the hook's host work "
                        "for the bucket done; stamped in the same callback as decode_end_ms)",
        "backward_end_ms": "median ms from the start of the backward pass to the autograd engine having run every "
                           "node (compute and the hook's inline work), before DDP waits for the buckets' futures",
        "sync_end_ms": "median ms from the start of the backward pass to loss.backward() returning (DDP has waited "
                       "for every bucket and copied the averages into the gradients)",
        "iteration_ms": "median ms of a whole stamped iteration (zero_grad, forward, backward, step; with the "
                        "stamps' overhead: the ddp record's ms_* are the unstamped times); also ms_median",
        "stamps_ms": "every stamped iteration's own stamps (JSON object: ready_ms, encode_end_ms, comm_ms, "
                     "decode_end_ms, ready_host_ms, issue_host_ms, done_host_ms as lists per iteration of per-bucket "
                     "lists; backward_end_ms, sync_end_ms per iteration), rank 0's",
        "clock": "cuda_event (device time: CUDA events against one recorded on the main stream at the start of "
                 "the backward pass) or perf_counter (host time, CPU runs)",
    },
}

#: fields that identify a configuration (-> config_id); everything else is a result or provenance
IDENTITY = ("kind", "model", "compressor", "params", "world_size", "sim_world_size", "batch_size", "phase", "op",
            "size_bytes", "dtype", "mode", "bucket_mb", "seq_len", "backend", "device_type", "hook_overlap", "repeat",
            "comm", "switch_interval_ms", "hook_coalesce_mb", "timer", "broadcast_buffers", "hook_runner",
            "gradient_as_bucket_view")


def config_id(**fields) -> str:
    """The resume key: compact sorted JSON of the identifying fields given."""
    unknown = set(fields) - set(IDENTITY)
    if unknown:
        raise ValueError(f"config_id: {sorted(unknown)} are not identifying fields; valid: {list(IDENTITY)}")
    ident = {k: v for k, v in fields.items() if v is not None}
    net = _network()
    if net is not None:  # the same configuration at another emulated rate is another configuration
        ident["network"] = {k: net.get(k) for k in ("rate_gbps", "latency_ms", "workers", "mtu")}
    return json.dumps(ident, sort_keys=True,
                      separators=(",", ":"), default=str)


def make_record(kind: str, cid: str, *, device, backend: str = "none", world_size: int = 1,
                timing=None, status: str = "ok", reason: Optional[str] = None, **fields) -> dict:
    """A record: provenance of ``device`` + identity/result ``fields`` + the timing statistics."""
    rec = provenance(device)
    rec.update(kind=kind, config_id=cid, status=status, reason=reason, device=str(device),
               backend=backend, world_size=world_size)
    rec.update(fields)
    if timing is not None:
        rec.update(timing.as_dict())
    return rec


def _run(cmd: list[str], cwd=None) -> Optional[str]:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def nvidia_driver() -> Optional[str]:
    """The NVIDIA driver version, or None without nvidia-smi."""
    drv = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return drv.splitlines()[0].strip() if drv else None


@functools.lru_cache(maxsize=None)
def _static_provenance(device_str: str) -> dict:
    import torch  # here, not at the top: reading records needs no torch

    device = torch.device(device_str)
    cpu = cpu_name()
    prov = {"gpu": cpu, "driver": None, "cpu": cpu, "torch": torch.__version__,
            "cuda": torch.version.cuda, "nccl": None, "python": platform.python_version(),
            "host": socket.gethostname()}
    if torch.cuda.is_available():
        try:
            prov["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:  # noqa: BLE001 - provenance must never stop a run
            pass
    if device.type == "cuda":
        try:
            prov["gpu"] = torch.cuda.get_device_name(device)
        except Exception:  # noqa: BLE001
            prov["gpu"] = "unknown cuda device"
        prov["driver"] = nvidia_driver()
        prov["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
        prov["tf32_cudnn"] = bool(torch.backends.cudnn.allow_tf32)
    return prov


def _commit() -> tuple[str, bool | None]:
    """(git_commit, git_dirty): env ``STUDYKIT_GIT_COMMIT`` (a checkout without ``.git``, e.g. a copy on a
    lent GPU machine), else ``git rev-parse HEAD`` of the kit, else ``unknown``; read on every call."""
    env = os.environ.get("STUDYKIT_GIT_COMMIT")
    if env:
        return env, None
    return _git_commit()


@functools.cache
def _git_commit() -> tuple[str, bool | None]:
    commit = _run(["git", "rev-parse", "HEAD"], cwd=paths.ROOT)
    status = _run(["git", "status", "--porcelain"], cwd=paths.ROOT) if commit else None
    return commit or "unknown", None if status is None else bool(status)


def provenance(device="cpu", /, **extra) -> dict:
    """Where and with what a record was made (docs/STYLE.md item 5): the one provenance builder of the kit,
    for measurement records, training records and the notebook runner's summary. Hardware (``gpu``,
    ``driver``, ``cpu``), versions (``torch``, ``cuda``, ``nccl``, ``python``), ``host``, ``git_commit``,
    ``git_dirty``, ``num_threads``, ``timestamp`` (now, UTC, ISO 8601), ``argv``, ``network``, plus
    ``extra`` (a caller's own keys: backend, world size, ...)."""
    import torch

    prov = dict(_static_provenance(str(torch.device(device))))
    prov["git_commit"], prov["git_dirty"] = _commit()
    prov["num_threads"] = torch.get_num_threads()
    prov["timestamp"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    prov["argv"] = " ".join(sys.argv)
    prov["network"] = _network()
    prov.update(extra)
    return prov


def loadavg_1m() -> Optional[float]:
    """The machine's one-minute load average (a busy shared machine explains noisy timings), or None."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _network() -> Optional[dict]:
    """The emulated network this process runs in (``STUDYKIT_NETWORK``), or None."""
    raw = os.environ.get("STUDYKIT_NETWORK")
    if not raw:
        return None
    try:
        net = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"STUDYKIT_NETWORK is not valid JSON ({exc}): {raw[:80]!r}") from None
    if not isinstance(net, dict):
        raise ValueError(f"STUDYKIT_NETWORK must be a JSON object, got {raw[:80]!r}")
    return net


def _clean(x):
    """JSON-safe: NaN/inf -> null, tuples -> lists, torch/numpy scalars -> Python."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    if hasattr(x, "item"):
        return _clean(x.item())
    return str(x)


class RecordWriter:
    """Appends records to a JSON Lines file, one flushed line per record.

    ``enabled=False`` (ranks other than 0) makes it a no-op that still reports
    what is done. Lines are written with a single ``write`` of the whole line.
    """

    def __init__(self, path: Path | str, enabled: bool = True, repair: bool = True, retry_errors: bool = False):
        self.path = Path(path)
        self.enabled = enabled
        self.retry_errors = retry_errors
        self.written = 0
        if enabled:
            if self.path.exists() and not self.path.is_file():  # /dev/stdout, a FIFO, a folder: reading hangs
                raise RecordError(f"record file {self.path} exists and is not a regular file; records are "
                                  "appended and read back to resume, so give a path to a .jsonl file")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if repair:
                _repair(self.path)

    def done(self) -> set[str]:
        """config_ids already in the file (see :func:`done_ids`)."""
        return done_ids(self.path, self.retry_errors)

    def write(self, record: dict) -> dict:
        missing = [k for k in ("kind", "config_id", "status") if k not in record]
        if missing:
            raise ValueError(f"record lacks {missing}: {record}")
        rec = {k: None for k in FIELDS}
        rec.update({k: None for k in KIND_FIELDS.get(record["kind"], {})})  # same keys in every record of a kind
        rec.update({"schema": SCHEMA_VERSION, "params": {}, "reason": None})
        rec.update(record)
        line = json.dumps(_clean(rec), allow_nan=False, separators=(",", ":"))
        if self.enabled:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())
            self.written += 1
        return rec


def repair(path: Path | str) -> None:
    """Make appends to ``path`` start on a fresh line after a run killed mid-write (what :class:`RecordWriter`
    does when it opens a file): a cut last line is removed with a warning, a whole one gets its newline."""
    _repair(Path(path))


def _repair(path: Path) -> None:
    """Make appends start on a fresh line after a run killed mid-write.

    A last line without its newline is kept (the newline appended) when it parses as a
    JSON object: only a line cut short, which does not parse, is dropped.
    """
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return
        f.seek(0)
        data = f.read()
        cut = data.rfind(b"\n") + 1
        try:
            whole = isinstance(json.loads(data[cut:].decode("utf-8")), dict)
        except (UnicodeDecodeError, json.JSONDecodeError):
            whole = False
        if whole:  # a complete record that only lacks its newline (written by hand or another tool)
            f.seek(0, os.SEEK_END)
            f.write(b"\n")
            return
        f.truncate(cut)
    warnings.warn(f"{path}: removed a partial last line ({len(data) - cut} bytes) left by an interrupted run")


class RecordError(ValueError):
    """Records that must not be read as they are (missing source, unknown schema or status); names file and line."""


#: the values of a record's ``status`` (lower case; :data:`FIELDS`)
STATUSES = ("ok", "skipped", "error")
#: a record's timing statistics and samples (ms), checked when read (:func:`bad_time`)
TIME_FIELDS = ("ms_median", "ms_mean", "ms_min", "ms_max", "ms_q25", "ms_q75", "times_ms")
#: the longest time a record may hold, ms (about 2.8 hours for one timed iteration: beyond it a value is damaged
#: or hand-edited, and would swamp a fit's least squares and bootstrap)
MAX_TIME_MS = 1e7


def bad_time(rec: dict) -> Optional[str]:
    """What is wrong with ``rec``'s times (:data:`TIME_FIELDS`), e.g. ``"ms_median is 1e+308"``; None when each is
    null or a finite number of ms in ``[0, MAX_TIME_MS]`` (``times_ms`` a list of such, nulls allowed: the
    writer stores a NaN sample as null)."""
    def bad(x) -> bool:
        return isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= MAX_TIME_MS  # NaN fails too

    for key in TIME_FIELDS:
        value = rec.get(key)
        if value is None:
            continue
        if key == "times_ms":
            if not isinstance(value, list):
                return f"times_ms is {value!r} (not a list)"
            for j, x in enumerate(value):
                if x is not None and bad(x):
                    return f"times_ms[{j}] is {x!r}"
        elif bad(value):
            return f"{key} is {value!r}"
    return None


#: the most bytes a ``*.jsonl.gz`` record file may decompress to (far above any real one; stops a gzip bomb)
MAX_GZIP_BYTES = 1 << 30


def _lines(f: Path) -> Iterable[tuple[int, str]]:
    """``(line number, text)`` of a JSON Lines file, streamed; ``*.gz`` decompressed on the fly up to
    :data:`MAX_GZIP_BYTES`. Only ``\n`` ends a line (not ``\r``, ``\x85``, ``\u2028``); invalid UTF-8 is
    replaced (the line then fails to parse and is skipped as damaged). A file that cannot be read, or a gzip
    stream that is damaged or too large, raises :class:`RecordError` naming it."""
    gz = f.name.endswith(".gz")
    cap = MAX_GZIP_BYTES
    total = 0
    try:
        with (gzip.open(f, "rb") if gz else open(f, "rb")) as fh:
            i = 0
            while True:
                line = fh.readline(cap + 1 - total) if gz else fh.readline()
                if not line:
                    return
                total += len(line)
                if gz and total > cap:
                    raise RecordError(f"{f}: decompresses to more than {cap} bytes (records.MAX_GZIP_BYTES); "
                                      "a gzip bomb or not a record file")
                i += 1
                yield i, line.rstrip(b"\n").decode("utf-8", errors="replace")
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise RecordError(f"{f}: cannot be read ({type(exc).__name__}: {exc})") from None


#: kinds whose records predate the ``schema`` field and are read as schema 1 without one
UNVERSIONED_KINDS = ("train_epoch",)


@dataclass
class LoadReport:
    """What :func:`load_records` read, skipped and merged (also ``records.report``)."""

    files: list[str] = field(default_factory=list)
    records: int = 0
    #: ``(file, line, why)`` for each line skipped as damaged (unparsable, not an object, a time out of range)
    damaged: list[tuple[str, int, str]] = field(default_factory=list)
    #: ``(file, line, first_file, first_line)`` for each record dropped as a duplicate of an earlier one
    duplicates: list[tuple[str, int, str, int]] = field(default_factory=list)
    #: error/skipped records replaced by a later record of the same configuration (``--retry-errors``)
    superseded: int = 0
    #: records without a ``schema`` field, read as schema 1 (a warning unless of :data:`UNVERSIONED_KINDS`)
    unversioned: int = 0

    @property
    def n_damaged(self) -> int:
        return len(self.damaged)

    @property
    def n_duplicates(self) -> int:
        return len(self.duplicates)

    def summary(self) -> str:
        return (f"{self.records} records from {len(self.files)} file(s); {self.n_damaged} damaged line(s) skipped, "
                f"{self.n_duplicates} duplicate(s) dropped, {self.superseded} superseded")


class Records(list):
    """A list of records with the :class:`LoadReport` of how they were read (``.report``)."""

    report: LoadReport


def _files(sources, missing_ok: bool) -> list[Path]:
    files: list[Path] = []
    for s in sources:
        items = [s] if isinstance(s, (str, Path)) else list(s)
        for x in items:
            p = Path(x)
            if p.is_dir():
                files += sorted([*p.rglob("*.jsonl"), *p.rglob("*.jsonl.gz")])
            elif p.is_file():
                files.append(p)
            elif p.exists():
                raise RecordError(f"{p} is not a regular file or folder of *.jsonl records")
            elif not missing_ok:
                raise RecordError(f"no records at {p}: no such file or folder")
    return files


def _identity(rec: dict) -> Optional[tuple]:
    """The duplicate key: config_id plus the network and machine, or a training epoch's run and epoch."""
    if rec.get("config_id") is not None:
        net = rec.get("network")
        return ("cid", str(rec["config_id"]), json.dumps(net, sort_keys=True, default=str),
                rec.get("gpu"), rec.get("host"))
    if rec.get("run_id") is not None and rec.get("epoch") is not None:
        return ("run", str(rec["run_id"]), rec.get("method"), rec.get("epoch"))
    return None


def load_records(*sources: Path | str | Iterable, kind: Optional[str] = None, report: Optional[LoadReport] = None,
                 dedupe: bool = True, missing_ok: bool = False, quiet: bool = False) -> Records:
    """Records from JSONL files or folders (searched recursively for ``*.jsonl``, and ``*.jsonl.gz``, read
    gzip-compressed): THE record reader.

    One policy for every reader of the kit:

    * a damaged line (unparsable, e.g. cut by a crash; or not a JSON object) is skipped with a
      warning naming file and line, and counted (``report.damaged``);
    * every record is checked for its ``schema``: another version than :data:`SCHEMA_VERSION`
      raises :class:`RecordError` (a file in other units must not be fitted as ms); records without
      one are read as schema 1 with a warning per file (counted in ``report.unversioned``), except
      training epochs (:data:`UNVERSIONED_KINDS`), which predate the field;
    * a ``status`` other than those of :data:`STATUSES` (exactly, as every field is read: ``OK`` is not
      ``ok``) raises :class:`RecordError`;
    * a record whose time is not a finite number of ms in ``[0, MAX_TIME_MS]`` (:func:`bad_time`: 1e308,
      Infinity, a negative or a text one) is damaged: skipped with a warning naming file, line and field,
      and counted in ``report.damaged``;
    * duplicates (same ``config_id``, network and machine, e.g. two runs into one ``--out``) are
      kept once and reported; an ``error``/``skipped`` record followed by a record of the same
      configuration (``--retry-errors``) is replaced by it. ``dedupe=False`` keeps every line.

    A missing source raises :class:`RecordError` unless ``missing_ok``. The result is a list with
    ``.report`` (a :class:`LoadReport`; pass ``report=`` to fill one of your own).
    """
    rep = report if report is not None else LoadReport()
    out = Records()
    seen: dict[tuple, int] = {}  # identity -> index in out
    where: dict[int, tuple[str, int]] = {}
    unversioned: dict[str, list[int]] = {}
    for f in _files(sources, missing_ok):
        rep.files.append(str(f))
        for i, line in _lines(f):  # *.gz: a large file committed compressed (e.g. a profile of many kernels)
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                rep.damaged.append((str(f), i, "unparsable (interrupted write?)"))
                if not quiet:
                    warnings.warn(f"{f}:{i}: skipping an unparsable line (interrupted write?)")
                continue
            if not isinstance(rec, dict):
                rep.damaged.append((str(f), i, f"a JSON {type(rec).__name__}, not a record"))
                if not quiet:
                    warnings.warn(f"{f}:{i}: skipping a line that is a JSON {type(rec).__name__}, not a record")
                continue
            schema = rec.get("schema")
            if schema is None:
                rep.unversioned += 1
                if rec.get("kind") not in UNVERSIONED_KINDS:
                    unversioned.setdefault(str(f), []).append(i)
            elif schema != SCHEMA_VERSION or isinstance(schema, bool):
                raise RecordError(f"{f}:{i}: record schema {schema!r} is not the schema {SCHEMA_VERSION} this kit "
                                  "reads (its units or fields may differ); convert the file or use the kit "
                                  "version that wrote it")
            status = rec.get("status")
            if status is not None and (not isinstance(status, str) or status not in STATUSES):
                raise RecordError(f"{f}:{i}: status {status!r} is not one of {', '.join(STATUSES)} (lower case)")
            if kind is not None and rec.get("kind") != kind:
                continue
            why = bad_time(rec)
            if why is not None:
                rep.damaged.append((str(f), i, why))
                if not quiet:
                    warnings.warn(f"{f}:{i}: skipping a record whose {why}: a time must be a finite number of ms in "
                                  f"[0, {MAX_TIME_MS:g}] (or null)")
                continue
            rec.setdefault("source", str(f))
            ident = _identity(rec) if dedupe else None
            if ident is not None and ident in seen:
                j = seen[ident]
                if out[j].get("status", "ok") != "ok" and (rec.get("status", "ok") == "ok"
                                                           or out[j].get("status") == rec.get("status")):
                    out[j] = rec  # a retried configuration replaces its error record
                    where[j] = (str(f), i)
                    rep.superseded += 1
                else:
                    rep.duplicates.append((str(f), i, *where[j]))
                continue
            if ident is not None:
                seen[ident] = len(out)
            where[len(out)] = (str(f), i)
            out.append(rec)
    for f, lines in unversioned.items():
        if not quiet:
            warnings.warn(f"{f}:{lines[0]}: {len(lines)} record(s) without a 'schema' field, read as schema "
                          f"{SCHEMA_VERSION} (times in ms); records written by RecordWriter carry it")
    if rep.duplicates and not quiet:
        f0, i0, f1, i1 = rep.duplicates[0]
        warnings.warn(f"{len(rep.duplicates)} duplicate record(s) dropped (same configuration, network and "
                      f"machine read twice, e.g. two runs into one --out); first: {f0}:{i0} repeats {f1}:{i1}")
    rep.records += len(out)
    out.report = rep
    return out


def done_ids(path: Path | str, retry_errors: bool = False) -> set[str]:
    """config_ids present in ``path``: every status counts, ``error`` too unless ``retry_errors``."""
    return {r["config_id"] for r in load_records(path, dedupe=False, missing_ok=True, quiet=True)
            if "config_id" in r and not (retry_errors and r.get("status") == "error")}
