"""The model's crossovers at scale (``measure.crossover.crossovers_at_scale``) and the README block beside the
measured ones (``crossovers_at_scale`` builder of ``studykit.nbtools.datacli``)."""
import math
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from studykit import paths
from studykit.measure import crossover as X
from studykit.nbtools import datacli
from studykit.perfmodel.calibration import Calibration, Constant, TComp, TEncodeDecode
from studykit.perfmodel.model import ModelOptions, Workload, plan_summary

MODEL, BATCH = "mlp_small", 8
T_ED_S = 1e-3  # encode + decode of either compressor (s)
BLOCK = "measurements/bandwidth/README.md#crossovers-at-scale"


def _hand_calibration() -> Calibration:
    c = lambda v, unit: Constant(v, unit, "by hand")  # noqa: E731
    return Calibration(
        name="hand", alpha_s=c(0.0, "s"), bandwidth_gbps=c(10.0, "Gbit/s"), gamma=c(1.0, ""),
        t_comp=[TComp(0.05, "s", "by hand", model=MODEL, batch_size=BATCH)],
        t_encode_decode=[TEncodeDecode(T_ED_S, "s", "by hand", compressor="powersgd", params={"rank": 4}, model=MODEL),
                         TEncodeDecode(T_ED_S, "s", "by hand", compressor="topk", params={"ratio": 0.01}, model=MODEL)])


def _scale(world_sizes=(2, 16)):
    # the paper's model (Eq. 1, App. B ring all-gather, no incast), alpha 0, gamma 1, one bucket, no overhead
    return X.crossovers_at_scale(_hand_calibration(), MODEL, BATCH, ["powersgd:rank=4", "topk:ratio=0.01"],
                                 world_sizes=world_sizes, options=ModelOptions.paper(), bucket_bytes=1e15,
                                 overhead_s=0.0, model_error=0.1)


def test_crossover_at_scale_matches_the_closed_form():
    # With alpha = 0 and one bucket, Sec. 4.1 gives the fp16 baseline T_comp + 2 (p-1)/p (G/2) / BW, below syncSGD's
    # T_comp + 2 (p-1)/p G / BW at every BW: the better baseline is fp16. After the backward pass (App. B) a compressor
    # takes T_comp + T_ed + W / BW, with W = 2 (p-1)/p A for an all-reduce of A bytes, (p-1) S for ring all-gathers
    # of S bytes per worker in all. Equal times: BW = (2 (p-1)/p (G/2) - W) / T_ed (bytes/s).
    df = _scale()
    grad = Workload(MODEL, BATCH).gradient_bytes
    for p in (2, 16):
        ring = 2 * (p - 1) / p
        psgd = plan_summary("powersgd", {"rank": 4}, Workload(MODEL, BATCH).shapes(), p, shapes_key=MODEL)
        topk = plan_summary("topk", {"ratio": 0.01}, Workload(MODEL, BATCH).shapes(), p, shapes_key=MODEL)
        assert psgd.allgather_count == 0 and topk.allreduce_count == 0
        want = {"powersgd r4 (post)": ring * (grad / 2 - psgd.allreduce_bytes),
                "topk 1% (post)": ring * grad / 2 - (p - 1) * topk.allgather_bytes}
        for label, bytes_ in want.items():
            got = df[(df["method"] == label) & (df["world_size"] == p)][X.SCALE_COLUMN].item()
            # advise searches a log grid (24 a decade) and interpolates: a few per mille
            assert got == pytest.approx(bytes_ / T_ED_S * 8 / 1e9, rel=5e-3), (label, p)
    assert list(df["collective"].unique()) == ["all-reduce", "all-gather"]


def test_an_all_gather_method_stops_paying_at_scale_where_an_all_reduce_one_pays_more():
    # at p = 64 TopK's gathered bytes 63 S exceed the fp16 all-reduce's 2 (63/64) G/2: it beats fp16 at no bandwidth
    shapes = Workload(MODEL, BATCH).shapes()
    assert 63 * plan_summary("topk", {"ratio": 0.01}, shapes, 64, shapes_key=MODEL).allgather_bytes > \
        2 * 63 / 64 * Workload(MODEL, BATCH).gradient_bytes / 2
    df = _scale((2, 64)).set_index(["method", "world_size"])[X.SCALE_COLUMN]
    assert df["powersgd r4 (post)", 64] > df["powersgd r4 (post)", 2]
    assert df["topk 1% (post)", 2] > 0 and np.isnan(df["topk 1% (post)", 64])
    inv = X.inversions(_scale((2, 64)), "powersgd r4 (post)")
    assert inv["first_p"].tolist() == [64]


def test_bad_methods_are_refused_by_name():
    with pytest.raises(ValueError, match="no_such"):
        X.crossovers_at_scale(_hand_calibration(), MODEL, BATCH, ["no_such:rank=4"], options=ModelOptions.paper(),
                              model_error=0.1)
    with pytest.raises(ValueError, match="non-empty list"):
        X.crossovers_at_scale(_hand_calibration(), MODEL, BATCH, "topk", model_error=0.1)
    with pytest.raises(ValueError, match="cannot price.*ef_signsgd"):  # no T_encode_decode in the calibration
        X.crossovers_at_scale(_hand_calibration(), MODEL, BATCH, ["ef_signsgd"], options=ModelOptions.paper(),
                              model_error=0.1)


def test_inversions_by_hand():
    rows = []
    table = [(2, 20.0, 50.0, 10.0), (4, 25.0, 30.0, 12.0), (16, 30.0, 10.0, 40.0), (64, 40.0, np.nan, 50.0)]
    for p, ref, ag, ag2 in table:
        rows += [{"model": "m", "method": "ref", "collective": "all-reduce", "world_size": p, X.SCALE_COLUMN: ref},
                 {"model": "m", "method": "ag", "collective": "all-gather", "world_size": p, X.SCALE_COLUMN: ag},
                 {"model": "m", "method": "ag2", "collective": "all-gather", "world_size": p, X.SCALE_COLUMN: ag2}]
    inv = X.inversions(pd.DataFrame(rows), "ref").set_index("method")
    assert inv.loc["ag", "first_p"] == 16 and inv.loc["ag", "above_at"] == [2, 4]
    assert inv.loc["ag2", "first_p"] == 2 and inv.loc["ag2", "above_at"] == []
    with pytest.raises(ValueError, match="reference 'nope'"):
        X.inversions(pd.DataFrame(rows), "nope")


def test_delivered_rate_interpolates_in_log_rate():
    table = pd.DataFrame({"gpu": "g", "world_size": 2, "model": "m", "batch_size": 8,
                          "rate_gbps": [10.0, 10.0, 25.0], "measured_gbps": [9.0, 9.4, 20.0]})
    out = pd.DataFrame([{"gpu": "g", "world_size": 2, "model": "m", "batch_size": 8, "status": s, "crossover_gbps": c,
                         "bracket_low_gbps": lo, "bracket_high_gbps": hi}
                        for s, c, lo, hi in [("crossover", math.sqrt(250.0), 10.0, 25.0),
                                             ("faster at every rate", None, 25.0, None),
                                             ("slower at every rate", None, None, 10.0)]])
    got = X.delivered_gbps(out, table)
    assert got.tolist() == pytest.approx([math.sqrt(9.2 * 20.0), 20.0, 9.2])
    assert X.delivered_text(out.iloc[1], got.iloc[1]) == "> 20"


def _block() -> str:
    text = (paths.DATA / "measurements/bandwidth/README.md").read_text()
    return datacli.marked(text, "crossovers-at-scale")


@pytest.mark.slow
def test_readme_block_is_its_builders_output():
    r = subprocess.run([sys.executable, "-m", "studykit", "data", "regen", "--check", "--only", BLOCK, "--quiet"],
                       cwd=paths.ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 identical" in r.stdout + r.stderr


def _model_cell(text: str) -> float:
    text = text.strip()
    return np.nan if text == "never" else np.inf if text.startswith(">") else float(text)


def test_readme_inversion_sentence_matches_its_table():
    block = _block()
    lines = [line for line in block.splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    ps = {i: int(h.removeprefix("model p = ")) for i, h in enumerate(head) if h.startswith("model p = ")}
    rows = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        model, method = cells[0].split(" (")[0], cells[1]
        gathers = not method.startswith("powersgd")
        rows += [{"model": model, "method": method, "collective": "all-gather" if gathers else "all-reduce",
                  "world_size": p, X.SCALE_COLUMN: _model_cell(cells[i])} for i, p in ps.items()]
    inv = X.inversions(pd.DataFrame(rows), "powersgd r4 (post)")
    sentence = next(line for line in block.splitlines() if line.startswith("In the model"))
    assert len(inv) == 6
    for _, r in inv.iterrows():
        p = r["first_p"]
        when = (f"at no p up to {max(ps.values())}" if pd.isna(p) else
                f"already at p = {int(p)}" if p == min(ps.values()) else f"at p = {int(p)}")
        assert re.search(re.escape(r["method"]) + r" [^;]*" + re.escape(f"{when} on {r['model']}"), sentence), \
            (r["method"], r["model"], when)
