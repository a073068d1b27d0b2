"""benchmarks/hook_targets.py: the hook's speed-target scoreboard pairs records of one campaign and setting."""
import importlib.util

import pytest

from studykit import paths

_spec = importlib.util.spec_from_file_location("hook_targets", paths.ROOT / "benchmarks" / "hook_targets.py")
HT = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(HT)


def _rec(mode, ms, compressor=None, params=None, source="/x/a/ddp.jsonl", rate=None, n_iter=30, **kw):
    return {"kind": "ddp", "status": "ok", "mode": mode, "ms_median": ms, "compressor": compressor,
            "params": params or {}, "source": source, "network": None if rate is None else {"rate_gbps": rate},
            "model": "m", "batch_size": 8, "world_size": 2, "n_iter": n_iter, "bucket_mb": None,
            **({"hook_overlap": True} if mode == "hook" else {}), **kw}


def test_pairs_match_within_one_campaign_and_setting_only():
    rank4 = {"rank": 4}
    recs = [_rec("hook", 44.0, "powersgd", rank4), _rec("post", 40.0, "powersgd", rank4),
            _rec("syncsgd", 42.0), _rec("builtin", 80.0, "torch_powersgd"),
            _rec("post", 20.0, "powersgd", rank4, source="/x/b/ddp.jsonl"),     # another campaign: not paired
            _rec("post", 20.0, "powersgd", rank4, rate=10.0),                  # another rate: not paired
            _rec("hook", 50.0, "powersgd", rank4, hook_runner="graph", n_iter=10)]
    rows = {(r["target"], r["hook"]): r for r in HT.pairs(recs)}
    assert rows[("hook <= 1.02 x post", "thread")]["ratio"] == pytest.approx(1.1)
    assert rows[("PowerSGD r4 hook <= 1.1 x syncSGD over NVLink", "thread")]["ratio"] == pytest.approx(44 / 42)
    assert rows[("PowerSGD r4 hook <= PyTorch's PowerSGD hook", "thread")]["ratio"] == pytest.approx(0.55)
    assert rows[("hook <= 1.02 x post", "graph")]["n_iter"] == 10
    assert len(rows) == 6  # three targets for each of the two runners


def test_scoreboard_judges_only_long_enough_pairs():
    recs = [_rec("hook", 10.0, "fp16"), _rec("builtin", 10.2, "torch_fp16"), _rec("post", 12.0, "fp16"),
            _rec("hook", 30.0, "fp16", source="/x/c/ddp.jsonl", n_iter=5),
            _rec("builtin", 10.0, "torch_fp16", source="/x/c/ddp.jsonl", n_iter=5)]
    md = HT.scoreboard(HT.pairs(recs), min_iter=30)
    line = next(x for x in md.splitlines() if x.startswith("| fp16 hook <= 1.03"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3:6] == ["2", "1", "1"]  # two pairs, one with 30 iterations, and it meets the bound
    assert cells[6] == "0.98"


def test_a_folder_without_pairs_is_a_clear_error(tmp_path):
    (tmp_path / "ddp.jsonl").write_text("")
    with pytest.raises(SystemExit, match="no pairs of an overlapped kit hook"):
        HT.report([tmp_path])
