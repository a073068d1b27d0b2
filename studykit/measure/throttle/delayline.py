"""The delay line: a user-space switch between the workers' TUN devices (the kernel has no netem)."""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Sequence

from .netns import IFNAME, PREFIX, _alive

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
    ap = argparse.ArgumentParser(prog="python -m studykit.measure.throttle _delayline")
    ap.add_argument("--delay-ms", type=float, required=True, help="one-way delay added to every packet")
    ap.add_argument("--subnet", required=True)
    ap.add_argument("--parent", type=int, default=None, help="exit when this pid is gone")
    ap.add_argument("namespaces", nargs="+", help="worker namespaces, in rank order")
    a = ap.parse_args(argv)
    for ns in a.namespaces:  # only ever our own namespaces
        if not ns.startswith(PREFIX + "-"):
            raise SystemExit(f"refusing namespace {ns!r}: not created by studykit.measure.throttle")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:  # the "wire" should not wait behind the workers (or other users) for a CPU
        os.nice(-5)
    except OSError:
        pass
    delay_line(a.namespaces, a.delay_ms, a.subnet, a.parent)
    return 0
