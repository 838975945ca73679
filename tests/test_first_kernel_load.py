"""A Ctrl-C while numba loads for the first time never breaks the process.

numba's first kernel call (a compile or a cache load) imports its registries; a
KeyboardInterrupt inside one of those imports used to leave every later put/search raising
``KeyError("duplicate registration for ...")``. Each case runs in a fresh process, interrupts
the load inside the import of ``numba.typed.typeddict`` right after it registered its boxing
functions (the spot that broke), then embeds again.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from memcore import HashingEmbedder

CHILD = r"""
import os, signal, sys
from memcore import HashingEmbedder

how = sys.argv[1]
target = os.path.join("numba", "typed", "typeddict.py")


def inside(frame, event, arg):
    if event == "line" and "unbox_dicttype" in frame.f_globals:
        sys.settrace(None)
        frame.f_trace = None
        if how == "signal":                  # a real SIGINT: Python's default handler
            signal.raise_signal(signal.SIGINT)
        else:                                # an exception raised right there (no handler
            raise KeyboardInterrupt          # could defer it)
    return inside


def tracer(frame, event, arg):
    if frame.f_code.co_filename.endswith(target) and frame.f_code.co_name == "<module>":
        return inside
    return None


emb = HashingEmbedder(dim=16)
sys.settrace(tracer)
try:
    emb.encode(["the dock is in the hallway"])
    print("first: done")
except KeyboardInterrupt:
    print("first: interrupted")
sys.settrace(None)
for _ in range(2):
    print("retry:", emb.encode(["the dock is in the hallway"]).tobytes().hex())
"""


@pytest.mark.parametrize("how", ["signal", "raise"])
def test_an_interrupted_first_kernel_load_leaves_the_process_working(how):
    out = subprocess.run([sys.executable, "-c", CHILD, how], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0] == "first: interrupted", out.stdout        # the Ctrl-C is not swallowed
    want = HashingEmbedder(dim=16).encode(["the dock is in the hallway"])
    retries = [ln.split(": ")[1] for ln in lines if ln.startswith("retry:")]
    assert len(retries) == 2
    for got in retries:
        assert np.array_equal(np.frombuffer(bytes.fromhex(got), np.float32), want[0])
