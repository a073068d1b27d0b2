"""Sec. 4.1 syncSGD and App. B compressed models: hand cases, plan-derived bytes, vectorization."""
import json
import time
from dataclasses import replace

import numpy as np
import pytest

from studykit import compressors, models
from studykit.perfmodel import collectives as col
from studykit.perfmodel.calibration import Calibration, Constant, TComp, TEncodeDecode
from studykit.perfmodel.model import (MIB, Hardware, ModelOptions, Workload, buckets, crossover_bandwidth_gbps, plan_summary,
                                      predict, required_ratio, speedup_over_sync, syncsgd_s)

# 100 MiB of fp32 gradients in one tensor -> exactly four 25 MiB buckets
SHAPES = ((100 * MIB // 4,),)
HW = Hardware(bandwidth_gbps=8.0, alpha_s=0.0, gamma=1.1)  # 1e9 bytes/s
DDP = ModelOptions(bucketing="ddp")


def needs(name):
    if name not in compressors.available():
        pytest.skip(f"compressor {name} not registered yet")


def test_buckets_sec41():
    k, b, last = buckets(100 * MIB, 25 * MIB)
    assert (k, b, last) == (4, 25 * MIB, 25 * MIB)
    k, b, last = buckets(97.5 * MIB, 25 * MIB)
    assert k == 4 and last == pytest.approx(22.5 * MIB)
    k, b, last = buckets(1 * MIB, 25 * MIB)  # smaller than a bucket: one bucket, b_last = total
    assert k == 1 and last == pytest.approx(MIB)


def test_syncsgd_hand_case_compute_bound():
    # T(25 MiB, p=2) = 2 * 26214400 * 1/2 / 1e9; 3 of them < gamma T_comp = 0.11
    t_b = 2 * 26214400 * 1 / 2 / 1e9
    out = syncsgd_s(0.1, 100 * MIB, 2, HW)
    assert out["total_s"] == pytest.approx(0.11 + t_b)
    assert out["exposed_comm_s"] == pytest.approx(t_b)


def test_syncsgd_hand_case_comm_bound_with_latency():
    hw = Hardware(bandwidth_gbps=1.0, alpha_s=1e-4, gamma=1.1)
    t_b = 2 * 1e-4 * 1 + 2 * 26214400 * 1 / 2 / 1.25e8
    out = syncsgd_s(0.1, 100 * MIB, 2, hw)
    assert out["total_s"] == pytest.approx(3 * t_b + t_b)  # max(0.11, 3 t_b) + t_b


def test_syncsgd_one_worker_is_compute_only():
    assert syncsgd_s(0.1, 100 * MIB, 1, HW)["total_s"] == pytest.approx(0.1)


def test_compressed_none_hand_case():
    # App. B with the 'none' plan: T_comp + 0 + one ring all-reduce of everything
    w = Workload(None, 64, t_comp_s=0.1, param_shapes=SHAPES)
    pr = predict(w, HW, 4, "none")
    expect = 0.1 + float(col.ring_allreduce_s(100 * MIB, 4, 0.0, 1e9))
    assert pr.compressed["total_s"] == pytest.approx(expect)
    assert pr.compressed["encode_decode_s"] == 0.0


def test_compressed_cost_is_exactly_the_plan_cost():
    needs("powersgd")
    w = Workload("resnet50", 64, t_comp_s=0.12)
    hw = Hardware(bandwidth_gbps=10.0, alpha_s=5e-6)
    for rank in (4, 8):
        plan = compressors.get("powersgd", rank=rank).plan(models.param_shapes("resnet50"), 16)
        pr = predict(w, hw, 16, "powersgd", {"rank": rank}, t_encode_decode_s=0.045)
        by_hand = sum(float(col.ring_allreduce_s(c.nbytes, 16, 5e-6, hw.bandwidth_bytes_s)) for c in plan
                      if c.op == "all_reduce")
        assert pr.compressed["comm_s"] == pytest.approx(by_hand, rel=1e-12)
        assert pr.wire_bytes == sum(c.nbytes for c in plan)
        assert pr.plans[16] == [c.as_dict() for c in plan]


def test_powersgd_rank_change_moves_time_by_exactly_the_plan_bytes_cost():
    needs("powersgd")
    w = Workload("resnet101", 64, t_comp_s=0.2)
    hw = Hardware(bandwidth_gbps=np.array([1.0, 10.0]), alpha_s=8e-6)
    p4 = predict(w, hw, 64, "powersgd", {"rank": 4}, t_encode_decode_s=0.05)
    p8 = predict(w, hw, 64, "powersgd", {"rank": 8}, t_encode_decode_s=0.05)
    s4 = plan_summary("powersgd", {"rank": 4}, models.param_shapes("resnet101"), 64)
    s8 = plan_summary("powersgd", {"rank": 8}, models.param_shapes("resnet101"), 64)
    assert s8.allreduce_bytes > s4.allreduce_bytes
    extra_bytes = s8.allreduce_bytes - s4.allreduce_bytes
    extra_calls = s8.allreduce_count - s4.allreduce_count
    expect = (col.ring_allreduce_s(extra_bytes, 64, 0.0, hw.bandwidth_bytes_s)
              + extra_calls * col.ring_allreduce_s(0.0, 64, 8e-6, hw.bandwidth_bytes_s))
    np.testing.assert_allclose(p8.compressed["total_s"] - p4.compressed["total_s"], expect, rtol=1e-9)
    np.testing.assert_allclose(p8.sync["total_s"], p4.sync["total_s"])  # syncSGD does not care


def test_allgather_compressor_uses_allgather_cost():
    needs("signsgd")
    w = Workload("resnet50", 64, t_comp_s=0.12)
    hw = Hardware(bandwidth_gbps=10.0, alpha_s=1e-5, incast_coeff=0.25)
    plan = compressors.get("signsgd").plan(models.param_shapes("resnet50"), 32)
    assert {c.op for c in plan} == {"all_gather"}
    pr = predict(w, hw, 32, "signsgd", t_encode_decode_s=0.016)
    expect = sum(float(col.allgather_incast_s(c.nbytes, 32, 1e-5, hw.bandwidth_bytes_s, 0.25)) for c in plan)
    assert pr.compressed["allgather_s"] == pytest.approx(expect)
    assert pr.compressed["allreduce_s"] == 0.0


@pytest.mark.parametrize("name,params", [("none", {}), ("powersgd", {"rank": 4}), ("signsgd", {})])
def test_vectorized_predict_equals_scalar_loop(name, params):
    needs(name)
    w = Workload("resnet50", 32, t_comp_s=0.06)
    bw = np.array([1.0, 5.0, 10.0, 40.0])
    p = np.array([2, 8, 64])
    grid = predict(w, Hardware(bandwidth_gbps=bw[:, None], alpha_s=8e-6, gamma=1.05), p[None, :], name, params,
                   t_encode_decode_s=0.02)
    for i, b in enumerate(bw):
        for j, q in enumerate(p):
            one = predict(w, Hardware(bandwidth_gbps=float(b), alpha_s=8e-6, gamma=1.05), int(q), name, params,
                          t_encode_decode_s=0.02)
            assert grid.sync["total_s"][i, j] == pytest.approx(float(one.sync["total_s"]))
            assert grid.compressed["total_s"][i, j] == pytest.approx(float(one.compressed["total_s"]))
            assert grid.speedup[i, j] == pytest.approx(float(one.speedup))


def test_grid_of_ten_thousand_points_is_one_fast_call():
    needs("powersgd")
    w = Workload("resnet101", 64, t_comp_s=0.2)
    bw = np.geomspace(1, 100, 100)[:, None]
    p = np.unique(np.geomspace(2, 256, 100).astype(int))[None, :]
    pr = predict(w, Hardware(bandwidth_gbps=bw), p, "powersgd", {"rank": 4}, t_encode_decode_s=0.08)  # warms plans
    t0 = time.perf_counter()
    pr = predict(w, Hardware(bandwidth_gbps=bw), p, "powersgd", {"rank": 4}, t_encode_decode_s=0.08)
    elapsed = time.perf_counter() - t0
    assert pr.speedup.shape == (100, p.shape[1])
    assert elapsed < 0.5  # the benchmark asks well under 50 ms; generous here for loaded CI machines


def test_compute_speedup_divides_compute_and_encode():
    w = Workload(None, 64, t_comp_s=0.1, param_shapes=SHAPES)
    a = predict(w, HW, 4, "none", t_encode_decode_s=0.04)
    b = predict(w, replace(HW, compute_speedup=2.0), 4, "none", t_encode_decode_s=0.04)
    assert b.compressed["compute_s"] == pytest.approx(0.05)
    assert b.compressed["encode_decode_s"] == pytest.approx(0.02)
    assert b.compressed["comm_s"] == pytest.approx(a.compressed["comm_s"])


def test_speedup_and_scaling_helpers():
    w = Workload(None, 64, t_comp_s=0.1, param_shapes=SHAPES)
    pr = predict(w, HW, 4, "none", t_encode_decode_s=0.0)
    assert pr.speedup == pytest.approx(pr.sync["total_s"] / pr.compressed["total_s"])
    assert pr.scaling_speedup("sync") == pytest.approx(4 * 0.1 / pr.sync["total_s"])
    assert speedup_over_sync(w, HW, 4, "none", t_encode_decode_s=0.0) == pytest.approx(pr.speedup)


def test_required_ratio_closed_form_matches_definition():
    hw = Hardware(bandwidth_gbps=10.0, alpha_s=8e-6, gamma=1.07)
    w = Workload("resnet101", 16, t_comp_s=0.05)
    c = float(required_ratio(w, hw, 64))
    k, b, _ = buckets(w.gradient_bytes, w.bucket_bytes)

    def hidden(ratio):  # (k-1) T_comm(b / c) <= gamma T_comp
        return (k - 1) * col.ring_allreduce_s(b / ratio, 64, 8e-6, hw.bandwidth_bytes_s) <= 1.07 * 0.05 + 1e-12

    assert c > 1 and hidden(c) and not hidden(0.99 * c)
    assert float(required_ratio(w, replace(hw, bandwidth_gbps=1000.0), 64)) == 1.0  # syncSGD already scales
    assert float(required_ratio(w, replace(hw, alpha_s=1.0), 64)) == np.inf  # latency alone breaks it


def test_required_ratio_strict_variant_counts_the_tail():
    hw = Hardware(bandwidth_gbps=10.0, alpha_s=8e-6, gamma=1.07)
    w = Workload("resnet101", 32, t_comp_s=0.1)
    c = float(required_ratio(w, hw, 64, include_last_bucket=True, slack=0.1))
    scaled = Workload(None, 32, t_comp_s=0.1, param_shapes=((w.gradient_bytes / 4 / c,),),
                      bucket_bytes=w.bucket_bytes / c)
    t = float(syncsgd_s(0.1, w.gradient_bytes / c, 64, hw, w.bucket_bytes / c)["total_s"])
    assert t == pytest.approx(1.1 * 1.07 * 0.1, rel=1e-6)
    assert scaled.gradient_bytes > 0


def test_crossover_bandwidth():
    w = Workload(None, 64, t_comp_s=0.1, param_shapes=SHAPES)
    hw = Hardware(alpha_s=0.0, gamma=1.0)
    x = crossover_bandwidth_gbps(w, hw, 8, "none", t_encode_decode_s=0.0)
    # 'none' without overlap vs syncSGD with overlap: equal only where comm is negligible -> no crossing
    assert np.isnan(x)
    needs("powersgd")
    w = Workload("resnet50", 64, t_comp_s=0.122)
    x = crossover_bandwidth_gbps(w, Hardware(alpha_s=8e-6, gamma=1.07), 64, "powersgd", {"rank": 4},
                                 t_encode_decode_s=0.045)
    at = predict(w, Hardware(bandwidth_gbps=x, alpha_s=8e-6, gamma=1.07), 64, "powersgd", {"rank": 4},
                 t_encode_decode_s=0.045)
    assert float(at.speedup) == pytest.approx(1.0, abs=1e-3)


def test_hardware_and_workload_validation():
    with pytest.raises(ValueError, match="bandwidth_gbps"):
        Hardware(bandwidth_gbps=0)
    with pytest.raises(ValueError, match="alpha_s"):
        Hardware(alpha_s=-1)
    with pytest.raises(ValueError, match="allreduce"):
        Hardware(allreduce="butterfly")
    with pytest.raises(ValueError, match="available"):
        Workload("resnet5")
    with pytest.raises(ValueError, match="world_size"):
        predict(Workload(None, 64, t_comp_s=0.1, param_shapes=SHAPES), HW, 2.5)
    with pytest.raises(ValueError, match="T_comp"):
        predict(Workload("resnet50"), HW, 4)
    with pytest.raises(ValueError, match="T_encode_decode"):
        predict(Workload("resnet50", t_comp_s=0.1), HW, 4, "fp16")


# ---------------------------------------------------------------- calibration
def _cal():
    return Calibration(
        name="t", alpha_s=Constant(1e-5, "s", "test", low=5e-6, high=2e-5), bandwidth_gbps=Constant(10.0, "Gbit/s", "t"),
        gamma=Constant(1.05, "ratio", "t"),
        t_comp=[TComp(0.12, "s", "t", model="resnet50", batch_size=64), TComp(0.5, "s", "t", model="bert_base")],
        t_encode_decode=[TEncodeDecode(0.045, "s", "t", compressor="powersgd", params={"rank": 4}, model="resnet50"),
                         TEncodeDecode(0.064, "s", "t", compressor="powersgd", params={"rank": 8}, model="resnet50")])


def test_calibration_json_round_trip(tmp_path):
    cal = _cal()
    path = cal.save(tmp_path / "c.json")
    again = Calibration.load(path)
    assert again.to_dict() == cal.to_dict()
    assert json.loads(path.read_text())["alpha_s"]["low"] == 5e-6
    bad = cal.to_dict() | {"bogus": 1}
    with pytest.raises(ValueError, match="unknown key"):
        Calibration.from_dict(bad)


def test_calibration_lookups_say_how():
    cal = _cal()
    assert cal.t_comp_s("resnet50", 64) == (0.12, "exact (t)")
    v, how = cal.t_comp_s("resnet50", 32)
    assert v == pytest.approx(0.06) and "scaled linearly" in how
    v, how = cal.t_comp_s("bert_base", 8)
    assert v == 0.5 and "not stated" in how
    v, pw, how = cal.t_encode_decode_s("powersgd", {"rank": 6, "seed": 3}, "resnet50")
    assert v == pytest.approx(0.0545) and "interpolated in rank" in how
    v, pw, how = cal.t_encode_decode_s("powersgd", {"rank": 4}, "resnet101")
    assert v == pytest.approx(0.045 * models.numel("resnet101") / models.numel("resnet50"))
    assert "scaled by parameter count" in how
    with pytest.raises(ValueError, match="no T_encode_decode for compressor 'topk'"):
        cal.t_encode_decode_s("topk", {}, "resnet50")
    with pytest.raises(ValueError, match="no T_comp for model 'vgg19'"):
        cal.t_comp_s("vgg19", 64)


def test_hardware_from_calibration_and_predict_with_it():
    cal = _cal()
    hw = Hardware.from_calibration(cal, bandwidth_gbps=25.0)
    assert (hw.alpha_s, hw.bandwidth_gbps, hw.gamma) == (1e-5, 25.0, 1.05)
    needs("powersgd")
    pr = predict(Workload("resnet50", 64), hw, 8, "powersgd", {"rank": 8}, calibration=cal)
    assert pr.notes["t_encode_decode_s"] == pytest.approx(0.064)
    assert pr.notes["t_comp"].startswith("exact")


def test_lookup_fills_compressor_defaults():
    """Records store every parameter ({'rank': 4, 'warm_start': True, ...}); queries may give only the main one."""
    needs("powersgd")
    full = {**compressors.parameters("powersgd"), "rank": 4}
    cal = Calibration(name="m", t_encode_decode=[
        TEncodeDecode(0.01, "s", "t", compressor="powersgd", params=full, model="resnet50")])
    assert cal.t_encode_decode_s("powersgd", {"rank": 4}, "resnet50")[0] == 0.01
    assert cal.compressors() == [("powersgd", {k: full[k] for k in sorted(full)})]


# ------------------------------------------------------------------ bucketing: "paper" vs "ddp"
def test_ddp_buckets_hand_case():
    from studykit.perfmodel.model import ddp_bucket_sizes, ddp_buckets

    # fp32 bytes 400, 200, 1200, 40, 800 (forward order); DDP walks them in reverse: 800, 40, 1200, 200, 400
    shapes = [(100,), (50,), (300,), (10,), (200,)]
    # cap 1000 (first bucket = the cap when a cap is given): 800+40+1200 = 2040 >= 1000 closes; 200+400 is the rest
    assert ddp_buckets(shapes, 1000) == [[(200,), (10,), (300,)], [(50,), (100,)]]
    assert ddp_bucket_sizes(shapes, 1000) == [2040.0, 600.0]
    # a 500-byte first bucket: 800 closes it alone; 40+1200 = 1240 closes the second; 200+400 the last
    assert ddp_bucket_sizes(shapes, 1000, first_bucket_bytes=500) == [800.0, 1240.0, 600.0]
    # a cap smaller than every tensor: one bucket per tensor, never a split tensor
    assert ddp_bucket_sizes(shapes, 1) == [800.0, 40.0, 1200.0, 200.0, 400.0]
    # a cap larger than the gradient: one bucket
    assert ddp_bucket_sizes(shapes, 10**6) == [2640.0]
    with pytest.raises(ValueError):
        ddp_buckets(shapes, 0.5)


def test_ddp_buckets_default_cap_has_a_1mib_first_bucket():
    from studykit.perfmodel.model import DDP_FIRST_BUCKET_BYTES, ddp_bucket_sizes

    assert DDP_FIRST_BUCKET_BYTES == MIB
    two = (MIB // 2,)  # 2 MiB fp32 tensors
    # default (bucket_cap_mb=None): the first bucket closes at 1 MiB (one tensor), the next at 25 MiB (13 tensors)
    assert ddp_bucket_sizes([two] * 20, None) == [2.0 * MIB, 26.0 * MIB, 12.0 * MIB]
    # an explicit 25 MiB cap: DDP uses it for the first bucket too
    assert ddp_bucket_sizes([two] * 20, 25 * MIB) == [26.0 * MIB, 14.0 * MIB]


def test_ddp_buckets_mlp_large_hand_counts():
    from studykit.perfmodel.model import ddp_buckets

    shapes = models.param_shapes("mlp_large")  # (1024,40) (1024) (1024,1024) (1024) (10,1024) (10)
    assert ddp_buckets(shapes) == [[(10,), (10, 1024), (1024,), (1024, 1024)], [(1024,), (1024, 40)]]
    # bucket_cap_mb=0.001 -> int(1048.576) = 1048 bytes: (10,) is 40 B and joins (10,1024); then one tensor each
    assert [len(b) for b in ddp_buckets(shapes, 0.001 * MIB)] == [2, 1, 1, 1, 1]
    assert [len(b) for b in ddp_buckets(shapes, 0.01 * MIB)] == [2, 2, 2]


@pytest.mark.parametrize("model,cap_mb", [("mlp_large", None), ("mlp_large", 0.001), ("mlp_small", 0.01),
                                          ("resnet50", None), ("resnet50", 5.0), ("vgg19", 1.0)])
def test_ddp_buckets_match_torch(model, cap_mb):
    """The same assignment as torch's own (DDP's rebuild: gradient-ready order = reverse forward order)."""
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    if not hasattr(dist, "_compute_bucket_assignment_by_size"):
        pytest.skip("torch.distributed without the reducer")
    from studykit.perfmodel.model import DDP_FIRST_BUCKET_BYTES, ddp_buckets

    shapes = models.param_shapes(model)
    ts = [torch.empty(s, device="meta") for s in shapes]
    order = list(reversed(range(len(ts))))
    cap = 25 * MIB if cap_mb is None else int(cap_mb * MIB)
    first = DDP_FIRST_BUCKET_BYTES if cap_mb is None else cap
    try:
        idx, _ = dist._compute_bucket_assignment_by_size([ts[i] for i in order], [first, cap], [False] * len(ts),
                                                         order)
    except RuntimeError:  # older torch: no meta tensors here
        ts = [torch.empty(s) for s in shapes]
        idx, _ = dist._compute_bucket_assignment_by_size([ts[i] for i in order], [first, cap], [False] * len(ts),
                                                         order)
    ours = ddp_buckets(shapes, None if cap_mb is None else cap_mb * MIB)
    assert [[tuple(shapes[i]) for i in b] for b in idx] == ours


def test_workload_bucketing_paper_is_default_and_unchanged():
    w = Workload(model="vgg19")
    assert ModelOptions().bucketing == "paper" and ModelOptions.paper().bucketing == "paper"
    k, b, last = w.buckets()
    assert (k, b, last) == tuple(buckets(w.gradient_bytes, w.bucket_bytes))
    assert k == 22  # ceil(548 MiB / 25 MiB)
    with pytest.raises(ValueError, match="bucketing"):
        ModelOptions(bucketing="torch")
    with pytest.raises(ValueError, match="bucketing"):
        w.buckets("torch")
    with pytest.raises(ValueError, match="first_bucket_bytes"):
        Workload(model="vgg19", first_bucket_bytes=0)


def test_workload_ddp_bucketing_k_b_last():
    from studykit.perfmodel.model import ddp_bucket_sizes

    shapes = [(100,), (50,), (300,), (10,), (200,)]
    w = Workload(model=None, param_shapes=shapes, t_comp_s=0.1, bucket_bytes=1000)
    assert tuple(map(float, w.buckets("ddp"))) == (2.0, 2040.0, 600.0)
    assert w.bucket_sizes("ddp") == [2040.0, 600.0]
    w3 = replace(w, first_bucket_bytes=500)
    assert tuple(map(float, w3.buckets("ddp"))) == (3.0, 1020.0, 600.0)  # b: mean of the two overlapped buckets
    one = replace(w, bucket_bytes=10**6)
    assert tuple(map(float, one.buckets("ddp"))) == (1.0, 2640.0, 2640.0)
    # vectorized over bucket_bytes
    k, b, last = replace(w, bucket_bytes=np.array([1, 1000, 10**6])).buckets("ddp")
    assert k.tolist() == [5.0, 2.0, 1.0] and last.tolist() == [400.0, 600.0, 2640.0]
    # the default 25 MiB cap means DDP's default, a 1 MiB first bucket: VGG19's fc3 (15.6 MiB) closes it,
    # fc2 (64 MiB) and fc1 (392 MiB) are a bucket each, the convolutions fill 27 + 27 + 22.4 MiB
    v = Workload(model="vgg19")
    sizes = ddp_bucket_sizes(models.param_shapes("vgg19"))
    assert v.bucket_sizes("ddp") == sizes
    k, b, last = v.buckets("ddp")
    assert k == len(sizes) == 6 and last == sizes[-1]
    assert [round(x / MIB, 2) for x in sizes] == [15.63, 64.02, 392.02, 27.01, 27.01, 22.38]
    assert b * (k - 1) == pytest.approx(sum(sizes[:-1]))


def test_predict_with_ddp_bucketing_is_the_sum_over_real_buckets():
    from studykit.perfmodel.model import ddp_bucket_sizes

    hw = Hardware(bandwidth_gbps=8.0, alpha_s=1e-4, gamma=1.1)
    shapes = models.param_shapes("vgg19")
    for t_comp in (0.01, 1.0):  # communication-bound, compute-bound
        w = Workload(model="vgg19", t_comp_s=t_comp, bucket_bytes=25 * MIB)
        sizes = ddp_bucket_sizes(shapes)  # Workload's 25 MiB default cap is DDP's default: a 1 MiB first bucket
        t = [float(col.ring_allreduce_s(s, 4, hw.alpha_s, hw.bandwidth_bytes_s)) for s in sizes]
        want = max(1.1 * t_comp, sum(t[:-1])) + t[-1]
        pred = predict(w, hw, 4, options=DDP)
        assert float(pred.sync["total_s"]) == pytest.approx(want)
        assert float(pred.sync["k"]) == len(sizes)
        assert pred.notes["bucketing"] == "ddp"
    # VGG19: DDP's whole-tensor buckets leave 411 MB (fc1) alone and the conv layers last, paper's are equal
    paper = predict(Workload(model="vgg19", t_comp_s=0.01), hw, 4)
    ddp = predict(Workload(model="vgg19", t_comp_s=0.01), hw, 4, options=DDP)
    assert float(paper.sync["k"]) == 22 and float(ddp.sync["k"]) == 6
    assert float(ddp.sync["total_s"]) != pytest.approx(float(paper.sync["total_s"]))
    # required_ratio runs on the same buckets
    r = required_ratio(Workload(model="vgg19", t_comp_s=0.2), hw, 4, options=DDP)
    assert np.isfinite(r) and r >= 1
