"""studykit.perfmodel.verify.files: verify's predictions file, gzipped (predictions.csv.gz) and deterministic, and
its readers (an older run's plain predictions.csv still read)."""
import gzip
import struct

import numpy as np
import pandas as pd
import pytest

from studykit.perfmodel.verify import files as F


def _frame() -> pd.DataFrame:
    n = 40
    return pd.DataFrame({"config": [f"resnet50 b64 hook powersgd rank={i % 4} p=2" for i in range(n)],
                         "predicted_ms": np.linspace(10.0, 200.0, n) / 3.0,
                         "measured_ms": np.linspace(11.0, 190.0, n) / 7.0,
                         "calibrated_on": ["syncSGD of bert_base, resnet101 at 1, 2.5, 5, 10, 25 Gbit/s"] * n,
                         "bucket_mb": [np.nan if i % 3 else 25.0 for i in range(n)]})


def test_two_writes_give_the_same_bytes_without_a_name_or_time_in_the_header(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = F.write_predictions(_frame(), tmp_path / "a")
    b = F.write_predictions(_frame(), tmp_path / "b")
    assert a.name == F.PREDICTIONS == "predictions.csv.gz"
    raw = a.read_bytes()
    assert raw == b.read_bytes()
    magic, method, flags, mtime = struct.unpack("<HBBI", raw[:8])
    assert (magic, method) == (0x8B1F, 8)  # gzip, deflate
    assert flags & 0x08 == 0 and mtime == 0  # no FNAME field, modification time 0
    assert b"predictions" not in raw[:64]


def test_what_is_written_reads_back_as_the_csv_verify_always_wrote(tmp_path):
    frame = _frame()
    F.write_predictions(frame, tmp_path)
    text = gzip.decompress((tmp_path / F.PREDICTIONS).read_bytes()).decode()
    assert text == frame.to_csv(index=False, float_format="%.6g", lineterminator="\n")
    back = F.read_predictions(tmp_path)
    assert list(back.columns) == list(frame.columns) and list(back["config"]) == list(frame["config"])
    np.testing.assert_allclose(back["predicted_ms"], frame["predicted_ms"], rtol=1e-5)
    assert back["bucket_mb"].isna().sum() == frame["bucket_mb"].isna().sum()
    # gzip earns its place: the repeated calibrated_on column compresses far
    assert (tmp_path / F.PREDICTIONS).stat().st_size < len(text) / 4


def test_a_write_replaces_an_older_plain_predictions_file(tmp_path):
    (tmp_path / F.OLD_PREDICTIONS).write_text("config,predicted_ms\nold,1\n")
    F.write_predictions(_frame(), tmp_path)
    assert not (tmp_path / F.OLD_PREDICTIONS).exists() and (tmp_path / F.PREDICTIONS).is_file()


def test_readers_take_a_folder_or_a_file_in_either_form(tmp_path):
    frame = _frame()
    old = tmp_path / "old"
    old.mkdir()
    frame.to_csv(old / F.OLD_PREDICTIONS, index=False, float_format="%.6g")
    new = tmp_path / "new"
    new.mkdir()
    F.write_predictions(frame, new)
    assert F.predictions_file(old) == old / F.OLD_PREDICTIONS
    assert F.predictions_file(new) == new / F.PREDICTIONS
    # a named file that is missing: its other form beside it
    assert F.predictions_file(new / F.OLD_PREDICTIONS) == new / F.PREDICTIONS
    assert F.predictions_file(old / F.PREDICTIONS) == old / F.OLD_PREDICTIONS
    for where in (old, new, old / F.OLD_PREDICTIONS, new / F.PREDICTIONS):
        got = F.read_predictions(where)
        assert len(got) == len(frame)
        np.testing.assert_allclose(got["measured_ms"], frame["measured_ms"], rtol=1e-5)
    # both present: the gzipped one, which verify writes now
    frame.head(3).to_csv(new / F.OLD_PREDICTIONS, index=False)
    assert len(F.read_predictions(new)) == len(frame)


def test_a_folder_without_predictions_is_named_with_both_forms(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"holds no predictions\.csv\.gz \(nor an older predictions\.csv\)"):
        F.read_predictions(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        F.read_predictions(tmp_path / "nope" / F.PREDICTIONS)
