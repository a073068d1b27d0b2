"""Training runs: 2 gloo processes improve accuracy and reproduce, bytes on the wire equal
``Compressor.plan`` x steps, records carry provenance, CLI and analysis helpers work."""
import json
import math
from dataclasses import replace

import pytest
import torch

from studykit import compressors as C
from studykit.plots import train as plots
from studykit.comm import Collective
from studykit.train import TrainConfig, analysis, loop, nets, train
from studykit.train.cli import main as cli_main
from studykit.train.data import load
from studykit.train.dynamic import Level

FAST = dict(dataset="digits", batch_size=32, lr=0.05, seed=1)
EPOCHS = 4


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    # "dynamic:quantize" is the same schedule as "dynamic" under another label: trained after
    # it in the same process group, it must give the same numbers (reproducibility)
    out = tmp_path_factory.mktemp("runs")
    recs = train(TrainConfig(epochs=EPOCHS, **FAST), ["none", "dynamic", "topk", "dynamic:quantize"],
                 world_size=2, out=out)
    return recs, out


def _by(recs, method):
    return [r for r in recs if r["method"] == method]


@pytest.mark.slow
def test_two_gloo_workers_train_and_improve(two_workers):
    recs, _ = two_workers
    for method in ("none", "dynamic", "topk"):
        rs = _by(recs, method)
        assert [r["epoch"] for r in rs] == list(range(EPOCHS))
        assert rs[0]["world_size"] == 2 and rs[0]["provenance"]["backend"] == "gloo"
        assert rs[-1]["test_acc"] > rs[0]["test_acc"] + 0.1, method
        assert rs[-1]["train_loss"] < rs[0]["train_loss"]
    assert _by(recs, "none")[-1]["test_acc"] > 0.5


@pytest.mark.slow
def test_two_worker_runs_reproduce(two_workers):
    recs, _ = two_workers
    first, again = _by(recs, "dynamic"), _by(recs, "dynamic:quantize")
    for key in ("test_acc", "val_acc", "train_loss", "bytes_sent", "grad_norm"):
        assert [r[key] for r in again] == [r[key] for r in first], key
    assert [r["level"]["label"] for r in again] == [r["level"]["label"] for r in first]


@pytest.mark.slow
def test_identical_runs_in_process_give_identical_accuracies():
    cfg = TrainConfig(epochs=2, dataset="digits", limit_train=600, batch_size=32, seed=3)
    a = train(cfg, ["quantize:bits=4", "powersgd:rank=1"], world_size=1)
    b = train(cfg, ["quantize:bits=4", "powersgd:rank=1"], world_size=1)
    keys = ("train_loss", "train_acc", "val_acc", "test_acc", "bytes_sent", "grad_norm")
    assert [[r[k] for k in keys] for r in a] == [[r[k] for k in keys] for r in b]
    assert a[-1]["seeds"]["model"] == 3 and a[-1]["params"]["seed"] == 3


@pytest.mark.slow
def test_bytes_on_the_wire_equal_plan_times_steps(two_workers):
    recs, _ = two_workers
    ds = load("digits")
    shapes = [tuple(p.shape) for p in nets.build("auto", ds.input_shape, 10).parameters()]
    for r in recs:
        comp = C.get(r["level"]["compressor"], **r["level"]["params"])
        per_step = comp.wire_bytes(shapes, world_size=2)  # one bucket: all parameters
        assert r["buckets"] == 1
        assert r["bytes_planned_per_step"] == per_step
        assert r["bytes_sent"] == per_step * r["iterations"], (r["method"], r["epoch"])
        received = sum(loop.received_bytes(c, 2) for c in comp.plan(shapes, world_size=2))
        assert r["bytes_received"] == received * r["iterations"] == r["bytes_received_per_step"] * r["iterations"]
    totals = [r["bytes_sent_total"] for r in _by(recs, "dynamic")]
    assert totals == [sum(r["bytes_sent"] for r in _by(recs, "dynamic")[:i + 1]) for i in range(EPOCHS)]


@pytest.mark.slow
def test_records_carry_provenance_timing_split_and_levels(two_workers):
    recs, out = two_workers
    r = recs[0]
    for key in ("host", "torch", "python", "cpu", "git_commit", "timestamp", "world_size", "backend"):
        assert key in r["provenance"], key
    assert set(r["seeds"]) >= {"model", "data_order", "compressor"}
    assert r["params"]["epochs"] == EPOCHS
    for r in recs:
        split = r["split_ms"]  # from the separate profiled iterations, not from the timed ones
        assert split["iterations"] == 2 and split["compute"] > 0 and split["comm"] > 0
        assert min(split[k] for k in ("encode", "comm", "decode")) >= 0
        assert math.isclose(split["compute"] + split["encode"] + split["comm"] + split["decode"], split["iteration"],
                            rel_tol=1e-9)
        assert r["timing"] == {"method": "perf_counter", "overlap": True, "profile_steps": 2}
        assert r["iter_ms"]["n_iter"] == r["iterations"] and r["iter_ms"]["ms_min"] <= r["iter_ms"]["ms_median"]
        assert math.isclose(r["time_s"], sum(x["train_s"] for x in _by(recs, r["method"]) if x["epoch"] <= r["epoch"]))
        assert math.isfinite(r["grad_norm"]) and r["grad_norm"] > 0
    assert _by(recs, "dynamic")[0]["level"]["label"] == "quantize:bits=4"
    assert _by(recs, "dynamic")[0]["controller"]["ladder"][-1] == "quantize:bits=16"
    lines = (out / "dynamic.jsonl").read_text().splitlines()
    assert [json.loads(x)["epoch"] for x in lines] == list(range(EPOCHS))  # appended one line per epoch


@pytest.mark.slow
def test_cli_in_process_writes_jsonl_and_overwrites(tmp_path, capsys):
    out = tmp_path / "run.jsonl"
    argv = ["train", "--dataset", "digits", "--limit-train", "400", "--epochs", "1", "--methods", "fp16",
            "accordion:topk", "--out", str(out)]
    assert cli_main(argv) == 0
    assert cli_main(argv + ["--overwrite"]) == 0
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["method"] for r in recs] == ["fp16", "accordion:topk"]
    assert "fp16" in capsys.readouterr().out
    assert cli_main(["train", "--list-methods"]) == 0


@pytest.mark.slow
def test_analysis_and_plots(two_workers):
    recs, out = two_workers
    df = analysis.to_frame(analysis.load_runs(out))
    table = analysis.summary_table(df)
    assert list(table.index[:2]) == ["none", "dynamic"] and len(table) == 4
    assert table.loc["topk", "sent_per_worker_mb"] < table.loc["none", "sent_per_worker_mb"]
    tta = analysis.time_to_accuracy(df, target=0.3, baseline="none")
    assert tta.loc["none", "speedup_vs_baseline"] == 1.0
    assert not analysis.time_to_accuracy(df, target=1.01)["reached"].any()
    split = analysis.time_split(df)
    assert (split["iteration_ms"] > 0).all() and (split["encode_ms"] >= 0).all()
    for fig, ax in (plots.accuracy_curves(df, "train"), plots.loss_curves(df), plots.bits_over_epochs(df),
                    plots.tta_bars(tta, baseline="none"), plots.time_split_bars(split), plots.bytes_bars(table),
                    plots.accuracy_vs_time(df, target=0.3)):
        assert ax.get_ylabel() and ax.get_xlabel() is not None
        import matplotlib.pyplot as plt
        plt.close(fig)


def test_received_bytes_count_every_shard_an_all_gather_brings():
    """A worker receives p - 1 shards of an all-gather and 2 (p - 1) / p of an all-reduced buffer (the ring)."""
    import torch

    for p in (2, 4, 8):
        assert loop.received_bytes(Collective("all_gather", 1000, torch.float16), p) == (p - 1) * 2000
        assert loop.received_bytes(Collective("all_reduce", 1000, torch.float32), p) == round(2 * (p - 1) / p * 4000)
    topk = C.get("topk", ratio=0.01)
    shapes = [(100, 100)]
    sent, received = loop.plan_traffic(Level.parse("topk:ratio=0.01"), {0: shapes}, 8, seed=0)
    assert sent == topk.wire_bytes(shapes, 8) and received == 7 * sent  # the (p-1)-fold the old count missed


@pytest.mark.slow
def test_text_runs_profile_without_changing_training_and_resume(tmp_path):
    """The tiny language model on the stdlib: profiled iterations change nothing (the same numbers with
    and without them), a run with ``resume`` skips complete (method, seed) runs, seeds are recorded."""
    cfg = TrainConfig(dataset="text", model="gpt_tiny", steps=4, eval_every=2, seq_len=32, batch_size=4,
                      limit_train=20_000, limit_test=4_000, optimizer="adamw", lr=3e-3, progress=False)
    keys = ("train_loss", "val_loss", "val_acc", "bytes_sent", "grad_norm")
    a = train(cfg, ["topk", "dynamic"], seeds=[0, 1], out=tmp_path)
    b = train(replace(cfg, profile_steps=0), ["topk", "dynamic"], seeds=[0, 1])
    assert [[r[k] for k in keys] for r in a] == [[r[k] for k in keys] for r in b]
    assert [r["seed"] for r in a] == [0, 0, 0, 0, 1, 1, 1, 1] and [r["step"] for r in a[:2]] == [2, 4]
    assert [r["final"] for r in a[:2]] == [False, True] and b[0]["split_ms"] is None
    assert a[0]["task"] == "lm" and a[0]["dataset"]["vocab_size"] == 256 and a[0]["val_loss"] < 5.6
    assert train(cfg, ["topk", "dynamic"], seeds=[0, 1], out=tmp_path, resume=True) == []
    again = train(cfg, ["topk"], seeds=[0, 2], out=tmp_path, resume=True)
    assert {r["seed"] for r in again} == {2}
    df = analysis.latest_runs(analysis.to_frame(analysis.load_runs(tmp_path)))
    assert sorted(df.groupby("method")["seed"].nunique().items()) == [("dynamic", 2), ("topk", 3)]


def _rec(method, seed, step, val_loss, time_s, level="none", bits=32.0):
    return {"kind": "train_epoch", "run_id": f"{method}-{seed}", "method": method, "seed": seed,
            "epoch": step // 10 - 1, "step": step, "iterations": 10, "val_loss": val_loss, "time_s": time_s,
            "bytes_received_total": step * 1e6, "bytes_planned_per_step": 1e6, "bits_per_element": bits,
            "level": {"label": level}, "boost": False, "final": step == 30, "train_s": 1.0}


def test_time_to_target_medians_intervals_and_level_changes_at_their_iteration():
    recs = []
    for seed, t in ((0, 1.0), (1, 2.0), (2, 4.0)):  # fp16 reaches 2.0 at step 20, after 2 t
        recs += [_rec("fp16", seed, s, v, s / 10 * t) for s, v in ((10, 3.0), (20, 2.0), (30, 1.5))]
    for seed in (0, 1, 2):  # dynamic: reaches it at step 30 for two seeds, never for the third
        levels = [("quantize:bits=4", 8.0), ("quantize:bits=4", 8.0), ("quantize:bits=8", 16.0)]
        vals = (3.0, 2.5, 1.9 if seed < 2 else 2.1)
        recs += [_rec("dynamic", seed, s, v, s / 10, lv, b) for s, v, (lv, b) in zip((10, 20, 30), vals, levels)]
    df = analysis.to_frame(recs)
    t = analysis.time_to_target(df, "val_loss", 2.0, baseline="fp16")
    assert t.loc["fp16", ["runs", "reached", "tta_s", "tta_min_s", "tta_max_s"]].tolist() == [3, 3, 4.0, 2.0, 8.0]
    assert t.loc["dynamic", ["reached", "tta_s", "steps_to_target"]].tolist() == [2, 3.0, 30]
    assert t.loc["dynamic", "speedup_vs_baseline"] == 4.0 / 3.0
    assert (t.loc["dynamic", "speedup_min"], t.loc["dynamic", "speedup_max"]) == (2.0 / 3.0, 8.0 / 3.0)
    assert t.loc["fp16", "received_to_target_mb"] == 20.0
    assert t.loc["dynamic", ["final_val_loss_min", "final_val_loss_max"]].tolist() == [1.9, 2.1]
    ch = analysis.level_changes(df)
    assert ch["step"].tolist() == [20, 20, 20] and set(ch["to"]) == {"quantize:bits=8"}  # from iteration 20 on
    with pytest.raises(ValueError, match="target metric"):
        analysis.time_to_target(df, "val_perplexity", 2.0)


def test_optimizer_state_against_a_hand_computed_adamw_step():
    """After one AdamW step from g: m_hat = g, sqrt(v_hat) = |g|, so the step's direction is g / (|g| + eps)
    (about 1 per coordinate); a gradient with noise added raises sqrt(v) and lowers the step's rms."""
    from studykit.train.loop import optimizer_state

    p = torch.nn.Parameter(torch.zeros(4))
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    assert optimizer_state(opt) is None
    g = torch.tensor([0.5, -2.0, 1.0, 4.0])
    p.grad = g.clone()
    opt.step()
    s = optimizer_state(opt)
    assert s["optimizer"] == "adamw"
    assert s["m_rms"] == pytest.approx(float(g.pow(2).mean().sqrt()), rel=1e-6)
    assert s["sqrt_v_mean"] == pytest.approx(float(g.abs().mean()), rel=1e-6)
    assert s["step_rms"] == pytest.approx(1.0, rel=1e-6)
    q = torch.nn.Parameter(torch.zeros(4000))
    noisy = torch.optim.AdamW([q], lr=1e-3, betas=(0.9, 0.95))
    clean = torch.optim.AdamW([r := torch.nn.Parameter(torch.zeros(4000))], lr=1e-3, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(0)
    base = torch.full((4000,), 0.1)
    for _ in range(50):
        q.grad = base + torch.randn(4000, generator=gen)
        r.grad = base.clone()
        noisy.step()
        clean.step()
    a, b = optimizer_state(noisy), optimizer_state(clean)
    assert a["sqrt_v_mean"] > 3 * b["sqrt_v_mean"] and a["step_rms"] < 0.5 * b["step_rms"]
    sgd = torch.optim.SGD([w := torch.nn.Parameter(torch.zeros(3))], lr=0.1, momentum=0.9)
    w.grad = torch.tensor([3.0, 0.0, 4.0])
    sgd.step()
    assert optimizer_state(sgd) == {"optimizer": "sgd", "momentum_rms": pytest.approx(5 / 3 ** 0.5)}


def test_text_test_percent_reports_test_on_held_out_files_and_refuses_other_data_sets():
    with pytest.raises(ValueError, match="test_percent"):
        TrainConfig(dataset="mnist1d", test_percent=5)
    with pytest.raises(ValueError, match="test_percent"):
        TrainConfig(dataset="text", test_percent=60)
    cfg = TrainConfig(dataset="text", model="gpt_tiny", steps=2, eval_every=2, seq_len=32, batch_size=4,
                      limit_train=20_000, limit_test=4_000, optimizer="adamw", lr=3e-3, progress=False,
                      test_percent=5, profile_steps=0, warmup_steps=0)
    (r,) = train(cfg, ["none"])
    assert r["dataset"]["num_test_windows"] > 0 and r["test_loss"] != pytest.approx(r["val_loss"], rel=1e-9)
    assert r["optimizer_state"]["optimizer"] == "adamw" and r["optimizer_state"]["step_rms"] > 0


def test_resume_after_an_interrupted_write_keeps_the_resumed_runs_first_record(tmp_path, recwarn):
    """A run killed mid-write leaves a cut last line; the resumed run's first record must start on a line of its
    own (not be glued to the cut one and lost), and the cut line is dropped with a warning."""
    cfg = TrainConfig(dataset="text", model="gpt_tiny", steps=2, eval_every=1, seq_len=16, batch_size=2,
                      limit_train=5_000, limit_test=1_000, optimizer="adamw", lr=3e-3, progress=False,
                      profile_steps=0, warmup_steps=0)
    out = tmp_path / "none.jsonl"
    first = train(cfg, ["none"], out=out)
    whole = out.read_text()
    out.write_text(whole[: whole.index("\n") + 1] + whole[whole.index("\n") + 1:][:40])  # the second record cut
    loop._REPAIRED.clear()
    again = train(cfg, ["none"], out=out, resume=True)
    assert len(again) == len(first) == 2
    lines = out.read_text().splitlines()
    recs = [json.loads(line) for line in lines]  # every line parses: nothing glued
    assert len(recs) == 3 and recs[1]["run_id"] == again[0]["run_id"]
    assert any("partial last line" in str(w.message) for w in recwarn)
