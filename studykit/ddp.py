"""Any studykit compressor inside PyTorch DDP, two ways (seed 000, Sec. 3 "Implementation Details"):

* overlapped with the backward pass, as a DDP communication hook::

      ddp = DistributedDataParallel(model)
      state = studykit.ddp.register(ddp, "powersgd", rank=4)
      ...; state.bytes_sent  # bytes this worker put into collectives so far

* after the backward pass (the paper's faster, non-overlapped variant), with a
  post-backward reducer on a plain (non-DDP) model::

      reducer = studykit.ddp.PostBackwardReducer(model, "topk", ratio=0.01)
      loss.backward(); reducer.reduce(); opt.step()

Both run the compressor's protocol through :class:`studykit.comm.TorchComm`, so they
work for any world size, any number of buckets, on NCCL and gloo. Each bucket's
gradients are handed to the compressor as the list of per-parameter tensors, so
layer-wise methods (PowerSGD's matrices, layer-scope TopK) see real layer shapes.
"""
from typing import Optional, Sequence, Union

import torch
import torch.distributed as dist

from studykit.comm import Communicator, RecordingComm, TorchComm
from studykit.compressors import Compressor, get

__all__ = ["HookState", "compressor_hook", "register", "PostBackwardReducer"]


class HookState:
    """What the hook carries between calls: the compressor (with its own state, e.g.
    error-feedback memory per bucket), the communicator and traffic counters."""

    def __init__(self, compressor: Compressor, comm: Optional[Communicator] = None, process_group=None):
        self.compressor = compressor
        self._comm = comm
        self.process_group = process_group
        self.bytes_sent = 0
        self.calls = 0
        #: parameters (by id) and shapes of each bucket index, as last seen
        self.bucket_params: dict = {}
        self.bucket_shapes: dict = {}

    @property
    def comm(self) -> Communicator:
        if self._comm is None:
            self._comm = TorchComm(self.process_group)
        return self._comm

    def __getstate__(self):  # DDP may pickle hook state; communicators are rebuilt
        d = dict(self.__dict__)
        d["_comm"] = None
        return d


def _views(flat: torch.Tensor, shapes: Sequence[torch.Size]) -> list[torch.Tensor]:
    out, i = [], 0
    for s in shapes:
        n = s.numel()
        out.append(flat[i:i + n].view(s))
        i += n
    return out


def _rekey(comp, key, old_ids: list, new_ids: list) -> None:
    """DDP rebuilds its buckets after the first iteration (forward order -> gradient-ready
    order), so a bucket index then holds its parameters in another order. Per-bucket state
    kept under that index must follow: error-feedback memory is permuted to the new order
    (or dropped if the bucket now holds other parameters); any other per-key state
    (e.g. PowerSGD's warm start) is dropped and rebuilt by the compressor."""
    mem = getattr(comp, "memory", None)
    if isinstance(mem, dict) and key in mem:
        if sorted(old_ids) == sorted(new_ids):
            by_id = dict(zip(old_ids, mem[key]))
            mem[key] = [by_id[i] for i in new_ids]
        else:
            del mem[key]
    st = getattr(comp, "state", None)
    if isinstance(st, dict):
        for k in [k for k in st if k == key or (isinstance(k, tuple) and key in k)]:
            del st[k]
    inner = getattr(comp, "inner", None)
    if inner is not None:
        _rekey(inner, key, old_ids, new_ids)


def compressor_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: compress-communicate-decompress one gradient bucket.

    Returns the bucket buffer holding the *average* gradient (DDP does not divide
    when a hook is registered).
    """
    buf = bucket.buffer()
    params = bucket.parameters()
    key = bucket.index()
    ids = [id(p) for p in params]
    old = state.bucket_params.get(key)
    if old is not None and old != ids:
        _rekey(state.compressor, key, old, ids)
    state.bucket_params[key] = ids
    shapes = [p.shape for p in params]
    state.bucket_shapes[key] = [tuple(s) for s in shapes]
    grads = _views(buf, shapes)
    rec = RecordingComm(state.comm)
    out = state.compressor.reduce(grads, rec, key=key)
    for g, o in zip(grads, out):
        g.copy_(o)
    state.bytes_sent += rec.nbytes
    state.calls += 1
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(buf)
    return fut


def register(ddp_model, compressor: Union[str, Compressor], process_group=None, **params) -> HookState:
    """Register ``compressor`` (a name with params, or an instance) as ``ddp_model``'s comm hook."""
    state = HookState(get(compressor, **params), process_group=process_group)
    ddp_model.register_comm_hook(state, compressor_hook)
    return state


class PostBackwardReducer:
    """Compress and aggregate all gradients after ``backward()`` (no overlap).

    Gradients are grouped into buckets of about ``bucket_bytes`` (in reverse
    parameter order, as DDP does); ``bucket_bytes=None`` puts all gradients in one
    bucket, the paper's non-overlapped implementation ("collect all the gradients
    in a single matrix", Sec. 3).
    """

    def __init__(self, model: torch.nn.Module, compressor: Union[str, Compressor], *,
                 bucket_bytes: Optional[int] = None, comm: Optional[Communicator] = None, **params):
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("PostBackwardReducer: the model has no trainable parameters")
        if bucket_bytes is not None and bucket_bytes <= 0:
            raise ValueError(f"PostBackwardReducer: bucket_bytes must be positive or None, got {bucket_bytes}")
        self.compressor = get(compressor, **params)
        self._comm = comm
        self.buckets = self._make_buckets(bucket_bytes)
        self.bytes_sent = 0
        self.calls = 0

    @property
    def comm(self) -> Communicator:
        if self._comm is None:
            self._comm = TorchComm()
        return self._comm

    def _make_buckets(self, bucket_bytes):
        rev = list(reversed(self.params))
        if bucket_bytes is None:
            return [rev]
        buckets, cur, size = [], [], 0
        for p in rev:
            cur.append(p)
            size += p.numel() * p.element_size()
            if size >= bucket_bytes:
                buckets.append(cur)
                cur, size = [], 0
        if cur:
            buckets.append(cur)
        return buckets

    def reduce(self) -> None:
        """Replace every ``p.grad`` with the compressed estimate of the workers' average."""
        for i, bucket in enumerate(self.buckets):
            grads = []
            for p in bucket:
                if p.grad is None:  # unused parameter: contributes zeros, like DDP
                    p.grad = torch.zeros_like(p)
                grads.append(p.grad)
            rec = RecordingComm(self.comm)
            out = self.compressor.reduce(grads, rec, key=i)
            for g, o in zip(grads, out):
                g.copy_(o)
            self.bytes_sent += rec.nbytes
        self.calls += 1
