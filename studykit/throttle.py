"""Run measurements on a throttled network: one network namespace per worker, ``tc`` shaping.

The paper (Agarwal et al., Sec. 4.2 and App. C, Fig. 3 and 19) verified its performance model by
limiting bandwidth with ``tc`` on a real cluster. :class:`ThrottledCluster` does the same on one
Linux machine: every worker is a process in its own network namespace, the namespaces are joined by
veth pairs (directly for two workers, through a bridge living in a namespace of its own otherwise),
and each worker's egress is shaped by a token bucket (``tc qdisc ... tbf``) at ``rate_gbps``. That is
a full-duplex NIC of ``rate_gbps`` per worker, which is what a ring all-reduce's bandwidth term
assumes. The kernel here has no ``netem``: with ``latency_ms`` the workers are instead joined by TUN
devices and a small user-space delay line (a switch that holds every packet ``latency_ms``), which is
CPU-bound well below the veth path (see ``docs/throttle.md``).

Safety: every address lives on links that exist only inside namespaces this module creates
(10.213.1.0/24 by default); nothing is added to the root namespace. Namespaces are named
``stkthr-<pid>-<seq>-...``; teardown kills the processes inside and deletes them even after an
exception, Ctrl-C or SIGTERM, and leftovers of dead owners are removed at start.

Shell::

    python -m studykit throttle --workers 2 --rate-gbps 0.5 1 2.5 --out data/measurements/throttle/sweep.jsonl \\
        -- sweep --sizes-mb 1 16
    python -m studykit throttle --rate-gbps 1 --out /tmp/probe.jsonl -- _probe --size-mb 16
    python -m studykit.throttle _probe --size-mb 16        # inside a cluster: one gloo all-reduce timing
    python -m studykit.throttle _stream --size-mb 64       # inside a cluster: RTT + iperf-like TCP stream 1 -> 0
    python -m studykit.throttle _cleanup [--all]           # delete leftover stkthr-* namespaces

Every worker process gets ``STUDYKIT_NETWORK`` (JSON, see :meth:`ThrottledCluster.network_info`),
for the record writer to store as each record's top-level ``network`` field (null on a real network);
the ``throttle`` command also fills that field in records that lack it.
"""
from __future__ import annotations

import argparse
import atexit
import itertools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

__all__ = [
    "ThrottledCluster", "RankResult", "ThrottleUnavailable", "unavailable_reason",
    "cleanup_leftovers", "list_namespaces", "probe_allreduce", "probe_stream", "merge_network", "main",
    "use_iproute2", "nccl_transports", "NCCL_ENV",
]

PREFIX = "stkthr"  # every namespace this module creates starts with it
_NAME_RE = re.compile(rf"^{PREFIX}-(\d+)-(\d+)-")
IFNAME = "sk0"  # the worker's interface inside its namespace (same name in every namespace)
CMD_TIMEOUT_S = 10.0  # any single ip/tc call
ENV_NETWORK = "STUDYKIT_NETWORK"
ETH_HEADER_BYTES = 14  # tbf counts the Ethernet header; TCP/IP(+timestamps) headers are 52 bytes
TCPIP_HEADER_BYTES = 52
ENV_IPROUTE2 = "STUDYKIT_IPROUTE2"  # folder of Debian iproute2 .debs (or one unpacked with dpkg -x)
#: NCCL settings of a GPU worker: sockets over the worker's shaped link and nothing else (no NVLink/PCIe
#: peer-to-peer, no shared memory, no InfiniBand, no NVLink multicast); INFO logs name the transport used
NCCL_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_NVLS_ENABLE": "0",
            "NCCL_SOCKET_IFNAME": IFNAME, "NCCL_DEBUG": "INFO"}
_seq = itertools.count()
#: how ip and tc are started: the binaries, and the environment they need (LD_LIBRARY_PATH when they
#: come from a folder of unpacked .debs); see :func:`use_iproute2`
_TOOLS: dict = {"ip": "ip", "tc": "tc", "libs": None}


class ThrottleUnavailable(RuntimeError):
    """This machine (or user) cannot create namespaces / shape traffic."""


def use_iproute2(folder: str | os.PathLike | None) -> None:
    """Run ``ip`` and ``tc`` from ``folder`` instead of ``PATH`` (None: back to ``PATH``).

    ``folder`` holds Debian's iproute2 and its libraries, either as ``.deb`` files
    (``scripts/fetch_iproute2.sh``; unpacked here with ``dpkg -x`` into a temporary folder, never
    into ``/``) or already unpacked. ``ip``/``tc`` then run with ``LD_LIBRARY_PATH`` pointing into it;
    worker processes never see that variable (they would load the wrong libraries).
    """
    if folder is None:
        _TOOLS.update(ip="ip", tc="tc", libs=None)
        return
    root = Path(folder)
    if not root.is_dir():
        raise ThrottleUnavailable(f"iproute2 folder {root} does not exist")
    debs = sorted(root.glob("*.deb"))
    if debs and not any((root / d / "ip").exists() for d in ("sbin", "bin", "usr/sbin", "usr/bin")):
        if shutil.which("dpkg") is None:
            raise ThrottleUnavailable(f"{root} holds .deb files but `dpkg` (to unpack them) is not found")
        dest = Path(tempfile.mkdtemp(prefix=f"{PREFIX}-iproute2-"))
        atexit.register(shutil.rmtree, dest, True)
        for deb in debs:
            _sh_plain(["dpkg", "-x", str(deb), str(dest)], timeout_s=60)
        root = dest
    found = {}
    for tool in ("ip", "tc"):
        for d in ("sbin", "bin", "usr/sbin", "usr/bin"):
            if (root / d / tool).exists():
                found[tool] = str(root / d / tool)
                break
        else:
            raise ThrottleUnavailable(f"no `{tool}` under {root} (expected sbin/{tool}: Debian's iproute2)")
    libs = [str(root / d) for d in ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib", "usr/lib")
            if (root / d).is_dir()]
    _TOOLS.update(ip=found["ip"], tc=found["tc"], libs=os.pathsep.join(libs))


def _tool_env() -> dict | None:
    """The environment ip/tc run with: ours, plus LD_LIBRARY_PATH into an iproute2 folder if one is used."""
    if not _TOOLS["libs"]:
        return None
    return {**os.environ, "LD_LIBRARY_PATH": _TOOLS["libs"]}


def _worker_prefix() -> list[str]:
    """What ``ip netns exec NS`` runs before a worker's command: the worker's own LD_LIBRARY_PATH back."""
    if not _TOOLS["libs"]:
        return []
    orig = os.environ.get("LD_LIBRARY_PATH")
    return ["env", f"LD_LIBRARY_PATH={orig}"] if orig else ["env", "-u", "LD_LIBRARY_PATH"]


def _sh_plain(cmd: Sequence[str], timeout_s: float = CMD_TIMEOUT_S) -> str:
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def unavailable_reason() -> str | None:
    """Why a throttled cluster cannot run here, or None if it can (checked by actually trying)."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "needs root (network namespaces and tc)"
    if _TOOLS["libs"] is None and os.environ.get(ENV_IPROUTE2):
        try:
            use_iproute2(os.environ[ENV_IPROUTE2])
        except ThrottleUnavailable as e:
            return str(e)
    for tool in ("ip", "tc"):
        if shutil.which(_TOOLS[tool]) is None:
            return (f"`{tool}` (iproute2) not found; install iproute2, or give a folder of its Debian "
                    f"packages with --iproute2 / {ENV_IPROUTE2} (scripts/fetch_iproute2.sh)")
    name = f"{PREFIX}-{os.getpid()}-{next(_seq)}-check"
    try:
        _sh(["ip", "netns", "add", name])
    except Exception as e:  # noqa: BLE001 - any failure means "cannot"
        return f"cannot create a network namespace: {e}"
    try:
        _sh(["ip", "-n", name, "link", "add", "c0", "type", "veth", "peer", "name", "c1"])
        _sh(["tc", "-n", name, "qdisc", "add", "dev", "c0", "root", "tbf",
             "rate", "1000000bit", "burst", "10000", "limit", "100000"])
    except Exception as e:  # noqa: BLE001
        return f"cannot shape with tc tbf: {e}"
    finally:
        _delete_namespace(name)
    return None


def _sh(cmd: Sequence[str], timeout_s: float = CMD_TIMEOUT_S) -> str:
    """Run one ip/tc command, bounded in time; raise with its stderr on failure."""
    cmd = list(cmd)
    if cmd and cmd[0] in ("ip", "tc"):
        cmd[0] = _TOOLS[cmd[0]]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=_tool_env())
    except FileNotFoundError as e:
        raise ThrottleUnavailable(f"{cmd[0]} not found") from e
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def list_namespaces() -> list[str]:
    """Names of the namespaces this module created (any owner) that still exist."""
    try:
        out = _sh(["ip", "netns", "list"])
    except Exception:  # noqa: BLE001
        return []
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if n.startswith(PREFIX + "-")]


def _namespace_pids(name: str) -> list[int]:
    try:
        out = _sh(["ip", "netns", "pids", name])
    except Exception:  # noqa: BLE001
        return []
    return [int(x) for x in out.split() if x.isdigit()]


def _delete_namespace(name: str) -> None:
    """Kill what runs inside (only our own namespaces reach here), then delete; never raises."""
    for _ in range(3):
        pids = _namespace_pids(name)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)
    try:
        _sh(["ip", "netns", "del", name])
    except Exception:  # noqa: BLE001 - already gone, or busy: reported by list_namespaces()
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_leftovers(all_owners: bool = False) -> list[str]:
    """Delete ``stkthr-*`` namespaces whose creating process is gone (all of them with ``all_owners``).

    Namespaces of a live owner (another engineer's run, a concurrent test) are left alone.
    """
    removed = []
    for name in list_namespaces():
        m = _NAME_RE.match(name)
        owner = int(m.group(1)) if m else None
        if all_owners or owner is None or (owner != os.getpid() and not _alive(owner)):
            _delete_namespace(name)
            removed.append(name)
    return removed


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
        for ns in workers + ([self.bridge_namespace] if self.topology == "bridge" else []):
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
        cmd = [sys.executable, "-m", "studykit.throttle", "_delayline", "--delay-ms", str(self.latency_ms),
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
    """This checkout first, so workers import the same studykit as the parent."""
    root = str(Path(__file__).resolve().parent.parent)
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


# ---- the delay line: a user-space switch between the workers' TUN devices --------------------
_TUNSETIFF, _IFF_TUN, _IFF_NO_PI, _CLONE_NEWNET = 0x400454CA, 0x0001, 0x1000, 0x40000000


def _open_tun_in(ns: str, ifname: str = IFNAME) -> int:
    """Attach to the persistent TUN device ``ifname`` inside namespace ``ns``; return its fd."""
    import ctypes
    import fcntl
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(target, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {ns}")
        try:
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
            fcntl.ioctl(fd, _TUNSETIFF, struct.pack("16sH22x", ifname.encode(), _IFF_TUN | _IFF_NO_PI))
        finally:
            if libc.setns(home, _CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")
    finally:
        os.close(home)
        os.close(target)
    return fd


def delay_line(namespaces: Sequence[str], delay_ms: float, subnet: str, parent: int | None = None,
               max_life_s: float = 24 * 3600) -> None:
    """Forward IPv4 packets between the workers' TUN devices, each held ``delay_ms`` (one-way).

    Worker ``r`` owns address ``subnet.(r+1)``; packets to any other address are dropped. Releases
    are FIFO (the delay is constant); ``select``'s microsecond timeout keeps the added delay within
    ~0.1 ms of the target when the CPU is free. Exits when ``parent`` dies.
    """
    import collections
    import select

    fds = [_open_tun_in(ns) for ns in namespaces]
    by_dst = {bytes(int(x) for x in f"{subnet}.{r + 1}".split(".")): fd for r, fd in enumerate(fds)}
    delay_s = delay_ms / 1e3
    queue: collections.deque = collections.deque()
    dropped = 0
    print("ready", flush=True)
    start = last_check = time.monotonic()
    while True:
        now = time.monotonic()
        while queue and queue[0][0] <= now:
            _, fd, pkt = queue.popleft()
            try:
                os.write(fd, pkt)
            except OSError as e:  # a worker's device went away or is full: drop, as a wire would
                dropped += 1
                if dropped <= 5:
                    print(f"delay line: dropped a packet: {e}", file=sys.stderr, flush=True)
        if now - last_check > 0.5:
            last_check = now
            if (parent and not _alive(parent)) or now - start > max_life_s:
                return
        wait_s = min(0.5, max(0.0, queue[0][0] - now)) if queue else 0.5
        ready, _, _ = select.select(fds, [], [], wait_s)
        now = time.monotonic()
        for fd in ready:
            for _ in range(64):
                try:
                    pkt = os.read(fd, 65536)
                except (BlockingIOError, InterruptedError):
                    break
                if len(pkt) >= 20 and pkt[0] >> 4 == 4:
                    out = by_dst.get(pkt[16:20])
                    if out is not None:
                        queue.append((now + delay_s, out, pkt))


def _delay_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m studykit.throttle _delayline")
    ap.add_argument("--delay-ms", type=float, required=True, help="one-way delay added to every packet")
    ap.add_argument("--subnet", required=True)
    ap.add_argument("--parent", type=int, default=None, help="exit when this pid is gone")
    ap.add_argument("namespaces", nargs="+", help="worker namespaces, in rank order")
    a = ap.parse_args(argv)
    for ns in a.namespaces:  # only ever our own namespaces
        if not ns.startswith(PREFIX + "-"):
            raise SystemExit(f"refusing namespace {ns!r}: not created by studykit.throttle")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:  # the "wire" should not wait behind the workers (or other users) for a CPU
        os.nice(-5)
    except OSError:
        pass
    delay_line(a.namespaces, a.delay_ms, a.subnet, a.parent)
    return 0


def _network_from_env() -> dict | None:
    """What a record writer should store as ``network``: the JSON in ``STUDYKIT_NETWORK``, else None."""
    net = os.environ.get(ENV_NETWORK)
    return json.loads(net) if net else None


# ---- the probe: a self-contained gloo all-reduce timing, run inside a worker ------------------
def probe_allreduce(size_mb: float = 16.0, iters: int = 5, warmup: int = 2, timeout_s: float = 60.0,
                    backend: str = "gloo") -> dict | None:
    """Time an all-reduce of ``size_mb`` MiB of fp32 under the env:// rendezvous; rank 0 returns a record.

    ``backend`` "gloo" (CPU tensors) or "nccl" (the worker's one visible GPU). ``busbw_gbps`` =
    algbw * 2(p-1)/p (nccl-tests convention): the per-link rate a ring all-reduce needs, which is what
    a per-worker egress limit bounds. For 2 workers busbw == algbw.
    """
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be gloo or nccl, got {backend!r}")
    torch.set_num_threads(1)
    device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method="env://", timeout=timedelta(seconds=timeout_s))
    try:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        numel = int(size_mb * 2**20) // 4
        x = torch.ones(numel, dtype=torch.float32, device=device)
        times = []
        for i in range(warmup + iters):
            dist.barrier()
            if backend == "nccl":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            dist.all_reduce(x)
            if backend == "nccl":
                torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            if i >= warmup:
                times.append(dt)
        t = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank defines each iteration
        times = t.tolist()
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    nbytes = numel * 4
    med = statistics.median(times)
    algbw = nbytes * 8 / med / 1e9
    rec = {
        "kind": "throttle_probe", "op": "all_reduce", "backend": backend, "dtype": "float32",
        "nbytes": nbytes, "world_size": world_size, "warmup": warmup, "iters": iters,
        "time_s": {"median": med, "mean": statistics.fmean(times), "min": min(times), "max": max(times)},
        "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (world_size - 1) / world_size,
        "torch": torch.__version__, "host": os.uname().nodename,
        "gpu": torch.cuda.get_device_name(device) if backend == "nccl" else None,
        "git_commit": os.environ.get("STUDYKIT_GIT_COMMIT"),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    rec["network"] = _network_from_env()
    return rec


#: "... NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0" -> "NET/Socket"
_VIA_RE = re.compile(r"\bvia (\w+)(?:/(\w+))?")


def nccl_transports(*logs: str) -> list[str]:
    """The transports NCCL says it connected its channels with (``NCCL_DEBUG=INFO`` output), e.g.
    ``["NET/Socket"]``; ``P2P/...``, ``SHM/...`` or ``NVLS`` mean traffic bypassed the shaped link."""
    found = set()
    for log in logs:
        for line in log.splitlines():
            if "NCCL INFO" in line and "via " in line:
                m = _VIA_RE.search(line)
                if m:
                    found.add(m.group(1) + (f"/{m.group(2)}" if m.group(2) else ""))
    return sorted(found)


def probe_stream(size_mb: float = 64.0, timeout_s: float = 60.0, pings: int = 20,
                 incast: bool = False) -> dict | None:
    """iperf-like: rank 1 streams ``size_mb`` MiB over one TCP connection to rank 0; rank 0 returns a record.

    Measures the shaped link itself (TCP goodput, at most ``payload_efficiency`` x the rate), without
    gloo's CPU work: compare with :func:`probe_allreduce` to see which one stops tracking first.
    First ``pings`` one-byte round trips (rank 1) give ``rtt_ms`` (the delay line adds 2 x latency_ms).
    ``incast``: every rank > 0 streams ``size_mb`` to rank 0 at once; the aggregate is bounded by
    rank 0's ingress (shaped on the veth and bridge topologies, not on the delay line's).
    """
    import selectors
    import socket

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]) + 1000
    nbytes = int(size_mb * 2**20)
    n_senders = world_size - 1 if incast else 1
    if rank == 0:
        with socket.create_server((addr, port), backlog=8) as srv:
            srv.settimeout(timeout_s)
            conns = {}
            while len(conns) < n_senders:
                conn, _ = srv.accept()
                conn.settimeout(timeout_s)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conns[int(conn.recv(1)[0])] = conn  # each sender first says its rank
            try:
                rtts = []
                for _ in range(pings):  # ping-pong of one byte: the round trip (latency, not bandwidth)
                    t0 = time.perf_counter()
                    conns[1].sendall(b"p")
                    conns[1].recv(1)
                    rtts.append(time.perf_counter() - t0)
                for c in conns.values():
                    c.sendall(b"g")  # go
                sel = selectors.DefaultSelector()
                for c in conns.values():
                    c.setblocking(False)
                    sel.register(c, selectors.EVENT_READ)
                buf = bytearray(1 << 20)
                total = nbytes * n_senders
                got, first, t0, half, open_conns = 0, 0, None, None, len(conns)
                deadline = time.monotonic() + timeout_s
                while got < total and open_conns and time.monotonic() < deadline:
                    for key, _ in sel.select(timeout=1.0):
                        try:
                            k = key.fileobj.recv_into(buf)
                        except BlockingIOError:
                            continue
                        if k == 0:
                            sel.unregister(key.fileobj)
                            open_conns -= 1
                            continue
                        if t0 is None:  # time from the first byte: excludes connection set-up
                            t0, first = time.perf_counter(), k
                        got += k
                        if half is None and got >= total // 2:
                            half = (time.perf_counter(), got)
                t1 = time.perf_counter()
                for c in conns.values():
                    c.setblocking(True)
                    c.sendall(b"k")
            finally:
                for c in conns.values():
                    c.close()
        if got < total:
            raise RuntimeError(f"stream: received {got} of {total} bytes")
        dt = t1 - t0
        return {"kind": "throttle_stream", "op": "tcp_incast" if incast else "tcp_stream",
                "senders": n_senders, "nbytes": got, "time_s": dt,
                "goodput_gbps": (got - first) * 8 / dt / 1e9,
                # second half only: TCP's window has grown by then (matters with latency)
                "goodput_2nd_half_gbps": (got - half[1]) * 8 / max(t1 - half[0], 1e-9) / 1e9 if half else None,
                "rtt_ms": {"median": statistics.median(rtts) * 1e3, "min": min(rtts) * 1e3} if rtts else None,
                "host": os.uname().nodename, "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "network": _network_from_env()}
    if rank <= n_senders:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                conn = socket.create_connection((addr, port), timeout=timeout_s)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.sendall(bytes([rank]))
            if rank == 1:
                for _ in range(pings):
                    conn.sendall(conn.recv(1))
            conn.recv(1)  # go
            conn.sendall(bytes(nbytes))
            conn.recv(1)
    return None


def _probe_main(argv: list[str], stream: bool = False) -> int:
    ap = argparse.ArgumentParser(
        prog=f"python -m studykit.throttle {'_stream' if stream else '_probe'}",
        description="one TCP stream rank 1 -> rank 0 (iperf-like)" if stream
        else "time a gloo all-reduce (run inside a throttled cluster)")
    ap.add_argument("--size-mb", type=float, default=64.0 if stream else 16.0, help="message size, MiB")
    if stream:
        ap.add_argument("--incast", action="store_true", help="every rank > 0 sends to rank 0 at once")
    else:
        ap.add_argument("--iters", type=int, default=5)
        ap.add_argument("--warmup", type=int, default=2)
        ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                        help="gloo on CPU tensors, nccl on the worker's GPU")
    ap.add_argument("--timeout-s", type=float, default=60.0, help="collective / socket timeout")
    ap.add_argument("--out", help="append the record (JSON Lines) to this file (rank 0)")
    a = ap.parse_args(argv)
    if stream:
        rec = probe_stream(a.size_mb, a.timeout_s, incast=a.incast)
    else:
        rec = probe_allreduce(a.size_mb, a.iters, a.warmup, a.timeout_s, backend=a.backend)
    if rec is not None:
        line = json.dumps(rec)
        print(line, flush=True)
        if a.out:
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            with open(a.out, "a") as f:
                f.write(line + "\n")
    return 0


# ---- records ----------------------------------------------------------------------------------
def merge_network(record: dict, network: dict) -> dict:
    """Set the record's top-level ``network`` field (provenance is flat in studykit.measure's schema)
    unless the writer already filled it from ``STUDYKIT_NETWORK``."""
    if not record.get("network"):
        record["network"] = network
    return record


def _last_record(path: Path) -> dict | None:
    """The last complete JSON object in ``path`` (the probe's own output file), or None."""
    if not path.is_file():
        return None
    for line in reversed(path.read_text().splitlines()):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            return rec
    return None


def _count_lines(path: Path) -> int:
    return sum(1 for _ in open(path, "rb")) if path.is_file() else 0


def _visible_gpus() -> int:
    """How many CUDA devices torch sees (in a subprocess: the parent never creates a CUDA context)."""
    try:
        p = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                           capture_output=True, text=True, timeout=120)
        return int(p.stdout.strip().splitlines()[-1])
    except Exception:  # noqa: BLE001 - no torch, no driver: no GPUs
        return 0


def _probe_key(rec: dict) -> tuple:
    net = rec.get("network") or {}
    return (net.get("rate_gbps"), net.get("workers"), net.get("topology"), net.get("mtu"), net.get("latency_ms"),
            rec.get("backend"), rec.get("nbytes"))


def _run_probe(cluster: ThrottledCluster, probe_path: Path, size_mb: float, backend: str,
               timeout_s: float) -> dict:
    """Time one all-reduce on the cluster, note NCCL's transport, append the record to ``probe_path``.

    Reuses a record already in ``probe_path`` for the same network (a resumed campaign)."""
    nbytes = int(size_mb * 2**20) // 4 * 4
    key = (cluster.rate_gbps, cluster.n_workers, cluster.topology, cluster.mtu, cluster.latency_ms, backend, nbytes)
    if probe_path.is_file():
        for line in probe_path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and _probe_key(rec) == key and rec.get("transport_ok"):
                return rec
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}-probe-") as tmp:
        tmp_out = Path(tmp) / "probe.jsonl"
        res = cluster.run(lambda r: [sys.executable, "-m", "studykit.throttle", "_probe", "--size-mb", str(size_mb),
                                     "--iters", "3", "--warmup", "1", "--backend", backend,
                                     "--timeout-s", str(timeout_s), "--out", str(tmp_out)],
                          timeout_s=timeout_s)
        rec = _last_record(tmp_out)
    if rec is None or not all(r.ok for r in res):
        tails = "\n".join(f"--- rank {r.rank} (rc {r.returncode}):\n{(r.stderr or r.stdout)[-1500:]}"
                          for r in res if not r.ok)
        raise RuntimeError(f"the {backend} all-reduce probe failed at {cluster.rate_gbps} Gbit/s\n{tails}")
    if backend == "nccl":
        rec["nccl_transport"] = nccl_transports(*(r.stdout + r.stderr for r in res))
        rec["transport_ok"] = rec["nccl_transport"] == ["NET/Socket"]
    else:
        rec["nccl_transport"] = None
        rec["transport_ok"] = True
    probe_path.parent.mkdir(parents=True, exist_ok=True)
    with open(probe_path, "a") as f:
        f.write(json.dumps(rec) + "\n")
    return rec


def _finite_nonneg(text: str) -> float:
    v = float(text)
    if not (v >= 0 and v < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return v


def _positive(text: str) -> float:
    v = float(text)
    if not (v > 0 and v < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return v


# ---- CLI --------------------------------------------------------------------------------------
def _cluster_main(argv: list[str]) -> int:
    if "--" in argv:
        i = argv.index("--")
        own, sub = argv[:i], argv[i + 1:]
    else:
        own, sub = argv, []
    ap = argparse.ArgumentParser(
        prog="python -m studykit throttle",
        description="Run a studykit subcommand on every worker of a throttled network (netns + tc tbf), "
                    "once per rate. Example: throttle --workers 2 --rate-gbps 0.5 1 --out "
                    "data/measurements/throttle/probe.jsonl -- _probe --size-mb 16. On GPUs (one NCCL rank "
                    "per GPU, sockets over the shaped link): throttle --gpus --workers 2 --rate-gbps 1 10 "
                    "--out DIR -- ddp --models resnet50")
    ap.add_argument("--workers", type=int, default=2, help="2..4 (one network namespace each)")
    ap.add_argument("--rate-gbps", type=_finite_nonneg, nargs="+", required=True,
                    help="link rate of every worker (egress; ingress too on veth/bridge), Gbit/s; "
                         "one run per value; 0 = unshaped")
    ap.add_argument("--mtu", type=int, default=None, help="default 9000; 65000 with --latency-ms")
    ap.add_argument("--latency-ms", type=_finite_nonneg, default=None,
                    help="one-way delay per packet via the user-space delay line (CPU-bound: see docs)")
    ap.add_argument("--burst-bytes", type=int, default=None,
                    help="tbf bucket, bytes (default: --burst-us of traffic, at least two frames)")
    ap.add_argument("--burst-us", type=_positive, default=400.0,
                    help="default bucket as time at the rate: a message may finish at most this early")
    ap.add_argument("--topology", choices=("auto", "veth", "bridge", "tun"), default="auto")
    ap.add_argument("--gpus", nargs="*", default=None, metavar="ID",
                    help="one CUDA GPU per worker (CUDA_VISIBLE_DEVICES), NCCL over sockets on the shaped link "
                         "only (P2P, SHM, IB, NVLS off); IDs, default 0..workers-1")
    ap.add_argument("--iproute2", default=None, metavar="DIR",
                    help=f"run ip/tc from Debian's iproute2 packages in DIR (.deb files, or unpacked); "
                         f"env {ENV_IPROUTE2}; fetch them with scripts/fetch_iproute2.sh")
    ap.add_argument("--probe-mb", type=_finite_nonneg, default=None,
                    help="before each rate's command, time an all-reduce of this many MiB (NCCL with --gpus) and "
                         "stamp the measured rate and NCCL's transport on every record (default 64 with --gpus, "
                         "else 0 = no probe); probe records go to probe.jsonl beside --out")
    ap.add_argument("--timeout-s", type=_positive, default=600.0, help="per rate, all workers")
    ap.add_argument("--out", required=True,
                    help="JSON Lines file (*.jsonl) or folder (records go to <folder>/<subcommand>.jsonl); "
                         "records are written as they are measured, and a rerun skips what is there")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(own)
    if not sub:
        ap.error("give the studykit subcommand after `--`, e.g. `-- sweep ...` or `-- _probe --size-mb 16`")
    if "--out" in sub or any(s.startswith("--out=") for s in sub):
        ap.error("give --out to throttle, not to the subcommand (throttle passes it on)")
    if not 2 <= a.workers <= 4:
        ap.error(f"--workers must be 2..4, got {a.workers}")
    if a.iproute2:
        try:
            use_iproute2(a.iproute2)
        except (ThrottleUnavailable, RuntimeError) as e:
            print(f"throttle: skipped: {e}", file=sys.stderr)
            return 77
    reason = unavailable_reason()
    if reason:
        print(f"throttle: skipped: {reason}", file=sys.stderr)
        return 77
    gpus = None
    if a.gpus is not None:
        n_visible = _visible_gpus()
        gpus = a.gpus or [str(i) for i in range(a.workers)]
        if n_visible < a.workers:
            print(f"throttle: skipped: --gpus needs one GPU per worker: {a.workers} workers, "
                  f"{n_visible} CUDA GPU(s) visible", file=sys.stderr)
            return 77
        if len(gpus) != a.workers or any(not g.isdigit() or int(g) >= n_visible for g in gpus):
            ap.error(f"--gpus takes {a.workers} distinct ids in 0..{n_visible - 1}, got {' '.join(gpus)}")
    probe_mb = a.probe_mb if a.probe_mb is not None else (64.0 if gpus else 0.0)
    out = Path(a.out)
    if out.suffix != ".jsonl" and sub[0] != "train":
        out = out / f"{sub[0].lstrip('_')}.jsonl"
    if out.exists() and not (out.is_file() or (out.is_dir() and sub[0] == "train")):
        ap.error(f"--out {out} exists and is not a regular file")
    (out if sub[0] == "train" else out.parent).mkdir(parents=True, exist_ok=True)
    probe_path = (out if out.is_dir() else out.parent) / "probe.jsonl"
    if sub[0] in ("_probe", "_stream"):
        base_cmd = [sys.executable, "-m", "studykit.throttle", *sub]
        probe_mb = 0.0
    else:
        base_cmd = [sys.executable, "-m", "studykit", *sub]
    failed = 0
    for rate in a.rate_gbps:
        cluster = ThrottledCluster(a.workers, rate or None, mtu=a.mtu, burst_bytes=a.burst_bytes, burst_us=a.burst_us,
                                   latency_ms=a.latency_ms, topology=a.topology, gpus=gpus, verbose=a.verbose)
        before = _count_lines(out)
        res, wall, note = [], 0.0, ""
        with cluster:
            if probe_mb:
                probe = _run_probe(cluster, probe_path, probe_mb, "nccl" if gpus else "gloo",
                                   timeout_s=min(a.timeout_s, 300.0))
                if not probe["transport_ok"]:
                    print(f"throttle: at {rate} Gbit/s NCCL connected via {probe['nccl_transport']}, not only "
                          f"NET/Socket: traffic would bypass the shaped link; nothing measured", file=sys.stderr)
                    return 1
                cluster.extra_info.update(measured_busbw_gbps=round(probe["busbw_gbps"], 4),
                                          measured_probe_bytes=probe["nbytes"],
                                          nccl_transport=probe["nccl_transport"])
                note = f"probe {probe['busbw_gbps']:.3f} Gbit/s busbw via {probe['nccl_transport'] or 'gloo'}; "
            t0 = time.monotonic()
            res = cluster.run(lambda r: [*base_cmd, "--out", str(out)], timeout_s=a.timeout_s)
            wall = time.monotonic() - t0
        n_new = _count_lines(out) - before
        codes = [r.returncode for r in res]
        status = "ok" if all(r.ok for r in res) else "FAILED"
        if gpus and status == "ok":
            seen = nccl_transports(*(r.stdout + r.stderr for r in res))
            if seen and seen != ["NET/Socket"]:
                status = f"FAILED (NCCL connected via {seen})"
        print(f"throttle: rate {rate} Gbit/s x {a.workers} workers: {status} exit codes {codes}, {note}"
              f"{n_new} records -> {out} ({wall:.1f} s)", file=sys.stderr, flush=True)
        if status != "ok":
            failed += 1
            for r in res:
                if not r.ok:
                    tail = (r.stderr or r.stdout)[-2000:]
                    print(f"--- rank {r.rank} (rc {r.returncode}, timed out {r.timed_out}):\n{tail}",
                          file=sys.stderr)
        if sub[0] in ("_probe", "_stream") and out.is_file():
            rec = _last_record(out)
            if rec and rec.get("kind") == "throttle_probe":
                print(f"  all-reduce busbw {rec['busbw_gbps']:.3f} Gbps (configured {rate})", file=sys.stderr)
            elif rec and rec.get("kind") == "throttle_stream":
                print(f"  TCP goodput {rec['goodput_gbps']:.3f} Gbps (configured {rate})", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """``throttle ...`` (from studykit.cli), or ``_probe`` / ``_cleanup`` (python -m studykit.throttle)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("_probe", "_stream"):
        return _probe_main(argv[1:], stream=argv[0] == "_stream")
    if argv and argv[0] == "_delayline":
        return _delay_main(argv[1:])
    if argv and argv[0] == "_cleanup":
        ap = argparse.ArgumentParser(prog="python -m studykit.throttle _cleanup")
        ap.add_argument("--all", action="store_true", help="also namespaces of live owners")
        removed = cleanup_leftovers(ap.parse_args(argv[1:]).all)
        print("\n".join(removed) if removed else "nothing to remove")
        return 0
    if argv and argv[0] == "throttle":
        argv = argv[1:]
    try:
        return _cluster_main(argv)
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM, SIGHUP: the cluster is already torn down
        print(f"throttle: interrupted ({str(e) or 'Ctrl-C'}); cluster torn down", file=sys.stderr)
        return 130
    except (ThrottleUnavailable, ValueError, RuntimeError) as e:
        print(f"throttle: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
