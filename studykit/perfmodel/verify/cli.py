"""``python -m studykit verify``'s command: :func:`verify` over platforms, :func:`build_parser` and
:func:`main` (writes predictions.csv.gz, summary.csv, by_batch.csv and networks.csv)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from studykit import paths
from studykit.perfmodel.verify.files import PREDICTIONS, write_predictions
from studykit.perfmodel.verify.platform import STATS, _inputs, _isnull, load_platform
from studykit.perfmodel.verify.scoring import (CALIBRATE_MAX_P, ENCODE_DECODE_SOURCES, GAMMA_SOURCES,
                                               HOOK_GAMMA_SOURCES, PATH_OVERHEAD_SOURCES, VARIANTS,
                                               verify_platform)
from studykit.perfmodel.verify.tables import TARGETS, by_batch_size, summarize, within_target


# ------------------------------------------------------------------ all platforms
def default_sources() -> list[Path]:
    """The committed records verified by default: GPU (2xH200) and throttled CPU, where present."""
    out = []
    for sub in ("gpu", "throttle"):
        f = paths.MEASUREMENTS / sub
        if f.is_dir() and any(f.glob("*.jsonl")):
            out.append(f)
    return out


def verify(sources: Sequence[str | Path] | None = None, *, stat: str = "ms_median", holdout: str = "auto",
           variants: Sequence[str] = VARIANTS, include_hook: bool = True,
           calibrate_max_p: int = CALIBRATE_MAX_P, per_tensor: bool = False,
           network_from: str = "sweep", overlap: str | None = None, hook_gamma: str = "one",
           gamma_from: str = "fit", sweep_from: str | Path | None = None, pool: str | None = None,
           encode_decode_from: str = "profile", inputs_from: Sequence[str | Path] | None = None,
           path_overhead_from: str = "identity", score_coalesced: bool = False,
           progress: Callable[[str], None] | None = None,
           timelines: list | None = None) -> tuple[pd.DataFrame, pd.DataFrame, list]:
    """``(predictions, networks, notes)`` over the platforms in ``sources`` (default: :func:`default_sources`).

    With ``holdout="world_size"`` the networks table holds, per network above ``calibrate_max_p``, the
    constants used (``fitted_on`` = ``sweep p<=2 ...``, ``used`` True) and, for comparison only, those
    its own sweep would give (``used`` False). ``sweep_from``, ``inputs_from``, ``score_coalesced``: see
    :func:`load_platform`. ``pool``: every source is one platform of that name (folders of one machine kind, :func:`load_platform`). ``progress``: called
    with a line of text as each platform is read and scored. ``timelines``: a list that gets every hook row's
    per-bucket moments (:func:`~studykit.perfmodel.verify.scoring.verify_platform`)."""
    sources = [Path(s) for s in (sources or default_sources())]
    if not sources:
        raise ValueError("no records to verify: give --records folders")
    frames, nets, notes = [], [], []
    groups = [sources] if pool else sources
    say = progress or (lambda text: None)
    for i, s in enumerate(groups, 1):
        step = f"verify: platform {i}/{len(groups)}"
        say(f"{step}: reading {pool or _shown(s)} ...")
        plat = load_platform(s, stat, name=pool, sweep_from=sweep_from, inputs_from=inputs_from,
                             score_coalesced=score_coalesced)
        say(f"{step}: {plat.name} ({plat.device or 'device not stated'}): scoring {len(plat.ddp)} DDP record(s) ...")
        frames.append(verify_platform(plat, variants=variants, holdout=holdout, include_hook=include_hook,
                                      calibrate_max_p=calibrate_max_p, per_tensor=per_tensor,
                                      network_from=network_from, overlap=overlap, hook_gamma=hook_gamma,
                                      gamma_from=gamma_from, encode_decode_from=encode_decode_from,
                                      path_overhead_from=path_overhead_from, timelines=timelines))
        by_p = holdout == "world_size"
        inps = [(_inputs(plat, max_p=int(calibrate_max_p) if by_p else None, network_from=network_from), True)]
        if by_p:
            inps.append((_inputs(plat), False))  # each network's own sweep: for comparison only
        keys = {(int(w), None if _isnull(x) else float(x), None, None) for w, x in
                plat.sweep[["world_size", "rate_gbps"]].itertuples(index=False) if int(w) >= 2}
        if network_from != "sweep":  # every network a DDP record ran on, with its probe
            d = plat.ddp[plat.ddp["world_size"] >= 2]
            keys = {(int(w), None if _isnull(x) else float(x), None if _isnull(g) else float(g),
                     None if _isnull(b) else float(b))
                    for w, x, g, b in d[["world_size", "rate_gbps", "probe_gbps", "probe_bytes"]].itertuples(index=False)}
        for (p, rate, probe, probe_b) in sorted(keys, key=lambda t: (t[0], t[1] or 0, t[2] or 0)):
            for inp, used in inps:
                if not used and p <= calibrate_max_p:
                    continue
                try:
                    n = inp.network(p, rate, probe, probe_b)
                except ValueError as exc:
                    notes.append(f"{plat.name}: {exc}")
                    continue
                if any(x["fitted_on"] == n.fitted_on and x["used"] == used for x in nets if x["platform"] == plat.name):
                    continue
                nets.append({"platform": plat.name, "world_size": p, "rate_gbps": rate, "alpha_us": n.alpha_s * 1e6,
                             "bandwidth_gbps": n.bandwidth_gbps, "incast_coeff": n.incast_coeff, "eq1_r2": n.r2,
                             "fitted_on": n.fitted_on, "used": used})
        notes += [f"{plat.name}: {x}" for x in plat.notes]
    frames = [f for f in frames if not f.empty]
    pred = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return pred, pd.DataFrame(nets), notes


def _shown(path: Path) -> Path:
    """``path`` relative to the working directory where it is inside it."""
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def _fmt_summary(s: pd.DataFrame) -> str:
    """``verify``'s table (a :func:`summarize` frame): one aligned row per platform, group and variant with its
    median and max |relative error|, the group's target (:data:`~studykit.perfmodel.verify.tables.TARGETS`) and
    whether the row is within it, then a line saying how to read it."""
    rows = [["platform", "group", "variant", "n", "median|e|", "max|e|", "target", "within", "worst"]]
    for r in s.itertuples():
        t = TARGETS.get(r.group)
        rows.append([str(r.platform), str(r.group), str(r.variant), str(r.n), f"{r.median_abs_rel_error:.1%}",
                     f"{r.max_abs_rel_error:.1%}", "-" if t is None else f"{t[0]:.0%} / {t[1]:.0%}",
                     within_target(r.group, r.median_abs_rel_error, r.max_abs_rel_error) or "-",
                     str(r.worst_config)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {3, 4, 5, 6}  # numbers: right-aligned under their headers
    lines = ["  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows]
    lines.append("|e| = |predicted - measured| / measured per DDP configuration, scored leave-one-out (median and max "
                 "over the row's configurations); within: 'yes' rows are within the model's stated error (target: "
                 "median / max), 'median only' rows miss it at their worst configuration, 'no' rows miss it")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """``python -m studykit verify``'s options."""
    ap = argparse.ArgumentParser(prog="python -m studykit verify",
                                 description="Predicted vs measured iteration time (Agarwal et al. 2022 Sec. 4.1, App. B-D) "
                                             "from measurement records, leave-one-out.")
    ap.add_argument("--records", nargs="+", default=None,
                    help="record folders, one platform each (default: data/measurements/gpu and .../throttle)")
    ap.add_argument("--out", default=str(paths.REPORTS / "verification"),
                    help="output folder for the CSVs (default reports/verification; the committed "
                         f"data/verification only with {paths.OVERWRITE_FLAG})")
    ap.add_argument(paths.OVERWRITE_FLAG, action="store_true",
                    help="allow --out inside the repository's committed data/ (refused otherwise)")
    ap.add_argument("--stat", default="ms_median", choices=STATS, help="statistic of every record (default median)")
    ap.add_argument("--holdout", default="auto", choices=["auto", "model", "network", "bucket", "record", "world_size"],
                    help="what gamma's calibration leaves out when scoring a syncSGD record "
                         "(auto: the model; the network when a platform has one model). world_size: "
                         "extrapolation in p: every constant calibrated on p <= --calibrate-max-p, "
                         "only larger world sizes scored, their collectives from Eq. 1 / App. B")
    ap.add_argument("--calibrate-max-p", type=int, default=CALIBRATE_MAX_P,
                    help=f"with --holdout world_size: the largest calibration world size (default {CALIBRATE_MAX_P})")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--no-hook", action="store_true", help="skip compression as a DDP hook (mode hook)")
    ap.add_argument("--per-tensor", action="store_true",
                    help="extended: fit and use the per-tensor CPU term (ModelOptions.per_tensor; off by default: "
                         "on the committed GPU records it does not carry across models, see by_batch.csv)")
    ap.add_argument("--network-from", default="sweep", choices=["sweep", "probe", "auto"],
                    help="where each network's alpha and BW come from: its own collective sweep (default); "
                         "'probe': BW from the record's 64 MiB all-reduce probe (network.measured_busbw_gbps), "
                         "alpha and incast from the sweeps at the machine's other rates; 'auto': the sweep "
                         "where the network has one, the probe elsewhere")
    ap.add_argument("--overlap", default=None, choices=["sec41", "timeline"],
                    help="extended variant's overlap of communication with the backward pass (ModelOptions.overlap; "
                         "default: the preset's): Sec. 4.1's max, or the per-bucket timeline")
    ap.add_argument("--hook-gamma", default="one", choices=list(HOOK_GAMMA_SOURCES),
                    help="extended variant, hooks on the timeline: the backward pass at T_comp ('one', default) "
                         "or slowed by syncSGD's fitted gamma ('fitted'; ModelOptions.hook_gamma)")
    ap.add_argument("--gamma-from", default="fit", choices=list(GAMMA_SOURCES),
                    help="extended variant on the timeline: syncSGD's gamma fitted to the calibration records' "
                         "iteration times (default), or measured as the paper measures it ('buckets': the backward "
                         "pass's compute under overlap, the last bucket's ready time of the buckets records, over "
                         "T_comp; the extra terms fitted at it)")
    ap.add_argument("--encode-decode-from", default="profile", choices=list(ENCODE_DECODE_SOURCES),
                    help="encode/decode: as profiled (the codec timed alone; default); 'iterations' (extended "
                         "variant): the profile scaled by what post-backward iterations of the same compressor "
                         "leave room for, fitted on the other holdout groups; 'host_ahead': the profile timed with "
                         "the host ahead of the GPU (profile --host-ahead) where there is one; 'buckets': as "
                         "host_ahead, and hooks bucket by bucket with the host chain where profile --bucket-times "
                         "records are among the inputs (verify_platform)")
    ap.add_argument("--pool", default=None, metavar="NAME",
                    help="score every --records folder as ONE platform called NAME (campaigns of one card kind, "
                         "world size and link method, e.g. models measured in different sessions)")
    ap.add_argument("--sweep-from", default=None, metavar="FOLDER",
                    help="a folder whose collective sweeps stand in for those of --records (a campaign without "
                         "a sweep, on the same card kind and link method; refused otherwise)")
    ap.add_argument("--path-overhead-from", default="identity", choices=list(PATH_OVERHEAD_SOURCES),
                    help="extended variant's path overhead (the hook and post paths' own cost): 'identity' (default) "
                         "from the identity compressor's runs (none) of the same model at the other networks, else per "
                         "bucket from the other holdout groups; 'model': the median residual of the same model's records "
                         "of that mode in the other holdout groups (e.g. the other rates), one constant per iteration")
    ap.add_argument("--inputs-from", nargs="+", default=None, metavar="FOLDER",
                    help="folders whose single-device records (tcomp, profile, copy_bw) fill in for those --records "
                         "lacks (a campaign that measured only DDP iterations, or only its hooks' profiles); a "
                         "configuration --records measured itself keeps its own record; same card kind only")
    ap.add_argument("--score-coalesced", action="store_true",
                    help="also score hooks that coalesced buckets (ddp --hook-coalesce-mb), priced by the hook "
                         "timeline's coalesced groups (needs --overlap timeline); left out by default")
    ap.add_argument("--timelines", action="store_true",
                    help="also write timelines.csv: each hook prediction's DDP buckets, their moments in ms since the "
                         "start of the backward pass (ready, encoded, collectives, decoded; host chain where priced; "
                         "needs --overlap timeline)")
    ap.add_argument("--quiet", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "verify":
        argv = argv[1:]
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        paths.check_writable_output(args.out, args.overwrite_committed, sources={
            "--records": args.records or default_sources(), "--sweep-from": [args.sweep_from],
            "--inputs-from": args.inputs_from or []})
    except paths.OutputError as exc:
        ap.error(str(exc))
    timelines: list | None = [] if args.timelines else None
    try:
        pred, nets, notes = verify(args.records, stat=args.stat, holdout=args.holdout, variants=args.variants,
                                   include_hook=not args.no_hook, calibrate_max_p=args.calibrate_max_p,
                                   per_tensor=args.per_tensor, network_from=args.network_from,
                                   overlap=args.overlap, hook_gamma=args.hook_gamma, gamma_from=args.gamma_from,
                                   sweep_from=args.sweep_from, pool=args.pool,
                                   encode_decode_from=args.encode_decode_from, inputs_from=args.inputs_from,
                                   path_overhead_from=args.path_overhead_from,
                                   score_coalesced=args.score_coalesced, timelines=timelines,
                                   progress=None if args.quiet else lambda text: print(text, file=sys.stderr,
                                                                                         flush=True))
    except (ValueError, FileNotFoundError) as exc:
        print(f"verify: {exc}", file=sys.stderr)
        return 2
    if pred.empty:
        print("verify: no DDP record could be scored (need ddp, tcomp, sweep and profile records; a campaign "
              "without a sweep can borrow one: --sweep-from FOLDER)", file=sys.stderr)
        for n in notes[:5]:
            print(f"  {n}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cols = ["platform", "group", "variant", "config", "predicted_ms", "measured_ms", "rel_error", "abs_rel_error",
            "calibrated_on", "holdout", "model", "batch_size", "mode", "compressor", "params", "bucket_mb",
            "world_size", "rate_gbps", "overhead_ms", "t_comp_ms", "t_obs_ms", "t_comm_ms", "t_encode_decode_ms",
            "gamma", "delta_ms", "k_buckets", "bound", "n_iter", "n_records", "meas_iqr_rel", "inputs"]
    pred = pred[[c for c in cols if c in pred.columns]]
    write_predictions(pred, out)  # gzipped, deterministic (its rows repeat long strings: ~19x smaller)
    summ = summarize(pred)
    summ.to_csv(out / "summary.csv", index=False, float_format="%.6g")
    nets.to_csv(out / "networks.csv", index=False, float_format="%.6g")
    by_batch_size(pred).to_csv(out / "by_batch.csv", index=False, float_format="%.6g")
    if timelines is not None:
        pd.DataFrame(timelines).to_csv(out / "timelines.csv", index=False, float_format="%.6g")
    if not args.quiet:
        print(_fmt_summary(summ))
        for n in notes[:20]:
            print("note:", n)
        if len(notes) > 20:
            print(f"note: ... {len(notes) - 20} more")
        print(f"wrote {_shown(out) / PREDICTIONS} ({len(pred)} rows), summary.csv, by_batch.csv, networks.csv")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
