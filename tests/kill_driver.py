"""One SIGKILL round for the fault-injection drivers (tests/test_disk_faults.py): fork a
child that works on a store and reports on a pipe, kill it at a random moment, return what it
reported."""

from __future__ import annotations

import os
import select
import signal
import time
from typing import Callable


def killed_round(child: Callable[[int], None], delay: float, ready: bytes = b"R\n") -> bytes:
    """Fork ``child(w)`` (``w``: the pipe's write end; the child never returns), wait until
    it wrote ``ready``, sleep ``delay`` seconds, SIGKILL it and return everything it wrote."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            child(w)
        finally:
            os._exit(1)
    os.close(w)
    out = b""
    while ready not in out and select.select([r], [], [], 60)[0]:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        out += chunk
    time.sleep(delay)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    while chunk := os.read(r, 1 << 16):
        out += chunk
    os.close(r)
    return out
