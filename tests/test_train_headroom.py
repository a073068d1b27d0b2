"""Bits on the link per training method beyond two GPUs (studykit.train.headroom).

An integer all-reduce of ``p`` workers' b-bit levels needs ``ceil(log2 p)`` bits of headroom per field,
so a quantizer's bits on the link grow with ``p``; fp16 and fp32 stay at 16 and 32. The numbers come
from each compressor's ``plan()`` (the same bytes the training loop records as ``bits_per_element``).
"""
import pandas as pd
import pytest

from studykit.train import headroom, parse_method
from studykit.train.loop import plan_traffic

NUMEL = 2**16 + 3


@pytest.fixture(scope="module")
def bits():
    return headroom.link_bits(["none", "fp16", "quantize8", "dynamic", "topk"], (2, 64, 256), numel=NUMEL)


def at(df, method, bits_rung, p):
    r = df[(df["method"] == method) & (df["world_size"] == p)]
    if bits_rung is not None:
        r = r[r["level"] == f"quantize:bits={bits_rung}"]
    assert len(r) == 1, (method, bits_rung, p)
    return r.iloc[0]


def test_two_gpus_carry_the_nominal_bits(bits):
    assert at(bits, "quantize8", 8, 2)["bits_per_element"] == pytest.approx(8, rel=1e-3)
    for b in (4, 8, 16):
        assert at(bits, "dynamic", b, 2)["bits_per_element"] == pytest.approx(b, rel=1e-3)
    assert at(bits, "fp16", None, 256)["bits_per_element"] == pytest.approx(16)
    assert at(bits, "none", None, 256)["bits_per_element"] == pytest.approx(32)


def test_integer_sums_need_headroom_at_scale(bits):
    """8-bit quantization sends fp16's bits at 64 GPUs and a third more at 256; the dynamic ladder's
    16-bit rung sends fp32's at 64."""
    q64, q256 = at(bits, "quantize8", 8, 64), at(bits, "quantize8", 8, 256)
    assert q64["vs_fp16"] == pytest.approx(1.0, rel=1e-3)
    assert q256["vs_fp16"] == pytest.approx(4 / 3, rel=1e-3)
    assert q64["summed_in"] and q64["summed_in"].startswith("int")
    assert at(bits, "dynamic", 16, 64)["vs_fp32"] == pytest.approx(1.0, rel=1e-3)
    assert pd.isna(at(bits, "dynamic", 4, 2)["summed_in"])  # two workers: the packed levels are gathered


def test_bits_are_the_training_loops(bits):
    """The same bytes the training loop records (plan_traffic of one bucket)."""
    for p in (2, 64):
        level = parse_method("quantize8").levels[0]
        sent, _ = plan_traffic(level, {0: [(NUMEL,)]}, p, 0)
        assert at(bits, "quantize8", 8, p)["bits_per_element"] == pytest.approx(8 * sent / NUMEL)


def test_summary_names_each_integer_sum_rung(bits):
    lines = headroom.summary(bits)
    text = "\n".join(lines)
    assert any(line.startswith("quantize8") for line in lines)
    assert "quantize:bits=16" in text and "fp32" in text
    assert not any(line.startswith(("fp16", "none", "topk")) for line in lines)  # nothing summed in integers
    q = at(bits, "quantize8", 8, 256)
    assert f"{q['bits_per_element']:.1f}" in text and f"{q['vs_fp16']:.2f}x fp16" in text


def test_integer_sums_table_keeps_the_summed_rungs_and_the_references(bits):
    t = headroom.integer_sums(bits)
    assert list(t.columns) == [2, 64, 256]
    methods = set(t.index.get_level_values("method"))
    assert methods == {"quantize8", "dynamic", "fp16", "none"}  # topk is gathered: no integer sum
    assert t.loc[("quantize8", "quantize:bits=8"), 64] == pytest.approx(t.loc[("fp16", "fp16"), 64], rel=1e-3)


def test_shapes_override_the_flat_tensor():
    """PowerSGD sends 1-D tensors whole: only the model's shapes give its bits."""
    flat = headroom.link_bits(["powersgd"], (2,), numel=256 * 256)
    square = headroom.link_bits(["powersgd"], (2,), shapes=[(256, 256)])
    assert square["bits_per_element"].iloc[0] < flat["bits_per_element"].iloc[0] == pytest.approx(32)


def test_bad_input_names_what_is_valid():
    with pytest.raises(ValueError, match="world_sizes"):
        headroom.link_bits(["quantize8"], (0, 64))
    with pytest.raises(ValueError, match="presets"):
        headroom.link_bits(["no_such_method"])
    with pytest.raises(ValueError, match="numel"):
        headroom.link_bits(["quantize8"], numel=0)
