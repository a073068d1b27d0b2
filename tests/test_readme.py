"""The README answers on its first screen (what the kit is for, the two commands, what it found), stays short, and
carries no campaign log: its measured numbers come from generated blocks (``python -m studykit data regen``)."""
import json
import re

import pytest

from studykit import paths
from studykit.nbtools import datacli, readme_blocks

README = paths.ROOT / "README.md"
#: the README's generated blocks, as the manifest names them (block files are relative to data/)
README_BLOCKS = "../README.md"


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _prose(text: str) -> str:
    """``text`` without generated blocks, fenced code, the generated notebook table and its footer."""
    text = re.sub(r"<!-- ([\w-]+):begin -->.*?<!-- \1:end -->", "", text, flags=re.S)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return "\n".join(line for line in text.splitlines()
                     if not re.match(r"\| \[`\w+`\]\(notebooks/|\| notebook \||\|---|<sub>profile", line))


def test_at_most_1500_words():
    n = len(_text().split())  # what `wc -w` counts: code blocks and generated blocks included
    assert n <= 1500, f"README.md has {n} words; at most 1500 (move detail to docs/)"


def test_the_first_screen_says_what_for_how_to_run_and_what_it_found():
    text = _text()
    first = "\n".join(text.splitlines()[:60])
    assert "Agarwal et al. 2022" in first and "https://arxiv.org/abs/2103.00543" in first
    assert "make demo" in first and "make test" in first
    assert "<!-- crossovers:begin -->" in first, "the measured crossover table belongs on the first screen"
    assert text.index("make demo") < text.index("<!-- crossovers:begin -->")
    assert "NVIDIA H200" in datacli.marked(text, "crossovers"), "the table names the machine it came from"


def test_no_campaign_log_in_the_readme():
    text = _text()
    for pattern in (r"\bissue \d", r"#\d{2,}\b", r"\bh200_\w+", r"\w+_h200\w*", r"gpu_checks", r"data/measurements/\w"):
        found = re.findall(pattern, text, flags=re.I)
        assert not found, f"README.md names {found[:3]}: campaign detail belongs in docs/findings.md or data/"


def test_no_measured_number_typed_into_the_prose():
    prose = _prose(_text())
    typed = re.findall(r"\d+(?:\.\d+)?\s*(?:ms\b|%|Gbit/s|GB/s|x faster|x slower)", prose)
    assert not typed, f"numbers typed into the README's prose: {typed[:5]}; put them in a generated block"


def test_the_moved_detail_is_linked():
    text = _text()
    for doc in ("docs/findings.md", "docs/usage.md", "docs/calibrate.md", "data/README.md"):
        assert f"]({doc}" in text, f"README.md should link {doc}"
        assert (paths.ROOT / doc).is_file(), doc


def test_docs_carry_no_issue_numbers():
    for doc in sorted((paths.ROOT / "docs").glob("*.md")):
        found = re.findall(r"\bissues? \d+|\bissue #\d+", doc.read_text(encoding="utf-8"), flags=re.I)
        assert not found, f"{doc.name} names {found[:3]}: say what the target or fault was instead"


# ------------------------------------------------------------------ the crossover block's builder
PARAMS = {"topk": {"ratio": 0.01}, "powersgd": {"rank": 4}}


def _campaign(folder, p, rows):
    """ddp records of one campaign: ``rows`` = (rate_gbps, syncSGD ms, fp16 baseline ms, {compressor: ms}), each
    compressor run after the backward pass with its parameters in :data:`PARAMS`."""
    folder.mkdir(parents=True)
    recs = []
    for rate, sync, fp16, others in rows:
        base = {"kind": "ddp", "status": "ok", "gpu": "G9", "world_size": p, "model": "m", "batch_size": 8,
                "bucket_mb": None, "times_ms": [], "n_iter": 3, "network": {"rate_gbps": rate}, "timestamp": "t"}
        recs += [{**base, "mode": "syncsgd", "compressor": None, "params": {}, "ms_median": sync},
                 {**base, "mode": "builtin", "compressor": "torch_fp16", "params": {}, "ms_median": fp16}]
        recs += [{**base, "mode": "post", "compressor": c, "params": PARAMS[c], "ms_median": ms} for c, ms in others.items()]
    (folder / "ddp.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_crossovers_block_by_hand(tmp_path, monkeypatch):
    # p = 2, log(speed-up) linear in log(rate) between 1 and 10 Gbit/s, zero at 10 ** (ln s1 / ln(s1 / s10)):
    # topk vs syncSGD 100/40 -> 20/30: 10 ** (ln 2.5 / ln 3.75) = 4.93; vs fp16 60/40 -> 22/30: 10 ** (ln 1.5 /
    # ln(1.5 * 30 / 22)) = 3.69; the fp16 hook vs syncSGD 100/60 -> 20/22: 10 ** (ln(5/3) / ln(5/3 * 22/20)) = 6.96;
    # powersgd at 10 ms beats both at both rates (one value). p = 4: the fp16 hook faster at both rates, no topk.
    _campaign(tmp_path / "a", 2, [(1, 100.0, 60.0, {"topk": 40.0, "powersgd": 10.0}),
                                  (10, 20.0, 22.0, {"topk": 30.0, "powersgd": 10.0})])
    _campaign(tmp_path / "b", 4, [(1, 100.0, 60.0, {}), (10, 20.0, 15.0, {})])
    monkeypatch.setattr(paths, "DATA", tmp_path)
    md = readme_blocks.crossovers_block(["a", "b"], ["PyTorch fp16 hook", "topk 1% (post)", "powersgd r4 (post)"])
    lines = md.splitlines()
    assert lines[0] == "| model (batch) | GPUs | PyTorch fp16 hook | topk 1% (post) | powersgd r4 (post) |"
    assert lines[2] == "| m (8) | 2 | 7.0 | 4.9 / 3.7 | > 10 |"
    assert lines[3] == "| m (8) | 4 | > 10 | not measured | not measured |"
    assert "Measured on 2 x G9 and 4 x G9, links shaped to 1-10 Gbit/s." in md and "`*`" not in md


def test_crossovers_block_refuses_a_method_never_measured(tmp_path, monkeypatch):
    _campaign(tmp_path / "a", 2, [(1, 100.0, 60.0, {"topk": 40.0}), (10, 20.0, 25.0, {"topk": 30.0})])
    monkeypatch.setattr(paths, "DATA", tmp_path)
    with pytest.raises(ValueError, match=r"'topk 5% \(post\)'.*measured: .*'topk 1% \(post\)'"):
        readme_blocks.crossovers_block(["a"], ["topk 5% (post)"])


@pytest.mark.data
def test_the_readme_blocks_are_the_generated_ones():
    """``python -m studykit data regen --check --only ../README.md``: the README's blocks from the committed records."""
    manifest = datacli.load_manifest()
    assert [b.marker for b in manifest.blocks if b.file == README_BLOCKS] == ["crossovers"]
    outcomes = datacli.check(manifest, only=[README_BLOCKS], progress=False)
    assert [o.verdict for o in outcomes] == ["identical"], datacli.report(outcomes)


def test_pip_install_puts_cpu_torch_before_the_wheel():
    """docs/usage.md's pip section (the README links it) installs the CPU build of torch before the wheel, from the
    index scripts/setup_env.sh names, so a CPU machine does not pull a CUDA torch through the kit's requirement."""
    usage = (paths.ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    section = usage.split("## Installing the kit with pip", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S).group(1)
    lines = [line.split("#")[0].strip() for line in block.splitlines()]
    torch_at = next(i for i, line in enumerate(lines) if line.startswith("pip install torch "))
    wheel_at = next(i for i, line in enumerate(lines) if line.startswith("pip install dist/"))
    url = re.search(r"--index-url (\S+)", lines[torch_at]).group(1)
    assert torch_at < wheel_at and url == "https://download.pytorch.org/whl/cpu"
    assert url in (paths.ROOT / "scripts" / "setup_env.sh").read_text(encoding="utf-8")
    assert "docs/usage.md#installing-the-kit-with-pip" in _text()
