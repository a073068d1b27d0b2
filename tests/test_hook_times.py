"""``ddp --hook-times`` without a process group: the stamps of the kit's hook (wrapped from outside) on
each of its three paths, run on hand-made buckets inside a real backward pass, and the per-bucket
table on hand-made records. The multi-process run is tests/test_measure_dist.py's (slow)."""
import json
import math

import pandas as pd
import pytest
import torch

from studykit import compressors as C
from studykit import ddp as sk_ddp
from studykit.comm import LocalComm
from studykit.measure import hook_times as mht
from studykit.measure.records import KIND_FIELDS

CPU = torch.device("cpu")


class _Bucket:
    """What the hook reads of DDP's GradBucket: buffer, parameters, index."""

    def __init__(self, index: int, params: list):
        self._index, self._params = index, params
        self._buf = torch.cat([p.detach().reshape(-1) for p in params]).clone()

    def buffer(self):
        return self._buf

    def parameters(self):
        return self._params

    def index(self):
        return self._index


class _AsyncComm(LocalComm):
    """World size 1 with the one-round async all-reduce that TorchComm has (a future done at once)."""

    async_calls = 0

    def all_reduce_async(self, tensor):
        self.async_calls += 1
        fut = torch.futures.Future()
        fut.set_result([tensor])
        return fut


def _pass(timer: mht._HookTimer, state, buckets) -> dict:
    """One backward pass that hands ``buckets`` to the wrapped hook, as DDP does, then the stamps."""
    x = torch.ones(3, requires_grad=True)

    def fire(grad):
        for b in buckets:
            timer.hook(state, b)
        return grad

    x.register_hook(fire)
    y = (x * 2).sum()
    timer.start()
    y.backward()
    return timer.finish(CPU)


def _setup(name: str, inner, overlap: bool, **params):
    timer = mht._HookTimer(cuda=False)
    comp = C.get(name, allow_nonfinite=True, **params)
    timer.state = sk_ddp.HookState(comp, comm=mht._StampComm(inner, timer), overlap=overlap)
    torch.manual_seed(0)
    buckets = [_Bucket(0, [torch.randn(64, 8), torch.randn(8)]), _Bucket(1, [torch.randn(32, 4)])]
    return timer, buckets


@pytest.mark.parametrize("name,inner,overlap,path", [
    ("fp16", _AsyncComm(), True, "one-round async"),
    ("randomk", LocalComm(), True, "communication thread"),
    ("fp16", LocalComm(), True, "communication thread (no all_reduce_async)"),
    ("randomk", LocalComm(), False, "blocking"),
])
def test_every_path_stamps_every_bucket_in_order(name, inner, overlap, path):
    timer, buckets = _setup(name, inner, overlap, **({"ratio": 0.25} if name == "randomk" else {}))
    try:
        for _ in range(2):  # the second pass starts from the first's HookState.calls
            got = _pass(timer, timer.state, buckets)
    finally:
        timer.state.close()
    plan = timer.state.compressor.plan
    assert sorted(got["buckets"]) == [0, 1], path
    for b in buckets:
        s = got["buckets"][b.index()]
        flag = sk_ddp.NonFinite.flagged(timer.state.compressor)  # the hook's finiteness flag: one all-reduce more
        assert s["n_collectives"] == len(plan([p.shape for p in b.parameters()], 1)) + flag >= 1, path
        assert s["bytes"] == b.buffer().numel() * 4
        assert 0 <= s["ready_ms"] <= s["encode_end_ms"] <= s["decode_end_ms"], (path, s)
        assert 0 <= s["comm_ms"] <= s["decode_end_ms"] - s["encode_end_ms"] + 1e-9, (path, s)
        # the host clock: called, first collective issued, future completed, in that order
        assert 0 <= s["ready_host_ms"] <= s["issue_host_ms"] <= s["done_host_ms"], (path, s)
    # each bucket's host work runs after the previous bucket's was handed over (one protocol after the other)
    first, second = (got["buckets"][b.index()] for b in buckets)
    assert first["ready_host_ms"] <= second["ready_host_ms"] and first["issue_host_ms"] <= second["issue_host_ms"]
    assert got["backward_end_ms"] >= got["buckets"][1]["ready_ms"]
    assert (getattr(inner, "async_calls", 0) == 2 * len(buckets)) == (path == "one-round async")  # the path named
    if not overlap:  # blocking: every protocol ran inside the backward pass
        assert got["backward_end_ms"] >= max(s["decode_end_ms"] for s in got["buckets"].values())


def test_the_wrapper_offers_all_reduce_async_only_where_the_inner_communicator_has_it():
    timer = mht._HookTimer(cuda=False)
    assert hasattr(mht._StampComm(_AsyncComm(), timer), "all_reduce_async")
    assert not hasattr(mht._StampComm(LocalComm(), timer), "all_reduce_async")  # else the hook would call it


def test_a_collective_outside_any_bucket_is_an_error_naming_the_position():
    timer = mht._HookTimer(cuda=False)
    timer.state = sk_ddp.HookState(C.get("none"), comm=LocalComm(), overlap=False)
    timer.start()
    with pytest.raises(RuntimeError, match="bucket position 0.*0 buckets"):
        mht._StampComm(LocalComm(), timer).all_reduce(torch.ones(2))


def test_every_field_of_the_record_is_documented():
    doc = KIND_FIELDS["hook_times"]
    assert set(mht.HOOK_TIMES_STAMPS) | set(mht.HOOK_TIMES_HOST_STAMPS) | {"bucket_index", "bucket_bytes", "backward_end_ms", "sync_end_ms",
                                     "iteration_ms", "stamps_ms", "clock"} <= set(doc)


# ------------------------------------------------------------------ hook_timeline_table on hand-made records
def _rec(cid="a", status="ok", **kw):
    r = {"kind": "hook_times", "config_id": cid, "status": status, "model": "m", "batch_size": 8,
         "compressor": "topk", "params": {"ratio": 0.01}, "hook_overlap": True, "comm": None, "world_size": 2,
         "network": None, "bucket_index": [0, 1, 2], "bucket_bytes": [400, 800, 1200],
         "ready_ms": [1.0, 4.0, 9.0], "encode_end_ms": [2.0, 5.0, 9.5], "comm_ms": [3.0, 4.0, 2.0],
         "decode_end_ms": [8.0, 12.0, 15.0], "backward_end_ms": 10.0}
    r.update(kw)
    return r


def test_host_table_by_hand():
    """Three buckets on the host clock: ready at 1, 2, 3 ms; first collective issued at 2, 6, 8; futures done at
    5, 7, 12. Bucket 0 starts at 1 (pre 1, post 3); bucket 1 waits for the thread until 5 (wait 3, pre 1, post 1);
    bucket 2 starts at max(3, 7) = 7 (wait 4, pre 1, post 4). Records without host stamps are left out."""
    r = _rec(ready_host_ms=[1.0, 2.0, 3.0], issue_host_ms=[2.0, 6.0, 8.0], done_host_ms=[5.0, 7.0, 12.0],
             network={"rate_gbps": 25.0})
    t = mht.hook_host_table([r, _rec(cid="old")])
    assert list(t["bucket"]) == [0, 1, 2] and (t["rate_gbps"] == 25.0).all()
    assert list(t["wait_ms"]) == [0.0, 3.0, 4.0]
    assert list(t["pre_ms"]) == [1.0, 1.0, 1.0] and list(t["post_ms"]) == [3.0, 1.0, 4.0]
    short = _rec(ready_host_ms=[1.0, 2.0], issue_host_ms=[2.0, 6.0, 8.0], done_host_ms=[5.0, 7.0, 12.0])
    with pytest.raises(ValueError, match="ready_host_ms has 2 entries for 3 buckets"):
        mht.hook_host_table([short])
    none = _rec(ready_host_ms=[1.0, 2.0, 3.0], issue_host_ms=[2.0, None, 8.0], done_host_ms=[5.0, 7.0, 12.0])
    assert mht.hook_host_table([none])["pre_ms"].isna().tolist() == [False, True, False]


def test_table_one_row_per_bucket_with_durations_and_the_exposed_tail():
    t = mht.hook_timeline_table([_rec()])
    assert list(t["bucket"]) == [0, 1, 2] and list(t["bucket_bytes"]) == [400, 800, 1200]
    assert list(t["encode_ms"]) == [1.0, 1.0, 0.5]
    assert list(t["comm_ms"]) == [3.0, 4.0, 2.0]
    assert list(t["decode_ms"]) == [3.0, 3.0, 3.5]  # decode_end - encode_end - comm
    # bucket 0 ends under the backward pass; 1 and 2 end 2 and 3 ms after it: 5 ms exposed in all
    assert list(t["exposed_ms"]) == [0.0, 2.0, 3.0]
    assert t["exposed_ms"].sum() == 15.0 - 10.0
    assert (t["model"] == "m").all() and (t["params"] == json.dumps({"ratio": 0.01})).all()
    assert t["rate_gbps"].isna().all()


def test_exposed_counts_each_millisecond_once_when_buckets_finish_out_of_order():
    t = mht.hook_timeline_table([_rec(decode_end_ms=[13.0, 12.0, 11.0])])
    assert list(t["exposed_ms"]) == [3.0, 0.0, 0.0]  # bucket 0 already held the iteration until 13 ms


def test_table_keeps_the_latest_ok_record_per_configuration_and_only_hook_times():
    recs = [_rec(ready_ms=[0.0, 0.0, 0.0]), _rec(), _rec(cid="b", status="error"),
            {"kind": "ddp", "config_id": "c", "status": "ok"},
            _rec(cid="d", network={"rate_gbps": 10.0, "workers": 2}, comm_ms=[None, 1.0, 1.0],
                 encode_end_ms=[None, 5.0, 9.5])]
    t = mht.hook_timeline_table(recs)
    a, d = t[t["rate_gbps"].isna()], t[t["rate_gbps"] == 10.0]
    assert list(a["ready_ms"]) == [1.0, 4.0, 9.0] and len(t) == 6
    assert math.isnan(d["encode_ms"].iloc[0]) and math.isnan(d["comm_ms"].iloc[0])  # missing stamps: NaN
    assert d["exposed_ms"].sum() == 5.0


def test_table_reads_a_frame_of_records_and_says_which_list_is_short():
    t = mht.hook_timeline_table(pd.DataFrame([_rec(), {"kind": "tcomp", "config_id": "x", "status": "ok"}]))
    assert len(t) == 3 and t["params"].iloc[0] == json.dumps({"ratio": 0.01})
    with pytest.raises(ValueError, match="comm_ms has 2 entries for 3 buckets"):
        mht.hook_timeline_table([_rec(comm_ms=[1.0, 2.0])])
    assert mht.hook_timeline_table([]).empty


# ------------------------------------------------------------------ hook_budget_table: the hook's iteration, term by term
def _ddp(mode, ms, compressor=None, params=None, **kw):
    r = {"kind": "ddp", "status": "ok", "config_id": f"{mode}-{compressor}-{params}-{kw}", "model": "m", "batch_size": 8,
         "world_size": 2, "network": {"rate_gbps": 10.0}, "comm": None, "switch_interval_ms": 5.0, "mode": mode,
         "compressor": compressor, "params": params or {}, "bucket_mb": None, "hook_overlap": True if mode == "hook" else None,
         "ms_median": ms}
    r.update(kw)
    return r


def _budget_records():
    hook = _rec(network={"rate_gbps": 10.0}, switch_interval_ms=5.0, backward_end_ms=12.0, sync_end_ms=15.0,
                iteration_ms=31.0)
    buckets = {"kind": "buckets", "status": "ok", "config_id": "bk", "model": "m", "batch_size": 8, "world_size": 2,
               "network": {"rate_gbps": 10.0}, "comm": None, "bucket_mb": None, "ready_ms": [1.0, 6.0, 10.0],
               "backward_ms": 40.0}  # no switch_interval_ms: Python's default
    return [hook, buckets, _ddp("syncsgd", 48.0), _ddp("post", 27.0, "topk", {"ratio": 0.01}),
            _ddp("hook", 30.0, "topk", {"ratio": 0.01}),
            _ddp("hook", 99.0, "topk", {"ratio": 0.05}),  # other parameters: not this row's
            _ddp("syncsgd", 77.0, network={"rate_gbps": 1.0})]  # other network: not this row's


def test_budget_splits_the_hooked_iteration_against_syncsgd_by_hand():
    t = mht.hook_budget_table(_budget_records())
    assert len(t) == 1
    r = t.iloc[0]
    assert (r.syncsgd_ms, r.post_ms, r.hook_ms, r.hook_minus_post_ms) == (48.0, 27.0, 30.0, 3.0)
    assert r.backward_compute_ms == 10.0          # syncSGD's last bucket ready
    assert r.backward_slowdown_ms == 2.0          # the hook's backward ended at 12
    assert r.exposed_ms == 3.0                    # 15 - 12
    assert r.outside_ms == 16.0                   # 31 - 15
    assert r.syncsgd_outside_ms == 8.0            # 48 - 40
    assert r.extra_outside_ms == 8.0
    md = mht.hook_budget_markdown(t)
    assert "| m b8 | 2 | 10.0 | topk 1% | 48.0 | 27.0 | 30.0 | 3.0 | 10.0 | 2.0 | 3.0 | 8.0 | 8.0 |" in md


def test_budget_reads_a_frame_and_leaves_what_was_not_measured_nan():
    recs = _budget_records()
    t = mht.hook_budget_table(pd.DataFrame(recs))
    assert t.iloc[0].extra_outside_ms == 8.0  # NaN cells of the frame match the records' None
    alone = mht.hook_budget_table([recs[0]])
    assert alone.iloc[0].exposed_ms == 3.0 and math.isnan(alone.iloc[0].syncsgd_ms)
    assert math.isnan(alone.iloc[0].backward_slowdown_ms)
    assert "| — |" in mht.hook_budget_markdown(alone)
    other_gil = mht.hook_budget_table([dict(recs[0], switch_interval_ms=0.5), *recs[1:]])
    assert math.isnan(other_gil.iloc[0].syncsgd_ms)  # the A/B half is compared with its own half only


def test_the_verification_readme_carries_the_generated_hook_budget():
    from studykit import paths
    from studykit.measure.report import load_frame
    text = (paths.DATA / "verification" / "bandwidth" / "README.md").read_text()
    a, b = "<!-- hook-budget:begin -->\n", "<!-- hook-budget:end -->"
    assert a in text and b in text
    table = mht.hook_budget_table(load_frame(paths.DATA / "measurements" / "gpu_checks_h200" / "hooks.jsonl"))
    assert len(table) == 4 and table["extra_outside_ms"].notna().all()
    assert text[text.index(a) + len(a):text.index(b)] == mht.hook_budget_markdown(table), \
        "regenerate with hook_times.hook_budget_markdown(hook_budget_table(records))"
    # the README's reading of the table: every hook adds work outside the backward pass (none included),
    # and every compressing hook lengthens the backward pass itself
    assert (table["extra_outside_ms"] > 1.0).all(), "the README says every hook adds work outside the backward pass"
    assert (table.loc[table["compressor"] != "none", "backward_slowdown_ms"] > 1.0).all(), \
        "the README says the compressing hooks lengthen the backward pass"
