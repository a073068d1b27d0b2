"""What ``python -m studykit advise`` prints: a verdict in words per grid point
(:func:`verdict_text`), and the whole answer (:func:`format_advice`): the verdicts, the legend, then one
ranking table per (world size, bandwidth)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from studykit.perfmodel.advise.candidates import MODE_WORDS, SYNC

if TYPE_CHECKING:
    from studykit.perfmodel.advise.verdicts import Advice


def _x(v: float) -> str:
    return "-" if not np.isfinite(v) else f"{v:.1f}x" if v >= 2 else f"{v:.2f}x"


def verdict_text(advice: Advice, v: dict) -> str:
    """One grid point's answer in words, from :meth:`Advice.verdict_data`'s data ``v``."""
    where = f"On {v['world_size']} GPUs at {v['bandwidth_gbps']:g} Gbit/s, "
    if v["winner"] is not None:
        c = v["crossover_gbps"]
        tail = (f"it stops paying above {v['crossover']}" if c is not None
                else f"it pays at every bandwidth up to {advice.crossover_top_gbps:g} Gbit/s")
        winner = v["winner"].removesuffix(f" ({v['mode']})")  # ranked both ways: the words say which
        return (f"{where}{winner} ({MODE_WORDS.get(v['mode'], v['mode'])}) is predicted "
                f"{_x(v['speedup_over_syncsgd'])} faster than syncSGD and {_x(v['speedup_over_fp16'])} faster "
                f"than the fp16 baseline (+-{100 * v['model_error']:.0f} %); {tail}.")
    base = "syncSGD" if v["best_baseline"] == SYNC else "the fp16 baseline"
    if v.get("intervals_decide"):
        own = v["speedup_over_syncsgd"] if v["best_baseline"] == SYNC else v["speedup_over_fp16"]
        return (f"{where}the calibration cannot decide: {v['candidate']} is predicted {_x(own)} faster than {base}, "
                f"by more than the model's error, but the calibration's intervals overlap; until records determine "
                f"its constants better, use {base}.")
    text = f"{where}no compressor is predicted faster than {base} beyond the model's error; use {base}"
    if v["candidate"] is not None:
        own = v["speedup_over_syncsgd"] if v["best_baseline"] == SYNC else v["speedup_over_fp16"]
        if own > 1:
            text += f" ({v['candidate']} is predicted {_x(own)} faster, within the model's error)"
    return text + "."


def format_advice(advice: Advice, top: int | None = None) -> str:
    """The human answer (:meth:`Advice.format`): one verdict per (world size, bandwidth), the legend,
    then one table per point. ``top``: the first ``top`` compressors of each ranking, and both
    baselines always."""
    i = advice.inputs
    errs = sorted(set(zip(advice.error_groups, advice.error.tolist())))
    modes = i["mode"].split(" and ")
    hooks = "hook" in modes
    how = {"post": "after the backward pass (App. B)", "hook": f"as DDP hooks, priced {i.get('hook_terms')}"}
    lines = [v["text"] for v in advice.verdicts()]
    lines += ["",
              f"{i['model']}, batch {i['batch_size']} per GPU, calibration {i['calibration']!r}, compressors "
              + (" and ".join(how[m] for m in modes) + (" (each both ways: '(post)', '(hook)')" if len(modes) > 1
                                                         else "")),
              f"time: predicted iteration time (ms) = overhead O + T_obs; O: {i.get('overhead')}"
              + (f"; compute {i['compute_speedup']:g}x faster (T_comp, T_encode_decode divided)"
                 if i.get("compute_speedup", 1.0) != 1.0 else ""),
              "baselines: syncSGD (Sec. 4.1) and the fp16 baseline (DDP's fp16 compress hook: Sec. 4.1 in half "
              "precision, plus the casts)" + ("; fp16 / bf16 as hooks are priced as that hook in their dtype"
                                              if hooks else ""),
              "interval: the model at both ends of every calibrated interval"
              + (f" (taken as exact: {', '.join(advice.exact_constants)})" if advice.exact_constants else ""),
              f"'~' : cannot be told from the fastest (the intervals, widened by the model's error, overlap); "
              f"+-: the model's error ({i['model_error']}: "
              + ", ".join(f"{'syncSGD and the all-reduce hooks' if g == SYNC else g} {100 * e:.1f} %"
                          + (f" (from {i['model_error_hook']})" if g == "compressors (hook)" and
                             i.get("model_error_hook") else "") for g, e in errs) + ")",
              "x sync, x fp16: speed-up over syncSGD, over the fp16 baseline (> 1: faster); stops above: the "
              "bandwidth above which the row no longer beats the best baseline on that many GPUs",
              "none: the identity compressor through the compression path (the fp32 gradient, unchanged): "
              "its gap to syncSGD is what the path itself costs; never the verdict",
              "accuracy: time-to-accuracy runs in data/training/ (the kit's small tasks, not this model)"]
    scaled = sorted({h.split("scaled by parameter count from ", 1)[1].split(" (")[0]
                     for h in (v.get("t_encode_decode", "") for v in advice.how.values())
                     if "scaled by parameter count from " in h})
    if scaled:  # the calibration has no profile of this model: say where its codec times come from
        lines.append(f"encode/decode: not profiled on {i['model']}: scaled by parameter count from "
                     f"{', '.join(scaled)} (python -m studykit profile --model {i['model']} measures them)")
    w = max(len(c.label) for c in advice.candidates)
    for b in advice.bandwidths_gbps:
        for p in advice.world_sizes:
            rows = advice.ranking(int(p), float(b))
            keep = {r["candidate"] for r in [r for r in rows if r["kind"] == "compressor"][:top]}
            shown = [r for r in rows if not top or r["candidate"] in keep or r["kind"] != "compressor"]
            lines += ["", f"{int(p)} GPUs, {b:g} Gbit/s",
                      f"{'rank':>4}  {'candidate':<{w}}  {'ms':>9}  {'interval ms':>19}     {'x sync':>6}  "
                      f"{'x fp16':>6}  {'stops above':>16}  accuracy evidence"]
            for r in shown:
                lines.append(f"{r['rank']:>4}  {r['candidate']:<{w}}  {r['iteration_ms']:>9.1f}  "
                             f"[{r['low_ms']:>8.1f}, {r['high_ms']:>8.1f}]  "
                             f"{'~' if r['within_error_of_best'] else ' '}  {_x(r['speedup_over_syncsgd']):>6}  "
                             f"{_x(r['speedup_over_fp16']):>6}  {r['crossover'] or '':>16}  "
                             f"{r['accuracy_evidence']}")
            bits = [r for r in shown if r["kind"] == "compressor" and _integer_sum(advice, r["candidate"])]
            if bits:
                lines.append(f"bits per element on the link at {int(p)} GPUs (an integer sum of {int(p)} "
                             "workers needs wider fields): " + ", ".join(
                                 f"{r['candidate']} {r['bits_per_element']:.1f}"
                                 + (f" (summed in {r['summed_in']}"
                                    + (", as many as fp16)" if r["bits_per_element"] >= 16 - 1e-6 else ")")
                                    if r["summed_in"] else " (gathered)") for r in bits))
    if advice.unranked:
        no_ted = [k for k, v in advice.unranked.items() if "no T_encode_decode" in v]
        lines += ["", "not ranked:"]
        if no_ted:
            lines.append(f"  {', '.join(no_ted)}: calibration {i['calibration']!r} has no T_encode_decode of these "
                         f"on {i['model']}; measure them (python -m studykit profile) and fit a calibration")
        lines += [f"  {k}: {v}" for k, v in advice.unranked.items() if k not in no_ted]
    return "\n".join(lines)


def _integer_sum(advice: Advice, label: str) -> bool:
    """Whether the candidate sums its payload in an integer type at some world size of the grid."""
    return any(w["summed_in"] for w in advice.wire.get(label, {}).values())
