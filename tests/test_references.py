"""Papers a reader of a clone can find: the README's list is studykit.references, every compressor has its source."""
import pytest

from studykit import compressors, paths, references


def test_readme_lists_exactly_the_references_table():
    text = (paths.ROOT / "README.md").read_text()
    a, b = "<!-- references:begin -->\n", "<!-- references:end -->"
    assert text[text.index(a) + len(a):text.index(b)] == references.markdown()


def test_every_paper_compressor_names_a_known_source():
    plain = {"none", "fp16", "bf16", "quantize"}  # casts and uniform quantization: no single source
    for name in compressors.available():
        if name in plain:
            continue
        assert references.COMPRESSOR_SOURCES.get(name) in references.REFERENCES, name


def test_cite_and_full():
    assert references.cite("agarwal2022") == "Agarwal et al. 2022 (https://arxiv.org/abs/2103.00543)"
    assert "MLSys 2022" in references.full("agarwal2022")
    assert "No public link" in references.full("tirupati")
    with pytest.raises(KeyError, match="known:"):
        references.cite("seed000")
