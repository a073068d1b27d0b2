"""The throttle probes' record files: every append goes through the kit's one repair of a cut last line
(studykit.measure.records.repair), so a probe written after an interrupted run is not glued to its remains."""
import json
from types import SimpleNamespace

import pytest

from studykit.measure.throttle import cli as C
from studykit.measure.throttle import probe as P

OLD = {"kind": "throttle_probe", "busbw_gbps": 0.9, "nbytes": 1024, "network": {"rate_gbps": 0.5}}
NEW = {"kind": "throttle_probe", "busbw_gbps": 4.8, "nbytes": 4096, "world_size": 2, "backend": "gloo"}


def _interrupted(path):
    """A record file whose last line a killed run cut short."""
    path.write_text(json.dumps(OLD) + "\n" + json.dumps(NEW)[:25])
    return path


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_append_repairs_a_cut_last_line_then_writes_one_whole_line(tmp_path):
    out = _interrupted(tmp_path / "probe.jsonl")
    with pytest.warns(UserWarning, match="removed a partial last line"):
        P.append_record(out, NEW)
    assert _lines(out) == [OLD, NEW] and out.read_text().endswith("\n")
    P.append_record(tmp_path / "new" / "probe.jsonl", NEW)  # a missing folder is made
    assert _lines(tmp_path / "new" / "probe.jsonl") == [NEW]


def test_the_probe_command_appends_through_the_repair(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(P, "probe_allreduce", lambda *a, **k: dict(NEW))
    out = _interrupted(tmp_path / "probe.jsonl")
    with pytest.warns(UserWarning, match="removed a partial last line"):
        assert P._probe_main(["--out", str(out)]) == 0
    assert _lines(out) == [OLD, NEW] and json.loads(capsys.readouterr().out) == NEW


def test_the_cluster_probe_record_appends_through_the_repair(tmp_path):
    """``throttle`` keeps each rate's probe in ``probe.jsonl`` beside the records (``_run_probe``)."""
    def run(cmd, timeout_s):  # the probe on a fake cluster: rank 0 writes its record where it is told
        argv = cmd(0)
        with open(argv[argv.index("--out") + 1], "w") as f:
            f.write(json.dumps(NEW) + "\n")
        return [SimpleNamespace(ok=True, rank=0, returncode=0, stdout="", stderr="")]

    cluster = SimpleNamespace(rate_gbps=5.0, n_workers=2, topology="veth", mtu=9000, latency_ms=None, run=run)
    out = _interrupted(tmp_path / "probe.jsonl")
    with pytest.warns(UserWarning, match="removed a partial last line"):
        rec = C._run_probe(cluster, out, 0.00390625, "gloo", timeout_s=5.0)
    assert rec["transport_ok"] and rec["nccl_transport"] is None
    old, new = _lines(out)
    assert old == OLD and new["busbw_gbps"] == NEW["busbw_gbps"] and new["transport_ok"]
