"""studykit.train.tuning on hand-made records: the learning-rate choice, pricing rounds at a link rate, and the
time to a target split into throughput and iterations."""
import math

import pandas as pd
import pytest

from studykit.train import analysis, tuning


def _runs(method, lr, seed, losses, level="none", rate=None, iter_ms=None, every=10):
    out = []
    for i, loss in enumerate(losses):
        out.append({"kind": "train_epoch", "run_id": f"{method}-{lr}-{seed}-{rate}", "method": method, "seed": seed,
                    "epoch": i, "step": every * (i + 1), "iterations": every, "val_loss": loss, "test_loss": loss,
                    "time_s": 0.0, "bytes_received_total": 1e6 * every * (i + 1), "level": {"label": level},
                    "final": i == len(losses) - 1, "params": {"lr": lr, "seed": seed},
                    "network": {"rate_gbps": rate} if rate else None,
                    "iter_ms": {"ms_median": iter_ms} if iter_ms else None,
                    "optimizer_state": {"step_rms": 1.0, "sqrt_v_mean": 2.0 if method == "q" else 1.0}})
    return out


def _frame(records):
    return analysis.latest_runs(analysis.to_frame(records))


def test_best_lr_is_the_lowest_final_validation_loss_and_the_edge_is_flagged():
    recs = (_runs("fp16", 1e-3, 0, [3, 2.0]) + _runs("fp16", 2e-3, 0, [3, 1.5]) + _runs("fp16", 4e-3, 0, [3, 1.7])
            + _runs("q", 1e-3, 0, [3, 1.2]) + _runs("q", 2e-3, 0, [3, 1.4]) + _runs("q", 4e-3, 0, [3, 1.9]))
    sweep = pd.concat([_frame([r for r in recs if r["params"]["lr"] == lr]) for lr in (1e-3, 2e-3, 4e-3)])
    t = tuning.best_lrs(sweep)
    assert t.loc["fp16", "lr"] == pytest.approx(2e-3) and not t.loc["fp16", "at_edge"]
    assert t.loc["q", "lr"] == pytest.approx(1e-3) and t.loc["q", "at_edge"]
    with pytest.raises(ValueError, match="val_loss"):
        tuning.best_lrs(sweep, "val_acc")


def test_priced_time_and_speedup_split_into_throughput_and_iterations():
    # target 0.9 (fp16's final): fp16 reaches it after 30 iterations at 40 ms, q after 20 at 10 ms
    # (4x the throughput, 1.5x fewer iterations: 6x sooner)
    runs = _frame(_runs("fp16", 1e-3, 0, [2.0, 1.0, 0.9], level="fp16")
                  + _runs("q", 1e-3, 0, [1.0, 0.9, 0.85], level="quantize:bits=8"))
    rates = _frame(_runs("fp16", 1e-3, 0, [0, 0], level="fp16", rate=2.5, iter_ms=40.0)
                   + _runs("q", 1e-3, 0, [0, 0], level="quantize:bits=8", rate=2.5, iter_ms=10.0))
    times = tuning.level_times(rates)
    assert times.loc[(2.5, "fp16"), "iter_ms"] == pytest.approx(40.0) and times.loc[(2.5, "fp16"), "rounds"] == 1
    p = tuning.priced(runs, times, 2.5)
    fp = p[p["method"] == "fp16"].sort_values("step")
    assert fp["time_s"].tolist() == pytest.approx([0.4, 0.8, 1.2])
    tables = tuning.tuned_tables(runs, times)
    assert sorted(tables) == [(2.5, 0.9), (2.5, pytest.approx(0.99))]  # fp16's worst final (= every run's) and +10 %
    t = tables[(2.5, 0.9)]
    assert t.loc["fp16", "tta_s"] == pytest.approx(1.2) and t.loc["q", "tta_s"] == pytest.approx(0.2)
    assert t.loc["q", "speedup_vs_baseline"] == pytest.approx(6.0)
    assert t.loc["q", "throughput_vs_baseline"] == pytest.approx(4.0)
    assert t.loc["fp16", "steps_to_target"] / t.loc["q", "steps_to_target"] == pytest.approx(1.5)
    with pytest.raises(ValueError, match="no timed iterations at 10 Gbit/s"):
        tuning.priced(runs, times, 10)


def test_optimizer_effect_compares_against_none_at_the_same_rate_and_step():
    sweep = _frame(_runs("none", 1e-3, 0, [2, 1]) + _runs("q", 1e-3, 0, [2, 1]))
    e = tuning.optimizer_effect(sweep)
    assert e.loc[("q", 1e-3), "sqrt_v_ratio"] == pytest.approx(2.0)
    assert e.loc[("q", 1e-3), "step_rms_ratio"] == pytest.approx(1.0) and e.loc[("q", 1e-3), "evaluations"] == 2


def test_committed_campaign_tables_are_consistent(tmp_path):
    """The committed campaign: a speed-up over fp16 is its throughput ratio times its iteration ratio (the
    decomposition the README's findings use), for every method that reached the strictest target."""
    from studykit import paths

    root = paths.DATA / "training" / "tta_tuned"
    if not root.is_dir():
        pytest.skip("no committed tuned campaign")
    c = tuning.load_campaign(root)
    for (rate, target), t in c["tables"].items():
        b = t.loc["fp16"]
        for m, row in t.iterrows():
            if row["reached"] == row["runs"] == b["reached"] == b["runs"] and m != "fp16":
                # geometric mean of paired ratios vs ratio of means: equal within the spread of three seeds
                split = row["throughput_vs_baseline"] * b["steps_to_target"] / row["steps_to_target"]
                assert row["speedup_vs_baseline"] == pytest.approx(split, rel=0.1), (rate, target, m)
    assert all(math.isfinite(v) for v in c["times"]["iter_ms"])


def test_committed_campaign_markdown_says_what_was_not_run_and_where_it_ran():
    """A rate a method was not swept at reads "not run" (never nan), and the header names each stage's GPUs from the
    records' provenance (the extension ran on other cards than the first grid)."""
    from studykit import paths

    root = paths.DATA / "training" / "tta_tuned"
    if not root.is_dir():
        pytest.skip("no committed tuned campaign")
    md = tuning.tuned_markdown(root)
    assert " nan " not in md and "| nan" not in md
    lrs = tuning.best_lrs(tuning.load_frame(root / "sweep"))
    untried = int(lrs.filter(like="val_loss@").isna().sum().sum())
    assert md.count("not run") == untried > 0
    assert "loss runs on " in md and "iteration times on " in md
