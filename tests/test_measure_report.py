"""Records -> Tables 2-3 and plots (``studykit.measure.report``), on synthetic records and the paper's CSVs."""
import json

import matplotlib
import pandas as pd
import pytest

from studykit.measure import report as R
from studykit.measure.records import RecordWriter, config_id, make_record
from studykit.measure.timing import Timing
from studykit.plots import measure as mplots

matplotlib.use("Agg")


def _profile(w, compressor, params, ms, model="resnet50", ratio=10.0, sim=1):
    t = Timing.from_times([ms * 0.9, ms, ms * 1.2], n_warmup=1)
    cid = config_id(kind="profile", model=model, compressor=compressor, params=params, phase="reduce",
                    sim_world_size=sim)
    w.write(make_record("profile", cid, device="cpu", timing=t, model=model, compressor=compressor, params=params,
                        phase="reduce", sim_world_size=sim, ratio=ratio, allreduce_compatible=compressor == "powersgd",
                        floor_ms=2.0, x_floor=t.ms_mean / 2.0, numel=1000))


@pytest.fixture
def frame(tmp_path):
    w = RecordWriter(tmp_path / "r.jsonl")
    _profile(w, "powersgd", {"rank": 4, "warm_start": True}, 40.0, ratio=70)
    _profile(w, "powersgd", {"rank": 8, "warm_start": True}, 60.0, ratio=36)
    _profile(w, "mstopk", {"ratio": 0.01, "samplings": 30}, 100.0)
    _profile(w, "signsgd", {}, 15.0, ratio=32)
    _profile(w, "signsgd", {}, 30.0, model="cnn_small")
    t = Timing.from_times([100.0, 120.0], n_warmup=1)
    w.write(make_record("tcomp", config_id(kind="tcomp", model="resnet50", batch_size=64, phase="bwd"),
                        device="cpu", timing=t, model="resnet50", batch_size=64, phase="bwd"))
    for mode, comp, ms in [("syncsgd", None, 50.0), ("hook", "signsgd", 80.0), ("post", "signsgd", 70.0)]:
        w.write(make_record("ddp", config_id(kind="ddp", model="resnet50", mode=mode, compressor=comp),
                            device="cpu", timing=Timing.from_times([ms], 1), model="resnet50", mode=mode,
                            compressor=comp, params={}, batch_size=64))
    w.write({"kind": "profile", "config_id": "x", "status": "error", "reason": "boom", "model": "resnet50"})
    return R.load_frame(tmp_path / "r.jsonl")


PAPER = pd.DataFrame({"compressor": ["powersgd", "powersgd", "mstopk", "signsgd"],
                      "params": ['{"rank": 4}', '{"rank": 8}', '{"ratio": 0.01}', "{}"],
                      "t_encode_decode_ms": [45, 64, 103, 16.34], "compression_ratio": [72, 37, 100, 32]})


def test_table2_matches_paper_rows_by_compressor_and_params(frame):
    t = R.table2(frame, "resnet50", PAPER)
    assert list(t["method"]) == ["mstopk 1%", "signsgd", "powersgd r4", "powersgd r8"]  # paper's families
    assert list(t["paper_v100_ms"]) == [103, 16.34, 45, 64]
    assert t.loc[t["method"] == "signsgd", "ms_mean"].item() == pytest.approx(15.5)


def test_table3_has_backward_time_for_scale(frame):
    t = R.table3(frame, "resnet50", PAPER)
    assert list(t["parameter"]) == ["rank 4", "rank 8", "1%", ""]
    assert (t["backward_ms"] == 110.0).all()
    assert t["x_backward"].iloc[0] == pytest.approx(t["ms_mean"].iloc[0] / 110.0)
    assert list(t["paper_ratio"]) == [72, 37, 100, 32]


def test_missing_paper_tables_are_a_note_not_an_error(frame, tmp_path, capsys):
    assert R.paper_table("nosuch", tmp_path) is None
    assert "left out" in capsys.readouterr().out
    assert "paper_v100_ms" not in R.table2(frame, "resnet50", None)


def test_the_committed_paper_csvs_match_when_present(frame):
    paper = R.paper_table("table2_encode_decode")
    if paper is None:
        pytest.skip("data/paper/table2_encode_decode.csv not written yet")
    t = R.table2(frame, "resnet50", paper)
    assert t.loc[t["method"] == "powersgd r4", "paper_v100_ms"].item() == 45


def test_ddp_table_and_plots(frame):
    t = R.ddp_table(frame, "resnet50")
    assert t.loc["signsgd", "post_faster"] and t.loc["syncsgd", "ddp"] == 50.0
    fig, ax = mplots.plot_encode_decode(frame, "resnet50", paper=PAPER)
    assert ax.get_xscale() == "log" and len(ax.get_lines()) >= 2  # floor and backward lines
    fig, axes = mplots.plot_overheads(frame)
    assert len(axes) == 2
    assert R.provenance_summary(frame)["records"].sum() == len(frame)


def test_label():
    assert R.label("topk", {"ratio": 0.001}) == "topk 0.1%"
    assert R.label("powersgd", json.dumps({"rank": 4})) == "powersgd r4"
    assert R.label("signsgd", {}) == "signsgd"
