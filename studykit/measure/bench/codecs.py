"""The codec part of ``bench``: every codec's encode+decode (and its phases) on a model's gradient,
timed by a :class:`~studykit.measure.bench.calls.RepPolicy` beside the memory floor measured in the same run,
written as records as each is timed (:func:`run_codecs`), with building blocks timed alike (``_components``),
and the device kernels of each call counted after all timings (:func:`count_kernels`, :func:`attach_kernels`)."""
from __future__ import annotations

import math
import sys
from typing import Callable, Iterable, Sequence

import torch

from studykit import compressors as C
from studykit import models as M
from studykit.comm import LocalComm
from studykit.compressors import _fast, fastpath
from studykit.ddp.hook import replay_fingerprint
from studykit.measure.bench.calls import RepPolicy, _fast_paths, _kernels, time_call
from studykit.measure.profile import (_plan, _timed_call, effective_params, measure_copy_bandwidth,
                                      measured_copy_gbps, memory_floor_ms, single_round)
from studykit.measure.records import RecordWriter, config_id, loadavg_1m, make_record, provenance
from studykit.measure.runtime import CompressorSpec, note

#: the benchmark's codec groups; the targets judge the first two
ELEMENTWISE, TOPK_FAMILY, LOW_RANK = (C.in_group(g) for g in ("elementwise", "topk", "lowrank"))  # class metadata
#: bytes of the copy whose bandwidth sets the memory floor (:func:`run_codecs`): [on CPU, on CUDA]
FLOOR_COPY_BYTES = (64 * 2**20, 256 * 2**20)
#: codec phases (``python -m studykit bench --help`` says what each times); --phases picks some
PHASES = ("encdec", "encode", "decode", "default")
#: raw per-repetition times kept in a record up to this many (a 0.05 ms codec runs 20,000 repetitions
#: in its second; their statistics are in the record, the list itself would be 400 kB a line)
RAW_TIMES_MAX = 1000


def _group(name: str) -> str:
    return C.metadata(name).bench_group if name in C.available() else "dense"


def _codec_plan(specs: Sequence[CompressorSpec], split: bool,
                phases: Sequence[str] = PHASES) -> list[tuple[CompressorSpec, str, str]]:
    """(spec, phase, layout) to time, in order (only ``phases``; encode/decode only with ``split``)."""
    bad = sorted(set(phases) - set(PHASES))
    if bad:
        raise ValueError(f"phases {bad} are not bench phases; valid: {', '.join(PHASES)}")
    out = []
    for spec in specs:
        layout = "per_tensor" if spec.name in LOW_RANK else "flat"
        plain = C.get(spec.name, allow_nonfinite=True, **_no_ef(spec))
        if "encdec" in phases:
            out.append((spec, "encdec", layout))
        if split and layout == "flat" and single_round(plain):
            out += [(spec, ph, layout) for ph in ("encode", "decode") if ph in phases]
        if "default" in phases and C.get(spec.name, allow_nonfinite=True, **spec.kwargs).error_feedback:
            out.append((spec, "default", layout))
    return out


def _no_ef(spec: CompressorSpec) -> dict:
    """The spec's parameters with error feedback off (a generic parameter of every compressor)."""
    return dict(spec.kwargs, error_feedback=False)


#: codecs with a fused-kernel path (the others run the same code with --reference): read from the overrides
FAST_CODECS = fastpath.accelerated()


def codec_inputs(shapes: Sequence[tuple], device) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The gradient every codec is timed on: ``(flat, per_tensor)``, one fp32 vector of the shapes' elements
    (seeded normal values) and the same values as separate tensors of ``shapes`` (the low-rank codecs' layout)."""
    numel = sum(math.prod(s) for s in shapes)
    gen = torch.Generator(device=device).manual_seed(0)
    flat = torch.randn(numel, generator=gen, device=device)
    per_tensor = list(flat.split([math.prod(s) for s in shapes]))
    return flat, [p.view(s).clone() for p, s in zip(per_tensor, shapes)]  # separate tensors, like real grads


def encdec_call(spec: CompressorSpec, flat: torch.Tensor, per_tensor: list[torch.Tensor]):
    """``(compressor, layout, fn)``: the call the ``encdec`` phase times, ``compressor.reduce`` of the flat
    gradient (of ``per_tensor`` for the low-rank codecs) at world size 1, error feedback off."""
    layout = "per_tensor" if spec.name in LOW_RANK else "flat"
    comp = C.get(spec.name, allow_nonfinite=True, **_no_ef(spec))
    return comp, layout, _reduce_call(comp, [flat] if layout == "flat" else per_tensor)


def _reduce_call(comp, grads: list[torch.Tensor]) -> Callable[[], object]:
    """One ``comp.reduce`` of ``grads`` at world size 1 (a :class:`LocalComm` of its own), as timed and profiled."""
    comm = LocalComm()
    return lambda: comp.reduce(grads, comm, key=0)

def run_codecs(specs: Sequence[CompressorSpec], writer: RecordWriter, *, device: torch.device,
               model: str = "resnet50", policy: RepPolicy | None = None,
               reference: bool = False, split: bool = True, extras: bool = True, phases: Sequence[str] = PHASES,
               copy_bytes: int | None = None, repeat: int | None = None, kernels: bool | None = None,
               deferred: list | None = None, verbose: bool = True) -> int:
    """Time every codec of ``specs`` on ``model``'s flat gradient (low-rank ones on its real
    shapes) beside the memory floor, each by ``policy`` (:class:`RepPolicy`); returns records
    written. Resumes: configurations whose ``config_id`` is in ``writer``'s file are skipped.
    ``repeat`` (1, 2, ...) tags a repeated run of the same configurations in one file (part of
    the ``config_id``; ``benchmarks/codec_repeat.py``). ``kernels``: count each codec's device
    kernels with the profiler after all timings (default: on CUDA only). ``deferred``: a list that
    collects the calls to count instead, for :func:`count_kernels` after *every* timing of a caller
    that calls this function more than once (the profiler slows every later launch: see below)."""
    device = torch.device(device)
    policy = policy if policy is not None else RepPolicy()
    timing_kw = policy.timing_kw(device)
    done = writer.done()
    written = 0
    dev_type = device.type
    want_counts = dev_type == "cuda" if kernels is None else kernels
    if provenance(device)["git_commit"] == "unknown":
        print("bench: WARNING the kit's commit is unknown (no .git here): records will say git_commit 'unknown'; "
              "set STUDYKIT_GIT_COMMIT=<sha> to stamp them", file=sys.stderr, flush=True)

    copy_bytes = copy_bytes or FLOOR_COPY_BYTES[dev_type == "cuda"]
    if policy.host_ahead and dev_type != "cuda":
        raise ValueError(f"host-ahead timing needs a CUDA device, got {device} (drop --host-ahead on a CPU)")
    if policy.graph and dev_type != "cuda":
        raise ValueError(f"graph timing needs a CUDA device (CUDA graphs), got {device} (drop --graph on a CPU)")
    # in the config_id: another timing, another config
    ahead = policy.timer(device) if policy.host_ahead or policy.graph else None
    copy_cid = config_id(kind="copy_bw", size_bytes=copy_bytes, device_type=dev_type, repeat=repeat, timer=ahead)
    copy_gbps = measured_copy_gbps(writer, copy_cid) if copy_cid in done else None
    if copy_gbps is None:
        t, copy_gbps = measure_copy_bandwidth(device, copy_bytes, **timing_kw)
        copy_rec = make_record("copy_bw", copy_cid, device=device, timing=t, size_bytes=copy_bytes,
                               copy_GBps=copy_gbps, repeat=repeat, reps_capped=policy.capped(t), **policy.fields(device))
        if t.n_iter > RAW_TIMES_MAX:
            copy_rec["times_ms"] = None
        writer.write(copy_rec)
        written += 1
    shapes = [tuple(s) for s in M.param_shapes(model)]
    numel = sum(math.prod(s) for s in shapes)
    floor_ms = memory_floor_ms(numel, copy_gbps)
    note(f"bench: copy bandwidth {copy_gbps:.0f} GB/s -> floor for {model} ({numel} fp32) {floor_ms:.4f} ms; "
         f"fused kernels {'available' if _fast.HAVE_TRITON and dev_type == 'cuda' else 'not available'}; "
         f">= {policy.min_reps} reps and >= {policy.min_time_s:g} s per codec (budget {policy.budget_s} s), "
         f"flush {policy.flush_for(device) / 2**20:g} MiB before each", verbose)

    flat, per_tensor = codec_inputs(shapes, device)

    variants = [True, False] if reference else [True]
    pending: list = []  # (record, fast, function): kernels are counted after all timings
    base = dict(model=model, numel=numel, grad_bytes=4 * numel, floor_bytes=8 * numel, copy_GBps=copy_gbps,
                floor_ms=floor_ms, sim_world_size=1, repeat=repeat, **policy.fields(device))
    for fast in variants:
        for spec, phase, layout in _codec_plan(specs, split, phases):
            if not fast and (spec.name not in FAST_CODECS or phase in ("encode", "decode")):
                continue  # nothing to compare: no fused path
            kwargs = spec.kwargs if phase == "default" else _no_ef(spec)
            comp = C.get(spec.name, allow_nonfinite=True, **kwargs)
            params = effective_params(comp)
            mode = f"{layout}:{'fast' if fast else 'reference'}"
            cid = config_id(kind="bench", model=model, compressor=spec.name, params=params, phase=phase,
                            mode=mode, device_type=dev_type, repeat=repeat, timer=ahead)
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
                        fn = _reduce_call(comp, grads)
                    else:
                        fn = _timed_call(comp, phase, grads, 1)
                    # settles first: kernel compilation, one-time choices; with --graph, replays of its capture
                    before = set(_fast._PICKED)
                    ct = time_call(fn, device, policy, fingerprint=lambda: replay_fingerprint(comp, 0))
                rec = _bench_record(cid, device=device, timing=ct.timing, policy=policy, host_ms=ct.host_ms,
                                    kernels=None, picked=_fast.picks_since(before), **dict(fields, timer=ct.timer))
            except Exception as exc:  # noqa: BLE001 - one codec failing must not stop the run
                if dev_type == "cuda":
                    torch.cuda.empty_cache()
                rec = make_record("bench", cid, device=device, status="error",
                                  reason=f"{type(exc).__name__}: {exc}"[:500], **fields)
            writer.write(rec)  # streamed: a run cut by a deadline keeps every codec it timed
            written += 1
            if rec["status"] == "ok" and want_counts:
                pending.append((rec, fast, fn))
            fn = None
            if dev_type == "cuda":  # every codec starts from the same allocator state, not the last one's leftovers
                torch.cuda.empty_cache()
            if rec["status"] == "ok":
                note(f"{spec.name:>13} {phase:<8} {mode:<21} {_stats(rec)}  x{rec['x_floor']:6.1f} floor"
                     f"  host {rec['host_ms']:.3f} ms", verbose)
            else:
                note(f"{spec.name:>13} {phase:<8} {mode:<21} ERROR {rec['reason'][:100]}", verbose)
    comps = _components(flat, device, base, policy, done, writer, verbose) if extras else []
    written += len(comps)
    # The profiler goes last: once CUPTI is attached, every later launch costs more host time,
    # which would inflate the timings of launch-bound codecs measured after it (PyTorch does not
    # detach CUPTI when a profile ends: https://github.com/pytorch/pytorch/issues/144455; a timing
    # pass after a profiled one runs launch-bound codecs such as PowerSGD markedly slower).
    # Its counts are records of their own (kind "kernels"),
    # attached to the timings by attach_kernels.
    todo = pending + (comps if want_counts else [])
    if deferred is not None:
        deferred.extend((item, device) for item in todo)
        return written
    return written + count_kernels([(item, device) for item in todo], writer)


def count_kernels(items: Sequence, writer: RecordWriter) -> int:
    """Write one ``kernels`` record per ``((record, fast, fn), device)`` of ``items`` (the calls
    :func:`run_codecs` timed, or collected in its ``deferred``): the device kernels one call of
    ``fn`` launches, counted with the profiler. Call it after every timing: see :func:`run_codecs`."""
    written = 0
    for (rec, fast, fn), device in items:
        with _fast_paths(fast):
            n = _kernels(fn, device)
        ident = {k: rec.get(k) for k in ("model", "compressor", "params", "phase", "mode", "repeat")}
        writer.write(make_record("kernels", config_id(kind="kernels", device_type=torch.device(device).type, **ident),
                                 device=device, kernels=n, of_config=rec["config_id"], **ident))
        written += 1
    return written


def attach_kernels(records: Iterable[dict]) -> list[dict]:
    """The records with each bench record's ``kernels`` filled from the ``kernels`` record of its
    configuration (``of_config``; the profiler runs after all timings, so the counts come last)."""
    records = list(records)
    counts = {r.get("of_config"): r.get("kernels") for r in records if r.get("kind") == "kernels"}
    out = []
    for r in records:
        if r.get("kind") == "bench" and r.get("kernels") is None and r.get("config_id") in counts:
            r = dict(r, kernels=counts[r["config_id"]])
        out.append(r)
    return out


def _bench_record(cid: str, *, device, timing, policy: RepPolicy, **fields) -> dict:
    """A bench record: ``timing``'s statistics, the policy and whether it was met, ``x_floor``; the
    raw times only up to :data:`RAW_TIMES_MAX` repetitions (``times_ms`` null beyond)."""
    rec = make_record("bench", cid, device=device, timing=timing, x_floor=timing.ms_median / fields["floor_ms"],
                      reps_capped=policy.capped(timing), loadavg_1m=loadavg_1m(), **fields)
    if timing.n_iter > RAW_TIMES_MAX:
        rec["times_ms"] = None
    return rec


def _stats(rec: dict) -> str:
    """``median ms [q25-q75] n=N`` of a record (the IQR where the record has one)."""
    iqr = f" [{rec['ms_q25']:.4f}-{rec['ms_q75']:.4f}]" if rec.get("ms_q25") is not None else ""
    return f"{rec['ms_median']:8.4f} ms{iqr} n={rec['n_iter']}"


def _components(flat, device, base, policy, done, writer, verbose) -> list:
    """Building blocks behind the explanations: torch.topk alone, one MSTopK counting pass,
    a plain elementwise pass (x * 2), max |g| (one read, reduced) and an empty launch; written as timed, returns
    (record, True, function) for the kernel counts."""
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
        # quantize's and TernGrad's round 1 (their fast path's _fast.abs_max): one read of g, reduced
        "max |g|, torch.linalg.vector_norm(g, inf)": lambda: torch.linalg.vector_norm(flat, float("inf")),
        "fused-kernel radix select top-k (1%)": (lambda: _fast._radix_topk(flat, k)) if _fast.enabled(flat) else None,
        "empty launch (1-element add)": lambda: tiny.add_(1),
    }
    out = []
    for label, fn in parts.items():
        if fn is None:
            continue
        cid = config_id(kind="bench", model=base["model"], compressor=None, phase="component:" + label,
                        device_type=device.type, repeat=base["repeat"],
                        timer=policy.timer(device) if policy.host_ahead else None)
        if cid in done:
            continue
        ct = time_call(fn, device, policy)
        rec = _bench_record(cid, device=device, timing=ct.timing, policy=policy, host_ms=ct.host_ms, kernels=None,
                            **dict(base, phase="component:" + label, layout="flat", group="component", timer=ct.timer))
        writer.write(rec)
        out.append((rec, True, fn))
        note(f"{'component':>13} {label:<34} {_stats(rec)}  x{rec['x_floor']:6.1f} floor", verbose)
    return out
