"""``registry.setting_label``, the one text of a compressor setting: every style round-trips through the spec
parser or matches the text that committed generated files carry, and the places that name a setting call it."""
import json

import pandas as pd
import pytest

from studykit import paths
from studykit.compressors import registry as R


def test_spec_style_round_trips_for_every_compressor():
    for name in R.available():
        params = R.parameters(name)
        text = R.setting_label(name, params, "spec")
        assert R.parse_spec(text) == (name, params), text
        assert R.spec_string(name, params) == text
    assert R.setting_label("topk", {"scope": "layer", "ratio": 0.01}, "spec") == "topk:ratio=0.01,scope=layer"
    assert R.setting_label("signsgd", {}, "spec") == "signsgd"


# (compressor, params, style, label, committed file under data/ that carries the label, where in it)
COMMITTED = [
    ("powersgd", {"rank": 4}, "short", "powersgd r4", "measurements/bandwidth/README.md", "crossovers"),
    ("topk", {"ratio": 0.01, "scope": "global"}, "short", "topk 1%", "measurements/bandwidth/README.md", "crossovers"),
    ("quantize", {"bits": 8}, "short", "quantize b8", "measurements/bandwidth/README.md", "crossovers"),
    ("powersgd", {"rank": 32, "orthogonalize": "cholesky"}, "short", "powersgd r32 cholesky",
     "measurements/bandwidth/README.md", "hook-vs-post-p2e"),
    ("powersgd", {"rank": 4}, "kv", "powersgd rank=4", "verification/own_model/vit_b16_p4/predictions.csv.gz",
     "candidate"),
    ("topk", {"ratio": 0.01}, "kv", "topk ratio=0.01", "verification/own_model/vit_b16_p4/predictions.csv.gz",
     "candidate"),
    ("thc", {"bits": 4, "rotation": "full", "chunk": 65536, "saturation": 0.0}, "key",
     "thc {bits:4,chunk:65536,rotation:full,saturation:0.0}", "verification/predictions.csv.gz", "config"),
    ("powersgd", {"rank": 4, "warm_start": True, "min_compression": 1.0}, "key",
     "powersgd {min_compression:1.0,rank:4,warm_start:true}", "verification/predictions.csv.gz", "config"),
]


def _committed_texts(path: str, where: str) -> list[str]:
    """The labels a committed file shows: a generated README block's method cells, or a CSV column's values
    (a verify configuration name up to its world size)."""
    full = paths.DATA / path
    if path.endswith((".csv", ".csv.gz")):
        values = pd.read_csv(full)[where].dropna().astype(str)
        return sorted({v.split(" p=")[0] for v in values})
    text = full.read_text()
    block = text.split(f"<!-- {where}:begin -->")[1].split(f"<!-- {where}:end -->")[0]
    return sorted({row.split("|")[3].strip() for row in block.splitlines()[2:] if row.startswith("|")})


@pytest.mark.parametrize("name,params,style,label,path,where", COMMITTED)
def test_labels_match_the_committed_generated_text(name, params, style, label, path, where):
    assert R.setting_label(name, params, style) == label
    texts = _committed_texts(path, where)
    if where == "crossovers":
        assert f"{label} (post)" in texts
    elif where == "config":
        assert any(t.endswith(" " + label) for t in texts), texts[:5]
    else:
        assert label in texts


def test_short_and_params_only():
    assert R.setting_label("mstopk", {"ratio": 0.001}, "short") == "mstopk 0.1%"
    assert R.setting_label("qsgd", {"levels": 4, "bucket_size": 512}, "short") == "qsgd s4"
    assert R.setting_label("powersgd", {"rank": 4, "orthogonalize": "twice"}, "short") == "powersgd r4"  # default
    assert R.setting_label("powersgd", {"rank": 8}, "short", params_only=True) == "r8"
    assert R.setting_label("signsgd", {}, "short", params_only=True) == ""
    assert R.setting_label("no_such_compressor", {"rank": 4}, "short") == "no_such_compressor"
    assert R.setting_label("powersgd", {"rank": 4, "reuse": 2}, "kv", params_only=True) == "rank=4,reuse=2"
    assert R.setting_label("topk", {"ratio": 0.05}, "kv") == "topk ratio=0.05"


def test_unknown_style_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown style 'long'.*spec, kv, short, key"):
        R.setting_label("topk", {"ratio": 0.01}, "long")


def test_the_places_that_name_a_setting_call_it():
    from studykit.measure import crossover as X
    from studykit.measure import report
    from studykit.measure.bench.summary import _params_str
    from studykit.measure.runtime import CompressorSpec
    from studykit.perfmodel import cli as pcli
    from studykit.perfmodel.advise.candidates import candidates
    from studykit.perfmodel.verify.platform import _label as config_label
    from studykit.plots.perfmodel import _method_label
    from studykit.train.dynamic import Level

    p = {"rank": 4}
    assert X.method_label("post", "powersgd", p, None) == R.setting_label("powersgd", p, "short") + " (post)"
    assert X.method_label("builtin", "torch_powersgd", p, None) == "PyTorch PowerSGD r4 hook"
    assert report.label("powersgd", json.dumps(p)) == R.setting_label("powersgd", p, "short")
    assert pcli._label("powersgd", p) == _method_label({"label": "powersgd {'rank': 4}", "params": p}) == \
        R.setting_label("powersgd", p, "kv")
    assert R.setting_label("powersgd", p, "kv") in [c.label for c in candidates(["powersgd"])]
    assert Level.make("quantize", bits=4).label == str(CompressorSpec("quantize", (("bits", 4),))) == "quantize:bits=4"
    assert _params_str({"ratio": 0.01, "scope": "layer"}) == R.setting_label("topk", {"ratio": 0.01, "scope": "layer"},
                                                                             "spec", params_only=True)
    row = {"model": "resnet50", "batch_size": 64, "mode": "post", "compressor": "powersgd",
           "params_key": json.dumps(p, sort_keys=True), "world_size": 2, "rate_gbps": None}
    assert config_label(row) == "resnet50 b64 post powersgd {rank:4} p=2 native"
