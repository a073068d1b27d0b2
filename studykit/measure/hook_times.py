"""Per-bucket time stamps of the kit's DDP hook (``ddp --hook-times``, records of kind ``hook_times``).

When each bucket becomes ready during the backward pass, when its encode ends, how long
its collectives take and when its decode ends, against the end of the backward pass: the inputs of the
hook's per-bucket timeline (``studykit.perfmodel.model.bucket_timeline_s``), measured. The kit's hook
(``studykit.ddp``) is wrapped from outside: a communicator that stamps each collective and a hook that
stamps *ready* on entry and *done* on its future. :func:`measure_hook_times` measures one configuration
(called by :func:`studykit.measure.ddp.run_ddp`); :func:`hook_timeline_table` reads the records.
"""
from __future__ import annotations

import copy
import statistics
from typing import TYPE_CHECKING

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from studykit import compressors as C
from studykit import ddp as sk_ddp
from studykit import models as M
from studykit.comm import make_comm
from studykit.compressors.registry import setting_label
from studykit.measure.runtime import Dist
from studykit.measure.timing import StampClock, another_iteration, host_clock, host_ms

if TYPE_CHECKING:  # pandas is imported where the table is built
    import pandas as pd

    from studykit.measure.ddp import _Config

__all__ = ["HOOK_TIMES_HOST_STAMPS", "HOOK_TIMES_STAMPS", "hook_budget_markdown", "hook_budget_table", "hook_host_table",
           "hook_timeline_table", "measure_hook_times"]

# ------------------------------------------------------------------ hook_times: per-bucket stamps of the kit's hook
#: per-bucket lists of a ``hook_times`` record (besides ``bucket_index`` and ``bucket_bytes``), in bucket index order
HOOK_TIMES_STAMPS = ("ready_ms", "encode_end_ms", "comm_ms", "decode_end_ms", "n_collectives")
#: the same moments on the host clock (:data:`~studykit.measure.timing.host_clock`, ms since just before
#: ``loss.backward()``): when the host calls the hook, issues the bucket's first collective, and completes the
#: bucket's future (the hook's host work for the bucket done: the host chain of
#: :func:`studykit.perfmodel.model.bucket_timeline_s`, measured)
HOOK_TIMES_HOST_STAMPS = ("ready_host_ms", "issue_host_ms", "done_host_ms")


class _StampComm:
    """A communicator around the hook's own (``TorchComm``, ``ParameterServerComm``) that stamps every
    collective's start and end and files them under the bucket whose protocol issued it (:class:`_HookTimer`).

    Synchronous collectives (``all_reduce``, ``all_gather``) are bracketed on the issuing thread: on GPUs by
    events on its current stream (the hook's side stream when overlapped, the backward pass's stream when
    blocking). NCCL runs the collective on a stream of its own that first waits for the issuing stream and
    makes the issuing stream wait for its end, so the bracket is the time the collective holds up the
    protocol's stream (including any wait for NCCL's stream, e.g. behind another bucket's collective).
    ``all_reduce_async`` (the hook's one-round path: fp16, bf16, none) exists only where the inner
    communicator has it, as the hook asks for it by ``hasattr``; its end is stamped in a callback on the
    returned future, which torch runs on a pool stream made to wait for the collective's work
    (``torch.futures.Future.then``): the device time the sum was done."""

    def __init__(self, inner, timer: _HookTimer):
        self.inner, self.rank, self.world_size = inner, inner.rank, inner.world_size
        self._timer = timer
        if hasattr(inner, "all_reduce_async"):
            self.all_reduce_async = self._all_reduce_async

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return self._bracket(self.inner.all_reduce, tensor)

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return self._bracket(self.inner.all_gather, tensor)

    def _bracket(self, op, tensor):
        t = self._timer
        pos, host, start = t.position(), host_clock(), t.clock.now()
        out = op(tensor)
        t.collective(pos, start, t.clock.now(), host)
        return out

    def _all_reduce_async(self, tensor: torch.Tensor) -> torch.futures.Future:
        t = self._timer
        pos, host, start = t.position(), host_clock(), t.clock.now()
        fut = self.inner.all_reduce_async(tensor)
        # added before the hook's own decode callback: torch runs a future's callbacks in the order added
        t.pending.append(fut.then(lambda _: t.collective(pos, start, t.clock.now(), host)))
        return fut


class _HookTimer:
    """Per-bucket time stamps of :func:`studykit.ddp.compressor_hook` in one backward pass, taken from
    outside the hook (:func:`measure_hook_times` says what each stamp means).

    :meth:`hook` wraps the kit's hook; :class:`_StampComm` brackets the collectives. A collective belongs
    to the bucket at position ``state.calls - calls at the start of the backward pass`` in hook-call order:
    ``HookState.calls`` counts the buckets whose protocol has issued all its collectives, and every path of
    the hook (communication thread, blocking, one-round async) runs the buckets' protocols one after the
    other in the order DDP calls the hook."""

    def __init__(self, cuda: bool):
        self.clock = StampClock(cuda)
        self.state: sk_ddp.HookState | None = None  # whose ``calls`` place the collectives (set once built)
        self.buckets: list[dict] = []
        self.pending: list = []

    def start(self) -> None:
        """Just before ``loss.backward()``: forget the last pass and stamp its zero (on the main stream)."""
        self.buckets: list[dict] = []
        self.pending: list = []
        self.backward_end = None
        self._calls0 = self.state.calls
        self.zero_host = host_clock()
        self.zero = self.clock.now()

    def position(self) -> int:
        return self.state.calls - self._calls0

    def collective(self, pos: int, start, end, host: float | None = None) -> None:
        """File a collective under the bucket at ``pos``: its ``start`` and ``end`` stamps, and the host time
        (:data:`~studykit.measure.timing.host_clock`) it was issued."""
        if not 0 <= pos < len(self.buckets):
            raise RuntimeError(f"hook_times: a collective of bucket position {pos}, but the hook has been called "
                               f"for {len(self.buckets)} buckets in this backward pass")
        self.buckets[pos]["colls"].append((start, end, host))

    def hook(self, state, bucket):  # no annotations: DDP compares them with real types, these are strings here
        """The DDP comm hook: stamp *ready*, run :func:`studykit.ddp.compressor_hook`, stamp *done* in a
        callback on its future (DDP gets that future itself, so it waits for nothing extra)."""
        ready_host, ready = host_clock(), self.clock.now()
        if not self.buckets:  # runs when the autograd engine has run every node, before DDP's own wait
            torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
        buf = bucket.buffer()
        b = {"index": bucket.index(), "bytes": buf.numel() * buf.element_size(), "ready": ready, "done": None,
             "ready_host": ready_host, "done_host": None, "colls": []}
        self.buckets.append(b)
        fut = sk_ddp.compressor_hook(state, bucket)

        def done(_):
            b["done_host"] = host_clock()
            b["done"] = self.clock.now()
        self.pending.append(fut.then(done))
        return fut

    def _end_of_backward(self) -> None:
        self.backward_end = self.clock.now()

    def finish(self, device: torch.device) -> dict:
        """After ``loss.backward()``: wait for every stamp, then the pass in ms since its zero."""
        for f in self.pending:
            f.wait()
        if self.clock.cuda:
            torch.cuda.synchronize(device)
        ms = lambda s: None if s is None else self.clock.span_ms(self.zero, s)
        since_zero_host = lambda t: None if t is None else host_ms(self.zero_host, t)
        out = {}
        for b in self.buckets:
            colls = b["colls"]
            out[b["index"]] = {"bytes": b["bytes"], "ready_ms": ms(b["ready"]), "decode_end_ms": ms(b["done"]),
                               "encode_end_ms": ms(colls[0][0]) if colls else None,
                               "comm_ms": sum(self.clock.span_ms(s, e) for s, e, _ in colls) if colls else None,
                               "n_collectives": len(colls), "ready_host_ms": since_zero_host(b["ready_host"]),
                               "issue_host_ms": since_zero_host(colls[0][2]) if colls else None,
                               "done_host_ms": since_zero_host(b["done_host"])}
        return {"buckets": out, "backward_end_ms": ms(self.backward_end)}


def _median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def measure_hook_times(cfg: _Config, d: Dist, base: torch.nn.Module, batch, *, n_iter: int = 10,
                       n_warmup: int = 2, budget_s: float | None = None, min_iter: int = 3) -> dict:
    """Per-bucket time line of one ``hook`` configuration (the fields of a ``hook_times`` record): what
    :func:`studykit.perfmodel.model.bucket_timeline_s` models (``f_i C``, ``g_i``, ``c_i``, ``D_i``; BEYOND
    THE PAPER, whose App. A only shows that hooks are slower), measured.

    The configuration's compressor is registered on a fresh DDP model through the kit's own hook,
    wrapped from outside (:class:`_HookTimer`, :class:`_StampComm`); ``n_warmup`` iterations (DDP rebuilds
    its buckets after the first), then ``n_iter`` stamped ones, fewer (never below ``min_iter``) once another
    would pass ``budget_s`` at the slowest rank's pace so far (:func:`studykit.measure.timing.another_iteration`). Every stamp is in ms since
    the start of ``loss.backward()``: on GPUs the time from a CUDA event recorded on the main stream just
    before it to an event recorded as below (device time); on CPU the host clock (``clock``;
    :class:`~studykit.measure.timing.StampClock`). Per
    bucket, in bucket index order (DDP's, the communication order), the median over the stamped iterations of

    * ``ready_ms``: DDP calls the hook (all the bucket's gradients are computed and every earlier bucket
      has been handed over); the event is on the stream that calls the hook (the backward pass's);
    * ``encode_end_ms``: the bucket's first collective is issued (its encode is done; on the
      communication thread it also waited for the earlier buckets' protocols); the event is on the
      stream that issues it (the hook's side stream when overlapped, the backward pass's otherwise);
    * ``comm_ms``: the sum of the bucket's collectives' durations, each bracketed on the stream that
      issues it (:class:`_StampComm`: a collective waiting for NCCL's stream counts);
    * ``decode_end_ms``: the bucket's future is done (decode finished): a callback on the hook's future,
      which torch runs on a pool stream made to wait for the events the future's producer recorded, so
      on GPUs the device time the decoded bucket was complete (or later, should that pool stream be busy);
    * ``n_collectives``: the collectives stamped (0: none, so ``encode_end_ms`` and ``comm_ms`` are null).

    ``backward_end_ms``: the autograd engine has run every node of the backward pass (a final callback queued
    at the first hook call, which runs before DDP's own, on the caller's stream after it waited for the
    backward's streams): what the backward's compute and the hook's inline work took; ``sync_end_ms``:
    ``loss.backward()`` returned (DDP has waited for every bucket's future and copied the averages into the
    gradients). What ends after ``backward_end_ms`` is not hidden under the backward pass
    (:func:`hook_timeline_table`'s ``exposed_ms``). ``iteration_ms``: the whole stamped iteration (zero_grad,
    forward, backward, SGD step) with the stamps' own overhead; the ``ddp`` record holds the unstamped times.
    Rank 0's stamps (every rank runs the same iterations). Medians keep the order of stamps that are ordered
    in every iteration (``ready <= encode_end <= decode_end``) but sums and differences of medians need not
    match any one iteration: ``stamps_ms`` keeps every stamped iteration's own.

    On CPU the *done* stamp is taken when the callback runs, on the thread that completed the future
    (the communication thread, or gloo's for the async all-reduce) after torch has woken the future's
    waiters: a GIL hand-over may put it a little after ``sync_end_ms``. On gloo several async all-reduces
    may run at once (its worker threads), so a small bucket can be decoded before a large earlier one."""
    cuda = d.device.type == "cuda"
    net = copy.deepcopy(base)
    fwd = DDP(net, device_ids=[d.device.index] if cuda else None)
    comp = C.get(cfg.spec.name, allow_nonfinite=True, **cfg.spec.kwargs)
    timer = _HookTimer(cuda)
    state = timer.state = sk_ddp.HookState(comp, comm=_StampComm(make_comm(cfg.comm or "collective"), timer),
                                           overlap=cfg.hook_overlap is not False)
    fwd.register_comm_hook(state, timer.hook)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    passes, ends, syncs, iters = [], [], [], []

    def iteration() -> float:
        if cuda:
            torch.cuda.synchronize(d.device)
        t_it = timer.clock.now()
        opt.zero_grad(set_to_none=True)
        loss = M.loss(cfg.model, fwd, batch)
        timer.start()
        loss.backward()
        t_sync = timer.clock.now()
        opt.step()
        t_end = timer.clock.now()
        got = timer.finish(d.device)
        passes.append(got["buckets"])
        ends.append(got["backward_end_ms"])
        syncs.append(timer.clock.span_ms(timer.zero, t_sync))
        iters.append(timer.clock.span_ms(t_it, t_end))
        return iters[-1]

    try:
        for _ in range(n_warmup):
            iteration()
        del passes[:], ends[:], syncs[:], iters[:]
        paced: list[float] = []  # every rank must run as many iterations: the slowest rank's times decide
        while another_iteration(paced, n_iter, min_iter, float("inf") if budget_s is None else budget_s):
            ms = iteration()
            paced.append(ms if budget_s is None else d.agree_max(ms))  # no budget: n_iter, no collective needed
        n_iter = len(paced)
    finally:
        state.close()
    order = sorted({i for p in passes for i in p})
    stamps = HOOK_TIMES_STAMPS + HOOK_TIMES_HOST_STAMPS
    per = {k: [_median(p[i][k] for p in passes if i in p) for i in order] for k in stamps}
    per["n_collectives"] = [None if n is None else round(n) for n in per["n_collectives"]]
    nbytes = {i: p[i]["bytes"] for p in passes for i in p}
    # every iteration's own stamps: one consistent time line each (the medians above come from different ones)
    raw = {k: [[p[i][k] if i in p else None for i in order] for p in passes] for k in stamps if k != "n_collectives"}
    timer.state = None  # no cycle state -> comm -> timer -> state (freed on return)
    return {"bucket_index": order, "bucket_bytes": [int(nbytes[i]) for i in order], **per,
            "backward_end_ms": _median(ends), "sync_end_ms": _median(syncs), "iteration_ms": _median(iters),
            "stamps_ms": {**raw, "backward_end_ms": ends, "sync_end_ms": syncs},
            "clock": "cuda_event" if cuda else "perf_counter", "n_iter": n_iter, "n_warmup": n_warmup,
            "ms_median": _median(iters), "times_ms": iters}


def _bucket_rows(records, keys: tuple, need: str | None = None):
    """The latest ``ok`` ``hook_times`` record per ``config_id`` (with a non-null ``need`` field where given), as
    ``(record, its configuration's columns, bucket position j)`` in communication order, each per-bucket list of
    ``keys`` checked to hold one entry per ``bucket_index``; and a reader of a stamp (None / NaN as NaN)."""
    import json
    import math

    import pandas as pd

    if isinstance(records, pd.DataFrame):
        records = records.to_dict("records")
    latest = {r["config_id"]: r for r in records if r.get("kind") == "hook_times" and r.get("status") == "ok"
              and (need is None or r.get(need) is not None)}
    f = lambda x: math.nan if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)  # noqa: E731
    out = []
    for r in latest.values():
        idx = list(r["bucket_index"])
        for k in keys:
            if len(r[k]) != len(idx):
                raise ValueError(f"hook_times record {r['config_id']}: {k} has {len(r[k])} entries for "
                                 f"{len(idx)} buckets; every per-bucket list must have one per bucket_index")
        net = r.get("network")
        conf = {"model": r.get("model"), "batch_size": r.get("batch_size"), "compressor": r.get("compressor"),
                "params": json.dumps(r["params"] if isinstance(r.get("params"), dict) else {}, sort_keys=True),
                "hook_overlap": r.get("hook_overlap"), "comm": r.get("comm"), "world_size": r.get("world_size"),
                "rate_gbps": f(net.get("rate_gbps") if isinstance(net, dict) else None)}
        out += [(r, conf, j) for j in sorted(range(len(idx)), key=lambda j: idx[j])]
    return out, f


def hook_timeline_table(records) -> pd.DataFrame:
    """``hook_times`` records (dicts, or a DataFrame of them, e.g. ``report.load_frame``) as one row per
    bucket: the measured counterpart of :func:`studykit.perfmodel.model.bucket_timeline_s`.

    Columns: the configuration (``model``, ``batch_size``, ``compressor``, ``params`` as sorted JSON,
    ``hook_overlap``, ``comm``, ``world_size``, ``rate_gbps`` of an emulated network or NaN), ``bucket``,
    ``bucket_bytes``, the stamps (``ready_ms``, ``encode_end_ms``, ``decode_end_ms``, ``backward_end_ms``,
    ms since the start of the backward pass) and durations, ms:

    * ``encode_ms = encode_end - ready`` (waiting for the protocol's turn, then encode);
    * ``comm_ms``: the collectives (the record's);
    * ``decode_ms = decode_end - encode_end - comm`` (between and after the collectives: decode);
    * ``exposed_ms = max(0, decode_end_i - max(backward_end, decode_end_j for j < i))``: the part of the
      bucket's time line that ends after the backward pass and after every earlier bucket, so that the
      buckets' ``exposed_ms`` add up to ``max(0, last decode_end - backward_end)``, the time the iteration
      waits for communication (``exposed_s`` of :func:`~studykit.perfmodel.model.bucket_timeline_s`).

    Only ``ok`` records, the latest per ``config_id``; NaN where a stamp is missing."""
    import math

    import pandas as pd

    rows = []
    done_before: dict = {}
    rows_in, f = _bucket_rows(records, ("bucket_bytes", "ready_ms", "encode_end_ms", "comm_ms", "decode_end_ms"))
    for r, conf, j in rows_in:
        end = f(r.get("backward_end_ms"))
        before = done_before.setdefault(r["config_id"], end)
        ready, enc, comm, dec = (f(r[k][j]) for k in ("ready_ms", "encode_end_ms", "comm_ms", "decode_end_ms"))
        exposed = max(0.0, dec - before) if not (math.isnan(dec) or math.isnan(before)) else math.nan
        if not math.isnan(dec):
            done_before[r["config_id"]] = max(before, dec)
        rows.append({**conf, "bucket": int(r["bucket_index"][j]), "bucket_bytes": int(r["bucket_bytes"][j]),
                     "ready_ms": ready, "encode_end_ms": enc, "decode_end_ms": dec, "backward_end_ms": end,
                     "encode_ms": enc - ready, "comm_ms": comm, "decode_ms": dec - enc - comm, "exposed_ms": exposed})
    cols = ["model", "batch_size", "compressor", "params", "hook_overlap", "comm", "world_size", "rate_gbps", "bucket",
            "bucket_bytes", "ready_ms", "encode_end_ms", "decode_end_ms", "backward_end_ms", "encode_ms", "comm_ms",
            "decode_ms", "exposed_ms"]
    return pd.DataFrame(rows, columns=cols)


def hook_host_table(records) -> pd.DataFrame:
    """The host side of ``hook_times`` records (their ``*_host_ms`` stamps) as one row per bucket: the host chain
    of :func:`studykit.perfmodel.model.bucket_timeline_s` measured inside the DDP run. The kit's hook runs one
    bucket's protocol after the other on its communication thread, so bucket ``i``'s host work starts at
    ``start_i = max(ready_host_i, done_host_{i-1})`` (in communication order) and

    * ``pre_ms = issue_host - start``: the host work before the bucket's first collective (its ``P_i - start``);
    * ``post_ms = done_host - issue_host``: from then until the bucket's future completes: the rest of its host
      work, including any wait for its collectives (``H_i - P_i``);
    * ``wait_ms = start - ready_host``: how long the bucket waited for the thread (earlier buckets' host work).

    Columns: model, batch_size, compressor, params (sorted JSON), world_size, rate_gbps (NaN on a real network),
    bucket, ready_host_ms, issue_host_ms, done_host_ms, wait_ms, pre_ms, post_ms. Only ``ok`` records with host
    stamps, the latest per ``config_id``; a bucket without a stamped collective has NaN ``issue_host_ms``, ``pre_ms``
    and ``post_ms``."""
    import pandas as pd

    rows = []
    prev_done: dict = {}
    rows_in, f = _bucket_rows(records, HOOK_TIMES_HOST_STAMPS, need="done_host_ms")
    for r, conf, j in rows_in:
        ready, issue, done = (f(r[k][j]) for k in HOOK_TIMES_HOST_STAMPS)
        start = max(ready, prev_done.get(r["config_id"], -float("inf")))
        prev_done[r["config_id"]] = max(prev_done.get(r["config_id"], -float("inf")), done)
        rows.append({k: conf[k] for k in ("model", "batch_size", "compressor", "params", "world_size", "rate_gbps")}
                    | {"bucket": int(r["bucket_index"][j]), "ready_host_ms": ready, "issue_host_ms": issue,
                       "done_host_ms": done, "wait_ms": start - ready, "pre_ms": issue - start, "post_ms": done - issue})
    cols = ["model", "batch_size", "compressor", "params", "world_size", "rate_gbps", "bucket", "ready_host_ms",
            "issue_host_ms", "done_host_ms", "wait_ms", "pre_ms", "post_ms"]
    return pd.DataFrame(rows, columns=cols)


def hook_budget_table(records) -> pd.DataFrame:
    """Where a DDP comm hook's iteration time goes, measured: one row per ``hook_times`` record (kit hook,
    overlapped), set beside the records of the same model, batch, world size, network and GIL switch
    interval that the same ``ddp`` call wrote: syncSGD (``ddp``, DDP's default buckets), its per-bucket ready
    times (``buckets``), and the same compressor after the backward pass (``post``) and as the unstamped hook.

    The model of a hook (:func:`studykit.perfmodel.model.bucket_timeline_s`) takes an
    iteration as syncSGD's work outside the backward pass, plus the backward pass's compute, plus what of the
    buckets' encode / collectives / decode ends after it. The columns measure each of those, ms:

    * ``backward_compute_ms``: syncSGD's last bucket ready (device clock): the backward pass's compute alone;
    * ``backward_slowdown_ms = backward_end - backward_compute``: what the hook's own work (encode on a side
      stream, Python per bucket) adds to the backward pass itself;
    * ``exposed_ms = sync_end - backward_end``: the buckets' work that ends after the backward pass;
    * ``outside_ms = iteration - sync_end``: forward, zero_grad and optimizer step with the hook;
      ``syncsgd_outside_ms``: the same for syncSGD (its iteration minus its synchronised backward);
      ``extra_outside_ms``: their difference, work the hook path adds outside the backward pass;
    * ``hook_ms``, ``post_ms``, ``syncsgd_ms``: the unstamped iteration medians (NaN where not measured),
      and ``hook_minus_post_ms``.

    Records: dicts or a frame (``report.load_frame``); only ``ok`` ones, the latest per ``config_id``."""
    import json
    import math

    import pandas as pd

    if isinstance(records, pd.DataFrame):
        records = records.to_dict("records")
    latest: dict = {}
    for r in records:
        if r.get("status") == "ok" and r.get("kind") in ("hook_times", "ddp", "buckets"):
            latest[r["config_id"]] = r
    nan = float("nan")
    f = lambda x: nan if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)

    def rate(r):
        net = r.get("network")
        return f(net.get("rate_gbps")) if isinstance(net, dict) else nan

    def g(r, k):  # a frame's missing value (NaN) is a record's None
        x = r.get(k)
        x = None if x is None or (isinstance(x, float) and math.isnan(x)) else x
        if k == "switch_interval_ms" and x is None:  # records that do not say ran at Python's default, 5 ms
            x = 5.0
        return x

    def same(r, h):
        ra, rb = rate(r), rate(h)
        keys = ("model", "batch_size", "world_size", "comm", "switch_interval_ms")
        return (tuple(g(r, k) for k in keys) == tuple(g(h, k) for k in keys)
                and (ra == rb or (math.isnan(ra) and math.isnan(rb))))

    def params(r):
        return json.dumps(r["params"] if isinstance(r.get("params"), dict) else {}, sort_keys=True)

    def one(pred):
        got = [r for r in latest.values() if pred(r)]
        return got[-1] if got else None

    rows = []
    for h in (r for r in latest.values() if r["kind"] == "hook_times"):
        sync = one(lambda r: r["kind"] == "ddp" and r.get("mode") == "syncsgd" and g(r, "bucket_mb") is None
                   and same(r, h))
        bk = one(lambda r: r["kind"] == "buckets" and g(r, "bucket_mb") is None and same(r, h))
        post = one(lambda r: r["kind"] == "ddp" and r.get("mode") == "post" and r.get("compressor") == h.get("compressor")
                   and params(r) == params(h) and same(r, h))
        hook = one(lambda r: r["kind"] == "ddp" and r.get("mode") == "hook" and g(r, "hook_overlap") is not False
                   and r.get("compressor") == h.get("compressor") and params(r) == params(h) and same(r, h))
        compute = max(f(x) for x in bk["ready_ms"]) if bk and bk.get("ready_ms") else nan
        end, synced, it = f(h.get("backward_end_ms")), f(h.get("sync_end_ms")), f(h.get("iteration_ms"))
        sync_ms = f(sync.get("ms_median")) if sync else nan
        sync_outside = sync_ms - f(bk.get("backward_ms")) if bk else nan
        hook_ms, post_ms = (f(x.get("ms_median")) if x else nan for x in (hook, post))
        rows.append({"model": h.get("model"), "batch_size": h.get("batch_size"), "world_size": h.get("world_size"),
                     "rate_gbps": rate(h), "compressor": h.get("compressor"), "params": params(h),
                     "syncsgd_ms": sync_ms, "post_ms": post_ms, "hook_ms": hook_ms,
                     "hook_minus_post_ms": hook_ms - post_ms, "backward_compute_ms": compute,
                     "backward_end_ms": end, "backward_slowdown_ms": end - compute, "exposed_ms": synced - end,
                     "outside_ms": it - synced, "syncsgd_outside_ms": sync_outside,
                     "extra_outside_ms": (it - synced) - sync_outside})
    cols = ["model", "batch_size", "world_size", "rate_gbps", "compressor", "params", "syncsgd_ms", "post_ms", "hook_ms",
            "hook_minus_post_ms", "backward_compute_ms", "backward_end_ms", "backward_slowdown_ms", "exposed_ms",
            "outside_ms", "syncsgd_outside_ms", "extra_outside_ms"]
    return pd.DataFrame(rows, columns=cols)


def hook_budget_markdown(table: pd.DataFrame) -> str:
    """:func:`hook_budget_table` as the Markdown table the READMEs carry (ms, one decimal)."""
    import json

    import pandas as pd

    head = ("| model | p | Gbit/s | compressor | syncSGD | post | hook | hook - post | backward compute | "
            "+ slowdown | + exposed | outside (syncSGD) | + extra outside |\n|---|---:|---:|---|" + "---:|" * 9 + "\n")
    fmt = lambda x: "—" if pd.isna(x) else f"{x:.1f}"
    lines = []
    for r in table.sort_values(["model", "rate_gbps", "compressor", "params"]).itertuples():
        label = setting_label(r.compressor, json.loads(r.params), "short")
        lines.append(f"| {r.model} b{r.batch_size} | {r.world_size} | {fmt(r.rate_gbps)} | {label} | "
                     + " | ".join(fmt(x) for x in (r.syncsgd_ms, r.post_ms, r.hook_ms, r.hook_minus_post_ms,
                                                   r.backward_compute_ms, r.backward_slowdown_ms, r.exposed_ms,
                                                   r.syncsgd_outside_ms, r.extra_outside_ms)) + " |")
    return head + "\n".join(lines) + "\n"
