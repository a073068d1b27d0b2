"""The post-backward reducer: a compressor's protocol over all gradients after ``backward()`` (:mod:`studykit.ddp`)."""
from typing import Optional, Union

import torch

from studykit.comm import Communicator, RecordingComm, make_comm
from studykit.compressors import Compressor
from studykit.compressors.base import copy_back
from studykit.ddp.hook import NonFinite, _check_kind, build, finite_policy

__all__ = ["PostBackwardReducer"]


class PostBackwardReducer:
    """Compress and aggregate all gradients after ``backward()`` (no overlap).

    Gradients are grouped into buckets of about ``bucket_bytes`` (in reverse
    parameter order, as DDP does); ``bucket_bytes=None`` puts all gradients in one
    bucket, the paper's non-overlapped implementation ("collect all the gradients
    in a single matrix", Sec. 3). ``comm_kind`` as for :class:`HookState`; ``check_finite`` as for
    :func:`studykit.ddp.register` (inf/NaN pass through by default, for ``torch.amp.GradScaler``).
    """

    def __init__(self, model: torch.nn.Module, compressor: Union[str, Compressor], *,
                 bucket_bytes: Optional[int] = None, comm: Optional[Communicator] = None,
                 comm_kind: str = "collective", check_finite: bool = False, **params):
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("PostBackwardReducer: the model has no trainable parameters")
        if bucket_bytes is not None and bucket_bytes <= 0:
            raise ValueError(f"PostBackwardReducer: bucket_bytes must be positive or None, got {bucket_bytes}")
        self.compressor = finite_policy(build(compressor, params, "PostBackwardReducer"), check_finite)
        self.nonfinite = NonFinite()
        self.comm_kind = _check_kind(comm_kind)
        self._comm = comm
        self.buckets = self._make_buckets(bucket_bytes)
        self.bytes_sent = 0
        self.calls = 0

    @property
    def comm(self) -> Communicator:
        if self._comm is None:
            self._comm = make_comm(self.comm_kind)
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
            bad = self.nonfinite.before(self.compressor, i, grads)
            copy_back(grads, self.compressor.reduce(grads, rec, key=i))
            self.nonfinite.after(self.compressor, i, grads, rec, bad)
            self.bytes_sent += rec.nbytes
        self.calls += 1
