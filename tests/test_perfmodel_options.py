"""The one model's options (paper vs extended terms): a hand-computed case per term, fit -> predict on a
synthetic cluster with known constants, and the refusals for each missing input."""
import json

import numpy as np
import pandas as pd
import pytest

from studykit import cli as top
from studykit import models
from studykit.perfmodel import collectives as col
from studykit.perfmodel import fit, synthetic
from studykit.perfmodel.calibration import Calibration, Constant
from studykit.perfmodel.model import (MIB, Hardware, ModelOptions, Workload, collective_s, compressed_plan_s,
                                      iteration_s, predict, sync_terms_s, syncsgd_s)

HW = Hardware(bandwidth_gbps=8.0, alpha_s=0.0, gamma=1.1)  # 1e9 bytes/s
TABLE = col.CollectiveTable(2, {"all_reduce": np.array([1e3, 1e5])}, {"all_reduce": np.array([1e-4, 1e-2])})
MEASURED = ModelOptions(collectives="measured")


# ------------------------------------------------------------------ presets
def test_presets():
    p, e = ModelOptions.paper(), ModelOptions.extended()
    assert (p.collectives, p.bucketing, p.incast, p.sync_terms) == ("eq1", "paper", False, False)
    assert (e.collectives, e.bucketing, e.sync_terms, e.path_overhead, e.cpu_contention, e.hook_buckets,
            e.finite_flag) == ("measured", "ddp", True, True, True, True, False)
    assert not p.finite_flag, "the paper's implementations send no inf/NaN flag"
    assert ModelOptions.named("paper") == p
    with pytest.raises(ValueError, match="unknown model preset 'fast'"):
        ModelOptions.named("fast")
    with pytest.raises(ValueError, match="collectives"):
        ModelOptions(collectives="nccl")


# ------------------------------------------------------------------ one hand case per term
def test_measured_collective_by_hand():
    def eq1(n):
        return np.asarray(n, dtype=float) * 1e-7  # any Eq. 1 stand-in: 1e-7 s per byte
    t = col.measured_collective_s("all_reduce", np.array([1e2, 1e3, 1e4, 1e5, 1e6]), TABLE, eq1)
    # below: the smallest size's time; inside: log-log (1e4 is halfway: sqrt(1e-4 * 1e-2) = 1e-3);
    # above: the largest size's time scaled by Eq. 1 (x10)
    np.testing.assert_allclose(t, [1e-4, 1e-4, 1e-3, 1e-2, 1e-1])
    assert col.measured_collective_s("all_gather", 5e3, TABLE, eq1) == pytest.approx(5e-4)  # op not swept: Eq. 1
    assert col.measured_collective_s("all_reduce", 0.0, TABLE, eq1) == 0.0


def test_collective_s_incast_and_table():
    hw = Hardware(bandwidth_gbps=8.0, alpha_s=1e-5, incast_coeff=0.5, collective_table=TABLE)
    ag = 1e-5 * 3 + 1.5 * 3 * 1e6 / 1e9  # App. B ring all-gather at p=4, (1 + c) on the bandwidth term
    assert float(collective_s("all_gather", 1e6, 4, hw)) == pytest.approx(ag)
    assert float(collective_s("all_gather", 1e6, 4, hw, ModelOptions.paper())) == pytest.approx(1e-5 * 3 + 3e-3)
    assert float(collective_s("all_reduce", 1e4, 2, hw, MEASURED)) == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="table is for world size 2"):
        collective_s("all_reduce", 1e4, 4, hw, MEASURED)
    with pytest.raises(ValueError, match="no cost model"):
        collective_s("broadcast", 1e4, 2, hw)


def test_sync_terms_by_hand():
    hw = Hardware(sync_delta_s=1e-3, per_bucket_s=2e-4, per_tensor_s=1e-5)
    assert float(sync_terms_s(4, 100, hw)) == 0.0  # off by default: the paper
    assert float(sync_terms_s(4, 100, hw, ModelOptions(sync_terms=True))) == pytest.approx(1e-3 + 3 * 2e-4)
    assert float(sync_terms_s(4, 100, hw, ModelOptions(per_tensor=True))) == pytest.approx(1e-3)
    # in Sec. 4.1's iteration: 100 MiB in four 25 MiB buckets, compute-bound, plus the terms after the overlap
    hw = Hardware(bandwidth_gbps=8.0, alpha_s=0.0, gamma=1.1, sync_delta_s=1e-3, per_bucket_s=2e-4, per_tensor_s=1e-5)
    t_b = 2 * 26214400 / 2 / 1e9
    out = syncsgd_s(0.1, 100 * MIB, 2, hw, options=ModelOptions(sync_terms=True, per_tensor=True), n_tensors=100)
    assert float(out["total_s"]) == pytest.approx(0.11 + t_b + 1e-3 + 6e-4 + 1e-3)
    assert float(out["extra_s"]) == pytest.approx(2.6e-3)
    assert float(syncsgd_s(0.1, 100 * MIB, 1, hw, options=ModelOptions(sync_terms=True))["total_s"]) == 0.1


def test_iteration_time_overhead_contention_and_path():
    hw = Hardware(cpu_slowdown=1.5)
    assert float(iteration_s(0.01, 0.1, hw)) == pytest.approx(0.11)  # O + T_obs
    opts = ModelOptions(cpu_contention=True, path_overhead=True)
    assert float(iteration_s(0.01, 0.1, hw, opts, path_overhead_s=0.002)) == pytest.approx(0.015 + 0.1 + 0.002)
    # predict reports both: T_obs (total_s) and the iteration (iteration_s)
    w = Workload(None, 64, t_comp_s=0.1, param_shapes=((100 * MIB // 4,),), overhead_s=0.02, path_overhead_s=0.005)
    pr = predict(w, HW, 2, "none", options=ModelOptions(path_overhead=True))
    assert float(pr.sync["iteration_s"]) == pytest.approx(0.02 + float(pr.sync["total_s"]))
    assert float(pr.compressed["iteration_s"]) == pytest.approx(0.025 + float(pr.compressed["total_s"]))
    assert pr.notes["overhead"] == "given"


def test_hook_plans_per_ddp_bucket_by_hand():
    # 'none' sends each bucket as one all-reduce: per bucket, each pays its own latency
    shapes = [(100,), (50,), (300,), (10,), (200,)]
    w = Workload(None, 8, t_comp_s=0.01, param_shapes=shapes, bucket_bytes=1000)
    hw = Hardware(bandwidth_gbps=8.0, alpha_s=1e-4)
    pr = predict(w, hw, 2, "none", options=ModelOptions(hook_buckets=True), mode="hook")
    sizes = w.bucket_sizes("ddp")
    assert sizes == [2040.0, 600.0]
    want = 0.01 + sum(float(col.ring_allreduce_s(s, 2, 1e-4, 1e9)) for s in sizes)
    assert float(pr.compressed["total_s"]) == pytest.approx(want)
    post = predict(w, hw, 2, "none", options=ModelOptions(hook_buckets=True), mode="post")
    assert float(post.compressed["total_s"]) == pytest.approx(0.01 + float(col.ring_allreduce_s(2640, 2, 1e-4, 1e9)))
    # the blocking hook is App. B per bucket whatever the overlap option: the timeline does not apply
    for opts in (ModelOptions(overlap="timeline"), ModelOptions.paper()):
        blk = predict(w, hw, 2, "none", options=opts, mode="hook_blocking")
        assert float(blk.compressed["total_s"]) == pytest.approx(want)
    with pytest.raises(ValueError, match="hook_blocking"):
        predict(w, hw, 2, "none", mode="hooked")
    plans = [[{"op": "all_gather", "nbytes": 1000}], [{"op": "all_reduce", "nbytes": 1000}]]
    t = compressed_plan_s(0.0, 0.0, plans, 2, hw, ModelOptions.paper())
    assert float(t["allgather_s"]) == pytest.approx(1e-4 + 1e-6) and float(t["allreduce_s"]) == pytest.approx(2e-4 + 1e-6)


# ------------------------------------------------------------------ fit -> predict on a synthetic cluster
def _rows(gamma, delta, per_bucket, per_tensor):
    rows = []
    for tc in (0.01, 0.02, 0.05):
        for k in (1, 3, 6):
            for nt in (10, 40, 160):
                s_minus_last = gamma * tc + delta + per_bucket * (k - 1) + per_tensor * nt
                rows.append({"s": s_minus_last + 1e-4, "t_comp": tc, "overlapped_comm": 1e-4, "last_comm": 1e-4,
                             "k": k, "n_tensors": nt})
    return rows


def test_fit_sync_terms_recovers_known_constants():
    truth = (1.08, 4e-4, 1.5e-4, 2e-5)
    t = fit.fit_sync_terms(_rows(*truth), extended=True, per_tensor=True)
    assert (t.gamma, t.delta_s, t.per_bucket_s, t.per_tensor_s) == pytest.approx(truth, rel=1e-6)
    paper = fit.fit_sync_terms(_rows(1.08, 0, 0, 0))
    assert paper.gamma == pytest.approx(1.08) and paper.delta_s == 0.0
    # two tensor counts only: the per-tensor term would be a per-model offset; not fitted
    two = [r for r in _rows(*truth) if r["n_tensors"] != 160]
    assert fit.fit_sync_terms(two, extended=True, per_tensor=True).per_tensor_s == 0.0


def test_fit_then_predict_recovers_the_synthetic_cluster():
    truth = synthetic.Truth()
    recs = synthetic.synthetic_records(truth, seed=4, noise=0.01)
    cal = fit.fit_calibration(pd.DataFrame(recs), "synthetic", n_boot=20)
    assert cal.world_size == 8 and cal.network is None
    over = {(o.model, o.batch_size): o for o in cal.overhead}
    for (m, bs), t in truth.t_comp_s.items():
        assert over[(m, bs)].value == pytest.approx(t * truth.t_forward_fraction, rel=0.05)  # forward = O here
    hw = Hardware.from_calibration(cal)
    for r in (r for r in recs if r["kind"] == "ddp"):
        pr = predict(Workload(r["model"], r["batch_size"]), hw, r["world_size"], calibration=cal)
        assert float(pr.sync["iteration_s"]) * 1e3 == pytest.approx(r["ms_median"], rel=0.03)


# ------------------------------------------------------------------ networks
def _sweep(rate, workers=2):
    return [{"kind": "sweep", "op": "all_reduce", "world_size": 2, "size_bytes": b, "status": "ok",
             "ms_median": 1e3 * float(col.ring_allreduce_s(b, 2, 1e-5, col.gbps_to_bytes_s(rate))),
             "network": {"rate_gbps": rate, "latency_ms": None, "workers": workers}} for b in (1e3, 1e5, 1e7)]


def test_fit_refuses_two_networks_and_selects_one():
    df = pd.DataFrame(_sweep(1.0) + _sweep(5.0) + _sweep(5.0, workers=4))
    with pytest.raises(ValueError, match=r"3 networks: rate_gbps=1,workers=2, rate_gbps=5,workers=2, "
                                         r"rate_gbps=5,workers=4; fit one at a time"):
        fit.fit_calibration(df, "x", n_boot=0)
    cal = fit.fit_calibration(df, "x", n_boot=0, network="rate_gbps=1")
    assert cal.bandwidth_gbps.value == pytest.approx(1.0, rel=1e-6) and cal.network == {"rate_gbps": 1.0, "workers": 2}
    cal = fit.fit_calibration(df, "x", n_boot=0, network={"rate_gbps": 5.0, "workers": 2})
    assert cal.bandwidth_gbps.value == pytest.approx(5.0, rel=1e-6)
    with pytest.raises(ValueError, match="matches 2 of the networks"):
        fit.fit_calibration(df, "x", n_boot=0, network="rate_gbps=5")
    with pytest.raises(ValueError, match="unknown key 'rate'"):
        fit.parse_network("rate=5")


def test_fit_cli_names_the_networks(tmp_path, capsys):
    rec = synthetic.write_jsonl(_sweep(1.0) + _sweep(5.0), tmp_path / "r.jsonl")
    assert top.main(["fit", str(rec), "--out", str(tmp_path / "c.json")]) == 2
    assert "rate_gbps=1,workers=2, rate_gbps=5,workers=2" in capsys.readouterr().err
    assert top.main(["fit", str(rec), "--out", str(tmp_path / "c.json"), "--network", "rate_gbps=5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["network"] == {"rate_gbps": 5.0, "workers": 2}


# ------------------------------------------------------------------ predict --calibration, and refusals
def _cal(tmp_path, **kw):
    cal = Calibration("mine", alpha_s=Constant(1e-5, "s", "test"), bandwidth_gbps=Constant(50.0, "Gbit/s", "test"),
                      gamma=Constant(1.05, "ratio", "test"), world_size=4, **kw)
    return str(cal.save(tmp_path / "mine.json"))


def test_predict_uses_the_calibrations_bandwidth_and_world_size(tmp_path, capsys):
    path = _cal(tmp_path)
    assert top.main(["predict", "--model", "resnet50", "--t-comp-ms", "100", "--calibration", path, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    (pt,) = d["points"]
    assert (pt["world_size"], pt["bandwidth_gbps"]) == (4, 50.0)
    assert pt["syncsgd"]["iteration_ms"] == pytest.approx(pt["syncsgd"]["total_ms"])  # O unknown: 0, said so
    assert d["inputs"]["overhead"].startswith("unknown")
    assert top.main(["predict", "--model", "resnet50", "--t-comp-ms", "100", "--calibration", path,
                     "--gpus", "8", "--bandwidth-gbps", "10", "--json"]) == 0
    (pt,) = json.loads(capsys.readouterr().out)["points"]
    assert (pt["world_size"], pt["bandwidth_gbps"]) == (8, 10.0)


def test_predict_refuses_without_bandwidth_or_latency(tmp_path, capsys):
    path = str(Calibration("empty", gamma=Constant(1.0, "ratio", "t")).save(tmp_path / "e.json"))
    assert top.main(["predict", "--model", "resnet50", "--t-comp-ms", "100", "--calibration", path]) == 2
    assert "no bandwidth: calibration 'empty' has no bandwidth_gbps; pass --bandwidth-gbps" in capsys.readouterr().err
    assert top.main(["predict", "--model", "resnet50", "--t-comp-ms", "100", "--calibration", path,
                     "--bandwidth-gbps", "10"]) == 2
    assert "no latency" in capsys.readouterr().err


def test_refusals_for_missing_model_inputs():
    hw = Hardware()
    with pytest.raises(ValueError, match="T_comp unknown: set Workload.t_comp_s or pass a calibration"):
        predict(Workload("resnet50"), hw, 2)
    with pytest.raises(ValueError, match="T_encode_decode of 'topk' unknown"):
        predict(Workload("resnet50", t_comp_s=0.1), hw, 2, "topk", {"ratio": 0.01})
    with pytest.raises(ValueError, match="one world size per call"):
        predict(Workload("resnet50", t_comp_s=0.1), hw, np.array([2, 4]), "none",
                options=ModelOptions(hook_buckets=True), mode="hook")
    with pytest.raises(ValueError, match="mode must be"):
        predict(Workload("resnet50", t_comp_s=0.1), hw, 2, "none", mode="inline")
    with pytest.raises(ValueError, match="cannot fit the path overhead"):
        fit.fit_path_overhead([])
    assert models.available()  # the workloads above exist


# ------------------------------------------------------------------ the hook timeline's host chain
def test_bucket_timeline_host_chain_by_hand():
    """Two buckets, C = 10 ms, ready at 5 and 10 ms of the device's backward pass, e = d = 0.5 ms. Without the chain
    and without communication, T_obs = C + sum e + sum d = 12 ms. The host reaches the hooks at 1 and 2 ms and
    spends 6 ms in each, half before its collectives and half after them:
    P_1 = 1 + 3 = 4, F_1 = g_1 = 5.5, H_1 = max(4, 5.5) + 3 = 8.5; g_2 = 11, P_2 = max(2, 8.5) + 3 = 11.5, so
    g_2 = F_2 = 11.5 and H_2 = 11.5 + 3 = 14.5 > 12: the iteration ends when the host has launched the last
    protocol. A host of 2 ms per hook changes nothing. With 5 ms collectives and that 2 ms host, the second
    half of bucket 1's host work waits for its collective (H_1 = 10.5 + 1), which delays bucket 2's collective
    to P_2 = 12.5 and the end to H_2 = 17.5 + 1 = 18.5 ms, against 16.5 without the chain."""
    from studykit.perfmodel.model import bucket_timeline_s

    tl = lambda comm, host=None: bucket_timeline_s(  # noqa: E731
        0.010, [0.5, 1.0], comm, [0.0005] * 2, [0.0005] * 2, None if host is None else [0.001, 0.002],
        None if host is None else [host] * 2)
    base = tl([0.0, 0.0])
    assert float(base["total_s"]) == pytest.approx(0.012) and float(base["host_end_s"]) == 0.0
    slow = tl([0.0, 0.0], 0.006)
    assert float(slow["host_end_s"]) == pytest.approx(0.0145) and float(slow["total_s"]) == pytest.approx(0.0145)
    assert float(slow["compute_s"]) == pytest.approx(0.012) and float(slow["exposed_s"]) == pytest.approx(0.0025)
    fast = tl([0.0, 0.0], 0.002)
    assert float(fast["total_s"]) == pytest.approx(0.012) and float(fast["host_end_s"]) == pytest.approx(0.012)
    assert float(tl([0.005, 0.005])["total_s"]) == pytest.approx(0.0165)
    waits = tl([0.005, 0.005], 0.002)
    assert float(waits["host_end_s"]) == pytest.approx(0.0185) and float(waits["total_s"]) == pytest.approx(0.0185)
    with pytest.raises(ValueError, match="one host ready time and one host time per bucket"):
        bucket_timeline_s(0.010, [0.5, 1.0], [0.0, 0.0], host_ready_s=[0.001], host_s=[0.006] * 2)


def test_hook_prediction_takes_per_bucket_device_shares_and_the_host_chain():
    """predict(mode="hook") with bucket_encode_decode_s shares T_encode_decode by the buckets' device times (the
    total is unchanged), and with bucket_host_s and the workload's host ready times a slow host lengthens T_obs;
    both refused outside the hook timeline and with the wrong number of buckets."""
    from studykit.perfmodel.model import Hardware, ModelOptions, Workload, predict

    import dataclasses

    opts = dataclasses.replace(ModelOptions.extended(), overlap="timeline")
    w = Workload("resnet50", 64, t_comp_s=0.05)
    k = len(w.ddp_bucket_shapes())
    hw = Hardware(bandwidth_gbps=100.0, alpha_s=1e-5)
    plain = predict(w, hw, 2, "powersgd", {"rank": 4}, t_encode_decode_s=0.004, options=opts, mode="hook")
    dev = [0.001] + [0.0] * (k - 2) + [0.003]
    shared = predict(w, hw, 2, "powersgd", {"rank": 4}, t_encode_decode_s=0.004, options=opts, mode="hook",
                     bucket_encode_decode_s=dev)
    assert float(shared.compressed["encode_decode_s"]) == pytest.approx(0.004)
    wh = Workload("resnet50", 64, t_comp_s=0.05, bucket_ready_host_s=tuple(0.001 * (i + 1) for i in range(k)))
    slow = predict(wh, hw, 2, "powersgd", {"rank": 4}, t_encode_decode_s=0.004, options=opts, mode="hook",
                   bucket_encode_decode_s=dev, bucket_host_s=[0.02] * k)
    assert float(slow.compressed["host_end_s"]) >= 0.001 + 0.02 * k
    assert float(slow.compressed["total_s"]) >= 0.02 * k > float(plain.compressed["total_s"])
    with pytest.raises(ValueError, match="inputs of the hook timeline"):
        predict(w, hw, 2, "powersgd", {"rank": 4}, t_encode_decode_s=0.004, options=opts, mode="post",
                bucket_host_s=[0.02] * k)
    with pytest.raises(ValueError, match="one positive time per DDP bucket"):
        predict(w, hw, 2, "powersgd", {"rank": 4}, t_encode_decode_s=0.004, options=opts, mode="hook",
                bucket_encode_decode_s=[0.001])
    with pytest.raises(ValueError, match="needs the workload's bucket_ready_host_s"):
        predict(w, hw, 2, "powersgd", {"rank": 4}, t_encode_decode_s=0.004, options=opts, mode="hook",
                bucket_host_s=[0.02] * k)
    # workers sharing CPU cores (cpu_contention, kappa): the host times slow down as T_encode_decode does; a host-bound
    # hook then ends kappa times later on its host side, and an array of kappa gives an array of iteration times
    kw = dict(t_encode_decode_s=0.004, options=opts, mode="hook", bucket_encode_decode_s=dev,
              bucket_host_s=[0.02] * k)
    twice = predict(wh, dataclasses.replace(hw, cpu_slowdown=2.0), 2, "powersgd", {"rank": 4}, **kw)
    assert float(twice.compressed["host_end_s"]) >= 0.001 + 2 * 0.02 * k
    off = predict(wh, dataclasses.replace(hw, cpu_slowdown=2.0), 2, "powersgd", {"rank": 4},
                  **{**kw, "options": dataclasses.replace(opts, cpu_contention=False)})
    assert float(off.compressed["host_end_s"]) == pytest.approx(float(slow.compressed["host_end_s"]))
    grid = predict(wh, dataclasses.replace(hw, cpu_slowdown=np.array([1.0, 2.0])), 2, "powersgd", {"rank": 4}, **kw)
    np.testing.assert_allclose(grid.compressed["host_end_s"], [float(slow.compressed["host_end_s"]),
                                                               float(twice.compressed["host_end_s"])])


def test_coalesce_groups_follow_the_hooks_rule_by_hand():
    """register(coalesce_mb=): buckets wait until those waiting hold coalesce_bytes, or the last arrives; 0: one
    group; None: each bucket alone."""
    from studykit.perfmodel.model.bucketing import coalesce_groups

    assert coalesce_groups([10, 10, 10, 10, 5], 25) == [[0, 1, 2], [3, 4]]
    assert coalesce_groups([10, 10, 10], 0) == [[0, 1, 2]]
    assert coalesce_groups([10, 10], None) == [[0], [1]]
    assert coalesce_groups([30, 1], 25) == [[0], [1]]
    with pytest.raises(ValueError, match="coalesce_bytes"):
        coalesce_groups([1], -1)


def test_a_coalescing_hook_runs_one_protocol_per_group_once_its_last_bucket_is_ready():
    """hook_coalesce_mb=0 (every bucket in one group): one protocol run (k = 1) that starts when the backward pass
    ends, so nothing of it hides under the backward pass: T_obs >= C + encode/decode + its collectives; the same
    encode/decode in total as per bucket; refused outside the hook timeline."""
    import dataclasses

    from studykit.perfmodel.model import Hardware, Workload, predict

    opts = dataclasses.replace(ModelOptions.extended(), overlap="timeline")
    w = Workload("resnet50", 64, t_comp_s=0.05)
    hw = Hardware(bandwidth_gbps=10.0, alpha_s=1e-5, gamma=1.0)
    kw = dict(t_encode_decode_s=0.004, options=opts, mode="hook")
    per = predict(w, hw, 2, "powersgd", {"rank": 4}, **kw).compressed
    one = predict(w, hw, 2, "powersgd", {"rank": 4}, hook_coalesce_mb=0, **kw).compressed
    assert float(one["k"]) == 1 and float(per["k"]) == len(w.ddp_bucket_shapes())
    assert float(one["encode_decode_s"]) == pytest.approx(float(per["encode_decode_s"]))
    assert float(one["total_s"]) >= 0.05 + 0.004 + float(one["comm_s"]) - 1e-12
    assert float(one["total_s"]) > float(per["total_s"])
    big = predict(w, hw, 2, "powersgd", {"rank": 4}, hook_coalesce_mb=1e6, **kw).compressed  # waits for the last
    assert float(big["total_s"]) == pytest.approx(float(one["total_s"]))
    with pytest.raises(ValueError, match="hook_coalesce_mb prices a coalescing hook"):
        predict(w, hw, 2, "powersgd", {"rank": 4}, t_encode_decode_s=0.004, mode="post", hook_coalesce_mb=25)


# ------------------------------------------------------------------ the kit's inf/NaN flag
FLAG_HW = Hardware(bandwidth_gbps=8.0, alpha_s=1e-3, gamma=1.0)  # every collective pays 1 ms latency


@pytest.mark.parametrize("mode, per_bucket", [("post", False), ("hook_blocking", True)])
def test_the_finite_flag_adds_one_latency_bound_all_reduce_per_protocol_run(mode, per_bucket):
    """A compressor that may drop inf/NaN (randomk) pays, with ``finite_flag``, one more all-reduce of 4 bytes per
    protocol run: once after the backward pass, once per DDP bucket as a hook. By hand: Eq. 1 for 4 bytes at p = 2 is
    2 (p - 1) alpha + 2 (p - 1) / p * 4 B / BW = 2 ms + 4 ns. TopK keeps inf/NaN and pays nothing more."""
    w = Workload(model="resnet50", t_comp_s=0.05, overhead_s=0.0)
    k = len(w.ddp_bucket_shapes()) if per_bucket else 1
    flag_s = 2 * 1 * 1e-3 + 2 * 1 / 2 * 4 / 1e9
    for name, extra in (("randomk", k * flag_s), ("topk", 0.0)):
        on, off = (predict(w, FLAG_HW, 2, name, calibration=None, t_encode_decode_s=0.001, mode=mode,
                           options=ModelOptions(finite_flag=flag, hook_buckets=per_bucket)).compressed["total_s"]
                   for flag in (True, False))
        assert float(on) - float(off) == pytest.approx(extra, rel=1e-6, abs=1e-12), name


def test_advise_prices_the_kits_hook_with_its_flag():
    """``advise --mode hook`` prices the kit's hook as it is now: the per-bucket timeline with the inf/NaN flag
    (the presets, which fit and score older records, leave it off); the paper's model has no hook model."""
    from studykit.perfmodel.advise.inputs import hook_options

    opts, how = hook_options(ModelOptions.extended())
    assert (opts.hook_buckets, opts.overlap, opts.finite_flag) == (True, "timeline", True) and "finite_flag" in how
    assert hook_options(ModelOptions.paper())[0] == ModelOptions.paper()
