"""Measurements with provenance: encode/decode profiles, collective sweeps, T_comp, DDP iterations.

Commands (``python -m studykit COMMAND --help``): ``profile``, ``sweep`` (torchrun),
``tcomp``, ``ddp`` (torchrun); see :mod:`studykit.measure.cli`; and ``bench`` (compressor speed
against the memory floor, DDP hooks against PyTorch's; :mod:`studykit.measure.bench`). Every command
appends JSON Lines records, one per measurement, flushed as measured, and skips
configurations already in the output file (resume).

Record schema (``schema: 1``; also in ``data/measurements/README.md``):

* every record: ``kind`` (profile | copy_bw | sweep | tcomp | ddp), ``status``
  (ok | skipped | error) and ``reason``, ``config_id`` (resume key), ``model``,
  ``compressor``, ``params``, ``world_size``, ``batch_size``; the timing
  ``ms_median``, ``ms_mean``, ``ms_min``, ``ms_max``, ``n_iter`` (timed),
  ``n_warmup`` (discarded), ``times_ms`` (raw); and provenance ``device``,
  ``backend``, ``gpu`` (or the CPU name), ``driver``, ``cpu``, ``num_threads``,
  ``torch``, ``cuda``, ``nccl``, ``python``, ``host``, ``git_commit``,
  ``git_dirty``, ``timestamp`` (UTC), ``argv``.
* per kind: see :data:`studykit.measure.records.KIND_FIELDS` (e.g. profile:
  ``phase``, ``numel``, ``wire_bytes``, ``ratio``, ``floor_ms``, ``x_floor``;
  sweep: ``op``, ``size_bytes``, ``algbw_GBps``, ``busbw_GBps``; tcomp: ``phase``;
  ddp: ``mode``, ``bucket_mb``, ``wire_bytes_per_iter``).

Times are milliseconds; bandwidths GB/s = 1e9 bytes/s (nccl-tests' unit).
"""
import importlib

#: exported name -> its module, imported on first use (reading records needs no torch; timing does)
_EXPORTS = {"FIELDS": "records", "KIND_FIELDS": "records", "RecordWriter": "records", "load_records": "records",
            "provenance": "records", "PAPER_DISCARDED": "timing", "PAPER_ITERATIONS": "timing", "Timing": "timing",
            "time_fn": "timing"}

__all__ = ["time_fn", "Timing", "PAPER_ITERATIONS", "PAPER_DISCARDED", "RecordWriter", "load_records",
           "provenance", "FIELDS", "KIND_FIELDS"]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    if name in ("records", "timing"):  # the submodules importing this package used to import
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_EXPORTS})
