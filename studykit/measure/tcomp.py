"""``tcomp``: single-device forward+backward and backward-only time (T_comp).

Agarwal et al. 2022, App. C: "we calculate just the time taken for backward pass on a
single machine this forms T_comp in the performance model". ``bwd`` times
``loss.backward()`` alone (the forward runs untimed before each iteration);
``fwd_bwd`` times forward + loss + backward. Gradients are reset (set to None)
untimed before every iteration.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch

from studykit import models as M
from studykit.measure.records import RecordWriter, config_id, make_record
from studykit.measure.runtime import note, progress
from studykit.measure.timing import time_fn

__all__ = ["PHASES", "run_tcomp"]

PHASES = ("fwd_bwd", "bwd")


def run_tcomp(model_names: Sequence[str], batch_sizes: Sequence[int], writer: RecordWriter, *,
              device: torch.device, phases: Sequence[str] = PHASES, seq_len: int = M.BERT_SEQ_LEN,
              n_iter: int = 50, n_warmup: int = 10, budget_s: Optional[float] = None, min_iter: int = 3,
              verbose: bool = True) -> int:
    """Time every (model, batch size, phase) not yet in ``writer``'s file; returns records written."""
    device = torch.device(device)
    done = writer.done()
    timing_kw = dict(n_iter=n_iter, n_warmup=n_warmup, budget_s=budget_s, min_iter=min_iter)
    todo = []
    for model in model_names:
        for bs in batch_sizes:
            for phase in phases:
                sl = M.seq_len_of(model, seq_len)
                cid = config_id(kind="tcomp", model=model, batch_size=bs, phase=phase, seq_len=sl, world_size=1,
                                device_type=device.type)
                if cid not in done:
                    todo.append((model, bs, phase, sl, cid))
    written = 0
    net, net_name = None, None
    for model, bs, phase, sl, cid in progress(todo, total=len(todo), desc="tcomp", enabled=verbose):
        fields = dict(model=model, batch_size=bs, phase=phase, seq_len=sl)
        try:
            if net_name != model:
                net = None
                torch.manual_seed(0)
                net = M.build(model).to(device).train()
                net_name = model
            batch = M.example_batch(model, bs, device, seq_len=sl or M.BERT_SEQ_LEN)
            held = {}

            def zero():
                net.zero_grad(set_to_none=True)

            def forward():
                zero()
                held["loss"] = M.loss(model, net, batch)

            if phase == "bwd":
                t = time_fn(lambda: held.pop("loss").backward(), device=device, setup=forward, **timing_kw)
            else:
                t = time_fn(lambda: M.loss(model, net, batch).backward(), device=device, setup=zero, **timing_kw)
            if not M.is_builtin(model):
                fields["param_shapes"] = [list(s) for s in M.param_shapes(model)]
            rec = make_record("tcomp", cid, device=device, timing=t, **fields)
        except ModuleNotFoundError as exc:  # torchvision / transformers missing here: not measurable
            rec = make_record("tcomp", cid, device=device, status="skipped", reason=str(exc), **fields)
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory at a large batch
            if device.type == "cuda":
                torch.cuda.empty_cache()
            rec = make_record("tcomp", cid, device=device, status="error", reason=f"{type(exc).__name__}: {exc}"[:500],
                              **fields)
        batch = held = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
        writer.write(rec)
        written += 1
        msg = f"{rec['ms_mean']:9.3f} ms (n={rec['n_iter']})" if rec["status"] == "ok" else \
            f"{rec['status'].upper()} {rec['reason'][:80]}"
        note(f"{model:>10} batch {bs:<4} {phase:<8} {msg}", verbose)
    return written
