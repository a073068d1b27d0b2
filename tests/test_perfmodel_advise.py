"""``advise`` (issue 13 items 5-7): the payload fast path against plan(), ranking recovered on a synthetic
cluster, refusals naming each missing input."""
from __future__ import annotations

import json

import numpy as np
import pytest

from studykit import compressors, models
from studykit.perfmodel import advise as A
from studykit.perfmodel import payload
from studykit.perfmodel.calibration import Calibration, Constant, Overhead, TComp, TEncodeDecode
from studykit.perfmodel.synthetic import Truth, synthetic_records

# a small model with what makes payloads differ: conv and linear weights, biases, a tiny tensor
SHAPES = [(16, 3, 3, 3), (16,), (32, 16, 3, 3), (32,), (10, 512), (10,), (3,)]
WORLD_SIZES = [1, 2, 3, 8, 16, 17, 31, 64, 100, 129, 256, 1000]


@pytest.fixture
def no_disk_cache(monkeypatch):
    monkeypatch.setenv("STUDYKIT_CACHE", "off")
    payload.clear()
    yield
    payload.clear()


def _plan(comp, shapes, p):
    return tuple((c.op, c.numel, str(c.dtype).replace("torch.", ""), c.nbytes) for c in comp.plan(shapes, p))


def _settings(name):
    main = A._main_parameter(name)
    return [{}] if main is None else [{main[0]: v} for v in main[1]]


@pytest.mark.parametrize("name", compressors.available())
@pytest.mark.slow
def test_fast_path_matches_plan_for_every_compressor(name, no_disk_cache):
    """The derived payload (one plan() per step of payload.step_key) equals plan() of the compressor as
    ``get`` builds it (error feedback included) at every world size, steps of the wire format included."""
    for params in _settings(name):
        law = payload.law(name, params, SHAPES, ("test", name, repr(params)))
        got = law.plans(WORLD_SIZES)
        comp = compressors.get(name, **params)
        for p in WORLD_SIZES:
            assert got[p] == _plan(comp, SHAPES, p), (name, params, p)
        comp0 = payload._planner(name, params)
        assert law.plan_calls == len({payload.step_key(comp0, p) for p in WORLD_SIZES}), (name, params)


@pytest.mark.parametrize("name", compressors.available())
@pytest.mark.slow
def test_fast_path_matches_plan_on_resnet50(name, no_disk_cache):
    """The same on a real model (161 tensors): a partition-invariant compressor is planned on one flat
    tensor of the gradient's size, a layer-wise one on the shapes; both equal plan() of the real shapes."""
    shapes = models.param_shapes("resnet50")
    ps = [1, 3, 64, 1000]
    for params in _settings(name):
        got = payload.law(name, params, shapes, ("test50", name, repr(params))).plans(ps)
        comp = compressors.get(name, **params)
        for p in ps:
            assert got[p] == _plan(comp, shapes, p), (name, params, p)


def test_fast_path_plans_each_step_once(no_disk_cache):
    """A payload without steps in p costs one plan() however many world sizes are asked; quantize one per
    lane width its own ``lane_width(p)`` gives (under the packed all-reduce protocol)."""
    law = payload.law("topk", {"ratio": 0.01}, SHAPES, ("t", "topk"))
    law.plans(range(2, 202))
    assert law.plan_calls == 1 and law.shapes == [(sum(int(np.prod(s)) for s in SHAPES),)]  # flat: partition-invariant
    q = payload.law("quantize", {"bits": 2}, SHAPES, ("t", "quantize"))
    q.plans(range(2, 202))
    comp = compressors.get("quantize", bits=2)
    widths = {comp.lane_width(p) for p in range(2, 202) if comp.protocol_for(p) == "allreduce"}
    assert q.plan_calls == len(widths) + 1 and 3 <= len(widths)  # + the all-gather protocol at small p


def test_compressor_outside_the_registry_is_bisected(no_disk_cache):
    """A compressor class the registry does not know is not bound by the contract: bisection in p, still
    equal to its plan() at every world size."""
    class Widening(compressors.get("quantize", bits=2).__class__):
        name = "widening_test"

    comp = Widening(bits=2)
    assert payload.step_key(comp, 2) is None
    law = payload.PayloadLaw(comp, None, SHAPES)
    got = law.plans(WORLD_SIZES)
    assert all(got[p] == _plan(comp, SHAPES, p) for p in WORLD_SIZES)
    assert 2 < law.plan_calls < len(WORLD_SIZES)


def test_disk_cache_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("STUDYKIT_CACHE", str(tmp_path))
    payload.clear()
    a = payload.law("quantize", {"bits": 4}, SHAPES, ("t", 1)).plans([2, 64])
    assert payload.cache_path().is_file()
    payload.clear()
    again = payload.law("quantize", {"bits": 4}, SHAPES, ("t", 1))
    assert again.plans([2, 64]) == a and again.plan_calls == 0
    payload.clear()


# ------------------------------------------------------------------ synthetic cluster: fit then advise
def _truth_calibration(t: Truth) -> Calibration:
    c = lambda v, u: Constant(v, u, "truth")  # noqa: E731
    return Calibration(
        name="truth", alpha_s=c(t.alpha_s, "s"), bandwidth_gbps=c(t.bandwidth_gbps, "Gbit/s"), gamma=c(t.gamma, "ratio"),
        incast_coeff=c(t.incast_coeff, "ratio"),
        t_comp=[TComp(v, "s", "truth", model=m, batch_size=b) for (m, b), v in t.t_comp_s.items()],
        overhead=[Overhead(v * t.t_forward_fraction, "s", "truth", model=m, batch_size=b)
                  for (m, b), v in t.t_comp_s.items()],
        t_encode_decode=[TEncodeDecode(v, "s", "truth", compressor=n, params=json.loads(pk), model=m)
                         for (n, pk, m), v in t.t_encode_decode_s.items()])


def test_fit_then_advise_recovers_the_known_ranking():
    from studykit.perfmodel.fit import fit_calibration

    truth = Truth()
    records = synthetic_records(truth, noise=0.02, seed=3)
    fitted = fit_calibration(__import__("pandas").DataFrame(records), "synthetic", n_boot=50, seed=0)
    cands = [A.Candidate(A.SYNC, "syncsgd"), A.Candidate(A.FP16, "fp16_hook"),
             A.Candidate("powersgd rank=4", "compressor", "powersgd", (("rank", 4),)),
             A.Candidate("signsgd", "compressor", "signsgd")]
    grid = dict(world_sizes=[2, 8, 32, 128], bandwidths_gbps=[0.5, 1, 3, 10, 100, 400], candidate_list=cands,
                model_error=0.05, evidence=False)
    want = A.advise(_truth_calibration(truth), "resnet50", 64, **grid)
    got = A.advise(fitted, "resnet50", 64, **grid)
    t = np.sort(want.time_s, axis=0)
    clear = (t[1] - t[0]) / t[0] > 0.03  # points where the true best wins by more than 3 %
    assert clear.sum() >= 5
    assert np.array_equal(got.best[clear], want.best[clear])
    # every pair the truth separates by more than 5 % is ordered the same way after the fit
    n = len(cands)
    for i in range(n):
        for j in range(i + 1, n):
            apart = np.abs(want.time_s[i] - want.time_s[j]) > 0.05 * np.minimum(want.time_s[i], want.time_s[j])
            assert apart.sum() > 0
            same = (want.time_s[i] < want.time_s[j]) == (got.time_s[i] < got.time_s[j])
            assert same[apart].all(), (cands[i].label, cands[j].label)
    # the fitted constants' bootstrap intervals give intervals that hold the truth-based times
    assert np.all(got.low_s <= want.time_s * 1.05) and np.all(got.high_s >= want.time_s * 0.95)
    assert np.all(got.low_s <= got.time_s) and np.all(got.time_s <= got.high_s)


# ------------------------------------------------------------------ behaviour and refusals
def paper():
    return Calibration.load(A.paths.CALIBRATIONS / "paper_v100.json")


def test_ranking_flags_evidence_and_error():
    adv = A.advise(paper(), "resnet50", 64, [64], [10])
    rows = adv.ranking(64, 10)
    assert rows[0]["within_error_of_best"] and rows == sorted(rows, key=lambda r: r["iteration_ms"])
    by = {r["candidate"]: r for r in rows}
    assert by[A.SYNC]["accuracy_evidence"] == "yes" and by["topk ratio=0.01"]["accuracy_evidence"] == "yes"
    assert by["atomo rank=4"]["accuracy_evidence"] == "none"
    assert by["topk ratio=0.1"]["accuracy_evidence"] == "other parameters"
    assert "quantize bits=8" in adv.unranked and "T_encode_decode" in adv.unranked["quantize bits=8"]
    assert all(r["low_ms"] <= r["iteration_ms"] <= r["high_ms"] for r in rows)
    assert json.dumps(adv.to_dict(), allow_nan=False)


def test_whatif_uses_the_same_ranking():
    from studykit.perfmodel import whatif

    df = whatif.ranking(model="resnet50", batch_size=64, world_sizes=[8, 64], bandwidths_gbps=[1, 10])
    assert set(df["world_size"]) == {8, 64} and (df.loc[df["rank"] == 1, "candidate"].size == 4)


@pytest.mark.parametrize("drop, flag", [("bandwidth_gbps", "--bandwidth-gbps"), ("alpha_s", "--alpha-s"),
                                        ("gamma", "--gamma")])
def test_refuses_missing_constant(drop, flag):
    cal = paper()
    setattr(cal, drop, None)
    with pytest.raises(A.AdviseError, match=flag):
        A.advise(cal, "resnet50", 64, [8], None if drop == "bandwidth_gbps" else [10], model_error=0.05)


def test_refuses_missing_t_comp_and_names_the_model():
    with pytest.raises(A.AdviseError, match="vgg19.*--t-comp-ms"):
        A.advise(paper(), "vgg19", 64, [8], [10], model_error=0.05)


def test_refuses_missing_verification_summary(monkeypatch, tmp_path):
    monkeypatch.setattr(A, "SUMMARY_CSV", tmp_path / "summary.csv")
    with pytest.raises(A.AdviseError, match="--model-error"):
        A.advise(paper(), "resnet50", 64, [8], [10])


@pytest.mark.parametrize("kw, match", [({"model_error": 1.5}, "--model-error"), ({"model_error": float("nan")}, "--model-error"),
                                       ({"world_sizes": []}, "--gpus"), ({"bandwidths_gbps": [0]}, "bandwidth")])
def test_refuses_bad_values(kw, match):
    args = {"world_sizes": [8], "bandwidths_gbps": [10], "model_error": 0.05, **kw}
    with pytest.raises(A.AdviseError, match=match):
        A.advise(paper(), "resnet50", 64, **args)


def test_missing_t_encode_decode_leaves_the_candidate_unranked_with_the_way_out():
    adv = A.advise(paper(), "resnet50", 64, [8], [10], model_error=0.05,
                   candidate_list=A.candidates(["thc", "powersgd"]))
    assert set(adv.unranked) == {"thc bits=2", "thc bits=4", "thc bits=8"}
    assert "studykit profile" in adv.unranked["thc bits=4"]
    assert [r["candidate"] for r in adv.ranking(8, 10)][-1] != "thc bits=4"


# ------------------------------------------------------------------ CLI
def run_cli(*argv, capsys):
    from studykit.perfmodel import cli

    rc = cli.main(["advise", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_table_and_json(capsys):
    rc, out, _ = run_cli("--model", "resnet50", "--gpus", "64", "--bandwidth-gbps", "10", capsys=capsys)
    assert rc == 0 and "syncSGD" in out and "accuracy" in out and "not ranked" in out
    rc, out, _ = run_cli("--model", "resnet50", "--gpus", "8", "64", "--bandwidth-gbps", "1", "10", "--json",
                         capsys=capsys)
    data = json.loads(out)
    assert rc == 0 and len(data["points"]) == 4 and data["points"][0]["ranking"][0]["rank"] == 1


@pytest.mark.parametrize("argv, match", [
    (["--model", "resnet50", "--gpus", "0"], "--gpus"),
    (["--model", "resnet50", "--bandwidth-gbps", "nan"], "--bandwidth-gbps"),
    (["--model", "resnet50", "--model-error", "-1"], "--model-error"),
    (["--model", "vgg19"], "T_comp"),
    (["--model", "resnet50", "--calibration", "/nonexistent.json"], "--calibration"),
    (["--model", "resnet50", "--compressors", "nosuch"], "nosuch"),
])
def test_cli_refusals(argv, match, capsys):
    rc, _, err = run_cli(*argv, capsys=capsys)
    assert rc == 2 and match in err and "Traceback" not in err


def test_committed_advise_benchmark_is_cold_and_meets_the_goal():
    """benchmarks/advise_sweep.py's committed result: no plan cache (payloads derived in the timed call), every
    compressor at 3 values x 100 x 100 points, under the 1 s goal, with its provenance."""
    res = json.loads((A.paths.DATA / "benchmarks" / "advise_sweep.json").read_text())
    assert res["points"] == 100 * 100 and res["candidates"] == len(A.candidates())
    assert res["plan_calls_no_cache"] > 0 and res["plan_calls_cached"] == 0
    assert res["cold_ms"] < res["goal_ms"] == 1000.0 and res["meets_goal"]
    assert res["provenance"]["git_commit"] and res["provenance"]["cores"] >= 1


def test_advise_with_the_extended_terms_adds_the_calibrations_path_overhead():
    """advise prices a compressor as predict does: with the extended terms, the calibration's path overhead for
    the model, batch and mode (fit_path_overheads) is part of the iteration; with the paper's terms it is not."""
    import copy
    from dataclasses import replace

    from studykit.perfmodel.calibration import PathOverhead
    from studykit.perfmodel.model import ModelOptions

    cal = Calibration.load(A.paths.CALIBRATIONS / "h200x2_nvlink.json")
    without = copy.deepcopy(cal)
    without.path_overhead = []
    with_h = copy.deepcopy(cal)
    with_h.path_overhead = [PathOverhead(value=0.007, unit="s", source="test", model="resnet50", batch_size=64,
                                         mode="post")]
    cand = [A.Candidate("signsgd", "compressor", "signsgd")]
    kw = dict(candidate_list=cand, model_error=0.05, evidence=False, mode="post")
    ext = ModelOptions.extended()
    a = A.advise(with_h, "resnet50", 64, [2], [10], options=ext, **kw)
    b = A.advise(without, "resnet50", 64, [2], [10], options=ext, **kw)
    assert a.time_s[0] - b.time_s[0] == pytest.approx(0.007)
    assert a.how["signsgd"]["path_overhead"] == "exact (test)" and b.how["signsgd"]["path_overhead"] == "none fitted"
    off = replace(ext, path_overhead=False)
    a = A.advise(with_h, "resnet50", 64, [2], [10], options=off, **kw)
    b = A.advise(without, "resnet50", 64, [2], [10], options=off, **kw)
    assert np.array_equal(a.time_s, b.time_s) and "path_overhead" not in a.how["signsgd"]
