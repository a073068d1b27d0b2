"""Worker processes that do not outlive what started them.

A worker of ``train --world-size N`` (spawned here) or of ``torchrun`` calls :func:`die_with_parent` as it
starts: on Linux the kernel then sends it SIGTERM when its parent exits, however the parent went (SIGKILL
included), so no orphan keeps training or holds a port and a GPU. Elsewhere the call does nothing.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Optional

__all__ = ["die_with_parent", "die_with_launcher", "under_torchrun"]

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def under_torchrun() -> bool:
    """Whether torchrun (or another launcher) set RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def die_with_parent(parent_pid: Optional[int] = None, sig: int = signal.SIGTERM) -> bool:
    """Ask Linux to send ``sig`` to this process when its parent exits (``prctl(PR_SET_PDEATHSIG)``); if the
    parent is already gone (``parent_pid``, the pid the parent passed down, default the current parent, is no
    longer this process's parent), send ``sig`` to itself at once. Returns whether the request was made (False
    off Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    expected = os.getppid() if parent_pid is None else parent_pid
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    except (OSError, AttributeError):  # a libc without prctl: nothing to ask
        return False
    if os.getppid() != expected:  # the parent died before the request: no signal will come
        os.kill(os.getpid(), int(sig))
    return True


def die_with_launcher() -> bool:
    """:func:`die_with_parent` in a process that torchrun (or another launcher) started; nothing in one started
    from a shell. Returns whether the request was made."""
    return under_torchrun() and die_with_parent()
