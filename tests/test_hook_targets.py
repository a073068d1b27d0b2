"""benchmarks/hook_targets.py: the hook's speed-target scoreboard over report.hook_vs_post's and hook_targets' pairs."""
import importlib.util
import json

import pytest

from studykit import paths

_spec = importlib.util.spec_from_file_location("hook_targets", paths.ROOT / "benchmarks" / "hook_targets.py")
HT = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(HT)


def _rec(mode, ms, compressor=None, params=None, rate=None, n_iter=30, t=0, **kw):
    return {"kind": "ddp", "status": "ok", "mode": mode, "ms_median": ms, "compressor": compressor,
            "params": params or {}, "network": None if rate is None else {"rate_gbps": rate}, "gpu": "G",
            "model": "m", "batch_size": 8, "world_size": 2, "n_iter": n_iter, "bucket_mb": None,
            "timestamp": f"2026-01-01T00:00:{t:02d}", "config_id": json.dumps({"mode": mode, "c": compressor}),
            **({"hook_overlap": True} if mode == "hook" else {}), **kw}


def test_pairs_cover_post_syncsgd_and_pytorch_per_runner():
    r4 = {"rank": 4}
    recs = [_rec("hook", 44.0, "powersgd", r4), _rec("syncsgd", 40.0), _rec("builtin", 80.0, "torch_powersgd", r4),
            _rec("hook", 42.0, "powersgd", r4, hook_runner="graph", t=1),
            _rec("hook", 11.0, "powersgd", r4, rate=10.0, n_iter=10), _rec("post", 10.0, "powersgd", r4, rate=10.0)]
    t = HT.pairs(recs, "x")
    got = {(r["target"], r["hook"]): (r["ratio"], r["n"]) for _, r in t.iterrows()}
    assert got[(HT.POST_TEXT, "powersgd r4")] == (pytest.approx(1.1), 10)
    assert got[("PowerSGD r4 hook <= 1.1 x syncSGD over NVLink", "powersgd r4 (hook)")][0] == pytest.approx(1.1)
    assert got[("PowerSGD r4 hook <= 1.1 x syncSGD over NVLink", "powersgd r4 (hook) (graph runner)")][0] == \
        pytest.approx(1.05)
    assert got[("PowerSGD r4 hook <= PyTorch's PowerSGD hook", "powersgd r4 (hook)")][0] == pytest.approx(0.55)


def test_scoreboard_judges_only_long_enough_pairs():
    recs = [_rec("hook", 10.0, "fp16"), _rec("builtin", 10.2, "torch_fp16")]
    short = [_rec("hook", 30.0, "fp16", n_iter=5), _rec("builtin", 10.0, "torch_fp16", n_iter=5)]
    import pandas as pd
    table = pd.concat([HT.pairs(recs, "a"), HT.pairs(short, "b")], ignore_index=True)
    line = next(x for x in HT.scoreboard(table, min_iter=30).splitlines() if x.startswith("| fp16 hook <= 1.03"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2:6] == ["2", "1", "1", "0.98"]  # two pairs, one with 30 iterations, it meets the limit
    assert "`a`" in cells[6]


def test_a_folder_without_pairs_is_a_clear_error(tmp_path):
    (tmp_path / "ddp.jsonl").write_text("")
    with pytest.raises(SystemExit, match="no pairs of an overlapped kit hook"):
        HT.report([tmp_path])
