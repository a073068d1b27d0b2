"""A calibration fit that a slow link cannot fool, calibrations that compose, and the checks around them.

gamma (Agarwal et al. 2022, https://arxiv.org/abs/2103.00543, Sec. 4.1 and App. C) comes from DDP's bucket-ready
stamps where the records hold them, else only from records whose backward pass bounds the overlap by a wide
margin, else it is 1 with a note; fitted constants that cannot be trusted are named in ``Calibration.warnings``.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from studykit import cli as top
from studykit import paths
from studykit.perfmodel import fit, synthetic
from studykit.perfmodel.calibration import Calibration, Constant, TComp

H200_P2 = paths.MEASUREMENTS / "bandwidth" / "h200_p2"
SLOW = "rate_gbps=10,workers=2"


# ------------------------------------------------------------------ the committed slow-link campaign
@pytest.fixture(scope="module")
def slow_cal():
    with pytest.warns(UserWarning):  # the probe records carry no schema field; a duplicate profile record
        df = fit.load_frame(H200_P2)
    return fit.fit_calibration(df, "h200_p2_10g", network=SLOW, n_boot=20, seed=0)


def test_committed_slow_link_gives_no_wild_gamma(slow_cal):
    g = slow_cal.gamma
    assert g is not None
    assert 0.5 <= g.value <= 3.0 or (g.value == 1.0 and "not determined" in g.note), (g.value, g.source)
    # the extended terms are not charged with what the communication model misses either
    assert slow_cal.per_bucket_s is None or slow_cal.per_bucket_s.value < 5e-3


def test_committed_slow_link_warns_about_a_bandwidth_above_the_link(slow_cal):
    assert slow_cal.bandwidth_gbps.value > 10.0  # what the sweep's Eq. 1 fit gives on this tc tbf link
    bw = [w for w in slow_cal.warnings if w.startswith("bandwidth_gbps")]
    assert len(bw) == 1 and "above" in bw[0] and "10 Gbit/s" in bw[0] and "probe" in bw[0]


def test_committed_slow_link_round_trips_its_warnings(slow_cal, tmp_path):
    again = Calibration.load(slow_cal.save(tmp_path / "c.json"))
    assert again.warnings == slow_cal.warnings and again.to_dict() == slow_cal.to_dict()
    assert json.loads((tmp_path / "c.json").read_text())["warnings"] == slow_cal.warnings


def test_fit_cli_prints_the_warnings_loudly(capsys, tmp_path):
    out = tmp_path / "slow.json"
    with pytest.warns(UserWarning):
        rc = top.main(["fit", str(H200_P2), "--network", SLOW, "--out", str(out), "--bootstrap", "0", "--json"])
    cap = capsys.readouterr()
    assert rc == 0
    assert "WARNING" in cap.err and "bandwidth_gbps" in cap.err
    summary = json.loads(cap.out)
    assert summary["warnings"] == Calibration.load(out).warnings and summary["warnings"]


# ------------------------------------------------------------------ gamma on a synthetic slow link
TRUE_GAMMA = 1.3
SLOW_TRUTH = synthetic.Truth(bandwidth_gbps=1.0, gamma=TRUE_GAMMA)


def _stamps(records: list[dict], gamma: float, seed: int = 0) -> list[dict]:
    """``buckets`` records (``ddp --bucket-times``) for every syncSGD DDP record at world size >= 2: the last
    bucket's device ready time is the backward pass's compute under overlap, ``gamma * T_comp``."""
    rng = np.random.default_rng(seed)
    t_comp = {(r["model"], r["batch_size"]): r["ms_median"] for r in records
              if r["kind"] == "tcomp" and r["phase"] == "bwd"}
    out = []
    for r in records:
        if r["kind"] == "ddp" and r["world_size"] >= 2:
            last = gamma * t_comp[(r["model"], r["batch_size"])] * float(np.exp(rng.normal(0, 0.005)))
            ready = [0.1 * last, 0.5 * last, last]
            out.append({**{k: r[k] for k in ("schema", "status", "synthetic", "gpu", "host", "model", "batch_size",
                                              "world_size", "bucket_mb", "mode", "timestamp")},
                        "kind": "buckets", "ms_median": r["ms_median"], "clock": "cuda_event", "ready_ms": ready,
                        "ready_fraction": [x / last for x in ready], "bucket_index": [0, 1, 2]})
    return out


def test_slow_link_ddp_records_alone_give_gamma_one_with_a_note():
    recs = synthetic.synthetic_records(SLOW_TRUTH, seed=1)
    cal = fit.fit_calibration(pd.DataFrame(recs), "slow", n_boot=20)
    assert cal.gamma.value == 1.0 and "not determined" in cal.gamma.note
    assert "gamma" in cal.provenance["not_fitted"] and "gamma" not in cal.provenance["fitted"]


def test_bucket_stamps_recover_a_known_gamma_on_a_slow_link():
    recs = synthetic.synthetic_records(SLOW_TRUTH, seed=1)
    cal = fit.fit_calibration(pd.DataFrame(recs + _stamps(recs, TRUE_GAMMA)), "slow", n_boot=50)
    assert cal.gamma.value == pytest.approx(TRUE_GAMMA, rel=0.02)
    assert cal.gamma.low <= TRUE_GAMMA <= cal.gamma.high
    assert "bucket" in cal.gamma.source and "gamma" in cal.provenance["fitted"]


def test_stamps_take_precedence_over_iteration_times():
    """On a fast link the iteration times determine gamma too; the stamps measure it directly and win."""
    recs = synthetic.synthetic_records(seed=2)  # Truth(): 100 Gbit/s, gamma 1.06, compute-bound DDP records
    cal = fit.fit_calibration(pd.DataFrame(recs + _stamps(recs, 1.2)), "fast", n_boot=0)
    assert cal.gamma.value == pytest.approx(1.2, rel=0.02)


def test_margin_keeps_records_the_model_calls_compute_bound_by_a_whisker_out():
    """A record whose communication the model underestimates (predicted 0.8 T_comp, really 2 T_comp): a 5 % margin
    against the measured time calls it compute-bound and charges the missed communication to gamma (2.0); the
    margin against T_comp leaves it out, so gamma is not determined."""
    rows = [{"s": 2.0 * tc, "t_comp": tc, "overlapped_comm": 0.8 * tc, "last_comm": 0.0, "k": 4, "n_tensors": 100}
            for tc in (0.02, 0.05)]
    assert fit.fit_sync_terms(rows).gamma == pytest.approx(2.0)
    robust = fit.fit_sync_terms(rows, comm_fraction=fit.COMPUTE_BOUND_COMM_FRACTION)
    assert robust.gamma == 1.0 and "gamma" not in robust.fitted
    # one bucket (k = 1): nothing overlapped, all of it in the last bucket, whose miss lands in gamma just the same
    one = [{**r, "overlapped_comm": 0.0, "last_comm": 0.8 * r["t_comp"], "k": 1} for r in rows]
    assert fit.fit_sync_terms(one).gamma == pytest.approx(1.2)
    assert "gamma" not in fit.fit_sync_terms(one, comm_fraction=fit.COMPUTE_BOUND_COMM_FRACTION).fitted
    # well inside the margin: counted
    inside = [{**r, "overlapped_comm": 0.2 * r["t_comp"], "last_comm": 0.1 * r["t_comp"], "s": 1.2 * r["t_comp"]}
              for r in rows]
    assert fit.fit_sync_terms(inside, comm_fraction=fit.COMPUTE_BOUND_COMM_FRACTION).gamma == pytest.approx(1.1)


# ------------------------------------------------------------------ quality warnings
def test_quality_warnings_name_low_r2_and_wide_intervals():
    cal = Calibration(name="q", gamma=Constant(14.0, "ratio", "fit", low=4.6, high=23.4, r2=0.38, n=6),
                      per_bucket_s=Constant(0.01, "s", "fit", low=0.0, high=0.15, r2=0.95, n=6),
                      alpha_s=Constant(2e-5, "s", "fit", low=1.9e-5, high=2.1e-5, r2=0.99, n=30),
                      t_comp=[TComp(0.1, "s", "tcomp", low=0.01, high=0.5, model="resnet50", batch_size=64)])
    w = fit.quality_warnings(cal)
    assert any(x.startswith("gamma") and "R^2 0.38" in x for x in w)
    assert any(x.startswith("per_bucket_s") and "interval" in x for x in w)
    assert any(x.startswith("t_comp") and "resnet50" in x for x in w)
    assert not any(x.startswith("alpha_s") for x in w)


def test_bandwidth_warning_uses_the_nominal_rate_and_the_probe():
    cal = Calibration(name="b", bandwidth_gbps=Constant(11.6, "Gbit/s", "fit"), alpha_s=Constant(3e-5, "s", "fit"),
                      network={"rate_gbps": 10.0, "workers": 2})
    (w,) = fit.bandwidth_warnings(cal, pd.DataFrame([{"kind": "ddp"}]))
    assert "11.6" in w and "10 Gbit/s" in w
    cal.bandwidth_gbps = Constant(10.2, "Gbit/s", "fit")  # within the tolerance of the nominal rate
    assert fit.bandwidth_warnings(cal, pd.DataFrame([{"kind": "ddp"}])) == []
    cal.network = None  # a real network: only a probe can tell
    probe = pd.DataFrame([{"kind": "throttle_probe", "busbw_gbps": 9.0, "nbytes": 64 * 2**20, "world_size": 2}])
    (w,) = fit.bandwidth_warnings(cal, probe)
    assert "probe" in w and "9.0" in w


# ------------------------------------------------------------------ composition
A_TRUTH = synthetic.Truth(alpha_s=5e-6, bandwidth_gbps=2000.0, t_comp_s={("resnet50", 64): 0.050,
                                                                         ("resnet101", 64): 0.090})
B_TRUTH = synthetic.Truth(alpha_s=40e-6, bandwidth_gbps=8.0)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    d = tmp_path_factory.mktemp("compose")
    a = synthetic.synthetic_records(A_TRUTH, seed=3, ddp_world_sizes=(1, 2))
    a += _stamps(a, 1.1)
    b = [r for r in synthetic.synthetic_records(B_TRUTH, seed=4, world_sizes=(2, 4)) if r["kind"] == "sweep"]
    return synthetic.write_jsonl(a, d / "one_gpu.jsonl"), synthetic.write_jsonl(b, d / "cluster_sweep.jsonl")


def test_composition_takes_compute_from_a_and_network_from_b(sources):
    a, b = sources
    cal = fit.fit_calibration(fit.load_frame(a), "composed", network_records=fit.load_frame(b), n_boot=20)
    assert cal.bandwidth_gbps.value == pytest.approx(B_TRUTH.bandwidth_gbps, rel=0.05)
    assert cal.alpha_s.value == pytest.approx(B_TRUTH.alpha_s, rel=0.1)
    assert cal.incast_coeff.value == pytest.approx(B_TRUTH.incast_coeff, abs=0.1)
    tc = {(c.model, c.batch_size): c.value for c in cal.t_comp}
    assert tc == pytest.approx(A_TRUTH.t_comp_s, rel=0.03)
    ed = {(e.compressor, e.model): e.value for e in cal.t_encode_decode}
    assert ed[("powersgd", "resnet50")] == pytest.approx(A_TRUTH.t_encode_decode_s[("powersgd", '{"rank": 4}',
                                                                                     "resnet50")], rel=0.03)
    assert cal.gamma.value == pytest.approx(1.1, rel=0.02)  # from A's stamps
    assert cal.world_size == 4  # the cluster's sweep
    # provenance: which constant came from which records
    frm = cal.provenance["constants_from"]
    for name in ("alpha_s", "bandwidth_gbps", "incast_coeff"):
        assert frm[name] == [str(b)], name
    for name in ("t_comp", "t_encode_decode", "overhead", "gamma"):
        assert frm[name] == [str(a)], name


def test_composition_cli_and_its_refusals(sources, capsys, tmp_path):
    a, b = sources
    out = tmp_path / "c.json"
    rc = top.main(["fit", "--compute-from", str(a), "--network-from", str(b), "--out", str(out), "--bootstrap", "0"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    cal = Calibration.load(out)
    assert cal.bandwidth_gbps.value == pytest.approx(B_TRUTH.bandwidth_gbps, rel=0.05)
    assert cal.provenance["constants_from"]["t_comp"] == [str(a)]
    for argv, needle in ((["--compute-from", str(a)], "--network-from"),
                         ([str(a), "--compute-from", str(a), "--network-from", str(b)], "not both"),
                         ([], "records")):
        rc = top.main(["fit", *argv, "--out", str(out)])
        assert rc == 2 and needle in capsys.readouterr().err, argv
    # a network source without any network record (a one-GPU file) is refused, naming what it has
    one_gpu = fit.load_frame(a)
    one_gpu = one_gpu[one_gpu["kind"].isin(["tcomp", "profile"])]
    with pytest.raises(ValueError, match=r"--network-from.*no network records.*\['encode_decode', 'tcomp'\]"):
        fit.fit_calibration(fit.load_frame(a), "x", network_records=one_gpu, n_boot=0)


# ------------------------------------------------------------------ mixed machines
def _two_gpus(field: str = "gpu") -> pd.DataFrame:
    recs = synthetic.synthetic_records(seed=5)
    for r in recs:
        if r["kind"] == "profile":
            r[field] = "NVIDIA H100" if field == "gpu" else "node7"
    return pd.DataFrame(recs)


@pytest.mark.parametrize("field", ["gpu", "host"])
def test_mixed_machines_are_refused_unless_allowed(field):
    with pytest.raises(ValueError, match=rf"different machines.*{field}.*--allow-mixed"):
        fit.fit_calibration(_two_gpus(field), "mixed", n_boot=0)
    cal = fit.fit_calibration(_two_gpus(field), "mixed", n_boot=0, allow_mixed=True)
    assert any("different machines" in w for w in cal.warnings)


def test_mixed_machines_cli(tmp_path, capsys):
    rec = synthetic.write_jsonl(_two_gpus().to_dict("records"), tmp_path / "r.jsonl")
    rc = top.main(["fit", str(rec), "--out", str(tmp_path / "c.json"), "--bootstrap", "0"])
    assert rc == 2 and "--allow-mixed" in capsys.readouterr().err
    rc = top.main(["fit", str(rec), "--out", str(tmp_path / "c.json"), "--bootstrap", "0", "--allow-mixed"])
    assert rc == 0 and "different machines" in capsys.readouterr().err


# ------------------------------------------------------------------ a corrupted calibration file
def _good() -> dict:
    return json.loads((paths.CALIBRATIONS / "h200x2_nvlink.json").read_text())


def _set(d: dict, path: str, value):
    keys = path.split(".")
    for k in keys[:-1]:
        d = d[int(k)] if isinstance(d, list) else d[k]
    if value is KeyError:
        del d[keys[-1]]
    else:
        d[keys[-1]] = value


@pytest.mark.parametrize("path, value, needle", [
    ("bandwidth_gbps.value", -3.0, "'bandwidth_gbps.value' must be a number > 0"),
    ("gamma.value", "fast", "'gamma.value' must be a number"),
    ("alpha_s.value", KeyError, "'alpha_s' lacks required field 'value'"),
    ("alpha_s.value", -1e-6, "'alpha_s.value' must be a number >= 0"),
    ("t_comp.1.value", 0.0, "'t_comp[1].value' must be a number > 0"),
    ("t_comp.0.batch_size", "sixty-four", "'t_comp[0].batch_size' must be an integer >= 1"),
    ("name", KeyError, "'name'"),
    ("name", 7, "'name' must be a non-empty string"),
    ("world_size", 0, "'world_size' must be an integer >= 1"),
    ("t_encode_decode", {"a": 1}, "'t_encode_decode' must be a list"),
    ("gamma.low", 2.0, "'gamma.low' 2 is above 'gamma.high'"),
])
def test_corrupted_calibration_file_is_refused_naming_field_and_file(tmp_path, path, value, needle):
    d = _good()
    _set(d, path, value)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(d))
    with pytest.raises(ValueError) as exc:
        Calibration.load(f)
    assert needle in str(exc.value) and str(f) in str(exc.value)


def test_unreadable_calibration_file_is_refused_naming_the_file(tmp_path):
    f = tmp_path / "cut.json"
    f.write_text(json.dumps(_good())[:200])
    with pytest.raises(ValueError, match=rf"{f}.*not valid JSON"):
        Calibration.load(f)
    f.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must be a JSON object"):
        Calibration.load(f)


def test_committed_calibrations_pass_the_checks():
    for f in sorted(paths.CALIBRATIONS.glob("*.json")):
        assert Calibration.load(f).name, f
