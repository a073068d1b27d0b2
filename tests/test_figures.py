"""Every figure of studykit.plots against the checkable part of the figure checklist (docs/CONTRIBUTING.md):
a title (one asks the question), x and y labels with units where numeric, legends of at most 6 entries
that fit in the figure and cover at most a bounded share of their axes, no text outside the figure, no
overprinted labels, reference lines on their own panels, measured data with its spread. Each figure is drawn
from committed data or small inputs computed by the package; the last tests pin what the reviewed figures
show (delivered bandwidth, quartile bars, the claims' accepted ranges)."""
import importlib
import inspect

import matplotlib.pyplot as plt  # conftest.py selects the Agg backend
import numpy as np
import pandas as pd
import pytest

from studykit import paths
from studykit.plots import check

MODULES = ("perfmodel", "measure", "verify", "train", "lessons", "paper")
#: public names of those modules that draw nothing
NOT_FIGURES = {"train.colors", "verify.own_model_table"}

_cache: dict = {}


def _once(key, make):
    if key not in _cache:
        _cache[key] = make()
    return _cache[key]


def cal():
    from studykit.perfmodel import whatif

    return _once("cal", whatif.paper_calibration)


def verify_pred():
    return _once("pred", lambda: pd.read_csv(paths.DATA / "verification" / "predictions.csv.gz"))


def training():
    from studykit.train import analysis

    return _once("train", lambda: analysis.latest_runs(analysis.to_frame(
        analysis.load_runs(paths.DATA / "training" / "cpu"))))


def profile_frame():
    from studykit.measure import report

    return _once("profile", lambda: report.load_frame(paths.MEASUREMENTS / "cpu"))


def fitted():
    from studykit.perfmodel import fit

    def make():
        df = fit.normalize(fit.load_frame(fit.default_records()))
        c = fit.fit_calibration(df, "fitted", n_boot=20, strict=False)
        return df, c
    return _once("fit", make)


def bandwidth_tables():
    from studykit.measure import crossover as X
    from studykit.measure.records import load_records

    def make():
        table = X.iteration_table(load_records(paths.MEASUREMENTS / "bandwidth" / "h200_p2" / "ddp.jsonl"))
        table = table[table["model"] == table["model"].iloc[0]]
        pred = X.predicted_table(pd.read_csv(paths.DATA / "verification" / "bandwidth" / "h200_p2" / "predictions.csv.gz"))
        return table, X.speedup_table(table, "syncSGD"), pred
    return _once("bw", make)


BW_METHODS = ["PyTorch PowerSGD r4 hook", "powersgd r4 (post)", "topk 1% (post)", "PyTorch fp16 hook", "syncSGD"]


# ------------------------------------------------------------------ one builder per figure
def _perfmodel(name):
    from studykit.lessons import explore
    from studykit.perfmodel import claims, whatif
    from studykit.plots import perfmodel as P

    bw = np.geomspace(1, 100, 12)
    if name == "bandwidth_sweep_plot":
        df = whatif.bandwidth_sweep("resnet101", 64, 64, bw, calibration=cal())
        return P.bandwidth_sweep_plot(df, 9.4, whatif.crossover("resnet101", 64, 64, calibration=cal()),
                                      title="Fig. 3: resnet101, batch 64, 64 GPUs")
    if name == "required_ratio_plot":
        df = whatif.required_ratio_sweep(("resnet50", "resnet101", "bert_base"), (16, 64), 64, bw, calibration=cal())
        return P.required_ratio_plot(df, 50, 10, title="Fig. 18: all models")
    if name == "compute_speedup_plot":
        df = pd.concat([whatif.compute_speedup_sweep("resnet50", 64, 64, 10.0, np.linspace(1, 4, 7), calibration=cal(),
                                                     scale_encode_decode=s) for s in (True, False)], ignore_index=True)
        return P.compute_speedup_plot(df, (3.5, 1.1), title="Fig. 20: resnet50, 10 Gbit/s")
    if name == "tradeoff_plot":
        return P.tradeoff_plot(whatif.tradeoff_grid("resnet50", 64, 64, 10.0, calibration=cal()),
                               title="Fig. 21: resnet50, batch 64, 10 Gbit/s")
    if name in ("breakdown_plot", "speedup_curve_plot"):
        d = explore.explore_data(cal(), "resnet101", 64, 10.0, 64, compressor="powersgd", param_value=4)
        if name == "breakdown_plot":
            return P.breakdown_plot(d)
        return P.speedup_curve_plot(d["curve"], current=(d["world_size"], d["speedup"]))
    if name == "claims_plot":
        return P.claims_plot(claims.reproduce(cal()))
    raise KeyError(name)


def _measure(name):
    from studykit.measure import report
    from studykit.perfmodel import Calibration, fit
    from studykit.plots import measure as M

    if name == "allreduce_fit_plot":
        df, c = fitted()
        ab = fit.fit_alpha_bw(df, n_boot=0)
        ref = Calibration.load(paths.CALIBRATIONS / "paper_v100.json")
        return M.allreduce_fit_plot(ab.data, c.alpha_s.value, c.bandwidth_gbps.value,
                                    {"label": ref.name, "alpha_s": ref.alpha_s.value,
                                     "bandwidth_gbps": ref.bandwidth_gbps.value})
    if name == "calibration_compare_plot":
        _, c = fitted()
        ref = Calibration.load(paths.CALIBRATIONS / "paper_v100.json")
        return M.calibration_compare_plot(c.to_frame(), ref.to_frame(), labels=(c.name, ref.name))
    if name == "measured_bandwidth_plot":
        table, _, pred = bandwidth_tables()
        return M.measured_bandwidth_plot(table, BW_METHODS, y="ms", predicted=pred[pred["model"].isin(table["model"])],
                                         title="resnet50: iteration time")
    if name == "bandwidth_grid_plot":
        table, speedups, pred = bandwidth_tables()
        return M.bandwidth_grid_plot(table, speedups, BW_METHODS, predicted=pred)
    if name == "hook_vs_post_plot":
        from studykit.measure.records import load_records

        t = report.hook_vs_post(load_records(paths.MEASUREMENTS / "bandwidth" / "h200_p2c" / "ddp.jsonl", quiet=True))
        return M.hook_vs_post_plot(t[t["label"].isin(["none", "fp16", "qsgd s4", "topk 1%", "powersgd r4",
                                                       "powersgd r32"])])
    if name == "hook_timeline":  # benchmarks/hook_timeline.py's figure on its default configuration
        import importlib.util

        spec = importlib.util.spec_from_file_location("hook_timeline_bench",
                                                      paths.ROOT / "benchmarks" / "hook_timeline.py")
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
        res = bench.build(paths.MEASUREMENTS / "bandwidth" / "h200_p2r")
        return res["figure"], None
    if name == "plot_encode_decode":
        return M.plot_encode_decode(profile_frame(), "resnet50",
                                    paper=report.paper_table("table2_encode_decode", paths.PAPER))
    if name == "plot_overheads":
        return M.plot_overheads(profile_frame())
    raise KeyError(name)


def _verify(name):
    from studykit.plots import verify as V

    if name == "scaling_plot":
        return V.scaling_plot({"median": pd.read_csv(paths.DATA / "verification" / "scaling" / "predictions.csv.gz")})
    if name == "own_model_figure":
        own = paths.DATA / "verification" / "own_model"
        return V.own_model_figure(sorted(s.parent for s in own.glob("*/summary.json")))
    return getattr(V, name)(verify_pred())


def _train(name):
    from studykit.plots import train as T
    from studykit.train import analysis

    df = training()
    four = df[df["method"].isin(["none", "fp16", "quantize8", "dynamic"])]
    if name == "curves":
        return T.curves(four, "test_acc")
    if name == "accuracy_curves":
        return T.accuracy_curves(four, "test")
    if name == "loss_curves":
        return T.loss_curves(four)
    if name == "bits_over_epochs":
        return T.bits_over_epochs(df[df["method"].isin(["fp16", "quantize8", "dynamic", "dynamic_topk"])])
    if name == "tta_bars":
        return T.tta_bars(analysis.time_to_accuracy(df, 0.9, baseline="fp16"), baseline="fp16")
    if name == "accuracy_vs_time":
        return T.accuracy_vs_time(four, target=0.9)
    if name == "metric_vs_time":  # the time_to_accuracy notebook's call on its default (committed) runs
        return T.metric_vs_time(four, "test_acc", 0.9)
    if name == "bytes_bars":
        return T.bytes_bars(analysis.summary_table(df))
    if name == "metric_bands_by_rate":  # the time_to_accuracy notebook's GPU runs (full profile)
        frames = analysis.load_rates([paths.DATA / "training" / "tta_gpu2" / f for f in ("tta_10g", "tta_2.5g")])
        target, _ = analysis.rate_tables(frames)
        return T.metric_bands_by_rate({r: analysis.curve_band(f) for r, f in frames.items()}, "val_loss", target)
    if name == "time_split_bars":
        return T.time_split_bars(analysis.time_split(df))
    if name == "tuned_speedups":  # the time_to_accuracy notebook's tuned campaign
        from studykit.train import tuning

        return T.tuned_speedups(tuning.load_campaign(paths.DATA / "training" / "tta_tuned")["tables"])
    raise KeyError(name)


def _lessons(name):
    from dataclasses import replace

    from studykit.lessons import gallery, tour
    from studykit.perfmodel import Workload, whatif
    from studykit.plots import lessons as L

    hw = whatif.hardware(cal(), bandwidth_gbps=10.0)
    work = Workload("resnet50", 64)
    t_comp_s, _ = work.resolve_t_comp(cal())
    if name == "plot_collectives":
        return L.plot_collectives(tour.collective_costs(work.gradient_bytes, 2 ** np.arange(1, 9), hw.alpha_s, 10.0),
                                  title="resnet50 gradient, 10 Gbit/s")
    if name == "plot_timelines":
        slow = replace(hw, bandwidth_gbps=1.0)
        tl = {"no overlap, 10 Gbit/s": tour.overlap_timeline(t_comp_s, work.gradient_bytes, 8, hw, overlap=False),
              "overlap, 10 Gbit/s": tour.overlap_timeline(t_comp_s, work.gradient_bytes, 8, hw),
              "overlap, 1 Gbit/s": tour.overlap_timeline(t_comp_s, work.gradient_bytes, 8, slow)}
        return L.plot_timelines(tl, title="resnet50, batch 64, 8 GPUs: one iteration")
    if name == "plot_bucket_sweep":
        sweep = tour.bucket_sweep(t_comp_s, work.gradient_bytes, 8, hw, np.geomspace(0.25, 1024, 21))
        return L.plot_bucket_sweep(sweep, t_comp_s, title="resnet50, 8 GPUs, 10 Gbit/s")
    if name == "plot_speedups":
        pays = tour.speedup_table(("resnet50", "resnet101", "bert_base"),
                                  {"PowerSGD rank 4": ("powersgd", {"rank": 4}), "SignSGD": ("signsgd", {}),
                                   "MSTop-K 1%": ("mstopk", {"ratio": 0.01})}, hw, 64, 64, cal())
        return L.plot_speedups(pays, "Paper's V100 inputs, batch 64, 64 GPUs, 10 Gbit/s")
    grads, _ = _once("grads", lambda: gallery.digits_gradients(2, 32, 16, 0))
    specs = ["fp16", "quantize:bits=4", "signsgd", "thc", "topk:ratio=0.05", "randomk:ratio=0.05",
             "powersgd:rank=2", "terngrad", "qsgd", "natural", "dgc:ratio=0.05", "mstopk:ratio=0.05",
             "atomo:rank=2", "ef_signsgd", "bf16", "topk_chunked:ratio=0.05", "randomk:ratio=0.2"]
    if name == "plot_survivors":
        return L.plot_survivors(specs[:7], grads, tensor_index=0)
    if name == "plot_tradeoff":
        from studykit import compressors as C

        return L.plot_tradeoff(gallery.compare([s for s in specs if s.split(":")[0] in C.available()], grads))
    raise KeyError(name)


def _paper(name):
    from studykit.measure.records import load_records
    from studykit.perfmodel import figures
    from studykit.plots import paper as P

    p = [8, 16, 32, 64, 96]
    runs = _once("bw_runs", lambda: load_records(paths.MEASUREMENTS / "bandwidth", quiet=True))
    measured = figures.measured_points(runs, 10.0)
    if name == "scaling_plot":
        df = figures.scaling("fig6", world_sizes=p, bandwidth_gbps=10.0, calibration=cal())
        return P.scaling_plot(df, figures.paper_points("fig6"), measured, figures.MEASURED_METHODS["fig6"],
                              title="Fig. 6: does PowerSGD beat syncSGD as GPUs grow? (10 Gbit/s)")
    if name == "batch_plot":
        frames = {"10 Gbit/s": figures.batch_scaling(world_sizes=p, bandwidth_gbps=10.0, calibration=cal())}
        return P.batch_plot(frames, figures.paper_points("fig9"), title="Fig. 9: does PowerSGD pay at smaller batches?")
    if name == "gap_plot":
        return P.gap_plot(figures.gap(world_sizes=p, bandwidth_gbps=10.0, calibration=cal()),
                          figures.paper_points("fig10"), measured, title="Fig. 10: how far above linear scaling?")
    if name == "collectives_plot":
        sweeps = figures.measured_collectives(load_records(paths.MEASUREMENTS / "gpu4", quiet=True))
        return P.collectives_plot(figures.collectives(bandwidth_gbps=10.0, calibration=cal()), sweeps,
                                  title="Fig. 4: which collective is fastest as GPUs grow?")
    if name == "overlap_plot":
        return P.overlap_plot(figures.overlap(bandwidth_gbps=10.0, calibration=cal()),
                              figures.measured_overlap(runs, 10.0), title="Fig. 5: does compressing during backward pay?")
    if name == "ps_iterations_plot":
        ps = figures.measured_ps_iterations(load_records(paths.MEASUREMENTS / "ps_cpu", quiet=True))
        return P.ps_iterations_plot(ps, title="Fig. 4 measured in training: does a parameter server slow each iteration?")
    raise KeyError(name)


BUILDERS = {"perfmodel": _perfmodel, "measure": _measure, "verify": _verify, "train": _train, "lessons": _lessons,
            "paper": _paper}


def figure_names() -> list[str]:
    """``module.function`` for every public figure function of the plot modules."""
    out = []
    for mod in MODULES:
        m = importlib.import_module(f"studykit.plots.{mod}")
        out += [f"{mod}.{n}" for n in m.__all__ if inspect.isfunction(getattr(m, n)) and f"{mod}.{n}" not in NOT_FIGURES]
    return out


@pytest.mark.parametrize("name", figure_names())
def test_figure_passes_the_checklist(name):
    mod, fn = name.split(".")
    fig, _ = BUILDERS[mod](fn)
    assert fig is not None, f"{name} drew nothing from the committed data"
    try:
        found = check.problems(fig)
    finally:
        plt.close(fig)
    assert not found, f"{name}:\n  " + "\n  ".join(found)


# ------------------------------------------------------------------ the checker can fail
def _bad_figure():
    fig, ax = plt.subplots(figsize=(3, 2))
    for i in range(8):
        ax.plot([1, 2], [i, i + 1], label=f"a rather long series name number {i}")
    ax.set_xlabel("bandwidth")
    ax.legend(loc="upper left")
    ax.text(2.6, 5, "a note that runs off the right edge of the figure")
    ax.annotate("here", (1.5, 2))
    ax.annotate("here too", (1.5, 2))
    return fig, ax


def test_checker_names_every_broken_rule():
    fig, _ = _bad_figure()
    found = "\n".join(check.problems(fig))
    plt.close(fig)
    for expected in ("no title", "no y label", "'bandwidth' has no unit", "8 legend entries",
                     "the legend covers", "outside the figure", "overlap", "no title asks"):
        assert expected in found, f"{expected!r} not reported:\n{found}"


def test_checker_passes_a_good_figure():
    fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
    ax.plot([1, 10, 100], [3, 2, 1], marker="o", label="measured")
    ax.set(xscale="log", xlabel="bandwidth (Gbit/s)", ylabel="iteration time (ms)",
           title="Does time fall with bandwidth?")
    ax.legend(loc="upper right")
    found = check.problems(fig)
    plt.close(fig)
    assert found == []


@pytest.mark.parametrize(("labels", "numeric"), [(["1", "10", "1e3"], True), (["$\\mathdefault{10^{2}}$"], True),
                                                 (["0.5x", "80%", "\u22121"], True), (["fp16", "topk"], False)])
def test_numeric_axes_are_recognised(labels, numeric):
    fig, ax = plt.subplots()
    ax.set_xticks(range(len(labels)), labels)
    assert check.is_numeric_axis(ax.get_xticklabels()) is numeric
    plt.close(fig)


def test_metric_vs_time_draws_every_run_and_says_how_many():
    """Seeds of a method share its colour and one legend entry, which counts the runs (checklist item 9)."""
    from studykit.plots import train as T

    rows = [{"method": m, "run_id": f"{m}-s{seed}", "seed": seed, "step": step, "time_s": 0.5 * step + 0.1 * seed,
             "val_loss": 3.0 / step + 0.05 * seed}
            for m in ("none", "fp16") for seed in (0, 1) for step in (1, 2, 3, 4)]
    fig, ax = T.metric_vs_time(pd.DataFrame(rows), "val_loss", 1.0)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    lines = len([ln for ln in ax.get_lines() if ln.get_linestyle() != "--"])
    found = check.problems(fig)
    plt.close(fig)
    assert labels == ["none (2 runs)", "fp16 (2 runs)", "target 1"]
    assert lines == 4 and found == []


def test_checker_sees_a_figure_legend_over_an_axis_label():
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot([1, 2], [1, 2], label="a method")
    ax.set(xlabel="bandwidth (Gbit/s)", ylabel="time (ms)", title="Does it?")
    fig.legend(loc="lower right", fontsize="large")  # over the x axis's tick labels and label
    found = "\n".join(check.problems(fig))
    plt.close(fig)
    assert "figure legend covers axis text" in found, found


# ------------------------------------------------------------------ what the reviewed figures must show
def test_bandwidth_points_sit_at_the_rate_the_link_delivered():
    """p = 4 on a bridge delivers less than the set rate at the top rates: points and model lines are drawn at the
    probe's median per set rate, with the iteration quartiles as bars."""
    from studykit.measure import crossover as X
    from studykit.measure.records import load_records
    from studykit.plots import measure as M

    t = X.iteration_table(load_records(paths.MEASUREMENTS / "bandwidth" / "h200_p4" / "ddp.jsonl"))
    t = t[t["model"] == t["model"].iloc[0]]
    fig, ax = M.measured_bandwidth_plot(t, ["syncSGD"], title="p = 4")
    (bars,) = [c for c in ax.containers if hasattr(c, "has_yerr")]
    x = np.sort(np.asarray(bars.lines[0].get_xdata(), dtype=float))  # matplotlib may keep an object array
    found = check.problems(fig)
    plt.close(fig)
    probe = t.groupby("rate_gbps")["measured_gbps"].median()
    assert x == pytest.approx(np.sort(probe.to_numpy(float)))
    assert x[-1] < 0.85 * t["rate_gbps"].max()  # the set 25 Gbit/s is drawn where the link delivered it
    assert bars.lines[0].get_gid() == "measured" and found == []


def test_hook_vs_post_carries_the_hooks_iteration_quartiles():
    from studykit.measure import report
    from studykit.measure.records import load_records

    t = report.hook_vs_post(load_records(paths.MEASUREMENTS / "bandwidth" / "h200_p2c" / "ddp.jsonl", quiet=True))
    assert t["hook_q25"].notna().all()
    assert (t["hook_q25"] <= t["hook_ms"] + 1e-9).all() and (t["hook_ms"] <= t["hook_q75"] + 1e-9).all()


def test_claims_accepted_range_is_what_score_calls_reproduced():
    from studykit.perfmodel import claims

    table = claims.reproduce(cal())
    for r in table.itertuples():
        low, high = (None if pd.isna(v) else float(v) for v in (r.paper_low, r.paper_high))
        gain = r.scored_on == "gain"
        lo, hi = claims.accepted(r.paper_value, low, high, r.tolerance, gain=gain)
        for kit in np.linspace(lo - 0.5 * abs(lo) - 0.1, hi + 0.5 * abs(hi) + 0.1, 41):
            inside = lo - 1e-12 <= kit <= hi + 1e-12
            verdict = claims.score(kit, r.paper_value, low, high, r.tolerance, gain=gain)[1]
            assert (verdict == "reproduced") == inside, (r.claim_id, kit, lo, hi, verdict)


def test_claims_plot_draws_what_the_verdict_scores():
    """Each dot inside its row's accepted range exactly when the verdict says reproduced (or input), labels named
    as in the claims table (whole claim ids, one label per row)."""
    from studykit.perfmodel import claims
    from studykit.plots import perfmodel as P

    table = claims.reproduce(cal())
    fig, ax = P.claims_plot(table)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    bands = [np.asarray(s)[:, 0] for s in ax.collections[0].get_segments()]
    dots = ax.collections[1].get_offsets()[:, 0]
    plt.close(fig)
    assert len(set(labels)) == len(table)
    where = [f if isinstance(f, str) and f else s for f, s in zip(table["figure"], table["section"])]
    assert all(lab.startswith(f"{c} ({w})") for lab, c, w in zip(labels, table["claim_id"], where))
    for r, band, x in zip(table.itertuples(), bands, dots):
        if r.verdict == "not scored":
            continue
        inside = min(band) - 1e-9 <= x <= max(band) + 1e-9
        assert inside == (r.verdict in ("reproduced", "input")), (r.claim_id, r.verdict, band, x)
