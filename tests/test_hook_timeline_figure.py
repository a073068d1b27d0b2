"""The hook's timeline figure (studykit.plots.measure.hook_timeline) and benchmarks/hook_timeline.py, which sets a
hook_times record beside the model's per-bucket timeline (bucket_timeline_s's ``buckets``)."""
import importlib.util
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from studykit import paths
from studykit.plots import check
from studykit.plots.measure import hook_timeline

ROOT = Path(__file__).resolve().parents[1]


def _frame(k: int, host: bool = True, spread: bool = False) -> pd.DataFrame:
    """``k`` buckets, each ready 2 ms after the last; encode 0.5 ms, collectives 1 ms, decode 0.5 ms; the host thread
    takes 3 ms a bucket from 1 ms after it is ready, so later buckets wait for it."""
    rows, host_done = [], 0.0
    for i in range(k):
        ready = 2.0 * i
        row = {"bucket": i, "ready_ms": ready, "encode_end_ms": ready + 0.5, "comm_start_ms": ready + 0.5,
               "comm_end_ms": ready + 1.5, "decode_start_ms": ready + 1.5, "decode_end_ms": ready + 2.0,
               "backward_end_ms": 2.0 * (k - 1)}
        if host:
            start = max(ready + 1.0, host_done)
            host_done = start + 3.0
            row.update(host_ready_ms=ready + 1.0, host_start_ms=start, host_done_ms=host_done)
        if spread:
            row.update(decode_end_q25_ms=ready + 1.8, decode_end_q75_ms=ready + 2.3)
        rows.append(row)
    return pd.DataFrame(rows)


def _series(ax) -> dict:
    """{legend label: number of bars} of one panel's bar series."""
    return {c.get_label(): len(c.patches) for c in ax.containers}


def test_hook_timeline_draws_two_panels_of_host_and_device_bars_and_passes_the_checklist():
    fig, (axm, axp) = hook_timeline(_frame(3, spread=True), _frame(3), context="bert_base b16, powersgd r4, 10 Gbit/s, "
                                    "2 GPUs", n_iter=10, model_name="model (bucket_timeline_s)")
    try:
        assert len(fig.axes) == 2
        want = {"host: waiting for the thread": 3, "host: the bucket's protocol": 3, "device: ready to encoded": 3,
                "device: collectives": 3, "device: decode": 3}
        assert _series(axm) == want and _series(axp) == want
        assert len(axm.patches) == len(axp.patches) == 15
        assert axm.get_xlim() == axp.get_xlim()  # one ms axis for both
        # the end of the backward pass: one vertical line per panel, at the frame's value
        for ax in (axm, axp):
            (line,) = [x for x in ax.lines if x.get_label() == "end of the backward pass"]
            assert np.allclose(line.get_xdata(), 4.0)
        # host bars start where the bucket's host work starts (waiting for the thread before)
        host = [c for c in axm.containers if c.get_label() == "host: the bucket's protocol"][0]
        assert [p.get_x() for p in host.patches] == pytest.approx([1.0, 4.0, 7.0])
        assert [p.get_width() for p in host.patches] == pytest.approx([3.0, 3.0, 3.0])
        assert "bert_base" in fig._suptitle.get_text() and "?" in fig._suptitle.get_text()
        assert check.problems(fig) == []
    finally:
        plt.close(fig)


def test_hook_timeline_without_a_host_chain_draws_device_bars_only():
    fig, (axm, axp) = hook_timeline(_frame(4), _frame(4, host=False))
    try:
        assert len(axm.patches) == 20 and len(axp.patches) == 12
        assert set(_series(axp)) == {"device: ready to encoded", "device: collectives", "device: decode"}
        assert check.problems(fig) == []
    finally:
        plt.close(fig)


def test_hook_timeline_refuses_a_frame_without_its_columns():
    with pytest.raises(ValueError, match="predicted frame needs .* missing decode_end_ms"):
        hook_timeline(_frame(2), _frame(2).drop(columns=["decode_end_ms"]))
    with pytest.raises(ValueError, match="measured frame .* no rows"):
        hook_timeline(_frame(2).iloc[:0], _frame(2))


def test_bucket_timeline_returns_each_buckets_moments_by_hand():
    """Two buckets, C = 10 ms, ready at 5 and 10 ms, e = d = 0.5 ms, no communication; the host reaches the hooks at 1
    and 2 ms and spends 6 ms in each, half before its collectives. Bucket 1: ready 5, encoded and sent 5.5, decoded
    max(6, H_1 = max(4, 5.5) + 3) = 8.5. Bucket 2: ready 10.5 (behind bucket 1's encode), host from 8.5 (it waited
    for the thread), issued 11.5, so its collectives run at 11.5, host done 14.5 = its decode end = T_obs."""
    from studykit.perfmodel.model import bucket_timeline_s

    tl = bucket_timeline_s(0.010, [0.5, 1.0], [0.0, 0.0], [0.0005] * 2, [0.0005] * 2, [0.001, 0.002], [0.006] * 2)
    ms = {k: [1e3 * float(v) for v in vs] for k, vs in tl["buckets"].items()}
    want = {"ready_s": [5.0, 10.5], "encode_end_s": [5.5, 11.5], "comm_start_s": [5.5, 11.5], "comm_end_s": [5.5, 11.5],
            "decode_start_s": [5.5, 11.5], "decode_end_s": [8.5, 14.5], "host_ready_s": [1.0, 2.0],
            "host_start_s": [1.0, 8.5], "host_issue_s": [4.0, 11.5], "host_done_s": [8.5, 14.5]}
    assert set(ms) == set(want)
    for k, v in want.items():
        assert ms[k] == pytest.approx(v), k
    assert ms["decode_end_s"][-1] == pytest.approx(1e3 * float(tl["total_s"]))
    plain = bucket_timeline_s(0.010, [0.5, 1.0], [0.001, 0.001])  # syncSGD: no host keys, collectives queue
    assert set(plain["buckets"]) == {"ready_s", "encode_end_s", "comm_start_s", "comm_end_s", "decode_start_s",
                                     "decode_end_s"}
    assert [1e3 * float(v) for v in plain["buckets"]["comm_end_s"]] == pytest.approx([6.0, 11.0])


def test_a_hook_prediction_on_the_timeline_keeps_its_buckets_beside_the_totals():
    """predict(mode="hook") on the timeline: Prediction.buckets holds one entry per DDP bucket, the last decode ends
    by T_obs, and the totals (compressed) stay one number each; other modes have none."""
    import dataclasses

    from studykit.perfmodel.model import Hardware, ModelOptions, Workload, predict

    opts = dataclasses.replace(ModelOptions.extended(), overlap="timeline")
    w = Workload("resnet50", 64, t_comp_s=0.05)
    hw = Hardware(bandwidth_gbps=10.0, alpha_s=1e-5)
    pr = predict(w, hw, 2, "powersgd", {"rank": 4}, t_encode_decode_s=0.004, options=opts, mode="hook")
    k = len(w.ddp_bucket_shapes())
    assert len(pr.buckets["decode_end_s"]) == k and "buckets" not in pr.compressed
    assert all(np.ndim(v) == 0 for v in pr.compressed.values())
    assert float(pr.buckets["decode_end_s"][-1]) <= float(pr.compressed["total_s"]) + 1e-12
    assert predict(w, hw, 2, "powersgd", {"rank": 4}, t_encode_decode_s=0.004, options=opts, mode="post").buckets is None


def _script():
    spec = importlib.util.spec_from_file_location("hook_timeline_bench", ROOT / "benchmarks" / "hook_timeline.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.data
def test_the_script_sets_the_committed_hook_record_beside_the_model(tmp_path, capsys):
    from studykit.measure.records import load_records

    folder = paths.MEASUREMENTS / "bandwidth" / "h200_p2r"
    bench = _script()
    assert bench.main([str(folder), "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert (tmp_path / "hook_timeline.png").stat().st_size > 0
    md = (tmp_path / "hook_timeline.md").read_text()
    recs = load_records(folder / "ddp.jsonl", quiet=True)

    def one(kind):
        (r,) = [r for r in recs if r["kind"] == kind and r.get("mode") == "hook" and r["params"]["rank"] == 4
                and r["network"]["rate_gbps"] == 10.0]
        return r
    ddp, stamped = one("ddp"), one("hook_times")
    # the default configuration: BERT-base, PowerSGD rank 4, 10 Gbit/s; the measured iteration is the record's
    res = bench.build(folder)
    try:
        assert res["stamped"] is not None and res["stamped"]["config_id"] == stamped["config_id"]
        assert res["measured_iteration_ms"] == pytest.approx(ddp["ms_median"])
        assert res["stamped_iteration_ms"] == pytest.approx(stamped["iteration_ms"])
        assert res["ratio"] == pytest.approx(res["predicted_iteration_ms"] / ddp["ms_median"])
        row = f"| iteration | {ddp['ms_median']:.1f} | {res['predicted_iteration_ms']:.1f} | {res['ratio']:.2f} |"
        assert row in md and row in printed
        # one row per bucket with the record's own stamps; the model's buckets end by its T_obs
        table = res["buckets"]
        assert list(table["bucket"]) == stamped["bucket_index"]
        assert np.allclose(table["decode_end_measured_ms"], stamped["decode_end_ms"])
        assert np.allclose(table["host_done_measured_ms"], stamped["done_host_ms"])
        assert table["decode_end_model_ms"].is_monotonic_increasing
        assert table["decode_end_model_ms"].max() <= res["predicted_t_obs_ms"] + 1e-6
        assert table["host_done_model_ms"].notna().all()  # priced on the host chain
        assert "host-bound" in md  # the default configuration is the known host-bound hook
        assert stamped["git_commit"][:7] in md and "NVIDIA H200" in md and "benchmarks/hook_timeline.py" in md
        assert "verification/bandwidth/h200_p2n/buckets/gamma1" in md
        assert check.problems(res["figure"]) == []
    finally:
        plt.close(res["figure"])


@pytest.mark.data
def test_the_script_names_what_it_could_not_find(tmp_path):
    bench = _script()
    folder = paths.MEASUREMENTS / "bandwidth" / "h200_p2r"
    with pytest.raises(SystemExit, match="no hook_times record for bert_base, powersgd rank=5, 10 Gbit/s.*recorded: .*powersgd r4, 10 Gbit/s"):
        bench.main([str(folder), "--rank", "5", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="2 hook_times records for bert_base, powersgd, 10 Gbit/s"):
        bench.main([str(folder), "--compressor", "powersgd", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="not a verify entry|no campaign"):
        bench.main([str(folder), "--calibration", "measurements/bandwidth/h200_p2r", "--out", str(tmp_path)])


@pytest.mark.data
def test_verify_timelines_writes_each_hook_predictions_buckets(tmp_path):
    """``verify --timelines``: per hook row priced on the timeline, one row per DDP bucket (as many as the row's
    ``k_buckets``), its moments in order and ending by the row's ``T_obs``; without the flag no such file."""
    import pandas as pd

    from studykit.nbtools import datacli
    from studykit.perfmodel.verify import cli

    folder = paths.MEASUREMENTS / "bandwidth" / "h200_p2r"
    args = datacli.verify_args(datacli.load_manifest().entries["verification/bandwidth/h200_p2n/buckets/gamma1"],
                               records=False)
    assert cli.main(["--records", str(folder), *args, "--timelines", "--out", str(tmp_path), "--quiet"]) == 0
    pred = pd.read_csv(tmp_path / "predictions.csv.gz")
    tl = pd.read_csv(tmp_path / "timelines.csv")
    hooks = pred[(pred["mode"] == "hook") & (pred["variant"] == "extended")]
    assert len(hooks) > 0 and set(tl["config"]) == set(hooks["config"])
    for _, row in hooks.iterrows():
        b = tl[(tl["config"] == row["config"]) & (tl["variant"] == "extended")].sort_values("bucket")
        assert len(b) == row["k_buckets"] and b["config_id"].nunique() == 1
        assert (b["ready_ms"] <= b["encode_end_ms"] + 1e-9).all() and (b["comm_end_ms"] <= b["decode_end_ms"] + 1e-9).all()
        assert b["decode_end_ms"].is_monotonic_increasing
        assert b["decode_end_ms"].max() <= row["t_obs_ms"] * (1 + 1e-5)
    assert cli.main(["--records", str(folder), *args, "--out", str(tmp_path / "plain"), "--quiet"]) == 0
    assert not (tmp_path / "plain" / "timelines.csv").exists()
