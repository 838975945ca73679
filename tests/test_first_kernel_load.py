"""A Ctrl-C while numba loads for the first time never breaks the process.

numba's first kernel call (a compile or a cache load) imports its registries; a
KeyboardInterrupt inside one of those imports used to leave every later put/search raising
``KeyError("duplicate registration for ...")``. Each case runs in a fresh process, interrupts
the load inside the import of ``numba.typed.typeddict`` right after it registered its boxing
functions (the spot that broke), then embeds again, or (a store with an embedder that uses
no numba) constructs, writes and searches again.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from memcore import HashingEmbedder

CHILD = r"""
import os, signal, sys, tempfile
import numpy as np
from memcore import HashingEmbedder, LongTermMemory, ShortTermMemory

how, what = sys.argv[1:3]
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


class Toy:                  # an embedder without numba: the stores' kernels load it first
    name, dim = "toy-v1", 8

    def encode(self, texts, batch_size=32):
        out = np.zeros((len(texts), 8), np.float32)
        for i, t in enumerate(texts):
            out[i, len(t) % 8] = 1.0
        return out


path = tempfile.mkdtemp()
emb = HashingEmbedder(dim=16)


def use():
    if what == "hashing":
        return emb.encode(["the dock is in the hallway"]).tobytes().hex()
    store = ShortTermMemory(embedder=Toy()) if what == "short" else LongTermMemory(path, Toy())
    store.put("ns", "dock", "the dock is in the hallway")
    hits = [h.key for h in store.search("ns", "the dock is in the hallway")]
    getattr(store, "close", lambda: None)()
    return ",".join(hits)


sys.settrace(tracer)
try:
    use()
    print("first: done")
except KeyboardInterrupt:
    print("first: interrupted")
sys.settrace(None)
for _ in range(2):
    print("retry:", use())
"""


@pytest.mark.parametrize("what", ["hashing", "short", "long"])
@pytest.mark.parametrize("how", ["signal", "raise"])
def test_an_interrupted_first_kernel_load_leaves_the_process_working(how, what):
    out = subprocess.run([sys.executable, "-c", CHILD, how, what], capture_output=True,
                         text=True, timeout=300, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert lines[0] == "first: interrupted", out.stdout        # the Ctrl-C is not swallowed
    retries = [ln.split(": ")[1] for ln in lines if ln.startswith("retry:")]
    assert len(retries) == 2
    if what == "hashing":
        want = HashingEmbedder(dim=16).encode(["the dock is in the hallway"])[0]
        for got in retries:
            assert np.array_equal(np.frombuffer(bytes.fromhex(got), np.float32), want)
    else:
        assert retries == ["dock", "dock"]
