"""The paper's model-based claims (seed 000), reproduced from its own inputs, with stated tolerances.

Every paper number is read from ``data/paper/claims.csv``; the kit's from
``studykit.perfmodel.claims.reproduce`` on ``data/calibrations/paper_v100.json``.
Tolerance: 15 % relative (``claims.TOLERANCE``), just above the paper's own largest
model error (13.7 %, Sec. 4.1 / Fig. 11); range claims ("1-7 Gbps faster, slower
above 9") pass inside the range widened by it; "less than" claims by their bound.

Where the kit disagrees, the test pins the verdict (so a change that flips one
must update ``data/paper/README.md``, which explains each) and the direction.
"""
import json

import numpy as np
import pandas as pd
import pytest

from studykit import compressors, paths
from studykit.perfmodel import claims, paper, whatif
from studykit.perfmodel.calibration import Calibration

pytestmark = pytest.mark.skipif(not {"powersgd", "signsgd", "mstopk"} <= set(compressors.available()),
                                reason="the paper's compressors are not registered yet")

TOL = claims.TOLERANCE


@pytest.fixture(scope="module")
def table():
    return claims.reproduce()


def rows(table, cid):
    out = table[table["claim_id"] == cid]
    assert len(out), cid
    return out


def test_tolerance_is_the_papers_max_model_error_rounded_up():
    assert paper.claim("fig11_model_error_median")["high"] == 0.137
    assert TOL == 0.15


# ------------------------------------------------------------ reproduced claims
def test_fig19_resnet50_crossover_in_papers_range(table):
    """App. D: PowerSGD rank 4 faster at 1-7 Gbps, slower above ~9 Gbps (ResNet-50)."""
    r = rows(table, "fig19_crossover_r50").iloc[0]
    assert 7 * (1 - TOL) <= r.kit_value <= 9 * (1 + TOL)
    assert r.verdict == "reproduced"


def test_fig18_required_ratio_at_most_4x_for_resnet50_and_bert(table):
    """App. D: at 10 Gbps no model needs more than ~4x, even at small batch sizes."""
    r = rows(table, "fig18_required_ratio_all")
    by_model = {s.split(",")[0]: v for s, v in zip(r.setting, r.kit_value)}
    assert by_model["resnet50"] <= 4 * (1 + TOL)
    assert by_model["bert_base"] <= 4 * (1 + TOL)


def test_fig21_any_encode_reduction_helps(table):
    """App. D: k-times faster encode/decode with l*k-times more bytes beats the baseline for l = 1, 2, 3."""
    assert rows(table, "fig21_tradeoff_monotone").iloc[0].kit_value == 1.0


def test_fig20_reproduced_only_if_encode_time_does_not_shrink(table):
    """App. D: 1.75x at 3.5x compute. Within tolerance only with T_encode_decode held fixed."""
    r = rows(table, "fig20_speedup_r50_compute3p5")
    fixed = r[r.note == "alternative reading"].iloc[0]
    scaled = r[r.note != "alternative reading"].iloc[0]
    assert abs(fixed.rel_diff) <= TOL and fixed.verdict == "reproduced"
    assert scaled.verdict == "disagrees" and scaled.kit_value > fixed.kit_value > 1.0  # same direction: helps


def test_fig10_gap_below_200ms_for_resnets(table):
    for r in rows(table, "fig10_gap_bert_96").itertuples():
        if r.verdict != "input":
            assert r.kit_value < 200


def test_fig2_overlap_saving(table):
    r = rows(table, "fig2_overlap_r50_64").iloc[0]
    assert abs(r.rel_diff) <= TOL


def test_measured_iteration_times_within_paper_model_error(table):
    """Sec. 1: ResNet-101, 96 GPUs: syncSGD 262 ms, PowerSGD rank 16 470 ms (measured)."""
    for cid in ("intro_r101_96_sync", "intro_r101_96_powersgd16"):
        assert abs(rows(table, cid).iloc[0].rel_diff) <= TOL, cid


def test_bert_rank16_slower_than_syncsgd(table):
    """Sec. 3.2: at 96 GPUs BERT rank 16 still takes longer than syncSGD."""
    assert rows(table, "sec32_bert_96_rank16").iloc[0].kit_value < 1.0


def test_derived_inputs_reproduce_what_they_were_derived_from(table):
    for r in table[table.verdict == "input"].itertuples():
        if r.claim_id != "sec33_r101_96_bs64":  # derived from it together with the 262 ms
            assert abs(r.rel_diff) < 1e-3, r.claim_id


# ------------------------------------------------------------ disagreements (explained in data/paper/README.md)
EXPECTED_VERDICTS = {
    "fig3_crossover_r101": "disagrees",  # kit higher: the paper's Sec. 3.3 measurement implies ~10 Gbps
    "fig12_required_ratio_r101": "disagrees",  # kit higher at batch 16
    "fig19_crossover_bert": "disagrees",  # kit lower
    "intro_r101_96_signsgd": "disagrees",  # kit lower: no incast, decode not growing with p
    "sec33_r101_96_bs16": "disagrees",  # kit higher: T_comp linear in batch
    "sec33_r101_96_bs32": "disagrees",
    "fig19_crossover_r50": "reproduced",
    "fig21_tradeoff_monotone": "reproduced",
    "intro_r101_96_sync": "reproduced",
    "intro_r101_96_powersgd16": "reproduced",
    "fig2_overlap_r50_64": "reproduced",
    "sec32_bert_96_rank16": "reproduced",
}


def test_verdicts_are_pinned(table):
    got = {cid: rows(table, cid).iloc[0].verdict for cid in EXPECTED_VERDICTS}
    assert got == EXPECTED_VERDICTS


def test_fig3_crossover_direction_and_size(table):
    r = rows(table, "fig3_crossover_r101").iloc[0]
    assert r.paper_value < r.kit_value < 12  # above 8.2 Gbps but below 12
    # the kit's crossover sits where the paper's own 96-GPU numbers put it: syncSGD 6.3 % faster at 10 Gbps
    assert 9.0 < r.kit_value < 11.0


def test_signsgd_gap_is_closed_by_an_incast_term():
    """App. C blames all-gather incast; with the (beyond-paper) incast term the kit can match 1042 ms."""
    cal = whatif.paper_calibration()
    c = paper.claim("intro_r101_96_signsgd")
    from studykit.perfmodel.model import Workload, predict
    base = float(predict(Workload("resnet101", 64), whatif.hardware(cal), 96, "signsgd",
                         calibration=cal).compressed["total_s"]) * 1e3
    with_incast = float(predict(Workload("resnet101", 64), whatif.hardware(cal, incast_coeff=0.9), 96, "signsgd",
                                calibration=cal).compressed["total_s"]) * 1e3
    assert base < c.value * (1 - TOL) and abs(with_incast / c.value - 1) <= TOL


# ------------------------------------------------------------ inputs and files
def test_paper_inputs_transcribed():
    assert paper.stated("t_comp_resnet50_bs64")["value"] == 122
    assert (paper.stated("alpha")["low"], paper.stated("alpha")["high"]) == (0.5, 1.0)
    assert (paper.stated("gamma")["low"], paper.stated("gamma")["high"]) == (1.04, 1.10)
    t3 = paper.table("table3_compression")
    assert t3.set_index("parameter_label").loc["Rank-4", "t_encode_decode_ms"] == 45
    for name in ("table1_collectives", "table2_encode_decode", "table3_compression", "inputs", "claims"):
        df = paper.table(name)
        assert {"section", "page"} <= set(df.columns), name
        assert df["page"].notna().all(), name


def test_alpha_reading():
    a, lo, hi = paper.alpha_s_reading()
    assert a == pytest.approx(0.5e-3 / 63) and a == pytest.approx(1e-3 / (2 * 63))
    assert lo < a < hi


def test_derived_inputs_file_is_up_to_date():
    committed = pd.read_csv(paths.PAPER / "derived_inputs.csv")
    fresh = paper.derive_unstated()
    np.testing.assert_allclose(committed["value_ms"], fresh["value_ms"], rtol=1e-9)
    assert list(committed["derivation"]) == list(fresh["derivation"])


def test_paper_calibration_file_is_up_to_date():
    committed = Calibration.load(paths.CALIBRATIONS / "paper_v100.json").to_dict()
    fresh = json.loads(json.dumps(paper.build_calibration().to_dict()))
    assert committed == fresh, "run: python -m studykit.perfmodel.paper"


def test_compression_ratios_vs_table3():
    df = claims.compression_ratios().set_index(["compressor", "params"])
    # PowerSGD within 10 % of Table 3; SignSGD exact; MSTop-K exact when counting values only
    for rank in (4, 8, 16):
        assert abs(df.loc[("powersgd", json.dumps({"rank": rank})), "rel_diff"]) < 0.10
    assert df.loc[("signsgd", "{}"), "rel_diff"] == pytest.approx(0.0)
    for r in df.loc["mstopk"].itertuples():
        assert r.kit_ratio_values_only == pytest.approx(r.paper_ratio, rel=1e-3)
        assert r.kit_ratio == pytest.approx(r.paper_ratio / 2, rel=1e-3)  # int32 indices double the bytes
