"""The DDP communication hook and its state (the package docstring, :mod:`studykit.ddp`, tells how it works)."""
import contextlib
import queue
import threading
from typing import Callable, Optional, Sequence, Union

import torch
import torch.distributed as dist

from studykit.comm import COMM_KINDS, Communicator, RecordingComm, make_comm
from studykit.compressors import Compressor, get
from studykit.compressors.base import _shares_memory, copy_back, views

__all__ = ["HookState", "compressor_hook", "register"]


class HookState:
    """What the hook carries between calls: the compressor (with its own state, e.g.
    error-feedback memory per bucket), the communicator and traffic counters.

    ``comm_kind``: how the protocol's collectives cross workers when no ``comm`` is given, a key of
    :data:`studykit.comm.COMM_KINDS` ("collective": the backend's own; "ps": one parameter server)."""

    def __init__(self, compressor: Compressor, comm: Optional[Communicator] = None, process_group=None,
                 overlap: bool = True, comm_kind: str = "collective", coalesce_mb: Optional[float] = None):
        self.compressor = compressor
        self.comm_kind = _check_kind(comm_kind)
        self.coalesce_bytes = _check_coalesce(coalesce_mb, overlap)
        #: buckets waiting to be coalesced (``coalesce_mb``): (buffer, index, ids, shapes, future, ready event)
        self._pending: list = []
        self._comm = comm
        self.process_group = process_group
        self.overlap = overlap
        self.bytes_sent = 0
        self.calls = 0
        #: parameters (by id) and shapes of each bucket index, as last seen
        self.bucket_params: dict = {}
        self.bucket_shapes: dict = {}
        self._worker: Optional[_CommThread] = None
        self._streams: dict = {}

    def worker(self) -> "_CommThread":
        """The communication thread (started on first use)."""
        if self._worker is None or not self._worker.alive:
            self._worker = _CommThread()
        return self._worker

    def side_stream(self, device: torch.device):
        """This state's CUDA stream on ``device`` for the protocol (one per device)."""
        if device not in self._streams:
            self._streams[device] = torch.cuda.Stream(device=device)
        return self._streams[device]

    @property
    def comm(self) -> Communicator:
        if self._comm is None:
            self._comm = make_comm(self.comm_kind, self.process_group)
        return self._comm

    def close(self) -> None:
        """Stop the communication thread (it finishes the buckets already handed to it)."""
        if getattr(self, "_worker", None) is not None:
            self._worker.stop()
            self._worker = None

    __del__ = close  # a discarded state must not leave its idle thread behind

    def __getstate__(self):  # DDP may pickle hook state; communicators, threads and streams are rebuilt
        d = dict(self.__dict__)
        d["_comm"] = None
        d["_worker"] = None
        d["_streams"] = {}
        d["_pending"] = []
        return d


def _check_coalesce(coalesce_mb: Optional[float], overlap: bool) -> Optional[float]:
    """``coalesce_mb`` in bytes (None: every bucket runs its protocol on its own)."""
    if coalesce_mb is None:
        return None
    if isinstance(coalesce_mb, bool) or not isinstance(coalesce_mb, (int, float)) or not coalesce_mb >= 0 \
            or coalesce_mb == float("inf"):
        raise ValueError(f"coalesce_mb must be a finite number of MB >= 0 (0: all buckets of an iteration in one "
                         f"protocol run) or None (each bucket alone), got {coalesce_mb!r}")
    if not overlap:
        raise ValueError("coalesce_mb needs overlap=True: the blocking hook runs each bucket's protocol inside the hook")
    return float(coalesce_mb) * 2**20


def _check_kind(kind: str) -> str:
    if kind not in COMM_KINDS:
        raise ValueError(f"comm_kind must be one of {', '.join(COMM_KINDS)}, got {kind!r}")
    return kind


class _CommThread:
    """One daemon thread that runs submitted jobs in order and completes their futures.

    Every rank submits its buckets in the same order (DDP's), and one thread runs them one after
    the other, so the collectives of consecutive buckets are issued in the same order on every rank.
    """

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="studykit-ddp-comm", daemon=True)
        self._thread.start()

    alive = property(lambda self: self._thread.is_alive())

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()
            job = None  # drop the closure (and the hook state it holds) while waiting for the next

    def stop(self) -> None:
        self._jobs.put(None)


def _rekey(comp, key, old_ids: list, new_ids: list, old_shapes: Optional[list] = None) -> None:
    """DDP rebuilds its buckets after the first iteration (forward order -> gradient-ready
    order), so a bucket index then holds its parameters in another order. Per-bucket state
    kept under that index must follow: error-feedback memory is permuted to the new order
    (or dropped if the bucket now holds other parameters); any other per-key state
    (e.g. PowerSGD's warm start) is dropped and rebuilt by the compressor. Memory kept as
    one flat tensor for the whole bucket (partition-invariant compressors get the bucket
    whole) is cut by the old shapes, permuted, and joined again (:meth:`ResidualMemory.permute`)."""
    if comp.memory is not None:
        comp.memory.permute(key, old_ids, new_ids, old_shapes)
    for k in [k for k in comp.state if k == key or (isinstance(k, tuple) and key in k)]:
        del comp.state[k]


def compressor_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: compress-communicate-decompress one gradient bucket.

    The future's value is a tensor shaped like the bucket buffer holding the *average*
    gradient (DDP does not divide when a hook is registered; it copies the result into the
    gradients). With ``state.overlap`` the protocol runs on the communication thread and
    this returns at once (module docstring); otherwise it runs here, before returning.

    A partition-invariant compressor (its result depends only on the concatenated gradient:
    single-round codecs, quantize, THC, global top-k) gets the bucket buffer whole, as one flat
    tensor; layer-wise methods (PowerSGD, ATOMO, layer-scope top-k) the per-parameter views.
    """
    buf = bucket.buffer()
    params = bucket.parameters()
    key = bucket.index()
    ids = [id(p) for p in params]
    shapes = [p.shape for p in params]
    cuda = buf.is_cuda
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future(devices=[buf.device] if cuda else None)
    if not state.overlap:
        fut.set_result(_reduce_bucket(state, buf, key, ids, shapes))
        return fut
    comm = state.comm  # built here, in the caller's thread
    if state.compressor.one_round_allreduce and state.coalesce_bytes is None and hasattr(comm, "all_reduce_async"):
        _track(state, key, ids, shapes)
        return _reduce_async(state, buf, comm)
    ready = consumer = None
    if cuda:
        ready = torch.cuda.Event()
        consumer = torch.cuda.current_stream(buf.device)
        ready.record(consumer)  # the bucket's gradients are in buf once this stream gets here
    if state.coalesce_bytes is not None:
        state._pending.append((buf, key, ids, shapes, fut, ready))
        waiting = sum(b.numel() * b.element_size() for b, *_ in state._pending)
        if bucket.is_last() or 0 < state.coalesce_bytes <= waiting:
            group, state._pending = state._pending, []
            state.worker().submit(lambda: _run_group(state, group, comm))
        return fut

    def job():
        try:
            with torch.no_grad():
                if cuda:
                    side = state.side_stream(buf.device)
                    with torch.cuda.device(buf.device), torch.cuda.stream(side):
                        side.wait_event(ready)
                        out = _reduce_bucket(state, buf, key, ids, shapes, comm)
                        if out.data_ptr() != buf.data_ptr():
                            out.record_stream(consumer)  # DDP reads it on its own stream
                        fut.set_result(out)  # records an event on `side`: DDP's wait() waits for it
                else:
                    fut.set_result(_reduce_bucket(state, buf, key, ids, shapes, comm))
        except BaseException as exc:  # noqa: BLE001 - DDP raises it at the end of the backward pass
            fut.set_exception(exc)

    state.worker().submit(job)
    return fut


def _run_group(state: HookState, group: list, comm) -> None:
    """The protocol once over several buckets (``coalesce_mb``; on the communication thread): their gradients
    as one call of the compressor, under the key ``("group", index, ...)``, then each bucket's future."""
    buf = group[0][0]
    try:
        with torch.no_grad(), contextlib.ExitStack() as on_side:
            if buf.is_cuda:  # the protocol on the side stream, after every bucket's gradients
                side = state.side_stream(buf.device)
                on_side.enter_context(torch.cuda.device(buf.device))
                on_side.enter_context(torch.cuda.stream(side))
                for *_, ready in group:
                    side.wait_event(ready)
            _reduce_group(state, group, comm)
            for b, *_, fut, _ in group:
                fut.set_result(b)  # on CUDA: records an event on `side`, which DDP's wait() waits for
    except BaseException as exc:  # noqa: BLE001 - DDP raises it at the end of the backward pass
        for *_, fut, _ in group:
            fut.set_exception(exc)


def _reduce_group(state: HookState, group: list, comm) -> None:
    """The protocol on the buckets of ``group`` together, each result written back into its bucket. A bucket
    whose parameters changed (DDP rebuilt its buckets) drops the group's state (warm start, residual)."""
    comp = state.compressor
    changed = False
    for b, key, ids, shapes, *_ in group:
        changed |= state.bucket_params.get(key, ids) != ids
        _track(state, key, ids, shapes)
    gkey = ("group",) + tuple(key for _, key, *_ in group)
    if changed and comp.memory is not None:
        for k in [k for k in comp.memory.residuals if isinstance(k, tuple) and k[:1] == ("group",)
                  and set(k[1:]) & {key for _, key, *_ in group}]:
            comp.memory.forget(k)
    rec = RecordingComm(comm)
    if comp.partition_invariant:
        bufs = [b for b, *_ in group]
        outs = comp.reduce(bufs, rec, key=gkey)
        for b, o in zip(bufs, outs):
            if o.data_ptr() != b.data_ptr():
                b.copy_(o.reshape(b.shape))
    else:
        grads = [v for b, _, _, shapes, *_ in group for v in views(b, shapes)]
        copy_back(grads, comp.reduce(grads, rec, key=gkey))
    state.bytes_sent += rec.nbytes
    state.calls += 1


def _track(state: HookState, key: int, ids: list, shapes: list) -> None:
    """Which parameters (and shapes) bucket ``key`` holds now; per-bucket state follows a rebuild (:func:`_rekey`)."""
    old = state.bucket_params.get(key)
    if old is not None and old != ids:
        _rekey(state.compressor, key, old, ids, state.bucket_shapes.get(key))
    state.bucket_params[key], state.bucket_shapes[key] = ids, [tuple(s) for s in shapes]


def _reduce_async(state: HookState, buf: torch.Tensor, comm) -> torch.futures.Future[torch.Tensor]:
    """A one-round all-reduce protocol without the thread: encode here, all-reduce every payload
    asynchronously, decode (into ``buf``) in the callback. On CUDA the NaN/Inf check (a host sync, which
    here would stall the backward pass) moves to the callback, on the summed payloads."""
    comp, cuda = state.compressor, buf.is_cuda
    with torch.no_grad():
        if not cuda:
            comp.check([buf])
        payload, ctx = comp.compress(buf, comm.world_size)
        payload = [x.clone() if _shares_memory(x, buf) else x.contiguous() for x in payload]
        futs = [comm.all_reduce_async(x) for x in payload]
    state.bytes_sent += sum(x.numel() * x.element_size() for x in payload)
    state.calls, comp.step = state.calls + 1, comp.step + 1

    def decode(_):
        with torch.no_grad():
            summed = [f.value()[0] for f in futs]
            if cuda:
                comp.check(summed)
            return comp.decompress_mean_into(summed, ctx, comm.world_size, buf)
    return (futs[0] if len(futs) == 1 else torch.futures.collect_all(futs)).then(decode)


def _reduce_bucket(state: HookState, buf: torch.Tensor, key: int, ids: list, shapes: list,
                   comm: Optional[Communicator] = None) -> torch.Tensor:
    """The protocol on one bucket (every round); returns the average gradient, shaped like ``buf``."""
    _track(state, key, ids, shapes)
    rec = RecordingComm(comm if comm is not None else state.comm)
    comp = state.compressor
    if comp.partition_invariant:
        out = comp.reduce(buf, rec, key=key)
        if out.shape != buf.shape or out.dtype != buf.dtype or not out.is_contiguous():
            buf.copy_(out)
            out = buf
    else:
        grads = views(buf, shapes)
        copy_back(grads, comp.reduce(grads, rec, key=key))
        out = buf
    state.bytes_sent += rec.nbytes
    state.calls += 1
    return out


def register(ddp_model, compressor: Union[str, Compressor], process_group=None, overlap: bool = True,
             comm_kind: str = "collective", coalesce_mb: Optional[float] = None, **params) -> HookState:
    """Register ``compressor`` (a name with params, or an instance) as ``ddp_model``'s comm hook.

    ``overlap=False`` runs each bucket's protocol inside the hook, blocking the backward pass;
    ``comm_kind="ps"`` through one parameter server (:class:`HookState`). ``coalesce_mb``: buckets wait
    until at least that many MB of them (or the iteration's last bucket) are ready and run the protocol
    together, as one call of the compressor (0: once per iteration, after the backward pass's last bucket):
    fewer collectives, each bigger, for protocols whose small payloads are latency-bound (PowerSGD)."""
    state = HookState(get(compressor, **params), process_group=process_group, overlap=overlap, comm_kind=comm_kind,
                      coalesce_mb=coalesce_mb)
    ddp_model.register_comm_hook(state, compressor_hook)
    return state
