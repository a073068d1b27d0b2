"""benchmarks/ddp_tax.py: its table from handmade records (hand-computed ratios) and a run on the CPU."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("ddp_tax_bench", ROOT / "benchmarks" / "ddp_tax.py")
ddp_tax = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ddp_tax)


def _rec(config, ms):
    return {"kind": "ddp_tax", "model": "m", "config": config, "compressor": "powersgd:rank=4", "world_size": 2,
            "ms_median": ms, "n_iter": 30, "n_warmup": 10, "gpu": "G", "git_commit": "abc"}


def test_the_table_divides_by_post_without_and_with_the_compressor(tmp_path):
    f = tmp_path / "ddp_tax.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in [_rec("post none", 40.0), _rec("post C", 50.0),
                                                           _rec("hook C gabv nobuf", 45.0)]))
    text = ddp_tax.table(f)
    assert "| m | hook C gabv nobuf | 45.0 | 1.12 | 0.90 |" in text  # 45 / 40 = 1.125 -> 1.12; 45 / 50
    assert text.index("post none") < text.index("post C") < text.index("hook C gabv nobuf")


def test_a_file_without_its_records_is_refused(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text(json.dumps({"kind": "ddp", "status": "ok"}) + "\n")
    with pytest.raises(SystemExit, match="no ddp_tax records"):
        ddp_tax.table(f)


@pytest.mark.slow
def test_a_cpu_run_writes_one_record_per_configuration_with_provenance(tmp_path):
    out = tmp_path / "t.jsonl"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ddp_tax.py"), "--models", "mlp_small", "--iters", "2",
                    "--warmup", "1", "--configs", "plain", "post C", "ddp gabv nobuf", "hook C c0",
                    "--out", str(out)], check=True, capture_output=True, timeout=300, cwd=tmp_path)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["config"] for r in recs] == ["plain", "post C", "ddp gabv nobuf", "hook C c0"]
    assert all(r["ms_median"] > 0 and r["n_iter"] == 2 and r["git_commit"] and r["torch"] for r in recs)
