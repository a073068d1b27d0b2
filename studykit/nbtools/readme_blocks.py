"""Builders of every generated README block (under ``data/``, the README and ``docs/``).

Each builder returns a block's text, or a dict of texts keyed by marker for a README with several blocks; the
manifest (``data/campaigns.toml``) names the builder of each block by its name in
:data:`studykit.nbtools.datacli.BUILDERS`, with the folders it reads as arguments where they vary, and
``python -m studykit data regen`` rebuilds them. The first builders read one fixed set of committed records (the
constants below); the later ones take their folders from the manifest.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from studykit import paths

BANDWIDTH = paths.MEASUREMENTS / "bandwidth"
GPU_CHECKS = paths.MEASUREMENTS / "gpu_checks_h200"
GPU_CHECKS_B = paths.MEASUREMENTS / "gpu_checks_h200b"
GPU_CHECKS_C = paths.MEASUREMENTS / "gpu_checks_h200c"
GPU_CHECKS_D = paths.MEASUREMENTS / "gpu_checks_h200d"
GPU_CHECKS_E = paths.MEASUREMENTS / "gpu_checks_h200e"
CODEC_KERNELS = paths.MEASUREMENTS / "codec_kernels_h200"
TOPK_DDP = paths.MEASUREMENTS / "topk_ddp_h200"
TTA = paths.DATA / "training" / "tta_gpu2"

#: where the collective path of each parameter-server configuration is looked for, in order
COLLECTIVE_SOURCES = {"gpu_checks_h200/hooks.jsonl": GPU_CHECKS / "hooks.jsonl",
                      "bandwidth/h200_p2/ddp.jsonl": BANDWIDTH / "h200_p2" / "ddp.jsonl"}
#: the fp16-vs-PyTorch blocks of the bandwidth README: marker -> the rounds' campaigns (see :func:`bandwidth_folder`)
FP16_VS_TORCH = {"fp16-vs-torch-p2j": ("archive/measurements/bandwidth/h200_p2j",
                                       "archive/measurements/bandwidth/h200_p2j_repeat"),
                 "fp16-vs-torch-p2kl": ("h200_p2k", "h200_p2k_repeat", "h200_p2l", "h200_p2l_repeat")}
#: bandwidth campaigns that measured the same configurations (another machine, another day, or a second round; see
#: :func:`bandwidth_folder`)
RERUN_PAIRS = (("h200_p2", "h200_p2c"), ("h200_p2b", "h200_p2c"), ("h200_p2c", "h200_p2d"), ("h200_p2", "h200_p2d"),
               ("h200_p2d", "h200_p2e"),
               # another machine: the Gram-Schmidt rows of h200_p2d, the CholeskyQR2 rows of h200_p2e
               ("h200_p2d", "h200_p2f"), ("h200_p2e", "h200_p2f"), ("h200_p2d", "h200_p2g"),
               # the same machine, minutes apart
               ("h200_p2f", "h200_p2f_repeat"), ("h200_p2g", "h200_p2g_repeat"),
               # the same call, gpu_bandwidth.sh ROUNDS=2
               ("h200_p2h", "h200_p2h_repeat"), ("h200_p2i", "h200_p2i_repeat"),
               ("archive/measurements/bandwidth/h200_p2j", "archive/measurements/bandwidth/h200_p2j_repeat"),
               ("h200_p2k", "h200_p2k_repeat"), ("h200_p2l", "h200_p2l_repeat"),
               # BERT-base's PowerSGD hooks: two calls on another machine (h200_p2n, then h200_p2q: 10 before 25 Gbit/s),
               # and the same call's 25 before 10 Gbit/s (h200_p2q / h200_p2q_reversed)
               ("h200_p2n", "h200_p2q"), ("h200_p2q", "h200_p2q_reversed"),
               # the same hooks on a third machine (h200_p2r), and its second round
               ("h200_p2q", "h200_p2r"), ("h200_p2r", "h200_p2r_repeat"))
#: the campaigns and methods of the bandwidth README's table of measured crossovers with intervals
CROSSOVER_CAMPAIGNS = ("h200_p2", "h200_p2b", "h200_p4")
CROSSOVER_METHODS = ("PyTorch PowerSGD r4 hook", "PyTorch fp16 hook", "powersgd r4 (post)", "powersgd r4 (hook)",
                     "powersgd r4 (blocking hook)", "topk 1% (post)", "topk 1% (hook)", "quantize b8 (post)")
#: the TopK DDP A/B's runs: the old and the new codec, twice, in the order run
TOPK_DDP_RUNS = ("old1", "new1", "old2", "new2")
#: the host-time profiles beside shaped traffic, in the order they ran, and the traffic's rate (Gbit/s, or None)
HOST_TRAFFIC = (("alone", None), ("during25", 25.0), ("during10", 10.0), ("alone2", None))
#: the time-to-accuracy runs, one folder per emulated rate
TTA_RATES = (TTA / "tta_10g", TTA / "tta_2.5g")
#: the learning-rate runs (AdamW) and their SGD control, one ``lrRATE`` folder per peak learning rate
TTA_LR = TTA / "lr"
TTA_LR_SGD = TTA / "lr_sgd"


def bandwidth_folder(campaign: str) -> Path:
    """A bandwidth campaign's folder: a name of :data:`BANDWIDTH`, or an archived one's path below ``data/``
    (``archive/measurements/bandwidth/NAME``)."""
    return paths.DATA / campaign if campaign.startswith("archive/") else BANDWIDTH / campaign


def _load(path: Path | str, **kw) -> list[dict]:
    from studykit.measure.records import load_records

    return load_records(path, quiet=True, **kw)


def _cell(r: dict, digits: int = 4) -> str:
    """A timed record's median with its quartiles and repetitions: ``ms [q25-q75] n=N``."""
    return f"{r['ms_median']:.{digits}f} [{r['ms_q25']:.{digits}f}-{r['ms_q75']:.{digits}f}] n={r['n_iter']}"


# ---------------------------------------------------------------------------------------------------- DDP hooks
def nvlink_checks_blocks() -> dict[str, str]:
    """The NVLink hook targets and the parameter server beside Table 1's collectives, by marker."""
    from studykit.measure import report as R

    hooks = R.hook_targets(_load(GPU_CHECKS / "nvlink.jsonl"))
    ps = R.ps_vs_collective(_load(GPU_CHECKS / "ps.jsonl"), {name: _load(f) for name, f in COLLECTIVE_SOURCES.items()})
    return {"hook-targets": R.hook_targets_markdown(hooks), "ps-table1": R.ps_vs_collective_markdown(ps)}


def nvlink_alone_blocks() -> dict[str, str]:
    """The NVLink hook targets and the hook budget, measured alone on the host, by marker."""
    from studykit.measure import hook_times
    from studykit.measure import report as R

    hooks = R.hook_targets(_load(GPU_CHECKS_B / "nvlink.jsonl"))
    budget = hook_times.hook_budget_table(_load(GPU_CHECKS_B / "hooks.jsonl"))
    return {"hook-targets": R.hook_targets_markdown(hooks), "hook-budget": hook_times.hook_budget_markdown(budget)}


def nvlink_rounds_blocks() -> dict[str, str]:
    """The NVLink hook targets, the same targets in rounds one after the other (run-to-run spread), and
    PowerSGD's hook with its buckets coalesced, by marker."""
    from studykit.measure import report as R

    rounds = [f"Round {i}:\n\n" + R.hook_targets_markdown(R.hook_targets(
        _load(GPU_CHECKS_C / "rounds" / f"nvlink_round{i}.jsonl"))) for i in (1, 2, 3)]
    coal = _load(GPU_CHECKS_C / "nvlink_coalesce.jsonl")
    psgd = [t for t in R.HOOK_TARGETS if t.compressor == "powersgd"]
    parts = ["A protocol per bucket (`register`'s default):\n\n" + R.hook_targets_markdown(R.hook_targets(coal))]
    for mb, what in ((0.0, "once per iteration (`coalesce_mb=0`)"), (25.0, "in groups of 25 MB (`coalesce_mb=25`)")):
        parts.append(f"PowerSGD's buckets coalesced {what}:\n\n"
                     + R.hook_targets_markdown(R.hook_targets(coal, psgd, coalesce_mb=mb)))
    return {"hook-targets": R.hook_targets_markdown(R.hook_targets(_load(GPU_CHECKS_C / "nvlink.jsonl"))),
            "hook-rounds": "\n".join(rounds), "hook-coalesce": "\n".join(parts)}


def orthogonalization_blocks() -> dict[str, str]:
    """PowerSGD with Gram-Schmidt against CholeskyQR2 (``orthogonalize``), by marker: bucket by bucket (the
    profile, with and without the host ahead), and in DDP over NVLink (the low-rank targets per
    orthogonalization and coalescing, the high-rank hook against post and syncSGD)."""
    from studykit.measure import report as R

    d = GPU_CHECKS_D
    profile = R.profile_phases_markdown(_load(d / "profile.jsonl") + _load(d / "profile_host_ahead.jsonl"))
    nv = _load(d / "nvlink.jsonl")
    parts = []
    for o in ("twice", "cholesky"):
        targets = [dataclasses.replace(t, params=t.params + (("orthogonalize", o),), text=f"{t.text}, {o}")
                   for t in R.HOOK_TARGETS if t.compressor == "powersgd"]
        for mb, what in ((None, "a protocol per bucket"), (0.0, "buckets coalesced once per iteration")):
            parts.append(f"`orthogonalize={o}`, {what}:\n\n"
                         + R.hook_targets_markdown(R.hook_targets(nv, targets, coalesce_mb=mb)))
    r32 = [R.HookTarget(f"r32 {o} vs {ref}", "powersgd", (("rank", 32), ("orthogonalize", o)), mode, comp, params,
                        limit, f"PowerSGD rank-32 hook, {o}, vs {ref}")
           for o in ("twice", "cholesky")
           for ref, mode, comp, params, limit in (("post", "post", "powersgd", (("rank", 32), ("orthogonalize", o)), 1.0),
                                                  ("syncSGD", "syncsgd", None, (), 1.1))]
    return {"cholesky-profile": profile, "cholesky-nvlink": "\n".join(parts),
            "cholesky-r32": R.hook_targets_markdown(R.hook_targets(_load(d / "nvlink32.jsonl"), r32))}


def trace_ab_block() -> dict[str, str]:
    """The same DDP configurations in a run that traced each one after timing it (``ddp --trace-dir``) and in a
    run without traces, in the order they were timed, by marker."""
    from studykit.measure import report as R

    traced = _load(GPU_CHECKS_E / "trace_ab" / "traced.jsonl")
    t = R.rerun_spread(traced, _load(GPU_CHECKS_E / "trace_ab" / "plain.jsonl"))
    order = [r["config_id"] for r in sorted(traced, key=lambda r: r["timestamp"])]
    t = t.set_index("config_id").loc[order]
    lines = ["| order | configuration | run with traces (ms) | run without (ms) | with / without |",
             "|---:|---|---:|---:|---:|"]
    for i, (_, r) in enumerate(t.iterrows()):
        lines.append(f"| {i + 1}{' (after a traced one)' if i else ''} | {r['model']} b{int(r['batch_size'])} "
                     f"{r['label']} | {r['ms_first']:.1f} | {r['ms_second']:.1f} | {r['ms_first'] / r['ms_second']:.2f} |")
    return {"trace-ab": "\n".join(lines) + "\n"}


def benchmark_hook_targets_block() -> dict[str, str]:
    """The NVLink hook targets of the benchmarks' ``bench --ddp`` run, by marker."""
    from studykit.measure import report as R

    recs = _load(paths.DATA / "benchmarks" / "h200x2b" / "ddp.jsonl")
    return {"h200x2b-hook-targets": R.hook_targets_markdown(R.hook_targets(recs))}


def hook_vs_post_block(campaign: str) -> str:
    """The overlapped hook against the same compressor after the backward pass, at each shaped rate, of the
    bandwidth campaign ``campaign`` (a folder of :data:`BANDWIDTH`)."""
    from studykit.measure import report as R

    return R.hook_vs_post_markdown(R.hook_vs_post(_load(BANDWIDTH / campaign / "ddp.jsonl")))


def fp16_vs_torch_table(campaign: str):
    """The kit's fp16 hook against PyTorch's at each shaped rate of one bandwidth campaign (``report.hook_targets``
    rows, by model and falling rate)."""
    from studykit.measure import report as R

    (fp16,) = [t for t in R.HOOK_TARGETS if t.key == "fp16 vs PyTorch's"]
    recs = _load(bandwidth_folder(campaign) / "ddp.jsonl")
    return R.hook_targets(recs, (fp16,), shaped=True).sort_values(["model", "rate_gbps"], ascending=[True, False])


def fp16_vs_torch_block(marker: str) -> str:
    """The block ``marker`` of :data:`FP16_VS_TORCH`: the kit's fp16 hook against PyTorch's at each rate, each
    round on its own."""
    from studykit.measure import report as R

    if marker not in FP16_VS_TORCH:
        raise ValueError(f"no fp16-vs-torch block {marker!r}; valid: {', '.join(FP16_VS_TORCH)}")
    parts = []
    for sub in FP16_VS_TORCH[marker]:
        label = "round 2" if sub.endswith("_repeat") else "round 1"
        parts.append(f"`{Path(sub).name}/` ({label}):\n\n" + R.hook_targets_markdown(fp16_vs_torch_table(sub)))
    return "\n".join(parts)


def rerun_spread_block() -> str:
    """How far the same configuration's median moved between two bandwidth campaigns (``report.rerun_spread``),
    for each pair of :data:`RERUN_PAIRS`."""
    from studykit.measure import report as R

    def recs(c):
        return _load(bandwidth_folder(c) / "ddp.jsonl")
    return R.rerun_spread_markdown({f"`{Path(a).name}` / `{Path(b).name}`": R.rerun_spread(recs(a), recs(b))
                                    for a, b in RERUN_PAIRS})


def measured_crossovers_block() -> str:
    """The measured crossovers with bootstrap intervals over the timed iterations and the run-to-run drift of
    :func:`rerun_drift` (``crossover.markdown_table``) of :data:`CROSSOVER_METHODS` in the bandwidth campaigns
    :data:`CROSSOVER_CAMPAIGNS`."""
    import pandas as pd

    from studykit.measure import crossover as X

    table = pd.concat([X.iteration_table(_load(BANDWIDTH / c / "ddp.jsonl")) for c in CROSSOVER_CAMPAIGNS],
                      ignore_index=True)
    return X.markdown_table(X.crossovers(table, n_boot=200, seed=0, drift=rerun_drift()), list(CROSSOVER_METHODS))


def rerun_drift() -> dict:
    """Run-to-run drift per DDP mode (``crossover.rerun_drift``) from every campaign pair of :data:`RERUN_PAIRS`."""
    from studykit.measure import crossover as X
    from studykit.measure import report as R

    return X.rerun_drift([R.rerun_spread(_load(bandwidth_folder(a) / "ddp.jsonl"), _load(bandwidth_folder(b) / "ddp.jsonl"))
                          for a, b in RERUN_PAIRS])


# ---------------------------------------------------------------------------------------------------- the hook's host time
def bucket_rows(folder: str) -> dict:
    """The per-bucket profiles (``reduce_buckets``) of ``folder`` (a folder of :data:`studykit.paths.MEASUREMENTS`):
    {(model, label): record}, the label the compressor with its rank, orthogonalization and ratio."""
    out = {}
    for r in _load(paths.MEASUREMENTS / folder / "profile_buckets.jsonl", kind="profile"):
        if r.get("phase") == "reduce_buckets" and r.get("status") == "ok" and r.get("bucket_host_ms"):
            p = r["params"]
            label = r["compressor"] + (f" r{p['rank']}" if "rank" in p else "") + (
                f" {p['orthogonalize']}" if "orthogonalize" in p else "") + (f" {p['ratio']:g}" if "ratio" in p else "")
            out[(r["model"], label)] = r
    return out


def traffic_rows() -> dict:
    """BERT-base's PowerSGD per-bucket profiles beside shaped traffic (:data:`HOST_TRAFFIC`): {(tag, label): record}."""
    out = {}
    for tag, _ in HOST_TRAFFIC:
        for r in _load(paths.MEASUREMENTS / "hook_host_h200c" / f"profile_{tag}.jsonl", kind="profile"):
            if r.get("phase") == "reduce_buckets" and r.get("status") == "ok" and r.get("bucket_host_ms"):
                out[(tag, f"powersgd r{r['params']['rank']}")] = r
    return out


def _host_device_call(r: dict) -> str:
    return f"{sum(r['bucket_host_ms']):.2f} / {sum(r['bucket_device_ms']):.2f} / {r['ms_median']:.2f}"


def _traffic_block() -> str:
    traffic = {}
    for rate in (25, 10):
        (t,) = _load(paths.MEASUREMENTS / "hook_host_h200c" / f"traffic_{rate}.jsonl")
        traffic[float(rate)] = t
    rows = traffic_rows()
    out = ("| profile (in the order run) | written (UTC) | beside it | PowerSGD r32: host / device / call ms | "
           "PowerSGD r4: host / device / call ms |\n|---|---|---|---:|---:|\n")
    for tag, rate in HOST_TRAFFIC:
        a, b = rows[(tag, "powersgd r32")], rows[(tag, "powersgd r4")]
        beside = "nothing" if rate is None else (f"256 MB all-reduce at {rate:g} Gbit/s "
                                                 f"({traffic[rate]['ms_median']:.1f} ms each)")
        out += f"| `{tag}` | {a['timestamp'][11:19]} | {beside} | {_host_device_call(a)} | {_host_device_call(b)} |\n"
    return out


def hook_host_blocks() -> dict[tuple[str, str], str]:
    """The hook's per-bucket host and device times, by (folder, marker): every configuration of one machine; the
    same configurations on a second machine beside the first; BERT-base's PowerSGD alone and beside a shaped
    all-reduce loop, in the order measured."""
    a, b = bucket_rows("hook_host_h200"), bucket_rows("hook_host_h200b")

    def cells(r):
        dev = r["bucket_device_ms"]
        return (f"{len(r['bucket_host_ms'])} | {sum(r['bucket_host_ms']):.2f} | "
                + (f"{sum(dev):.2f}" if dev else "(not timed)") + f" | {r['ms_median']:.2f}")

    head = "| model | compressor | buckets | host ms (sum) | device ms (sum) | timed call ms |\n|---|---|---:|---:|---:|---:|\n"
    one = head + "".join(f"| {m} | {c} | {cells(r)} |\n" for (m, c), r in a.items())
    two = ("| model | compressor | buckets | `hook_host_h200b/` host / device / call ms | `hook_host_h200/` host / device / call ms |"
           " host, b / a |\n|---|---|---:|---:|---:|---:|\n")
    for key, r in b.items():
        o = a[key]
        two += (f"| {key[0]} | {key[1]} | {len(r['bucket_host_ms'])} | {_host_device_call(r)} | {_host_device_call(o)} | "
                f"{sum(r['bucket_host_ms']) / sum(o['bucket_host_ms']):.2f} |\n")
    return {("hook_host_h200", "bucket-times"): one, ("hook_host_h200b", "bucket-times-two-machines"): two,
            ("hook_host_h200c", "host-under-traffic"): _traffic_block()}


def topk_ddp_medians() -> dict:
    """The TopK DDP A/B's iteration medians: {(model, mode, compressor): {run: ms}} over :data:`TOPK_DDP_RUNS`."""
    out = {}
    for run in TOPK_DDP_RUNS:
        for r in _load(TOPK_DDP / f"{run}.jsonl"):
            if r["kind"] == "ddp" and r["status"] == "ok":
                out.setdefault((r["model"], r["mode"], r["compressor"]), {})[run] = r["ms_median"]
    return out


def topk_ddp_block() -> str:
    """The TopK DDP A/B: each configuration's iteration medians per run, new / old per pair and old / old."""
    rows = ["| model | mode | codec | old1 | new1 | old2 | new2 | new1 / old1 | new2 / old2 | old2 / old1 |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (model, mode, comp), m in topk_ddp_medians().items():
        rows.append(f"| {model} | {mode} | {comp} | " + " | ".join(f"{m[r]:.2f}" for r in TOPK_DDP_RUNS) +
                    f" | {m['new1'] / m['old1']:.3f} | {m['new2'] / m['old2']:.3f} | {m['old2'] / m['old1']:.3f} |")
    return "\n".join(rows) + "\n"


# ---------------------------------------------------------------------------------------------------- training
def tta_block() -> str:
    """What the time-to-accuracy runs reach, the target, then Han et al.'s table per emulated rate (Han et al.
    2024, https://arxiv.org/abs/2407.01378; the probe's measured bus bandwidth beside the rate)."""
    import pandas as pd

    from studykit.train import analysis

    folders = list(TTA_RATES)
    frames = analysis.load_rates(folders)
    target, tables = analysis.rate_tables(frames, "val_loss", None, "fp16", level=0.9, interpolate=True)
    both = pd.concat(frames.values(), ignore_index=True)
    last = both.sort_values("step").groupby("run_id").last()
    r0 = analysis.load_runs(folders[0])[0]
    seen = r0["global_batch"] * r0["dataset"]["seq_len"] * r0["total_steps"]
    out = [(f"Each run trains on {seen / 1e6:.2f} M bytes ({r0['total_steps']} iterations x {r0['global_batch']} windows "
           f"x {r0['dataset']['seq_len']} bytes), {seen / r0['dataset']['num_train_tokens']:.2f} of one pass over the "
           f"{r0['dataset']['num_train_tokens'] / 1e6:.2f} M training bytes. After it, the validation loss of the "
           f"{len(last)} runs lies between {last['val_loss'].min():.2f} and {last['val_loss'].max():.2f} nats per byte "
           f"({last['val_loss'].min() / math.log(2):.2f} to {last['val_loss'].max() / math.log(2):.2f} bits per byte; "
           f"a uniform guess is 8) and the next-byte validation accuracy between {100 * last['val_acc'].min():.0f} and "
           f"{100 * last['val_acc'].max():.0f} %: far from converged.\n\n"),
           (f"Target: validation loss {target:.4f} nats per byte, the highest final validation loss of the "
           f"{(last['method'] == 'fp16').sum()} fp16 runs (both rates), so every fp16 run reaches it. Means over the 3 "
           f"seeds with 90 % Student-t intervals (times to target: geometric means over the runs that reached it; "
           f"speed-ups paired by seed); crossings interpolated between evaluations; time is training time, "
           f"evaluation and profiled iterations excluded.\n")]
    for folder, (rate, t) in zip(folders, tables.items()):
        (probe,) = _load(folder / "probe.jsonl")
        out.append(f"\n**{rate}** (`{folder.name}/`; the 64 MiB all-reduce probe before the runs: "
                   f"{probe['busbw_gbps']:.2f} Gbit/s bus bandwidth)\n\n")
        out.append(analysis.han_markdown(t, "val_loss", "fp16"))
    return "".join(out)


def tta_tuned_block(root: Path | str) -> str:
    """The tables of a tuned time-to-accuracy campaign (:func:`studykit.train.tuning.tuned_markdown`)."""
    from studykit.train import tuning

    return tuning.tuned_markdown(paths.ROOT / root if not Path(root).is_absolute() else root)


def lr_finals(root: Path | str = TTA_LR):
    """Final validation loss of every run of the learning-rate runs under ``root`` (one ``lrRATE`` folder per peak
    learning rate): a frame with one row per (learning rate, method, seed)."""
    import pandas as pd

    from studykit.train import analysis

    rows = []
    for folder in sorted(Path(root).glob("lr*"), key=lambda f: -float(f.name[2:])):
        df = analysis.latest_runs(analysis.to_frame(analysis.load_runs(folder)))
        last = df.sort_values("step").groupby(["method", "seed"])["val_loss"].last()
        rows += [{"lr": float(folder.name[2:]), "method": m, "seed": s, "val_loss": v} for (m, s), v in last.items()]
    return pd.DataFrame(rows)


def lr_block(root: Path | str = TTA_LR) -> str:
    """The learning-rate runs under ``root``: final validation loss per method and peak learning rate (means over
    seeds, 90 % Student-t intervals), then `dynamic` against `none` seed by seed."""
    from studykit.train import analysis

    root = Path(root)
    f = lr_finals(root)
    if f.empty:
        raise ValueError(f"{root}: no lrRATE folders of training records")
    lrs = sorted(f["lr"].unique(), reverse=True)
    methods = analysis.method_order(f["method"].unique())
    out = ["| method | " + " | ".join(f"peak lr {lr:g}" for lr in lrs) + " |\n",
           "|---|" + "---:|" * len(lrs) + "\n"]
    means = {}
    for m in methods:
        cells = []
        for lr in lrs:
            mid, lo, hi = analysis.seed_interval(f[(f["lr"] == lr) & (f["method"] == m)]["val_loss"], 0.9)
            means[m, lr] = mid
            cells.append(f"{mid:.3f} [{lo:.3f}, {hi:.3f}]")
        out.append(f"| {m} | " + " | ".join(cells) + " |\n")
    best = min(lrs, key=lambda lr: means["none", lr])
    out.append(f"\nFinal validation loss (nats per byte) after {int(analysis.load_runs(root / f'lr{lrs[0]:g}')[0]['total_steps'])} "
               f"iterations, mean over {f['seed'].nunique()} seeds [90 % interval]. `none`'s best peak learning rate "
               f"here: {best:g}. `dynamic` below `none`, seed by seed: ")
    per = f.pivot_table(index=["lr", "seed"], columns="method", values="val_loss")
    out.append(", ".join(f"{int((per.loc[lr, 'dynamic'] < per.loc[lr, 'none']).sum())} of {len(per.loc[lr])} at {lr:g}"
                         for lr in lrs) + ".\n")
    return "".join(out)


# ------------------------------------------------------------------ verification, claims, crossovers, runners
def _verification(folder: str, name: str | None = None):
    """A table of the verification ``folder`` under ``data/``: its predictions (``predictions.csv.gz``) unless
    ``name`` names another of its CSV files (``summary.csv``)."""
    import pandas as pd

    if name is None:
        from studykit.perfmodel.verify.files import read_predictions

        return read_predictions(paths.DATA / folder)
    return pd.read_csv(paths.DATA / folder / name)


def hook_errors(folder: str) -> tuple[int, float, float]:
    """``(n, median, max)`` |relative error| of the hook rows (extended variant) in ``folder``'s summary.csv."""
    s = _verification(folder, "summary.csv")
    row = s[(s["variant"] == "extended") & (s["group"] == "compressors (hook)")].iloc[0]
    return int(row["n"]), float(row["median_abs_rel_error"]), float(row["max_abs_rel_error"])


def coalesce_picks_block(folder: str) -> str:
    """The hook's coalescing the model would pick beside the one measured fastest (``verify.coalesce_picks``), from
    the verification ``folder`` under ``data/``."""
    from studykit.perfmodel import verify

    return verify.coalesce_picks_markdown(verify.coalesce_picks(_verification(folder)))


def summary_block(rows: list, targets: bool = True) -> str:
    """Rows ``[label, folder]``: their summary.csv files as one table (``verify.summary_markdown``), with the
    targets and whether they are met unless ``targets`` is false."""
    from studykit.perfmodel import verify

    folders = {label: paths.DATA / folder for label, folder in rows}
    return verify.summary_markdown(folders) if targets else verify.summary_markdown(folders, targets=None)


def implied_encode_decode_block(folder: str, worst: int) -> str:
    """The encode/decode that ``folder``'s post-backward iterations leave room for, its ``worst`` rows."""
    from studykit.perfmodel import verify

    return verify.implied_encode_decode_markdown(verify.implied_encode_decode(_verification(folder), worst=worst))


def hook_budget_block(records: str) -> str:
    """The hook budget (``measure.hook_times``) of a records file under ``data/``."""
    from studykit.measure import hook_times
    from studykit.measure.report import load_frame

    return hook_times.hook_budget_markdown(hook_times.hook_budget_table(load_frame(paths.DATA / records)))


def hook_gamma_block(campaigns: list) -> str:
    """Per campaign folder: the hook rows' median / max error with syncSGD's fitted gamma (``path_model/gamma_fitted``,
    archived: under ``data/archive/``), at gamma 1 (``path_model``) and, where scored, with per-bucket times and the
    host chain (``buckets/gamma1``). A campaign archived whole is named by its path under ``archive/``."""
    def cell(folder):
        _, med, mx = hook_errors(folder)
        return f"{100 * med:.1f} % / {100 * mx:.1f} %"
    lines = ["| campaign | hooks | fitted gamma: median / max | gamma 1: median / max | gamma 1, per-bucket times and "
             "host chain |", "|---|---:|---:|---:|---:|"]
    for c in campaigns:
        extra = cell(f"{c}/buckets/gamma1") if (paths.DATA / c / "buckets").exists() else ""
        fitted = f"{c}/path_model/gamma_fitted" if c.startswith("archive/") else f"archive/{c}/path_model/gamma_fitted"
        lines.append(f"| `{Path(c).name}` | {hook_errors(f'{c}/path_model')[0]} | {cell(fitted)} | "
                     f"{cell(f'{c}/path_model')} | {extra} |")
    return "\n".join(lines) + "\n"


def hook_variants_block(variants: list, rows_from: str) -> str:
    """Rows ``[folder, title]`` scoring the same hooks in different ways: each PowerSGD hook measured and predicted
    (extended variant) in each way, in the order of ``rows_from``'s rows sorted by model and falling rate."""
    frames = {}
    for folder in [f for f, _ in variants] + [rows_from]:
        d = _verification(folder)
        frames[folder] = d[(d["variant"] == "extended") & (d["mode"] == "hook")].set_index("config")
    lines = ["| model (batch) | PowerSGD | link | measured ms | " + " | ".join(f"{t} ms (error)" for _, t in variants)
             + " |", "|---|---|---:|---:|" + "---:|" * len(variants)]
    for cfg, r in frames[rows_from].sort_values(["model", "rate_gbps"], ascending=[True, False]).iterrows():
        rank = cfg.split("rank:")[1].split(",")[0]
        cells = [f"{frames[f].loc[cfg, 'predicted_ms']:.1f} ({100 * frames[f].loc[cfg, 'rel_error']:+.1f} %)"
                 for f, _ in variants]
        lines.append(f"| {r['model']} ({int(r['batch_size'])}) | rank {rank} | {r['rate_gbps']:g} Gbit/s | "
                     f"{r['measured_ms']:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def gamma_measured_block(campaigns: list) -> str:
    """Per campaign folder and group (extended variant): the errors with syncSGD's gamma fitted (``path_model``) and
    measured (``path_model/gamma_measured``), then the range of gamma the syncSGD rows used."""
    def read(folder):
        d = _verification(folder)
        return d[d["variant"] == "extended"]
    lines = ["| campaign | group | n | gamma fitted: median / max error | gamma measured: median / max error |",
             "|---|---|---:|---:|---:|"]
    gam = ["| campaign | syncSGD rows' gamma, fitted | measured |", "|---|---:|---:|"]
    for c in campaigns:
        a, b = read(f"{c}/path_model"), read(f"{c}/path_model/gamma_measured")
        name = Path(c).name
        for g in sorted(a["group"].unique()):
            x, y = a[a["group"] == g]["abs_rel_error"], b[b["group"] == g]["abs_rel_error"]
            lines.append(f"| `{name}` | {g} | {len(x)} | {100 * x.median():.1f} % / {100 * x.max():.1f} % | "
                         f"{100 * y.median():.1f} % / {100 * y.max():.1f} % |")
        ga, gb = (d[d["mode"] == "syncsgd"]["gamma"] for d in (a, b))
        gam.append(f"| `{name}` | {ga.min():.3f}-{ga.max():.3f} | {gb.min():.3f}-{gb.max():.3f} |")
    return "\n".join(lines) + "\n\n" + "\n".join(gam) + "\n"


def claims_block() -> str:
    """The paper's claims as the kit reproduces them (``perfmodel.claims``)."""
    from studykit.perfmodel import claims

    return claims.markdown_table(claims.reproduce())


def folders_block(prefix: str) -> str:
    """The manifest's entries under ``prefix`` as a table (a README's list of its folders)."""
    from studykit.nbtools.datacli import _pipe, load_manifest

    m = load_manifest()
    rows = ["| folder | question | machine, date | status |", "|---|---|---|---|"]
    for e in m.entries.values():
        if e.path.startswith(prefix):
            st = e.status + (f" (by `{'`, `'.join(s.removeprefix(prefix) for s in e.superseded_by)}`)"
                             if e.superseded_by else "")
            slash = "/" if (paths.DATA / e.path).is_dir() else ""  # a folder, or a file of its own
            rows.append(f"| `{e.path.removeprefix(prefix)}{slash}` | {_pipe(e.question)} | {_pipe(e.machine)}, {e.date} | "
                        f"{st} |")
    return "\n".join(rows) + "\n"


def _both_baselines(rows, texts=None) -> str:
    """A method's measured crossovers (rows of ``measure.crossover.crossovers``) against syncSGD / the fp16 baseline,
    one value where both agree; ``texts`` maps a row to its text (default ``format_crossover``)."""
    from studykit.measure import crossover as X

    texts = texts or X.format_crossover
    rows = rows.set_index("baseline")
    return " / ".join(dict.fromkeys(texts(rows.loc[b]) for b in X.BASELINES if b in rows.index))


def crossovers_block(campaigns: list, methods: list) -> str:
    """The measured crossovers (``measure.crossover``) of ``methods`` in the bandwidth campaigns ``campaigns``
    (folders under ``data/`` holding a ``ddp.jsonl``): one row per model and world size, one column per method, each
    cell the rate in Gbit/s below which the method was faster than syncSGD / than the fp16 baseline
    (``format_crossover``, no interval; one value where both agree, and for a baseline itself), then the machines and
    the rates measured."""
    import pandas as pd

    from studykit.measure import crossover as X
    from studykit.measure.records import load_records

    table = pd.concat([X.iteration_table(load_records(paths.DATA / c / "ddp.jsonl", quiet=True)) for c in campaigns],
                      ignore_index=True)
    out = X.crossovers(table, n_boot=0)
    unknown = [m for m in methods if m not in set(out["method"])]
    if unknown:
        raise ValueError(f"methods {unknown} are not measured in {campaigns}; measured: {sorted(set(out['method']))}")
    lines = [f"| model (batch) | GPUs | {' | '.join(methods)} |", "|---|---:|" + "---|" * len(methods)]
    for (model, batch, p), g in out.groupby(["model", "batch_size", "world_size"], sort=True):
        cells = []
        for m in methods:
            cells.append(_both_baselines(g[g["method"] == m]) or "not measured")
        lines.append(f"| {model} ({int(batch)}) | {int(p)} | {' | '.join(cells)} |")
    machines = " and ".join(f"{p} x {gpu}" for p, gpu in sorted(set(zip(table["world_size"], table["gpu"]))))
    star = any("*" in line for line in lines[2:])
    return ("\n".join(lines) + "\n\nGbit/s below which each method beat syncSGD / the fp16 baseline (PyTorch fp16 hook), "
            f"one value where both agree (`> R`: at every rate measured; `< R`: at none"
            f"{'; `*`: not at some rate below it' if star else ''}). Measured on "
            f"{machines}, links shaped to {table['rate_gbps'].min():g}-{table['rate_gbps'].max():g} Gbit/s.\n")


def crossovers_at_scale_block(campaigns: list, calibration: str, models: list, methods: list, reference: str,
                              world_sizes: list = (2, 4, 16, 64, 256), mode: str = "post") -> str:
    """The measured crossovers of ``methods`` (compressor specs) in the bandwidth campaigns ``campaigns`` beside the
    model's at ``world_sizes`` (``measure.crossover.crossovers_at_scale`` on ``calibration``), one row per model of
    ``models`` and method; each measured value at the set rate and at the rate the link delivered (the probes'
    bus bandwidth, ``delivered_gbps``); then one sentence, from the numbers, on where each all-gather method's
    modelled crossover first falls below the all-reduce method ``reference``'s (``inversions``)."""
    import pandas as pd

    from studykit import compressors
    from studykit.measure import crossover as X
    from studykit.measure.records import load_records

    table = pd.concat([X.iteration_table(load_records(paths.DATA / c / "ddp.jsonl", quiet=True)) for c in campaigns],
                      ignore_index=True)
    out = X.crossovers(table, n_boot=0)
    out = out.assign(delivered=X.delivered_gbps(out, table))
    measured_p = sorted(int(p) for p in out["world_size"].unique())
    ref_label = X.method_label(mode, *compressors.parse_spec(reference), None)
    scale = []
    for model in models:
        batch = sorted(int(b) for b in table.loc[table["model"] == model, "batch_size"].unique())
        if len(batch) != 1:
            raise ValueError(f"model {model!r}: campaigns {campaigns} hold batch sizes {batch}; need exactly one")
        scale.append(X.crossovers_at_scale(paths.ROOT / calibration, model, batch[0], list(methods), world_sizes,
                                           mode))
    scale = pd.concat(scale, ignore_index=True)
    head = ([f"measured p = {p}: set (delivered)" for p in measured_p]
            + [f"model p = {int(p)}" for p in world_sizes])
    lines = [f"| model (batch) | method | {' | '.join(head)} |", "|---|---|" + "---|" * len(head)]
    for (model, label), s in scale.groupby(["model", "method"], sort=False):
        cells = []
        for p in measured_p:
            m = out[(out["model"] == model) & (out["world_size"] == p) & (out["method"] == label)]
            rate = _both_baselines(m)
            got = _both_baselines(m, lambda r: X.delivered_text(r, r["delivered"]))
            cells.append(f"{rate} ({got})" if rate else "not measured")
        cells += [t.removesuffix(" Gbit/s") for t in s.set_index("world_size").loc[list(world_sizes), "text"]]
        lines.append(f"| {model} ({int(s['batch_size'].iloc[0])}) | {label} | {' | '.join(cells)} |")
    inv = X.inversions(scale, ref_label)
    parts = []
    for label, g in inv.groupby("method", sort=False):
        where = []
        for _, r in g.iterrows():
            p = r["first_p"]
            when = (f"at no p up to {max(world_sizes)}" if pd.isna(p) else
                    f"already at p = {int(p)}" if p == min(world_sizes) else f"at p = {int(p)}")
            where.append(f"{when} on {r['model']}")
        parts.append(f"{label} {', '.join(where)}")
    sentence = (f"In the model, an all-gather method's crossover first falls below {ref_label}'s "
                f"(it beats both baselines only on slower links than {ref_label} does): {'; '.join(parts)}.")
    return ("\n".join(lines) + "\n\nMeasured: Gbit/s below which each method beat syncSGD / the fp16 baseline, one "
            "value where both agree (`> R`: at every rate measured; `< R`: at none), at the set rate and, in brackets, "
            "at the rate the link delivered (median probed bus bandwidth at the set rates, interpolated as the "
            f"crossover is). Model: Gbit/s below which it beats both syncSGD and the fp16 baseline (`advise`'s "
            f"crossover, `{calibration}`; `never`: at no bandwidth; `> R`: up to the top of the search).\n\n"
            f"{sentence}\n")
