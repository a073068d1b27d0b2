"""The hook targets, hook-vs-post and rerun tables (``studykit.measure.report``) by hand, and the README blocks
that ``studykit.nbtools.readme_blocks`` builds from them against the committed READMEs."""
import json

import pytest

from studykit import models, paths
from studykit.measure import report as R
from studykit.measure.records import load_records
from studykit.nbtools import readme_blocks as RB
from studykit.nbtools.readme_blocks import FP16_VS_TORCH, GPU_CHECKS

P2C = paths.MEASUREMENTS / "bandwidth" / "h200_p2c"


#: data/measurements/bandwidth/README.md's hook-vs-post blocks (issue 19 item 3 on the shaped links): marker -> campaign
HOOK_VS_POST_BLOCKS = {"hook-vs-post": "h200_p2c", "hook-vs-post-p2d": "h200_p2d", "hook-vs-post-p2e": "h200_p2e",
                       "hook-vs-post-p2f": "h200_p2f", "hook-vs-post-p2g": "h200_p2g",
                       "hook-vs-post-p2h": "h200_p2h", "hook-vs-post-p2h-repeat": "h200_p2h_repeat",
                       "hook-vs-post-p2i": "h200_p2i", "hook-vs-post-p2i-repeat": "h200_p2i_repeat"}


@pytest.mark.parametrize("marker", sorted(FP16_VS_TORCH))
def test_bandwidth_readme_fp16_vs_torch_is_the_generated_one(marker):
    text = (paths.MEASUREMENTS / "bandwidth" / "README.md").read_text(encoding="utf-8")
    assert _marked(text, marker) == RB.fp16_vs_torch_block(marker), \
        "regenerate with python -m studykit data regen --only measurements/bandwidth/README.md"


def test_an_unknown_fp16_vs_torch_block_is_refused_naming_the_valid_ones():
    with pytest.raises(ValueError, match=r"no fp16-vs-torch block 'p2x'; valid: fp16-vs-torch-p2j, fp16-vs-torch-p2kl"):
        RB.fp16_vs_torch_block("p2x")


def test_bandwidth_readme_reading_of_the_fp16_hooks_after_the_warmup_fix_holds():
    """The README's reading of h200_p2k/h200_p2l: two warm-ups everywhere, the kit's fp16 hook within 0.98-1.05x
    of PyTorch's at every rate and round, and that gap smaller than PyTorch's own hook moved between rounds."""
    text = " ".join((paths.MEASUREMENTS / "bandwidth" / "README.md").read_text(encoding="utf-8").split())
    subs = FP16_VS_TORCH["fp16-vs-torch-p2kl"]
    recs = [r for sub in subs for r in load_records(paths.MEASUREMENTS / "bandwidth" / sub / "ddp.jsonl", quiet=True)
            if r.get("kind") == "ddp" and r.get("status") == "ok"]
    assert recs and all(r["n_warmup"] == 2 for r in recs) and "every record of the four folders has two warm-ups" in text
    ratios = [x for sub in subs for x in RB.fp16_vs_torch_table(sub)["ratio"]]
    assert len(ratios) == 16 and 0.98 <= min(ratios) and max(ratios) <= 1.05
    assert f"{min(ratios):.3f}-{max(ratios):.3f}" in text
    ref = {sub: RB.fp16_vs_torch_table(sub).set_index(["model", "rate_gbps"])["reference_ms"] for sub in subs}
    moved = max(abs(ref[b] / ref[a] - 1).max() for a, b in zip(subs[::2], subs[1::2]))
    assert moved > max(abs(x - 1) for x in ratios)
    assert f"PyTorch's own fp16 hook moved by up to {100 * moved:.1f} % between the two rounds" in text


def test_hook_targets_per_rate_keep_rates_apart():
    """``hook_targets(shaped=True)`` judges each emulated rate on its own, and leaves the NVLink records out
    (``shaped=False`` the reverse)."""
    def rec(mode, comp, ms, rate):
        return {"kind": "ddp", "status": "ok", "gpu": "G", "world_size": 2, "model": "m", "batch_size": 8,
                "mode": mode, "compressor": comp, "params": {}, "hook_overlap": mode == "hook", "ms_median": ms,
                "n_iter": 5, "network": {"rate_gbps": rate} if rate else None, "timestamp": "t"}
    recs = [rec("hook", "fp16", 10.0, 25.0), rec("builtin", "torch_fp16", 8.0, 25.0),
            rec("hook", "fp16", 20.0, 10.0), rec("builtin", "torch_fp16", 25.0, 10.0),
            rec("hook", "fp16", 1.0, None), rec("builtin", "torch_fp16", 2.0, None)]
    (fp16,) = [t for t in R.HOOK_TARGETS if t.key == "fp16 vs PyTorch's"]
    t = R.hook_targets(recs, (fp16,), shaped=True).set_index("rate_gbps")
    assert t.loc[25.0, "ratio"] == 1.25 and t.loc[25.0, "verdict"] == "MISS"
    assert t.loc[10.0, "ratio"] == 0.8 and t.loc[10.0, "verdict"] == "PASS" and len(t) == 2
    nv = R.hook_targets(recs, (fp16,))
    assert len(nv) == 1 and nv.iloc[0]["ratio"] == 0.5
    assert "| 25 Gbit/s |" in R.hook_targets_markdown(t.reset_index()) and "Gbit/s" not in R.hook_targets_markdown(nv)


@pytest.mark.parametrize("folder, blocks", [("gpu_checks_h200b", RB.nvlink_alone_blocks),
                                            ("gpu_checks_h200c", RB.nvlink_rounds_blocks),
                                            ("gpu_checks_h200d", RB.orthogonalization_blocks),
                                            ("gpu_checks_h200e", RB.trace_ab_block)])
def test_gpu_checks_readme_tables_of_later_runs_are_the_generated_ones(folder, blocks):
    text = (paths.MEASUREMENTS / folder / "README.md").read_text(encoding="utf-8")
    for marker, want in blocks().items():
        assert _marked(text, marker) == want, \
            f"regenerate with python -m studykit data regen --only measurements/{folder}/README.md"


@pytest.mark.parametrize("marker, campaign", sorted(HOOK_VS_POST_BLOCKS.items()))
def test_bandwidth_readme_hook_vs_post_is_the_generated_one(marker, campaign):
    text = (paths.MEASUREMENTS / "bandwidth" / "README.md").read_text(encoding="utf-8")
    assert _marked(text, marker) == RB.hook_vs_post_block(campaign), \
        "regenerate with python -m studykit data regen --only measurements/bandwidth/README.md"


def _marked(text: str, marker: str) -> str:
    a, b = f"<!-- {marker}:begin -->\n", f"<!-- {marker}:end -->"
    assert a in text and b in text, f"markers of {marker!r} missing"
    return text[text.index(a) + len(a):text.index(b)]


def test_gpu_checks_readme_tables_are_the_generated_ones():
    text = (GPU_CHECKS / "README.md").read_text(encoding="utf-8")
    for marker, want in RB.nvlink_checks_blocks().items():
        assert _marked(text, marker) == want, \
            "regenerate with python -m studykit data regen --only measurements/gpu_checks_h200/README.md"


# ------------------------------------------------------------------ hook targets, by hand
def _ddp(mode, compressor=None, params=None, ms=10.0, n=10, model="m", batch=8, p=2, network=None, ts="1", **kw):
    cid = {"mode": mode, "compressor": compressor, "params": params or {}, "model": model, **kw.pop("cid", {})}
    return {"kind": "ddp", "status": "ok", "mode": mode, "compressor": compressor, "params": params or {},
            "ms_median": ms, "n_iter": n, "model": model, "batch_size": batch, "world_size": p, "gpu": "G",
            "network": network, "bucket_mb": None, "timestamp": ts, "config_id": json.dumps(cid), **kw}


def _nvlink_records():
    return [_ddp("syncsgd", ms=10.0), _ddp("builtin", "torch_fp16", ms=9.0),
            _ddp("builtin", "torch_powersgd", {"rank": 4, "start_iter": 2}, ms=20.0),
            _ddp("hook", "fp16", ms=8.0, hook_overlap=True),
            _ddp("hook", "powersgd", {"rank": 4, "warm_start": True}, ms=12.0, hook_overlap=True)]


def test_hook_targets_by_hand():
    t = R.hook_targets(_nvlink_records()).set_index("target")
    assert t.loc["powersgd vs syncSGD", "ratio"] == pytest.approx(1.2)
    assert t.loc["powersgd vs syncSGD", "verdict"] == "MISS"  # 1.2 > 1.1
    assert t.loc["powersgd vs PyTorch's", "ratio"] == pytest.approx(0.6)
    assert t.loc["powersgd vs PyTorch's", "verdict"] == "PASS"
    assert t.loc["fp16 vs PyTorch's", "ratio"] == pytest.approx(8 / 9)
    assert t.loc["fp16 vs PyTorch's", "reference"] == "PyTorch fp16 hook"
    md = R.hook_targets_markdown(t.reset_index())
    assert "| m (8) | 2 | the kit's PowerSGD rank-4 hook <= 1.1x syncSGD | 12.0 (n=10) | syncSGD | 10.0 (n=10) " \
           "| 1.200 | 1.1x | MISS |" in md
    assert md.endswith("2 of 3 judged rows PASS; 0 not measured.\n")


def test_hook_targets_leave_out_other_runs_and_say_what_is_missing():
    recs = _nvlink_records()
    recs[3] = _ddp("hook", "fp16", ms=8.0, hook_overlap=False)  # a blocking hook is not the target's hook
    recs += [
        _ddp("syncsgd", ms=1.0, network={"rate_gbps": 10.0}),  # an emulated network: not NVLink
        _ddp("syncsgd", ms=1.0, switch_interval_ms=0.5, cid={"switch_interval_ms": 0.5}),  # a GIL A/B run
        _ddp("syncsgd", ms=1.0, bucket_mb=100.0),  # another bucket size
        _ddp("syncsgd", ms=1.0, batch=16),  # a batch where no kit hook ran: not judged
        _ddp("hook", "powersgd", {"rank": 4}, ms=99.0, hook_overlap=True, p=1),  # one GPU: not judged
    ]
    t = R.hook_targets(recs).set_index("target")
    assert len(t) == 3 and t.loc["powersgd vs syncSGD", "reference_ms"] == 10.0
    assert t.loc["fp16 vs PyTorch's", "verdict"] == "NOT MEASURED"
    assert R.hook_targets_markdown(t.reset_index()).endswith("1 of 2 judged rows PASS; 1 not measured.\n")


def test_the_latest_record_of_a_configuration_counts():
    recs = _nvlink_records() + [_ddp("syncsgd", ms=11.0, ts="2")]
    t = R.hook_targets(recs).set_index("target")
    assert t.loc["powersgd vs syncSGD", "ratio"] == pytest.approx(12 / 11)
    assert t.loc["powersgd vs syncSGD", "verdict"] == "PASS"


# ------------------------------------------------------------------ parameter server beside Table 1, by hand
NET = {"rate_gbps": 10.0}


def test_ps_vs_collective_by_hand():
    """p = 2: Table 1's server costs 2 alpha + 2 b / BW, Eq. 1's ring all-reduce 2 alpha + b / BW: b / BW more."""
    b = 4 * models.numel("mlp_small")  # the fp32 gradient, bytes
    extra_ms = b * 8 / 10e9 * 1e3
    ps = [_ddp("post", "none", ms=30.0, network=NET, comm="ps", model="mlp_small")]
    coll = {"first": [_ddp("post", "none", ms=20.0, network=NET, model="mlp_small")],
            "second": [_ddp("post", "none", ms=99.0, network=NET, model="mlp_small")]}
    t = R.ps_vs_collective(ps, coll).iloc[0]
    assert t["collective_from"] == "first" and t["scheme"] == "all-reduce" and t["payload"] == "fp32 gradient"
    assert t["measured_ratio"] == pytest.approx(1.5) and t["measured_extra_ms"] == pytest.approx(10.0)
    assert t["model_extra_ms"] == pytest.approx(extra_ms, rel=1e-9)
    assert t["predicted_ratio"] == pytest.approx((20.0 + extra_ms) / 20.0)
    md = R.ps_vs_collective_markdown(R.ps_vs_collective(ps, coll))
    assert f"| mlp_small (8), 2, 10 Gbit/s | fp32 gradient | all-reduce | 20.0 (n=10) | 30.0 (n=10) | 1.50 | 10.0 | " \
           f"{extra_ms:.1f} | {(20.0 + extra_ms) / 20.0:.2f} | first |" in md


def test_ps_vs_collective_without_its_collective_run_says_so():
    ps = [_ddp("post", "signsgd", ms=30.0, network=NET, comm="ps", model="mlp_small")]
    other = [_ddp("post", "signsgd", ms=20.0, network={"rate_gbps": 1.0}, model="mlp_small"),  # another rate
             _ddp("post", "signsgd", ms=20.0, network=NET, model="mlp_small", switch_interval_ms=0.5,
                  cid={"switch_interval_ms": 0.5})]  # a GIL A/B run
    t = R.ps_vs_collective(ps, {"x": other}).iloc[0]
    assert t["collective_from"] is None and t["predicted_ratio"] is None and t["scheme"] == "all-gather"
    assert t["model_extra_ms"] > 0  # Table 1 is still priced
    line = R.ps_vs_collective_markdown(R.ps_vs_collective(ps, {"x": other})).splitlines()[-1]
    assert "| not measured | 30.0 (n=10) | — | — |" in line and line.endswith("| — | — |")


# ------------------------------------------------------------------ hook vs post, by hand
def _shaped(mode, compressor, ms, rate=10.0, **kw):
    return _ddp(mode, compressor, {"rank": 4} if compressor == "powersgd" else {}, ms=ms,
                network={"rate_gbps": rate}, cid={"rate": rate}, **kw)


def test_hook_vs_post_by_hand():
    recs = [_shaped("hook", "powersgd", 12.0, hook_overlap=True), _shaped("post", "powersgd", 10.0),
            _shaped("hook", "topk", 9.0, hook_overlap=True), _shaped("post", "topk", 10.0),
            _shaped("hook", "topk", 30.0, rate=2.5, hook_overlap=True), _shaped("post", "topk", 40.0, rate=2.5)]
    t = R.hook_vs_post(recs)
    assert len(t) == 3
    row = t[(t["compressor"] == "powersgd")].iloc[0]
    assert row["ratio"] == pytest.approx(1.2) and row["verdict"] == "MISS" and row["label"] == "powersgd r4"
    assert list(t[t["compressor"] == "topk"]["verdict"]) == ["PASS", "PASS"]
    md = R.hook_vs_post_markdown(t)
    assert "| m (8) | 2 | powersgd r4 |  | 12.0 / 10.0 * |" in md
    assert "| m (8) | 2 | topk | 30.0 / 40.0 | 9.0 / 10.0 |" in md
    assert md.endswith("2 of 3 configurations PASS (hook <= post): powersgd r4 0/1, topk 2/2.\n")


def test_hook_vs_post_leaves_out_blocking_hooks_nvlink_and_unpaired_runs():
    recs = [_shaped("hook", "topk", 9.0, hook_overlap=False), _shaped("post", "topk", 10.0),  # blocking hook
            _ddp("hook", "fp16", ms=8.0, hook_overlap=True), _ddp("post", "fp16", ms=9.0),  # NVLink: no rate
            _shaped("hook", "qsgd", 5.0, hook_overlap=True),  # no post run
            _shaped("hook", "fp16", 5.0, hook_overlap=True, bucket_mb=100.0), _shaped("post", "fp16", 6.0)]
    assert R.hook_vs_post(recs).empty


def test_hook_vs_post_plot_refuses_an_empty_table_and_too_many_lines():
    from studykit.plots.measure import hook_vs_post_plot

    with pytest.raises(ValueError, match="no configuration with both a hook and a post record"):
        hook_vs_post_plot(R.hook_vs_post([]))
    t = R.hook_vs_post(load_records(P2C / "ddp.jsonl", quiet=True))
    with pytest.raises(ValueError, match="at most 6 compressor settings per panel, got 7"):
        hook_vs_post_plot(t)


def test_coalesced_hooks_are_rows_of_their_own_beside_the_per_bucket_hook():
    recs = [_shaped("post", "powersgd", 10.0), _shaped("hook", "powersgd", 12.0, hook_overlap=True),
            *[_ddp("hook", "powersgd", {"rank": 4}, ms=ms, network=NET, hook_overlap=True, hook_coalesce_mb=mb,
                   cid={"rate": 10.0, "hook_coalesce_mb": mb}) for ms, mb in ((9.5, 0.0), (11.0, 25.0))]]
    t = R.hook_vs_post(recs)
    assert list(t["label"]) == ["powersgd r4", "powersgd r4 coalesced per iteration", "powersgd r4 coalesced 25 MB"]
    assert list(t["ratio"]) == pytest.approx([1.2, 0.95, 1.1]) and list(t["verdict"]) == ["MISS", "PASS", "MISS"]
    # the NVLink targets judge the hook as registered by default (a protocol per bucket)
    nv = [_ddp("syncsgd", None, ms=10.0), _ddp("hook", "powersgd", {"rank": 4}, ms=12.0, hook_overlap=True),
          _ddp("hook", "powersgd", {"rank": 4}, ms=10.5, hook_overlap=True, hook_coalesce_mb=0.0, cid={"c": 0})]
    row = R.hook_targets(nv).iloc[0]
    assert row["kit_ms"] == 12.0 and row["verdict"] == "MISS"


def test_hooks_without_buffer_broadcast_are_rows_of_their_own_and_never_stand_in_for_the_default():
    nobuf = {"broadcast_buffers": False, "cid": {"rate": 10.0, "broadcast_buffers": False}}
    recs = [_shaped("post", "powersgd", 10.0), _shaped("hook", "powersgd", 12.0, hook_overlap=True),
            # written later than the default hook: it must not replace it
            _ddp("hook", "powersgd", {"rank": 4}, ms=11.0, network=NET, hook_overlap=True, ts="2", **nobuf),
            _ddp("syncsgd", None, ms=20.0, network=NET, cid={"rate": 10.0}),
            _ddp("syncsgd", None, ms=19.0, network=NET, ts="2", **nobuf)]
    t = R.hook_vs_post(recs)
    assert list(t["label"]) == ["powersgd r4", "powersgd r4 no buffer broadcast"]
    assert list(t["hook_ms"]) == [12.0, 11.0] and list(t["broadcast_buffers"].isna()) == [True, False]
    assert [r["ms_median"] for r in R.plain_runs(recs) if r["mode"] == "syncsgd"] == [20.0]
    # the NVLink targets judge DDP as it comes
    nv = [_ddp("syncsgd", None, ms=10.0), _ddp("hook", "powersgd", {"rank": 4}, ms=12.0, hook_overlap=True),
          _ddp("hook", "powersgd", {"rank": 4}, ms=9.0, hook_overlap=True, ts="2", broadcast_buffers=False,
               cid={"broadcast_buffers": False})]
    assert R.hook_targets(nv).iloc[0]["kit_ms"] == 12.0
    # the crossover tables keep both, labelled apart
    from studykit.measure.crossover import iteration_table
    methods = set(iteration_table(recs)["method"])
    assert {"syncSGD", "syncSGD no buffer broadcast", "powersgd r4 (hook) no buffer broadcast"} <= methods
    # and the rerun spread names the variant
    again = [dict(r, timestamp="3") for r in recs]
    labels = set(R.rerun_spread(recs, again)["label"])
    assert "powersgd r4 (hook) no buffer broadcast" in labels


def test_verification_readme_rerun_spread_is_the_generated_one():
    text = (paths.DATA / "verification" / "bandwidth" / "README.md").read_text(encoding="utf-8")
    assert _marked(text, "rerun-spread") == RB.rerun_spread_block(), \
        "regenerate with python -m studykit data regen --only verification/bandwidth/README.md"


def test_rerun_spread_by_hand():
    a = [_ddp("syncsgd", ms=100.0, cid={"s": 1}, ts="1"), _ddp("post", "topk", {"ratio": 0.01}, ms=50.0, cid={"p": 1}),
         _ddp("hook", "topk", {"ratio": 0.01}, ms=40.0, cid={"h": 1}, hook_overlap=True),
         _ddp("post", "fp16", ms=30.0, cid={"only": 1})]
    b = [_ddp("syncsgd", ms=110.0, cid={"s": 1}, ts="2"), _ddp("post", "topk", {"ratio": 0.01}, ms=40.0, cid={"p": 1}, ts="2"),
         _ddp("hook", "topk", {"ratio": 0.01}, ms=40.0, cid={"h": 1}, hook_overlap=True)]  # same timestamp: a copy
    t = R.rerun_spread(a, b)
    assert list(t["group"]) == ["compressors (post)", "syncSGD"]
    assert list(t["spread"]) == pytest.approx([0.25, 0.10])  # larger / smaller - 1, whichever came first
    md = R.rerun_spread_markdown({"x / y": t})
    assert "| x / y | syncSGD | 1 | 10.0 % | 10.0 % |" in md and "25.0 %" in md
    with pytest.raises(ValueError, match="no configuration measured in both"):
        R.rerun_spread_markdown({"x / z": R.rerun_spread(a, [])})


def test_bandwidth_readme_counts_the_records_with_one_warmup():
    """The README's count of `ddp` records timed after a single warm-up (the fault fixed in timing.time_fn)."""
    import glob
    recs = [r for f in glob.glob(str(paths.MEASUREMENTS / "bandwidth" / "*" / "ddp.jsonl"))
            for r in load_records(f, quiet=True) if r.get("kind") == "ddp" and r.get("status") == "ok"]
    one = sum(r.get("n_warmup") == 1 for r in recs)
    text = " ".join((paths.MEASUREMENTS / "bandwidth" / "README.md").read_text(encoding="utf-8").split())
    assert f"{one} of the {len(recs):,} `ddp` records under this folder have one warm-up" in text


def test_bandwidth_readme_reading_of_the_two_round_calls_holds():
    """data/measurements/bandwidth/README.md's reading of h200_p2h, h200_p2i and h200_p2j, checked per round."""
    text = " ".join((paths.MEASUREMENTS / "bandwidth" / "README.md").read_text(encoding="utf-8").split())

    def table(sub):
        t = R.hook_vs_post(load_records(paths.MEASUREMENTS / "bandwidth" / sub / "ddp.jsonl", quiet=True))
        return t.set_index(["label", "rate_gbps"])["verdict"]

    r101 = [table("h200_p2h"), table("h200_p2h_repeat")]
    assert "(`none`, fp16) pass post at every rate in both rounds" in text
    for v in r101:
        assert (v[["none", "fp16"]] == "PASS").all()
        assert (v.xs(25.0, level="rate_gbps")[["powersgd r4", "powersgd r32", "topk 1%"]] == "MISS").all()
    at10 = [v.xs(10.0, level="rate_gbps")[["powersgd r4", "powersgd r32", "topk 1%"]] for v in r101]
    assert sum((x == "PASS").sum() for x in at10) == 1 and "at 10 Gbit/s in all but one row" in text
    vgg = [table("h200_p2i"), table("h200_p2i_repeat")]
    assert "TopK's hook passes post at every rate in both rounds, PowerSGD rank 32's at 2.5-10 Gbit/s" in text
    for v in vgg:
        assert (v["topk 1%"] == "PASS").all()
        assert (v["powersgd r32"].drop(25.0) == "PASS").all() and v["powersgd r32"][25.0] == "MISS"
    (fp16,) = [t for t in R.HOOK_TARGETS if t.key == "fp16 vs PyTorch's"]
    archived = paths.DATA / "archive" / "measurements" / "bandwidth"
    ratio = {sub: R.hook_targets(load_records(archived / sub / "ddp.jsonl", quiet=True),
                                 (fp16,), shaped=True).set_index(["model", "rate_gbps"])["ratio"]
             for sub in ("h200_p2j", "h200_p2j_repeat")}
    assert "1.35x PyTorch's in round 1 and 0.88x in round 2" in text
    assert f"{ratio['h200_p2j'][('resnet50', 25.0)]:.2f}" == "1.35"
    assert f"{ratio['h200_p2j_repeat'][('resnet50', 25.0)]:.2f}" == "0.88"
    flips = [k for k in ratio["h200_p2j_repeat"].index if (ratio["h200_p2j"][k] <= 1) != (ratio["h200_p2j_repeat"][k] <= 1)]
    assert sorted(flips) == [("bert_base", 10.0), ("resnet50", 10.0), ("resnet50", 25.0)]
    assert "(both models at 10 Gbit/s, ResNet-50 at 25)" in text


def test_verification_readme_reading_of_the_hooks_rerun_after_the_warmup_fix_holds():
    """data/verification/bandwidth/README.md: the fp16 hooks' round-to-round spread in h200_p2k/h200_p2l against
    h200_p2j's."""
    text = " ".join((paths.DATA / "verification" / "bandwidth" / "README.md").read_text(encoding="utf-8").split())

    def hooks(a, folder=paths.MEASUREMENTS / "bandwidth"):
        t = R.rerun_spread(*(load_records(folder / c / "ddp.jsonl", quiet=True) for c in (a, f"{a}_repeat")))
        return t[t["group"] == "compressors (hook)"]["spread"]

    archived = paths.DATA / "archive" / "measurements" / "bandwidth"
    assert f"moved by up to {100 * hooks('h200_p2j', archived).max():.0f} % between its rounds" in text
    k, l_ = hooks("h200_p2k"), hooks("h200_p2l")
    assert (f"moved by {100 * k.median():.1f} % (ResNet-50) and {100 * l_.median():.1f} % (BERT-base) at the median, "
            f"at most {100 * max(k.max(), l_.max()):.1f} %") in text
