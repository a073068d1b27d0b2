import pytest

from studykit import models


@pytest.mark.parametrize("name,count", sorted(models.PARAM_COUNTS.items()))
def test_parameter_counts_match_published(name, count):
    assert models.numel(name) == count


def test_paper_model_sizes_in_mib():
    # Agarwal et al. 2022, Sec. 3: ResNet-50 97 MB, ResNet-101 170 MB, BERT-base 418 MB (MiB of fp32)
    for name, mib in [("resnet50", 97), ("resnet101", 170), ("bert_base", 418)]:
        assert round(models.size_bytes(name) / 2**20) == mib


def test_unknown_model_lists_valid():
    with pytest.raises(ValueError, match="available: .*resnet50"):
        models.param_shapes("resnet5")


def test_shapes_match_torchvision_when_installed():
    tv = pytest.importorskip("torchvision")
    for name in ("resnet50", "resnet101", "vgg19"):
        m = getattr(tv.models, name)(weights=None)
        assert [tuple(p.shape) for p in m.parameters()] == models.param_shapes(name)


def test_mlp_large_has_a_multi_mb_gradient_and_builds():
    torch = pytest.importorskip("torch")
    assert models.param_shapes("mlp_large") == [(1024, 40), (1024,), (1024, 1024), (1024,), (10, 1024), (10,)]
    assert models.numel("mlp_large") == 1_101_834 and models.size_bytes("mlp_large") == 4_407_336
    m = models.build("mlp_large")
    assert [tuple(p.shape) for p in m.parameters()] == models.param_shapes("mlp_large")
    batch = models.example_batch("mlp_large", 3)
    assert batch[0].shape == (3, 40) and batch[1].shape == (3,) and int(batch[1].max()) < 10
    loss = models.loss("mlp_large", m, batch)
    loss.backward()
    assert torch.isfinite(loss)
