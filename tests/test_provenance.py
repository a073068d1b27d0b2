"""One provenance builder: measurement records, training records and the notebook runner's summary
carry the same keys, with the timestamp in UTC."""
from datetime import datetime, timedelta

from studykit.measure.records import make_record, provenance
from studykit.nbtools import runner

KEYS = {"gpu", "driver", "cpu", "torch", "cuda", "nccl", "python", "host", "git_commit", "git_dirty",
        "num_threads", "timestamp", "argv", "network"}


def test_every_builder_gives_the_same_keys_in_utc():
    measured = make_record("tcomp", "x", device="cpu")
    summary = runner.provenance()
    train = provenance("cpu", backend="gloo", world_size=2, device="cpu")
    for prov in (provenance(), measured, summary, train):
        assert KEYS <= set(prov), KEYS - set(prov)
        assert datetime.fromisoformat(prov["timestamp"]).utcoffset() == timedelta(0)
    assert train["backend"] == "gloo" and train["world_size"] == 2
    assert "loadavg_1m" in summary and summary["cpu_count"] >= 1
