"""Test doubles and store factories shared by the store test suites.

``STORE_FACTORIES`` lists every store that implements the MemoryStore protocol, built with a
:class:`FakeClock` and a small :class:`~memcore.HashingEmbedder`; the semantic and stateful
tests are parametrised over it, so a new store joins every test by adding one entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from memcore import (
    DecayWeights,
    HashingEmbedder,
    HybridWeights,
    LongTermMemory,
    PromotionPolicy,
    ShortTermMemory,
    TwoTierMemory,
)

DIM = 64
T0 = 1_700_000_000.0


class FakeClock:
    """A settable clock (Unix seconds): tests advance it instead of sleeping."""

    def __init__(self, t: float = T0):
        self.t = float(t)

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> float:
        self.t += float(seconds)
        return self.t


class CountingEmbedder:
    """Wraps an embedder and counts ``encode`` calls and texts (to check "encode once")."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.calls = 0
        self.texts = 0

    def encode(self, texts, *, batch_size: int = 4096) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        return self.inner.encode(texts, batch_size=batch_size)


def embedder() -> CountingEmbedder:
    return CountingEmbedder(HashingEmbedder(dim=DIM))


@dataclass
class StoreCase:
    """One store under test: how to build it and what it supports."""

    id: str
    build: Callable[[FakeClock, Any], Any]
    vectors: bool = True        # keeps vectors: accepts vector=/query_vector=
    short_capacity: int | None = None  # FIFO bound of the (short) tier, None = unbounded
    long_tier: bool = False     # has a long tier (TwoTierMemory)
    policy: PromotionPolicy | None = None


def _short(clock, emb, capacity=100_000):
    return ShortTermMemory(capacity=capacity, embedder=emb, clock=clock, weights=DecayWeights())


def _long(clock, emb):
    return LongTermMemory(None, emb, clock=clock, weights=DecayWeights())


STORE_CASES = [
    StoreCase("short", lambda c, e: _short(c, e)),
    StoreCase("short-lexical", lambda c, e: ShortTermMemory(capacity=100_000, clock=c,
                                                            weights=DecayWeights()),
              vectors=False),
    StoreCase("long", _long),
    # A tiny short tier that promotes everything it evicts behaves like one unbounded store,
    # so every protocol semantic holds while evictions/promotions happen all the time.
    StoreCase("two-tier", lambda c, e: TwoTierMemory(
        _short(c, e, capacity=4), _long(c, e), PromotionPolicy(min_importance=0.0),
        weights=DecayWeights(), hybrid=HybridWeights.similarity())),
]


def _postgres(clock, emb, **kw):
    import pg_server     # a real server (tests/pg_server.py); skips or, under CI, fails without

    return pg_server.store(clock, emb, weights=DecayWeights(), **kw)


# (as the long tier of TwoTierMemory: tests/test_store_stateful.py's hybrid two-tier machine)
STORE_CASES.append(StoreCase("postgres", _postgres))
# hybrid recall without a replica (PostgresMemory(replica=False)): exact at these sizes
STORE_CASES.append(StoreCase("postgres-stateless", lambda c, e: _postgres(c, e, replica=False)))


def make_store(case: StoreCase, clock: FakeClock | None = None, emb: Any = None):
    clock = clock if clock is not None else FakeClock()
    emb = emb if emb is not None else embedder()
    return case.build(clock, emb)


def run_cli(*argv: str) -> tuple[int, str, str]:
    """Run the ``memcore`` command line in-process: (exit status, stdout, stderr)."""
    import contextlib
    import io

    from memcore.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def never_committed(directory, from_offset: int) -> None:
    """Make a namespace directory look as a crash before the commit of every record at log
    offset ``from_offset`` and later leaves it: those rows' ``record_offset`` (written only
    after a record commits) back to 0. A test that cuts or un-commits a finished log to
    stand for a torn write must do this too, or the columns witness the cut as damage
    (:func:`memcore.storage.recovery.witnessed_cut`)."""
    import glob
    import os

    for path in glob.glob(os.path.join(str(directory), "record_offset.*.i64")):
        col = np.memmap(path, np.int64, "r+")
        col[col >= from_offset] = 0
        col.flush()
        del col
