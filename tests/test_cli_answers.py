"""The commands say what they print: predict's speed-up is the ratio of the iteration times beside it, its
intervals and crossover are advise's; ``compressors`` shows the parameters it promises; ``bench --summary`` keeps
one unit per column; ``sweep`` prints GB/s and Gbit/s; ``env`` prints what a bug report needs."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from studykit import cli as top
from studykit import paths
from studykit.perfmodel import advise as A
from studykit.perfmodel.calibration import Calibration

H200 = str(paths.CALIBRATIONS / "h200x2_nvlink.json")  # fitted with an overhead O: iteration_ms != total_ms
PREDICT = ["predict", "--model", "vgg19", "--compressor", "powersgd", "--param", "rank=4", "--bandwidth-gbps", "1",
           "10", "100", "--calibration", H200]


def _run(capsys, argv):
    rc = top.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def _rows(table: str) -> list[list[str]]:
    """The data rows of predict's table (those starting with a world size and a bandwidth), split on spaces."""
    return [line.replace("[", " ").replace("]", " ").replace(",", " ").split() for line in table.splitlines()
            if re.match(r"\s+\d+\s+\d", line)]


# ------------------------------------------------------------------ predict
def test_predict_speedup_is_the_ratio_of_the_iteration_times_printed(capsys):
    rc, table, _ = _run(capsys, PREDICT)
    assert rc == 0 and "x syncSGD" in table and "syncSGD's iteration time over powersgd rank=4's" in table
    rows = _rows(table)
    assert len(rows) == 3
    for r in rows:  # GPUs Gbit/s sync [lo hi] T_obs comp [lo hi] T_obs speed-up
        sync, comp, shown = float(r[2]), float(r[6]), float(r[10].rstrip("x"))
        # equal to the printed times' rounding (0.05 ms each, 0.005 on the speed-up)
        assert shown == pytest.approx(sync / comp, rel=0.05 / sync + 0.05 / comp + 0.005 / shown)
        assert float(r[5]) != pytest.approx(sync)  # O > 0: the iteration time is not T_obs
    _, out, _ = _run(capsys, [*PREDICT, "--json"])
    for pt in json.loads(out)["points"]:
        sync, comp = pt["syncsgd"], pt["compressed"]
        assert pt["speedup_over_syncsgd"] == pytest.approx(sync["iteration_ms"] / comp["iteration_ms"])
        assert pt["t_obs_speedup_over_syncsgd"] == pytest.approx(sync["total_ms"] / comp["total_ms"])


def test_predict_intervals_and_crossover_are_advises(capsys):
    """Each time's interval and the crossover per world size come from advise on the same setting."""
    argv = ["predict", "--model", "resnet50", "--gpus", "8", "64", "--bandwidth-gbps", "1", "10", "25",
            "--compressor", "powersgd", "--param", "rank=4", "--json"]
    rc, out, _ = _run(capsys, argv)
    d = json.loads(out)
    cal = Calibration.load(paths.CALIBRATIONS / "paper_v100.json")
    cand = A.Candidate("powersgd rank=4", "compressor", "powersgd", (("rank", 4),))
    adv = A.advise(cal, "resnet50", 64, [8, 64], [1, 10, 25], candidate_list=[cand], model_error=0.0, evidence=False)
    for pt in d["points"]:
        i, j = adv.index(pt["world_size"], pt["bandwidth_gbps"])
        lo, hi = pt["compressed"]["interval_ms"]
        assert lo <= pt["compressed"]["iteration_ms"] <= hi and lo < hi
        assert [lo, hi] == pytest.approx([adv.low_s[0, i, j] * 1e3, adv.high_s[0, i, j] * 1e3])
        slo, shi = pt["syncsgd"]["interval_ms"]
        assert slo <= pt["syncsgd"]["iteration_ms"] <= shi
    cross = {c["world_size"]: c["gbps"] for c in d["crossover"]["world_sizes"]}
    assert cross == {p: pytest.approx(float(adv.crossover_gbps(p)[0])) for p in (8, 64)}
    assert 1 < cross[8] < 25 and "fp16 baseline" in d["crossover"]["baseline"]
    rc, table, _ = _run(capsys, argv[:-1])
    assert f"8 GPUs: {cross[8]:.3g} Gbit/s" in table and "interval ms" in table


def test_predict_says_why_an_interval_is_missing(capsys):
    rc, table, _ = _run(capsys, ["predict", "--model", "resnet50", "--gpus", "8", "--allreduce", "tree",
                                 "--compressor", "none"])
    assert rc == 0 and "interval: not shown: --allreduce tree" in table and "crossover" not in table
    header, row = table.splitlines()[3], _rows(table)[0]
    assert "none ms" in header and len(row) == 7  # the compressor's columns are there, as in every row


# ------------------------------------------------------------------ compressors, bench --summary, sweep, env
@pytest.mark.slow  # plans every compressor
def test_compressors_table_shows_each_compressors_parameters(capsys):
    from studykit import compressors

    rc, out, _ = _run(capsys, ["compressors", "--model", "mlp_small"])
    assert rc == 0 and "parameters (defaults)" in out.splitlines()[1]
    line = next(line for line in out.splitlines() if line.split()[:1] == ["powersgd"])
    assert all(f"{k}={v}" in line for k, v in compressors.parameters("powersgd").items())
    names = [line.split()[0] for line in out.splitlines()[2:]]
    assert names == compressors.available()  # no name runs into the next column


def test_bench_summary_has_one_unit_per_column():
    from studykit.measure import bench
    from studykit.measure.records import load_records

    df = bench.summarize(load_records(paths.DATA / "archive" / "benchmarks" / "h200x2", quiet=True))
    judged = df[df["target"].notna()]
    assert set(judged["limit_unit"]) == {"x_floor", "ms", "x_syncsgd", "x_peer"}
    md = bench.summary_markdown(df).splitlines()
    header = [c.strip() for c in md[0].strip("|").split("|")]
    for (_, r), line in zip(judged.iterrows(), md[2:2 + len(judged)]):  # one line per target row, in order
        assert line.startswith(f"| {r['model']} | {r['compressor']} {r['params']} |")
        cells = [c.strip() for c in line.strip("|").split("|")]
        limits = {h: c for h, c in zip(header, cells) if h.endswith(" limit") and c}
        unit = dict(bench.summary.MARKDOWN_COLUMNS)[r["limit_unit"]]
        assert limits == {f"{unit} limit": f"{r['limit']:g}"}  # the limit sits under its own unit only


def test_sweep_prints_gbytes_and_gbits():
    from studykit.measure.sweep import result_line

    line = result_line("all_reduce", 2**20, 250.0, 4.0, 7.5)
    assert "algbw    4.000 GB/s =    32.00 Gbit/s" in line and "busbw    7.500 GB/s =    60.00 Gbit/s" in line


def test_env_prints_what_a_bug_report_needs(capsys):
    import numpy
    import torch

    import studykit

    rc, out, _ = _run(capsys, ["env"])
    assert rc == 0
    for needle in (studykit.__version__, "git commit", torch.__version__, numpy.__version__, "pandas", "platform",
                   "python", "NCCL", "GPUs"):
        assert needle in out, needle
    rc, out, _ = _run(capsys, ["env", "--json"])
    d = json.loads(out)
    assert d["torch"] == torch.__version__ and d["cuda_available"] == torch.cuda.is_available()
    assert len(d["gpus"]) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    assert "env" in top.usage()


def test_env_rejects_unknown_options(capsys):
    rc, _, err = _run(capsys, ["env", "--gpu"])
    assert rc == 2 and "unrecognized arguments: --gpu" in err


def test_interval_of_a_calibrations_bandwidth_is_its_own(capsys):
    """Without --bandwidth-gbps, predict's row is at the calibration's bandwidth, its interval advise's (the
    bandwidth's own interval included)."""
    rc, out, _ = _run(capsys, ["predict", "--model", "resnet50", "--gpus", "8", "--json"])
    pt = json.loads(out)["points"][0]
    lo, hi = pt["syncsgd"]["interval_ms"]
    assert rc == 0 and lo <= pt["syncsgd"]["iteration_ms"] <= hi and np.isfinite([lo, hi]).all()
