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
