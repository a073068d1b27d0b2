"""Record I/O: schema with provenance, documented fields, resume after an interruption, no corrupt lines."""
import json
import re

import pytest

from studykit import compressors as C
from studykit import paths
from studykit.measure import cli
from studykit.measure.records import (FIELDS, IDENTITY, KIND_FIELDS, RecordError, RecordWriter, config_id, done_ids,
                                      load_records, make_record)

REQUIRED = ["kind", "model", "compressor", "params", "world_size", "batch_size", "ms_median", "ms_mean", "ms_min",
            "ms_max", "n_iter", "n_warmup", "gpu", "driver", "torch", "cuda", "nccl", "host", "git_commit",
            "timestamp", "backend"]
PROFILE = ["profile", "--models", "mlp_small", "--iters", "2", "--warmup", "1", "--copy-bytes", "64K", "--quiet",
           "--no-split"]


def test_schema_has_the_required_fields_and_the_readme_documents_every_one():
    assert set(REQUIRED) <= set(FIELDS)
    readme = (paths.MEASUREMENTS / "README.md").read_text()
    documented = set(re.findall(r"^\| `([A-Za-z_0-9]+)` \|", readme, flags=re.M))
    every = set(FIELDS) | {k for kind in KIND_FIELDS.values() for k in kind}
    assert every <= documented, f"undocumented in data/measurements/README.md: {sorted(every - documented)}"


def test_writer_fills_schema_and_provenance(tmp_path):
    w = RecordWriter(tmp_path / "r.jsonl")
    cid = config_id(kind="tcomp", model="mlp_small", batch_size=4)
    w.write(make_record("tcomp", cid, device="cpu", model="mlp_small", batch_size=4, ms_mean=float("nan")))
    (rec,) = load_records(tmp_path / "r.jsonl")
    assert set(REQUIRED) <= set(rec) and set(KIND_FIELDS["tcomp"]) <= set(rec)
    assert rec["schema"] == 1 and rec["status"] == "ok" and rec["ms_mean"] is None  # NaN -> null
    assert rec["torch"] and rec["host"] and rec["timestamp"].endswith("+00:00") and rec["git_commit"]
    assert done_ids(tmp_path / "r.jsonl") == {cid}


def test_config_id_rejects_result_fields():
    with pytest.raises(ValueError, match="identifying"):
        config_id(kind="sweep", ms_mean=1.0)
    assert "ms_mean" not in IDENTITY


def test_partial_last_line_is_repaired_and_unparsable_lines_skipped(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"kind": "tcomp", "config_id": "a", "status": "ok"}\n{"kind": "tcomp", "conf')
    with pytest.warns(UserWarning, match="unparsable"):
        assert len(load_records(p)) == 1
    with pytest.warns(UserWarning, match="partial last line"):
        w = RecordWriter(p)
    w.write({"kind": "tcomp", "config_id": "b", "status": "ok"})
    lines = p.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(x) for x in lines)


def test_interrupted_profile_resumes_without_duplicates(tmp_path, monkeypatch):
    out = tmp_path / "p.jsonl"
    names = C.available()
    real_write = RecordWriter.write
    calls = {"n": 0}

    def dying_write(self, rec):  # the run "dies" after 4 records (copy_bw + 3 profiles)
        if calls["n"] == 4:
            raise KeyboardInterrupt
        calls["n"] += 1
        return real_write(self, rec)

    monkeypatch.setattr(RecordWriter, "write", dying_write)
    with pytest.raises(KeyboardInterrupt):
        cli.main([*PROFILE, "--out", str(out)])
    assert len(load_records(out)) == 4
    monkeypatch.setattr(RecordWriter, "write", real_write)
    assert cli.main([*PROFILE, "--out", str(out)]) == 0
    recs = load_records(out)
    ids = [r["config_id"] for r in recs]
    assert len(ids) == len(set(ids)) == 1 + len(names)
    assert sorted(r["compressor"] for r in recs if r["kind"] == "profile") == names
    before = out.read_text()
    assert cli.main([*PROFILE, "--out", str(out)]) == 0  # a third run has nothing to do
    assert out.read_text() == before


def test_retry_errors_measures_failed_configurations_again(tmp_path):
    out = tmp_path / "p.jsonl"
    argv = [*PROFILE, "--compressors", "fp16", "--out", str(out)]
    assert cli.main(argv) == 0
    recs = load_records(out)
    (prof,) = [r for r in recs if r["kind"] == "profile"]
    prof.update(status="error", reason="RuntimeError: pretend", ms_mean=None)
    out.write_text("\n".join(json.dumps(r) for r in recs if r["kind"] != "profile") + "\n" + json.dumps(prof) + "\n")
    assert cli.main(argv) == 0 and len(load_records(out)) == 2  # errors count as done
    assert cli.main([*argv, "--retry-errors"]) == 0
    statuses = [r["status"] for r in load_records(out, dedupe=False) if r["kind"] == "profile"]
    assert statuses == ["error", "ok"]  # both lines stay in the file
    recs = load_records(out)  # the reader keeps the retry, which supersedes the error
    assert [r["status"] for r in recs if r["kind"] == "profile"] == ["ok"] and recs.report.superseded == 1


def test_gzip_compressed_records_read_as_their_jsonl(tmp_path):
    """``*.jsonl.gz`` (a large file committed compressed) reads like the same ``*.jsonl``, alone or found in a
    folder; a damaged gzip file is a RecordError naming it."""
    import gzip

    lines = [json.dumps({"schema": 1, "kind": "bench", "config_id": f"c{i}", "ms_median": i}) for i in range(3)]
    plain = tmp_path / "plain" / "a.jsonl"
    plain.parent.mkdir()
    plain.write_text("\n".join(lines) + "\n")
    packed = tmp_path / "packed" / "sub" / "a.jsonl.gz"
    packed.parent.mkdir(parents=True)
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    want = [{k: v for k, v in r.items() if k != "source"} for r in load_records(plain)]
    for src in (packed, tmp_path / "packed"):
        got = load_records(src)
        assert [{k: v for k, v in r.items() if k != "source"} for r in got] == want
        assert got[0]["source"] == str(packed)
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(RecordError, match="bad.jsonl.gz: cannot be read"):
        load_records(bad)


def _gzip_lines(path, n):
    import gzip

    path.write_bytes(gzip.compress(b"".join(b'{"schema":1,"kind":"bench","config_id":"c%d"}\n' % i
                                            for i in range(n))))
    return path


def test_gzip_records_are_read_up_to_a_decompressed_size_cap(tmp_path, monkeypatch):
    """A gzip bomb stops at records.MAX_GZIP_BYTES (streamed, never decompressed whole): a RecordError naming
    the file and the cap; a file under the cap reads in full."""
    import gzip

    from studykit.measure import records

    assert records.MAX_GZIP_BYTES >= 2**30
    ok = _gzip_lines(tmp_path / "ok.jsonl.gz", 100)
    monkeypatch.setattr(records, "MAX_GZIP_BYTES", len(gzip.decompress(ok.read_bytes())))
    assert len(load_records(ok)) == 100  # exactly at the cap
    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(gzip.compress(b"\0" * (8 << 20)))  # 8 MiB of zeros, no newline: one huge line
    monkeypatch.setattr(records, "MAX_GZIP_BYTES", 1 << 20)
    with pytest.raises(RecordError, match=r"bomb\.jsonl\.gz: decompresses to more than 1048576 bytes.*MAX_GZIP"):
        load_records(bomb)
    monkeypatch.setattr(records, "MAX_GZIP_BYTES", 100)
    with pytest.raises(RecordError, match=r"ok\.jsonl\.gz: decompresses to more than 100 bytes"):
        load_records(ok)


def test_a_corrupt_gzip_stream_is_a_record_error_naming_the_file(tmp_path):
    """A damaged compressed stream (zlib.error, bad CRC, cut short) is a RecordError naming the file, as a file
    that is not gzip at all is: unlike a damaged plain line, nothing after the damage can be read."""
    good = _gzip_lines(tmp_path / "good.jsonl.gz", 2000).read_bytes()
    cases = {"deflate": bytearray(good), "crc": bytearray(good), "cut": bytearray(good[: len(good) // 2])}
    cases["deflate"][20] ^= 0x55  # an invalid deflate block header: zlib.error
    cases["crc"][-6] ^= 0xFF  # the trailer's CRC-32
    for name, data in cases.items():
        path = tmp_path / f"{name}.jsonl.gz"
        path.write_bytes(bytes(data))
        with pytest.raises(RecordError, match=rf"{name}\.jsonl\.gz: cannot be read"):
            load_records(path)
