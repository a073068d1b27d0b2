"""The parameter-server communicator (``studykit.comm.ParameterServerComm``; Agarwal et al. 2022,
https://arxiv.org/abs/2103.00543, Sec. 2.2, Table 1, Fig. 4): every compressor's protocol gives the same
average through it as through the backend's collectives, bytes are counted as for any communicator, and
``ddp --comm ps`` records never collide with the default's."""
import os
import pickle
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from studykit import comm as K
from studykit import compressors as C
from studykit import ddp as sk_ddp
from studykit import paths
from studykit.measure import ddp as mddp
from studykit.measure.records import IDENTITY, config_id, load_records
from studykit.measure.runtime import CompressorSpec
from studykit.perfmodel import figures
from tests.conftest import worker_grads

STEPS = 2


# ------------------------------------------------------------------ bad input (no process group needed)
def test_make_comm_names_the_valid_kinds():
    with pytest.raises(ValueError, match="unknown communicator kind 'ring'.*collective, ps"):
        K.make_comm("ring")


def test_ps_comm_needs_an_initialised_group():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="ParameterServerComm needs torch.distributed initialised"):
        K.ParameterServerComm()


def test_hook_state_and_reducer_check_the_comm_kind():
    with pytest.raises(ValueError, match="comm_kind must be one of collective, ps"):
        sk_ddp.HookState(C.get("fp16"), comm_kind="tree")
    with pytest.raises(ValueError, match="comm_kind must be one of collective, ps"):
        sk_ddp.PostBackwardReducer(torch.nn.Linear(2, 2), "fp16", comm_kind="server")


def test_hook_state_keeps_its_comm_kind_when_pickled():
    """DDP may pickle hook state; the communicator is rebuilt, and must be rebuilt as a parameter server."""
    state = pickle.loads(pickle.dumps(sk_ddp.HookState(C.get("fp16"), comm_kind="ps")))
    assert state.comm_kind == "ps" and state._comm is None
    assert sk_ddp.HookState(C.get("fp16")).comm_kind == "collective"  # default unchanged


# ------------------------------------------------------------------ records: identity
class _Dist:
    world_size, backend, device = 2, "gloo", torch.device("cpu")


def test_ps_configurations_have_their_own_config_ids():
    assert "comm" in IDENTITY
    specs = [CompressorSpec("fp16", {})]
    cfgs = mddp.plan_configs(_Dist(), ["mlp_small"], [8], specs, ("syncsgd", "hook", "post"), (), (), 128,
                             comms=("collective", "ps"))
    by = {(c.mode, c.comm): c for c in cfgs}
    # syncSGD is DDP's own all-reduce: it runs once, whatever --comm says
    assert set(by) == {("syncsgd", None), ("hook", None), ("hook", "ps"), ("post", None), ("post", "ps")}
    assert len({c.cid for c in cfgs}) == len(cfgs)
    assert '"comm":"ps"' in by[("post", "ps")].cid
    # the default's id is the id records written before the field existed carry: a rerun skips them
    old = config_id(kind="ddp", model="mlp_small", batch_size=8, mode="post", compressor="fp16",
                    params=by[("post", None)].params, seq_len=None, world_size=2, backend="gloo", device_type="cpu")
    assert by[("post", None)].cid == old


def test_plan_configs_rejects_an_unknown_comm():
    with pytest.raises(ValueError, match="unknown communicator kind 'ring'"):
        mddp.plan_configs(_Dist(), ["mlp_small"], [8], [], ("post",), (), (), 128, comms=("ring",))


# ------------------------------------------------------------------ real processes (gloo)
def _worker(rank, world_size, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        ring, ps = K.TorchComm(), K.ParameterServerComm()
        res = {"ring": {}, "ps": {}, "log_ring": {}, "log_ps": {}}
        for name in C.available():
            for tag, comm in (("ring", ring), ("ps", ps)):
                comp = C.get(name)  # one instance per communicator: its state (memory, warm start) is its own
                rec = K.RecordingComm(comm)
                res[tag][name] = [comp.reduce(worker_grads(world_size, seed=s)[rank], rec, key="b0")
                                  for s in range(STEPS)]
                res[f"log_{tag}"][name] = [c.as_dict() for c in rec.log]
        # the wire: an all_reduce of 10 fp32 and an all_gather of 6 int16 through the server
        before = (ps.sent_bytes, ps.received_bytes)
        summed = ps.all_reduce(torch.full((10,), float(rank + 1)))
        gathered = ps.all_gather(torch.full((2, 3), rank, dtype=torch.int16))
        res["wire"] = (ps.sent_bytes - before[0], ps.received_bytes - before[1])
        res["summed"], res["gathered"] = summed, gathered
        try:
            K.ParameterServerComm(server=world_size)
        except ValueError as exc:
            res["bad_server"] = str(exc)
        torch.save(res, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module", params=[2, 3])
def runs(request):
    p = request.param
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(p, os.path.join(tmp, "init"), tmp), nprocs=p, join=True)
        return p, [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(p)]


@pytest.mark.slow
def test_ps_gives_the_rings_average_for_every_compressor(runs):
    p, got = runs
    for name in C.available():
        # gloo's ring may sum in another order than the server's rank order: allow the wire dtype's rounding
        wire = {c.dtype for c in C.get(name).plan([(6, 5)], p)}
        tol = 3e-2 if torch.bfloat16 in wire else 3e-3 if torch.float16 in wire else 1e-5
        sim = C.Simulation(name, p)
        expected = [sim.step(worker_grads(p, seed=s), key="b0") for s in range(STEPS)]
        for rank in range(p):
            for step in range(STEPS):
                for a, b, e in zip(got[rank]["ps"][name][step], got[rank]["ring"][name][step], expected[step][rank]):
                    assert torch.allclose(a, b, rtol=tol, atol=tol), f"{name} p={p} rank {rank} step {step}"
                    assert torch.allclose(a, e, rtol=tol, atol=tol), f"{name} p={p} rank {rank} step {step}"


@pytest.mark.slow
def test_ps_counts_the_bytes_a_worker_sends_like_every_communicator(runs):
    p, got = runs
    for name in C.available():
        assert got[0]["log_ps"][name] == got[0]["log_ring"][name], name
        planned = [c.as_dict() for c in C.get(name).plan([(6, 5), (7,), (2, 3, 4)], p)] * STEPS
        assert got[0]["log_ps"][name] == planned, name


@pytest.mark.slow
def test_ps_server_carries_every_workers_traffic(runs):
    """Worker: one payload out, one reply in. Server (rank 0): p-1 payloads in, p-1 replies out; an
    all_gather's reply is all p payloads."""
    p, got = runs
    ar, ag = 10 * 4, 6 * 2
    assert got[0]["wire"] == ((p - 1) * (ar + p * ag), (p - 1) * (ar + ag))
    for r in range(1, p):
        assert got[r]["wire"] == (ar + ag, ar + p * ag)
    for r in range(p):
        assert torch.equal(got[r]["summed"], torch.full((10,), float(p * (p + 1) // 2)))
        assert [int(t[0, 0]) for t in got[r]["gathered"]] == list(range(p))
        assert all(t.shape == (2, 3) and t.dtype == torch.int16 for t in got[r]["gathered"])
    assert f"server must be a rank of the group, 0 to {p - 1}, got {p}" in got[0]["bad_server"]


@pytest.mark.slow
def test_ddp_command_measures_each_comm_once(tmp_path):
    """``ddp --comm collective ps`` under torchrun: hook and post once per communicator (same bytes per
    worker), syncSGD once; a rerun with ``--comm ps`` alone finds everything done."""
    from tests.test_measure_dist import torchrun

    out = tmp_path / "d.jsonl"
    args = ["ddp", "--models", "mlp_small", "--batch-sizes", "8", "--modes", "syncsgd", "hook", "post",
            "--compressors", "fp16", "signsgd", "--iters", "2", "--warmup", "1", "--out", str(out)]
    torchrun(*args, "--comm", "collective", "ps")
    recs = load_records(out)
    by = {(r["mode"], r["compressor"], r["comm"]): r for r in recs}
    assert len(by) == len(recs) == 1 + 2 * 2 * 2
    assert all(r["status"] == "ok" for r in recs), [r["reason"] for r in recs]
    for mode in ("hook", "post"):
        for name in ("fp16", "signsgd"):
            ring, ps = by[(mode, name, None)], by[(mode, name, "ps")]
            assert ps["wire_bytes_per_iter"] == ring["wire_bytes_per_iter"] > 0
    torchrun(*args, "--comm", "ps")
    assert len(load_records(out)) == len(recs)


# ------------------------------------------------------------------ the committed measurement (Fig. 4 on CPU)
PS_CPU = paths.MEASUREMENTS / "ps_cpu"


def test_committed_ps_records_cover_both_comms_at_both_world_sizes():
    recs = [r for r in load_records(PS_CPU, quiet=True) if r["mode"] == "post"]
    assert {r["comm"] for r in recs} == {None, "ps"}
    for r in recs:
        assert r["status"] == "ok" and r["backend"] == "gloo" and r["model"] == "mlp_large" and r["git_commit"]
    got = {(r["compressor"], r["comm"], r["world_size"], (r["network"] or {}).get("rate_gbps")) for r in recs}
    want = {(c, m, p, rate) for c in ("none", "fp16", "signsgd", "topk") for m in (None, "ps") for p in (2, 3)
            for rate in (None, 1.0)}
    assert got == want


def test_measured_ps_iterations_names_each_protocols_scheme():
    df = figures.measured_ps_iterations(load_records(PS_CPU, quiet=True))
    schemes = df.groupby("payload")["scheme"].agg(set).to_dict()
    assert schemes == {"fp32 gradient": {"all-reduce", "parameter server"}, "fp16": {"all-reduce", "parameter server"},
                       "SignSGD": {"all-gather", "parameter server"}}
    assert set(df["world_size"]) == {2, 3} and df["network"].nunique() == 2
    assert len(df) == 3 * 2 * 2 * 2 and (df["ms_min"] <= df["ms"]).all() and (df["ms"] <= df["ms_max"]).all()
    topk = figures.measured_ps_iterations(load_records(PS_CPU, quiet=True), compressors=("topk",))
    assert set(topk["payload"]) == {"topk 1%"} and set(topk["scheme"]) == {"all-gather", "parameter server"}
    # Table 1's ordering on links shaped to 1 Gbit/s: the server's link carries p - 1 fp32 gradients each way
    shaped = df[df["network"].str.startswith("1 Gbit/s") & (df["payload"] == "fp32 gradient")]
    at3 = shaped[shaped["world_size"] == 3].set_index("scheme")["ms"]
    assert at3["all-reduce"] < at3["parameter server"]


def test_ps_iterations_plot_reads_like_the_other_figures():
    import matplotlib.pyplot as plt

    from studykit.plots import paper as draw

    df = figures.measured_ps_iterations(load_records(PS_CPU, quiet=True))
    fig, axes = draw.ps_iterations_plot(df, title="Does a parameter server slow each iteration?")
    assert fig._suptitle.get_text().endswith("?") and len(axes) == 2
    for ax in axes:
        assert "(ms" in ax.get_ylabel() and "world size" in ax.get_xlabel() and ax.get_yscale() == "log"
        named = {c.get_label() for c in ax.containers if not c.get_label().startswith("_")}
        assert len(named) == 6, named  # at most 6 series per panel (docs/STYLE.md item 14)
    plt.close("all")


def test_ps_records_neither_replace_nor_pass_for_the_rings():
    """A campaign folder may hold both: the crossover table names PS runs apart, verify leaves them out
    (the model prices the backend's collectives)."""
    from studykit.measure.crossover import iteration_table
    from studykit.perfmodel.verify import load_platform

    net = {"rate_gbps": 1.0}
    base = {"kind": "ddp", "status": "ok", "gpu": "x", "world_size": 2, "model": "mlp_large", "batch_size": 32,
            "mode": "post", "compressor": "fp16", "params": {}, "bucket_mb": None, "network": net, "n_iter": 3}
    t = iteration_table([{**base, "ms_median": 4.0, "timestamp": "a"},
                         {**base, "comm": "ps", "ms_median": 6.0, "timestamp": "b"}])
    assert dict(zip(t["method"], t["ms"])) == {"fp16 (post)": 4.0, "fp16 (post) via PS": 6.0}
    plat = load_platform(PS_CPU)
    assert len(plat.ddp) and plat.ddp["comm"].isna().all()


def test_a_switch_interval_is_part_of_the_identity_only_when_set():
    """``ddp --switch-interval-ms`` (the GIL A/B of the hook's thread): its own configurations; without it the
    ids are those of every record written before the field existed."""
    assert "switch_interval_ms" in IDENTITY
    specs = [CompressorSpec("powersgd", {"rank": 4})]
    plain = mddp.plan_configs(_Dist(), ["mlp_small"], [8], specs, ("hook",), (), (), 128)
    ab = mddp.plan_configs(_Dist(), ["mlp_small"], [8], specs, ("hook",), (), (), 128, switch_interval_ms=0.1)
    assert len(plain) == len(ab) == 1 and plain[0].cid != ab[0].cid
    assert '"switch_interval_ms":0.1' in ab[0].cid and "switch_interval" not in plain[0].cid


def test_no_buffer_broadcast_is_part_of_the_identity_of_the_ddp_modes_only():
    """``ddp --no-broadcast-buffers`` (the A/B of DDP's forward): syncSGD and the hook become configurations of
    their own; post, which runs the plain model, keeps its id; the default keeps every earlier id."""
    assert "broadcast_buffers" in IDENTITY
    specs = [CompressorSpec("fp16", {})]
    plain = mddp.plan_configs(_Dist(), ["mlp_small"], [8], specs, ("syncsgd", "hook", "post"), (), (), 128)
    ab = mddp.plan_configs(_Dist(), ["mlp_small"], [8], specs, ("syncsgd", "hook", "post"), (), (), 128,
                           broadcast_buffers=False)
    by = {c.mode: c for c in plain}
    for c in ab:
        assert (c.cid == by[c.mode].cid) == (c.mode == "post")
        assert c.broadcast_buffers is (None if c.mode == "post" else False)
    assert all("broadcast_buffers" not in c.cid for c in plain)


def test_run_ddp_refuses_a_switch_interval_out_of_range():
    with pytest.raises(ValueError, match=r"switch_interval_ms must be in \(0, 1000\] ms, got 0"):
        mddp.run_ddp(_Dist(), ["mlp_small"], [], None, switch_interval_ms=0)


def test_pair_hook_post_puts_each_compressors_hooks_right_after_its_post_and_keeps_the_ids():
    specs = [CompressorSpec("fp16", {}), CompressorSpec("signsgd", {})]
    args = (_Dist(), ["mlp_small", "cnn_small"], None, specs, ("syncsgd", "hook", "post"), (), (), 128)
    plain = mddp.plan_configs(*args, hook_runners=("thread", "graph"))
    paired = mddp.plan_configs(*args, hook_runners=("thread", "graph"), pair_hook_post=True)
    assert sorted(c.cid for c in plain) == sorted(c.cid for c in paired)  # the order changes, nothing else
    key = [(c.mode, c.compressor, c.hook_runner) for c in plain if c.model == "mlp_small"]
    assert key == [("syncsgd", None, None), ("post", "fp16", None), ("post", "signsgd", None),
                   ("hook", "fp16", None), ("hook", "fp16", "graph"), ("hook", "signsgd", None),
                   ("hook", "signsgd", "graph")]
    key = [(c.mode, c.compressor, c.hook_runner) for c in paired if c.model == "mlp_small"]
    assert key == [("syncsgd", None, None), ("post", "fp16", None), ("hook", "fp16", None),
                   ("hook", "fp16", "graph"), ("post", "signsgd", None), ("hook", "signsgd", None),
                   ("hook", "signsgd", "graph")]
    # models still take turns: cnn_small's post of fp16 comes right after mlp_small's
    assert [(c.model, c.mode) for c in paired][2:5] == [("mlp_small", "post"), ("cnn_small", "post"),
                                                        ("mlp_small", "hook")]


def test_pairing_by_iterations_times_each_compressors_post_and_hooks_as_one_unit():
    specs = [CompressorSpec("fp16", {}), CompressorSpec("signsgd", {})]
    args = (_Dist(), ["mlp_small", "cnn_small"], None, specs, ("syncsgd", "hook", "post"), (), (), 128)
    todo = mddp.plan_configs(*args, hook_runners=("thread", "graph"), pair_hook_post=True)
    units = mddp._together(todo, set(), "iterations")
    assert sum(map(len, units)) == len(todo) and [c for u in units for c in u] != todo  # regrouped, none lost
    keys = [[(c.model, c.mode, c.compressor, c.hook_runner) for c in u] for u in units]
    assert keys[:4] == [[("mlp_small", "syncsgd", None, None)], [("cnn_small", "syncsgd", None, None)],
                        [("mlp_small", "post", "fp16", None), ("mlp_small", "hook", "fp16", None),
                         ("mlp_small", "hook", "fp16", "graph")],
                        [("cnn_small", "post", "fp16", None), ("cnn_small", "hook", "fp16", None),
                         ("cnn_small", "hook", "fp16", "graph")]]
    assert len(units) == 2 + 4  # syncSGD per model, then one unit per model and compressor
    # a configuration already timed (only its hook_times record missing) is left alone
    done = {todo[3].cid}
    assert [todo[3]] in mddp._together(todo, done, "iterations")
    assert mddp._together(todo, set(), "configs") == [[c] for c in todo]


def test_pairing_by_iterations_times_pytorchs_hook_beside_the_kits_of_the_same_codec():
    """PyTorch's fp16 hook joins the kit's fp16 unit and its PowerSGD hook (rank 4) the kit's PowerSGD of rank 4,
    not of rank 1; a built-in hook with no kit peer (bf16 not asked for) stays alone."""
    specs = [CompressorSpec("fp16", {}), CompressorSpec("powersgd", {"rank": 1}),
             CompressorSpec("powersgd", {"rank": 4})]
    args = (_Dist(), ["mlp_small"], None, specs, ("syncsgd", "builtin", "hook", "post"), (),
            ("torch_fp16", "torch_bf16", "torch_powersgd"), 128)
    todo = mddp.plan_configs(*args)
    units = mddp._together(todo, set(), "iterations")
    assert sorted(c.cid for u in units for c in u) == sorted(c.cid for c in todo)  # none lost, none twice
    keys = [[(c.mode, c.compressor, c.params.get("rank")) for c in u] for u in units]
    assert [("builtin", "torch_bf16", None)] in keys
    assert [("post", "fp16", None), ("hook", "fp16", None), ("builtin", "torch_fp16", None)] in keys
    assert [("post", "powersgd", 1), ("hook", "powersgd", 1)] in keys
    assert [("post", "powersgd", 4), ("hook", "powersgd", 4), ("builtin", "torch_powersgd", 4)] in keys


def test_run_ddp_names_the_valid_pairings():
    with pytest.raises(ValueError, match="pair_hook_post must be one of off, configs, iterations"):
        mddp.run_ddp(_Dist(), ["mlp_small"], [], None, pair_hook_post="rounds")
