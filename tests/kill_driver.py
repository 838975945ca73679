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


def semantic_memory_stores(mem, w: int, r_no: int) -> None:
    """The SemanticMemory child's work (never returns): store sightings in mode ``patrol``,
    every third in the background, flushing every sixth, and report on pipe ``w`` — ``A key``
    once a foreground store returned (durable), ``Q key`` for a queued background store, ``F``
    once a flush returned (every queued store durable)."""
    i = 0
    while True:
        i += 1
        text = f"round {r_no} sighting {i} of the red door"
        bg = i % 3 == 0
        items = mem.store(text, "noted", mode="patrol", background=bg,
                          importance=0.9 if i % 4 == 0 else 0.1)
        if bg:
            os.write(w, f"Q {items[0].key}\n".encode())
            if i % 6 == 0:
                mem.flush()
                os.write(w, b"F\n")
        else:
            os.write(w, f"A {items[0].key}\n".encode())
