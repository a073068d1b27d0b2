"""A user's own model wherever a model name goes: FILE.py:FUNC, torchvision:NAME, transformers:TYPE, register()."""
import argparse
import json
import os
import sys
import textwrap
import types

import pytest
import torch
from torch import nn

from studykit import argtypes, models, paths
from studykit import cli as top
from studykit.measure import cli as measure_cli
from studykit.measure.records import load_records
from studykit.perfmodel.calibration import Calibration
from studykit.perfmodel.model import Workload

TINY = "examples/tiny_mlp.py:build"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    """Specs name files relative to the current directory: the repository root here."""
    monkeypatch.chdir(paths.ROOT)


@pytest.fixture
def own_file(tmp_path, monkeypatch):
    """A model file in a temporary folder, with a frozen parameter and a tied pair; the spec is relative."""
    (tmp_path / "net.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(7, 3)
                self.frozen = nn.Linear(3, 2)
                self.frozen.requires_grad_(False)
                self.head = nn.Linear(3, 7, bias=False)
                self.head.weight = self.embed.weight  # tied: one parameter
                self.register_buffer("scale", torch.ones(3))

            def forward(self, ids):
                return self.head(self.embed(ids) * self.scale)

        def build():
            return Net()

        def not_a_module():
            return 3

        def example_batch(batch_size, device):
            return torch.arange(batch_size).remainder(7).to(device), torch.zeros(batch_size, dtype=torch.long)
        """))
    monkeypatch.chdir(tmp_path)
    return "net.py:build"


def test_file_spec_shapes_are_the_modules_trainable_parameters_once(own_file):
    m = models.build(own_file)
    expect = [tuple(p.shape) for p in m.parameters() if p.requires_grad]
    assert expect == [(7, 3)]  # the frozen Linear is left out, the tied head counted once
    assert models.param_shapes(own_file) == expect
    assert models.numel(own_file) == 21 and models.size_bytes(own_file) == 84
    assert models.check(own_file) == own_file and models.is_known(own_file)


def test_file_spec_reread_when_the_file_changes(own_file, tmp_path):
    assert models.param_shapes(own_file) == [(7, 3)]
    path = tmp_path / "net.py"
    extra = "nn.Embedding(7, 3)\n        self.extra = nn.Linear(3, 3)"
    path.write_text(path.read_text().replace("nn.Embedding(7, 3)", extra))
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a distinct modification time
    assert models.param_shapes(own_file) == [(7, 3), (3, 3), (3,)]


def test_tiny_mlp_example_through_every_function():
    shapes = models.param_shapes(TINY)
    assert shapes == [(64, 20), (64,), (5, 64), (5,)]
    assert models.numel(TINY) == 64 * 20 + 64 + 5 * 64 + 5
    m = models.build(TINY)
    assert [tuple(p.shape) for p in m.parameters()] == shapes
    x, y = models.example_batch(TINY, 6)
    assert x.shape == (6, 20) and y.shape == (6,) and int(y.max()) < 5
    loss = models.loss(TINY, m, (x, y))  # no loss() in the file: cross-entropy
    assert loss.item() == pytest.approx(nn.functional.cross_entropy(m(x), y).item(), rel=1e-6)
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in m.parameters())
    assert models.default_batch(TINY) == 32 and models.default_batch("resnet50") == 64
    assert models.seq_len_of(TINY) is None


@pytest.mark.parametrize("spec,error,needle", [
    ("examples/nosuch.py:build", ValueError, "no file 'examples/nosuch.py'"),
    ("examples/tiny_mlp.py:nosuch", ValueError, "defines no function 'nosuch'; its functions: build, example_batch"),
    ("examples/tiny_mlp.py:CLASSES", ValueError, "CLASSES in examples/tiny_mlp.py is a int, not a function"),
    ("foo.py", ValueError, "names a file but no function: write foo.py:FUNC"),
    ("resnet5", ValueError, "unknown model 'resnet5'; did you mean 'resnet50'? available: bert_base"),
    ("nosuchnet", ValueError, "or FILE.py:FUNC, torchvision:NAME, transformers:MODEL_TYPE"),
    ("", ValueError, "must be a non-empty string"),
    ("transformers:", ValueError, "name a model type, e.g. transformers:gpt2:"),
    ("transformers:gpt2:n_layer", ValueError, "expected key=value pairs after the model type"),
])
def test_bad_specs_say_what_is_wrong_and_what_is_valid(spec, error, needle):
    with pytest.raises(error) as exc:
        models.check(spec)
    assert needle in str(exc.value)
    assert not models.is_known(spec)


def test_function_returning_no_module_is_refused(own_file):
    with pytest.raises(ValueError, match="not_a_module: the function returned int, not a torch.nn.Module"):
        models.param_shapes("net.py:not_a_module")


@pytest.mark.parametrize("spec,package", [("torchvision:nosuchnet", "torchvision"),
                                          ("transformers:gpt2:n_layer=2", "transformers")])
def test_missing_package_is_a_module_not_found_error_naming_it(monkeypatch, spec, package):
    monkeypatch.setitem(sys.modules, package, None)  # import fails as where it is not installed
    with pytest.raises(ModuleNotFoundError, match=f"model spec '{spec}' needs {package}.*pip install {package}"):
        models.check(spec)
    with pytest.raises(argparse.ArgumentTypeError, match=f"needs {package}"):
        argtypes.model_spec(spec)


def test_file_without_example_batch_fails_only_when_timing(tmp_path, monkeypatch):
    (tmp_path / "bare.py").write_text("from torch import nn\ndef make():\n    return nn.Linear(4, 2)\n")
    monkeypatch.chdir(tmp_path)
    assert models.param_shapes("bare.py:make") == [(2, 4), (2,)]
    with pytest.raises(ValueError, match=r"no example batch, which timing needs: define example_batch\(batch_size, "
                                         r"device\) returning \(inputs, target\) in bare.py"):
        models.example_batch("bare.py:make", 2)


@pytest.mark.parametrize("body,needle", [
    ("def example_batch(batch_size):\n    return None, None\n",
     "example_batch in bad.py must take (batch_size, device), as the kit calls it; it takes (batch_size)"),
    ("def loss(batch):\n    return 0\n", "loss in bad.py must take (model, batch), as the kit calls it; it takes (batch)"),
    ("example_batch = 3\n", "example_batch in bad.py is a int, not a function taking (batch_size, device)"),
])
def test_file_functions_the_kit_calls_with_the_wrong_arguments_are_refused_by_name(tmp_path, monkeypatch, body, needle):
    (tmp_path / "bad.py").write_text("from torch import nn\ndef make():\n    return nn.Linear(4, 2)\n" + body)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as exc:
        models.param_shapes("bad.py:make")
    assert f"model spec 'bad.py:make': {needle}" in str(exc.value)
    with pytest.raises(argparse.ArgumentTypeError, match="must take|not a function"):  # every --model: exit 2
        argtypes.model_spec("bad.py:make")


def test_a_build_function_that_needs_arguments_is_refused_before_it_is_called(tmp_path, monkeypatch):
    (tmp_path / "net.py").write_text("from torch import nn\ndef make(width):\n    return nn.Linear(4, width)\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"make in net.py must take \(\), as the kit calls it; it takes \(width\)"):
        models.param_shapes("net.py:make")


def test_defaults_and_star_args_fit_the_contract(tmp_path, monkeypatch):
    (tmp_path / "ok.py").write_text(
        "import torch\nfrom torch import nn\ndef make(width=2):\n    return nn.Linear(4, width)\n"
        "def example_batch(*args):\n    return torch.ones(args[0], 4), None\n"
        "def loss(model, batch, scale=1.0):\n    return scale * model(batch[0]).sum()\n")
    monkeypatch.chdir(tmp_path)
    assert models.param_shapes("ok.py:make") == [(2, 4), (2,)]
    assert models.example_batch("ok.py:make", 3)[0].shape == (3, 4)


class _Out(nn.Module):
    """Returns a dict-like output with a ``loss`` field, or a tuple, for the default loss."""

    def __init__(self, kind):
        super().__init__()
        self.lin, self.kind = nn.Linear(3, 4), kind

    def forward(self, x, scale=1.0):
        y = self.lin(x) * scale
        if self.kind == "loss":
            return types.SimpleNamespace(loss=y.sum(), logits=y)
        return (y, None) if self.kind == "tuple" else {"logits": y}


def test_default_loss_branches():
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 1, 2, 3, 0])
    m = _Out("loss")
    assert models.default_loss(m, (x, None)).item() == pytest.approx(m.lin(x).sum().item(), rel=1e-5)
    m = _Out("tuple")
    assert models.default_loss(m, (x, None)).item() == pytest.approx(m.lin(x).square().mean().item(), rel=1e-5)
    assert models.default_loss(m, (x, y)).item() == pytest.approx(
        nn.functional.cross_entropy(m.lin(x), y).item(), rel=1e-5)
    m = _Out("dict")  # a dict of inputs is passed as keywords
    got = models.default_loss(m, ({"x": x, "scale": 2.0}, None)).item()
    assert got == pytest.approx((2 * m.lin(x)).square().mean().item(), rel=1e-5)


@pytest.fixture
def registered():
    names = []
    yield names
    for n in names:
        models.own.unregister(n)


def test_register_a_live_module_and_a_factory(registered):
    net = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    net[0].requires_grad_(False)
    registered.append(models.register("my_net", net))
    assert models.param_shapes("my_net") == [(2, 3), (2,)]
    copy = models.build("my_net")
    assert copy is not net and torch.equal(copy[1].weight, net[1].weight)
    assert "my_net" not in models.available()  # available() lists the built-in names only
    assert Workload(model="my_net", t_comp_s=0.01).gradient_bytes == 4 * 8
    registered.append(models.register("my_factory", lambda: nn.Linear(2, 2),
                                      example_batch=lambda bs, device: (torch.ones(bs, 2), None)))
    assert models.numel("my_factory") == 6
    m = models.build("my_factory")
    models.loss("my_factory", m, models.example_batch("my_factory", 3)).backward()  # mean square of the output
    assert m.weight.grad is not None
    models.register("my_net", nn.Linear(5, 1))  # registering again replaces it (cached shapes too)
    assert models.param_shapes("my_net") == [(1, 5), (1,)]
    with pytest.raises(ValueError, match="pass example_batch= to register"):
        models.example_batch("my_net", 2)


@pytest.mark.parametrize("name,obj,error,needle", [
    ("resnet50", nn.Linear(1, 1), ValueError, "not a built-in name"),
    ("a:b", nn.Linear(1, 1), ValueError, "without ':'"),
    ("fine", 3, TypeError, "expected an nn.Module or a zero-argument factory"),
    ("fine", lambda: "not a module", ValueError, "returned str, not a torch.nn.Module"),
])
def test_register_refuses_bad_input_and_keeps_nothing(registered, name, obj, error, needle):
    with pytest.raises(error, match=needle):
        models.register(name, obj)
    assert not models.is_known("fine")


def test_register_refuses_an_example_batch_or_loss_it_cannot_call(registered):
    with pytest.raises(ValueError, match=r"register\('fine'\): example_batch must take \(batch_size, device\)"):
        models.register("fine", nn.Linear(1, 1), example_batch=lambda bs: (torch.ones(bs, 1), None))
    with pytest.raises(ValueError, match=r"register\('fine'\): loss must take \(model, batch\)"):
        models.register("fine", nn.Linear(1, 1), loss=lambda m: m.weight.sum())
    with pytest.raises(ValueError, match=r"register\('fine'\): the factory must take \(\)"):
        models.register("fine", nn.Linear)  # the class needs its sizes
    assert not models.is_known("fine")


def test_transformers_spec_builds_from_the_config(monkeypatch):
    """``transformers:TYPE:k=v`` calls AutoConfig.for_model(TYPE, **kv) and AutoModel.from_config (a stand-in here)."""
    calls = {}

    class Tiny(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.embed = nn.Embedding(config.vocab_size, config.n_embd)

        def forward(self, input_ids):
            return types.SimpleNamespace(last_hidden_state=self.embed(input_ids))

    def for_model(model_type, **kw):
        calls["for_model"] = (model_type, kw)
        return types.SimpleNamespace(vocab_size=11, **kw)

    fake = types.SimpleNamespace(CONFIG_MAPPING={"gpt2": None, "bert": None},
                                 AutoConfig=types.SimpleNamespace(for_model=for_model),
                                 AutoModel=types.SimpleNamespace(from_config=Tiny))
    monkeypatch.setitem(sys.modules, "transformers", fake)
    spec = "transformers:gpt2:n_embd=4,n_layer=24"
    assert models.param_shapes(spec) == [(11, 4)]
    assert calls["for_model"] == ("gpt2", {"n_embd": 4, "n_layer": 24})
    assert models.seq_len_of(spec, 16) == 16
    ids, target = models.example_batch(spec, 2, seq_len=16)
    assert ids.shape == (2, 16) and target is None and int(ids.max()) < 11
    m = models.build(spec)
    loss = models.loss(spec, m, (ids, None))
    assert loss.item() == pytest.approx(m.embed(ids).square().mean().item(), rel=1e-6)
    with pytest.raises(ValueError, match="no model type 'gtp2'; did you mean gpt2"):
        models.check("transformers:gtp2")


def test_torchvision_spec_uses_get_model_without_weights(monkeypatch):
    """``torchvision:NAME`` is get_model(NAME, weights=None) with 3x224x224 images of 1000 classes (a stand-in here)."""
    calls = []

    def builder(*, weights=None, progress=True):
        raise AssertionError("get_model is called, not the builder")

    def get_model(name, **kw):
        calls.append((name, kw))
        return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, 1000))

    tvm = types.SimpleNamespace(list_models=lambda: ["resnet18", "vit_b_16"], get_model=get_model,
                                get_model_builder=lambda name: builder)
    monkeypatch.setitem(sys.modules, "torchvision", types.SimpleNamespace(models=tvm))
    assert models.param_shapes("torchvision:resnet18") == [(1000, 3), (1000,)]
    assert calls[-1] == ("resnet18", {"weights": None})
    x, y = models.example_batch("torchvision:resnet18", 2)
    assert x.shape == (2, 3, 224, 224) and y.shape == (2,) and int(y.max()) < 1000
    models.loss("torchvision:resnet18", models.build("torchvision:resnet18"), (x, y)).backward()
    with pytest.raises(ValueError, match="torchvision has no model 'resnet19'; did you mean resnet18"):
        models.check("torchvision:resnet19")


def test_workload_takes_a_spec_and_refuses_a_bad_one():
    w = Workload(model=TINY, batch_size=8, t_comp_s=0.005)
    assert w.gradient_bytes == models.size_bytes(TINY) and w.n_tensors == 4
    with pytest.raises(ValueError, match="no file 'nosuch.py'"):
        Workload(model="nosuch.py:build")


def test_calibration_scales_encode_decode_to_a_spec_by_parameter_count():
    cal = Calibration.load(paths.CALIBRATIONS / "h200x2_nvlink.json")
    comp, params = cal.compressors()[0]
    v, _, how = cal.t_encode_decode_s(comp, params, TINY)
    src = how.split("scaled by parameter count from ")[1].split(" ")[0]
    v_src, _, _ = cal.t_encode_decode_s(comp, params, src)
    assert v == pytest.approx(v_src * models.numel(TINY) / models.numel(src))


def test_predict_takes_a_file_spec(capsys):
    rc = top.main(["predict", "--model", TINY, "--t-comp-ms", "5", "--gpus", "2", "--bandwidth-gbps", "10",
                   "--calibration", "data/calibrations/h200x2_nvlink.json", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["points"][0]["syncsgd"]["total_ms"] > 5


@pytest.mark.parametrize("argv", [["predict", "--model", "examples/tiny_mlp.py:nosuch", "--t-comp-ms", "5"],
                                  ["compressors", "--model", "nosuch.py"]])
def test_a_bad_model_exits_2_with_the_reason(capsys, argv):
    try:
        rc = top.main(argv)
    except SystemExit as exc:  # argparse's own exit (compressors) or a returned status (predict)
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err
    assert "argument --model: " in err
    assert "defines no function 'nosuch'" in err or "names a file but no function" in err


def test_compressors_table_of_a_file_spec(capsys):
    assert top.main(["compressors", "--model", TINY, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    fp16 = next(r for r in rows if r["compressor"] == "fp16")
    assert fp16["wire_bytes"] == 2 * models.numel(TINY)


def test_tcomp_records_carry_the_spec(tmp_path):
    out = tmp_path / "t.jsonl"
    assert measure_cli.main(["tcomp", "--models", TINY, "--batch-sizes", "4", "--iters", "2", "--warmup", "1",
                             "--device", "cpu", "--out", str(out), "--quiet"]) == 0
    recs = load_records(out, kind="tcomp")
    assert sorted(r["phase"] for r in recs) == ["bwd", "fwd_bwd"]
    assert all(r["model"] == TINY and r["status"] == "ok" and r["batch_size"] == 4 for r in recs)


def test_shapes_travel_with_records_and_calibration(tmp_path):
    """A spec that cannot be built here (its file is gone) is predicted from the shapes its tcomp records carry,
    through the calibration that fit makes of them; without them it is refused."""
    import json

    import pandas as pd

    from studykit.perfmodel import fit
    from studykit.perfmodel.calibration import Calibration

    src = tmp_path / "gone_model.py"
    src.write_text("import torch.nn as nn\n\ndef build():\n    return nn.Sequential(nn.Linear(7, 5), nn.Linear(5, 3))\n")
    spec = f"{src}:build"
    shapes = models.param_shapes(spec)
    assert shapes == [(5, 7), (5,), (3, 5), (3,)]
    recs = [{"schema": 1, "kind": "tcomp", "config_id": f"t{ph}{i}", "status": "ok", "model": spec, "batch_size": 8,
             "phase": ph, "world_size": 1, "ms_median": ms, "ms_mean": ms, "n_iter": 5,
             "times_ms": [ms] * 5, "param_shapes": [list(s) for s in shapes]}
            for i, (ph, ms) in enumerate([("bwd", 2.0), ("fwd_bwd", 3.0)])]
    cal = fit.fit_calibration(pd.DataFrame(recs), "shapes", n_boot=0)
    assert cal.models == {spec: [list(s) for s in shapes]}
    path = cal.save(tmp_path / "cal.json")
    src.unlink()
    models._REMEMBERED.clear()
    with pytest.raises(ValueError, match="gone_model.py"):
        models.param_shapes(spec)
    loaded = Calibration.load(path)
    assert json.loads(path.read_text())["models"][spec] == [[5, 7], [5], [3, 5], [3]]
    assert models.param_shapes(spec) == shapes and loaded.models
    models._REMEMBERED.clear()


def test_calibration_refuses_bad_model_shapes(tmp_path):
    from studykit.perfmodel.calibration import Calibration

    with pytest.raises(ValueError, match="'models'"):
        Calibration.from_dict({"name": "x", "models": {"a.py:f": [[3, -1]]}})
