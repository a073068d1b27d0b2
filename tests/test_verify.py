"""studykit.perfmodel.verify: leave-one-out never scores fitted points, the error arithmetic, the CLI on the
committed records (the notebook smoke run is in test_notebooks.py)."""
import json
import math
from pathlib import Path

import pandas as pd
import pytest

from studykit import models, paths
from studykit.nbtools import datacli, readme_blocks
from studykit.perfmodel import verify
from studykit.perfmodel import collectives as col
from studykit.perfmodel.model import MIB, ddp_buckets

GPU = paths.MEASUREMENTS / "gpu"


# ------------------------------------------------------------------ leave-one-out
def test_leave_one_out_never_fits_on_the_scored_group():
    items = [{"name": f"{m}-{b}", "model": m, "bucket": b} for m in ("a", "b", "c") for b in (1, 5)]
    seen = {}

    def fit(train):
        return [x["name"] for x in train]

    def predict(x, fitted):
        seen[x["name"]] = fitted
        return {"config": x["name"]}

    rows = verify.leave_one_out(items, lambda x: x["model"], fit, predict, name_of=lambda x: x["name"])
    assert len(rows) == len(items)
    for x in items:
        assert all(not n.startswith(x["model"] + "-") for n in seen[x["name"]]), (x, seen[x["name"]])
        assert len(seen[x["name"]]) == 4  # the other two models' items
    row = next(r for r in rows if r["config"] == "a-1")
    assert set(row["calibrated_on"].split("; ")) == {"b-1", "b-5", "c-1", "c-5"}


def test_check_disjoint_rejects_a_row_scored_on_itself():
    verify.check_disjoint([{"config": "x", "calibrated_on": "y; z"}])
    with pytest.raises(AssertionError, match="fitted to itself"):
        verify.check_disjoint([{"config": "x", "calibrated_on": "y; x"}])
    # a calibration pool that holds the scored configuration under another group is caught
    items = [{"n": "p", "g": 0}]
    pool = [{"n": "p", "g": 1}, {"n": "q", "g": 1}]
    with pytest.raises(AssertionError):
        verify.leave_one_out(items, lambda x: x["g"], lambda tr: None, lambda x, f: {"config": x["n"]},
                             name_of=lambda x: x["n"], pool=pool)


def _write(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def _synthetic(tmp_path, gamma=1.1, alpha=20e-6, rates=(1.0, 2.0), t_comp_ms=3.0, ws1_ms=4.5):
    """Records of one model (mlp_small) on two throttled networks whose sweeps follow Eq. 1 exactly
    and whose DDP iterations follow Sec. 4.1 with ``gamma``."""
    shapes = models.param_shapes("mlp_small")
    g_bytes = 4 * sum(math.prod(s) for s in shapes)
    recs = [{"kind": "tcomp", "status": "ok", "model": "mlp_small", "batch_size": 64, "phase": "bwd",
             "world_size": 1, "ms_median": t_comp_ms, "network": None},
            {"kind": "ddp", "status": "ok", "model": "mlp_small", "batch_size": 64, "mode": "syncsgd",
             "bucket_mb": None, "world_size": 1, "ms_median": ws1_ms, "network": None}]
    expect = {}
    for rate in rates:
        bw = col.gbps_to_bytes_s(rate)
        net = {"rate_gbps": rate, "workers": 2}
        for size in (1024 * 4**i for i in range(8)):
            recs.append({"kind": "sweep", "status": "ok", "op": "all_reduce", "size_bytes": size, "world_size": 2,
                         "ms_median": 1e3 * float(col.ring_allreduce_s(size, 2, alpha, bw)), "network": net})
        t_obs = gamma * t_comp_ms / 1e3 + float(col.ring_allreduce_s(g_bytes, 2, alpha, bw))  # one bucket
        meas = ws1_ms + 1e3 * t_obs - t_comp_ms
        recs.append({"kind": "ddp", "status": "ok", "model": "mlp_small", "batch_size": 64, "mode": "syncsgd",
                     "bucket_mb": None, "world_size": 2, "ms_median": meas, "network": net})
        expect[rate] = meas
    _write(tmp_path / "records.jsonl", recs)
    return expect


def test_syncsgd_prediction_by_hand_and_gamma_from_the_other_network(tmp_path):
    expect = _synthetic(tmp_path)
    plat = verify.load_platform(tmp_path, name="synthetic")
    out = verify.verify_platform(plat, variants=["paper"])
    assert len(out) == 2
    for r in out.itertuples():
        assert r.holdout == "network"
        other = [x for x in expect if x != r.rate_gbps][0]
        assert r.calibrated_on == f"mlp_small b64 syncsgd bucket=default p=2 {other:g}Gbps"
        assert r.config not in r.calibrated_on
        assert r.gamma == pytest.approx(1.1, rel=1e-6)  # recovered from the other network's record
        assert r.predicted_ms == pytest.approx(expect[r.rate_gbps], rel=1e-6)
        assert r.rel_error == pytest.approx(0.0, abs=1e-6)


def _hook_records(tmp_path, wire_scale=1.0):
    """The synthetic platform plus fp16 hook records: one overlapped, one blocking (no hook_overlap field,
    as the kit's first hook wrote them), one blocking that sent ``wire_scale`` x what plan() sends today."""
    _synthetic(tmp_path)
    recs = [json.loads(x) for x in (tmp_path / "records.jsonl").read_text().splitlines()]
    recs.append({"kind": "profile", "status": "ok", "model": "mlp_small", "batch_size": 64, "phase": "reduce",
                 "compressor": "fp16", "params": {}, "sim_world_size": 1, "world_size": 1, "ms_median": 0.5})
    g_bytes = 4 * sum(math.prod(s) for s in models.param_shapes("mlp_small"))
    hook = {"kind": "ddp", "status": "ok", "model": "mlp_small", "batch_size": 64, "compressor": "fp16",
            "params": {}, "bucket_mb": None, "world_size": 2, "ms_median": 6.0}
    for rate in (1.0, 2.0):
        net = {"rate_gbps": rate, "workers": 2}
        recs += [{**hook, "mode": "hook", "hook_overlap": True, "network": net},
                 {**hook, "mode": "hook", "network": net, "ms_median": 7.0,
                  "wire_bytes_per_iter": wire_scale * g_bytes / 2}]
    _write(tmp_path / "records.jsonl", recs)


def test_coalesced_hooks_are_neither_scored_nor_fitted(tmp_path):
    """The model's hook runs a protocol per bucket: a hook that coalesced buckets (``hook_coalesce_mb``) is left
    out of verify's platform and fit's inputs, not priced as a per-bucket hook."""
    from studykit.perfmodel import fit

    _hook_records(tmp_path)
    recs = [json.loads(x) for x in (tmp_path / "records.jsonl").read_text().splitlines()]
    coalesced = {"kind": "ddp", "status": "ok", "model": "mlp_small", "batch_size": 64, "compressor": "fp16",
                 "params": {}, "bucket_mb": None, "world_size": 2, "ms_median": 99.0, "mode": "hook",
                 "hook_overlap": True, "hook_coalesce_mb": 0.0, "network": {"rate_gbps": 1.0, "workers": 2}}
    _write(tmp_path / "records.jsonl", recs + [coalesced])
    plat = verify.load_platform(tmp_path)
    assert 99.0 not in set(plat.ddp["ms_median"]) and len(plat.ddp[plat.ddp["mode"] == "hook"]) == 2
    kinds = fit.normalize(recs + [coalesced])["kind"]
    assert list(kinds).count("ddp_unpriced") == 1 and kinds.iloc[-1] == "ddp_unpriced"
    # so is DDP without its buffer broadcast, syncSGD included (an A/B run, `ddp --no-broadcast-buffers`)
    sync = next(r for r in recs if r["kind"] == "ddp" and r.get("mode") in (None, "syncsgd"))
    nobuf = dict(sync, ms_median=77.0, broadcast_buffers=False)
    _write(tmp_path / "records.jsonl", recs + [nobuf])
    assert 77.0 not in set(verify.load_platform(tmp_path).ddp["ms_median"])
    assert fit.normalize(recs + [nobuf])["kind"].iloc[-1] == "ddp_unpriced"


def test_a_ddp_built_alike_everywhere_is_the_platform_and_is_scored(tmp_path):
    """``gradient_as_bucket_view`` / ``broadcast_buffers`` set on every DDP-built record (post builds no DDP)
    describe the platform's DDP: scored and fitted; set on some records only, they mark an A/B: left out."""
    from studykit.perfmodel import fit

    _hook_records(tmp_path)
    recs = [json.loads(x) for x in (tmp_path / "records.jsonl").read_text().splitlines()]
    post = {"kind": "ddp", "status": "ok", "model": "mlp_small", "batch_size": 64, "compressor": "fp16", "params": {},
            "bucket_mb": None, "world_size": 2, "ms_median": 5.0, "mode": "post",
            "network": {"rate_gbps": 1.0, "workers": 2}}
    built = [dict(r, gradient_as_bucket_view=True, broadcast_buffers=False) if r["kind"] == "ddp" else r
             for r in recs]
    _write(tmp_path / "records.jsonl", built + [post])
    plat = verify.load_platform(tmp_path)
    n_ddp = sum(r["kind"] == "ddp" for r in built) + 1
    assert len(plat.ddp) == n_ddp
    assert "ddp_unpriced" not in set(fit.normalize(built + [post])["kind"])
    # one record built the default way beside them: now the options are an A/B and their records are left out
    default = next(r for r in recs if r["kind"] == "ddp" and r.get("mode") in (None, "syncsgd"))
    mixed = built + [post, dict(default, ms_median=55.0, network={"rate_gbps": 3.0, "workers": 2})]
    _write(tmp_path / "records.jsonl", mixed)
    plat = verify.load_platform(tmp_path)
    assert set(plat.ddp["ms_median"]) == {55.0, 5.0}
    assert list(fit.normalize(mixed)["kind"]).count("ddp_unpriced") == n_ddp - 1


def test_a_graph_runner_hook_is_priced_without_the_host_chain():
    """verify --encode-decode-from buckets: a hook of the graph runner (replayed from DDP's callback) is priced on
    its per-bucket device times alone; the same records run by the thread get the host chain, and another price.
    On the committed campaign of graph hooks on bucket views (2 x H200, 1-25 Gbit/s)."""
    camp = paths.MEASUREMENTS / "hook_runner"
    args = dict(holdout="network", overlap="timeline", encode_decode_from="buckets",
                inputs_from=[camp / "h200_p2_model_profile"], variants=("extended",))
    pred, _, _ = verify.verify([camp / "h200_p2_model"], **args)
    hooks = pred[pred["mode"] == "hook"].set_index("config")
    graph = hooks["inputs"].str.contains("graph runner: no host chain")
    assert graph.sum() >= 20 and not hooks["inputs"].str.contains(", host chain").any()
    assert hooks.loc[~graph, "inputs"].str.contains("no per-bucket times").all()  # no profile: whole gradient
    assert hooks.index.str.contains("runner=graph").all()
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        thread = Path(tmp) / "h200_p2_model"
        shutil.copytree(camp / "h200_p2_model", thread)
        recs = [json.loads(x) for x in (thread / "ddp.jsonl").read_text().splitlines()]
        _write(thread / "ddp.jsonl", [dict(r, hook_runner=None) for r in recs])
        other, _, _ = verify.verify([thread], **args)
    other = other[other["mode"] == "hook"].set_index("config")
    hooks.index = hooks.index.str.replace(" runner=graph", "")
    assert other["inputs"].str.contains(", host chain").sum() == graph.sum()
    assert not other["inputs"].str.contains("graph runner").any()
    both = hooks.merge(other, left_index=True, right_index=True, suffixes=("", "_thread"))
    assert len(both) == len(hooks)
    assert (both["predicted_ms"] - both["predicted_ms_thread"]).abs().max() > 0.1  # the host chain moved some


def test_blocking_hooks_are_their_own_mode_and_group(tmp_path):
    _hook_records(tmp_path)
    plat = verify.load_platform(tmp_path)
    assert sorted(plat.ddp["mode"].unique()) == ["hook", "hook_blocking", "syncsgd"]
    out = verify.verify_platform(plat, variants=["paper"])
    groups = dict(zip(out["mode"], out["group"]))
    assert groups["hook"] == "compressors (hook)" and groups["hook_blocking"] == "compressors (blocking hook)"
    # two configurations per rate, never pooled into one
    assert (out[out["mode"] == "hook_blocking"]["measured_ms"] == 7.0).all()
    assert (out[out["mode"] == "hook"]["measured_ms"] == 6.0).all()


def test_records_that_sent_other_wire_bytes_are_priced_as_sent(tmp_path):
    _hook_records(tmp_path, wire_scale=1.0)
    same = verify.verify_platform(verify.load_platform(tmp_path), variants=["paper"])
    _hook_records(tmp_path, wire_scale=3.0)
    tripled = verify.verify_platform(verify.load_platform(tmp_path), variants=["paper"])
    a = same[same["mode"] == "hook_blocking"].set_index("rate_gbps")
    b = tripled[tripled["mode"] == "hook_blocking"].set_index("rate_gbps")
    assert not a["inputs"].str.contains("wire bytes").any()
    assert b["inputs"].str.contains("wire bytes x3.000").all()
    # one bucket, one all-reduce: alpha + 3 x the bytes term where the record sent 3 x plan()'s bytes
    alpha = 20e-6
    for rate in (1.0, 2.0):
        bytes_term = a.loc[rate, "t_comm_ms"] - 2 * alpha * 1e3  # Eq. 1 ring at p = 2: 2 (p-1) alpha + n / BW
        assert b.loc[rate, "t_comm_ms"] == pytest.approx(a.loc[rate, "t_comm_ms"] + 2 * bytes_term, rel=1e-3)


def test_gamma_is_never_fitted_on_the_scored_record(tmp_path):
    # the two networks disagree on gamma: each prediction must use the *other* one's
    expect = _synthetic(tmp_path, gamma=1.1)
    recs = [json.loads(x) for x in (tmp_path / "records.jsonl").read_text().splitlines()]
    for r in recs:  # make the 2 Gbps record's own gamma 1.5
        if r["kind"] == "ddp" and r["world_size"] == 2 and r["network"]["rate_gbps"] == 2.0:
            r["ms_median"] += 0.4 * 3.0
    _write(tmp_path / "records.jsonl", recs)
    out = verify.verify_platform(verify.load_platform(tmp_path), variants=["paper"]).set_index("rate_gbps")
    assert out.loc[1.0, "gamma"] == pytest.approx(1.5, rel=1e-6)
    assert out.loc[2.0, "gamma"] == pytest.approx(1.1, rel=1e-6)
    assert out.loc[2.0, "predicted_ms"] == pytest.approx(expect[2.0], rel=1e-6)  # fitted elsewhere: misses by 1.2 ms
    assert out.loc[2.0, "measured_ms"] - out.loc[2.0, "predicted_ms"] == pytest.approx(1.2, rel=1e-6)


@pytest.mark.slow
def test_gpu_rows_are_calibrated_on_other_models_only():
    plat = verify.load_platform(GPU)
    out = verify.verify_platform(plat, include_hook=False)
    verify.check_disjoint(out)
    sync = out[out["group"] == "syncSGD"]
    assert (sync["holdout"] == "model").all()
    for r in sync.itertuples():
        assert r.calibrated_on and not any(c.startswith(r.model + " ") for c in r.calibrated_on.split("; "))
    ext = out[(out["variant"] == "extended") & (out["group"] != "syncSGD")]
    assert not (ext["compressor"] == "none").any()  # the identity compressor calibrates, it is not scored
    assert (ext["calibrated_on"].str.contains(" none ")).all()


# ------------------------------------------------------------------ arithmetic
def test_relative_error_and_summary_by_hand():
    assert verify.rel_error(110.0, 100.0) == pytest.approx(0.10)
    assert verify.rel_error(95.0, 100.0) == pytest.approx(-0.05)
    with pytest.raises(ValueError):
        verify.rel_error(1.0, 0.0)
    df = pd.DataFrame({"platform": "p", "group": "g", "variant": "v", "config": list("abcd"),
                       "predicted_ms": [101.0, 97.0, 110.0, 100.0], "measured_ms": [100.0] * 4})
    df["rel_error"] = verify.rel_error(df["predicted_ms"], df["measured_ms"])
    s = verify.summarize(df).iloc[0]
    assert s["n"] == 4
    assert s["median_abs_rel_error"] == pytest.approx(0.02)  # |e| = 1, 3, 10, 0 % -> median 2 %
    assert s["max_abs_rel_error"] == pytest.approx(0.10)
    assert s["worst_config"] == "c"
    assert s["mean_rel_error"] == pytest.approx((0.01 - 0.03 + 0.10) / 4)


def test_buckets_paper_and_ddp():
    assert verify.paper_buckets(100.0, 30.0) == [30.0, 30.0, 30.0, 10.0]
    assert verify.paper_buckets(10.0, 30.0) == [10.0]
    shapes = models.param_shapes("mlp_small")  # (128,40) (128) (128,128) (128) (10,128) (10)
    b = ddp_buckets(shapes, 0.01 * MIB)  # reverse order; a bucket closes once it holds >= 0.01 MiB
    assert [len(x) for x in b] == [4, 2]
    assert b[-1] == [(128,), (128, 40)]  # the first layer goes last
    assert len(ddp_buckets(shapes, None)) == 1
    vgg = models.param_shapes("vgg19")
    assert sum(len(x) for x in ddp_buckets(vgg, 1.0 * MIB)) == len(vgg)
    assert len(ddp_buckets(vgg, 1.0 * MIB)) < len(verify.paper_buckets(4 * models.numel("vgg19"), 2**20))


# ------------------------------------------------------------------ CLI
def test_cli_writes_the_csv_from_committed_records(tmp_path, capsys):
    rc = verify.main(["verify", "--records", str(GPU), "--out", str(tmp_path), "--no-hook"])
    assert rc == 0
    df = pd.read_csv(tmp_path / "predictions.csv.gz")
    assert set(verify.REQUIRED_COLUMNS) <= set(df.columns)
    assert len(df) >= 30 and df["predicted_ms"].gt(0).all() and df["measured_ms"].gt(0).all()
    assert ((df["predicted_ms"] - df["measured_ms"]) / df["measured_ms"] - df["rel_error"]).abs().max() < 1e-4
    summ = pd.read_csv(tmp_path / "summary.csv")
    assert {"median_abs_rel_error", "max_abs_rel_error", "n"} <= set(summ.columns)
    assert "syncSGD" in capsys.readouterr().out


def test_cli_via_dispatcher_and_bad_input(tmp_path, capsys):
    from studykit import cli

    assert cli.main(["verify", "--records", str(tmp_path / "missing"), "--out", str(tmp_path)]) == 2
    assert "verify:" in capsys.readouterr().err


def test_extended_fit_recovers_gamma_delta_and_per_bucket_cost(tmp_path):
    """Synthetic iterations T = O + gamma T_comp + delta + c (k-1) + T_comm(b_last) on three networks, two
    batch sizes and three bucket caps: the extended fit, leaving each network out, finds the constants."""
    gamma, delta, per_bucket, alpha = 1.2, 0.3e-3, 0.1e-3, 20e-6
    t_comp = {64: 3e-3, 256: 9e-3}
    o = 1e-3
    recs = []
    for bs, tc in t_comp.items():
        recs += [{"kind": "tcomp", "status": "ok", "model": "mlp_small", "batch_size": bs, "phase": "bwd",
                  "world_size": 1, "ms_median": tc * 1e3, "network": None},
                 {"kind": "ddp", "status": "ok", "model": "mlp_small", "batch_size": bs, "mode": "syncsgd",
                  "bucket_mb": None, "world_size": 1, "ms_median": (o + tc) * 1e3, "network": None}]
    shapes = models.param_shapes("mlp_small")
    for rate in (1.0, 2.0, 4.0):
        net = {"rate_gbps": rate, "workers": 2}
        bw = col.gbps_to_bytes_s(rate)
        recs += [{"kind": "sweep", "status": "ok", "op": "all_reduce", "size_bytes": 2**i, "world_size": 2,
                  "ms_median": 1e3 * float(col.ring_allreduce_s(2**i, 2, alpha, bw)), "network": net}
                 for i in range(8, 22)]
        for bs, tc in t_comp.items():
            for mb in (None, 0.01, 0.001):
                sizes = [verify._bucket_bytes(b) for b in ddp_buckets(shapes, None if mb is None else mb * MIB)]
                last = float(col.ring_allreduce_s(sizes[-1], 2, alpha, bw))
                t = o + gamma * tc + delta + per_bucket * (len(sizes) - 1) + last
                recs.append({"kind": "ddp", "status": "ok", "model": "mlp_small", "batch_size": bs, "mode": "syncsgd",
                             "bucket_mb": mb, "world_size": 2, "ms_median": t * 1e3, "network": net})
    _write(tmp_path / "r.jsonl", recs)
    out = verify.verify_platform(verify.load_platform(tmp_path), variants=["extended"])
    assert len(out) == 18 and (out["holdout"] == "network").all()
    verify.check_disjoint(out)
    assert out["gamma"].to_numpy() == pytest.approx(gamma, rel=0.02)
    assert out["delta_ms"].min() >= 0
    assert out["rel_error"].abs().max() < 0.02


# ------------------------------------------------------------------ extrapolation in p
def test_world_size_holdout_never_calibrates_on_p_above_2(tmp_path):
    """--holdout world_size: sweeps, DDP syncSGD and 'none' records at p=4 are poisoned (wrong by 10x);
    the p=4 predictions must come from p=2 constants only (Eq. 1 at p=4 with the p=2 alpha/BW, gamma of
    the p=2 iterations), and p=2 records are never scored."""
    gamma, alpha, rate, t_comp_ms, ws1_ms = 1.1, 20e-6, 1.0, 3.0, 4.5
    shapes = models.param_shapes("mlp_small")
    g_bytes = 4 * sum(math.prod(s) for s in shapes)
    bw = col.gbps_to_bytes_s(rate)
    recs = [{"kind": "tcomp", "status": "ok", "model": "mlp_small", "batch_size": 64, "phase": "bwd",
             "world_size": 1, "ms_median": t_comp_ms, "network": None},
            {"kind": "ddp", "status": "ok", "model": "mlp_small", "batch_size": 64, "mode": "syncsgd",
             "bucket_mb": None, "world_size": 1, "ms_median": ws1_ms, "network": None}]
    recs += [{"kind": "profile", "status": "ok", "model": "mlp_small", "compressor": c, "params": {},
              "phase": "reduce", "sim_world_size": 1, "world_size": 1, "ms_median": 0.2, "network": None}
             for c in ("none", "fp16")]

    def iteration(p, poison):
        t = ws1_ms / 1e3 + (gamma - 1) * t_comp_ms / 1e3 + float(col.ring_allreduce_s(g_bytes, p, alpha, bw))
        return 1e3 * t * poison

    for p, poison in ((2, 1.0), (4, 10.0)):
        net = {"rate_gbps": rate, "workers": p}
        for op, fn in (("all_reduce", col.ring_allreduce_s), ("all_gather", col.ring_allgather_s)):
            recs += [{"kind": "sweep", "status": "ok", "op": op, "size_bytes": 1024 * 4**i, "world_size": p,
                      "ms_median": 1e3 * poison * float(fn(1024 * 4**i, p, alpha, bw)), "network": net}
                     for i in range(8)]
        recs.append({"kind": "ddp", "status": "ok", "model": "mlp_small", "batch_size": 64, "mode": "syncsgd",
                     "bucket_mb": None, "world_size": p, "ms_median": iteration(p, poison), "network": net})
        for c in ("none", "fp16"):
            recs.append({"kind": "ddp", "status": "ok", "model": "mlp_small", "batch_size": 64, "mode": "post",
                         "compressor": c, "params": {}, "bucket_mb": None, "world_size": p,
                         "ms_median": 5.0 * poison, "network": net})
    _write(tmp_path / "r.jsonl", recs)
    out = verify.verify_platform(verify.load_platform(tmp_path), holdout="world_size")
    assert len(out) and (out["world_size"] == 4).all()  # only p=4 scored, p=2 only calibrates
    assert set(out["group"]) == {"syncSGD", "compressors (post)"}
    verify.check_world_size_holdout(out, 2)
    for r in out.itertuples():
        cal = [c.strip() for c in r.calibrated_on.split(";")]
        assert "sweep p<=2 1Gbps" in cal
        assert all(" p=4 " not in f" {c} " for c in cal), r.calibrated_on
        assert "sweep p<=2" in r.inputs and "Eq. 1" in r.inputs
    sync = out[(out["group"] == "syncSGD") & (out["variant"] == "paper")].iloc[0]
    assert sync.gamma == pytest.approx(gamma, rel=1e-6)  # from the p=2 iteration, not the poisoned p=4 one
    assert sync.predicted_ms == pytest.approx(iteration(4, 1.0), rel=1e-6)  # Eq. 1 at p=4, p=2 alpha/BW
    # the extended variant scores 'none' at p=4 too, calibrated on the p=2 'none' only
    ext = out[(out["variant"] == "extended") & (out["mode"] == "post")].set_index("compressor")
    assert set(ext.index) == {"none", "fp16"}
    assert ext.loc["none", "calibrated_on"].startswith("mlp_small b64 post none p=2 1Gbps")
    # the checker rejects a row calibrated on p=4 or scored at p=2
    bad = out.iloc[:1].copy()
    bad["calibrated_on"] = "mlp_small b64 syncsgd bucket=default p=4 1Gbps"
    with pytest.raises(AssertionError, match="not on p<=2"):
        verify.check_world_size_holdout(bad, 2)
    bad = out.iloc[:1].assign(world_size=2)
    with pytest.raises(AssertionError, match="inside the calibration range"):
        verify.check_world_size_holdout(bad, 2)


def test_cli_world_size_holdout_on_the_scaling_records(tmp_path):
    gpu4 = paths.MEASUREMENTS / "gpu4"
    rc = verify.main(["verify", "--records", str(gpu4), "--holdout", "world_size", "--out", str(tmp_path), "--quiet"])
    assert rc == 0
    df = pd.read_csv(tmp_path / "predictions.csv.gz")
    assert (df["world_size"] == 4).all() and df["calibrated_on"].str.contains("sweep p<=2").all()
    verify.check_world_size_holdout(df, 2)
    verify.check_disjoint(df)
    nets = pd.read_csv(tmp_path / "networks.csv")
    used4 = nets[(nets["world_size"] == 4) & nets["used"]]
    assert (used4["fitted_on"] == "sweep p<=2 native").all()


# ------------------------------------------------------------------ committed outputs (data/campaigns.toml)
CHECKS_B = paths.MEASUREMENTS / "gpu_checks_h200b"
_BW = paths.MEASUREMENTS / "bandwidth"
MANIFEST = datacli.load_manifest()
_VB = "verification/bandwidth/"
HOOK_FITTED = ["--hook-gamma", "fitted"]
#: the inputs of data/verification/bandwidth/README.md's hook-gamma, gamma-measured and p2m-hooks blocks
_BLOCK_ARGS = {m: MANIFEST.block(_VB + "README.md", m).kwargs for m in ("hook-gamma", "gamma-measured", "p2m-hooks")}
HOOK_GAMMA_CAMPAIGNS = tuple(c.removeprefix(datacli.ARCHIVE).removeprefix(_VB)
                             for c in _BLOCK_ARGS["hook-gamma"]["campaigns"])
GAMMA_MEASURED_CAMPAIGNS = tuple(c.removeprefix(_VB) for c in _BLOCK_ARGS["gamma-measured"]["campaigns"])
P2M_VARIANTS = {f.removeprefix(datacli.ARCHIVE).removeprefix(_VB): title
                for f, title in _BLOCK_ARGS["p2m-hooks"]["variants"]}


def _vb(sub: str) -> str:
    """The entry of data/verification/bandwidth/<sub>: there, or archived under data/archive/ (data/campaigns.toml)."""
    archived = datacli.ARCHIVE + _VB + sub
    return archived if archived in MANIFEST.entries else _VB + sub


def bandwidth_run(sub: str, records: bool = True) -> list[str]:
    """verify's arguments that wrote data/verification/bandwidth/<sub> (or its archived copy; data/campaigns.toml),
    ``--records ...`` first unless ``records`` is false."""
    return datacli.verify_args(MANIFEST.entries[_vb(sub)], records=records)


def _hook_errors(sub: str) -> tuple[int, float, float]:
    return readme_blocks.hook_errors(_vb(sub))


def test_the_manifest_lists_every_data_folder_and_names_only_existing_paths():
    assert datacli.unlisted(MANIFEST) == [], "give each of these an entry in data/campaigns.toml"
    assert datacli.dangling(MANIFEST) == []
    on_disk = {str(p.parent.relative_to(paths.DATA)) for top in (paths.DATA / "verification",
                                                                 paths.DATA / "archive" / "verification")
               for p in top.rglob("summary.csv")}
    assert on_disk == {p for p, e in MANIFEST.entries.items() if e.generator and e.generator["kind"] == "verify"}


def test_a_small_verification_folder_and_the_verification_readme_blocks_regenerate(capsys):
    """``data regen --check --only``: one small campaign's verification folder, and every generated block of
    data/verification's READMEs (their numbers against the committed summaries, which the slow test below
    regenerates from the records)."""
    from studykit import cli

    only = [_VB + "h200_p2e/path_model", "verification/README.md", _VB + "README.md"]
    rc = cli.main(["data", "regen", "--check", "--quiet", "--only", *only])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "13 files and blocks" in out and "0 differs, 0 missing" in out  # 4 CSVs, 2 + 7 blocks


@pytest.mark.slow
@pytest.mark.data
def test_every_generated_file_regenerates():
    """``python -m studykit data regen --check``: every generated folder, file and README block under data/."""
    outcomes = datacli.check(MANIFEST, progress=False)
    assert all(o.verdict in ("identical", "within tolerance") for o in outcomes), datacli.report(outcomes)


def test_summary_markdown_by_hand(tmp_path):
    pd.DataFrame([
        {"platform": "x", "group": "syncSGD", "variant": "paper", "n": 4, "median_abs_rel_error": 0.05,
         "max_abs_rel_error": 0.2, "mean_rel_error": 0.0, "worst_config": "a"},
        {"platform": "x", "group": "syncSGD", "variant": "extended", "n": 4, "median_abs_rel_error": 0.02,
         "max_abs_rel_error": 0.12, "mean_rel_error": 0.0, "worst_config": "a"},
    ]).to_csv(tmp_path / "summary.csv", index=False)
    md = verify.summary_markdown({"run": tmp_path})
    assert md.splitlines()[2] == "| run | syncSGD | 4 | 5.0 % / 20.0 % | 2.0 % / 12.0 % | 3.0 % / 10.0 % | median only |"


def test_cut_lines_are_reported_not_dropped_silently(tmp_path):
    """A line cut short by a killed run is skipped by the one reader and named in verify's notes."""
    import shutil

    from studykit import paths
    from studykit.perfmodel import verify as V

    for f in (paths.MEASUREMENTS / "cpu").glob("*.jsonl"):
        shutil.copy(f, tmp_path / f.name)
    with open(tmp_path / "ddp.jsonl", "a") as fh:
        fh.write('{"kind": "ddp", "cut')
    plat = V.load_platform(tmp_path)
    assert any("damaged line" in n and "ddp.jsonl" in n for n in plat.notes), plat.notes


# ------------------------------------------------------------------ --sweep-from
def _copy_kind(src: Path, dst: Path, kind: str, **override) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    with open(dst / "records.jsonl", "a") as out:
        for f in sorted(src.glob("*.jsonl")):
            for line in f.read_text().splitlines():
                r = json.loads(line)
                if r.get("kind") == kind:
                    out.write(json.dumps({**r, **override}) + "\n")


def test_sweep_from_refuses_a_folder_with_sweeps_of_its_own():
    bw = paths.MEASUREMENTS / "bandwidth"
    with pytest.raises(ValueError, match="has collective sweeps of its own"):
        verify.load_platform(bw / "h200_p2", sweep_from=bw / "h200_p4")


def test_sweep_from_refuses_another_card_and_an_empty_folder(tmp_path):
    bw = paths.MEASUREMENTS / "bandwidth"
    _copy_kind(bw / "h200_p2b", tmp_path / "mine", "ddp")
    _copy_kind(bw / "h200_p2", tmp_path / "h100", "sweep", gpu="NVIDIA H100 80GB HBM3")
    with pytest.raises(ValueError, match=r"ran on \['NVIDIA H100 80GB HBM3'\].*same card kind"):
        verify.load_platform(tmp_path / "mine", sweep_from=tmp_path / "h100")
    _copy_kind(bw / "h200_p2", tmp_path / "nosweep", "tcomp")
    with pytest.raises(ValueError, match="no sweep records there"):
        verify.load_platform(tmp_path / "mine", sweep_from=tmp_path / "nosweep")


def test_sweep_from_borrows_and_says_so():
    bw = paths.MEASUREMENTS / "bandwidth"
    plat = verify.load_platform(bw / "h200_p2b", sweep_from=bw / "h200_p2")
    assert len(plat.sweep) > 0 and set(plat.sweep["gpu"]) == {"NVIDIA H200"}
    assert any("borrowed from" in n for n in plat.notes)


def test_verify_without_a_sweep_names_the_way_out(capsys, tmp_path):
    rc = verify.main(["verify", "--records", str(paths.MEASUREMENTS / "bandwidth" / "h200_p2b"), "--holdout",
                      "network", "--network-from", "probe", "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "--sweep-from" in err and "no sweep records" in err
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ --inputs-from, --encode-decode-from host_ahead
def test_inputs_from_keeps_the_folders_own_measurement_of_a_configuration(tmp_path):
    bw = paths.MEASUREMENTS / "bandwidth"
    _copy_kind(bw / "h200_p2c", tmp_path / "mine", "ddp")
    _copy_kind(bw / "h200_p2", tmp_path / "mine", "tcomp", ms_median=12345.0)  # the folder's own, marked
    plat = verify.load_platform(tmp_path / "mine", inputs_from=[bw / "h200_p2"])
    n_tcomp = sum(1 for line in (bw / "h200_p2" / "tcomp.jsonl").read_text().splitlines() if line.strip())
    assert len(plat.tcomp) == n_tcomp and (plat.tcomp["ms_median"] == 12345.0).all()  # none of the borrowed ones
    note = next(n for n in plat.notes if "borrowed from" in n)
    assert f"{n_tcomp} skipped" in note and "measured those configurations itself" in note
    # the sweeps of --sweep-from are one set: a folder with its own is still refused
    with pytest.raises(ValueError, match="has collective sweeps of its own"):
        verify.load_platform(bw / "h200_p2", sweep_from=bw / "h200_p4")


def test_inputs_from_refuses_another_card_and_an_empty_folder(tmp_path):
    bw = paths.MEASUREMENTS / "bandwidth"
    _copy_kind(bw / "h200_p2c", tmp_path / "mine", "ddp")
    _copy_kind(bw / "h200_p2", tmp_path / "h100", "tcomp", gpu="NVIDIA H100 80GB HBM3")
    with pytest.raises(ValueError, match=r"ran on \['NVIDIA H100 80GB HBM3'\].*same card kind"):
        verify.load_platform(tmp_path / "mine", inputs_from=[tmp_path / "h100"])
    _copy_kind(bw / "h200_p2", tmp_path / "sweeps", "sweep")
    with pytest.raises(ValueError, match="no tcomp, profile or copy_bw records there"):
        verify.load_platform(tmp_path / "mine", inputs_from=[tmp_path / "sweeps"])


def test_inputs_from_borrows_single_device_records_and_says_so():
    bw = paths.MEASUREMENTS / "bandwidth"
    plat = verify.load_platform(bw / "h200_p2c", inputs_from=[bw / "h200_p2", CHECKS_B])
    assert len(plat.tcomp) > 0 and len(plat.profile) > 0 and len(plat.sweep) == 0
    assert sum("single-device records borrowed from" in n for n in plat.notes) == 2


def _profile_rows(**phases):
    return pd.DataFrame([{"model": "m", "compressor": "c", "params_key": "{}", "phase": ph, "sim_world_size": 1,
                          "ms_median": ms} for ph, ms in phases.items()])


def _record_inputs(profile, host_ahead):
    from studykit.perfmodel.fit import RecordInputs
    empty = pd.DataFrame(columns=["kind", "model", "batch_size", "phase", "ms_median", "world_size", "mode",
                                  "bucket_mb", "network", "rate_gbps"])
    return RecordInputs(empty, empty, empty, profile, "ms_median", host_ahead=host_ahead)


def test_encode_decode_host_ahead_takes_the_phase_then_its_profile_then_the_whole_gradient():
    both = _profile_rows(reduce=4.0, reduce_buckets=6.0, reduce_host_ahead=1.0, reduce_buckets_host_ahead=2.0)
    assert _record_inputs(both, False).encode_decode("m", "c", "{}", 2, phase="reduce_buckets")[0] == 6e-3
    ha = _record_inputs(both, True)
    assert ha.encode_decode("m", "c", "{}", 2, phase="reduce_buckets")[0] == 2e-3
    assert ha.encode_decode("m", "c", "{}", 2)[0] == 1e-3
    # no per-bucket host-ahead record (PowerSGD rank 32's timing failed: a full launch queue): the per-bucket
    # profile with its launch gaps, said in `how`; without that either, the whole gradient's host-ahead time
    t, how = _record_inputs(_profile_rows(reduce_buckets=6.0, reduce_host_ahead=1.5), True).encode_decode(
        "m", "c", "{}", 2, phase="reduce_buckets")
    assert t == 6e-3 and "reduce_buckets" in how and "no host-ahead record" in how
    t, how = _record_inputs(_profile_rows(reduce=4.0, reduce_host_ahead=1.5), True).encode_decode(
        "m", "c", "{}", 2, phase="reduce_buckets")
    assert t == 1.5e-3 and "reduce_host_ahead" in how
    t, how = _record_inputs(_profile_rows(reduce=4.0), True).encode_decode("m", "c", "{}", 2)
    assert t == 4e-3 and "no host-ahead record" in how
    # the identity compressor encodes nothing: scorable without a profile, its profile where it has one
    none = {"model": "m", "compressor": "none", "params_key": "{}", "mode": "hook"}
    assert verify._encode_decode(_record_inputs(_profile_rows(reduce=4.0), False), none, 2) == (
        0.0, "no encode/decode (identity compressor, no profile record)")
    prof = _profile_rows(reduce=4.0).assign(compressor="none")
    assert verify._encode_decode(_record_inputs(prof, False), none, 2)[0] == 4e-3


# ------------------------------------------------------------------ --pool
def test_pool_needs_a_name_and_one_card_kind(tmp_path):
    bw = paths.MEASUREMENTS / "bandwidth"
    with pytest.raises(ValueError, match="with a name for it"):
        verify.load_platform([bw / "h200_p2", bw / "h200_p2b"])
    _copy_kind(bw / "h200_p2b", tmp_path / "h100", "ddp", gpu="NVIDIA H100 80GB HBM3")
    with pytest.raises(ValueError, match="must come from one card kind.*NVIDIA H100"):
        verify.load_platform([bw / "h200_p2", tmp_path / "h100"], name="mixed")


def test_pool_is_one_platform_of_every_folders_records():
    bw = paths.MEASUREMENTS / "bandwidth"
    plat = verify.load_platform([bw / "h200_p2", bw / "h200_p2b"], name="both")
    a, b = verify.load_platform(bw / "h200_p2"), verify.load_platform(bw / "h200_p2b")
    assert plat.name == "both" and set(plat.ddp["model"]) == set(a.ddp["model"]) | set(b.ddp["model"])
    assert len(plat.sweep) == len(a.sweep) and len(plat.ddp) == len(a.ddp) + len(b.ddp)


# ------------------------------------------------------------------ measured bucket ready times
def test_ready_fractions_come_from_other_rates_only():
    """``buckets`` records stand in for the bytes assumption: the element-wise median over the *other* rates of
    the same model, batch, bucket size and world size (the scored run's own record is never read)."""
    from studykit.perfmodel.fit import RecordInputs

    b = pd.DataFrame([{"model": "m", "batch_size": 8, "bucket_mb": None, "world_size": 2, "rate_gbps": x,
                       "ready_fraction": fr} for x, fr in ((1.0, [0.1, 1.0]), (5.0, [0.3, 1.0]), (10.0, [0.9, 1.0]),
                                                           (25.0, [0.2, 1.0]))])
    plat = verify.load_platform(paths.MEASUREMENTS / "bandwidth" / "h200_p4")  # any platform: only its buckets vary

    def inputs(buckets):
        return RecordInputs(plat.tcomp, plat.ddp, plat.sweep, plat.profile, "ms_median", buckets=buckets)

    got, how = inputs(b).ready_fractions("m", 8, None, 2, 10.0)
    assert got == (0.2, 1.0) and "3 buckets records at other rates" in how  # 1, 5 and 25 Gbit/s, not 10's 0.9
    assert inputs(b).ready_fractions("m", 8, float("nan"), 2, 10.0)[0] == (0.2, 1.0)  # NaN bucket: DDP's default
    assert inputs(b).ready_fractions("m", 8, 100.0, 2, 10.0) == (None, "")  # no records of that bucket size
    # the other rates disagree on the number of buckets: no measured times, the bytes assumption
    mixed = pd.concat([b, b.assign(rate_gbps=2.5, ready_fraction=[[0.2, 0.5, 1.0]] * 4)])
    assert inputs(mixed).ready_fractions("m", 8, None, 2, 10.0) == (None, "")


def test_measured_gamma_by_hand():
    """gamma as the paper measures it: the last bucket's device ready time (median over the configuration's buckets
    records at that rate) over T_comp; records timed on the host clock, or of another rate, do not count."""
    from studykit.perfmodel.fit import RecordInputs

    plat = verify.load_platform(paths.MEASUREMENTS / "bandwidth" / "h200_p4")
    (m, bs), t_comp = next(iter(RecordInputs(plat.tcomp, plat.ddp, plat.sweep, plat.profile, "ms_median").t_comp.items()))
    last = 1e3 * t_comp  # ms
    b = pd.DataFrame([{"model": m, "batch_size": bs, "bucket_mb": None, "world_size": 2, "rate_gbps": 10.0,
                       "ready_ms": [0.3 * last, f * last], "clock": "cuda_event"} for f in (1.04, 1.10, 1.06)]
                     + [{"model": m, "batch_size": bs, "bucket_mb": None, "world_size": 2, "rate_gbps": 10.0,
                         "ready_ms": [0.3 * last, 9.0 * last], "clock": "perf_counter"},  # host clock: not the device's
                        {"model": m, "batch_size": bs, "bucket_mb": None, "world_size": 2, "rate_gbps": 25.0,
                         "ready_ms": [0.3 * last, 1.5 * last], "clock": "cuda_event"}])
    inp = RecordInputs(plat.tcomp, plat.ddp, plat.sweep, plat.profile, "ms_median", buckets=b)
    assert inp.measured_gamma(m, bs, None, 2, 10.0) == pytest.approx(1.06)
    assert inp.measured_gamma(m, bs, float("nan"), 2, 25.0) == pytest.approx(1.5)
    assert inp.measured_gamma(m, bs, None, 2, 5.0) is None and inp.measured_gamma(m, bs, 100.0, 2, 10.0) is None
    assert inp.measured_gamma("no_such_model", bs, None, 2, 10.0) is None


def test_gamma_from_buckets_measures_gamma_and_fits_the_rest_at_it(tmp_path):
    """verify --gamma-from buckets: every syncSGD row's gamma is the grid value nearest the median measured gamma of
    its calibration records (the other rates), said in its inputs; without buckets records the fit stays."""
    from studykit.perfmodel.fit import GAMMA_GRID, RecordInputs

    folder, args = _BW / "h200_p2n", bandwidth_run("h200_p2n/path_model", records=False)
    out = tmp_path / "measured"
    assert verify.main(["verify", "--records", str(folder), *args, "--gamma-from", "buckets",
                        "--out", str(out), "--quiet"]) == 0
    d = pd.read_csv(out / "predictions.csv.gz")
    sync = d[(d["variant"] == "extended") & (d["mode"] == "syncsgd")]
    assert sync["inputs"].str.contains("measured (median last-bucket ready / T_comp of 6 buckets record(s)",
                                       regex=False).all()
    plat = verify.load_platform(folder, inputs_from=args[args.index("--inputs-from") + 1:args.index("--encode-decode-from")])
    inp = RecordInputs(plat.tcomp, plat.ddp, plat.sweep, plat.profile, "ms_median", buckets=plat.buckets)
    for rate, g in sync.groupby("rate_gbps")["gamma"]:
        train = [inp.measured_gamma("bert_base", 16, mb, 2, x) for x in (2.5, 5.0, 10.0, 25.0) if x != rate
                 for mb in (None, 100.0)]
        want = GAMMA_GRID[abs(GAMMA_GRID - float(pd.Series(train).median())).argmin()]
        assert (g == want).all(), rate
    with pytest.raises(SystemExit):
        verify.main(["verify", "--records", str(folder), "--gamma-from", "nvtx", "--out", str(tmp_path / "x")])
    # a campaign without buckets records: gamma fitted as before, and the row says why
    out = tmp_path / "p2"
    assert verify.main(["verify", *bandwidth_run("h200_p2"), "--gamma-from", "buckets", "--out", str(out),
                        "--quiet"]) == 0
    base = pd.read_csv(paths.DATA / "verification" / "bandwidth" / "h200_p2" / "predictions.csv.gz")
    new = pd.read_csv(out / "predictions.csv.gz")
    pd.testing.assert_series_equal(new["predicted_ms"], base["predicted_ms"])
    ext = new[(new["variant"] == "extended") & (new["mode"] == "syncsgd")]
    assert ext["inputs"].str.contains("--gamma-from buckets: no buckets record", regex=False).all()


def test_verify_uses_measured_ready_times_where_recorded():
    rows = pd.read_csv(paths.DATA / "verification" / "bandwidth" / "h200_p2b" / "predictions.csv.gz")
    sync = rows[(rows["variant"] == "extended") & (rows["mode"] == "syncsgd")]
    assert sync["inputs"].str.contains("bucket ready times measured").all()
    p2 = pd.read_csv(paths.DATA / "verification" / "bandwidth" / "h200_p2" / "predictions.csv.gz")
    assert not p2["inputs"].str.contains("bucket ready times measured").any()  # h200_p2 has no buckets records


def test_implied_encode_decode_by_hand():
    rows = [{"variant": "extended", "mode": "post", "model": "m", "compressor": "c", "params": '{"rank": 4}',
             "measured_ms": ms, "overhead_ms": 1.0, "t_comp_ms": 10.0, "t_comm_ms": comm, "t_encode_decode_ms": 6.0,
             "rel_error": err} for ms, comm, err in ((20.0, 5.0, 0.1), (17.0, 3.0, -0.2), (30.0, 14.0, 0.05))]
    rows.append(dict(rows[0], variant="paper", measured_ms=99.0))  # another variant: not counted
    rows.append(dict(rows[0], mode="hook", measured_ms=99.0))      # another mode: not counted
    t = verify.implied_encode_decode(pd.DataFrame(rows))
    assert len(t) == 1
    r = t.iloc[0]
    assert r.n == 3 and r.profiled_ms == 6.0
    assert r.implied_ms == 4.0  # median of 20-1-10-5=4, 17-1-10-3=3, 30-1-10-14=5
    assert r.implied_over_profiled == pytest.approx(4.0 / 6.0) and r.max_abs_rel_error == pytest.approx(0.2)
    assert "| m | c | rank 4 | 3 | 6.00 | 4.00 | 0.67 | 20.0 % |" in verify.implied_encode_decode_markdown(t)
    with pytest.raises(ValueError, match=r"lack column\(s\) \['t_comm_ms'\]"):
        verify.implied_encode_decode(pd.DataFrame(rows).drop(columns="t_comm_ms"))


def test_coalesce_picks_by_hand():
    def row(config, predicted, measured, rate=5.0, **kw):
        return dict({"variant": "extended", "mode": "hook", "config": config, "model": "m", "batch_size": 8,
                     "compressor": "powersgd", "world_size": 2, "rate_gbps": rate, "predicted_ms": predicted,
                     "measured_ms": measured}, **kw)
    base = "m b8 hook powersgd {{rank:4}}{} runner=graph p=2 {}Gbps"
    rows = [row(base.format("", 5), 40.0, 48.0),                       # per bucket: predicted fastest
            row(base.format(" coalesce=100MB", 5), 41.0, 42.0),        # 100 MB: measured fastest
            row(base.format(" coalesce=0MB", 5), 45.0, 45.0),          # once per iteration
            row(base.format(" coalesce=0MB", 25), 30.0, 33.0, rate=25.0),  # predicted as fast as per bucket:
            row(base.format("", 25), 30.0, 30.0, rate=25.0),                 # the tie goes to per bucket, right
            row(base.format("", 1), 60.0, 60.0, rate=1.0),             # one setting only: no choice to score
            row(base.format("", 5), 1.0, 99.0, variant="paper"),       # another variant: not read
            row(base.format("", 5).replace("hook", "post"), 1.0, 99.0, mode="post")]
    t = verify.coalesce_picks(pd.DataFrame(rows)).set_index("rate_gbps")
    assert sorted(t.index) == [5.0, 25.0] and list(t["settings"].loc[[5.0, 25.0]]) == [3, 2]
    assert t.loc[5.0, "fastest"] == "100 MB" and t.loc[5.0, "pick"] == "per bucket"
    assert t.loc[5.0, "pick_over_fastest"] == pytest.approx(48.0 / 42.0)
    assert t.loc[5.0, "measured"] == {"per bucket": 48.0, "100 MB": 42.0, "per iteration": 45.0}
    assert t.loc[25.0, "fastest"] == t.loc[25.0, "pick"] == "per bucket" and t.loc[25.0, "pick_over_fastest"] == 1.0
    md = verify.coalesce_picks_markdown(t.reset_index())
    assert "| 25 | 2 | m b8 | powersgd | 30.0 / 30.0 |  | 33.0 / 30.0 | per bucket | per bucket | 1.00 |" in md
    assert "| 5 | 2 | m b8 | powersgd | 48.0 / 40.0 | 42.0 / 41.0 | 45.0 / 45.0 | 100 MB | per bucket | 1.14 |" in md
    assert "fastest coalescing for 1 of 2 hooks; its picks took at most 1.14x the fastest (median 1.07x)" in md
    assert "per bucket: measured / predicted ms | 100 MB: measured / predicted ms | per iteration:" in md
    assert "No hook" in verify.coalesce_picks_markdown(verify.coalesce_picks(pd.DataFrame(rows[5:6])))


def test_hook_runner_readme_reading_of_the_coalescing_picks_holds():
    """data/verification/hook_runner/README.md's and docs/findings.md's reading of the coalesce-picks block."""
    folder = paths.DATA / "verification" / "hook_runner" / "h200_p2_coalesce"
    t = verify.coalesce_picks(verify.read_predictions(folder))
    # the model picks per bucket, the default, for every hook it scored
    assert len(t) == 6 and (t["pick"] == "per bucket").all()
    # it predicts per bucket and 100 MB groups alike on BERT-base's 5 and 25 Gbit/s links
    bert = t[t["model"] == "bert_base"].set_index("rate_gbps")
    for rate in (5.0, 25.0):
        assert bert.loc[rate, "predicted"]["per bucket"] == pytest.approx(bert.loc[rate, "predicted"]["100 MB"],
                                                                            rel=1e-3)
    # its one costly pick: BERT-base at 5 Gbit/s, whose per-bucket hook was slower than at 25 Gbit/s
    costly = t[t["pick_over_fastest"] > 1.05]
    assert list(zip(costly["model"], costly["rate_gbps"])) == [("bert_base", 5.0)]
    assert bert.loc[5.0, "measured"]["per bucket"] > bert.loc[25.0, "measured"]["per bucket"]
    # findings: post within its target, the hooks not, worst on BERT-base's per-bucket hook at 1 Gbit/s
    s = pd.read_csv(folder / "summary.csv").set_index(["group", "variant"])
    assert s.loc[("compressors (post)", "extended"), "median_abs_rel_error"] <= 0.03
    assert s.loc[("compressors (post)", "extended"), "max_abs_rel_error"] <= 0.10
    worst = s.loc[("compressors (hook)", "extended")]
    assert worst["max_abs_rel_error"] > 0.15 and "coalesce" not in worst["worst_config"]
    assert worst["worst_config"].startswith("bert_base b16 hook") and worst["worst_config"].endswith("p=2 1Gbps")


def test_bandwidth_readme_reading_of_the_implied_encode_decode_holds():
    """data/verification/bandwidth/README.md's reading of its implied-ed block (the block itself: data regen)."""
    folder = paths.DATA / "verification" / "bandwidth"
    t = verify.implied_encode_decode(pd.read_csv(folder / "h200_p2_all" / "predictions.csv.gz"), worst=8)
    # the README's reading: calibrating encode/decode on post iterations lowers the post-backward maxima
    for base in ("h200_p2_all", "h200_p4"):
        for sub in ("", "/holdout_model"):
            def worst(f):
                t = pd.read_csv(folder / f / "summary.csv")
                return t[(t["variant"] == "extended") & (t["group"] == "compressors (post)")]["max_abs_rel_error"].iloc[0]
            assert worst(f"{base}{sub}/ed_iterations") < worst(f"{base}{sub}"), (base, sub)
    # the README's reading: the worst rows are PowerSGD, whose profile overstates the iteration's cost 2-3x
    top = t.head(3)
    assert (top["compressor"] == "powersgd").all() and (top["implied_over_profiled"] < 0.5).all()


def test_encode_decode_scale_is_fitted_on_other_holdout_groups_by_hand(monkeypatch):
    # every record predicted at 50 ms of which 10 ms encode/decode: the implied ratio is (measured - 40) / 10
    monkeypatch.setattr(verify.scoring, "_predict_record", lambda x, *a, **k: {"t_encode_decode_ms": 10.0, "predicted_ms": 50.0})

    def rec(model, rate, ms, compressor="powersgd", pkey="rank=4"):
        return {"config": f"{model} {compressor} {pkey} {rate}", "model": model, "batch_size": 64, "compressor": compressor,
                "params_key": pkey, "measured_ms": ms, "rate": rate}
    posts = [rec("a", 1, 44.0), rec("a", 2, 45.0), rec("a", 3, 47.0), rec("b", 1, 49.0), rec("b", 2, 50.0)]
    scale_of = verify._ed_scales(posts, inp=None, opts=None, group_of=lambda r: r["rate"])
    (s, how), cal = scale_of(rec("a", 3, 0.0))  # rate 3 held out: a's rates 1 and 2 -> ratios 0.4, 0.5
    assert s == pytest.approx(0.45) and "2 post iterations, same model" in how and len(cal) == 2
    (s, how), _ = scale_of(rec("c", 1, 0.0))  # a model without post records: other models at other rates
    assert s == pytest.approx(0.7) and "other models" in how  # a@2 0.5, a@3 0.7, b@2 1.0
    (s, how), cal = scale_of(rec("a", 1, 0.0, compressor="topk", pkey="ratio=0.01"))
    assert s == 1.0 and "as profiled" in how and cal == []
    # no holdout groups (world-size holdout): every other record of the same configuration counts
    (s, _), cal = verify._ed_scales(posts, inp=None, opts=None, group_of=None)(posts[0])
    assert s == pytest.approx(0.6) and len(cal) == 2  # a@2 0.5, a@3 0.7
    monkeypatch.setattr(verify.scoring, "_predict_record", lambda x, *a, **k: {"t_encode_decode_ms": 10.0, "predicted_ms": 99.0})
    (s, _), _ = verify._ed_scales(posts, inp=None, opts=None, group_of=None)(posts[0])
    assert s == 0.0  # a negative implied encode/decode is clamped at 0


def test_encode_decode_from_must_be_known():
    with pytest.raises(ValueError, match=r"encode_decode_from must be one of \('profile', 'iterations', "
                                         r"'host_ahead', 'buckets'\), got 'both'"):
        verify.verify_platform(None, encode_decode_from="both")
    with pytest.raises(ValueError, match=r"hook_gamma must be one of \('fitted', 'one'\), got 'two'"):
        verify.verify_platform(None, hook_gamma="two")


# ------------------------------------------------------------------ --path-overhead-from
def _po_rec(model, rate, compressor, measured, base):
    return {"model": model, "batch_size": 8, "mode": "post", "compressor": compressor, "params_key": "{}",
            "bucket_mb": None, "world_size": 2, "rate_gbps": rate, "measured_ms": measured, "config":
            f"{model} {compressor} {rate}", "_base": base}


def _po_rows(monkeypatch, recs, same_model):
    def fake_predict(r, inp, variant, terms=None, path_overhead_s=0.0, opts=None, ed_scale=(1.0, "")):
        return {"predicted_ms": r["_base"] + path_overhead_s * 1e3, "k_buckets": 2, "inputs": "inputs"}
    monkeypatch.setattr(verify.scoring, "_predict_record", fake_predict)
    plat = type("P", (), {"name": "p"})()
    rows = verify._extended_compressed(recs, None, plat, "post", group_of=lambda r: r["rate_gbps"],
                                       same_model=same_model)
    return {f"{row['model']} {row['compressor']} {row['rate_gbps']}": row for row in rows}


def test_path_overhead_from_model_is_the_median_residual_of_the_same_model_at_other_rates(monkeypatch):
    # residuals (measured - base): model a: 1, 2, 9 ms at rates 1, 2, 3 (none at rate 3: 50 ms of comm error);
    # model b: 100 ms everywhere (another model's records never calibrate a's)
    recs = [_po_rec("a", 1.0, "topk", 11.0, 10.0), _po_rec("a", 2.0, "topk", 12.0, 10.0),
            _po_rec("a", 3.0, "topk", 19.0, 10.0), _po_rec("a", 3.0, "none", 150.0, 100.0),
            _po_rec("b", 1.0, "topk", 110.0, 10.0), _po_rec("b", 2.0, "topk", 110.0, 10.0)]
    rows = _po_rows(monkeypatch, recs, same_model=True)
    # a topk at rate 1: the other rates' a records (2, 9, 50 ms): median 9
    assert rows["a topk 1.0"]["predicted_ms"] == pytest.approx(10.0 + 9.0)
    assert "from 3 'post' records of a in holdout groups 2.0, 3.0" in rows["a topk 1.0"]["inputs"]
    assert rows["a topk 3.0"]["predicted_ms"] == pytest.approx(10.0 + 1.5)  # rates 1, 2: median of 1 and 2
    assert rows["b topk 1.0"]["predicted_ms"] == pytest.approx(10.0 + 100.0)
    # the default: the identity compressor's run at the other rates (a's only `none` is at rate 3)
    rows = _po_rows(monkeypatch, recs, same_model=False)
    assert rows["a topk 1.0"]["predicted_ms"] == pytest.approx(10.0 + 50.0)
    assert "'post none'" in rows["a topk 1.0"]["inputs"]


def test_the_per_bucket_fallback_says_when_its_records_differ_in_buckets(monkeypatch):
    """No 'none' record: the path overhead is fitted per bucket on the other rates' records. Where those hold hooks
    of different bucket or group counts (coalesced hooks), verify says that this form misses and what fits better."""
    def fake_predict(r, inp, variant, terms=None, path_overhead_s=0.0, opts=None, ed_scale=(1.0, "")):
        return {"predicted_ms": r["_base"] + path_overhead_s * 1e3, "k_buckets": r["_k"], "inputs": "inputs"}
    monkeypatch.setattr(verify.scoring, "_predict_record", fake_predict)

    def recs(ks):
        out = []
        for rate in (1.0, 2.0):
            for i, k in enumerate(ks):
                r = _po_rec("a", rate, f"powersgd{i}", 10.0 + k, 10.0)  # 1 ms of residual per bucket
                out.append(dict(r, mode="hook", _k=k))
        return out

    for ks, said in (((14, 1), True), ((14, 14), False)):
        plat = type("P", (), {"name": "p", "notes": []})()
        rows = verify._extended_compressed(recs(ks), None, plat, "hook", group_of=lambda r: r["rate_gbps"])
        assert [row["predicted_ms"] for row in rows] == pytest.approx([10.0 + k for k in ks] * 2)
        assert "per bucket" in rows[0]["inputs"]
        notes = [n for n in plat.notes if "--path-overhead-from model" in n]
        assert len(notes) == int(said), (ks, plat.notes)
        if said:
            assert notes[0].startswith("hook: no identity-compressor ('none') record") and "1 to 14 buckets" in notes[0]


def test_path_overhead_from_must_be_known():
    with pytest.raises(ValueError, match=r"path_overhead_from must be one of \('identity', 'model'\), got 'x'"):
        verify.verify_platform(verify.load_platform(paths.MEASUREMENTS / "bandwidth" / "h200_p2b", sweep_from=paths
                                                    .MEASUREMENTS / "bandwidth" / "h200_p2"), path_overhead_from="x")


@pytest.mark.slow
def test_a_campaign_with_a_round2_folder_scores_as_its_rounds_pooled(tmp_path):
    """scripts/gpu_bandwidth.sh ROUNDS=2 writes round 2 into <campaign>/round2/: verify reads it with the campaign
    and pools each configuration's two records, as --pool does for two sibling folders (h200_p2f_pooled)."""
    import shutil

    camp = tmp_path / "h200_p2f"
    shutil.copytree(paths.MEASUREMENTS / "bandwidth" / "h200_p2f", camp)
    shutil.copytree(paths.MEASUREMENTS / "bandwidth" / "h200_p2f_repeat", camp / "round2")
    args = bandwidth_run("h200_p2f/path_model", records=False)
    assert verify.main(["verify", "--records", str(camp), *args, "--out", str(tmp_path / "v"), "--quiet"]) == 0
    new = pd.read_csv(tmp_path / "v" / "predictions.csv.gz")
    old = pd.read_csv(paths.DATA / "verification" / "bandwidth" / "h200_p2f_pooled" / "path_model" / "predictions.csv.gz")
    assert len(new) == len(old) and (new["n_records"] == 2).sum() == (old["n_records"] == 2).sum() > 0
    pd.testing.assert_series_equal(new["predicted_ms"], old["predicted_ms"], rtol=1e-9)
    pd.testing.assert_series_equal(new["measured_ms"], old["measured_ms"], rtol=1e-9)


@pytest.mark.slow
def test_vgg19_hooks_without_the_gamma_rule_are_what_the_readme_says(tmp_path, monkeypatch):
    """data/verification/bandwidth/README.md: scored without GAMMA_MIN_SENSITIVITY, h200_p2i's gamma swings between the
    grid's lower edge and 1.7 or more from one held-out rate to the next and the hooks' median error is over 25 %; with it, gamma is 1 and says
    why, and no calibration record of VGG19's syncSGD moves by even 1 % over the grid."""
    from studykit.perfmodel import fit

    run = ["verify", *bandwidth_run("h200_p2i/path_model"), *HOOK_FITTED, "--quiet"]  # the hooks at syncSGD's gamma
    monkeypatch.setattr(fit.inputs, "GAMMA_MIN_SENSITIVITY", 0.0)
    assert verify.main(run + ["--out", str(tmp_path / "free")]) == 0
    free = pd.read_csv(tmp_path / "free" / "predictions.csv.gz")
    hooks = free[(free["variant"] == "extended") & (free["mode"] == "hook")]
    assert hooks["abs_rel_error"].median() > 0.25
    assert hooks["gamma"].min() == fit.GAMMA_GRID[0] and hooks["gamma"].max() >= 1.7
    monkeypatch.setattr(fit.inputs, "GAMMA_MIN_SENSITIVITY", 0.02)
    committed = pd.read_csv(paths.DATA / _vb("h200_p2i/path_model") / "predictions.csv.gz")
    ch = committed[(committed["variant"] == "extended") & (committed["mode"] == "hook")]
    assert ch["inputs"].str.contains("gamma=1.000 (not identifiable", regex=False).all()
    moved = ch["inputs"].str.extract(r"at most ([0-9.]+)%")[0].astype(float)
    assert (moved < 1.0).all()
    assert ch["abs_rel_error"].median() <= 0.05


def _fitted_gamma_hook_errors(sub: str, tmp_path) -> tuple[float, float]:
    """Hook rows' median and max |error| of ``<sub>/path_model`` scored with syncSGD's fitted gamma for hooks
    (``--hook-gamma fitted``, the default when the README's older sections were written)."""
    out = tmp_path / sub
    assert verify.main(["verify", *bandwidth_run(f"{sub}/path_model"), *HOOK_FITTED, "--out", str(out), "--quiet"]) == 0
    s = pd.read_csv(out / "summary.csv")
    row = s[(s["variant"] == "extended") & (s["group"] == "compressors (hook)")].iloc[0]
    return float(row["median_abs_rel_error"]), float(row["max_abs_rel_error"])


def test_verification_readme_reading_of_the_two_round_calls_holds(tmp_path):
    """data/verification/bandwidth/README.md on h200_p2h (written with the fitted gamma for hooks): round 2 alone
    meets both hook targets, round 1 alone neither; pooled, the median is just above 5 % and the maximum above 15 %."""
    text = " ".join((paths.DATA / "verification" / "bandwidth" / "README.md").read_text().split())

    def hooks(sub):
        return _fitted_gamma_hook_errors(sub, tmp_path)

    assert "round 2 alone meets both targets, round 1 alone neither" in text
    med, mx = hooks("h200_p2h_repeat")
    assert med <= 0.05 and mx <= 0.15
    med, mx = hooks("h200_p2h")
    assert med > 0.05 and mx > 0.15
    med, mx = hooks("h200_p2h_pooled")
    assert 0.05 < med < 0.055 and mx > 0.15 and "pooled the median is just above the target" in text


def test_verification_readme_reading_of_the_fp16_hooks_after_the_warmup_fix_holds(tmp_path):
    """data/verification/bandwidth/README.md on h200_p2k/h200_p2l (written with the fitted gamma for hooks): both
    targets met pooled and on every round alone but h200_p2k_repeat (median just above 5 %, maximum within 15 %)."""
    text = " ".join((paths.DATA / "verification" / "bandwidth" / "README.md").read_text().split())

    def hooks(sub):
        return _fitted_gamma_hook_errors(sub, tmp_path)

    assert "meets both hook targets on both campaigns pooled, and on each round alone but ResNet-50's second" in text
    for sub in ("h200_p2k", "h200_p2k_pooled", "h200_p2l", "h200_p2l_repeat", "h200_p2l_pooled"):
        med, mx = hooks(sub)
        assert med <= 0.05 and mx <= 0.15, sub
    med, mx = hooks("h200_p2k_repeat")
    assert 0.05 < med < 0.06 and mx <= 0.15



def test_docs_verify_quotes_h200_p2f_pooled_as_scored():
    """docs/verify.md's h200_p2f pooled hook scores: today's default (gamma 1) and syncSGD's fitted gamma."""
    text = " ".join((paths.ROOT / "docs" / "verify.md").read_text().split())
    _, med, mx = _hook_errors("h200_p2f_pooled/path_model")
    _, _, mx_fit = _hook_errors("h200_p2f_pooled/path_model/gamma_fitted")
    assert (f"the hooks score {100 * med:.1f} % median and {100 * mx:.1f} % max with the rate held out "
            f"({100 * mx_fit:.1f} % at syncSGD's fitted gamma)") in text


def test_verification_readme_reading_of_the_measured_gamma_holds():
    """data/verification/bandwidth/README.md: measured gamma's range, VGG19's, which rows change and by how much,
    and on how many campaigns the fit's median is lower."""
    text = " ".join((paths.DATA / "verification" / "bandwidth" / "README.md").read_text().split())

    def read(sub):
        d = pd.read_csv(paths.DATA / "verification" / "bandwidth" / sub / "predictions.csv.gz")
        return d[d["variant"] == "extended"]
    fit_g, meas_g, moved, fit_better = [], {}, [], 0
    for c in GAMMA_MEASURED_CAMPAIGNS:
        a, b = read(f"{c}/path_model"), read(f"{c}/path_model/gamma_measured")
        assert list(a["config"]) == list(b["config"])
        same = a["mode"] != "syncsgd"
        pd.testing.assert_series_equal(a[same]["predicted_ms"], b[same]["predicted_ms"])  # only syncSGD rows change
        sa, sb = a[~same]["abs_rel_error"], b[~same]["abs_rel_error"]
        moved.append(abs(sb.median() - sa.median()))
        fit_better += round(100 * sa.median(), 1) < round(100 * sb.median(), 1)
        fit_g += list(a[~same]["gamma"])
        meas_g[c] = b[~same]["gamma"]
    others = pd.concat([v for c, v in meas_g.items() if c != "h200_p2o"])
    assert f"use {others.min():.3f}-{others.max():.3f} on every campaign but VGG19's" in text
    assert f"where {meas_g['h200_p2o'].median():.2f} is measured" in text
    assert (read("h200_p2o/path_model").query("mode == 'syncsgd'")["gamma"] == 1.0).all()
    assert f"moves by at most {100 * max(moved):.1f} points either way" in text
    assert f"wanders ({min(fit_g):.2f}-{max(fit_g):.2f} above)" in text
    assert f"slightly lower median on {['no', 'one', 'two', 'three', 'four', 'five', 'six'][fit_better]} of the six" in text


def test_verification_readme_reading_of_hook_gamma_and_the_host_chain_holds():
    """data/verification/bandwidth/README.md's reading of the hook-gamma and p2m-hooks blocks."""
    text = " ".join((paths.DATA / "verification" / "bandwidth" / "README.md").read_text().split())
    fitted = {c: _hook_errors(f"{c}/path_model/gamma_fitted") for c in HOOK_GAMMA_CAMPAIGNS}
    one = {c: _hook_errors(f"{c}/path_model") for c in HOOK_GAMMA_CAMPAIGNS}
    r = lambda x: round(100 * x, 1)  # noqa: E731 - the table's precision
    med = sum(r(one[c][1]) <= r(fitted[c][1]) for c in HOOK_GAMMA_CAMPAIGNS)
    mx = sum(r(one[c][2]) <= r(fitted[c][2]) for c in HOOK_GAMMA_CAMPAIGNS)
    assert f"The median improves or holds on {med} of {len(HOOK_GAMMA_CAMPAIGNS)} campaigns and the maximum on {mx}" in text
    worst = max(max(r(one[c][i]) - r(fitted[c][i]) for i in (1, 2)) for c in HOOK_GAMMA_CAMPAIGNS)
    assert f"by at most {worst:.1f} points" in text
    assert one["h200_p2h_pooled"][1] <= 0.05 and one["h200_p2h_pooled"][2] <= 0.15
    assert fitted["h200_p2i_pooled"] == one["h200_p2i_pooled"]
    p2m = {s: pd.read_csv(paths.DATA / _vb(s) / "predictions.csv.gz") for s in P2M_VARIANTS}
    chain = p2m["h200_p2m/buckets/gamma1"]
    chain = chain[(chain["variant"] == "extended") & (chain["mode"] == "hook")]
    whole = p2m["h200_p2m/path_model/gamma_fitted"]
    whole = whole[(whole["variant"] == "extended") & (whole["mode"] == "hook")]
    vgg32 = lambda d: d[(d["model"] == "vgg19") & d["config"].str.contains("rank:32")]  # noqa: E731
    assert (vgg32(chain)["abs_rel_error"] < 0.10).all() and (vgg32(whole)["rel_error"].abs() > 0.15).all()
    miss = vgg32(whole)["rel_error"].abs()
    assert "within 10 % at both rates" in text and f"misses it by {int(100 * miss.min())}-{round(100 * miss.max())} %" in text
    n, med, mx = _hook_errors("h200_p2i_pooled/buckets/gamma1")
    assert med <= 0.05 and mx <= 0.15 and n == 12 and "meet both hook targets (5 % median, 15 % max) with it" in text
    assert f"the defaults reach {100 * _hook_errors('h200_p2i_pooled/path_model')[2]:.1f} %" in text
    # the four-rate campaigns: gamma's swing on ResNet-101, the host chain per model
    pct = lambda e: f"{100 * e[1]:.1f} % / {100 * e[2]:.1f} %"  # noqa: E731
    assert f"{pct(fitted['h200_p2p'])} with the fitted gamma, {pct(one['h200_p2p'])} at gamma 1" in text
    g = pd.read_csv(paths.DATA / _vb("h200_p2p/path_model/gamma_fitted") / "predictions.csv.gz")
    g = g[(g["variant"] == "extended") & (g["mode"] == "hook")].groupby("rate_gbps")["gamma"].first()
    assert g.idxmin() == 25.0 and g.idxmax() == 2.5
    assert f"swings from {g.min():.2f} (25 Gbit/s held out) to {g.max():.2f} (2.5 Gbit/s held out)" in text
    chain = {c: _hook_errors(f"{c}/buckets/gamma1") for c in ("h200_p2n", "h200_p2o", "h200_p2p")}
    assert f"go from {pct(one['h200_p2o'])} to {pct(chain['h200_p2o'])}" in text
    assert chain["h200_p2o"][1] <= 0.05 and chain["h200_p2o"][2] <= 0.15
    for c in ("h200_p2n", "h200_p2p"):
        assert chain[c][2] > one[c][2] and f"{100 * one[c][2]:.1f} % to {100 * chain[c][2]:.1f} %" in text
    # BERT-base's Gram-Schmidt rank 32 hook: slower at 25 than at 10 Gbit/s in three calls, whichever ran first,
    # not in a fourth (h200_p2r and its second round)
    from studykit.measure.hook_times import hook_host_table
    from studykit.measure.records import load_records

    def r32(sub):
        return {r["network"]["rate_gbps"]: r["ms_median"]
                for r in load_records(paths.MEASUREMENTS / "bandwidth" / sub / "ddp.jsonl", quiet=True)
                if r.get("kind") == "ddp" and r.get("mode") == "hook" and r.get("compressor") == "powersgd"
                and r["params"].get("rank") == 32 and r["params"].get("orthogonalize") == "twice"}
    said = []
    for sub in ("h200_p2n", "h200_p2q", "h200_p2q_reversed"):
        ms = r32(sub)
        assert ms[25.0] > ms[10.0], sub
        said.append(f"{ms[25.0]:.1f} against {ms[10.0]:.1f} ms")
    assert ", ".join(said) in text and "took 1.48x the host time three minutes later" in text  # hook_host_h200c's
    fourth = [r32(sub) for sub in ("h200_p2r", "h200_p2r_repeat")]
    assert all(ms[25.0] < ms[10.0] for ms in fourth)
    assert (f"did not repeat it: {fourth[0][25.0]:.1f} against {fourth[0][10.0]:.1f} ms, and "
            f"{fourth[1][25.0]:.1f} against {fourth[1][10.0]:.1f} ms in the second round") in text
    host = hook_host_table(load_records(paths.MEASUREMENTS / "bandwidth" / "h200_p2r" / "ddp.jsonl", quiet=True))
    host = host[host["params"].str.contains('"rank": 32')]
    end = host.groupby("rate_gbps")["done_host_ms"].max()
    assert set(host["rate_gbps"]) == {10.0, 25.0} and (end / pd.Series(fourth[0]) > 0.8).all()
    assert (f"ends {end[25.0]:.1f} ms (25 Gbit/s) and {end[10.0]:.1f} ms (10 Gbit/s) after the backward pass starts, "
            f"of iterations of {fourth[0][25.0]:.1f} and {fourth[0][10.0]:.1f} ms") in text
    from studykit.measure import report as R
    t = R.rerun_spread(*(load_records(paths.MEASUREMENTS / "bandwidth" / c / "ddp.jsonl", quiet=True)
                         for c in ("h200_p2q", "h200_p2q_reversed")))
    sp = t[t["group"] == "compressors (hook)"]["spread"]
    assert sp.max() > 0.15 and f"moved by {100 * sp.median():.1f} % at the median and up to {100 * sp.max():.1f} %" in text
    t = R.rerun_spread(*(load_records(paths.MEASUREMENTS / "bandwidth" / c / "ddp.jsonl", quiet=True)
                         for c in ("h200_p2r", "h200_p2r_repeat")))
    sp = t[t["group"] == "compressors (hook)"]["spread"]
    assert sp.max() > 0.15 and f"moved by {100 * sp.median():.1f} % at the median and up to {100 * sp.max():.1f} %" in text



def test_buckets_without_per_bucket_records_keeps_the_whole_call_input_and_says_why(tmp_path):
    """verify --encode-decode-from buckets on a campaign whose inputs hold no `profile --bucket-times` record:
    every prediction is host_ahead's, and each hook row's inputs names what was missing."""
    args = bandwidth_run("h200_p2k/path_model")
    out = {}
    for ed in ("host_ahead", "buckets"):
        a = list(args)
        a[a.index("--encode-decode-from") + 1] = ed
        assert verify.main(["verify", *a, "--out", str(tmp_path / ed), "--quiet"]) == 0
        out[ed] = pd.read_csv(tmp_path / ed / "predictions.csv.gz")
    pd.testing.assert_series_equal(out["buckets"]["predicted_ms"], out["host_ahead"]["predicted_ms"])
    hooks = out["buckets"][out["buckets"]["mode"] == "hook"]
    ext = hooks[hooks["variant"] == "extended"]
    assert len(ext) and ext["inputs"].str.contains("(no per-bucket times: no profile record with per-bucket times",
                                                  regex=False).all()
