"""studykit.nbtools.datacli: the manifest of data/ (data/campaigns.toml), its validation, the index checks, the tolerant
comparison of regenerated files, README blocks and the ``data`` command (the whole regeneration: test_verify.py)."""
import json

import pandas as pd
import pytest

from studykit import cli, paths
from studykit.nbtools import datacli

MANIFEST = datacli.load_manifest()

GOOD = '''
[campaign."runs/a"]
question = "Does it work?"
date = "2026-11-26"
machine = "1 x NVIDIA H200"
commit = "abc1234"
status = "current"
command = "python -m studykit ddp"

[campaign."runs/old"]
question = "Did it work before?"
date = "2026-11-25"
machine = "1 x NVIDIA H200"
commit = "abc1233"
status = "superseded"
superseded_by = "runs/a"
command = "unknown"
'''


def _load(tmp_path, text):
    (tmp_path / "m.toml").write_text(text)
    return datacli.load_manifest(tmp_path / "m.toml")


# ------------------------------------------------------------------ validation
def test_the_committed_manifest_reads_into_entries_and_blocks():
    assert all(e.status in datacli.STATUSES for e in MANIFEST.entries.values())
    assert MANIFEST.block("verification/README.md", "summary").builder == "summary"
    with pytest.raises(KeyError, match=r"no block 'nope' in verification/README.md; its blocks: \['summary', 'scaling'\]"):
        MANIFEST.block("verification/README.md", "nope")


def test_good_manifest_and_its_superseded_entry(tmp_path):
    m = _load(tmp_path, GOOD)
    assert set(m.entries) == {"runs/a", "runs/old"} and m.entries["runs/old"].superseded_by == ("runs/a",)
    assert m.entries["runs/a"].outputs == ()  # not generated


@pytest.mark.parametrize("edit, match", [
    (('status = "current"', 'status = "latest"'), r"campaign 'runs/a'.*status 'latest' is not one of current, superseded, archive"),
    (('superseded_by = "runs/a"\n', ''), r"campaign 'runs/old'.*superseded_by names the successor"),
    (('superseded_by = "runs/a"', 'superseded_by = "runs/b"'), r"superseded_by 'runs/b' is not a campaign of the manifest"),
    (('question = "Does it work?"', 'question = ""'), r"campaign 'runs/a'.*needs question"),
    (('command = "python -m studykit ddp"', 'comand = "x"'), r"unknown field\(s\) \['comand'\]; valid: question"),
    (('command = "python -m studykit ddp"\n', ''), r"campaign 'runs/a'.*needs a command"),
])
def test_a_bad_entry_is_refused_naming_what_and_what_is_valid(tmp_path, edit, match):
    with pytest.raises(datacli.ManifestError, match=match):
        _load(tmp_path, GOOD.replace(*edit))


def test_bad_generators_blocks_and_toml_are_refused(tmp_path):
    gen = GOOD + '[campaign."runs/a".generator]\nkind = "notebook"\n'
    with pytest.raises(datacli.ManifestError, match=r"generator.kind must be one of verify, report, main, got 'notebook'"):
        _load(tmp_path, gen)
    gen = GOOD + '[campaign."runs/a".generator]\nkind = "verify"\nrecords = ["data/x"]\n'
    with pytest.raises(datacli.ManifestError, match=r"a verify generator needs args"):
        _load(tmp_path, gen)
    block = GOOD + '[[block]]\nfile = "x/README.md"\nmarker = "t"\nbuilder = "nope"\n'
    with pytest.raises(datacli.ManifestError, match=r"block 1 \(x/README.md#t\): builder 'nope' is not one of summary, "):
        _load(tmp_path, block)
    with pytest.raises(datacli.ManifestError, match="not valid TOML"):
        _load(tmp_path, GOOD + "[campaign\n")
    with pytest.raises(datacli.ManifestError, match=r"unknown top-level key\(s\) \['campaigns'\]"):
        _load(tmp_path, GOOD + '[campaigns."x"]\nquestion = "q"\n')


def test_a_builder_in_a_test_module_is_refused_naming_the_block_and_the_valid_builders(tmp_path):
    block = GOOD + '[[block]]\nfile = "x/README.md"\nmarker = "t"\nbuilder = "tests/test_bench.py:atomo_block"\n'
    with pytest.raises(datacli.ManifestError, match=r"block 1 \(x/README.md#t\): builder 'tests/test_bench.py:atomo_block' "
                                                    r"is not one of summary, .*, atomo, "):
        _load(tmp_path, block)
    bad = datacli.Block("x/README.md", "t", "tests/test_bench.py:atomo_block")
    with pytest.raises(ValueError, match=r"block x/README.md#t: builder 'tests/test_bench.py:atomo_block' is not one of"):
        datacli.build_block(bad)


def test_every_builder_lives_in_the_package():
    for name, fn in datacli.BUILDERS.items():
        assert fn.__module__.startswith("studykit."), f"{name}: {fn.__module__}"
    assert {b.builder for b in MANIFEST.blocks} <= set(datacli.BUILDERS)


def test_a_verify_entry_needs_no_command_and_derives_one(tmp_path):
    m = _load(tmp_path, GOOD.replace('command = "python -m studykit ddp"\n', '')
              + '[campaign."runs/a".generator]\nkind = "verify"\nrecords = ["data/m/x"]\nargs = ["--holdout", "network"]\n')
    e = m.entries["runs/a"]
    assert e.shell_command() == ("python -m studykit verify --records data/m/x --holdout network --out data/runs/a "
                                 "--overwrite-committed")
    assert e.outputs == tuple(f"runs/a/{n}" for n in datacli.VERIFY_OUTPUTS)
    assert datacli.verify_args(e) == ["--records", str(paths.ROOT / "data/m/x"), "--holdout", "network"]
    assert datacli.verify_args(e, records=False) == ["--holdout", "network"]
    with pytest.raises(ValueError, match="runs/old is not a verify entry"):
        datacli.verify_args(m.entries["runs/old"])


# ------------------------------------------------------------------ the committed manifest
def test_every_superseded_entry_leads_to_a_current_one():
    for e in MANIFEST.entries.values():
        seen, todo = set(), list(e.superseded_by)
        while todo:
            s = todo.pop()
            assert s not in seen, f"{e.path}: superseded_by loops through {s}"
            seen.add(s)
            todo += list(MANIFEST.entries[s].superseded_by)
        if e.superseded_by:
            assert any(MANIFEST.entries[s].status != "superseded" for s in seen), e.path


def test_every_measured_entry_says_what_produced_it():
    for e in MANIFEST.entries.values():
        assert e.question.strip() and e.shell_command().strip(), e.path
        if e.path.startswith(("measurements/", "benchmarks/")) and e.path != "measurements/synthetic":
            assert e.machine != "unknown" and e.commit != "unknown", e.path


def test_unlisted_finds_a_folder_without_an_entry(tmp_path):
    data = tmp_path / "data"
    for folder in ("runs/a", "runs/new/deep"):
        (data / folder).mkdir(parents=True)
        (data / folder / "r.jsonl").write_text("{}\n")
    (data / "runs" / "README.md").write_text("# an index folder needs no entry\n")
    m = _load(tmp_path, GOOD)
    assert datacli.unlisted(m, data) == ["runs/new/deep"]
    assert datacli.dangling(m, data) == ["campaign runs/old"]


def test_the_measurements_readme_lists_every_measurement_folder():
    text = (paths.MEASUREMENTS / "README.md").read_text(encoding="utf-8")
    block = datacli.marked(text, "folders")
    for p in MANIFEST.entries:
        if p.startswith("measurements/"):
            slash = "/" if (paths.DATA / p).is_dir() else ""  # a file campaign is listed as the file
            assert f"| `{p.removeprefix('measurements/')}{slash}` |" in block, p


# ------------------------------------------------------------------ comparing
@pytest.mark.parametrize("new, old, ok", [
    ("| a | 1.2 % |", "| a | 1.2 % |", True),
    ("| a | 1.3 % |", "| a | 1.2 % |", True),     # one unit in the last printed digit: a rounding flip
    ("| a | 1.4 % |", "| a | 1.2 % |", False),
    ("n = 13", "n = 12", False),                 # integers have no rounding flip
    ("x 1.000001e-03", "x 1.000000e-03", True),  # within RTOL
    ("| b | 1.2 % |", "| a | 1.2 % |", False),   # the text between numbers must be equal
    ("1.2\n3.4", "1.2", False),
])
def test_text_difference_tolerates_float_noise_only(new, old, ok):
    assert datacli.text_difference(new, old)[0] is ok


def test_compare_files_by_kind(tmp_path):
    old = pd.DataFrame({"config": ["a b", "c"], "ms": [10.0, 20.0], "inputs": ["gamma=1.000", "x"]})
    old.to_csv(tmp_path / "old.csv", index=False)
    old.to_csv(tmp_path / "same.csv", index=False)
    assert datacli.compare_files(tmp_path / "same.csv", tmp_path / "old.csv", "e", "f").verdict == "identical"
    old.assign(ms=[10.0000001, 20.0]).to_csv(tmp_path / "close.csv", index=False)
    o = datacli.compare_files(tmp_path / "close.csv", tmp_path / "old.csv", "e", "f")
    assert o.verdict == "within tolerance" and 0 < o.max_rel < datacli.RTOL
    old.assign(ms=[10.0, 21.0]).to_csv(tmp_path / "far.csv", index=False)
    o = datacli.compare_files(tmp_path / "far.csv", tmp_path / "old.csv", "e", "f")
    assert o.verdict == "differs" and "column ms, row 3" in o.detail
    old.assign(inputs=["gamma=1.500", "x"]).to_csv(tmp_path / "text.csv", index=False)
    assert datacli.compare_files(tmp_path / "text.csv", tmp_path / "old.csv", "e", "f").verdict == "differs"
    assert datacli.compare_files(tmp_path / "nope.csv", tmp_path / "old.csv", "e", "f").verdict == "missing"
    # JSON: numbers within tolerance, the ignored dotted keys left out
    a = {"gamma": {"value": 1.0450001}, "provenance": {"fitted_at": "today"}}
    b = {"gamma": {"value": 1.045}, "provenance": {"fitted_at": "yesterday"}}
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    assert datacli.compare_files(tmp_path / "a.json", tmp_path / "b.json", "e", "f").verdict == "differs"
    o = datacli.compare_files(tmp_path / "a.json", tmp_path / "b.json", "e", "f", ignore=["provenance.fitted_at"])
    assert o.verdict == "within tolerance"
    (tmp_path / "c.json").write_text(json.dumps({**a, "warnings": []}))
    o = datacli.compare_files(tmp_path / "c.json", tmp_path / "b.json", "e", "f", ignore=["provenance.fitted_at"])
    assert o.verdict == "differs" and "['warnings']" in o.detail


def test_compare_files_reads_a_gzipped_csv_as_its_csv(tmp_path):
    """verify's predictions.csv.gz: compared as the CSV it holds (the same tolerance), not as compressed bytes."""
    import gzip

    from studykit.perfmodel.verify.files import write_csv_gz

    old = pd.DataFrame({"config": ["a b", "c"], "ms": [10.0, 20.0], "inputs": ["gamma=1.000", "x"]})
    write_csv_gz(old, tmp_path / "old.csv.gz")
    text = gzip.decompress((tmp_path / "old.csv.gz").read_bytes())
    (tmp_path / "level1.csv.gz").write_bytes(gzip.compress(text, compresslevel=1, mtime=12345))  # other bytes
    assert (tmp_path / "level1.csv.gz").read_bytes() != (tmp_path / "old.csv.gz").read_bytes()
    o = datacli.compare_files(tmp_path / "level1.csv.gz", tmp_path / "old.csv.gz", "e", "f")
    assert o.verdict == "identical"
    write_csv_gz(old.assign(ms=[10.0000001, 20.0]), tmp_path / "close.csv.gz", float_format="%.10g")
    o = datacli.compare_files(tmp_path / "close.csv.gz", tmp_path / "old.csv.gz", "e", "f")
    assert o.verdict == "within tolerance" and 0 < o.max_rel < datacli.RTOL
    write_csv_gz(old.assign(ms=[10.0, 21.0]), tmp_path / "far.csv.gz")
    o = datacli.compare_files(tmp_path / "far.csv.gz", tmp_path / "old.csv.gz", "e", "f")
    assert o.verdict == "differs" and "column ms, row 3" in o.detail
    (tmp_path / "broken.csv.gz").write_bytes(b"not gzip")
    o = datacli.compare_files(tmp_path / "broken.csv.gz", tmp_path / "old.csv.gz", "e", "f")
    assert o.verdict == "differs" and "could not be read as CSV" in o.detail


def test_verify_entries_output_the_gzipped_predictions_and_none_is_left_plain():
    """Every verify entry's outputs name predictions.csv.gz, and no plain predictions.csv is left under data/."""
    entries = [e for e in MANIFEST.entries.values() if e.generator and e.generator["kind"] == "verify"]
    assert entries and all(f"{e.path}/predictions.csv.gz" in e.outputs for e in entries)
    assert not any(o.endswith("/predictions.csv") for e in entries for o in e.outputs)
    assert sorted(paths.DATA.rglob("predictions.csv")) == []


def test_report_counts_and_names_each_difference():
    outcomes = [datacli.Outcome("e", "e/a.csv", "identical"), datacli.Outcome("e", "e/b.csv", "within tolerance", 2e-6),
                datacli.Outcome("e", "e/c.csv", "differs", 0.1, "column ms, row 2: 1.0 vs 1.1 (committed)")]
    text = datacli.report(outcomes)
    assert text.splitlines()[0] == "1 identical, 1 within tolerance, 1 differs, 0 missing"
    assert "2e-06 relative (e/b.csv)" in text and "DIFFERS: e/c.csv (e): column ms, row 2" in text


# ------------------------------------------------------------------ blocks
def test_splice_replaces_only_the_marked_block():
    text = "intro\n<!-- t:begin -->\nold\n<!-- t:end -->\nrest\n"
    assert datacli.splice(text, "t", "new\n") == "intro\n<!-- t:begin -->\nnew\n<!-- t:end -->\nrest\n"
    assert datacli.marked(text, "t") == "old\n"
    with pytest.raises(ValueError, match=r"the markers of block 'u' are missing"):
        datacli.splice(text, "u", "x")


def test_every_block_names_a_readme_that_has_its_markers():
    for b in MANIFEST.blocks:
        datacli.marked((paths.DATA / b.file).read_text(encoding="utf-8"), b.marker)


# ------------------------------------------------------------------ the command
def test_select_names_what_matched_and_refuses_what_did_not():
    entries, blocks = datacli.select(MANIFEST, ["verification/README.md"])
    assert entries == [] and [b.marker for b in blocks] == ["summary", "scaling"]
    entries, blocks = datacli.select(MANIFEST, ["verification/scaling*"])
    assert [e.path for e in entries] == ["verification/scaling", "verification/scaling/min"] and blocks == []
    with pytest.raises(ValueError, match=r"measurements/gpu is not generated \(no generator\)"):
        datacli.select(MANIFEST, ["measurements/gpu"])
    with pytest.raises(ValueError, match=r"nothing generated matches 'verification/scalling'.*verification/scaling"):
        datacli.select(MANIFEST, ["verification/scalling"])


def test_list_and_show(capsys):
    assert cli.main(["data", "list", "--status", "superseded"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines()[2:] if line.startswith("| `")]
    assert rows and all("| superseded by " in r for r in rows)
    assert len(rows) == sum(e.status == "superseded" for e in MANIFEST.entries.values())
    assert cli.main(["data", "show", "verification/scaling"]) == 0
    assert "python -m studykit verify --records data/measurements/gpu4 --holdout world_size" in capsys.readouterr().out
    assert cli.main(["data", "show", "verification/scalling"]) == 2
    assert "no entry matches 'verification/scalling'; closest: ['verification/scaling'" in capsys.readouterr().err


def test_regen_refuses_committed_data_without_the_flag_and_writes_elsewhere(tmp_path, capsys):
    demo = paths.MEASUREMENTS / "synthetic" / "demo.jsonl"
    before = demo.stat().st_mtime_ns
    assert cli.main(["data", "regen", "--only", "measurements/synthetic", "--quiet"]) == 2
    assert paths.OVERWRITE_FLAG in capsys.readouterr().err and demo.stat().st_mtime_ns == before
    assert cli.main(["data", "regen", "--only", "measurements/synthetic", "verification/README.md", "--out", str(tmp_path),
                     "--quiet"]) == 0
    # written there, the same as the committed files up to float rounding (numpy's sums move with its version)
    for rel in ("measurements/synthetic/demo.jsonl", "verification/README.md"):
        out = datacli.compare_files(tmp_path / rel, paths.DATA / rel, "regen", rel)
        assert out.verdict in ("identical", "within tolerance"), out


def test_check_fails_naming_a_file_that_differs(tmp_path, monkeypatch, capsys):
    """A committed file changed by hand: data regen --check exits 1 and names it."""
    import shutil

    fake = tmp_path / "data"
    shutil.copytree(paths.MEASUREMENTS / "synthetic", fake / "measurements" / "synthetic")
    recs = [json.loads(x) for x in (fake / "measurements" / "synthetic" / "demo.jsonl").read_text().splitlines()]
    recs[0]["ms_median"] *= 1.01
    (fake / "measurements" / "synthetic" / "demo.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    monkeypatch.setattr(paths, "DATA", fake)
    assert cli.main(["data", "regen", "--check", "--only", "measurements/synthetic", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS: measurements/synthetic/demo.jsonl" in out and "ms_median" in out


# ------------------------------------------------------------------ data/archive/
#: superseded entries left outside data/archive/ because something current still reads them (entry -> the reader)
NOT_ARCHIVED = {
    "verification/bandwidth/h200_p2_all": "notebooks/bandwidth.py (its predictions.csv.gz, the implied encode/decode)",
    "verification/bandwidth/h200_p4": "notebooks/bandwidth.py (predictions_of: the model lines of campaign h200_p4)",
    "training/tta_gpu2/tta_10g": "notebooks/time_to_accuracy.py (gpu_runs)",
    "training/tta_gpu2/tta_2.5g": "notebooks/time_to_accuracy.py (gpu_runs)",
}


def test_superseded_and_archived_entries_live_under_data_archive_and_current_ones_do_not():
    for p, e in MANIFEST.entries.items():
        if e.status == "current":
            assert not datacli.archived(e), f"{p} is current but lies under data/{datacli.ARCHIVE}"
        elif p not in NOT_ARCHIVED:
            assert datacli.archived(e), f"{p} is {e.status}: move it to data/{datacli.ARCHIVE}{p}"
    assert all(MANIFEST.entries[p].status != "current" for p in NOT_ARCHIVED)  # an exception that no longer applies


def test_no_current_entry_reads_an_archived_folder():
    for e in MANIFEST.entries.values():
        g = e.generator or {}
        inputs = [*g.get("records", ()), *g.get("args", ()), *g.get("argv", ())]
        if e.status == "current":
            assert not [a for a in inputs if f"/{datacli.ARCHIVE}" in f"/{a}"], e.path


def test_list_shows_where_each_entry_lies(capsys):
    assert cli.main(["data", "list"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines()[2:] if line.startswith("| `")]
    assert len(rows) == len(MANIFEST.entries)
    for row in rows:
        e = MANIFEST.entries[row.split("`")[1]]
        assert (paths.DATA / e.path).exists(), e.path
        where = row.split(" | ")[1]
        if datacli.archived(e):
            assert where.endswith("; in data/archive/"), row
        elif e.status != "current":
            assert where.endswith("; not in data/archive/"), row
        else:
            assert where == "current", row


def test_table_says_whether_a_superseded_entry_is_archived(tmp_path):
    m = _load(tmp_path, GOOD + "\n" + GOOD.split("\n\n")[1].replace('"runs/old"', '"archive/runs/older"'))
    rows = datacli.table(m).splitlines()[2:]
    assert rows[0].startswith("| `runs/a` | current |")
    assert rows[1].startswith("| `runs/old` | superseded by runs/a; not in data/archive/ |")
    assert rows[2].startswith("| `archive/runs/older` | superseded by runs/a; in data/archive/ |")
