"""Offline data sets: MNIST-1D equals the mnist1d package's, CIFAR-10 from a tiny archive in the
standard python format (made here), clear errors for missing or malformed copies."""
import io
import pickle
import tarfile

import numpy as np
import pytest
import torch

from studykit.train import data, nets


def test_mnist1d_generator_matches_the_mnist1d_package():
    mnist1d = pytest.importorskip("mnist1d.data")
    ours = data.make_mnist1d(num_samples=500)
    args = mnist1d.get_dataset_args()
    args.num_samples = 500
    theirs = mnist1d.make_dataset(args)
    for k in ("x", "x_test"):
        np.testing.assert_allclose(ours[k], theirs[k], rtol=0, atol=1e-9)
    for k in ("y", "y_test"):
        np.testing.assert_array_equal(ours[k], theirs[k])


@pytest.mark.slow
def test_mnist1d_dataset_shapes():
    ds = data.load("mnist1d")
    assert ds.x_train.shape == (4000, 1, 40) and ds.x_test.shape == (1000, 1, 40)
    assert ds.x_train.dtype == torch.float32 and set(ds.y_train.unique().tolist()) == set(range(10))


def test_digits_and_synthetic():
    d = data.load("digits")
    assert d.input_shape == (64,) and len(d.y_train) + len(d.y_test) == 1797
    s = data.load("synthetic", limit_train=256, limit_test=64, synthetic_shape=(3, 8, 8))
    assert s.x_train.shape == (256, 3, 8, 8) and s.x_test.shape == (64, 3, 8, 8)
    assert torch.equal(s.x_train, data.load("synthetic", limit_train=256, limit_test=64,
                                            synthetic_shape=(3, 8, 8)).x_train)


def test_validation_split_is_seeded_and_disjoint():
    ds = data.load("digits")
    a, xa, ya = ds.split_validation(0.1, seed=3)
    b, xb, yb = ds.split_validation(0.1, seed=3)
    assert torch.equal(xa, xb) and len(ya) == round(0.1 * len(ds.y_train))
    assert len(a.y_train) + len(ya) == len(ds.y_train)


# ------------------------------------------------------------------ CIFAR-10
def _batch(n, seed):
    rng = np.random.default_rng(seed)
    return {b"batch_label": b"x", b"labels": rng.integers(0, 10, n).tolist(),
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"filenames": [b"f"] * n}


def _write_tree(root, n=4, bad=None):
    d = root / data.CIFAR_DIR
    d.mkdir(parents=True)
    for i, name in enumerate((*data.CIFAR_TRAIN, data.CIFAR_TEST)):
        obj = _batch(n, i) if name != bad else {b"labels": [1]}
        (d / name).write_bytes(pickle.dumps(obj, protocol=2))
    return d


def _write_archive(path, n=4):
    with tarfile.open(path, "w:gz") as tar:
        for i, name in enumerate((*data.CIFAR_TRAIN, data.CIFAR_TEST)):
            raw = pickle.dumps(_batch(n, i), protocol=2)
            info = tarfile.TarInfo(f"{data.CIFAR_DIR}/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))


def test_cifar10_from_archive_folder_and_parent(tmp_path):
    arc = tmp_path / "a" / data.CIFAR_ARCHIVE
    arc.parent.mkdir()
    _write_archive(arc)
    tree = _write_tree(tmp_path / "b")
    from_arc = data.cifar10(arc)
    for src in (arc.parent, tree, tree.parent):  # folder holding the archive, the batches, their parent
        ds = data.cifar10(src)
        assert torch.equal(ds.x_train, from_arc.x_train) and torch.equal(ds.y_test, from_arc.y_test)
    assert from_arc.x_train.shape == (20, 3, 32, 32) and from_arc.x_test.shape == (4, 3, 32, 32)
    # CHW order: byte c * 1024 + h * 32 + w of a row is channel c, row h, column w; labels kept in order
    raw = np.concatenate([_batch(4, i)[b"data"] for i in range(5)]).reshape(-1, 3, 32, 32) / 255.0
    raw = torch.tensor(raw, dtype=torch.float32)
    mean, std = raw.mean(dim=(0, 2, 3), keepdim=True), raw.std(dim=(0, 2, 3), keepdim=True)
    torch.testing.assert_close(from_arc.x_train, (raw - mean) / std)
    assert from_arc.y_train[:4].tolist() == _batch(4, 0)[b"labels"]
    ds = data.load("cifar10", root=arc, limit_train=6, limit_test=2)
    assert len(ds.y_train) == 6 and len(ds.y_test) == 2


def test_cifar10_errors_name_the_path_and_the_problem(tmp_path):
    with pytest.raises(data.DataError, match="does not exist.*cifar-10-python.tar.gz"):
        data.cifar10(tmp_path / "nowhere")
    with pytest.raises(data.DataError, match="no path given"):
        data.cifar10(None)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(data.DataError, match="holds neither"):
        data.cifar10(empty)
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tar")
    with pytest.raises(data.DataError, match="not a tar archive"):
        data.cifar10(junk)
    _write_tree(tmp_path / "bad", bad="data_batch_3")
    with pytest.raises(data.DataError, match="data_batch_3 lacks b'data'"):
        data.cifar10(tmp_path / "bad")
    partial = tmp_path / "partial.tar.gz"
    with tarfile.open(partial, "w:gz") as tar:
        raw = pickle.dumps(_batch(2, 0))
        info = tarfile.TarInfo(f"{data.CIFAR_DIR}/data_batch_1")
        info.size = len(raw)
        tar.addfile(info, io.BytesIO(raw))
    with pytest.raises(data.DataError, match="lacks cifar-10-batches-py/data_batch_2"):
        data.cifar10(partial)
    with pytest.raises(data.DataError, match="unknown dataset"):
        data.load("imagenet")


def test_models_for_each_data_set():
    for shape, arch in (((1, 40), "CNN1D"), ((64,), "MLP"), ((3, 32, 32), "ResNetish")):
        m = nets.build("auto", shape, 10)
        assert type(m).__name__ == arch
        assert m(torch.zeros(2, *shape)).shape == (2, 10)
    assert 5_000 < nets.num_params(nets.build("auto", (1, 40), 10)) < 12_000


# --------------------------------------------------------------------------- the text workload
@pytest.mark.slow
def test_stdlib_corpus_is_split_by_file_deterministically():
    from studykit.train import text

    files = text.stdlib_files()
    root = text.stdlib_root()
    rels = [p.relative_to(root).as_posix() for p in files]
    assert rels == sorted(rels) and not any("site-packages" in r for r in rels) and len(rels) > 100
    val = [r for r in rels if text.is_validation_file(r)]
    assert 0.02 < len(val) / len(rels) < 0.09  # ~5 % of the files, whole files only
    c = text.load_corpus(limit_train=50_000, limit_val=10_000)
    assert (len(c.train), len(c.val)) == (50_000, 10_000) and c.train.dtype == torch.uint8
    first_val = next(p for p in files if text.is_validation_file(p.relative_to(root).as_posix()))
    assert bytes(c.val[:200].tolist()) == first_val.read_bytes()[:200]
    assert c.summary()["sha256_train"] == text.load_corpus(limit_train=50_000, limit_val=10_000).summary()["sha256_train"]
    x, y = c.windows("val", 64)
    assert tuple(x.shape) == ((len(c.val) - 1) // 64, 64)
    assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(x[1, 0], c.val[64].long())
    s1 = text.batch_starts(len(c.train), 64, 8, seed=3, step=5)
    assert torch.equal(s1, text.batch_starts(len(c.train), 64, 8, seed=3, step=5))
    assert not torch.equal(s1, text.batch_starts(len(c.train), 64, 8, seed=3, step=6))
    with pytest.raises(ValueError, match="limit_train"):
        text.load_corpus(limit_train=1)


def test_gpt2_small_config_has_gpt2_smalls_parameters():
    """nets.GPT at GPT-2 small's geometry and vocabulary lists the parameters of studykit.models' gpt2_small
    (transformers' order; its Conv1D weights are stored transposed), 124,439,808 in all."""
    import math

    from studykit import models
    from studykit.train import nets

    with torch.device("meta"):
        m = nets.build("gpt2_small", (1024,), 50257)
    shapes = models.param_shapes("gpt2_small")
    assert [p.numel() for p in m.parameters()] == [math.prod(s) for s in shapes]
    assert nets.num_params(m) == models.PARAM_COUNTS["gpt2_small"]
    tiny = nets.build("gpt_tiny", (16,), 256)
    assert tiny(torch.zeros(2, 16, dtype=torch.long)).shape == (2, 16, 256)
    with pytest.raises(ValueError, match="seq_len"):
        nets.build("gpt_tiny", (3, 8), 256)


def test_text_test_split_is_disjoint_from_validation_and_training():
    """``test_percent`` holds out a third set of whole files: validation keeps its files, the test stream
    comes from files neither validation nor training saw, and a bad value names the valid range."""
    from studykit.train import text

    root = text.stdlib_root()
    rels = [p.relative_to(root).as_posix() for p in text.stdlib_files()]
    where = {r: text.split_of(r, test_percent=5) for r in rels}
    assert {r for r, w in where.items() if w == "val"} == {r for r in rels if text.is_validation_file(r)}
    assert 0.02 < sum(w == "test" for w in where.values()) / len(rels) < 0.09
    c = text.load_corpus(limit_train=50_000, limit_val=10_000, test_percent=5)
    plain = text.load_corpus(limit_train=50_000, limit_val=10_000)
    assert torch.equal(c.val, plain.val) and len(c.test) == 10_000 and plain.test is None
    first_test = next(root / r for r in rels if where[r] == "test")
    assert bytes(c.test[:200].tolist()) == first_test.read_bytes()[:200]
    s = c.summary()
    assert s["num_test_tokens"] == 10_000 and s["sha256_test"] != s["sha256_val"] and "test:" in s["split"]
    assert "num_test_tokens" not in plain.summary()
    x, y = c.windows("test", 64)
    assert torch.equal(x[:, 1:], y[:, :-1])
    with pytest.raises(ValueError, match="no 'test' stream"):
        plain.windows("test", 64)
    with pytest.raises(ValueError, match="test_percent"):
        text.load_corpus(limit_train=1000, limit_val=100, test_percent=96)
