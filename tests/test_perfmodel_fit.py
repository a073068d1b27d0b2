"""Fitting alpha, BW, gamma, incast, T_comp, T_encode_decode from records: recovery and errors."""
import json

import numpy as np
import pandas as pd
import pytest

from studykit.perfmodel import fit, synthetic
from studykit.perfmodel.calibration import Calibration


@pytest.fixture(scope="module", params=[0, 1], ids=["seed0", "seed1"])
def records(request):
    return pd.DataFrame(synthetic.synthetic_records(seed=request.param))


TRUTH = synthetic.Truth()


def _inside(c, truth, rel=0.05):
    assert c.low is not None and c.high is not None, c
    assert c.low <= truth <= c.high, f"{truth} outside [{c.low}, {c.high}] ({c.source})"
    assert c.value == pytest.approx(truth, rel=rel)


def test_alpha_bw_recovered_within_bootstrap_interval(records):
    ab = fit.fit_alpha_bw(records)
    _inside(ab.alpha_s, TRUTH.alpha_s)
    _inside(ab.bandwidth_gbps, TRUTH.bandwidth_gbps)
    assert ab.alpha_s.r2 > 0.99 and ab.alpha_s.n == 30
    # per world size: the Eq. 1 bandwidth is the same at every p
    assert set(ab.per_world_size["world_size"]) == {2, 4, 8}
    np.testing.assert_allclose(ab.per_world_size["bw_gbps"], TRUTH.bandwidth_gbps, rtol=0.05)


def test_alpha_bw_from_one_world_size():
    df = pd.DataFrame(synthetic.synthetic_records(world_sizes=(4,), seed=2))
    ab = fit.fit_alpha_bw(df)
    _inside(ab.alpha_s, TRUTH.alpha_s, rel=0.1)
    _inside(ab.bandwidth_gbps, TRUTH.bandwidth_gbps, rel=0.1)


def test_incast_recovered(records):
    ab = fit.fit_alpha_bw(records)
    c = fit.fit_incast(records, ab.alpha_s.value, ab.bandwidth_gbps.value)
    _inside(c, TRUTH.incast_coeff, rel=0.1)


def test_gamma_recovered(records):
    ab = fit.fit_alpha_bw(records)
    g = fit.fit_gamma(records, ab.alpha_s.value, ab.bandwidth_gbps.value)
    _inside(g, TRUTH.gamma, rel=0.03)
    assert "tcomp fwd_bwd" in g.source


def test_gamma_overhead_from_ddp_at_world_size_one():
    recs = synthetic.synthetic_records(seed=3, ddp_world_sizes=(1, 2, 4))
    df = pd.DataFrame([r for r in recs if not (r["kind"] == "tcomp" and r["phase"] == "fwd_bwd")])
    g = fit.fit_gamma(df, TRUTH.alpha_s, TRUTH.bandwidth_gbps)
    assert "ddp world_size 1" in g.source
    assert g.value == pytest.approx(TRUTH.gamma, rel=0.03)


def test_t_comp_and_encode_decode_recovered(records):
    tc = {(c.model, c.batch_size): c for c in fit.fit_t_comp(records)}
    assert set(tc) == set(TRUTH.t_comp_s)
    for key, truth in TRUTH.t_comp_s.items():
        _inside(tc[key], truth)
    ed = {(e.compressor, json.dumps(e.params, sort_keys=True), e.model): e for e in fit.fit_encode_decode(records)}
    for key, truth in TRUTH.t_encode_decode_s.items():
        _inside(ed[key], truth)


def test_encode_decode_linear_in_world_size():
    base = {"kind": "encode_decode", "compressor": "signsgd", "params": {}, "model": "resnet50"}
    rows = [{**base, "world_size": p, "ms_median": 10 + 0.5 * p + 0.01 * (-1) ** p} for p in (2, 4, 8, 16, 32, 64)]
    (e,) = fit.fit_encode_decode(pd.DataFrame(rows))
    assert e.value == pytest.approx(0.010, rel=0.01)
    assert e.per_worker_s == pytest.approx(0.0005, rel=0.01)
    assert e.r2 > 0.999


def test_fit_calibration_end_to_end(records, tmp_path):
    cal = fit.fit_calibration(records, "synthetic", n_boot=50)
    for name in ("alpha_s", "bandwidth_gbps", "gamma", "incast_coeff"):
        assert getattr(cal, name) is not None, name
    assert cal.provenance["records"] == len(records)
    again = Calibration.load(cal.save(tmp_path / "cal.json"))
    assert again.to_dict() == cal.to_dict()


def test_short_kinds_are_accepted():
    rows = [{"kind": "allreduce", "world_size": p, "size_bytes": b,
             "ms_median": 1e3 * (2 * 1e-5 * (p - 1) + 2 * b * (p - 1) / (p * 1.25e9))}
            for p in (2, 8) for b in (1e3, 1e6, 1e8)]
    ab = fit.fit_alpha_bw(pd.DataFrame(rows), n_boot=20)
    assert ab.alpha_s.value == pytest.approx(1e-5, rel=1e-6)
    assert ab.bandwidth_gbps.value == pytest.approx(10.0, rel=1e-6)


def test_failed_records_are_ignored():
    rows = [{"kind": "allreduce", "world_size": 2, "size_bytes": b, "ms_median": 1e3 * (1e-5 + b / 1.25e9),
             "status": "ok"} for b in (1e3, 1e6, 1e8)]
    rows.append({"kind": "allreduce", "world_size": 2, "size_bytes": 1e9, "ms_median": None, "status": "error"})
    assert fit.fit_alpha_bw(pd.DataFrame(rows), n_boot=0).alpha_s.n == 3


# ------------------------------------------------------------------ errors
def _ar(sizes=(1e3, 1e6), world_sizes=(2,), ms=1.0):
    return pd.DataFrame([{"kind": "allreduce", "world_size": p, "size_bytes": b, "ms_median": ms}
                         for p in world_sizes for b in sizes])


def test_one_message_size_is_an_error():
    with pytest.raises(ValueError, match="one message size only.*2 distinct size_bytes"):
        fit.fit_alpha_bw(_ar(sizes=(1e6,), world_sizes=(2, 4)))


def test_world_size_one_only_is_an_error():
    with pytest.raises(ValueError, match="world_size 1"):
        fit.fit_alpha_bw(_ar(world_sizes=(1,)))


def test_missing_columns_are_named():
    with pytest.raises(ValueError, match=r"lack column\(s\) \['size_bytes'\]"):
        fit.fit_alpha_bw(_ar().drop(columns=["size_bytes"]))
    with pytest.raises(ValueError, match="ms_median"):
        fit.fit_alpha_bw(_ar().drop(columns=["ms_median"]))
    with pytest.raises(ValueError, match="'kind'"):
        fit.normalize(pd.DataFrame([{"world_size": 2}]))


def test_non_positive_times_are_an_error():
    df = _ar(sizes=(1e3, 1e6, 1e9))
    df.loc[1, "ms_median"] = 0.0
    with pytest.raises(ValueError, match="non-positive"):
        fit.fit_alpha_bw(df)


def test_no_records_of_the_kind_is_an_error():
    with pytest.raises(ValueError, match="no records of kind 'allreduce'"):
        fit.fit_alpha_bw(pd.DataFrame([{"kind": "tcomp", "model": "resnet50", "batch_size": 1, "ms_median": 1}]))
    with pytest.raises(ValueError, match="phase 'bwd'"):
        fit.fit_t_comp(pd.DataFrame([{"kind": "ddp", "model": "resnet50", "batch_size": 1, "ms_median": 1}]))


def test_times_that_do_not_grow_with_size_leave_bandwidth_undetermined():
    with pytest.raises(ValueError, match="bandwidth undetermined"):
        fit.fit_alpha_bw(_ar(sizes=(1e3, 1e6, 1e8), world_sizes=(2,), ms=1.0))


def test_gamma_unobservable_when_communication_bound():
    recs = synthetic.synthetic_records(synthetic.Truth(bandwidth_gbps=0.5), seed=0)
    with pytest.raises(ValueError, match="communication-bound"):
        fit.fit_gamma(pd.DataFrame(recs), TRUTH.alpha_s, 0.5)


def test_gamma_needs_t_comp():
    df = pd.DataFrame([r for r in synthetic.synthetic_records() if r["kind"] != "tcomp"])
    with pytest.raises(ValueError, match="backward times"):
        fit.fit_gamma(df, TRUTH.alpha_s, TRUTH.bandwidth_gbps)


def test_fit_calibration_strict_and_lenient():
    df = pd.concat([_ar(sizes=(1e6,), world_sizes=(2, 4)),
                    pd.DataFrame([{"kind": "tcomp", "phase": "bwd", "model": "resnet50", "batch_size": 64,
                                   "ms_median": 120.0, "ms_min": 118.0, "ms_max": 125.0}])])
    with pytest.raises(ValueError, match="one message size only"):
        fit.fit_calibration(df, "x")
    cal = fit.fit_calibration(df, "x", strict=False)
    assert cal.alpha_s is None and "one message size" in cal.provenance["not_fitted"]["alpha_s, bandwidth_gbps"]
    assert cal.t_comp[0].value == pytest.approx(0.120) and cal.t_comp[0].low == pytest.approx(0.118)
    with pytest.raises(ValueError, match="nothing to fit"):
        fit.fit_calibration(pd.DataFrame([{"kind": "copy_bw", "ms_median": 1.0}]), "x")


def test_load_records(tmp_path):
    """fit reads through the kit's one reader: a damaged line is skipped with a warning and reported."""
    p = synthetic.write_jsonl(synthetic.synthetic_records()[:5], tmp_path / "r.jsonl")
    assert len(fit.load_frame(p)) == 5 and len(fit.load_frame(tmp_path)) == 5
    with pytest.raises(FileNotFoundError):
        fit.load_frame(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(p.read_text() + "{not json\n")
    with pytest.warns(UserWarning, match="unparsable"):
        df = fit.load_frame(bad)
    assert len(df) == 5 and df.attrs["report"].n_damaged == 1 and set(df["source"]) == {str(bad)}
    (tmp_path / "only_bad.jsonl").write_text("{not json\n")
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="no records"):
        fit.load_frame(tmp_path / "only_bad.jsonl")


def test_load_records_checks_schema_and_drops_duplicates(tmp_path):
    recs = synthetic.synthetic_records()[:3]
    for i, r in enumerate(recs):
        r["config_id"] = f"c{i}"
    p = synthetic.write_jsonl(recs + recs[:1], tmp_path / "dup.jsonl")
    df = fit.load_frame(p)
    assert len(df) == 3 and df.attrs["report"].n_duplicates == 1
    synthetic.write_jsonl([{**recs[0], "schema": 99}], tmp_path / "v99.jsonl")
    with pytest.raises(ValueError, match="schema"):
        fit.load_frame(tmp_path / "v99.jsonl")


def test_gamma_not_fitted_from_world_size_one_is_said():
    recs = [r for r in synthetic.synthetic_records() if not (r["kind"] == "ddp" and r["world_size"] >= 2)]
    for r in recs:
        if r["kind"] == "ddp":
            r["world_size"] = 1
    recs += [{**r, "world_size": 1} for r in synthetic.synthetic_records() if r["kind"] == "ddp"][:1]
    cal = fit.fit_calibration(pd.DataFrame(recs), "p1", n_boot=0)  # strict (the default)
    # gamma cannot be determined: 1, said in the constant and in the notes (never left unknown, never wild)
    assert cal.gamma.value == pytest.approx(1.0) and "assumed" in cal.gamma.source
    assert "world size 1" in cal.provenance["not_fitted"]["gamma"]


def test_zero_forward_backward_time_is_refused():
    recs = synthetic.synthetic_records()
    for r in recs:
        if r["kind"] == "tcomp" and r["phase"] == "fwd_bwd":
            r["ms_median"] = 0.0
    with pytest.raises(ValueError, match="non-positive"):
        fit.fit_calibration(pd.DataFrame(recs), "zero", n_boot=0)


def _differences(got, want, rel=1e-12, where="records") -> list[str]:
    """Where two JSON values differ: same structure, text and integers; floats within ``rel`` (another
    machine's libm may change the last digit of a generated float)."""
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return [] if got == pytest.approx(want, rel=rel) else [f"{where}: {got!r} != {want!r}"]
    if isinstance(want, dict) and isinstance(got, dict) and got.keys() == want.keys():
        return [d for k in want for d in _differences(got[k], want[k], rel, f"{where}[{k!r}]")]
    if isinstance(want, list) and isinstance(got, list) and len(got) == len(want):
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in _differences(g, w, rel, f"{where}[{i}]")]
    return [] if got == want and type(got) is type(want) else [f"{where}: {got!r} != {want!r}"]


def _jsonl(path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_committed_demo_file_is_the_generator_output():
    assert synthetic.DEMO_PATH.exists(), ("run python -m studykit.perfmodel.synthetic --out "
                                          "data/measurements/synthetic/demo.jsonl --overwrite-committed")
    assert _differences(_jsonl(synthetic.DEMO_PATH), json.loads(json.dumps(synthetic.synthetic_records()))) == []


def test_synthetic_main_writes_reports_and_the_committed_demo_only_when_told(tmp_path, capsys):
    with pytest.raises(SystemExit):
        synthetic.main(["--out", str(synthetic.DEMO_PATH)])
    assert "--overwrite-committed" in capsys.readouterr().err
    assert synthetic.main(["--out", str(tmp_path / "d.jsonl")]) == 0
    assert _differences(_jsonl(tmp_path / "d.jsonl"), _jsonl(synthetic.DEMO_PATH)) == []


def test_extended_sync_terms_keep_gamma_at_1_when_the_backward_times_are_too_close():
    """Backward passes 10 and 12 ms (less than 1.5x apart), each iteration 5 ms longer: a line through them
    cannot tell gamma from delta. The extended fit keeps gamma = 1 and puts the 5 ms in delta (a constant
    extrapolates as a constant); the paper's rule puts it in gamma (median of 15/10 and 17/12)."""
    from studykit.perfmodel.fit import fit_sync_terms

    rows = [{"s": t + 5e-3, "t_comp": t, "overlapped_comm": 0.0, "last_comm": 0.0, "k": 3, "n_tensors": 100}
            for t in (10e-3, 12e-3)]
    ext = fit_sync_terms(rows, extended=True)
    assert ext.gamma == 1.0 and ext.delta_s == pytest.approx(5e-3) and ext.fitted == ("delta",)
    assert "cannot be told from delta" in ext.how
    paper = fit_sync_terms(rows)
    assert paper.gamma == pytest.approx((15 / 10 + 17 / 12) / 2) and paper.fitted == ("gamma",)
    # 1.5x apart: both terms fitted by the line
    wide = fit_sync_terms([dict(rows[0]), {**rows[0], "t_comp": 20e-3, "s": 25e-3}], extended=True)
    assert wide.gamma == pytest.approx(1.0) and wide.delta_s == pytest.approx(5e-3) and "gamma" in wide.fitted


def test_curve_fit_keeps_gamma_at_1_when_no_record_moves_with_it():
    """The timeline's gamma (``fit_sync_terms_curve``) from syncSGD records so communication-bound that T_obs moves
    by under 2 % of the iteration over the whole grid (VGG19's 548 MB over 2.5-10 Gbit/s): the noise would pick
    gamma, so it stays 1 and says why. A record that moves with gamma gets it fitted, even at the grid's edge."""
    from studykit.perfmodel.fit import GAMMA_GRID, GAMMA_MIN_SENSITIVITY, fit_sync_terms_curve

    # T_obs = 500 ms + 1 ms x gamma: 2.2 ms (0.44 %) over 0.8-3.0; measured as if gamma were 2.5 (noise does that)
    flat = [{"s": 0.5 + 2.5e-3, "curve": 0.5 + 1e-3 * GAMMA_GRID, "k": 6}]
    t = fit_sync_terms_curve(flat, GAMMA_GRID, extended=True)
    assert t.gamma == 1.0 and t.fitted == () and "not identifiable" in t.how and "0.4%" in t.how
    # the extra terms are fitted at gamma = 1: the 1.5 ms left lands in delta
    assert t.delta_s == pytest.approx(1.5e-3, rel=1e-6)
    # a compute-bound record: T_obs = 20 ms x gamma, measured 34 ms -> gamma 1.7 (and delta 0)
    steep = [{"s": 34e-3, "curve": 20e-3 * GAMMA_GRID, "k": 6}]
    t = fit_sync_terms_curve(flat + steep, GAMMA_GRID, extended=True)
    assert "gamma" in t.fitted and "not identifiable" not in t.how
    assert 1.6 <= t.gamma <= 1.8
    # just above the threshold: fitted
    edge = [{"s": 0.1, "curve": 0.1 * (1 + 1.01 * GAMMA_MIN_SENSITIVITY * (GAMMA_GRID - 0.8) / 2.2), "k": 1}]
    assert fit_sync_terms_curve(edge, GAMMA_GRID).fitted == ("gamma",)


def test_curve_fit_at_a_given_gamma_fits_only_the_extra_terms():
    """``given``: gamma is the grid's single value (measured elsewhere), said so, not counted as fitted; the extra
    terms are fitted at it (T_obs at gamma 1.1 is 110 ms, measured 112 ms: delta 2 ms); a grid is refused."""
    import numpy as np

    from studykit.perfmodel.fit import fit_sync_terms_curve

    rows = [{"s": 0.112, "curve": np.array([0.110]), "k": 6}]
    t = fit_sync_terms_curve(rows, np.array([1.1]), extended=True, given="measured (by hand)")
    assert t.gamma == 1.1 and t.fitted == () and t.delta_s == pytest.approx(2e-3, rel=1e-6)
    assert t.how.startswith("gamma=1.100 measured (by hand), delta=2.000 ms")
    with pytest.raises(ValueError, match="a given gamma is one value, got a grid of 2"):
        fit_sync_terms_curve(rows, np.array([1.0, 1.1]), given="measured")
