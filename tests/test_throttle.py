"""The throttled cluster (netns + tc tbf): comes up, shapes, runs workers, always cleans up.

Needs root, iproute2 and tbf; skipped otherwise. Bounded: the whole file runs in ~15-25 s.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from studykit import paths

from studykit.measure import throttle as T
from studykit.measure.throttle import netns as N

REASON = T.unavailable_reason()
skip_no_netns = pytest.mark.skipif(REASON is not None, reason=f"throttle: {REASON}")
PY = sys.executable
ROOT = str(paths.ROOT)
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}


def _ours_left(names):
    return sorted(set(names) & set(T.list_namespaces()))


# ---- no rights needed ----------------------------------------------------------------------------
def test_merge_network_fills_only_missing():
    net = {"rate_gbps": 1.0}
    assert T.merge_network({"x": 1}, net) == {"x": 1, "network": net}
    assert T.merge_network({"x": 1, "network": None}, net)["network"] == net  # schema default: null
    kept = {"network": {"rate_gbps": 2.0}}  # the writer read STUDYKIT_NETWORK itself
    assert T.merge_network(kept, net)["network"]["rate_gbps"] == 2.0


def test_parameters_validated():
    with pytest.raises(ValueError):
        T.ThrottledCluster(n_workers=5)
    with pytest.raises(ValueError):
        T.ThrottledCluster(n_workers=3, topology="veth")
    with pytest.raises(ValueError):
        T.ThrottledCluster(latency_ms=1.0, topology="bridge")
    assert T.ThrottledCluster(latency_ms=1.0).topology == "tun"
    c = T.ThrottledCluster(rate_gbps=1.0, mtu=9000)
    assert c.burst_bytes >= 2 * 9014 and c.burst_bytes * 8 / 1e9 <= 0.5e-3  # <= 0.5 ms at the rate
    assert T.ThrottledCluster(n_workers=3).topology == "bridge"


# ---- root + netns --------------------------------------------------------------------------------
@pytest.mark.netns
@skip_no_netns
@pytest.mark.parametrize("n_workers", [2, 3])
def test_up_down_leaves_nothing(n_workers):
    with T.ThrottledCluster(n_workers, rate_gbps=1.0) as c:
        names = list(c.names)
        assert len(names) == n_workers + (n_workers > 2)
        assert set(names) <= set(T.list_namespaces())
        res = c.run(lambda r: ["sh", "-c", 'echo "$RANK $WORLD_SIZE $LOCAL_RANK $MASTER_ADDR $GLOO_SOCKET_IFNAME '
                                            '$TP_SOCKET_IFNAME"; ip -o link | wc -l; cat /sys/class/net/sk0/mtu; '
                                            'tc qdisc show dev sk0'], timeout_s=10)
        for r in res:
            assert r.ok, r.stderr
            env_line, n_links, mtu, qdisc = r.stdout.splitlines()[:4]
            assert env_line.split() == [str(r.rank), str(n_workers), "0", c.address(0), T.IFNAME, T.IFNAME]
            assert int(n_links) == 2  # lo and sk0 only: no way out to the host's networks
            assert int(mtu) == 9000
            assert "tbf" in qdisc and "rate 1Gbit" in qdisc
    assert _ours_left(names) == []


@pytest.mark.netns
@skip_no_netns
def test_exception_inside_with_cleans_up():
    names = []
    with pytest.raises(RuntimeError, match="boom"):
        with T.ThrottledCluster(2, rate_gbps=0.5) as c:
            names = list(c.names)
            c.run(lambda r: ["sleep", "0.1"], timeout_s=5)
            raise RuntimeError("boom")
    assert names and _ours_left(names) == []


@pytest.mark.netns
@skip_no_netns
def test_timeout_and_failure_kill_workers():
    with T.ThrottledCluster(2, rate_gbps=1.0) as c:
        t0 = time.monotonic()
        res = c.run(lambda r: ["sleep", "30"], timeout_s=1.0)
        assert all(r.timed_out and r.killed and r.returncode is None for r in res)
        # one rank fails: the other, stuck "in a collective", is killed after the grace period
        res = c.run(lambda r: ["sh", "-c", "exit 3"] if r == 0 else ["sleep", "30"], timeout_s=20, fail_grace_s=0.5)
        assert res[0].returncode == 3 and res[1].killed and not res[1].timed_out
        assert time.monotonic() - t0 < 10
        for ns in c.worker_namespaces:
            assert N._namespace_pids(ns) == []


@pytest.mark.netns
@skip_no_netns
def test_sigterm_tears_down(tmp_path):
    script = ("import sys, time; from studykit.measure.throttle import ThrottledCluster\n"
              "with ThrottledCluster(2, rate_gbps=1.0) as c:\n"
              "    print(' '.join(c.names), flush=True); time.sleep(30)\n")
    p = subprocess.Popen([PY, "-c", script], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        names = p.stdout.readline().split()
        assert names and set(names) <= set(T.list_namespaces())
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=15)
    finally:
        if p.poll() is None:
            p.kill()
    assert _ours_left(names) == []


@pytest.mark.netns
@skip_no_netns
def test_leftovers_of_a_killed_owner_are_removed():
    script = ("import time; from studykit.measure.throttle import ThrottledCluster\n"
              "c = ThrottledCluster(2, rate_gbps=1.0).__enter__()\n"
              "print(' '.join(c.names), flush=True); time.sleep(30)\n")
    p = subprocess.Popen([PY, "-c", script], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        names = p.stdout.readline().split()
    finally:
        p.kill()  # SIGKILL: no chance to clean up
        p.wait(timeout=10)
    assert names and set(names) <= set(T.list_namespaces())
    removed = T.cleanup_leftovers()  # what every ThrottledCluster does on entry
    assert set(names) <= set(removed) and _ours_left(names) == []
    assert not any(set(names) & set(rec["namespaces"]) for _, rec in N._owner_records()), "owner record kept"


@pytest.mark.netns
@skip_no_netns
def test_cleanup_removes_only_what_a_gone_owner_recorded():
    """A namespace with the prefix but no owner record, one whose owner lives (this process), and one
    whose record comes from another PID namespace are all left alone."""
    import itertools

    tag = f"{N.PREFIX}-{os.getpid()}-{next(itertools.count(90000))}"
    unowned, mine, foreign = f"{tag}-unowned", f"{tag}-mine", f"{tag}-foreign"
    try:
        for ns in (unowned, mine, foreign):
            N._sh(["ip", "netns", "add", ns])
        N.write_owner(tag + "m", [mine])  # owner: this (live) process
        path = N.write_owner(tag + "f", [foreign])
        rec = json.loads(path.read_text())
        rec.update(pid=2 ** 22 + 7, pid_namespace="pid:[1]")  # a gone pid, but in another PID namespace
        path.write_text(json.dumps(rec))
        removed = T.cleanup_leftovers()
        assert not {unowned, mine, foreign} & set(removed)
        assert {unowned, mine, foreign} <= set(T.list_namespaces())
        assert unowned in N.unowned_namespaces() and mine not in N.unowned_namespaces()
        # the same record in our PID namespace with a pid that no longer runs: removed
        rec["pid_namespace"] = N._pid_namespace()
        path.write_text(json.dumps(rec))
        assert foreign in T.cleanup_leftovers() and foreign not in T.list_namespaces()
        assert not path.exists()
    finally:
        for ns in (unowned, mine, foreign):
            N._delete_namespace(ns)
        N.remove_owner(tag + "m")
        N.remove_owner(tag + "f")


def test_owner_gone_needs_proof():
    me = {"pid": os.getpid(), "pid_namespace": N._pid_namespace(), "start_ticks": N._start_ticks(os.getpid())}
    assert not N.owner_gone(me)
    assert N.owner_gone({**me, "start_ticks": me["start_ticks"] + 1})  # pid reused by a later process
    assert not N.owner_gone({**me, "pid_namespace": "pid:[0]"})  # another PID namespace: cannot tell
    assert not N.owner_gone({**me, "pid_namespace": None})
    assert not N.owner_gone({**me, "pid": "x"})


@pytest.mark.netns
@skip_no_netns
def test_probe_tracks_1gbps():
    """A 16 MiB gloo all-reduce between 2 workers shaped at 1 Gbps: busbw (== algbw for 2) ~ 1 Gbps.

    The shaper caps every iteration: the fastest one stays <= 1.05 on every try. A busy shared CPU
    can only slow the probe down (a CI machine measured medians of 0.62-0.67 twice), so the floor,
    on the fastest iteration, is half the rate: that still catches a unit mistake (bytes for bits
    is 8x off). A low result gets two more tries on the same cluster.
    """
    got = []
    with T.ThrottledCluster(2, rate_gbps=1.0) as c:
        for _attempt in range(3):
            res = c.run(lambda r: [PY, "-m", "studykit.measure.throttle", "_probe", "--size-mb", "16", "--iters", "5"],
                        timeout_s=60)
            assert all(r.ok for r in res), [r.stderr[-1000:] for r in res]
            rec = json.loads(res[0].stdout)
            assert rec["network"]["rate_gbps"] == 1.0
            assert rec["schema"] == 1 and rec["git_commit"] and rec["torch"] and rec["timestamp"]  # the kit's provenance
            best = rec["nbytes"] * 8 / rec["time_s"]["min"] / 1e9  # the fastest iteration: no wait on the CPU
            assert rec["busbw_gbps"] <= best <= 1.05, rec
            got.append(best)
            if best >= 0.5:
                break
    assert 0.5 <= got[-1] <= 1.05, f"fastest iteration's busbw {got} Gbps at 1 Gbps configured"


@pytest.mark.netns
@skip_no_netns
def test_delay_line_adds_latency_and_keeps_rate():
    """TUN + user-space delay line: 2 ms one-way adds ~4 ms to a round trip; 0.5 Gbps still shapes.

    Like the probe test, a low rate (a starved delay line or receiver on the shared CPU) gets two
    more tries and the floor is half the rate; the upper bounds hold on every try.
    """
    with T.ThrottledCluster(2, rate_gbps=0.5, latency_ms=2.0) as c:
        assert c.topology == "tun" and c._delay_proc is not None
        delay_pid = c._delay_proc.pid
        for _attempt in range(3):
            res = c.run(lambda r: [PY, "-m", "studykit.measure.throttle", "_stream", "--size-mb", "16"], timeout_s=30)
            assert all(r.ok for r in res), [r.stderr[-1000:] for r in res]
            rec = json.loads(res[0].stdout)
            assert rec["goodput_gbps"] <= 0.51 and rec["goodput_2nd_half_gbps"] <= 0.52, rec
            if rec["goodput_2nd_half_gbps"] >= 0.25:
                break
        names = list(c.names)
    assert rec["network"]["latency_ms"] == 2.0
    assert 3.9 <= rec["rtt_ms"]["min"] <= 5.5, rec["rtt_ms"]
    assert rec["goodput_2nd_half_gbps"] >= 0.25, rec  # steady state, after TCP's window grew
    assert _ours_left(names) == [] and c._delay_proc is None
    assert not N._alive(delay_pid)  # killed and reaped by close()


@pytest.mark.netns
@skip_no_netns
def test_cli_stamps_records(tmp_path):
    """The CLI end to end, on a 3-worker bridge: ranks 1 and 2 both stream to rank 0 (incast),
    so the aggregate must be held to rank 0's shaped ingress, not 2x the rate."""
    out = tmp_path / "stream.jsonl"
    p = subprocess.run([PY, "-m", "studykit", "throttle", "--workers", "3", "--rate-gbps", "0.5",
                        "--out", str(out), "--", "_stream", "--size-mb", "8", "--incast"],
                       capture_output=True, text=True, timeout=60, env=ENV)
    assert p.returncode == 0, p.stderr
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    net = rec["network"]
    assert (net["rate_gbps"], net["workers"], net["topology"], net["mtu"]) == (0.5, 3, "bridge", 9000)
    assert net["shaped"] == "egress and ingress of each worker"
    assert rec["senders"] == 2
    assert 0.25 <= rec["goodput_gbps"] <= 0.51, rec  # at most payload efficiency x rate; a busy CPU only slows it


# ---- GPUs: what can be checked without one -------------------------------------------------------
def test_gpu_workers_get_one_gpu_and_sockets_only():
    c = T.ThrottledCluster(n_workers=2, rate_gbps=1.0, gpus=[3, 5])
    env0, env1 = c.env_for(0, 29500), c.env_for(1, 29500)
    assert (env0["CUDA_VISIBLE_DEVICES"], env1["CUDA_VISIBLE_DEVICES"]) == ("3", "5")
    assert env0["LOCAL_RANK"] == "0"
    for k, v in {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1",
                 "NCCL_NVLS_ENABLE": "0", "NCCL_SOCKET_IFNAME": T.IFNAME}.items():
        assert env0[k] == v
    assert "CUDA_VISIBLE_DEVICES" not in T.ThrottledCluster(n_workers=2).env_for(0, 29500)
    with pytest.raises(ValueError, match="one distinct GPU per worker"):
        T.ThrottledCluster(n_workers=2, gpus=[0])
    with pytest.raises(ValueError, match="one distinct GPU per worker"):
        T.ThrottledCluster(n_workers=2, gpus=[1, 1])


def test_measured_facts_reach_the_network_field():
    c = T.ThrottledCluster(n_workers=2, rate_gbps=1.0, gpus=[0, 1])
    c.extra_info.update(measured_busbw_gbps=0.98, nccl_transport=["NET/Socket"])
    net = json.loads(c.env_for(0, 29500)[T.ENV_NETWORK])
    assert (net["rate_gbps"], net["measured_busbw_gbps"], net["nccl_transport"]) == (1.0, 0.98, ["NET/Socket"])
    assert net["transport"] == "nccl sockets, one GPU per worker"


def test_nccl_transport_is_read_from_the_log():
    log = ("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
           "h:1:2 [0] NCCL INFO Channel 01/0 : 1[0] -> 0[0] [receive] via NET/Socket/1\n"
           "h:1:2 [0] NCCL INFO Connected all rings\n")
    assert T.nccl_transports(log) == ["NET/Socket"]
    assert T.nccl_transports(log, "x [1] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/CUMEM/read\n") == \
        ["NET/Socket", "P2P/CUMEM"]
    assert T.nccl_transports("some other output via email\n") == []


def test_iproute2_folder_is_checked(tmp_path):
    with pytest.raises(T.ThrottleUnavailable, match="does not exist"):
        T.use_iproute2(tmp_path / "missing")
    with pytest.raises(T.ThrottleUnavailable, match="no `ip`"):
        T.use_iproute2(tmp_path)
    (tmp_path / "sbin").mkdir()
    for tool in ("ip", "tc"):
        (tmp_path / "sbin" / tool).write_text("#!/bin/sh\n")
    (tmp_path / "lib" / "x86_64-linux-gnu").mkdir(parents=True)
    try:
        T.use_iproute2(tmp_path)
        assert N._TOOLS["ip"] == str(tmp_path / "sbin" / "ip")
        assert str(tmp_path / "lib" / "x86_64-linux-gnu") in N._TOOLS["libs"]
        prefix = N._worker_prefix()  # workers get their own LD_LIBRARY_PATH back
        assert prefix[0] == "env" and (prefix[1] == "-u" or prefix[1].startswith("LD_LIBRARY_PATH="))
    finally:
        T.use_iproute2(None)
    assert N._TOOLS == {"ip": "ip", "tc": "tc", "libs": None} and N._worker_prefix() == []


@skip_no_netns
def test_cli_refuses_more_workers_than_gpus(tmp_path):
    p = subprocess.run([PY, "-m", "studykit", "throttle", "--gpus", "--workers", "2", "--rate-gbps", "1",
                        "--out", str(tmp_path / "x.jsonl"), "--", "ddp"],
                       capture_output=True, text=True, timeout=180, env={**ENV, "CUDA_VISIBLE_DEVICES": ""})
    assert p.returncode == 77, p.stderr
    assert "one GPU per worker: 2 workers, 0 CUDA GPU(s) visible" in p.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_cli_refuses_bad_numbers(tmp_path):
    for bad in (["--rate-gbps", "-1"], ["--rate-gbps", "nan"], ["--rate-gbps", "1", "--timeout-s", "inf"],
                ["--rate-gbps", "1", "--workers", "9"]):
        p = subprocess.run([PY, "-m", "studykit", "throttle", *bad, "--out", str(tmp_path / "x.jsonl"), "--", "sweep"],
                           capture_output=True, text=True, timeout=60, env=ENV)
        assert p.returncode == 2 and "Traceback" not in p.stderr, (bad, p.stderr)


def test_record_count_reads_a_file_or_a_folder_of_jsonl(tmp_path):
    from studykit.measure.throttle.cli import _count_lines

    (tmp_path / "a.jsonl").write_text("{}\n{}\n")
    (tmp_path / "b.jsonl").write_text("{}\n")
    (tmp_path / "notes.txt").write_text("not a record\n")
    assert _count_lines(tmp_path / "a.jsonl") == 2
    assert _count_lines(tmp_path) == 3  # train --out DIR writes one file per method
    assert _count_lines(tmp_path / "missing") == 0
