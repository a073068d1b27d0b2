"""Issue 13 item 4: the small-batch regime. docs/verify.md section 6 is generated from the committed
comparison (extended preset without / with the per-tensor CPU term), and the preset follows it."""
from __future__ import annotations

import pandas as pd
import pytest

from studykit import paths
from studykit.perfmodel import verify
from studykit.perfmodel.model import ModelOptions

DOC = paths.ROOT / "docs" / "verify.md"
BEGIN, END = "<!-- small-batch table", "<!-- end small-batch table -->"


def _frames():
    return (pd.read_csv(verify.SMALL_BATCH / "off" / "by_batch.csv"),
            pd.read_csv(verify.SMALL_BATCH / "on" / "by_batch.csv"))


def test_docs_small_batch_table_is_the_generated_one():
    text = DOC.read_text()
    start = text.index("\n", text.index(BEGIN)) + 1
    assert text[start:text.index(END)].strip() == verify.small_batch_table(*_frames())


def test_extended_preset_uses_the_per_tensor_term_only_where_it_helps():
    """On only if it lowers the worst per-batch median error of syncSGD (the committed comparison)."""
    off, on = (f[(f["group"] == "syncSGD") & (f["variant"] == "extended")] for f in _frames())
    helps = on["median_abs_rel_error"].max() < off["median_abs_rel_error"].max()
    assert ModelOptions.extended().per_tensor == helps


def test_small_batch_table_refuses_mismatched_frames():
    off, on = _frames()
    with pytest.raises(ValueError, match="same \\(platform, batch\\) rows"):
        verify.small_batch_table(off, on[on["batch_size"] != 32])
    table = verify.small_batch_table(off, on)
    assert table.count("\n") == 1 + off[(off.group == "syncSGD") & (off.variant == "extended")].shape[0]


@pytest.mark.slow
@pytest.mark.parametrize("sub, extra", [("off", []), ("on", ["--per-tensor"])])
def test_committed_small_batch_comparison_reproduces(tmp_path, sub, extra):
    rc = verify.main(["verify", "--records", str(paths.MEASUREMENTS / "gpu"), "--no-hook", *extra,
                      "--out", str(tmp_path), "--quiet"])
    assert rc == 0
    new, old = pd.read_csv(tmp_path / "by_batch.csv"), pd.read_csv(verify.SMALL_BATCH / sub / "by_batch.csv")
    new, old = (d[d["group"] == "syncSGD"].reset_index(drop=True) for d in (new, old))
    pd.testing.assert_frame_equal(new, old, rtol=1e-4, check_dtype=False)


BATCHES = verify.SMALL_BATCH / "resnet50_batches"
BEGIN_B, END_B = "<!-- resnet50-batches table", "<!-- end resnet50-batches table -->"


def test_docs_resnet50_batches_table_is_the_generated_one():
    text = DOC.read_text()
    start = text.index("\n", text.index(BEGIN_B)) + 1
    assert text[start:text.index(END_B)].strip() == verify.small_batch_table(pd.read_csv(BATCHES / "by_batch.csv"))


@pytest.mark.slow
def test_committed_resnet50_batches_reproduces(tmp_path):
    g = paths.MEASUREMENTS / "gpu_checks_h200b"
    rc = verify.main(["verify", "--records", str(g / "nvlink.jsonl"), str(g / "tcomp.jsonl"), "--pool",
                      "h200_resnet50_batches", "--sweep-from", str(paths.MEASUREMENTS / "gpu"), "--holdout", "record",
                      "--out", str(tmp_path), "--quiet"])
    assert rc == 0
    for name in ("by_batch.csv", "summary.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / name), pd.read_csv(BATCHES / name), rtol=1e-4,
                                      check_dtype=False)
