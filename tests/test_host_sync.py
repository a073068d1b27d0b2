"""Codecs as a DDP hook calls them must never make the host wait for the GPU: a hook that synchronises cannot
queue the rest of the backward pass. On an H200, timing PowerSGD rank 32 and DGC (BERT-base) bucket by bucket
with the host ahead of the GPU failed because the host waited inside the call
(data/measurements/gpu_checks_h200b/README.md). These GPU tests fail on any synchronising operation
(``torch.cuda.set_sync_debug_mode("error")``) after each key's first call, and name it in the traceback."""
import pytest
import torch

from studykit import compressors as C
from studykit import models
from studykit.comm import LocalComm
from studykit.compressors.base import copy_back
from studykit.measure.profile import ddp_bucket_grads

CASES = [("resnet50", "powersgd", {"rank": 4}), ("resnet50", "powersgd", {"rank": 32}),
         ("bert_base", "powersgd", {"rank": 32}), ("bert_base", "dgc", {"ratio": 0.01}),
         ("resnet50", "dgc", {"ratio": 0.01}), ("bert_base", "topk", {"ratio": 0.01}),
         ("bert_base", "powersgd", {"rank": 32, "orthogonalize": "cholesky"})]
#: every other codec a hook runs, on ResNet-50's gradient (ATOMO's SVDs wait for the device: the hook keeps it on
#: its thread, and the graph runner cannot replay it)
CASES += [("resnet50", name, {}) for name in ("none", "fp16", "bf16", "signsgd", "ef_signsgd", "natural", "qsgd",
                                               "quantize", "terngrad", "thc", "randomk", "mstopk", "topk_chunked",
                                               "topk_chunked_allreduce")]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("model, name, params", CASES, ids=[f"{m}-{n}-{p}" for m, n, p in CASES])
def test_whole_gradient_and_bucket_by_bucket_never_wait_for_the_gpu(model, name, params):
    torch.manual_seed(0)
    grads = [torch.randn(s, device="cuda") for s in models.param_shapes(model)]
    comp = C.get(name, allow_nonfinite=True, **params)
    comm = LocalComm()
    buckets = ddp_bucket_grads(grads)

    def whole_and_buckets():
        comp.reduce(grads, comm, key="whole")
        for i, (buf, views) in enumerate(buckets):
            if comp.partition_invariant:
                comp.reduce(buf, comm, key=i)
            else:
                copy_back(views, comp.reduce(views, comm, key=i))

    whole_and_buckets()  # each key's first call builds its workspace (a host-to-device index copy is allowed)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        whole_and_buckets()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
