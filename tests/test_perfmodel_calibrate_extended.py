"""Issue 13 items 1 and 7: fit fills the extended model's constants through the model's own functions, and a
synthetic cluster with known constants is recovered by fit and ranked by advise as the truth ranks it."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from studykit.perfmodel import advise as A
from studykit.perfmodel import fit
from studykit.perfmodel.calibration import Calibration, Constant, Overhead, TComp, TEncodeDecode
from studykit.perfmodel.model import ModelOptions, Workload, predict
from studykit.perfmodel.synthetic import Truth, synthetic_records

TRUTH = Truth(ddp_options="extended", sync_delta_s=3e-3, per_bucket_s=1e-3)


@pytest.fixture(scope="module")
def fitted():
    recs = pd.DataFrame(synthetic_records(TRUTH, noise=0.002, seed=5, ddp_world_sizes=(2, 4, 8)))
    return fit.fit_calibration(recs, "synthetic-extended", n_boot=60, seed=0)


def test_fit_recovers_the_extended_constants_with_intervals_and_sources(fitted):
    for name, truth, rel in (("gamma_extended", TRUTH.gamma, 0.02), ("sync_delta_s", TRUTH.sync_delta_s, 0.25),
                             ("per_bucket_s", TRUTH.per_bucket_s, 0.25)):
        c = getattr(fitted, name)
        assert c is not None, (name, fitted.provenance.get("not_fitted"))
        assert c.value == pytest.approx(truth, rel=rel), name
        assert c.low <= truth <= c.high, (name, c.low, c.high)
        assert "syncSGD DDP records" in c.source and "resnet101 b64" in c.source and c.n >= 6
    # the paper's gamma absorbs the per-iteration terms (App. C's rule has no delta): above the truth
    assert fitted.gamma.value > TRUTH.gamma
    # per-tensor: off in the extended preset, and said so
    assert fitted.per_tensor_s is None and "off in the options" in fitted.provenance["not_fitted"]["per_tensor_s"]
    # the non-backward overhead per model and batch, each with an interval and its records
    o = {(c.model, c.batch_size): c for c in fitted.overhead}
    for (m, b), t in TRUTH.t_comp_s.items():
        assert o[(m, b)].value == pytest.approx(t * TRUTH.t_forward_fraction, rel=0.05)
        assert o[(m, b)].low < o[(m, b)].value < o[(m, b)].high and "fwd_bwd" in o[(m, b)].source


def test_calibration_round_trip_and_predict_uses_the_extended_terms(fitted, tmp_path, capsys):
    from studykit.perfmodel import cli

    path = fitted.save(tmp_path / "cal.json")
    assert Calibration.load(path).to_dict() == fitted.to_dict()
    argv = ["predict", "--model", "resnet101", "--gpus", "8", "--bandwidth-gbps", "100", "--calibration", str(path),
            "--json"]
    ms = {}
    for terms in ("paper", "extended"):
        assert cli.main([*argv, "--options", terms]) == 0
        ms[terms] = json.loads(capsys.readouterr().out)["points"][0]["syncsgd"]["total_ms"]
    w = Workload("resnet101", 64, t_comp_s=TRUTH.t_comp_s[("resnet101", 64)])
    want = 1e3 * float(predict(w, TRUTH.hardware(), 8, options=TRUTH.options()).sync["total_s"])
    assert ms["extended"] == pytest.approx(want, rel=0.02)
    assert abs(ms["paper"] / want - 1) > abs(ms["extended"] / want - 1)


def _truth_calibration(t: Truth) -> Calibration:
    def c(v, u):
        return Constant(v, u, "truth")

    return Calibration(
        name="truth", alpha_s=c(t.alpha_s, "s"), bandwidth_gbps=c(t.bandwidth_gbps, "Gbit/s"), gamma=c(t.gamma, "ratio"),
        incast_coeff=c(t.incast_coeff, "ratio"), gamma_extended=c(t.gamma, "ratio"),
        sync_delta_s=c(t.sync_delta_s, "s"), per_bucket_s=c(t.per_bucket_s, "s"),
        t_comp=[TComp(v, "s", "truth", model=m, batch_size=b) for (m, b), v in t.t_comp_s.items()],
        overhead=[Overhead(v * t.t_forward_fraction, "s", "truth", model=m, batch_size=b)
                  for (m, b), v in t.t_comp_s.items()],
        t_encode_decode=[TEncodeDecode(v, "s", "truth", compressor=n, params=json.loads(pk), model=m)
                         for (n, pk, m), v in t.t_encode_decode_s.items()])


def test_fit_then_advise_recovers_the_known_ranking_with_the_extended_model(fitted):
    opts = ModelOptions.extended()
    cands = [A.Candidate(A.SYNC, "syncsgd"), A.Candidate(A.FP16, "fp16_hook"),
             A.Candidate("powersgd rank=4", "compressor", "powersgd", (("rank", 4),)),
             A.Candidate("signsgd", "compressor", "signsgd")]
    grid = dict(world_sizes=[2, 8, 32, 128], bandwidths_gbps=[0.5, 1, 3, 10, 100, 400], candidate_list=cands,
                model_error=0.05, evidence=False, options=opts)
    want = A.advise(_truth_calibration(TRUTH), "resnet50", 64, **grid)
    got = A.advise(fitted, "resnet50", 64, **grid)
    assert "gamma_extended" in got.inputs and "sync_delta_s" in got.inputs
    t = np.sort(want.time_s, axis=0)
    clear = (t[1] - t[0]) / t[0] > 0.03
    assert clear.sum() >= 5 and np.array_equal(got.best[clear], want.best[clear])
    np.testing.assert_allclose(got.time_s, want.time_s, rtol=0.03)
    assert np.all(got.low_s <= want.time_s * 1.02) and np.all(got.high_s >= want.time_s * 0.98)
    # without the fitted terms the extended model misses the truth's syncSGD time by the per-iteration terms
    bare = Calibration.from_dict({k: v for k, v in fitted.to_dict().items()
                                  if k not in ("gamma_extended", "sync_delta_s", "per_bucket_s")})
    worse = A.advise(bare, "resnet50", 64, **grid)
    assert np.max(np.abs(worse.time_s[0] / want.time_s[0] - 1)) > np.max(np.abs(got.time_s[0] / want.time_s[0] - 1))


# ------------------------------------------------------------------ refusals and notes, one per missing input
def _recs(**kw):
    return pd.DataFrame(synthetic_records(TRUTH, noise=0.01, seed=1, **kw))


def test_refuses_without_backward_times():
    df = _recs()
    df = df[df["kind"] != "tcomp"]
    with pytest.raises(ValueError, match="extended syncSGD terms: needs single-GPU backward times"):
        fit.fit_sync_calibration(df, TRUTH.alpha_s, TRUTH.bandwidth_gbps)


def test_refuses_without_ddp_records():
    df = _recs()
    with pytest.raises(ValueError, match="no records of kind 'ddp'"):
        fit.fit_sync_calibration(df[df["kind"] != "ddp"], TRUTH.alpha_s, TRUTH.bandwidth_gbps)


def test_refuses_ddp_at_world_size_one_only():
    with pytest.raises(ValueError, match="need DDP records at world_size >= 2"):
        fit.fit_sync_calibration(_recs(ddp_world_sizes=(1,)), TRUTH.alpha_s, TRUTH.bandwidth_gbps)


def test_fit_calibration_refuses_ddp_without_all_reduce_records():
    df = _recs()
    df = df[~((df["kind"] == "sweep") & (df["op"] == "all_reduce"))]
    with pytest.raises(ValueError, match="DDP records need all-reduce records too"):
        fit.fit_calibration(df, "x", n_boot=0)


def test_says_which_terms_one_model_cannot_determine():
    one = Truth(ddp_options="extended", sync_delta_s=3e-3, t_comp_s={("resnet50", 64): 0.118})
    found, why = fit.fit_sync_calibration(pd.DataFrame(synthetic_records(one, seed=2)), one.alpha_s, one.bandwidth_gbps,
                                          n_boot=0)
    # one backward time: gamma cannot be told from delta, so gamma stays 1 and delta absorbs the constant
    assert set(found) == {"sync_delta_s"}
    assert "less than 1.5x apart" in why["gamma_extended"] and "gamma kept at 1" in why["gamma_extended"]
    assert "one DDP bucket count only" in why["per_bucket_s"]


def test_says_when_gamma_is_unobservable():
    slow = Truth(ddp_options="extended", bandwidth_gbps=0.5)
    found, why = fit.fit_sync_calibration(pd.DataFrame(synthetic_records(slow, seed=0)), slow.alpha_s, 0.5, n_boot=0)
    assert found == {} and "no compute-bound DDP record" in why["gamma_extended"]


# ------------------------------------------------------------------ the path overhead (issue 13 item 2)
PATH_TRUTH = {"post": 4e-3, "hook": 9e-3}


def _with_compressed_runs(recs: pd.DataFrame, cal: Calibration, noise: float = 0.002) -> pd.DataFrame:
    """``recs`` plus compressed DDP runs of resnet50 b64 at p = 2 and 4: what ``predict --calibration --terms
    extended`` gives for them plus a known path overhead per mode (PATH_TRUTH), times log-normal noise."""
    from dataclasses import replace

    from studykit.perfmodel.model import Hardware

    opts = replace(ModelOptions.extended(), path_overhead=False)
    rng = np.random.default_rng(7)
    base = recs[recs["kind"] == "ddp"].iloc[0].to_dict()
    rows = []
    for mode, h in PATH_TRUTH.items():
        for comp, params in (("powersgd", {"rank": 4}), ("signsgd", {}), ("none", {})):
            for p in (2, 4):
                pr = predict(Workload("resnet50", 64), Hardware.from_calibration(cal, opts), p, comp, params,
                             calibration=cal, options=opts, mode=mode)
                t = (float(np.asarray(pr.compressed["iteration_s"]).reshape(-1)[0]) + h) * np.exp(rng.normal(0, noise))
                rows.append({**base, "mode": mode, "compressor": comp, "params": params, "model": "resnet50",
                             "batch_size": 64, "world_size": p, "hook_overlap": True if mode == "hook" else None,
                             "ms_median": t * 1e3, "ms_mean": t * 1e3, "ms_min": t * 1e3, "times_ms": [t * 1e3]})
    return pd.concat([recs, pd.DataFrame(rows)], ignore_index=True)


def test_fit_recovers_a_known_path_overhead_per_mode_and_predict_uses_it(fitted):
    recs = pd.DataFrame(synthetic_records(TRUTH, noise=0.002, seed=5, ddp_world_sizes=(2, 4, 8)))
    cal = fit.fit_calibration(_with_compressed_runs(recs, fitted), "synthetic-path", n_boot=60, seed=0)
    got = {(c.model, c.batch_size, c.mode): c for c in cal.path_overhead}
    assert set(got) == {("resnet50", 64, "post"), ("resnet50", 64, "hook")}
    for mode, h in PATH_TRUTH.items():
        c = got[("resnet50", 64, mode)]
        assert c.value == pytest.approx(h, abs=1.5e-3), mode
        assert c.n == 6 and c.low <= c.value <= c.high and "compressed" in c.source
    assert "path_overhead" in cal.provenance["fitted"]
    # predict --calibration with the extended terms adds it to the iteration; the paper's terms do not
    ext = predict(Workload("resnet50", 64), fit.Hardware.from_calibration(cal, ModelOptions.extended()), 2, "signsgd",
                  calibration=cal, options=ModelOptions.extended(), mode="hook")
    assert ext.notes["path_overhead_s"] == pytest.approx(got[("resnet50", 64, "hook")].value)
    assert "exact" in ext.notes["path_overhead"]
    # saved and loaded, it is the same
    assert Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))).path_overhead == cal.path_overhead


def test_fit_says_why_the_path_overhead_is_not_fitted_without_profiles(fitted):
    recs = _with_compressed_runs(pd.DataFrame(synthetic_records(TRUTH, noise=0.002, seed=5)), fitted)
    cal = fit.fit_calibration(recs[recs["kind"] != "profile"], "no-profiles", n_boot=20, seed=0)
    assert not cal.path_overhead
    assert "compressed DDP records need all-reduce, tcomp and profile records" in cal.provenance["not_fitted"]["path_overhead"]
