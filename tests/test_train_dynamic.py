"""The dynamic-compression controller on hand-written metric sequences (pure: no training)."""
import math

import pytest

from studykit.train.dynamic import (LADDERS, UNCOMPRESSED, AccuracyLossStep, DynamicController, EpochMetrics,
                                    GradNormChange, Level, ladder, schedule)
from studykit.train.methods import PRESETS, parse_method, parse_methods

Q = LADDERS["quantize"]


def metrics(val_accs, losses=None, grad_norms=None):
    losses = losses or [2.0 - 0.3 * i for i in range(len(val_accs))]  # still falling fast: no loss step
    grad_norms = grad_norms or [math.nan] * len(val_accs)
    return [EpochMetrics(e, l, a, grad_norm=g) for e, (a, l, g) in enumerate(zip(val_accs, losses, grad_norms))]


def bits(levels):
    return [lv.kwargs.get("bits", 32) for lv in levels]


def test_ladder_is_tirupatis_4_8_16_bits_and_none_only_when_asked():
    assert [lv.label for lv in Q] == ["quantize:bits=4", "quantize:bits=8", "quantize:bits=16"]
    assert UNCOMPRESSED not in Q and all(UNCOMPRESSED not in LADDERS[f] for f in ("quantize", "topk", "powersgd"))
    assert LADDERS["quantize+none"] == Q + (UNCOMPRESSED,)
    assert ladder("quantize+none")[-1] == UNCOMPRESSED


def test_each_rung_puts_its_bits_on_the_wire():
    """4, 8 and 16 bits per element (plus the shared scale), not a sum dtype's width."""
    n = 1 << 16
    for level in Q:
        wire = level.build().wire_bytes([(n,)], 2)
        assert wire <= n * level.kwargs["bits"] / 8 * 1.01 + 16, level.label


def test_accuracy_steps_relax_compression_one_threshold_at_a_time():
    ctl = DynamicController(Q, AccuracyLossStep(acc_thresholds=(0.5, 0.7, 0.9), loss_thresholds=()))
    levels = schedule(ctl, metrics([0.3, 0.55, 0.6, 0.75, 0.95]))
    assert bits(levels) == [4, 4, 8, 8, 16, 16]


def test_accuracy_jump_skips_levels_and_is_capped_at_the_top():
    ctl = DynamicController(Q, AccuracyLossStep(acc_thresholds=(0.1, 0.2, 0.3, 0.4, 0.5), loss_thresholds=()))
    assert bits(schedule(ctl, metrics([0.99]))) == [4, 16]


def test_ratchet_never_tightens_compression_again():
    ctl = DynamicController(Q, AccuracyLossStep(acc_thresholds=(0.5, 0.7, 0.9), loss_thresholds=()))
    levels = schedule(ctl, metrics([0.75, 0.4, 0.2]))
    assert bits(levels) == [4, 16, 16, 16]


def test_flattening_training_loss_relaxes_compression():
    step = AccuracyLossStep(acc_thresholds=(0.9, 0.95, 0.99), loss_thresholds=(0.1, 0.05, 0.02), loss_window=1)
    ctl = DynamicController(Q, step)
    # |change| = 0.5 (no step), 0.08 (< 0.1: step 1), 0.03 (< 0.05: step 2), 0.01 (< 0.02: step 3)
    levels = schedule(ctl, metrics([0.2] * 5, losses=[2.0, 1.5, 1.42, 1.39, 1.38]))
    assert bits(levels) == [4, 4, 4, 8, 16, 16]  # levels[e] is the level epoch e trains with


def test_a_rising_loss_counts_as_a_large_change_not_a_plateau():
    ctl = DynamicController(Q, AccuracyLossStep(acc_thresholds=(0.9,), loss_thresholds=(0.1,), loss_window=1))
    assert bits(schedule(ctl, metrics([0.2, 0.2], losses=[1.0, 1.5]))) == [4, 4, 4]


def test_loss_change_is_averaged_over_the_window():
    step = AccuracyLossStep(acc_thresholds=(0.9,), loss_thresholds=(0.05,), loss_window=3)
    # one flat epoch (1.4 -> 1.39) does not count: mean changes over 3 epochs are (2.0 - 1.39) / 3 = 0.2,
    # (1.6 - 1.35) / 3 = 0.083, then (1.4 - 1.3) / 3 = 0.033 < 0.05: one step
    levels = schedule(DynamicController(Q, step), metrics([0.2] * 6, losses=[2.0, 1.6, 1.4, 1.39, 1.35, 1.3]))
    assert bits(levels) == [4, 4, 4, 4, 4, 4, 8]


def test_stall_removes_compression_temporarily_then_returns():
    step = AccuracyLossStep(acc_thresholds=(0.5, 0.7, 0.9), loss_thresholds=())
    ctl = DynamicController(Q, step, stall_epochs=3, boost_epochs=2)
    levels = schedule(ctl, metrics([0.3] * 8))
    # 3 epochs at 4 bits -> 2 epochs uncompressed -> 3 more at 4 bits -> uncompressed again
    assert [lv.label for lv in levels] == (["quantize:bits=4"] * 3 + ["none"] * 2 + ["quantize:bits=4"] * 3
                                            + ["none"])


def test_boost_flag_and_index_while_boosting():
    ctl = DynamicController(Q, AccuracyLossStep(acc_thresholds=(0.5,), loss_thresholds=()), stall_epochs=1)
    assert not ctl.boosting and ctl.level == Q[0]
    ctl.update(EpochMetrics(0, 1.0, 0.1))
    assert ctl.boosting and ctl.level == UNCOMPRESSED and ctl.index == 0
    ctl.update(EpochMetrics(1, 0.5, 0.1))
    assert not ctl.boosting and ctl.level == Q[0]


def test_a_step_change_resets_the_stall_counter():
    step = AccuracyLossStep(acc_thresholds=(0.5, 0.7, 0.9), loss_thresholds=())
    ctl = DynamicController(Q, step, stall_epochs=3)
    # three epochs at 4 bits, but the step moved to 8 bits at the same time: no boost; then
    # three epochs at 8 bits -> boost
    levels = schedule(ctl, metrics([0.3, 0.3, 0.55, 0.55, 0.55, 0.55]))
    assert [lv.label for lv in levels] == ["quantize:bits=4"] * 3 + ["quantize:bits=8"] * 3 + ["none"]
    assert ctl.boosting


def test_no_boost_at_the_last_step_or_once_uncompressed():
    for lad, top in ((Q, 16), (LADDERS["quantize+none"], 32)):
        ctl = DynamicController(lad, AccuracyLossStep(acc_thresholds=(0.1, 0.2, 0.3), loss_thresholds=()),
                                stall_epochs=1)
        levels = schedule(ctl, metrics([0.9] * 4))
        assert bits(levels) == [4] + [top] * 4 and not ctl.boosting


def test_generic_over_families_topk_ratio_and_powersgd_rank():
    step = AccuracyLossStep(acc_thresholds=(0.5, 0.7, 0.9), loss_thresholds=())
    topk = schedule(DynamicController("topk", step), metrics([0.6, 0.8]))
    assert [lv.kwargs.get("ratio") for lv in topk] == [0.01, 0.05, 0.25]
    psgd = schedule(DynamicController("powersgd", step), metrics([0.95]))
    assert [lv.label for lv in psgd] == ["powersgd:rank=1", "powersgd:rank=4"]
    own = ladder("topk:ratio=0.001;topk:ratio=0.1")
    assert schedule(DynamicController(own, step), metrics([0.6]))[-1] == Level.make("topk", ratio=0.1)


def test_accordion_switches_both_ways_on_gradient_norm_change():
    ctl = DynamicController(ladder("powersgd:rank=1;powersgd:rank=4"), GradNormChange(eta=0.5))
    # epoch 0: critical (start) -> rank 4; then |change| / old: 0.6 (critical), 0.1, 0.05, 0.75 (critical)
    ms = metrics([0.5] * 5, grad_norms=[10.0, 4.0, 3.6, 3.42, 6.0])
    assert [lv.kwargs["rank"] for lv in schedule(ctl, ms)] == [4, 4, 4, 1, 1, 4]
    assert not ctl.monotone


def test_accordion_decides_only_every_interval_epochs():
    ctl = DynamicController(ladder("powersgd:rank=1;powersgd:rank=4"), GradNormChange(eta=0.5, interval=2))
    ms = metrics([0.5] * 6, grad_norms=[10, 10, 9, 9, 9, 2])
    # decisions after epochs 1, 3, 5 (|9-10|/10 small -> rank 1; |2-9|/9 large -> rank 4)
    assert [lv.kwargs["rank"] for lv in schedule(ctl, ms)] == [4, 4, 4, 4, 1, 1, 4]


def test_accordion_needs_grad_norms():
    ctl = DynamicController(ladder("powersgd:rank=1;powersgd:rank=4"), GradNormChange())
    ctl.update(EpochMetrics(0, 1.0, 0.5, grad_norm=1.0))
    with pytest.raises(ValueError, match="grad_norm"):
        ctl.update(EpochMetrics(1, 1.0, 0.5))


def test_triggers_combine_by_least_compression():
    acc = AccuracyLossStep(acc_thresholds=(0.5, 0.7, 0.9), loss_thresholds=())
    qn = LADDERS["quantize+none"]
    ctl = DynamicController(qn, [acc, GradNormChange(low=2, high=0)], monotone=True)
    assert ctl.level == qn[2]  # Accordion starts critical at its ``low`` rung
    ctl.update(EpochMetrics(0, 1.0, 0.95, grad_norm=1.0))
    assert ctl.level == qn[3]


def test_controller_is_deterministic_and_replayable():
    ms = metrics([0.3, 0.6, 0.6, 0.6, 0.8], losses=[2, 1.5, 1.45, 1.44, 1.2])
    make = lambda: DynamicController(Q, AccuracyLossStep(), stall_epochs=2)  # noqa: E731
    assert schedule(make(), ms) == schedule(make(), ms)


def test_bad_parameters_raise():
    with pytest.raises(ValueError, match="stall_epochs"):
        DynamicController(Q, stall_epochs=0)
    with pytest.raises(ValueError, match="interval"):
        GradNormChange(interval=0)
    with pytest.raises(ValueError, match="empty ladder"):
        ladder([])


def test_method_specs():
    assert parse_method("dynamic") is PRESETS["dynamic"]
    m = parse_method("dynamic:powersgd")
    assert m.dynamic and m.levels == LADDERS["powersgd"]
    m = parse_method("topk:ratio=0.05")
    assert not m.dynamic and m.levels == (Level.make("topk", ratio=0.05),)
    ctl = PRESETS["dynamic"].controller(acc_thresholds=(0.1,), stall_epochs=7, eta=3.0)
    assert ctl.triggers[0].acc_thresholds == (0.1,) and ctl.stall_epochs == 7
    assert [x.label for x in parse_methods("none, fp16 dynamic")] == ["none", "fp16", "dynamic"]
    two = parse_methods("none,topk:ratio=0.05,ef=0")  # a comma before key= continues the spec (commands' k=v,k=v)
    assert [x.levels[0] for x in two] == [Level.make("none"), Level.make("topk", ratio=0.05, ef=0)]
    assert parse_method("topk:ratio=0.05;ef=0").levels == two[1].levels
    with pytest.raises(ValueError, match="unknown compressor"):
        parse_method("nosuch:x=1")
    with pytest.raises(ValueError, match="twice"):
        parse_methods(["none", "none"])
