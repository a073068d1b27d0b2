"""Work around a lost wake-up that stalls headless runs of notebooks with an ``interact`` (nbclient#312).

While nbclient (papermill's and Voila's executor) waits for a cell's ``execute_reply`` with
``await shell_channel.get_msg(timeout)``, its emulation of the Output widget *sends* comm messages
on the same asyncio ZMQ socket (``OutputWidget.sync_state``, once per output the interact callback
shows). The send can consume the socket's edge-triggered "readable" notification, so the pending
poll sleeps until its timeout although the reply has arrived: papermill's default per-cell timeout
is none, so the run hangs; Voila shows "Executing 4 of 5" for ever. Seen here on one run in four
to ten of ``notebooks/explorer.ipynb`` (jupyter_client 8.10, pyzmq 27, nbclient 0.11).

:func:`apply` makes ``AsyncZMQSocketChannel.get_msg`` poll in short steps: a message that arrived
is picked up at the next step (each poll re-reads the socket's state), and a wait of ``timeout``
seconds still raises ``Empty`` after ``timeout`` seconds. Idempotent; touches only this process.
"""
from __future__ import annotations

from queue import Empty
from time import monotonic

STEP_S = 0.2
_APPLIED = False


def apply(step_s: float = STEP_S) -> bool:
    """Patch jupyter_client's asyncio channel in this process; ``False`` if jupyter_client is absent."""
    global _APPLIED
    if _APPLIED:
        return True
    try:
        from jupyter_client.channels import AsyncZMQSocketChannel
    except ImportError:  # pragma: no cover - the notebooks extra is installed with the kit
        return False
    original = AsyncZMQSocketChannel.get_msg

    async def get_msg(self, timeout: float | None = None):
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - monotonic())
            try:
                return await original(self, timeout=step_s if left is None else min(step_s, left))
            except Empty:
                if deadline is not None and monotonic() >= deadline:
                    raise

    get_msg.__doc__ = (original.__doc__ or "") + " (polled in short steps: studykit.nbtools.jupyter_fix)"
    AsyncZMQSocketChannel.get_msg = get_msg
    _APPLIED = True
    return True
