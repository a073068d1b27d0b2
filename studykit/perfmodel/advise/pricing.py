"""Price every candidate: :func:`advise` runs :func:`studykit.perfmodel.model.predict` for syncSGD, the fp16
baseline and each compressor over a (bandwidth x world size) grid, at the calibration's central constants
and at both ends of their intervals, and returns the ranking (:class:`~studykit.perfmodel.advise.Advice`)
with a pricer of the central constants for the crossover search."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from studykit import compressors, paths
from studykit.perfmodel.advise.candidates import SYNC, AdviseError, Candidate, candidates, check_modes, in_modes
from studykit.perfmodel.advise.evidence import TRAINING, _index, accuracy_evidence, hook_model_error, model_errors
from studykit.perfmodel.advise.inputs import _ends, _tcomp_ends, _ted_ends, cast_bytes_scale, hook_options, wire_bits
from studykit.perfmodel.advise.verdicts import Advice
from studykit.perfmodel.calibration import Calibration
from studykit.perfmodel.model import DEFAULT_BUCKET_BYTES, Hardware, ModelOptions, Workload, predict


def _summary_csv() -> Path:
    """The verification summary :func:`advise` takes the model's error from: the package's ``SUMMARY_CSV``,
    read at each call, so that setting ``studykit.perfmodel.advise.SUMMARY_CSV`` redirects it."""
    return importlib.import_module(__package__).SUMMARY_CSV


def _hook_verification() -> Path:
    """Where the hook's error comes from (:func:`hook_model_error`): the package's ``HOOK_VERIFICATION``, read
    at each call as :func:`_summary_csv` is."""
    return importlib.import_module(__package__).HOOK_VERIFICATION


# ------------------------------------------------------------------ advise
def advise(calibration: Calibration, model: str, batch_size: int, world_sizes: Sequence[int],
           bandwidths_gbps: Sequence[float] | None = None, *, candidate_list: Sequence[Candidate] | None = None,
           options: ModelOptions | None = None, mode: str | Sequence[str] = "post",
           model_error: float | dict | None = None,
           t_comp_s: float | None = None, overhead_s: float | None = None, alpha_s: float | None = None,
           gamma: float | None = None, compute_speedup: float = 1.0, bucket_bytes: float = DEFAULT_BUCKET_BYTES,
           evidence: bool = True, training_folder: Path | str = TRAINING, platform: str = "gpu") -> Advice:
    """Rank syncSGD, the fp16 baseline and every compressor (:func:`candidates`) by predicted iteration
    time on a (bandwidth x world size) grid (see the module docstring for intervals, error and evidence).

    ``bandwidths_gbps=None`` uses the calibration's bandwidth (and its interval); given bandwidths are
    exact. ``t_comp_s`` / ``overhead_s`` / ``alpha_s`` / ``gamma`` override the calibration's (exact);
    ``compute_speedup`` divides ``T_comp`` and ``T_encode_decode`` (``Hardware.compute_speedup``, App. D).
    ``model_error``: a fraction for every candidate, a dict per group (``syncSGD``, ``compressors (post)``,
    ``compressors (hook)``), or None for ``data/verification/summary.csv`` (``platform``, and the variant
    of ``options``: extended for :meth:`ModelOptions.extended`, else paper). ``mode="hook"`` prices the
    compressors with :func:`hook_options` and a one-round cast codec (:func:`cast_bytes_scale`) as the fp16
    baseline's equation in its own dtype; ``mode=("post", "hook")`` ranks every compressor both ways, one
    candidate each (``"powersgd rank=4 (hook)"``), so the answer also says which way to run it. A candidate of
    ``candidate_list`` with its own ``mode`` keeps it. Both baselines are always priced (appended to
    ``candidate_list`` when missing). Missing inputs raise :class:`AdviseError` naming them."""
    opts = options or ModelOptions()
    modes = check_modes(mode)
    if not (isinstance(compute_speedup, (int, float)) and np.isfinite(compute_speedup) and compute_speedup > 0):
        raise AdviseError(f"compute speed-up must be a finite number > 0, got {compute_speedup!r} (--compute-speedup)")
    notes: dict[str, Any] = {"calibration": calibration.name}
    exact: list[str] = []
    p = np.asarray(sorted({int(x) for x in world_sizes}), dtype=np.int64)
    if p.size == 0 or np.any(p < 1):
        raise AdviseError(f"world sizes must be integers >= 1, got {list(world_sizes)!r} (--gpus)")
    # --- the network and the cluster's constants: (value, low, high)
    if bandwidths_gbps is None or len(bandwidths_gbps) == 0:
        if calibration.bandwidth_gbps is None:
            raise AdviseError(f"no bandwidth: calibration {calibration.name!r} has no bandwidth_gbps; "
                              "pass bandwidths (--bandwidth-gbps)")
        bw_c, bw_lo, bw_hi = _ends(calibration.bandwidth_gbps, "bandwidth_gbps", notes, exact)
        bw = np.asarray([bw_c])
        bw_scale = (1.0, bw_hi / bw_c, bw_lo / bw_c)  # the cheap corner has the most bandwidth
    else:
        bw = np.asarray(sorted({float(b) for b in bandwidths_gbps}), dtype=float)
        if np.any(~np.isfinite(bw)) or np.any(bw <= 0):
            raise AdviseError(f"bandwidths must be finite and > 0 Gbit/s, got {list(bandwidths_gbps)!r}")
        bw_scale = (1.0, 1.0, 1.0)
        notes["bandwidth_gbps"] = "given"
    ends = {}
    sync_terms = opts.sync_terms or opts.per_tensor
    for name, override in (("alpha_s", alpha_s), ("gamma", gamma)):
        if override is not None:
            ends[name] = (float(override),) * 3
            notes[name] = "given"
        elif name == "gamma" and sync_terms and calibration.gamma_extended is not None:
            ends[name] = _ends(calibration.gamma_extended, "gamma_extended", notes, exact)  # fitted with the terms
        elif getattr(calibration, name) is None:
            flag = "--alpha-s" if name == "alpha_s" else "--gamma"
            raise AdviseError(f"no {name}: calibration {calibration.name!r} has none; pass {flag}")
        else:
            ends[name] = _ends(getattr(calibration, name), name, notes, exact)
    ends["incast_coeff"] = (_ends(calibration.incast_coeff, "incast_coeff", notes, exact)
                            if calibration.incast_coeff is not None else (0.0, 0.0, 0.0))
    # the extended model's syncSGD terms (ModelOptions.sync_terms / per_tensor), where the calibration has them
    for name, on in (("sync_delta_s", opts.sync_terms), ("per_bucket_s", opts.sync_terms),
                     ("per_tensor_s", opts.per_tensor)):
        c = getattr(calibration, name)
        if on and c is not None:
            ends[name] = _ends(c, name, notes, exact)
        else:
            ends[name] = (0.0, 0.0, 0.0)
            if on:
                notes[name] = f"not in calibration {calibration.name!r}: 0 (fit records with DDP runs of several models)"
    if t_comp_s is not None:
        tc = (float(t_comp_s),) * 3
        notes["t_comp"] = "given"
    else:
        tc = _tcomp_ends(calibration, model, batch_size, notes, exact)
    if overhead_s is not None:
        oh = (float(overhead_s),) * 3
        notes["overhead"] = "given"
    else:
        found = next((c for c in calibration.overhead if c.model == model and c.batch_size == batch_size), None)
        if found is None:
            oh = (0.0, 0.0, 0.0)
            notes["overhead"] = ("unknown: 0 (iteration time = T_obs; the calibration has no forward/optimizer "
                                 "overhead for this model and batch)")
        else:
            oh = _ends(found, "overhead_s", notes, exact)
            notes["overhead"] = found.source
    # --- model error per group
    extended = opts.bucketing == "ddp" or opts.sync_terms or opts.per_tensor or opts.path_overhead or \
        opts.cpu_contention or opts.collectives == "measured" or opts.overlap == "timeline"
    variant = "extended" if extended else "paper"
    if model_error is None:
        summary = _summary_csv()
        errs = model_errors(summary, platform, variant)
        notes["model_error"] = f"{summary.relative_to(paths.ROOT)}: median |error|, {platform}, {variant} model"
    elif isinstance(model_error, dict):
        errs = dict(model_error)
        notes["model_error"] = "given per group"
    else:
        if not (np.isfinite(model_error) and 0 <= model_error < 1):
            raise AdviseError(f"model error must be a fraction in [0, 1), got {model_error!r} (--model-error)")
        errs = {}
        notes["model_error"] = f"given: {model_error:g}"

    cands = in_modes(list(candidate_list) if candidate_list is not None else candidates(), modes)
    for base in candidates([])[:2]:  # both baselines, always
        if not any(c.kind == base.kind for c in cands):
            cands.append(base)
    try:
        work0 = Workload(model, batch_size, t_comp_s=tc[0], bucket_bytes=bucket_bytes)
    except ValueError as exc:
        raise AdviseError(f"{exc} (--model, --batch-size, --bucket-mb)") from None
    hook_opts, hook_how = hook_options(opts) if "hook" in modes else (opts, None)
    timeline = "hook" in modes and hook_opts.overlap == "timeline"
    # a compressor priced as a hook takes the hook campaigns' error; one priced after the backward pass (the
    # paper's terms price a hook so) takes post's
    if timeline and model_error is None and platform == "gpu":
        found = hook_model_error(_hook_verification())
        if found is not None:
            errs["compressors (hook)"], notes["model_error_hook"] = found
    unranked: dict[str, str] = {}
    how: dict[str, dict] = {}
    teds: dict[str, tuple] = {}
    casts: dict[str, float] = {}
    wire: dict[str, dict] = {}
    for c in cands:
        if c.kind == "syncsgd":
            how[c.label] = {"equation": "Sec. 4.1"}
        elif c.kind == "fp16_hook":
            how[c.label] = {"equation": "Sec. 4.1 with every bucket in fp16 (DDP's fp16 compress hook)"}
            try:
                teds[c.label] = _ted_ends(calibration, "fp16", {}, model)
                how[c.label]["cast"] = f"fp16 T_encode_decode added: {teds[c.label][4]}"
            except ValueError:
                how[c.label]["cast"] = "no fp16 T_encode_decode in the calibration: the casts count as free"
        else:
            try:
                teds[c.label] = (_ted_ends(calibration, c.compressor, c.param_dict, model) if c.compressor != "none"
                                 else (0.0, 0.0, 0.0, 0.0, "none encodes nothing"))
            except ValueError:
                have = sorted({e.compressor for e in calibration.t_encode_decode if e.model == model})
                unranked[c.label] = (f"calibration {calibration.name!r} has no T_encode_decode of {c.compressor} on "
                                     f"{model} (has: {', '.join(have) or 'none'}); measure it with `python -m studykit "
                                     "profile` and fit a calibration")
            try:
                wire[c.label] = wire_bits(c.compressor, c.param_dict, work0, p)
                scale = cast_bytes_scale(c.compressor, c.param_dict, work0) if c.mode == "hook" else None
            except (ValueError, compressors.CompressorError) as exc:
                unranked.setdefault(c.label, str(exc))
                continue
            if c.label in unranked:
                continue
            if scale is not None:
                casts[c.label] = scale
                how[c.label] = {"equation": f"Sec. 4.1 with every bucket at {scale:g} of its fp32 bytes (priced as "
                                            "PyTorch's equivalent compress hook)", "cast": teds[c.label][4]}
            else:
                how[c.label] = {"equation": "App. B, collectives from plan()" if c.mode == "post"
                                else f"DDP hook: {hook_how}; collectives from plan()",
                                "t_encode_decode": teds[c.label][4]}
                if (hook_opts if c.mode == "hook" else opts).path_overhead:  # the calibration's, as predict finds it
                    found = calibration.path_overhead_lookup(model, batch_size, c.mode)
                    how[c.label]["path_overhead"] = "none fitted" if found is None else found[1]

    def price(bw_gbps, world, corners, failed: dict) -> np.ndarray:
        """Iteration times ``(corner, candidate, bandwidth, world size)`` at the constants' ``corners`` (0 central,
        1 cheap end, 2 dear end); a candidate ``predict`` refuses is NaN, with why in ``failed``."""
        col = lambda t: np.asarray([t[i] for i in corners], dtype=float)[:, None, None]  # noqa: E731
        hw = Hardware(bandwidth_gbps=np.asarray(bw_gbps, dtype=float)[None, :, None] * col(bw_scale),
                      alpha_s=col(ends["alpha_s"]), gamma=col(ends["gamma"]), incast_coeff=col(ends["incast_coeff"]),
                      sync_delta_s=col(ends["sync_delta_s"]), per_bucket_s=col(ends["per_bucket_s"]),
                      per_tensor_s=col(ends["per_tensor_s"]), compute_speedup=float(compute_speedup))
        work = Workload(model, batch_size, t_comp_s=col(tc), overhead_s=col(oh), bucket_bytes=bucket_bytes)
        grid_p = np.asarray(world)[None, None, :]
        T = np.full((len(corners), len(cands), len(bw_gbps), len(world)), np.nan)

        def allreduce_hook(scale: float, ted) -> np.ndarray:
            # Sec. 4.1 with every bucket at `scale` of its bytes (DDP's built-in all-reduce, or a compress hook
            # that casts), plus the casts when the calibration times them
            t = predict(work, hw, grid_p, options=opts, sync_bytes_scale=scale).sync["iteration_s"]
            return t if ted is None else t + (col(ted[:3]) + ted[3] * grid_p) / hw.compute_speedup

        for k, c in enumerate(cands):
            if c.label in failed:
                continue
            try:
                if c.kind == "syncsgd":
                    t = allreduce_hook(1.0, None)
                elif c.kind == "fp16_hook":
                    t = allreduce_hook(0.5, teds.get(c.label))
                elif c.label in casts:
                    t = allreduce_hook(casts[c.label], teds[c.label])
                else:
                    v, lo, hi, pw, _ = teds[c.label]
                    hook = c.mode == "hook"
                    # the hook timeline takes one world size per call
                    t = np.concatenate([np.broadcast_to(
                        predict(work, hw, q, c.compressor, c.param_dict, t_encode_decode_s=col((v, lo, hi)) + pw * q,
                                options=hook_opts if hook else opts, mode=c.mode,
                                calibration=calibration).compressed["iteration_s"],
                        T.shape[:1] + T.shape[2:3] + (np.size(q),))
                        for q in (world if hook and timeline else [world])], axis=-1)
            except (ValueError, compressors.CompressorError) as exc:
                failed[c.label] = str(exc)
                continue
            T[:, k] = t
        return T

    T = price(bw, p, (0, 1, 2), unranked)
    for label in unranked:
        how.pop(label, None)
    notes.update({"model": model, "batch_size": batch_size, "mode": " and ".join(modes),
                  "compute_speedup": float(compute_speedup),
                  "options": {f: getattr(opts, f) for f in opts.__dataclass_fields__},
                  "interval": "model at the cheap and the dear end of every calibrated constant's interval",
                  "time": "iteration time: overhead O (forward, optimizer step) + T_obs"})
    if "hook" in modes:
        notes["hook_terms"] = hook_how
        notes["hook_options"] = {f: getattr(hook_opts, f) for f in hook_opts.__dataclass_fields__}
    notes["t_comp_s"] = tc[0]

    def err_of(c: Candidate) -> tuple[str, float]:
        g = (SYNC if c.kind in ("syncsgd", "fp16_hook") or c.label in casts
             else "compressors (hook)" if c.mode == "hook" and timeline else "compressors (post)")
        if not isinstance(model_error, dict) and model_error is not None:
            return g, float(model_error)
        if g not in errs and g == "compressors (hook)" and "compressors (blocking hook)" in errs:
            # platforms measured only with the kit's first (blocking) hook: its error, said in the notes
            g = "compressors (blocking hook)"
            notes["model_error_hook"] = "the blocking hook's (no overlapped-hook records on this platform)"
        if g not in errs:
            raise AdviseError(f"no model error for group {g!r} (have {sorted(errs)}); pass --model-error")
        return g, errs[g]

    groups, error = zip(*(err_of(c) for c in cands))
    error = np.asarray(error, dtype=float)
    index = _index(Path(training_folder)) if evidence else None
    ev = [accuracy_evidence(c, training_folder, index=index) if evidence
          else {"status": "not checked", "note": "", "runs": []} for c in cands]
    low = np.fmin(T[1], T[2])
    high = np.fmax(T[1], T[2])

    def central(bw_gbps, world_size: int) -> np.ndarray:
        return price(np.asarray(bw_gbps, dtype=float), np.asarray([int(world_size)]), (0,), dict(unranked))[0, :, :, 0]

    return Advice(candidates=cands, world_sizes=p, bandwidths_gbps=bw, time_s=T[0], low_s=np.fmin(low, T[0]),
                  high_s=np.fmax(high, T[0]), error=error, evidence=ev, unranked=unranked, how=how, inputs=notes,
                  exact_constants=sorted(set(exact)), error_groups=list(groups), wire=wire, pricer=central)
