"""studykit.lessons.tour (the tour notebook's computations) against the performance model, and the tour's rules:
exercise answers hidden, every number computed (none typed into the prose)."""
import json
import math
import re
from dataclasses import replace

import numpy as np
import pytest

from studykit import compressors, models, paths
from studykit.lessons import tour
from studykit.perfmodel import Workload, collectives as col, whatif
from studykit.perfmodel.model import Hardware, allreduce_s, buckets, syncsgd_s

TOUR = paths.NOTEBOOKS / "tour.ipynb"
HW = Hardware(bandwidth_gbps=10.0, alpha_s=8e-6, gamma=1.07)


def test_gradient_traffic_is_table1():
    t = tour.gradient_traffic("resnet50", 64)
    n = 4 * models.numel("resnet50")
    assert t["gradient_bytes"] == n and t["numel"] == models.numel("resnet50")
    assert t["ring_sent_bytes"] == pytest.approx(2 * 63 / 64 * n)
    assert t["server_link_bytes"] == pytest.approx(2 * 63 * n)
    k, b, last = buckets(n, 25 * 2**20)
    assert (t["buckets"], t["bucket_bytes"], t["last_bucket_bytes"]) == (int(k), float(b), float(last))


def test_collective_costs_ring_bandwidth_term_saturates():
    n = 1e8
    df = tour.collective_costs(n, [2, 4, 64, 1024], HW.alpha_s, 10.0)
    bw = float(col.gbps_to_bytes_s(10.0))
    assert np.allclose(df.ring_s, col.ring_allreduce_s(n, df.world_size, HW.alpha_s, bw))
    assert np.allclose(df.ring_latency_s + df.ring_bandwidth_s, df.ring_s)
    # the ring's bandwidth term only doubles from 2 to 1024 GPUs and never passes 2 n / BW
    assert df.ring_bandwidth_s.iloc[-1] / df.ring_bandwidth_s.iloc[0] < 2
    assert (df.ring_bandwidth_s <= df.ring_bandwidth_limit_s).all()
    # while the parameter server grows linearly in p
    ps = df.parameter_server_s.to_numpy()
    assert ps[-1] / ps[1] == pytest.approx((1024 - 1) / (4 - 1), rel=1e-3)


@pytest.mark.parametrize("bandwidth_gbps", [0.5, 3.0, 10.0, 100.0])
@pytest.mark.parametrize("bucket_mb", [1.0, 25.0, 4096.0])  # many buckets, DDP's default, one bucket
@pytest.mark.parametrize("world_size", [1, 8, 64])
def test_overlap_timeline_ends_at_sec41_model(bandwidth_gbps, bucket_mb, world_size):
    hw = replace(HW, bandwidth_gbps=bandwidth_gbps)
    n, t_comp = 4.0 * models.numel("resnet50"), 0.122
    tl = tour.overlap_timeline(t_comp, n, world_size, hw, bucket_mb * 2**20)
    model = float(syncsgd_s(t_comp, n, world_size, hw, bucket_mb * 2**20)["total_s"])
    assert tl.end_s.max() == pytest.approx(model, rel=1e-12)
    net = tl[tl.lane == "all-reduce (network)"].sort_values("start_s")
    assert (net.start_s.to_numpy()[1:] >= net.end_s.to_numpy()[:-1] - 1e-15).all()  # one all-reduce at a time
    # without overlap: backward, then every bucket
    k, b, last = buckets(n, bucket_mb * 2**20)
    serial = tour.overlap_timeline(t_comp, n, world_size, hw, bucket_mb * 2**20, overlap=False)
    expect = t_comp + float((k - 1) * allreduce_s(b, world_size, hw) + allreduce_s(last, world_size, hw))
    assert serial.end_s.max() == pytest.approx(expect, rel=1e-12)


def test_hiding_bandwidth_is_where_the_max_switches():
    n, t_comp = 4.0 * models.numel("resnet101"), 0.19
    bw = tour.hiding_bandwidth_gbps(t_comp, n, 64, HW)
    k, b, last = buckets(n, 25 * 2**20)

    def exposed(f):
        h = replace(HW, bandwidth_gbps=bw * f)
        return float(syncsgd_s(t_comp, n, 64, h)["exposed_comm_s"]) - float(allreduce_s(last, 64, h))

    assert exposed(1.001) == pytest.approx(0.0, abs=1e-12)  # only the last bucket shows
    assert exposed(0.99) > 0
    assert tour.hiding_bandwidth_gbps(t_comp, n, 64, HW, bucket_bytes=2 * n) == math.inf  # one bucket never hides
    assert tour.hiding_bandwidth_gbps(t_comp, n, 64, replace(HW, alpha_s=1.0)) == math.inf  # latency alone too big


def test_bucket_sweep_is_syncsgd():
    n = 4.0 * models.numel("resnet50")
    df = tour.bucket_sweep(0.122, n, 64, HW, [1, 25, 1000])
    assert np.allclose(df.total_s, syncsgd_s(0.122, n, 64, HW, np.array([1, 25, 1000]) * 2**20)["total_s"])
    assert df.buckets.iloc[-1] == 1


def test_every_compressor_has_a_family():
    fams = {name: tour.family(name) for name in compressors.available()}
    assert "other" not in fams.values(), fams
    assert fams["powersgd"] == "low-rank" and fams["topk"] == "sparsification" and fams["thc"] == "quantization"


def test_family_table_from_plan():
    df = tour.family_table(["none", "powersgd:rank=4", "signsgd"], "resnet50", 64).set_index("compressor")
    shapes = models.param_shapes("resnet50")
    assert df.loc["none", "ratio"] == pytest.approx(1.0)
    assert df.loc["powersgd:rank=4", "bytes_per_worker"] == compressors.get("powersgd", rank=4).wire_bytes(shapes, 64)
    assert df.loc["signsgd", "collectives"] == "1 x all_gather" and not df.loc["signsgd", "allreduce_compatible"]
    # all-gather: each worker forwards p-1 payloads; all-reduce: under twice its share
    assert df.loc["signsgd", "ring_sent_bytes"] == pytest.approx(63 * df.loc["signsgd", "bytes_per_worker"])
    assert df.loc["none", "ring_sent_bytes"] < 2 * df.loc["none", "bytes_per_worker"]


def test_speedup_table_is_predict():
    cal = whatif.paper_calibration()
    df = tour.speedup_table(["resnet50"], {"p4": ("powersgd", {"rank": 4})}, whatif.hardware(cal), 64, 64, cal)
    from studykit.perfmodel import predict

    pr = predict(Workload("resnet50", 64), whatif.hardware(cal), 64, "powersgd", {"rank": 4}, calibration=cal)
    assert df.speedup.iloc[0] == pytest.approx(float(pr.speedup))


def test_answer_is_collapsed_html():
    a = tour.Answer(12.345, "MB", note="<why>")
    h = a._repr_html_()
    assert h.startswith("<details") and "<summary>" in h and " open" not in h
    assert "12.3 MB" in h and "&lt;why&gt;" in h
    assert "12.3 MB" in repr(a)


# ------------------------------------------------------------------ the notebook's own rules
def _cells():
    return json.loads(TOUR.read_text())["cells"]


def test_tour_exercises_have_hidden_answers():
    cells = _cells()
    exercises = [i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "**Exercise" in "".join(c["source"])]
    assert len(exercises) >= 4
    for i in exercises:
        md = "".join(cells[i]["source"])
        assert "<details>" in md and "</details>" in md, f"exercise in cell {i} has no collapsed hint"
        answer = cells[i + 1]
        assert answer["cell_type"] == "code" and answer["metadata"].get("jupyter", {}).get("source_hidden") is True
        assert "tour.Answer(" in "".join(answer["source"]), f"cell {i + 1}: the answer must be computed by tour.Answer"


# references and names that contain digits but are not results
_ALLOWED = [r"`[^`]*`", r"\b(Eq|Sec|Table|Tables|Fig|Figs|App|Takeaway)\.?\s+[\dA-Z][\d.]*",
            r"\bet al\.\s+\d{4}", r"arxiv\.org/abs/[\d.]+", r"\barXiv\s+[\d.]+", r"\b(FP|fp|BF|bf)(16|32)\b", r"ResNet-\d+", r"MLSys \d{4}", r"\b[VAH]100s?\b",
            r"^#+\s*\d+\.", r"^\s*\d+\.\s", r"\*\*Exercise \d+\.\*\*"]


def test_tour_prose_types_no_numbers():
    """Every number a reader sees comes from a code cell; the markdown names quantities, never values."""
    for i, c in enumerate(_cells()):
        if c["cell_type"] != "markdown":
            continue
        text = "".join(c["source"])
        for pat in _ALLOWED:
            text = re.sub(pat, "", text, flags=re.M)
        m = re.search(r"\d", text)
        assert not m, f"tour cell {i} types a number: {text[max(0, m.start() - 40):m.end() + 40]!r}"
