"""Before/after timings of a change to the kit's codecs and hooks: run once per version of the kit, on one GPU.

    PYTHONPATH=build/bench_base python3 benchmarks/before_after.py --label before --out before.jsonl
    python3 benchmarks/before_after.py --label after --out after.jsonl

``build/bench_base`` holds the kit as committed before the change (``git archive HEAD studykit``).
Only APIs both versions have are used: ``compressors.get/reduce``, ``models``, ``ddp.register``
and the one timing helper, ``studykit.measure.timing.time_fn`` (of the version under test).

Measures (one JSON line each): every codec's ``reduce`` on the flat ResNet-50 gradient with
error feedback off (encode+decode, world size 1); PowerSGD rank 4 on ResNet-50's real shapes
with and without error feedback; and a DDP iteration of ResNet-50 (batch 64) in a process group
of ONE (no network: what the hook path itself costs next to plain DDP) for syncSGD, the kit's
none/fp16/bf16/powersgd hooks and PyTorch's fp16/bf16/PowerSGD hooks.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch

import studykit
from studykit import compressors as C
from studykit import models as M
from studykit.comm import LocalComm
from studykit.measure.timing import time_fn

CODECS = ["none", "fp16", "bf16", "signsgd", "ef_signsgd", "qsgd", "terngrad", "quantize", "natural", "thc",
          "topk", "topk_chunked", "mstopk", "dgc", "randomk"]


def emit(f, **rec):
    rec.update(torch=torch.__version__, gpu=torch.cuda.get_device_name(0), kit=os.path.dirname(studykit.__file__))
    line = json.dumps(rec)
    f.write(line + "\n")
    f.flush()
    print(line, flush=True)


def codecs(f, label, dev, iters):
    shapes = [tuple(s) for s in M.param_shapes("resnet50")]
    numel = sum(math.prod(s) for s in shapes)
    flat = torch.randn(numel, device=dev, generator=torch.Generator(device=dev).manual_seed(0))
    per = [p.view(s).clone() for p, s in zip(flat.split([math.prod(s) for s in shapes]), shapes)]
    src = torch.ones(64 * 2**20, device=dev)
    dst = torch.empty_like(src)
    t = time_fn(lambda: dst.copy_(src), device=dev, n_iter=iters, n_warmup=5)
    gbps = 2 * src.numel() * 4 / (t.ms_median * 1e-3) / 1e9
    floor = 8 * numel / (gbps * 1e9) * 1e3
    emit(f, label=label, what="copy_bw", GBps=gbps, floor_ms=floor)
    del src, dst
    jobs = [(n, {"error_feedback": False}, [flat], "flat") for n in CODECS]
    jobs += [("powersgd", {"rank": 4, "error_feedback": False}, per, "per_tensor"),
             ("powersgd", {"rank": 4}, per, "per_tensor")]
    for name, kw, grads, layout in jobs:
        try:
            comp = C.get(name, allow_nonfinite=True, **kw)
            fn = (lambda c=comp, g=grads: c.reduce(g, LocalComm(), key=0))
            t = time_fn(fn, device=dev, n_iter=iters, n_warmup=5, budget_s=1.0)
            emit(f, label=label, what="codec", compressor=name, params=kw, layout=layout, ms=t.ms_median,
                 x_floor=t.ms_median / floor, n=t.n_iter)
        except Exception as exc:  # noqa: BLE001
            emit(f, label=label, what="codec", compressor=name, params=kw, error=repr(exc)[:300])


def ddp_one(f, label, dev, iters):
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from studykit import ddp as sk_ddp

    if not dist.is_initialized():
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    torch.manual_seed(0)
    base = M.build("resnet50").to(dev).train()
    batch = M.example_batch("resnet50", 64, dev)
    import copy

    configs = [("syncsgd", None), ("hook", "none"), ("hook", "fp16"), ("hook", "bf16"), ("hook", "powersgd"),
               ("builtin", "torch_fp16"), ("builtin", "torch_bf16"), ("builtin", "torch_powersgd")]
    for mode, name in configs:
        net = copy.deepcopy(base)
        model = DDP(net, device_ids=[dev.index])
        if mode == "hook":
            sk_ddp.register(model, C.get(name, allow_nonfinite=True, **({"rank": 4} if name == "powersgd" else {})))
        elif name == "torch_fp16":
            model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        elif name == "torch_bf16":
            model.register_comm_hook(None, default_hooks.bf16_compress_hook)
        elif name == "torch_powersgd":
            st = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=4, start_powerSGD_iter=2)
            model.register_comm_hook(st, powerSGD_hook.powerSGD_hook)
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

        def step():
            opt.zero_grad(set_to_none=True)
            M.loss("resnet50", model, batch).backward()
            opt.step()

        for _ in range(3):
            step()
        t = time_fn(step, device=dev, n_iter=iters, n_warmup=5)
        emit(f, label=label, what="ddp_ws1", mode=mode, compressor=name, ms=t.ms_median, ms_min=t.ms_min, n=t.n_iter)
        del model, net, opt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--parts", nargs="+", default=["codecs", "ddp"])
    a = ap.parse_args()
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    with open(a.out, "a") as f:
        t0 = time.time()
        if "codecs" in a.parts:
            codecs(f, a.label, dev, a.iters)
        if "ddp" in a.parts:
            ddp_one(f, a.label, dev, a.iters)
        print(f"{a.label}: {time.time() - t0:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
