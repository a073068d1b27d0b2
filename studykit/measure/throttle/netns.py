"""Network namespaces, ip/tc and their clean-up (see the package docstring)."""
from __future__ import annotations

import atexit
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

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
    tag = f"{PREFIX}-{os.getpid()}-{next(_seq)}"
    name = f"{tag}-check"
    try:
        write_owner(tag, [name])
    except OSError as e:
        return f"cannot write the owner record under {OWNER_DIR}: {e}"
    try:
        _sh(["ip", "netns", "add", name])
    except Exception as e:  # noqa: BLE001 - any failure means "cannot"
        remove_owner(tag)
        return f"cannot create a network namespace: {e}"
    try:
        _sh(["ip", "-n", name, "link", "add", "c0", "type", "veth", "peer", "name", "c1"])
        _sh(["tc", "-n", name, "qdisc", "add", "dev", "c0", "root", "tbf",
             "rate", "1000000bit", "burst", "10000", "limit", "100000"])
    except Exception as e:  # noqa: BLE001
        return f"cannot shape with tc tbf: {e}"
    finally:
        _delete_namespace(name)
        remove_owner(tag)
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


#: where owner records live: one JSON file per cluster (and per availability check) naming the
#: namespaces it creates and the process that creates them
OWNER_DIR = Path(os.environ.get("STUDYKIT_THROTTLE_OWNERS", "/run/studykit-throttle"))


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22): tells a pid reused
    by another process from the one that wrote an owner record."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def write_owner(tag: str, namespaces: Sequence[str]) -> Path:
    """Record (before creating them) that this process owns ``namespaces``; replaced atomically."""
    OWNER_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = OWNER_DIR / f"{tag}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "pid_namespace": _pid_namespace(),
                               "start_ticks": _start_ticks(os.getpid()), "namespaces": list(namespaces)}))
    os.replace(tmp, path)
    return path


def remove_owner(tag: str) -> None:
    try:
        (OWNER_DIR / f"{tag}.json").unlink()
    except FileNotFoundError:
        pass


def owner_gone(record: dict) -> bool:
    """True only when the record's owner provably no longer runs: same PID namespace as ours (a pid
    means nothing across PID namespaces), and its pid is free or now belongs to a later process."""
    if record.get("pid_namespace") is None or record.get("pid_namespace") != _pid_namespace():
        return False
    pid = record.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    if not _alive(pid):
        return True
    return record.get("start_ticks") is not None and _start_ticks(pid) != record.get("start_ticks")


def _owner_records() -> list[tuple[Path, dict]]:
    out = []
    for f in sorted(OWNER_DIR.glob("*.json")) if OWNER_DIR.is_dir() else []:
        try:
            rec = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(rec, dict) and isinstance(rec.get("namespaces"), list):
            out.append((f, rec))
    return out


def cleanup_leftovers() -> list[str]:
    """Delete the namespaces of owner records whose owner process is gone (:func:`owner_gone`).

    Only namespaces named in an owner record this module wrote, with the ``stkthr-`` prefix, are
    ever removed; those of a live owner (a concurrent run or test), of an owner in another PID
    namespace, and any ``stkthr-*`` namespace without a record are left alone (see
    :func:`unowned_namespaces`). Returns the names removed."""
    removed = []
    existing = set(list_namespaces())
    for f, rec in _owner_records():
        if rec.get("pid") == os.getpid() or not owner_gone(rec):
            continue
        for name in rec["namespaces"]:
            if isinstance(name, str) and name.startswith(PREFIX + "-") and name in existing:
                _delete_namespace(name)
                removed.append(name)
        if not set(rec["namespaces"]) & set(list_namespaces()):
            f.unlink(missing_ok=True)
    return removed


def unowned_namespaces() -> list[str]:
    """``stkthr-*`` namespaces that no owner record names (never removed automatically)."""
    named = {n for _, rec in _owner_records() for n in rec["namespaces"]}
    return [n for n in list_namespaces() if n not in named]
