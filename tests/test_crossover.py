"""Measured crossovers (studykit.measure.crossover): interpolation by hand, censoring, intervals."""
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from studykit.measure import crossover as X
from studykit.measure.records import load_records
from studykit.nbtools.readme_blocks import measured_crossovers_block

ROOT = Path(__file__).resolve().parents[1]
BW = ROOT / "data" / "measurements" / "bandwidth"


def test_crossover_by_hand():
    # s = 2 at 1 Gbit/s, 0.5 at 10: log s is +ln2 and -ln2, so the zero is halfway in log rate: sqrt(10)
    c = X.crossover([1, 10], [100, 10], [50, 20])
    assert c["status"] == "crossover"
    assert c["gbps"] == pytest.approx(math.sqrt(10))
    assert c["bracket"] == (1.0, 10.0)
    assert not c["non_monotone"]


def test_crossover_order_and_censoring():
    # rates given out of order are sorted with their times
    assert X.crossover([10, 1], [10, 100], [20, 50])["gbps"] == pytest.approx(math.sqrt(10))
    c = X.crossover([1, 5, 25], [100, 30, 10], [10, 10, 5])
    assert (c["status"], c["gbps"], c["bracket"]) == ("faster at every rate", None, (25.0, None))
    c = X.crossover([1, 5, 25], [100, 30, 10], [200, 40, 11])
    assert (c["status"], c["gbps"], c["bracket"]) == ("slower at every rate", None, (None, 1.0))


def test_crossover_non_monotone_takes_the_highest_sign_change():
    # faster at 1, slower at 2, faster at 5, slower at 10: the crossover is between 5 and 10
    c = X.crossover([1, 2, 5, 10], [10, 10, 10, 10], [9, 11, 9, 11])
    assert c["status"] == "crossover" and c["bracket"] == (5.0, 10.0) and c["non_monotone"]
    assert 5 < c["gbps"] < 10


@pytest.mark.parametrize("args, match", [
    (([1], [1], [1]), "at least two rates"),
    (([1, 1], [1, 2], [1, 2]), "distinct"),
    (([1, 2], [1, 0], [1, 2]), "positive"),
    (([1, 2], [1, 2], [1]), "at least two rates"),
])
def test_crossover_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        X.crossover(*args)


def _table(rates, base, method, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    recs = []
    for mode, comp, f in (("syncsgd", None, base), ("builtin", "torch_fp16", lambda r: 0.6 * base(r)),
                          ("post", "powersgd", method)):
        for r in rates:
            t = f(r)
            times = list(t * (1 + noise * rng.standard_normal(9)))
            recs.append({"kind": "ddp", "status": "ok", "gpu": "G", "world_size": 2, "model": "m", "batch_size": 8,
                         "mode": mode, "compressor": comp, "params": {"rank": 4} if comp == "powersgd" else {},
                         "bucket_mb": None, "ms_median": float(np.median(times)), "times_ms": times, "n_iter": 9,
                         "network": {"rate_gbps": r}, "timestamp": "t"})
    return X.iteration_table(recs)


def test_crossovers_recover_a_known_crossing():
    # syncSGD 10 + 100/r ms, the compressor 30 + 10/r: equal at r = 90/20 = 4.5 Gbit/s
    table = _table([1, 2, 5, 10, 25], lambda r: 10 + 100 / r, lambda r: 30 + 10 / r, noise=0.01)
    out = X.crossovers(table, n_boot=200)
    row = out[(out["baseline"] == "syncSGD") & (out["method"] == "powersgd r4 (post)")].iloc[0]
    assert row["status"] == "crossover" and row["bracket_low_gbps"] == 2 and row["bracket_high_gbps"] == 5
    assert row["crossover_gbps"] == pytest.approx(4.5, rel=0.15)  # interpolation error between 2 and 5
    assert row["low_gbps"] <= row["crossover_gbps"] <= row["high_gbps"]
    # against fp16 (0.6 x syncSGD): 6 + 60/r = 30 + 10/r at r = 50/24 = 2.08
    row = out[(out["baseline"] == "fp16") & (out["method"] == "powersgd r4 (post)")].iloc[0]
    assert row["crossover_gbps"] == pytest.approx(50 / 24, rel=0.15)
    # the baseline is not compared with itself
    assert not ((out["baseline"] == "syncSGD") & (out["method"] == "syncSGD")).any()


def test_run_to_run_drift_widens_the_interval_and_keeps_the_centre():
    """With drift (a rerun moves a median by up to ~20 %), the interval is wider than iterations alone give and
    still holds the crossover; rerun_drift reads both signs of each rerun's log ratio, per mode."""
    import math

    import pandas as pd

    table = _table([1, 2, 5, 10, 25], lambda r: 10 + 100 / r, lambda r: 30 + 10 / r, noise=0.01)
    spread = pd.DataFrame({"mode": ["post", "syncsgd", "builtin"], "ms_first": [10.0, 10.0, 10.0],
                           "ms_second": [12.0, 9.0, 10.5]})
    drift = X.rerun_drift([spread])
    assert sorted(drift) == ["builtin", "post", "syncsgd"]
    assert sorted(drift["post"]) == pytest.approx([-math.log(1.2), math.log(1.2)])
    plain = X.crossovers(table, n_boot=300)
    wide = X.crossovers(table, n_boot=300, drift=drift)
    pick = (plain["baseline"] == "syncSGD") & (plain["method"] == "powersgd r4 (post)")
    a, b = plain[pick].iloc[0], wide[pick].iloc[0]
    assert b["crossover_gbps"] == pytest.approx(a["crossover_gbps"])  # the centre is the measured one
    assert b["high_gbps"] - b["low_gbps"] > 2 * (a["high_gbps"] - a["low_gbps"])
    assert b["low_gbps"] <= b["crossover_gbps"] <= b["high_gbps"]
    with pytest.raises(ValueError, match="no configuration measured twice"):
        X.rerun_drift([spread.iloc[:0]])


def test_iteration_table_keeps_the_latest_duplicate_and_skips_real_networks():
    base = {"kind": "ddp", "status": "ok", "gpu": "G", "world_size": 2, "model": "m", "batch_size": 8,
            "mode": "syncsgd", "compressor": None, "params": {}, "bucket_mb": None, "times_ms": [1.0], "n_iter": 1}
    recs = [{**base, "ms_median": 5.0, "network": {"rate_gbps": 1}, "timestamp": "a"},
            {**base, "ms_median": 7.0, "network": {"rate_gbps": 1}, "timestamp": "b"},
            {**base, "ms_median": 9.0, "network": None, "timestamp": "c"}]
    t = X.iteration_table(recs)
    assert list(t["ms"]) == [7.0]
    with pytest.raises(ValueError, match="stat"):
        X.iteration_table(recs, stat="seconds")


def test_iteration_table_keeps_overlapped_and_blocking_hooks_apart():
    # `ddp --modes hook hook_blocking` writes two records of mode "hook" at one rate; neither replaces the other
    base = {"kind": "ddp", "status": "ok", "gpu": "G", "world_size": 4, "model": "m", "batch_size": 8,
            "mode": "hook", "compressor": "topk", "params": {"ratio": 0.01}, "bucket_mb": None,
            "times_ms": [1.0], "n_iter": 1, "network": {"rate_gbps": 20}}
    t = X.iteration_table([{**base, "hook_overlap": True, "ms_median": 4.0, "timestamp": "a"},
                           {**base, "hook_overlap": False, "ms_median": 6.0, "timestamp": "b"}])
    assert dict(zip(t["method"], t["ms"])) == {"topk 1% (hook)": 4.0, "topk 1% (blocking hook)": 6.0}


def test_method_labels():
    assert X.method_label("syncsgd", None, {}, None) == "syncSGD"
    assert X.method_label("syncsgd", None, {}, 100.0) == "syncSGD 100 MB"
    assert X.method_label("builtin", "torch_powersgd", {"rank": 4, "start_iter": 2}, None) == "PyTorch PowerSGD r4 hook"
    assert X.method_label("hook", "topk", {"ratio": 0.01, "scope": "global"}, None, True) == "topk 1% (hook)"
    # hook records from before the field hook_overlap existed ran the blocking hook
    assert X.method_label("hook", "topk", {"ratio": 0.01}, None, None) == "topk 1% (blocking hook)"
    assert X.method_label("post", "quantize", {"bits": 8}, None) == "quantize b8 (post)"
    # an option away from its default is named (CholeskyQR2); the default is not
    assert X.method_label("hook", "powersgd", {"rank": 32, "orthogonalize": "cholesky"}, None) == \
        "powersgd r32 cholesky (hook)"
    assert X.method_label("post", "powersgd", {"rank": 4, "orthogonalize": "twice"}, None) == "powersgd r4 (post)"


@pytest.mark.skipif(not (BW / "h200_p2" / "ddp.jsonl").exists(), reason="no committed bandwidth records")
def test_committed_bandwidth_records_give_consistent_crossovers():
    table = X.iteration_table(load_records(BW / "h200_p2" / "ddp.jsonl"))
    assert set(table["rate_gbps"]) >= {1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 25.0}
    out = X.crossovers(table, n_boot=50)
    assert len(out) > 0
    for _, r in out.iterrows():
        if r["status"] == "crossover":
            assert r["bracket_low_gbps"] <= r["crossover_gbps"] <= r["bracket_high_gbps"]
            assert r["low_gbps"] <= r["high_gbps"]
        elif r["status"] == "faster at every rate":
            assert r["speedup_at_max_rate"] > 1
        else:
            assert r["speedup_at_min_rate"] <= 1


def test_paper_crossovers_come_from_the_claims_file():
    claims = pd.read_csv(ROOT / "data" / "paper" / "claims.csv")
    p = X.paper_crossovers(claims)
    assert set(p["model"]) >= {"resnet101", "resnet50", "bert_base"}
    r101 = p[p["model"] == "resnet101"].iloc[0]
    assert r101["paper_gbps"] == 8.2 and json.loads(r101["params"]) == {"rank": 4}


def _two_campaigns():
    """syncSGD, PyTorch's fp16 hook and one compressor at p = 2 and 4; the compressor only at p = 4 as a hook."""
    recs = []
    for p in (2, 4):
        for rate, sync, fp16, comp in ((1, 100.0, 60.0, 40.0), (10, 20.0, 25.0, 30.0)):
            base = {"kind": "ddp", "status": "ok", "gpu": "G", "world_size": p, "model": "m", "batch_size": 8,
                    "bucket_mb": None, "times_ms": [], "n_iter": 3, "network": {"rate_gbps": rate},
                    "timestamp": "t"}
            recs += [{**base, "mode": "syncsgd", "compressor": None, "params": {}, "ms_median": sync},
                     {**base, "mode": "builtin", "compressor": "torch_fp16", "params": {}, "ms_median": fp16}]
            if p == 4:
                recs.append({**base, "mode": "hook", "hook_overlap": True, "compressor": "topk",
                             "params": {"ratio": 0.01}, "ms_median": comp})
    return X.iteration_table(recs)


def test_crossover_summary_names_world_sizes_baselines_and_gaps():
    s = X.crossover_summary(X.crossovers(_two_campaigns(), n_boot=0))
    assert set(s.columns) == {"m p=2 vs syncSGD", "m p=4 vs syncSGD", "m p=2 vs fp16", "m p=4 vs fp16"}
    assert s.loc["syncSGD", "m p=2 vs syncSGD"] == "(baseline)"
    assert s.loc["PyTorch fp16 hook", "m p=4 vs fp16"] == "(baseline)"
    assert s.loc["topk 1% (hook)", "m p=2 vs syncSGD"] == "not measured"
    # topk: 40 vs 100 at 1 Gbit/s, 30 vs 20 at 10: log-linear zero between them
    assert 1 < float(s.loc["topk 1% (hook)", "m p=4 vs syncSGD"]) < 10


def test_beside_paper_rows_per_world_size_and_method():
    out = X.crossovers(_two_campaigns(), n_boot=0)
    paper = pd.DataFrame({"model": ["m"], "world_size": [64], "paper_gbps": [8.2], "source": ["Fig. 3"]})
    b = X.beside_paper(out, paper, ["topk 1% (hook)"])
    assert list(b["kit p"]) == [2, 4]
    assert list(b["kit (measured, Gbit/s)"])[0] == "not measured"
    assert list(b["kit (measured, Gbit/s)"])[1] != "not measured"


def test_predicted_table_keeps_world_sizes_apart():
    pred = pd.DataFrame([{"variant": "extended", "model": "m", "world_size": p, "mode": mode, "compressor": comp,
                          "params": "{}", "bucket_mb": None, "rate_gbps": 1.0, "predicted_ms": ms}
                         for p, mode, comp, ms in ((2, "syncsgd", None, 10.0), (4, "syncsgd", None, 20.0),
                                                   (4, "hook", "fp16", 5.0), (4, "hook_blocking", "fp16", 8.0))])
    t = X.predicted_table(pred)
    row = t[(t["world_size"] == 4) & (t["method"] == "fp16 (hook)")].iloc[0]
    assert row["base_ms"] == 20.0
    assert set(t["method"]) == {"syncSGD", "fp16 (hook)", "fp16 (blocking hook)"}


def test_markdown_table_by_hand():
    # log-linear zero between 1 and 10 Gbit/s: topk vs syncSGD 10**(ln 2.5 / ln 3.75) = 4.93,
    # topk vs fp16 10**(ln 1.5 / ln 1.8) = 4.90, PyTorch's fp16 hook vs syncSGD 10**(ln(5/3) / ln(25/12)) = 4.97
    md = X.markdown_table(X.crossovers(_two_campaigns(), n_boot=0), ["topk 1% (hook)", "PyTorch fp16 hook"])
    assert md.splitlines()[2:] == ["| m | 2 | PyTorch fp16 hook | 5.0 | (baseline) |",
                                   "| m | 4 | topk 1% (hook) | 4.9 | 4.9 |",
                                   "| m | 4 | PyTorch fp16 hook | 5.0 | (baseline) |"]


@pytest.mark.slow
def test_bandwidth_readme_crossovers_are_the_generated_ones():
    text = (BW / "README.md").read_text()
    a, b = "<!-- crossovers:begin -->\n", "<!-- crossovers:end -->"
    assert a in text and b in text
    assert text[text.index(a) + len(a):text.index(b)] == measured_crossovers_block(), \
        "regenerate with python -m studykit data regen --only measurements/bandwidth/README.md"


def test_a_switch_interval_run_is_its_own_method():
    base = {"kind": "ddp", "status": "ok", "network": {"rate_gbps": 10.0}, "mode": "hook", "compressor": "powersgd",
            "params": {"rank": 4}, "hook_overlap": True, "world_size": 2, "model": "m", "batch_size": 8,
            "ms_median": 10.0, "times_ms": [10.0], "switch_interval_ms": 5.0, "config_id": '{"mode":"hook"}'}
    ab = {**base, "switch_interval_ms": 0.5, "config_id": '{"mode":"hook","switch_interval_ms":0.5}'}
    t = X.iteration_table([base, ab])
    assert sorted(t["method"]) == ["powersgd r4 (hook)", "powersgd r4 (hook) GIL 0.5 ms"]
