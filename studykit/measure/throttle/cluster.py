"""The throttled cluster: namespaces joined by shaped links, one worker process per namespace."""
from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from .netns import (
    _TOOLS,
    ENV_NETWORK,
    ETH_HEADER_BYTES,
    IFNAME,
    NCCL_ENV,
    PREFIX,
    TCPIP_HEADER_BYTES,
    ThrottleUnavailable,
    _delete_namespace,
    _seq,
    _sh,
    _worker_prefix,
    cleanup_leftovers,
    list_namespaces,
    remove_owner,
    unavailable_reason,
    write_owner,
)


@dataclass
class RankResult:
    """One worker's process: exit code (None if it had to be killed), output, wall time."""

    rank: int
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    timed_out: bool = False
    killed: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0


@dataclass
class ThrottledCluster:
    """``n_workers`` network namespaces on one machine, each worker's link shaped to ``rate_gbps``.

    Each worker is a full-duplex NIC of ``rate_gbps``: its egress is shaped by tbf, and so is its
    ingress (on a direct veth the peer's egress; on the bridge the port towards it, unless
    ``shape_ingress=False``; not on the delay line). ``burst_bytes`` (tbf's bucket) defaults to
    ``burst_us`` of traffic at the rate, at least two frames. A burst lets up to that many bytes
    through unshaped, so any message may finish at most ``burst_us`` early (a bounded,
    rate-independent error); a bucket of only two frames wastes tokens whenever a sender on this
    busy 2-core machine is descheduled for more than its ~0.1 ms, and gloo then tracks only ~70%
    of 2.5 Gbps (see docs/throttle.md). ``gso_max_bytes`` (default half the bucket, 1 frame..64 KiB;
    0 keeps the kernel's) caps the veth's GSO packets so tbf never has to split one larger than its
    bucket (at MTU 1500 that halved the rate). ``queue_ms`` sizes the tbf queue (``limit``) as that
    many milliseconds at the rate (at least 64 frames) so TCP sees no drops.
    ``topology``: "auto" (a direct veth for 2 workers, a bridge otherwise, the delay line when
    ``latency_ms`` is set), "veth" (2 only), "bridge" or "tun" (the delay line, 0 ms if
    ``latency_ms`` is None). ``latency_ms`` is one-way: every packet is held that long, so a round
    trip gains twice it (plus ~0.1-0.2 ms of user-space forwarding).
    ``rate_gbps=None`` leaves the links unshaped (the veth's own speed, CPU-bound).
    """

    n_workers: int = 2
    rate_gbps: float | None = 1.0
    mtu: int | None = None  # 9000 (veth/bridge); 65000 for the delay line (7x fewer packets to copy)
    burst_bytes: int | None = None
    latency_ms: float | None = None
    burst_us: float = 400.0
    gso_max_bytes: int | None = None
    queue_ms: float = 20.0
    shape_ingress: bool = True
    topology: str = "auto"
    subnet: str = "10.213.1"  # /24, exists only on links inside our namespaces
    master_port: int = 29500
    gpus: Sequence[str] | None = None  # one CUDA device per worker (CUDA_VISIBLE_DEVICES), NCCL over sockets
    verbose: bool = False
    names: list[str] = field(default_factory=list, init=False)
    _up: bool = field(default=False, init=False)
    _old_handlers: dict = field(default_factory=dict, init=False)
    _procs: list = field(default_factory=list, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    extra_info: dict = field(default_factory=dict, init=False)  # measured facts added to network_info()

    def __post_init__(self):
        if not 2 <= self.n_workers <= 4:
            raise ValueError("n_workers must be 2..4")
        if self.gpus is not None:
            self.gpus = [str(g) for g in self.gpus]
            if len(self.gpus) != self.n_workers or len(set(self.gpus)) != len(self.gpus):
                raise ValueError(f"gpus: one distinct GPU per worker ({self.n_workers}), got {self.gpus}")
        if self.rate_gbps is not None and not self.rate_gbps > 0:
            raise ValueError("rate_gbps must be positive (or None: unshaped)")
        if self.latency_ms is not None:
            if not 0 <= self.latency_ms <= 1000:
                raise ValueError("latency_ms (one-way) must be in 0..1000")
            if self.topology not in ("auto", "tun"):
                raise ValueError("latency needs topology 'tun' (the user-space delay line)")
            self.topology = "tun"
        elif self.topology == "tun":
            self.latency_ms = 0.0
        if self.mtu is None:
            self.mtu = 65000 if self.topology == "tun" else 9000
        if not 1280 <= self.mtu <= 65000:
            raise ValueError("mtu must be in 1280..65000")
        if self.burst_bytes is None:
            rate_bytes_s = (self.rate_gbps or 0) * 1e9 / 8
            self.burst_bytes = max(2 * (self.mtu + ETH_HEADER_BYTES), int(rate_bytes_s * self.burst_us / 1e6))
        if self.gso_max_bytes is None:  # 0: leave the kernel's 64 KiB
            self.gso_max_bytes = min(65536, max(self.mtu + ETH_HEADER_BYTES, self.burst_bytes // 2))
        if self.burst_bytes < self.mtu + ETH_HEADER_BYTES:
            raise ValueError(f"burst_bytes must hold one frame (>= {self.mtu + ETH_HEADER_BYTES})")
        if self.topology == "auto":
            self.topology = "veth" if self.n_workers == 2 else "bridge"
        if self.topology not in ("veth", "bridge", "tun") or (self.topology == "veth" and self.n_workers != 2):
            raise ValueError("topology: 'veth' (2 workers), 'bridge' or 'tun' (delay line)")
        self._tag = f"{PREFIX}-{os.getpid()}-{next(_seq)}"
        self._run_count = 0
        self._delay_proc: subprocess.Popen | None = None

    # ---- derived -----------------------------------------------------------------------------
    @property
    def limit_bytes(self) -> int:
        frames = 64 * (self.mtu + ETH_HEADER_BYTES)
        if self.rate_gbps is None:
            return frames
        return max(frames, int(self.rate_gbps * 1e9 / 8 * self.queue_ms / 1e3)) + self.burst_bytes

    @property
    def worker_namespaces(self) -> list[str]:
        return [f"{self._tag}-w{r}" for r in range(self.n_workers)]

    @property
    def bridge_namespace(self) -> str:
        return f"{self._tag}-br"

    def address(self, rank: int) -> str:
        return f"{self.subnet}.{rank + 1}"

    @property
    def l2_bytes(self) -> int:
        """Link-layer header per packet that tbf counts (TUN devices carry bare IP packets)."""
        return 0 if self.topology == "tun" else ETH_HEADER_BYTES

    @property
    def payload_efficiency(self) -> float:
        """TCP payload bytes per shaped byte for full frames: what goodput can reach at best."""
        return (self.mtu - TCPIP_HEADER_BYTES) / (self.mtu + self.l2_bytes)

    @property
    def shaped(self) -> str:
        """Which directions are limited to ``rate_gbps``."""
        if self.rate_gbps is None:
            return "nothing"
        if self.topology == "veth" or (self.topology == "bridge" and self.shape_ingress):
            return "egress and ingress of each worker"  # veth: one worker's egress is the other's ingress
        return "egress of each worker"

    def network_info(self) -> dict:
        """What the workers' records should carry as their ``network`` field (env STUDYKIT_NETWORK)."""
        return {
            "emulated": True,
            "shaper": "tc tbf" if self.rate_gbps is not None else None,
            "rate_gbps": self.rate_gbps,
            "mtu": self.mtu,
            "workers": self.n_workers,
            "burst_bytes": self.burst_bytes,
            "gso_max_bytes": self.gso_max_bytes or None,
            "burst_us": round(self.burst_bytes * 8 / (self.rate_gbps * 1e3), 1) if self.rate_gbps else None,
            "limit_bytes": self.limit_bytes,
            "topology": self.topology,
            "shaped": self.shaped,
            "delay_line": "user-space TUN switch" if self.topology == "tun" else None,
            "latency_ms": self.latency_ms,  # one-way, added by the user-space delay line; None: none
            "payload_efficiency": round(self.payload_efficiency, 5),
            "kernel": os.uname().release,
            "transport": "nccl sockets, one GPU per worker" if self.gpus else "gloo sockets",
            **self.extra_info,
        }

    # ---- up / down ---------------------------------------------------------------------------
    def __enter__(self) -> "ThrottledCluster":
        reason = unavailable_reason()
        if reason:
            raise ThrottleUnavailable(reason)
        cleanup_leftovers()
        self._install_signal_handlers()
        atexit.register(self.close)
        try:
            self._bring_up()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _log(self, msg: str) -> None:
        if self.verbose:
            print(f"[throttle] {msg}", file=sys.stderr, flush=True)

    def _tbf(self, ns: str, dev: str) -> None:
        if self.gso_max_bytes and self.topology != "tun":  # never hand tbf a GSO packet larger than its bucket
            _sh(["ip", "-n", ns, "link", "set", dev, "gso_max_size", str(self.gso_max_bytes)])
        _sh(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf",
             "rate", f"{int(round(self.rate_gbps * 1e9))}bit",
             "burst", str(self.burst_bytes), "limit", str(self.limit_bytes)])

    def _bring_up(self) -> None:
        ip = lambda ns, *a: _sh(["ip", "-n", ns, *a])  # noqa: E731
        workers = self.worker_namespaces
        all_ns = workers + ([self.bridge_namespace] if self.topology == "bridge" else [])
        write_owner(self._tag, all_ns)  # before creating them: a kill in between still leaves a record
        for ns in all_ns:
            _sh(["ip", "netns", "add", ns])
            self.names.append(ns)
            ip(ns, "link", "set", "lo", "up")
        if self.topology == "veth":
            # created inside worker 0's namespace, peer moved straight into worker 1's
            ip(workers[0], "link", "add", IFNAME, "type", "veth", "peer", "name", IFNAME, "netns", workers[1])
        elif self.topology == "tun":
            # a persistent TUN device per worker; the delay line (started below) switches between them
            for ns in workers:
                ip(ns, "tuntap", "add", "dev", IFNAME, "mode", "tun")
        else:
            br = self.bridge_namespace
            ip(br, "link", "add", "br0", "type", "bridge", "stp_state", "0", "forward_delay", "0")
            for r, ns in enumerate(workers):
                ip(br, "link", "add", f"p{r}", "type", "veth", "peer", "name", IFNAME, "netns", ns)
                ip(br, "link", "set", f"p{r}", "mtu", str(self.mtu), "master", "br0", "up")
            ip(br, "link", "set", "br0", "mtu", str(self.mtu), "up")
        for r, ns in enumerate(workers):
            ip(ns, "link", "set", IFNAME, "mtu", str(self.mtu), "up")
            ip(ns, "addr", "add", f"{self.address(r)}/24", "dev", IFNAME)
            if self.rate_gbps is not None:
                self._tbf(ns, IFNAME)  # the worker's egress
                if self.topology == "bridge" and self.shape_ingress:
                    self._tbf(self.bridge_namespace, f"p{r}")  # the switch port towards the worker
        if self.topology == "tun":
            self._start_delay_line()
        self._up = True
        self._log(f"up: {workers} {self.network_info()}")

    def _start_delay_line(self) -> None:
        cmd = [sys.executable, "-m", "studykit.measure.throttle", "_delayline", "--delay-ms", str(self.latency_ms),
               "--subnet", self.subnet, "--parent", str(os.getpid()), *self.worker_namespaces]
        env = {**os.environ, "PYTHONPATH": _pythonpath()}
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             env=env, start_new_session=True)
        self._delay_proc = p
        ready = _readline_with_timeout(p.stdout, 15.0)
        if ready.strip() != "ready":
            _kill_group(p)
            err = p.stderr.read().decode(errors="replace")[-2000:] if p.stderr else ""
            raise RuntimeError(f"delay line did not start: {ready!r} {err}")
        self._log(f"delay line pid {p.pid}: {self.latency_ms} ms one-way")

    def close(self) -> None:
        """Kill every worker process and delete every namespace; idempotent, never raises."""
        with self._lock:
            blocked = self._block_signals()
            try:
                for p in list(self._procs):
                    _kill_group(p)
                self._procs.clear()
                if self._delay_proc is not None:
                    _kill_group(self._delay_proc, grace_s=1.0)
                    for f in (self._delay_proc.stdout, self._delay_proc.stderr):
                        if f:
                            f.close()
                    self._delay_proc = None
                for ns in reversed(self.names):
                    _delete_namespace(ns)
                left = [ns for ns in self.names if ns in set(list_namespaces())]
                if left:
                    print(f"[throttle] WARNING: could not delete {left}", file=sys.stderr)
                else:
                    remove_owner(self._tag)
                self.names = left
                self._up = False
            finally:
                self._unblock_signals(blocked)
                self._restore_signal_handlers()
                try:
                    atexit.unregister(self.close)
                except Exception:  # noqa: BLE001
                    pass

    # signals: SIGTERM/SIGHUP become an exception so the with-block unwinds through close()
    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum, frame):
            raise KeyboardInterrupt(f"signal {signum}")

        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                self._old_handlers[sig] = signal.signal(sig, handler)
            except (ValueError, OSError):
                pass

    def _restore_signal_handlers(self) -> None:
        for sig, old in self._old_handlers.items():
            try:
                signal.signal(sig, old)
            except (ValueError, OSError, TypeError):
                pass
        self._old_handlers.clear()

    @staticmethod
    def _block_signals():
        if threading.current_thread() is not threading.main_thread():
            return None
        return signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})

    @staticmethod
    def _unblock_signals(old) -> None:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    # ---- running workers ---------------------------------------------------------------------
    def env_for(self, rank: int, port: int) -> dict[str, str]:
        """torch.distributed's environment for one worker (each worker is its own 'node')."""
        return {
            "MASTER_ADDR": self.address(0),
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "WORLD_SIZE": str(self.n_workers),
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "GROUP_RANK": str(rank),
            "GLOO_SOCKET_IFNAME": IFNAME,
            "TP_SOCKET_IFNAME": IFNAME,
            ENV_NETWORK: json.dumps(self.network_info()),
            **({"CUDA_VISIBLE_DEVICES": self.gpus[rank], **NCCL_ENV} if self.gpus else {}),
        }

    def run(self, cmd_for_rank: Callable[[int], list[str]], env: dict[str, str] | None = None,
            timeout_s: float = 300.0, fail_grace_s: float = 10.0) -> list[RankResult]:
        """Start ``cmd_for_rank(rank)`` in every worker's namespace; wait at most ``timeout_s``.

        If one worker fails, the others get ``fail_grace_s`` to finish, then everything is killed
        (a survivor would otherwise hang in a collective). Returns one :class:`RankResult` per rank.
        """
        if not self._up:
            raise RuntimeError("cluster is not up (use it as a context manager)")
        port = self.master_port + self._run_count
        self._run_count += 1
        base = dict(os.environ)
        base.setdefault("OMP_NUM_THREADS", "1")
        base["PYTHONPATH"] = _pythonpath()  # `python -m studykit ...` from any cwd
        base.update(env or {})
        # `ip netns exec` itself may need the iproute2 folder's libraries; the worker gets its own
        # LD_LIBRARY_PATH back through _worker_prefix()
        tool_libs = {"LD_LIBRARY_PATH": _TOOLS["libs"]} if _TOOLS["libs"] else {}
        started = []
        with tempfile.TemporaryDirectory(prefix=f"{self._tag}-out-") as tmp:
            try:
                for rank, ns in enumerate(self.worker_namespaces):
                    out = open(os.path.join(tmp, f"{rank}.out"), "w+b")
                    err = open(os.path.join(tmp, f"{rank}.err"), "w+b")
                    p = subprocess.Popen([_TOOLS["ip"], "netns", "exec", ns, *_worker_prefix(), *cmd_for_rank(rank)],
                                         env={**base, **self.env_for(rank, port), **tool_libs}, stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
                    self._procs.append(p)
                    started.append((rank, p, out, err, time.monotonic()))
                return self._wait(started, timeout_s, fail_grace_s)
            finally:
                for _, p, out, err, _ in started:
                    _kill_group(p)
                    if p in self._procs:
                        self._procs.remove(p)
                    out.close()
                    err.close()

    def _wait(self, started, timeout_s: float, fail_grace_s: float) -> list[RankResult]:
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        ended: dict[int, float] = {}
        killed: set[int] = set()
        timed_out = False
        while len(ended) < len(started):
            now = time.monotonic()
            for rank, p, *_ in started:
                if rank not in ended and p.poll() is not None:
                    ended[rank] = now
                    if p.returncode != 0:
                        deadline = min(deadline, now + fail_grace_s)
            if len(ended) == len(started):
                break
            if now >= deadline:
                timed_out = now - t0 >= timeout_s
                for rank, p, *_ in started:
                    if rank not in ended:
                        _kill_group(p)
                        killed.add(rank)
                        ended[rank] = time.monotonic()
                break
            time.sleep(0.02)
        results = []
        for rank, p, out, err, start in started:
            out.seek(0)
            err.seek(0)
            rc = p.poll()
            results.append(RankResult(
                rank=rank, returncode=None if rank in killed else rc,
                stdout=out.read().decode(errors="replace"), stderr=err.read().decode(errors="replace"),
                wall_s=ended.get(rank, time.monotonic()) - start,
                timed_out=timed_out and rank in killed, killed=rank in killed))
        return results


def _pythonpath() -> str:
    """This checkout first, so workers import the same studykit as the parent (the folder holding
    the ``studykit`` package: studykit/measure/throttle/cluster.py is three levels below it)."""
    root = str(Path(__file__).resolve().parents[3])
    rest = [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x and x != root]
    return os.pathsep.join([root, *rest])


def _kill_group(p: subprocess.Popen, grace_s: float = 2.0) -> None:
    """SIGTERM the worker's process group, SIGKILL after ``grace_s``; never raises."""
    if p.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _readline_with_timeout(f, timeout_s: float) -> str:
    import select

    if not select.select([f], [], [], timeout_s)[0]:
        return ""
    return f.readline().decode(errors="replace")
