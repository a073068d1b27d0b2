import pytest

from studykit import models


@pytest.mark.parametrize("name,count", sorted(models.PARAM_COUNTS.items()))
def test_parameter_counts_match_published(name, count):
    assert models.numel(name) == count


def test_paper_model_sizes_in_mib():
    # Seed 000, Sec. 3: ResNet-50 97 MB, ResNet-101 170 MB, BERT-base 418 MB (MiB of fp32)
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
