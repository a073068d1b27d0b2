"""Any studykit compressor inside PyTorch DDP, two ways (Agarwal et al. 2022, Sec. 3 "Implementation Details"):

* overlapped with the backward pass, as a DDP communication hook::

      ddp = DistributedDataParallel(model)
      state = studykit.ddp.register(ddp, "powersgd", rank=4)
      ...; state.bytes_sent  # bytes this worker put into collectives so far

* after the backward pass (the paper's faster, non-overlapped variant), with a
  post-backward reducer on a plain (non-DDP) model::

      reducer = studykit.ddp.PostBackwardReducer(model, "topk", ratio=0.01)
      loss.backward(); reducer.reduce(); opt.step()

Both run the compressor's protocol through :class:`studykit.comm.TorchComm` (any world size,
any number of buckets, NCCL and gloo); ``comm_kind="ps"`` routes it through one parameter server
(:class:`studykit.comm.ParameterServerComm`; Agarwal et al. 2022 Sec. 2.2, Fig. 4). Layer-wise
methods (PowerSGD's matrices, layer-scope TopK) get each bucket as its per-parameter tensors.

The hook never blocks the backward pass (``overlap=True``, the default): it hands the bucket
to one communication thread per DDP model and returns a future at once. That thread runs the
whole protocol (encode, every collective round, decode) in bucket order, on a CUDA stream of
its own that first waits for the bucket's gradients, and completes the bucket's future when
its decode is done; DDP waits for all futures at the end of the backward pass. A protocol of
one all-reduce round (``Compressor.one_round_allreduce``: fp16, bf16, none) skips the thread
as PyTorch's own hooks do: encode on the current stream, ``all_reduce(..., async_op=True)``,
decode in the future's callback (the graph runner captures it as it captures the others).
``overlap=False`` runs the protocol inside the hook (the old, blocking behaviour: on NCCL every
collective then makes the backward pass's stream wait for it).

``runner="graph"`` (CUDA) takes the protocol off the communication thread once DDP has settled its buckets: each
bucket's protocol is captured as a CUDA graph (with its collectives) the ``CAPTURE_AFTER``-th time the bucket comes
with the same parameters and buffer, in DDP's callback while the thread is idle, and from then on replayed there: one
graph launch and the bucket's future per bucket, about as much host work as PyTorch's own hooks do (0.1-0.4 ms a
bucket on a lent H200's host, ``data/measurements/hook_runner/h200_p1_host/``). A protocol whose replay would not be
its next call (random numbers seeded on the host, state replaced by new tensors) or that cannot be captured (it waits
for the device) keeps running on the thread; a rebuilt bucket, a swapped compressor or an overflow's forgotten state
is captured again.

``coalesce_mb`` (overlapped hooks) holds buckets back until at least that many MB of them, or the iteration's
last bucket, are ready, and runs the protocol once over all of them: a protocol of small, latency-bound
collectives (PowerSGD's P and Q, a few KB per bucket) then pays each collective's latency once per group instead
of once per bucket, at the price of less overlap. With ``runner="graph"`` a group is captured and replayed as one
CUDA graph, as a bucket is.

DDP's defaults cost the hook what the post-backward path on the plain model does not pay: it copies each
bucket's average into the gradients and broadcasts the model's buffers at every forward. Build the model with
``DistributedDataParallel(model, gradient_as_bucket_view=True, broadcast_buffers=False)`` (docs/usage.md says
when the buffer broadcast must stay).

Mixed precision: inf/NaN gradients pass through without a host synchronisation, as with PyTorch's own hooks,
so that ``torch.amp.GradScaler`` finds them and skips the step: a bucket that held one on any worker holds
one in every worker's average. Most protocols carry them by their arithmetic (``Compressor.keeps_nonfinite``);
for those that may drop them (random or sampled selection, an SVD) the bucket is sent as zeros and a
one-element flag, all-reduced after the protocol, makes its first element NaN. Error-feedback memory and
per-bucket state (PowerSGD's warm start) that a non-finite result poisoned are forgotten at the bucket's next
call (:class:`NonFinite`). ``check_finite=True`` checks every bucket and raises instead: a host synchronisation
per bucket. ``start_iter=N`` averages the buckets by a plain all-reduce for the first N iterations (counted
at each iteration's last bucket), then compresses, as PyTorch's PowerSGD hook does (``start_powerSGD_iter``).
"""
from studykit.ddp.hook import RUNNERS, HookState, NonFinite, compressor_hook, register
from studykit.ddp.post import PostBackwardReducer

__all__ = ["HookState", "NonFinite", "RUNNERS", "compressor_hook", "register", "PostBackwardReducer"]
