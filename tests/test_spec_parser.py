"""One ``name:k=v`` parser (studykit.compressors.registry) behind every command: profile, bench, ddp,
predict, train's dynamic levels and the notebooks read a spec the same way."""
import argparse

import pytest

from studykit import compressors as C
from studykit.compressors.registry import literal, param_arg, spec_arg, split_spec
from studykit.measure.runtime import parse_compressor_specs
from studykit.perfmodel import cli as pcli
from studykit.train.dynamic import Level


@pytest.mark.parametrize("text, value", [("true", True), ("False", False), ("none", None), ("NULL", None), ("4", 4),
                                         ("0.01", 0.01), ("1e-3", 1e-3), ("(2, 3)", (2, 3)), ("layer", "layer"),
                                         ("no", "no"), (" 8 ", 8)])
def test_literal(text, value):
    assert literal(text) == value and type(literal(text)) is type(value)


def test_every_caller_reads_a_spec_the_same_way():
    text = "randomk:ratio=0.05,unbiased=false"
    want = ("randomk", {"ratio": 0.05, "unbiased": False})
    assert C.parse_spec(text) == want == split_spec(text) == spec_arg(text)
    (spec,) = parse_compressor_specs([text])
    assert (spec.name, spec.kwargs) == want
    level = Level.parse(text)
    assert (level.compressor, level.kwargs) == want
    assert param_arg("unbiased=false") == ("unbiased", False)


def test_predict_accepts_boolean_params_like_profile(capsys):
    argv = ["predict", "--model", "resnet50", "--batch-size", "64", "--compressor", "randomk", "--param", "unbiased=no",
            "--t-encode-decode-ms", "1"]
    assert pcli.main(argv) == 0
    assert pcli.main(argv[:-3] + ["unbiased=perhaps"]) == 2
    assert "must be a boolean" in capsys.readouterr().err


def test_bad_specs_are_refused_with_a_message():
    for bad in ("topk:ratio", "topk:=3", "nosuch:ratio=1", "topk:ratio=0.1,flavour=x"):
        with pytest.raises(C.CompressorError):
            C.parse_spec(bad)
        with pytest.raises(argparse.ArgumentTypeError):
            spec_arg(bad)
        with pytest.raises(ValueError):
            parse_compressor_specs([bad])


def test_paper_tables_read_key_value_params_with_the_same_parser():
    import pandas as pd

    from studykit.measure import report

    row = pd.Series({"params": "ratio=0.01; scope=layer"})
    assert report._paper_params(row) == {"ratio": 0.01, "scope": "layer"}
    assert report._paper_params(pd.Series({"params": '{"rank": 4}'})) == {"rank": 4}
