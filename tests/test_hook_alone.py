"""benchmarks/hook_alone.py: the p = 1 hooks' table from ddp records (hand-computed ratios), its errors, and the
reading of data/measurements/hook_runner/h200_p1/README.md against its records."""
import importlib.util
import json
import re
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("hook_alone_bench", ROOT / "benchmarks" / "hook_alone.py")
hook_alone = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hook_alone)
P1 = ROOT / "data" / "measurements" / "hook_runner" / "h200_p1"


def _rec(mode, ms, compressor=None, params=None, world_size=1, model="resnet50", runner="graph"):
    return {"kind": "ddp", "status": "ok", "model": model, "mode": mode, "compressor": compressor,
            "params": params or {}, "ms_median": ms, "world_size": world_size, "hook_overlap": mode == "hook" or None,
            "hook_runner": runner if mode == "hook" else None,
            "gpu": "test GPU", "git_commit": "abc", "n_iter": 30, "n_warmup": 10, "schema": 1}


ROUND = [_rec("syncsgd", 30.0), _rec("post", 32.0, "powersgd", {"rank": 4}), _rec("hook", 33.6, "powersgd", {"rank": 4}),
         _rec("builtin", 48.0, "torch_powersgd", {"rank": 4, "start_iter": 2}), _rec("hook", 31.0, "topk", {"ratio": 0.01})]


def test_one_row_per_hook_with_post_pytorch_and_syncsgd():
    rows = {r["compressor"]: r for r in hook_alone.rows(ROUND)}
    assert rows["powersgd rank=4"] == {"model": "resnet50", "compressor": "powersgd rank=4", "hook": 33.6, "n": 30,
                                       "post": 32.0, "syncsgd": 30.0, "pytorch": 48.0}
    assert rows["topk ratio=0.01"]["post"] is None and rows["topk ratio=0.01"]["pytorch"] is None


def test_the_thread_runners_hook_is_a_row_of_its_own_beside_the_graph_runners(tmp_path):
    """A round that ran both runners (``ddp --hook-runner thread graph``) keeps both hooks, each against the same
    post and PyTorch's hook of its codec, the thread runner's marked; the header says so."""
    recs = [_rec("post", 34.0, "bf16"), _rec("hook", 34.7, "bf16", runner=None), _rec("hook", 33.9, "bf16"),
            _rec("builtin", 35.0, "torch_bf16")]
    rows = {r["compressor"]: r for r in hook_alone.rows(recs)}
    assert set(rows) == {"bf16", "bf16 (thread runner)"}
    assert rows["bf16 (thread runner)"]["hook"] == 34.7 and rows["bf16"]["hook"] == 33.9
    assert rows["bf16"]["post"] == rows["bf16 (thread runner)"]["post"] == 34.0 and rows["bf16"]["pytorch"] == 35.0
    (tmp_path / "ddp_r1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    text = hook_alone.report(tmp_path, verbose=False)
    assert "Hooks: the graph runner, and the thread runner where marked, DDP built" in text
    assert "Hooks: the graph runner, DDP built" in hook_alone.report([P1 / "ddp_r1.jsonl"], verbose=False)


def test_two_rounds_side_by_side_with_hand_computed_ratios(tmp_path):
    second = [dict(r, ms_median=r["ms_median"] * (1.05 if r["mode"] == "post" else 1.0)) for r in ROUND]
    for i, recs in enumerate((ROUND, second), 1):
        (tmp_path / f"ddp_r{i}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    text = hook_alone.report(tmp_path, verbose=False)
    line = next(x for x in text.splitlines() if x.startswith("| resnet50 | powersgd"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # hook / post: 33.6 / 32 = 1.050, then 33.6 / 33.6 = 1.000; / PyTorch's 33.6 / 48 = 0.700; / syncSGD 1.120
    assert cells[2:] == ["33.60 / 33.60", "32.00 / 33.60", "48.00 / 48.00", "30.00 / 30.00", "1.050 / 1.000",
                         "0.700 / 0.700", "1.120 / 1.120"]
    assert "- hook / post: 1.000 (resnet50, powersgd rank=4, r2) to 1.050 (resnet50, powersgd rank=4, r1) over 2 pairs." \
        in text


def test_rounds_are_labelled_by_their_file_numbers(tmp_path):
    """A campaign that numbers its rounds on from an earlier one (ddp_r10.jsonl, ddp_r11.jsonl) is labelled so, in
    round order (10 before 9 would be the names' order)."""
    second = [dict(r, ms_median=r["ms_median"] * (1.05 if r["mode"] == "post" else 1.0)) for r in ROUND]
    for n, recs in ((9, ROUND), (10, second)):
        (tmp_path / f"ddp_r{n}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert [f.name for f in hook_alone.round_files(tmp_path)] == ["ddp_r9.jsonl", "ddp_r10.jsonl"]
    text = hook_alone.report(tmp_path, verbose=False)
    assert "| hook ms r9 / r10 |" in text and "r1 /" not in text
    assert "- hook / post: 1.000 (resnet50, powersgd rank=4, r10) to 1.050 (resnet50, powersgd rank=4, r9)" in text


def test_each_round_is_named_with_its_first_record_and_its_order(tmp_path):
    """The header says when each round's first record was written and whether its hooks came after every post or
    right after their own (``ddp --pair-hook-post``), read from the order of the records in the file."""
    stamped = [dict(r, timestamp=f"2026-12-03T03:{10 + i:02d}:05+00:00") for i, r in enumerate(ROUND)]
    # ROUND: syncSGD, PowerSGD's post, its hook, PyTorch's hook, TopK's hook: no post after the first hook
    assert hook_alone._round_note(Path("ddp_r1.jsonl"), stamped) == \
        "ddp_r1.jsonl: first record 2026-12-03 03:10 UTC, every post, then every hook"
    paired = stamped + [dict(_rec("post", 31.5, "topk", {"ratio": 0.01}), timestamp="2026-12-03T03:20:00+00:00")]
    assert hook_alone._round_note(Path("ddp_r2.jsonl"), paired) == \
        "ddp_r2.jsonl: first record 2026-12-03 03:10 UTC, each hook right after its post"
    assert hook_alone._round_note(Path("ddp_r3.jsonl"), ROUND) == "ddp_r3.jsonl: every post, then every hook"
    quart = [dict(r, ms_q25=0.99 * r["ms_median"], ms_q75=1.01 * r["ms_median"], timed_with=["x"]) for r in ROUND]
    assert hook_alone._round_note(Path("ddp_r4.jsonl"), quart) == (
        "ddp_r4.jsonl: each compressor's post and hooks timed iteration by iteration, iterations' spread 2.0 %")
    for i, recs in enumerate((stamped, paired), 1):
        (tmp_path / f"ddp_r{i}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert ("2 rounds (ddp_r1.jsonl: first record 2026-12-03 03:10 UTC, every post, then every hook; ddp_r2.jsonl: "
            "first record 2026-12-03 03:10 UTC, each hook right after its post)") in hook_alone.report(tmp_path, False)


def test_records_of_several_gpus_and_a_folder_without_rounds_are_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"world size \[2\].*hook_runner.py"):
        hook_alone.rows(ROUND + [_rec("post", 40.0, world_size=2)])
    with pytest.raises(SystemExit):
        hook_alone.main([str(tmp_path)])
    assert "no ddp_r1.jsonl" in capsys.readouterr().err


def test_the_p1_readme_reads_its_records():
    """Every number of h200_p1/README.md's findings, from the two rounds' records."""
    text = " ".join((P1 / "README.md").read_text(encoding="utf-8").split())
    rounds = [{(r["model"], r["compressor"]): r for r in hook_alone.rows(
        hook_alone.load_records(P1 / f"ddp_r{i}.jsonl", quiet=True))} for i in (1, 2)]
    keys = sorted(rounds[0])

    def ratios(ref, comps=None):
        return [x[k]["hook"] / x[k][ref] for x in rounds for k in keys
                if x[k][ref] and (comps is None or k[1].split()[0] in comps)]

    def span(xs):
        return f"{min(xs):.3f}-{max(xs):.3f}x"

    post = ratios("post")
    assert len(post) == 16 and f"within {span(post)} of post" in text
    assert f"at most {max(post) - 1:.1%}".replace("%", " %") in text
    assert f"none`, fp16 and PowerSGD are at {span(ratios('post', ('none', 'fp16', 'powersgd')))}" in text
    assert f"({span(ratios('post', ('topk',)))})" in text
    worst = max((x[k]["hook"] / x[k]["post"], k, i) for i, x in enumerate(rounds, 1) for k in keys)
    assert worst[1:] == (("bert_base", "none"), 2) and f"{worst[0]:.3f}x (BERT-base, `none`, round 2)" in text
    bn = [x[("bert_base", "none")]["post"] for x in rounds]
    assert f"({bn[1]:.2f} against {bn[0]:.2f} ms)" in text
    moves = {k: rounds[1][k]["hook"] / rounds[1][k]["post"] / (rounds[0][k]["hook"] / rounds[0][k]["post"]) - 1
             for k in keys}
    k = max(moves, key=lambda k: abs(moves[k]))
    assert k == ("resnet50", "powersgd rank=4") and f"up to {abs(moves[k]):.1%}".replace("%", " %") in text
    r = [x[k]["hook"] / x[k]["post"] for x in rounds]
    assert f"(ResNet-50's PowerSGD: {r[0]:.3f} and {r[1]:.3f})" in text
    assert f"post took {rounds[0][k]['post']:.2f} and {rounds[1][k]['post']:.2f} ms" in text
    assert f"hook takes {span(ratios('pytorch', ('powersgd',)))[:-1]}x PyTorch's PowerSGD hook" in text
    assert f"fp16 hook {span(ratios('pytorch', ('fp16',)))[:-1]}x PyTorch's fp16 hook" in text
    assert f"the hooks take {span(ratios('syncsgd'))}" in text
    b = [x[("bert_base", "powersgd rank=4")]["hook"] / x[("bert_base", "powersgd rank=4")]["syncsgd"] for x in rounds]
    assert f"most on BERT-base ({min(b):.3f}-{max(b):.3f}x)" in text and max(b) == max(ratios("syncsgd"))
    assert re.search(r"up to 1\.23x on BERT-base at p = 4", text)


def test_the_p1_hook_alone_table_is_the_script_output():
    assert (P1 / "hook_alone.md").read_text(encoding="utf-8") == hook_alone.report(P1, verbose=False)


def test_findings_read_the_p1_campaign_as_its_readme_does():
    findings = " ".join((ROOT / "docs" / "findings.md").read_text(encoding="utf-8").split())
    readme = " ".join((P1 / "README.md").read_text(encoding="utf-8").split())
    span = re.search(r"within (\d\.\d{3}-\d\.\d{3})x of post", readme).group(1)
    move = re.search(r"by up to (\d\.\d) %", readme).group(1)
    assert f"level with post: {span}x over two rounds, whose ratios differ by up to {move} %" in findings
    b = " ".join((P1.parent / "h200_p1b" / "README.md").read_text(encoding="utf-8").split())
    assert "no hook of any of the four models took more than 1.02x post in both rounds" in b
    assert "(`h200_p1b/`): no hook of the four models took more than 1.02x post in both rounds" in findings


def test_the_p1b_readme_reads_its_records():
    """hook_runner/h200_p1b/README.md: ResNet-101 and GPT-2 small at p = 1, from the two rounds' records."""
    p1b = P1.parent / "h200_p1b"
    text = " ".join((p1b / "README.md").read_text(encoding="utf-8").split())
    recs = [hook_alone.load_records(p1b / f"ddp_r{i}.jsonl", quiet=True) for i in (1, 2)]
    rounds = [{(r["model"], r["compressor"]): r for r in hook_alone.rows(x)} for x in recs]

    def post(model, comp, i):
        x = rounds[i][(model, comp)]
        return x["hook"] / x["post"]

    gpt = [post("gpt2_small", c, i) for c in ("none", "powersgd rank=4") for i in (0, 1)]
    assert f"Its hooks take {min(gpt):.3f}-{max(gpt):.3f}x post" in text
    assert all(abs(post("gpt2_small", c, 1) / post("gpt2_small", c, 0) - 1) < 0.002 for c in ("none", "powersgd rank=4"))
    sync = [next(r for r in x if r["model"] == "resnet101" and r["mode"] == "syncsgd") for x in recs]
    assert (f"syncSGD took {sync[0]['ms_median']:.2f} ms there against {sync[1]['ms_median']:.2f} ms in the second, "
            f"with an interquartile range of {sync[0]['ms_q25']:.2f}-{sync[0]['ms_q75']:.2f} ms against "
            f"{sync[1]['ms_q25']:.2f}-{sync[1]['ms_q75']:.2f} ms") in text
    ps, no = [post("resnet101", "powersgd rank=4", i) for i in (0, 1)], [post("resnet101", "none", i) for i in (0, 1)]
    assert (f"PowerSGD's hook took {ps[0]:.3f}x post; in the second, {ps[1]:.3f}x, and `none`'s {no[0]:.3f}x and "
            f"{no[1]:.3f}x") in text
    move = max(abs(x[1] / x[0] - 1) for x in (ps, no))
    assert f"moved ResNet-101's ratios by up to {move:.1%}".replace("%", " %") in text
    pt = [x[k]["hook"] / x[k]["pytorch"] for x in rounds for k in x if x[k]["pytorch"]]
    gp = [x[("gpt2_small", "powersgd rank=4")]["hook"] / x[("gpt2_small", "powersgd rank=4")]["pytorch"] for x in rounds]
    assert f"took {min(pt):.3f}-{max(pt):.3f}x PyTorch's PowerSGD hook ({min(gp):.3f}-{max(gp):.3f}x on GPT-2" in text
    both = [k for k in rounds[0] if all(x[k]["post"] and x[k]["hook"] > 1.02 * x[k]["post"] for x in rounds)]
    p1 = [{(r["model"], r["compressor"]): r for r in hook_alone.rows(hook_alone.load_records(P1 / f"ddp_r{i}.jsonl",
                                                                                              quiet=True))} for i in (1, 2)]
    both += [k for k in p1[0] if all(x[k]["post"] and x[k]["hook"] > 1.02 * x[k]["post"] for x in p1)]
    assert {m for m, _ in list(rounds[0]) + list(p1[0])} == {"resnet50", "bert_base", "resnet101", "gpt2_small"}
    assert both == [] and "no hook of any of the four models took more than 1.02x post in both rounds" in text


def test_the_p1b_hook_alone_table_is_the_script_output():
    p1b = P1.parent / "h200_p1b"
    assert (p1b / "hook_alone.md").read_text(encoding="utf-8") == hook_alone.report(p1b, verbose=False)


def _spread(recs):
    """A round's spread as hook_alone.py's header gives it: the median of (q75 - q25) / median over its records."""
    return statistics.median((r["ms_q75"] - r["ms_q25"]) / r["ms_median"] for r in recs if r["kind"] == "ddp")


def test_the_p1c_readme_reads_its_records():
    """hook_runner/h200_p1c/README.md: the other compressors at p = 1, from the rounds' records."""
    p1c = P1.parent / "h200_p1c"
    text = " ".join((p1c / "README.md").read_text(encoding="utf-8").split())
    recs = [hook_alone.load_records(f, quiet=True) for f in hook_alone.round_files(p1c)]
    assert len(recs) == 9
    rounds = [{(r["model"], r["compressor"]): r for r in hook_alone.rows(x)} for x in recs]
    keys = sorted(rounds[0])
    assert all(sorted(x) == keys for x in rounds) and len(keys) == 26
    assert {c for _, c in keys} & {"none", "fp16", "atomo"} == set()
    hooks = [r for x in recs for r in x if r["mode"] == "hook"]
    assert len(hooks) == 234 and all(r["status"] == "ok" and r["hook_runner"] == "graph" for r in hooks)
    assert "All 234 hook configurations (26 per round) were timed" in text
    # the order of each round, as the README and hook_alone.md's header name it
    order = [hook_alone._round_note(f, x) for f, x in zip(hook_alone.round_files(p1c), recs)]
    kinds = ["every post, then every hook"] * 3 + ["each hook right after its post"] * 2 + [
        "each compressor's post and hooks timed iteration by iteration"] * 3 + ["each hook right after its post"]
    assert all(f", {k}, " in o for o, k in zip(order, kinds))
    commits = [sorted({r["git_commit"] for r in x}) for x in recs]
    assert commits == [["4aed4bf"]] * 3 + [["4196b31"]] * 2 + [["9bb2557"]] * 2 + [["1a9eee4"]] * 2
    assert ("Rounds 1-3 (kit commit `4aed4bf`) timed every post before every hook. Rounds 4, 5 and 9 timed each "
            "compressor's hooks right after its post (`--pair-hook-post`; commits `4196b31` and `1a9eee4`). Rounds 6-8 "
            "built each compressor's post and hook side by side") in text
    ratio = {k: [x[k]["hook"] / x[k]["post"] for x in rounds] for k in keys}
    spread = [_spread(x) for x in recs]
    # the quiet rounds 8 and 9
    assert max(spread[7], spread[8]) < 0.0025 and "Rounds 8 and 9 ran with a spread of 0.2 %" in text
    q = [[v[i] for v in ratio.values()] for i in (7, 8)]
    assert [(f"{min(x):.3f}", f"{max(x):.3f}") for x in q] == [("0.949", "1.029"), ("0.951", "1.029")]
    assert "In both, hook / post is 0.949-1.029x, and 25 of the 26 hooks are at or below 1.02x" in text
    assert [sorted(k for k, v in ratio.items() if v[i] > 1.02) for i in (7, 8)] == [[("bert_base", "bf16")]] * 2
    agree = [abs(v[7] / v[8] - 1) for v in ratio.values()]
    assert max(agree) < 0.005 and round(statistics.median(agree), 3) == 0.001
    assert "The two rounds agree to 0.5 % on every pair (median 0.1 %)" in text
    bb = rounds[7][("bert_base", "bf16")]
    assert f"({bb['hook']:.2f} against {bb['post']:.2f} ms in round 8)" in text
    assert "The one above is BERT-base's bf16 hook, at 1.029x in both rounds" in text
    # round 1
    first = [v[0] for v in ratio.values()]
    assert round(spread[0], 3) == 0.004 and "In round 1 (spread 0.4 %)" in text
    assert f"every hook is at {min(first):.3f}-{max(first):.3f}x post." in text
    above = sorted((k, v[0]) for k, v in ratio.items() if v[0] > 1.02)
    assert [(m, c) for (m, c), _ in above] == [("bert_base", "dgc"), ("resnet50", "thc")]
    assert f"BERT-base's DGC ({above[0][1]:.3f}x) and ResNet-50's THC ({above[1][1]:.3f}x)" in text
    # the noisy rounds 3-7
    noisy = spread[2:7]
    assert f"spreads of {100 * min(noisy):.1f}-{100 * max(noisy):.1f} %" in text and min(noisy) > 5 * max(spread[7:])
    span = [v[i] for v in ratio.values() for i in range(2, 7)]
    assert f"hook / post spans {min(span):.3f}-{max(span):.3f}x. Two rounds" in text

    def disagree(a, b):
        return [abs(v[a] / v[b] - 1) for v in ratio.values()]

    assert (f"disagree by a median of {100 * statistics.median(disagree(3, 4)):.1f} % (rounds 4 and 5, one "
            f"configuration after the other) and {100 * statistics.median(disagree(5, 6)):.1f} % (rounds 6 and 7, "
            "iteration by iteration), and by up to 25 % on one pair") in text
    assert 0.245 < max(disagree(3, 4) + disagree(5, 6)) < 0.25
    wide = [[sum((r["ms_q75"] - r["ms_q25"]) > 0.02 * r["ms_median"] for r in x if r["mode"] == m)
             for m in ("hook", "post")] for x in recs]
    assert (f"In round 1, {wide[0][0]} of the 26 hooks have an interquartile range wider than 2 % of their median; "
            f"in round 2, {wide[1][0]}; in round 3, {wide[2][0]} (and {wide[2][1]} of the 26 posts)") in text

    def one(i, mode):
        return next(r for r in recs[i] if (r["model"], r["compressor"], r["mode"]) == ("resnet50", "bf16", mode))

    hk, po = [one(i, "hook") for i in range(3)], [one(i, "post") for i in range(3)]
    assert (f"ResNet-50's bf16 hook, for one, took {hk[0]['ms_median']:.2f}, {hk[1]['ms_median']:.2f} and "
            f"{hk[2]['ms_median']:.2f} ms in the three rounds (interquartile range {hk[2]['ms_q25']:.2f}-"
            f"{hk[2]['ms_q75']:.2f} ms in the third), while its post took {po[0]['ms_median']:.2f}, "
            f"{po[1]['ms_median']:.2f} and {po[2]['ms_median']:.2f} ms") in text
    three = [r for v in ratio.values() for r in v[:3]]
    assert f"Over the three rounds hook / post spans {min(three):.3f}-{max(three):.3f}x" in text
    # the reading
    quiet = [v[i] for v in ratio.values() for i in (0, 7, 8)]
    assert max(quiet) < 1.031 and sum(max(v[7], v[8]) > 1.02 for v in ratio.values()) == 1
    assert max(spread[i] for i in (0, 7, 8)) < 0.0045 < min(spread[i] for i in range(1, 7))
    assert ("is 0.4 % or less (rounds 1, 8 and 9), every one of these hooks is level with post to within 3 %; in "
            "rounds 8 and 9 all but one are within 2 %") in text
    findings = " ".join((ROOT / "docs" / "findings.md").read_text(encoding="utf-8").split())
    assert ("(`h200_p1c/`): on a quiet machine every hook but one is at or below 1.02x post, whether hook and post "
            "are timed one after the other or iteration by iteration") in findings


def test_the_16bit_check_reads_its_records():
    """hook_runner/h200_p1_16bit/README.md: the fp16 and bf16 hooks cost the same over post (and the table is the
    script's output)."""
    folder = P1.parent / "h200_p1_16bit"
    assert (folder / "hook_alone.md").read_text(encoding="utf-8") == hook_alone.report(folder, verbose=False)
    text = " ".join((folder / "README.md").read_text(encoding="utf-8").split())
    recs = [hook_alone.load_records(f, quiet=True) for f in hook_alone.round_files(folder)]
    rounds = [{(r["model"], r["compressor"]): r["hook"] / r["post"] for r in hook_alone.rows(x)} for x in recs]
    assert len(rounds) == 2 and all(sorted(x) == sorted(rounds[0]) and len(x) == 4 for x in rounds)
    for model, lo, hi, label in (("bert_base", 1.025, 1.028, "BERT-base"), ("resnet50", 1.003, 1.005, "ResNet-50")):
        vals = [x[(model, c)] for x in rounds for c in ("bf16", "fp16")]
        assert (f"{min(vals):.3f}", f"{max(vals):.3f}") == (f"{lo:.3f}", f"{hi:.3f}")
    assert ("On BERT-base both are at 1.025-1.028x post in both rounds; on ResNet-50 both are at 1.003-1.005x"
            in text)
    assert all(r.get("timed_with") for x in recs for r in x if r["kind"] == "ddp")
    assert max(_spread(x) for x in recs) < 0.005 and "a few tenths of a percent" in text
    buckets = [r for r in hook_alone.load_records(P1.parent / "h200_p2_model" / "ddp.jsonl", quiet=True)
               if r["kind"] == "buckets"]
    counts = {r["model"]: len(r["bucket_index"]) for r in buckets}
    assert counts == {"bert_base": 14, "resnet50": 5}
    assert "BERT-base's DDP has 14 buckets against ResNet-50's 5" in text
    findings = " ".join((ROOT / "docs" / "findings.md").read_text(encoding="utf-8").split())
    assert "its fp16 and bf16 hooks cost the same (1.025-1.028x, `h200_p1_16bit/`)" in findings
    assert ("captured they were faster than chained in 34 of 36 side-by-side pairs, by a median of 5.1 %, and within "
            "0.964-1.026x PyTorch's hook (`h200_p1_one_round/`)") in findings  # its numbers: the next test
    assert "(spread 3.1-9.3 % in all but one)" in findings


def test_the_p1c_hook_alone_table_is_the_script_output():
    p1c = P1.parent / "h200_p1c"
    assert (p1c / "hook_alone.md").read_text(encoding="utf-8") == hook_alone.report(p1c, verbose=False)


def test_the_one_round_check_reads_its_records():
    """hook_runner/h200_p1_one_round/README.md: the 16-bit hooks captured as graphs against the same hooks chained
    on the host (the thread runner), post and PyTorch's hook, pair by pair in each round (and the table is the
    script's output)."""
    folder = P1.parent / "h200_p1_one_round"
    assert (folder / "hook_alone.md").read_text(encoding="utf-8") == hook_alone.report(folder, verbose=False)
    text = " ".join((folder / "README.md").read_text(encoding="utf-8").split())
    recs = [hook_alone.load_records(f, quiet=True) for f in hook_alone.round_files(folder)]
    rounds = [{(r["model"], r["compressor"]): r for r in hook_alone.rows(x)} for x in recs]
    pairs = [(m, c) for m in ("bert_base", "resnet50") for c in ("bf16", "fp16")]
    assert len(rounds) == 9 and all(sorted(x) == sorted(pairs + [(m, f"{c} (thread runner)") for m, c in pairs])
                                    for x in rounds)
    assert all(r.get("timed_with") for x in recs for r in x if r["kind"] == "ddp" and r["mode"] in ("hook", "post"))
    graph_over_chain = [x[p]["hook"] / x[(p[0], f"{p[1]} (thread runner)")]["hook"] for x in rounds for p in pairs]
    assert (len(graph_over_chain), sum(v < 1 for v in graph_over_chain)) == (36, 34)
    assert f"{100 * (1 - statistics.median(graph_over_chain)):.1f}" == "5.1"
    assert "The captured hook was faster in 34 of them, by a median of 5.1 %" in text
    bert_bf16 = [x[("bert_base", "bf16")]["hook"] / x[("bert_base", "bf16 (thread runner)")]["hook"] for x in rounds]
    assert (f"{min(bert_bf16):.3f}", f"{max(bert_bf16):.3f}") == ("0.863", "0.968")
    assert "On BERT-base bf16 it took 0.863-0.968x the chained hook's time" in text
    to_pt = [x[p]["hook"] / x[p]["pytorch"] for x in rounds for p in pairs]
    chained_pt = [x[(m, f"{c} (thread runner)")]["hook"] / x[(m, c)]["pytorch"] for x in rounds for m, c in pairs]
    assert (f"{min(to_pt):.3f}", f"{max(to_pt):.3f}", f"{max(chained_pt):.3f}") == ("0.964", "1.026", "1.169")
    assert ("Every captured hook took 0.964-1.026x PyTorch's hook of the same codec. The chained hooks took up to "
            "1.169x") in text
    post = {p: [x[p]["hook"] / x[p]["post"] for x in rounds] for p in pairs}
    resnet = post[("resnet50", "bf16")] + post[("resnet50", "fp16")]
    assert (f"{min(resnet):.3f}", f"{max(resnet):.3f}", f"{statistics.median(resnet):.3f}") == \
        ("0.990", "1.026", "1.008")
    assert "ResNet-50's captured hooks took 0.990-1.026x post (median 1.008x)" in text
    for c, lo, hi, med, said in (("fp16", "0.988", "1.133", "1.014", "BERT-base's fp16 took"),
                                 ("bf16", "0.987", "1.090", "1.040", "its bf16")):
        v = post[("bert_base", c)]
        assert (f"{min(v):.3f}", f"{max(v):.3f}", f"{statistics.median(v):.3f}") == (lo, hi, med)
        assert f"{said} {lo}-{hi}x (median {med}x)" in text
    spreads = [_spread(x) for x in recs]
    quiet = [i + 1 for i, v in enumerate(spreads) if v < 0.01]
    others = [v for v in spreads if v >= 0.01]
    assert quiet == [8] and (f"{100 * min(others):.1f}", f"{100 * max(others):.1f}", f"{100 * spreads[7]:.1f}") == \
        ("3.1", "9.3", "0.6")
    assert "was 3.1-9.3 % in all rounds but round 8 (0.6 %), against 0.2 % in the quiet rounds" in text
    assert (f"{post[('bert_base', 'bf16')][7]:.3f}", f"{post[('bert_base', 'fp16')][7]:.3f}") == ("0.987", "1.023")
    assert "In round 8, the one quiet round, BERT-base's bf16 hook took 0.987x post and its fp16 hook 1.023x" in text


def test_the_gated_check_reads_its_records():
    """hook_runner/h200_p1_gated/README.md: the 16-bit hooks again, read apart where a host probe let the round
    through (10, 16, 17) and where it did not (11-15); the table is the script's output (its probes are read in
    test_noise_probe.py)."""
    folder = P1.parent / "h200_p1_gated"
    assert (folder / "hook_alone.md").read_text(encoding="utf-8") == hook_alone.report(folder, verbose=False)
    text = " ".join((folder / "README.md").read_text(encoding="utf-8").split())
    files = hook_alone.round_files(folder)
    assert [hook_alone.round_number(f) for f in files] == list(range(10, 18))
    recs = {hook_alone.round_number(f): hook_alone.load_records(f, quiet=True) for f in files}
    rows = {n: {(r["model"], r["compressor"]): r for r in hook_alone.rows(x)} for n, x in recs.items()}
    gated, other = (10, 16, 17), (11, 12, 13, 14, 15)
    spreads = {n: _spread(x) for n, x in recs.items()}
    for ns, lo, hi in ((gated, "1.3", "2.1"), (other, "2.3", "6.7")):
        assert (f"{100 * min(spreads[n] for n in ns):.1f}", f"{100 * max(spreads[n] for n in ns):.1f}") == (lo, hi)
    assert "Their iterations' spread (the interquartile range over the median) was 1.3-2.1 %" in text
    assert "Their spread was 2.3-6.7 %" in text

    def post(ns, model, thread=False):
        return [rows[n][(model, c + (" (thread runner)" if thread else ""))]["hook"] / rows[n][(model, c)]["post"]
                for n in ns for c in ("bf16", "fp16")]

    def span(vals):
        return f"{min(vals):.3f}-{max(vals):.3f}"

    assert (span(post(gated, "bert_base")), span(post(gated, "bert_base", True))) == ("0.986-0.993", "1.008-1.079")
    assert ("In the three gated rounds they took 0.986-0.993x post (bf16 and fp16 alike). The chained hooks took "
            "1.008-1.079x post in the same rounds") in text
    assert (f"{max(post(other, 'bert_base')):.3f}", f"{max(post(other, 'bert_base', True)):.3f}") == ("1.204", "1.405")
    assert "the captured hooks went up to 1.204x post and the chained ones to 1.405x" in text
    assert (span(post(gated, "resnet50")), span(post(gated, "resnet50", True))) == ("1.009-1.037", "0.994-1.081")
    assert "the captured hooks took 1.009-1.037x post and the chained ones 0.994-1.081x" in text

    def g_over_t(ns, models):
        return [rows[n][(m, c)]["hook"] / rows[n][(m, f"{c} (thread runner)")]["hook"]
                for n in ns for m in models for c in ("bf16", "fp16")]

    resnet = g_over_t(gated, ("resnet50",))
    near = [v for v in resnet if 1.014 <= round(v, 3) <= 1.019]
    assert (len(resnet), len(near)) == (6, 5)
    assert "Captured over chained was 1.014-1.019x in 5 of the 6 gated pairs" in text
    every = g_over_t(rows, ("bert_base", "resnet50"))
    assert (len(every), sum(v < 1 for v in every), f"{100 * (1 - statistics.median(every)):.1f}") == (32, 24, "4.2")
    assert "the captured hook was faster than chained in 24 of 32 pairs**, by a median of 4.2 %" in text
    to_pt = [rows[n][(m, c)]["hook"] / rows[n][(m, c)]["pytorch"] for n in rows
             for m in ("bert_base", "resnet50") for c in ("bf16", "fp16")]
    assert span(to_pt) == "0.966-1.018" and "Every captured hook took 0.966-1.018x PyTorch's hook" in text
    one_round = P1.parent / "h200_p1_one_round"
    quiet = {(r["model"], r["compressor"]): r for r in hook_alone.rows(
        hook_alone.load_records(one_round / "ddp_r8.jsonl", quiet=True))}
    ratio = quiet[("resnet50", "bf16")]["hook"] / quiet[("resnet50", "bf16 (thread runner)")]["hook"]
    assert f"{ratio:.3f}" == "1.015" and "one quiet round agrees for bf16 (1.015x)" in text
    findings = " ".join((ROOT / "docs" / "findings.md").read_text(encoding="utf-8").split())
    assert ("BERT-base's captured 16-bit hooks took 0.986-0.993x post and the chained ones 1.008-1.079x; on ResNet-50 "
            "the captured hooks took 1.009-1.037x post") in findings


def _trace_table(path: Path) -> dict:
    """A ``hook_trace.py`` summary (``trace_r*.md``) as {row title: {column: float}} (the host rows left out)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    cols = [c.strip() for c in lines[0].strip().strip("|").split("|")][1:]
    out = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if "/" not in cells[1]:
            out[cells[0]] = {c.removeprefix("resnet50_b64_").removeprefix("bert_base_b16_"): float(v)
                             for c, v in zip(cols, cells[1:])}
    return out


def test_the_traced_check_reads_its_traces_and_records():
    """hook_runner/h200_p1_trace/README.md: the hooks' compute-stream time from the trace summaries, the captured
    over chained ratios from the rounds' records, and what findings.md says of both."""
    folder = P1.parent / "h200_p1_trace"
    assert (folder / "hook_alone.md").read_text(encoding="utf-8") == hook_alone.report(folder, verbose=False)
    text = " ".join((folder / "README.md").read_text(encoding="utf-8").split())
    resnet = {r: _trace_table(folder / f"trace_r{r}{'_resnet50' if r == 1 else ''}.md") for r in (1, 2, 3, 4)}
    assert [len(t["compute stream busy"]) for t in resnet.values()] == [4, 5, 5, 8]
    busy = {r: t["compute stream busy"] for r, t in resnet.items()}
    hooks = {r: [v for c, v in b.items() if not c.startswith("post")] for r, b in busy.items()}
    posts = {r: [v for c, v in b.items() if c.startswith("post")] for r, b in busy.items()}
    every = [v for vs in hooks.values() for v in vs]
    assert (f"{min(every):.2f}", f"{max(every):.2f}") == ("31.33", "31.60")
    assert f"{max(max(v) - min(v) for v in hooks.values()):.2f}" == "0.10"
    extra = [p - h for r in busy for p in posts[r] for h in hooks[r]]
    assert (f"{min(extra):.2f}", f"{max(extra):.2f}") == ("0.24", "0.41")
    assert ("ResNet-50's compute stream was busy for 31.33-31.60 ms under every hook: captured, chained or PyTorch's. "
            "Within one round the hooks differed by at most 0.10 ms. Post kept the compute stream busy 0.24-0.41 ms "
            "longer") in text
    overlap = "side streams busy while the compute stream is"
    graph = [v for t in resnet.values() for c, v in t[overlap].items() if c.endswith("_graph")]
    bert = _trace_table(folder / "trace_r1_bert_base.md")[overlap]["hook_bf16_graph"]
    assert (max(graph), bert) == (0.07, 0.13)
    assert "at most 0.07 ms per iteration on ResNet-50 and 0.13 ms on BERT-base" in text
    idle = "compute stream idle within the span"
    captured = [t[idle]["hook_bf16_graph"] for t in resnet.values() if "hook_bf16_graph" in t[idle]]
    assert (f"{min(captured):.2f}", f"{max(captured):.2f}") == ("2.40", "14.09")
    least = {min((v, c) for c, v in t[idle].items() if not c.startswith("post"))[1] for t in resnet.values()}
    assert len(least) > 1 and "2.40-14.09 ms for the captured bf16 hook across rounds" in text
    rounds = {hook_alone.round_number(f): hook_alone.load_records(f, quiet=True)
              for f in hook_alone.round_files(folder)}
    ratio = {}
    for n, recs in rounds.items():
        rows = {(r["model"], r["compressor"]): r for r in hook_alone.rows(recs)}
        for c in ("bf16", "fp16"):
            if ("resnet50", c) in rows:
                ratio[n, c] = rows[("resnet50", c)]["hook"] / rows[("resnet50", f"{c} (thread runner)")]["hook"]
    assert (f"{ratio[2, 'bf16']:.3f}", f"{ratio[2, 'fp16']:.3f}") == ("1.009", "1.014")
    rest = [v for (n, _), v in ratio.items() if n != 2]
    assert (f"{min(rest):.3f}", f"{max(rest):.3f}") == ("0.927", "0.996")
    assert (f"{100 * _spread(rounds[2]):.1f}", f"{100 * _spread(rounds[3]):.1f}") == ("2.0", "10.0")
    assert ("round 3's iterations spread 10.0 % (the interquartile range over the median), against 2.0 % in round 2. "
            "In round 2, captured over chained was 1.009 (bf16) and 1.014 (fp16). In rounds 1, 3 and 4, captured "
            "was as fast or faster (0.927-0.996)") in text
    log = (folder / "when_quiet.log").read_text(encoding="utf-8")
    verdicts = re.findall(r"\): (quiet|noisy)", log)
    assert (len(verdicts), verdicts.count("quiet")) == (12, 2) and "found the host quiet in 2 of 12 probes" in text
    findings = " ".join((ROOT / "docs" / "findings.md").read_text(encoding="utf-8").split())
    assert ("traced, the captured, chained and PyTorch's hooks kept ResNet-50's compute stream busy for the same "
            "time, within 0.10 ms an iteration") in findings
