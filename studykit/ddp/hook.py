"""The DDP communication hook and its state (the package docstring, :mod:`studykit.ddp`, tells how it works)."""
import contextlib
import numbers
import queue
import threading
from typing import Callable, Optional, Sequence, Union

import torch
import torch.distributed as dist

from studykit.comm import COMM_KINDS, Communicator, RecordingComm, make_comm
from studykit.compressors import Compressor, get
from studykit.compressors._fast.common import settle_generators
from studykit.compressors.base import _shares_memory, all_finite, copy_back, views
from studykit.compressors.registry import as_bool

__all__ = ["HookState", "NonFinite", "RUNNERS", "compressor_hook", "register"]

#: how an overlapped hook runs a multi-round protocol (:func:`register`)
RUNNERS = ("thread", "graph")
#: calls of a bucket with the same parameters and buffer before the graph runner captures it
CAPTURE_AFTER = 3


class HookState:
    """What the hook carries between calls: the compressor (with its own state, e.g.
    error-feedback memory per bucket), the communicator and traffic counters.

    ``comm_kind``: how the protocol's collectives cross workers when no ``comm`` is given, a key of
    :data:`studykit.comm.COMM_KINDS` ("collective": the backend's own; "ps": one parameter server).
    ``check_finite``, ``start_iter`` and ``runner`` as for :func:`register` (``check_finite`` sets the compressor's
    ``allow_nonfinite``). The boolean keywords (``overlap``, ``check_finite``, ``find_unused_parameters``) take a
    bool, 0/1 or yes/no, true/false, on/off (:func:`~studykit.compressors.registry.as_bool`); anything else raises.

    ``find_unused_parameters``: the DDP model was built with it (:func:`register` reads it off the model). DDP then
    all-reduces a bitmap of the parameters each worker used, on its process group, right after the hook returns for
    the backward pass's last bucket; the hook's call for that bucket therefore waits until the communication thread
    has run every bucket's protocol (:meth:`drain`), so that on every worker the bitmap comes after the protocol's
    collectives instead of between them."""

    def __init__(self, compressor: Compressor, comm: Optional[Communicator] = None, process_group=None,
                 overlap: bool = True, comm_kind: str = "collective", coalesce_mb: Optional[float] = None,
                 check_finite: bool = False, start_iter: int = 0, runner: str = "thread",
                 find_unused_parameters: bool = False):
        overlap = as_bool(overlap, "overlap")  # before the checks that read it: the string "no" is not true
        self.compressor = finite_policy(compressor, check_finite)
        self.check_finite = not compressor.allow_nonfinite
        self.start_iter = _check_start_iter(start_iter)
        #: iterations begun, counted up to ``start_iter`` when DDP hands the hook an iteration's last bucket
        #: (``bucket.is_last()``, as PyTorch's PowerSGD hook counts)
        self.iteration = 0
        #: the plain all-reduce (average) of the first ``start_iter`` iterations
        self.dense: Optional[Compressor] = get("none", allow_nonfinite=True) if self.start_iter else None
        self.nonfinite = NonFinite()
        self.comm_kind = _check_kind(comm_kind)
        self.coalesce_bytes = _check_coalesce(coalesce_mb, overlap)
        self.runner = _check_runner(runner, overlap)
        #: the graph runner's captures: bucket index or group key -> _BucketGraph (its graph None: not capturable)
        self._graphs: dict = {}
        #: the graph runner's count of calls with the same parameters and buffers: index or group key -> (ids, ptr, n)
        self._streak: dict = {}
        #: jobs handed to the communication thread, and jobs it finished (each written by one thread only)
        self._submitted = 0
        self._finished = 0
        #: buckets waiting to be coalesced (``coalesce_mb``): (buffer, index, ids, shapes, future, ready event)
        self._pending: list = []
        self._comm = comm
        self.process_group = process_group
        self.overlap = overlap
        self.find_unused_parameters = as_bool(find_unused_parameters, "find_unused_parameters")
        self.bytes_sent = 0
        self.calls = 0
        #: parameters (by id) and shapes of each bucket index, as last seen
        self.bucket_params: dict = {}
        self.bucket_shapes: dict = {}
        self._worker: Optional[_CommThread] = None
        self._streams: dict = {}

    def active(self) -> Compressor:
        """The compressor of the current iteration: the plain all-reduce during the first ``start_iter``."""
        if self.iteration < self.start_iter:
            return self.dense
        return finite_policy(self.compressor, self.check_finite)  # also one swapped in since

    def worker(self) -> "_CommThread":
        """The communication thread (started on first use)."""
        if self._worker is None or not self._worker.alive:
            self._worker = _CommThread()
        return self._worker

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the communication thread, after the jobs handed to it before."""
        def counted():
            try:
                job()
            finally:
                self._finished += 1
        self._submitted += 1
        self.worker().submit(counted)

    def idle(self) -> bool:
        """Whether the communication thread has finished every job handed to it (the host has issued every
        earlier bucket's collectives, so work issued now comes after them on every rank)."""
        return self._finished == self._submitted

    def drain(self) -> None:
        """Wait until the communication thread has run every job handed to it (at once when it is idle)."""
        if self._worker is None or not self._worker.alive or self.idle():
            return
        done = threading.Event()
        self._worker.submit(done.set)  # the thread runs jobs in order: this one comes after every earlier bucket's
        done.wait()

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
        """Stop the communication thread (it finishes the buckets already handed to it) and release the graph
        runner's captured buckets: their collectives hold the process group's communicator, and NCCL cannot destroy
        a communicator that a live graph still uses (``destroy_process_group`` would wait forever). Call it before
        ``destroy_process_group``; the hook works on after it (a new thread starts, buckets are captured again)."""
        if getattr(self, "_worker", None) is not None:
            self._worker.stop()
            self._worker = None
        graphs = getattr(self, "_graphs", None)
        if graphs:
            if torch.cuda.is_available():
                torch.cuda.synchronize()  # no replay still running when its graph goes
            graphs.clear()
            self._streak.clear()

    def __del__(self):  # a discarded state must not leave its idle thread (or its graphs) behind
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit CUDA may already be gone
            pass

    def __getstate__(self):  # DDP may pickle hook state; communicators, threads and streams are rebuilt
        d = dict(self.__dict__)
        d["_comm"] = None
        d["_worker"] = None
        d["_streams"] = {}
        d["_pending"] = []
        d["_graphs"], d["_streak"] = {}, {}
        d["_submitted"] = d["_finished"] = 0
        d["nonfinite"] = NonFinite()  # its notes hold CUDA events
        return d


def finite_policy(compressor: Compressor, check_finite: bool) -> Compressor:
    """``compressor`` set to check every call for inf/NaN and raise (``check_finite=True``: a host
    synchronisation per call) or to let them through (False); returns it."""
    compressor.allow_nonfinite = not as_bool(check_finite, "check_finite")
    return compressor


def build(compressor: Union[str, Compressor], params: dict, who: str) -> Compressor:
    """``get(compressor, **params)`` for ``who`` (register, the reducer: their ``check_finite`` sets
    ``allow_nonfinite``, which ``params`` may not hold)."""
    if "allow_nonfinite" in params:
        raise ValueError(f"{who}: pass check_finite=True (check every bucket, raise on inf/NaN) or False (the "
                         f"default: let them through) instead of allow_nonfinite")
    return get(compressor, **params)


def _check_start_iter(start_iter) -> int:
    if isinstance(start_iter, bool) or not isinstance(start_iter, numbers.Integral) or start_iter < 0:
        raise ValueError(f"start_iter must be an integer >= 0 (iterations of plain all-reduce before the compressor "
                         f"takes over; 0: compress from the first), got {start_iter!r}")
    return int(start_iter)


class NonFinite:
    """inf/NaN gradients through a compressor's protocol without a host synchronisation (:mod:`studykit.ddp`
    says why): what the hook and the post-backward reducer do around ``Compressor.reduce`` for one key.

    * A compressor that may drop inf/NaN (``keeps_nonfinite`` False) gets a bucket holding one as zeros (an
      SVD fails on NaN); a one-element flag, summed over workers after the protocol, then makes the first
      element of every result NaN where any worker had one.
    * A result holding inf/NaN poisons error-feedback memory and warm starts. Whether it did is copied to
      the host without waiting (CUDA: a pinned tensor and an event); at the key's next call, once that copy
      has landed, the key's residual and per-key state are forgotten (:func:`forget`), as if new. A flag
      still in flight is read at a later call: nothing here waits for the device.
    """

    def __init__(self):
        #: key -> [(flag, event)]: whether a result under the key held inf/NaN, readable once ``event`` completed
        self.notes: dict = {}

    @staticmethod
    def flagged(comp: Compressor) -> bool:
        """Whether ``comp``'s protocol needs the flag: it lets inf/NaN through and may drop them."""
        return comp.allow_nonfinite and not comp.keeps_nonfinite

    def before(self, comp: Compressor, key, tensors: Sequence[torch.Tensor]) -> Optional[torch.Tensor]:
        """Before the protocol under ``key``: forget what an earlier non-finite result poisoned (:meth:`recover`);
        for a flagged compressor zero ``tensors`` if they hold inf/NaN, and return the local flag (1.0: they did)."""
        self.recover(comp, key)
        return self.zero(comp, tensors)

    def recover(self, comp: Compressor, key) -> bool:
        """Forget ``comp``'s residual and per-key state under ``key`` if a landed note says an earlier result
        there held inf/NaN (host work only, nothing waits); returns whether it did."""
        notes = self.notes.get(key)
        poisoned = False
        while notes and (notes[0][1] is None or notes[0][1].query()):  # landed: reading it waits for nothing
            poisoned |= bool(notes.pop(0)[0])
        if poisoned:
            forget(comp, key)
        return poisoned

    def zero(self, comp: Compressor, tensors: Sequence[torch.Tensor]) -> Optional[torch.Tensor]:
        """For a flagged compressor: ``tensors`` zeroed where they hold inf/NaN, and the local flag (device work
        only); None for the others."""
        if not self.flagged(comp):
            return None
        bad = ~all_finite(tensors)
        for t in tensors:
            t.masked_fill_(bad, 0.0)
        return bad.float().reshape(1)

    def after(self, comp: Compressor, key, results: Sequence[torch.Tensor], comm: Communicator,
              bad: Optional[torch.Tensor]) -> None:
        """After the protocol: :meth:`spread` then :meth:`note`."""
        self.note(key, self.spread(comp, results, comm, bad))

    def spread(self, comp: Compressor, results: Sequence[torch.Tensor], comm: Communicator,
               bad: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        """Sum ``zero``'s flag over workers (one all-reduce of 4 bytes) and make the first element of each of
        ``results`` NaN where a worker had inf/NaN (device work only). Returns, for a compressor with
        error-feedback memory or per-key state, whether the results hold inf/NaN (a 0-dim device tensor for
        :meth:`note`); None for the others."""
        if bad is not None:
            bad = comm.all_reduce(bad)[0] > 0
            for t in results:
                t[(0,) * t.dim()].masked_fill_(bad, float("nan"))
        if comp.memory is None and not comp.state:
            return None
        return ~all_finite(results) if bad is None else bad

    def note(self, key, bad: Optional[torch.Tensor]) -> None:
        """Keep ``spread``'s answer under ``key``, copied to the host without waiting (CUDA: a pinned tensor
        and an event), for :meth:`recover` to read at the key's next call."""
        if bad is None:
            return
        if bad.is_cuda:
            host = torch.empty((), dtype=torch.bool, pin_memory=True)
            host.copy_(bad, non_blocking=True)
            landed = torch.cuda.Event()
            landed.record()
            self.notes.setdefault(key, []).append((host, landed))
        else:
            self.notes.setdefault(key, []).append((bad, None))


def forget(comp: Compressor, key) -> None:
    """Drop ``comp``'s error-feedback residual and per-key state (e.g. PowerSGD's warm start) under ``key``:
    its next call there starts afresh."""
    if comp.memory is not None:
        comp.memory.forget(key)
    _drop_state(comp, key)


def _drop_state(comp: Compressor, key) -> None:
    for k in [k for k in comp.state if k == key or (isinstance(k, tuple) and key in k)]:
        del comp.state[k]


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


def _check_runner(runner: str, overlap: bool) -> str:
    if runner not in RUNNERS:
        raise ValueError(f"runner must be one of {', '.join(RUNNERS)}, got {runner!r}")
    if runner != "thread" and not overlap:
        raise ValueError(f"runner={runner!r} needs overlap=True (the blocking hook runs its protocol inside the hook)")
    return runner


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
    _drop_state(comp, key)


def compressor_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: compress-communicate-decompress one gradient bucket.

    The future's value is a tensor shaped like the bucket buffer holding the *average*
    gradient (DDP does not divide when a hook is registered; it copies the result into the
    gradients). With ``state.overlap`` the protocol runs on the communication thread and
    this returns at once (module docstring); otherwise it runs here, before returning.

    A partition-invariant compressor (its result depends only on the concatenated gradient:
    single-round codecs, quantize, THC, global top-k) gets the bucket buffer whole, as one flat
    tensor; layer-wise methods (PowerSGD, ATOMO, layer-scope top-k) the per-parameter views.

    With ``state.find_unused_parameters`` the call for the backward pass's last bucket returns once the
    communication thread has run every bucket's protocol (:class:`HookState` says why).
    """
    fut = _launch(state, bucket)
    if state.find_unused_parameters and bucket.is_last():
        state.drain()
    return fut


def _launch(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """:func:`compressor_hook` for one bucket: its protocol run here, handed to the communication thread, or
    chained to an asynchronous all-reduce; returns the bucket's future."""
    buf = bucket.buffer()
    params = bucket.parameters()
    key = bucket.index()
    ids = [id(p) for p in params]
    shapes = [p.shape for p in params]
    cuda = buf.is_cuda
    comp = state.active()
    if state.iteration < state.start_iter and bucket.is_last():
        state.iteration += 1
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future(devices=[buf.device] if cuda else None)
    if not state.overlap:
        fut.set_result(_reduce_bucket(state, comp, buf, key, ids, shapes))
        return fut
    comm = state.comm  # built here, in the caller's thread
    graph = state.runner == "graph" and cuda
    if comp.one_round_allreduce and not NonFinite.flagged(comp) and state.coalesce_bytes is None \
            and hasattr(comm, "all_reduce_async") and not graph:
        _track(state, key, ids, shapes)
        return _reduce_async(state, comp, buf, comm)
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
            if graph:
                _graph_run(state, comp, group, _group_key(group), comm, consumer)
            else:
                state.submit(lambda: _run_group(state, comp, group, comm))
        return fut

    if graph:
        _graph_run(state, comp, [(buf, key, ids, shapes, fut, ready)], key, comm, consumer)
        return fut

    def job():
        try:
            with torch.no_grad():
                if cuda:
                    side = state.side_stream(buf.device)
                    with torch.cuda.device(buf.device), torch.cuda.stream(side):
                        side.wait_event(ready)
                        out = _reduce_bucket(state, comp, buf, key, ids, shapes, comm)
                        if out.data_ptr() != buf.data_ptr():
                            out.record_stream(consumer)  # DDP reads it on its own stream
                        fut.set_result(out)  # records an event on `side`: DDP's wait() waits for it
                else:
                    fut.set_result(_reduce_bucket(state, comp, buf, key, ids, shapes, comm))
        except BaseException as exc:  # noqa: BLE001 - DDP raises it at the end of the backward pass
            fut.set_exception(exc)

    state.submit(job)
    return fut


class _BucketGraph:
    """A bucket's or coalesced group's protocol captured as a CUDA graph (the graph runner): what it was captured
    for and what a replay must do on the host (count its bytes, note its non-finite flag). ``graph`` None: the
    protocol cannot be replayed (it draws random numbers seeded on the host, or replaces its state tensors)."""

    __slots__ = ("graph", "comp", "ids", "ptr", "nbytes", "bad")

    def __init__(self, graph, comp, ids, ptr, nbytes, bad):
        self.graph, self.comp, self.ids, self.ptr, self.nbytes, self.bad = graph, comp, ids, ptr, nbytes, bad

    def fits(self, comp: Compressor, ids: list, ptr) -> bool:
        """Whether a call of ``comp`` on parameters ``ids`` in the buffer(s) at ``ptr`` replays this capture."""
        return self.comp is comp and self.ids == ids and self.ptr == ptr


def _graph_run(state: HookState, comp: Compressor, group: list, gkey, comm, consumer) -> None:
    """The graph runner for ``group``, (buffer, index, ids, shapes, future, ready event) per bucket: one bucket
    alone (``gkey`` its index) or a coalesced group (``gkey`` its :func:`_group_key`). A protocol captured before
    replays its graph (in the hook when the thread is idle: a graph launch and the future, no protocol Python); one
    seen ``CAPTURE_AFTER`` times with the same parameters and buffers is captured, in the hook, once the thread is
    idle; anything else runs on the thread as with the thread runner. Completes every bucket's future."""
    ids = [i for _, _, bids, *_ in group for i in bids]
    ptrs = tuple(b.data_ptr() for b, *_ in group)
    where = ptrs if isinstance(gkey, tuple) else ptrs[0]  # a bucket alone: its buffer's address
    entry = state._graphs.get(gkey)
    if entry is not None and not entry.fits(comp, ids, where):
        del state._graphs[gkey]  # DDP rebuilt its buckets, a compressor was swapped in: capture again
        entry = None
    old = state._streak.get(gkey)
    n = old[2] + 1 if old is not None and old[0] == ids and old[1] == where else 1
    state._streak[gkey] = (ids, where, n)
    idle = state.idle()
    # captured in the hook, with the thread idle: nothing else launches work or draws random numbers meanwhile
    # (a capture registers the device's default generator; another thread's dropout would then fail)
    capture = entry is None and n >= CAPTURE_AFTER and idle
    replay = entry is not None and entry.graph is not None
    buf = group[0][0]

    def job():
        try:
            with torch.no_grad():
                side = state.side_stream(buf.device)
                with torch.cuda.device(buf.device), torch.cuda.stream(side):
                    for *_, ready in group:
                        side.wait_event(ready)
                    if state.nonfinite.recover(comp, gkey):  # its state was forgotten: the graph holds the old
                        state._graphs.pop(gkey, None)
                        state._streak.pop(gkey, None)
                        outs = _eager(state, comp, group, gkey, comm)
                    elif replay:
                        outs = _replay(state, comp, entry, group, gkey)
                    elif capture:
                        outs = _capture(state, comp, group, gkey, ids, where, comm)
                    else:
                        outs = _eager(state, comp, group, gkey, comm)
                    for (b, *_, fut, _), out in zip(group, outs):
                        if out.data_ptr() != b.data_ptr():
                            out.record_stream(consumer)  # DDP reads it on its own stream
                        fut.set_result(out)  # records an event on `side`, which DDP's wait() waits for
        except BaseException as exc:  # noqa: BLE001 - DDP raises it at the end of the backward pass
            for *_, fut, _ in group:
                fut.set_exception(exc)

    if idle and (capture or replay):
        job()  # in the hook: a replay costs microseconds; a capture happens once per bucket or group
    else:
        state.submit(job)


def _eager(state: HookState, comp: Compressor, group: list, gkey, comm) -> list:
    """The graph runner's protocol run without a graph: a bucket alone as the thread runner runs it
    (:func:`_reduce_bucket`), a coalesced group as :func:`_run_group` does; returns each bucket's result."""
    if isinstance(gkey, tuple):
        _reduce_group(state, comp, group, comm)
        return [b for b, *_ in group]
    buf, key, ids, shapes, *_ = group[0]
    return [_reduce_bucket(state, comp, buf, key, ids, shapes, comm)]


def _replay(state: HookState, comp: Compressor, entry: _BucketGraph, group: list, gkey) -> list:
    """A captured protocol's call: its graph replayed, counted as a call of ``comp``; returns the buffers."""
    for _, key, ids, shapes, *_ in group:
        _track(state, key, ids, shapes)
    entry.graph.replay()
    state.nonfinite.note(gkey, entry.bad)
    state.bytes_sent += entry.nbytes
    state.calls += 1
    comp.advance(replayed=True)  # the graph advanced the device steps
    return [b for b, *_ in group]


def _capture(state: HookState, comp: Compressor, group: list, gkey, ids: list, where, comm) -> list:
    """Capture the protocol of ``group`` (:func:`_graph_run`) as one CUDA graph (on the current, side stream) and
    replay it once: this call's results, each in its bucket (a protocol that cannot be captured runs eagerly, now
    and later). The graph is kept only if the protocol drew no host-seeded random numbers and kept its state
    (error-feedback residual, warm start) in the same tensors, so that a replay is the next call."""
    before = replay_fingerprint(comp, gkey)
    for _, key, bids, shapes, *_ in group:
        _track(state, key, bids, shapes)
    torch.cuda.current_blas_handle()  # this thread's cuBLAS handle, made now: it cannot be made inside a capture
    graph = torch.cuda.CUDAGraph()
    rec = RecordingComm(comm)
    try:
        with torch.cuda.graph(graph, stream=torch.cuda.current_stream(), capture_error_mode="thread_local"):
            bad = _protocol(state, comp, group, gkey, rec)
    except RuntimeError:  # an operation that cannot be captured (one that waits for the device): nothing ran
        settle_generators(group[0][0].device)
        state._graphs[gkey] = _BucketGraph(None, comp, ids, where, 0, None)
        return _eager(state, comp, group, gkey, comm)
    keep = replay_fingerprint(comp, gkey) == before
    # not kept: the protocol runs eagerly from now on
    state._graphs[gkey] = _BucketGraph(graph if keep else None, comp, ids, where, rec.nbytes, bad)
    graph.replay()
    state.nonfinite.note(gkey, bad)
    state.bytes_sent += rec.nbytes
    state.calls += 1
    return [b for b, *_ in group]


def replay_fingerprint(comp: Compressor, key) -> tuple:
    """What a CUDA graph of ``comp``'s protocol under ``key`` depends on beyond its inputs: the number of
    host-seeded random draws so far and the storage of its state tensors (error-feedback residual, warm start).
    Where a captured call changed it, a replay is not the next call (the graph runner, ``bench --graph``)."""
    return comp.random_draws, tuple(_state_tensors(comp, key))


def _state_tensors(comp: Compressor, key) -> list:
    """The storage addresses of ``comp``'s error-feedback residual and per-key state under ``key``, in order."""
    out: list = []
    if comp.memory is not None:
        out += [t.data_ptr() for t in comp.memory.residuals.get(key, [])]
    for k, v in comp.state.items():
        if k == key or (isinstance(k, tuple) and key in k):
            _addresses(v, out, 3)
    return out


def _addresses(obj, out: list, depth: int) -> None:
    if isinstance(obj, torch.Tensor):
        out.append(obj.data_ptr())
    elif depth > 0:
        if isinstance(obj, dict):
            items = list(obj.values())
        elif isinstance(obj, (list, tuple)):
            items = list(obj)
        elif hasattr(obj, "__dict__"):
            items = list(vars(obj).values())
        else:
            items = [getattr(obj, n) for n in getattr(type(obj), "__slots__", ()) if hasattr(obj, n)]
        for x in items:
            _addresses(x, out, depth - 1)


def _run_group(state: HookState, comp: Compressor, group: list, comm) -> None:
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
            _reduce_group(state, comp, group, comm)
            for b, *_, fut, _ in group:
                fut.set_result(b)  # on CUDA: records an event on `side`, which DDP's wait() waits for
    except BaseException as exc:  # noqa: BLE001 - DDP raises it at the end of the backward pass
        for *_, fut, _ in group:
            fut.set_exception(exc)


def _group_key(group: list) -> tuple:
    """The key under which a coalesced group keeps its state (warm start, residual): its bucket indices."""
    return ("group",) + tuple(key for _, key, *_ in group)


def _reduce_group(state: HookState, comp: Compressor, group: list, comm) -> None:
    """The protocol on the buckets of ``group`` together, each result written back into its bucket. A bucket
    whose parameters changed (DDP rebuilt its buckets) drops the group's state (warm start, residual)."""
    changed = False
    for b, key, ids, shapes, *_ in group:
        changed |= state.bucket_params.get(key, ids) != ids
        _track(state, key, ids, shapes)
    gkey = _group_key(group)
    if changed and comp.memory is not None:
        for k in [k for k in comp.memory.residuals if isinstance(k, tuple) and k[:1] == ("group",)
                  and set(k[1:]) & {key for _, key, *_ in group}]:
            comp.memory.forget(k)
    rec = RecordingComm(comm)
    state.nonfinite.recover(comp, gkey)
    state.nonfinite.note(gkey, _protocol(state, comp, group, gkey, rec))
    state.bytes_sent += rec.nbytes
    state.calls += 1


def _protocol(state: HookState, comp: Compressor, group: list, gkey, rec) -> Optional[torch.Tensor]:
    """The protocol of ``comp`` on the buckets of ``group`` (one bucket alone or a coalesced group) as one call
    under ``gkey``, device work only (what the graph runner captures): each average written into its bucket;
    returns :meth:`NonFinite.spread`'s flag."""
    bufs = [b for b, *_ in group]
    bad = state.nonfinite.zero(comp, bufs)
    if comp.one_round_allreduce and len(bufs) == 1:
        _one_round_into(comp, bufs[0], rec)
    elif comp.partition_invariant:
        outs = comp.reduce(bufs, rec, key=gkey)
        for b, o in zip(bufs, outs):
            if o.data_ptr() != b.data_ptr():
                b.copy_(o.reshape(b.shape))
    else:
        grads = [v for b, _, _, shapes, *_ in group for v in views(b, shapes)]
        copy_back(grads, comp.reduce(grads, rec, key=gkey))
    return state.nonfinite.spread(comp, bufs, rec, bad)


def _one_round_into(comp: Compressor, buf: torch.Tensor, comm: Communicator) -> None:
    """A one-round all-reduce protocol (``Compressor.one_round_allreduce``: fp16, bf16, none) on one bucket, its
    average decoded straight into ``buf`` (:meth:`Compressor.decompress_mean_into`) as :func:`_reduce_async` decodes
    it: one pass fewer than :meth:`Compressor.reduce`'s decoding into a new tensor and its copy into the bucket."""
    flat = buf.view(-1)
    comp.check([flat], comm.world_size)
    payload, ctx = comp.compress(flat, comm.world_size)
    summed = [comm.all_reduce(x.clone() if _shares_memory(x, flat) else x) for x in payload]
    comp.decompress_mean_into(summed, ctx, comm.world_size, buf)
    comp.advance()


def _track(state: HookState, key: int, ids: list, shapes: list) -> None:
    """Which parameters (and shapes) bucket ``key`` holds now; per-bucket state follows a rebuild (:func:`_rekey`)."""
    old = state.bucket_params.get(key)
    if old is not None and old != ids:
        _rekey(state.compressor, key, old, ids, state.bucket_shapes.get(key))
    state.bucket_params[key], state.bucket_shapes[key] = ids, [tuple(s) for s in shapes]


def _reduce_async(state: HookState, comp: Compressor, buf: torch.Tensor, comm) -> torch.futures.Future[torch.Tensor]:
    """A one-round all-reduce protocol without the thread: encode here, all-reduce every payload
    asynchronously, decode (into ``buf``) in the callback. On CUDA the NaN/Inf check (a host sync, which
    here would stall the backward pass) moves to the callback, on the summed payloads."""
    cuda = buf.is_cuda
    with torch.no_grad():
        if not cuda:
            comp.check([buf])
        payload, ctx = comp.compress(buf, comm.world_size)
        payload = [x.clone() if _shares_memory(x, buf) else x.contiguous() for x in payload]
        futs = [comm.all_reduce_async(x) for x in payload]
    state.bytes_sent += sum(x.numel() * x.element_size() for x in payload)
    state.calls += 1
    comp.advance()

    def decode(_):
        with torch.no_grad():
            summed = [f.value()[0] for f in futs]
            if cuda:
                comp.check(summed)
            return comp.decompress_mean_into(summed, ctx, comm.world_size, buf)
    return (futs[0] if len(futs) == 1 else torch.futures.collect_all(futs)).then(decode)


def _reduce_bucket(state: HookState, comp: Compressor, buf: torch.Tensor, key: int, ids: list, shapes: list,
                   comm: Optional[Communicator] = None) -> torch.Tensor:
    """The protocol of ``comp`` on one bucket (every round); returns the average gradient, shaped like ``buf``."""
    _track(state, key, ids, shapes)
    rec = RecordingComm(comm if comm is not None else state.comm)
    state.nonfinite.recover(comp, key)
    bad = state.nonfinite.zero(comp, [buf])
    if comp.partition_invariant:
        out = comp.reduce(buf, rec, key=key)
        if out.shape != buf.shape or out.dtype != buf.dtype or not out.is_contiguous():
            buf.copy_(out)
            out = buf
    else:
        grads = views(buf, shapes)
        copy_back(grads, comp.reduce(grads, rec, key=key))
        out = buf
    state.nonfinite.after(comp, key, [out], rec, bad)
    state.bytes_sent += rec.nbytes
    state.calls += 1
    return out


def register(ddp_model, compressor: Union[str, Compressor], process_group=None, overlap: bool = True,
             comm_kind: str = "collective", coalesce_mb: Optional[float] = None, check_finite: bool = False,
             start_iter: int = 0, runner: str = "thread", **params) -> HookState:
    """Register ``compressor`` (a name with params, or an instance) as ``ddp_model``'s comm hook.

    ``overlap=False`` runs each bucket's protocol inside the hook, blocking the backward pass;
    ``comm_kind="ps"`` through one parameter server (:class:`HookState`). ``coalesce_mb``: buckets wait
    until at least that many MB of them (or the iteration's last bucket) are ready and run the protocol
    together, as one call of the compressor (0: once per iteration, after the backward pass's last bucket):
    fewer collectives, each bigger, for protocols whose small payloads are latency-bound (PowerSGD).

    inf/NaN gradients pass through by default, as with PyTorch's own hooks: a bucket that held one on any
    worker holds one in every worker's average, so ``torch.amp.GradScaler`` skips the step (:class:`NonFinite`).
    ``check_finite=True`` checks every bucket and raises instead, at the cost of a host synchronisation per
    bucket (the compressor's ``allow_nonfinite``, which ``check_finite`` sets; pass no ``allow_nonfinite``).
    ``start_iter=N`` runs a plain all-reduce (the average, no compression) for the first N iterations, as
    PyTorch's PowerSGD hook does with ``start_powerSGD_iter``; iterations are counted at each one's last bucket.

    ``runner`` (overlapped hooks on CUDA): "thread" runs each bucket's (or coalesced group's) protocol on the
    communication thread; "graph" captures it as a CUDA graph once DDP has settled its buckets (its
    ``CAPTURE_AFTER``-th call with the same parameters and buffers) and from then on replays it from DDP's callback:
    one graph launch per bucket or group instead of the protocol's Python and its dozens of launches.
    A protocol that draws host-seeded random numbers (ATOMO; the fused kernels of the stochastic codecs read the
    step on the device and replay), replaces its state tensors or waits for the device keeps running on
    the thread. On CPU both run the thread's way.

    Build ``ddp_model`` with ``gradient_as_bucket_view=True`` (no copy of each bucket's average into the gradients)
    and, where each rank may keep its own buffers, ``broadcast_buffers=False``: DDP's defaults cost the hook what the
    post-backward path on the plain model does not pay (the package docstring).

    ``process_group`` None: the group DDP averages over (``ddp_model.process_group``; a DDP model on a subgroup,
    e.g. of one process, gets the protocol on that subgroup, not on the world).

    A model built with ``find_unused_parameters=True`` works: the hook's call for the backward
    pass's last bucket then waits for the communication thread (:class:`HookState` says why)."""
    if not hasattr(ddp_model, "register_comm_hook"):
        raise TypeError(f"register() needs a torch.nn.parallel.DistributedDataParallel model (wrap yours in DDP "
                        f"first), got {type(ddp_model).__name__}")
    ddp_group = getattr(ddp_model, "process_group", None)
    if process_group is None and ddp_group is not None and ddp_group != dist.group.WORLD:
        process_group = ddp_group  # the world stays None: a state without a group pickles with its DDP model
    state = HookState(build(compressor, params, "register"), process_group=process_group, overlap=overlap,
                      comm_kind=comm_kind, coalesce_mb=coalesce_mb, check_finite=check_finite, start_iter=start_iter,
                      runner=runner, find_unused_parameters=bool(getattr(ddp_model, "find_unused_parameters", False)))
    ddp_model.register_comm_hook(state, compressor_hook)
    return state
