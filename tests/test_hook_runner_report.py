"""benchmarks/hook_runner.py: the runners' table from ddp records (hand-computed ratios), and its errors."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("hook_runner_bench", ROOT / "benchmarks" / "hook_runner.py")
hook_runner = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hook_runner)


def _rec(mode, ms, compressor=None, runner=None, params=None, rate=8.0):
    return {"kind": "ddp", "status": "ok", "model": "resnet50", "mode": mode, "compressor": compressor,
            "params": params or {}, "hook_runner": runner, "bucket_mb": None, "ms_median": ms, "world_size": 2,
            "network": {"rate_gbps": rate}, "gpu": "test GPU", "git_commit": "abc", "n_iter": 30, "n_warmup": 10}


RECORDS = [_rec("syncsgd", 120.0), _rec("post", 40.0, "powersgd", params={"rank": 4}),
           _rec("hook", 50.0, "powersgd", params={"rank": 4}), _rec("hook", 44.0, "powersgd", "graph", {"rank": 4}),
           _rec("builtin", 80.0, "torch_powersgd", params={"rank": 4, "start_iter": 2})]


def test_one_row_per_compressor_with_the_runners_side_by_side():
    (row,) = hook_runner.rows(RECORDS)
    assert (row["thread"], row["graph"], row["post"], row["syncsgd"], row["pytorch"]) == (50.0, 44.0, 40.0, 120.0, 80.0)
    text = hook_runner.table(RECORDS, "test")
    line = next(x for x in text.splitlines() if x.startswith("| 8 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # graph / thread = 44 / 50, graph / post = 44 / 40, thread / post = 50 / 40, graph / PyTorch = 44 / 80
    assert cells[cells.index("44.0") + 1:] == ["0.88", "1.10", "1.25", "80.0", "0.55"]


def test_records_without_hooks_are_refused_with_what_writes_them():
    with pytest.raises(ValueError, match='HOOK_RUNNER="thread graph"'):
        hook_runner.table([_rec("syncsgd", 120.0)], "empty")


def test_the_command_refuses_a_folder_without_records(tmp_path, capsys):
    with pytest.raises(SystemExit):
        hook_runner.main([str(tmp_path)])
    assert "no ddp.jsonl there" in capsys.readouterr().err


def test_every_hook_variant_is_a_row_beside_post_and_stays_out_of_the_runners_table():
    """A coalesced hook and one on bucket views without the buffer broadcast: rows of their own beside post
    (hook / post hand-computed), never standing in for the plain thread or graph hook."""
    coalesced = {**_rec("hook", 46.0, "powersgd", "graph", {"rank": 4}), "hook_coalesce_mb": 0.0}
    views = {**_rec("hook", 38.0, "powersgd", "graph", {"rank": 4}), "gradient_as_bucket_view": True,
             "broadcast_buffers": False}
    records = RECORDS + [coalesced, views]
    (row,) = hook_runner.rows(records)
    assert row["graph"] == 44.0
    got = {v["hook"]: (v["hook_ms"], v["post_ms"]) for v in hook_runner.variants(records)}
    assert got == {"thread": (50.0, 40.0), "graph": (44.0, 40.0), "graph, coalesced per iteration": (46.0, 40.0),
                   "graph, bucket views, no buffer broadcast": (38.0, 40.0)}
    line = next(x for x in hook_runner.table(records, "t").splitlines() if "bucket views, no buffer" in x)
    assert line.rstrip(" |").endswith("0.95")  # 38 / 40


def test_a_campaign_of_variants_alone_still_gets_its_table():
    views = {**_rec("hook", 38.0, "powersgd", "graph", {"rank": 4}), "gradient_as_bucket_view": True}
    text = hook_runner.table([_rec("post", 40.0, "powersgd", params={"rank": 4}), views], "t")
    assert "graph / thread" not in text and "| graph, bucket views | 38.0 (30) | 40.0 (30) | 0.95 |" in text


def test_the_findings_block_of_hooks_on_bucket_views_by_hand(tmp_path, monkeypatch):
    """hook / post per world size, model and rate for hooks on bucket views without the buffer broadcast only:
    38 / 40 = 0.95 at 8 Gbit/s, 42 / 40 = 1.05 at 20; the plain hook beside them is not a row."""
    import json

    from studykit import paths
    from studykit.nbtools import hook_blocks

    views = {"gradient_as_bucket_view": True, "broadcast_buffers": False}
    recs = [_rec("post", 40.0, "powersgd", params={"rank": 4}), _rec("hook", 50.0, "powersgd", params={"rank": 4}),
            {**_rec("hook", 38.0, "powersgd", "graph", {"rank": 4}), **views},
            _rec("post", 40.0, "powersgd", params={"rank": 4}, rate=20.0),
            {**_rec("hook", 42.0, "powersgd", "graph", {"rank": 4}, rate=20.0), **views}]
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "ddp.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    monkeypatch.setattr(paths, "DATA", tmp_path)
    lines = hook_blocks.hook_views_block(["c"]).splitlines()
    assert lines[0] == "| run | p | model | compressor | 8 Gbit/s | 20 Gbit/s |"
    assert lines[2] == "| c | 2 | resnet50 | powersgd rank=4 | 0.95 | 1.05 |"
    assert "at most 1.02: 1 of 2." in lines[-1]
    with pytest.raises(ValueError, match="no hook records on bucket views"):
        hook_blocks.hook_views_block(["c"][:0])
