"""PostgresMemory beyond the shared semantics/stateful suites (which run over it too): the
server's errors, the embedder check on open, the same ranking as the embedded store (exact
SQL, HNSW candidates, the hybrid replica), export/import, SemanticMemory and the CLI on a URL,
and many writer processes (a real server: tests/pg_server.py)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pg_server
from memcore.stores import pg_terms
from memcore import (
    DecayWeights,
    EmbedderMismatchError,
    HashingEmbedder,
    HybridWeights,
    InvalidArgumentError,
    InvalidTextError,
    LongTermMemory,
    MemoryItem,
)
from memcore.errors import MemcoreError
from store_helpers import DIM, FakeClock

from memcore.stores.postgres import (
    PostgresAuthError,
    PostgresExtensionError,
    PostgresMemory,
    PostgresUnavailableError,
    psycopg_modules,
    redact,
)


@pytest.fixture(scope="module", autouse=True)
def url():
    """The session's server; every test here skips (or fails under CI) without one."""
    return pg_server.url()


@pytest.fixture
def own_server(url):
    if not pg_server.server().get("own"):
        pytest.skip(f"needs the server the tests start (not ${pg_server.ENV})")
    return pg_server.server()


def emb(dim=DIM):
    return HashingEmbedder(dim=dim)


def unit_rows(rng, n, dim=DIM):
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


# --------------------------------------------------------------------------- opening

def test_reopen_checks_the_recorded_embedder(url):
    pg = pg_server.store(emb=emb())
    pg.put("r", "k", "the red door")
    with pytest.raises(EmbedderMismatchError, match="dim 32"):
        PostgresMemory(url, emb(32), schema=pg.schema)
    with PostgresMemory(url, None, schema=pg.schema) as bare:
        assert (bare.embedder_name, bare.dim) == (pg.embedder_name, DIM)
        assert bare.get("r", "k").text == "the red door"
        with pytest.raises(EmbedderMismatchError, match="without an embedder"):
            bare.put("r", "j", "needs an embedder")
        q = emb().encode(["red door"])[0]
        assert [h.key for h in bare.search("r", "red door", query_vector=q)] == ["k"]
    with PostgresMemory(f"{url}?schema={pg.schema}", emb()) as same:   # schema in the URL
        assert same.count("r") == 1
    pg.drop()


def test_semantic_memory_without_an_embedder_opens_a_schema_with_its_own(url):
    """SemanticMemory(url) with embedder=None on an existing schema rebuilds the embedder
    the schema records (as the command line does; memcore.open.own_embedder)."""
    from memcore import SemanticMemory

    pg = pg_server.store(emb=HashingEmbedder(dim=64))
    pg.put(("agent", "kitchen"), "kettle", "The kettle is in the left cupboard.")
    with SemanticMemory(path=f"{url}?schema={pg.schema}", warmup=False) as mem:
        assert (mem.embedder.name, mem.embedder.dim) == (pg.embedder_name, 64)
        assert mem.retrieve("Where is the kettle?", mode="kitchen")[0].key == "kettle"
    pg.drop()


def test_new_store_needs_an_embedder_and_a_valid_schema(url):
    with pytest.raises(InvalidArgumentError, match="needs an embedder"):
        PostgresMemory(url, None, schema=pg_server.new_schema())
    for bad in ("Robots", "a-b", "1x", ""):
        with pytest.raises(InvalidArgumentError, match="schema"):
            PostgresMemory(url, emb(), schema=bad)
    with pytest.raises(InvalidArgumentError, match="postgresql://"):
        PostgresMemory("/tmp/not-a-url", emb())


def test_unreachable_server_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]        # bound, never listening: connection refused
        t = time.perf_counter()
        with pytest.raises(PostgresUnavailableError, match="cannot connect") as info:
            PostgresMemory(f"postgresql://ann:hunter2@127.0.0.1:{port}/db", emb(),
                           connect_timeout=2)
    assert time.perf_counter() - t < 5
    assert isinstance(info.value, MemcoreError) and isinstance(info.value, ConnectionError)
    assert "hunter2" not in str(info.value) and "ann:***@" in str(info.value)


def test_malformed_urls_are_memcore_value_errors():
    from memcore.stores.postgres import InvalidUrlError

    for bad in ("postgresql://ann:pw-Secret@127.0.0.1:abc/db",
                "postgresql://ann:pw-Secret@127.0.0.1:99999/db",
                "postgresql://ann:pw-Secret@[::1/db"):
        with pytest.raises(InvalidUrlError, match="malformed PostgreSQL URL") as info:
            PostgresMemory(bad, emb())
        assert isinstance(info.value, MemcoreError) and isinstance(info.value, ValueError)
        assert "pw-Secret" not in str(info.value)
    with pytest.raises(InvalidArgumentError, match="postgresql://") as info:
        PostgresMemory("host=db user=ann password=kv-Secret dbname=mem", emb())
    assert "kv-Secret" not in str(info.value) and "password=***" in str(info.value)


def test_redact_finds_every_password_libpq_accepts():
    """libpq ends the credentials at the first @ before any /: ?, # and : may be in the
    password; a query string or key=value conninfo may carry password= and sslpassword=."""
    cases = {"postgresql://ann:s?3#c:r@db:5432/mem?sslmode=require":
             "postgresql://ann:***@db:5432/mem?sslmode=require",
             "postgres://ann:p%40ss@db/mem": "postgres://ann:***@db/mem",
             "postgresql://db/mem?user=ann&password=q-s&sslpassword=k-s":
             "postgresql://db/mem?user=ann&password=***&sslpassword=***",
             "postgresql://ann@db/mem": "postgresql://ann@db/mem",
             "host=db password='a b\\'c' user=ann": "host=db password=*** user=ann",
             "host=db password = plain user=ann": "host=db password = *** user=ann"}
    for url, want in cases.items():
        assert redact(url) == want


def test_down_server_is_answered_within_connect_timeout():
    """A server that accepts TCP connections and never answers (a hung or half-started
    server): the open fails within connect_timeout, not the old pool's 30 s."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)                     # the kernel completes the handshake; nobody answers
        port = s.getsockname()[1]
        psycopg_modules()                # imported first: the time is the connect's alone
        t = time.perf_counter()
        with pytest.raises(PostgresUnavailableError) as info:
            PostgresMemory(f"postgresql://ann:hang-Secret@127.0.0.1:{port}/db", emb(),
                           connect_timeout=2)
        assert time.perf_counter() - t < 4
    assert "hang-Secret" not in str(info.value)


def test_passwords_with_url_characters_never_show(own_server):
    """A role whose password holds ?, # and : (libpq accepts them in a URL): repr, path,
    SemanticMemory's repr and the errors built from the URL never show it."""
    import psycopg
    from memcore import SemanticMemory

    secret = "Se?cr#et:9"
    with psycopg.connect(own_server["url"], autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS odd")
        conn.execute(f"CREATE ROLE odd LOGIN SUPERUSER PASSWORD '{secret}'")
    url = f"postgresql://odd:{secret}@127.0.0.1:{own_server['port']}/postgres"
    schema = pg_server.new_schema()
    with PostgresMemory(url, emb(), schema=schema) as pg:
        pg.put("r", "k", "reached with an odd password")
        shown = [repr(pg), pg.path]
    other = pg_server.new_schema()
    with SemanticMemory(path=f"{url}?schema={other}", embedder=emb(384), warmup=False) as mem:
        shown += [repr(mem), str(mem.path), repr(mem.long)]
    wrong = url.replace(secret, "Wr?ng#pw:1")
    with pytest.raises(PostgresAuthError) as info:
        PostgresMemory(wrong, emb(), schema=schema)
    shown.append(str(info.value))
    for text in shown:
        assert "odd:***@" in text and not any(p in text for p in ("Se?cr", "cr#et", "Wr?ng"))
    with PostgresMemory(url, None, schema=schema) as pg:
        pg.drop()


def test_bad_credentials_never_echo_the_password(own_server):
    bad = own_server["url"].replace(own_server["password"], "wrong-Secret-123")
    with pytest.raises(PostgresAuthError, match="refused the credentials") as info:
        PostgresMemory(bad, emb(), schema=pg_server.new_schema())
    assert isinstance(info.value, PermissionError) and isinstance(info.value, MemcoreError)
    assert "wrong-Secret-123" not in str(info.value) and own_server["password"] not in str(info.value)
    assert redact(bad) in str(info.value)


def test_missing_pgvector_is_a_clear_error(own_server):
    """A database without the extension, and a role that may not create it (pgvector is not
    a trusted extension): what a server without pgvector looks like to memcore."""
    import psycopg

    with psycopg.connect(own_server["url"], autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS noext")
        conn.execute("DROP ROLE IF EXISTS plain")
        conn.execute("CREATE ROLE plain LOGIN PASSWORD 'plain-pw'")
        conn.execute("CREATE DATABASE noext OWNER plain")
    port = own_server["port"]
    with pytest.raises(PostgresExtensionError, match="pgvector") as info:
        PostgresMemory(f"postgresql://plain:plain-pw@127.0.0.1:{port}/noext", emb())
    assert "plain-pw" not in str(info.value) and isinstance(info.value, MemcoreError)


def test_closed_store_refuses_every_call():
    from memcore.errors import StoreClosedError

    pg = pg_server.store(emb=emb())
    pg.put("r", "k", "kept")
    schema = pg.schema
    pg.close()
    for call in (lambda: pg.get("r", "k"), lambda: pg.put("r", "j", "x"), lambda: pg.count("r"),
                 lambda: pg.search("r", "kept"), lambda: pg.key_list(("r",))):
        with pytest.raises(StoreClosedError):
            call()
    with PostgresMemory(pg_server.url(), emb(), schema=schema) as again:
        assert again.get("r", "k").text == "kept"
        again.drop()


def test_nul_characters_are_refused_and_nothing_changes():
    pg = pg_server.store(emb=emb())
    pg.put("r", "k", "kept")
    with pytest.raises(InvalidTextError, match="NUL"):
        pg.put_many("r", [MemoryItem("a", "fine"), MemoryItem("b", "bad\x00text")])
    with pytest.raises(InvalidTextError):
        pg.put("r", "c", "fine", metadata={"note": "bad\x00"})
    assert pg.key_list(("r",)) == ["k"] and pg.count("r") == 1
    for flt in ({"no\x00te": 1}, {"note": {"$gt": "a\x00"}}, {"note": "a\x00"},
                {"note": {"$in": ["a\x00"]}}):
        with pytest.raises(InvalidTextError):
            pg.search("r", "kept", filter=flt)
    pg.drop()


def test_metadata_numbers_and_key_order_come_back_as_stored():
    """Metadata is kept as JSON text: 1e20 stays a float, -0.0 keeps its sign, keys keep
    their order, as the embedded store returns them; filters still compare by value."""
    import math

    meta = {"z": -0.0, "x": 1e20, "i": 7, "f": 7.0, "big": 2 ** 70, "a": {"y": 1.5, "b": [0.0, -0.0]}}
    clock = FakeClock()
    ltm = LongTermMemory(None, emb(), clock=clock)
    pg = pg_server.store(clock, emb())
    for store in (ltm, pg):
        store.put("r", "k", "numbers", metadata=meta)
    got, want = pg.get("r", "k").metadata, ltm.get("r", "k").metadata
    assert got == want == meta
    assert list(got) == list(meta) and list(got["a"]) == ["y", "b"]
    assert [type(v) for v in got.values()] == [type(v) for v in meta.values()]
    assert math.copysign(1, got["z"]) == -1 and math.copysign(1, got["a"]["b"][1]) == -1
    hit = pg.search("r", "numbers", touch=False)[0]
    assert list(hit.metadata) == list(meta) and type(hit.metadata["x"]) is float
    for flt in ({"z": 0}, {"x": {"$gte": 1e20}}, {"f": 7}, {"a": {"y": 1.5}}):
        assert [h.key for h in pg.search("r", "numbers", filter=flt, touch=False)] == \
               [h.key for h in ltm.search("r", "numbers", filter=flt, touch=False)] == ["k"]
    pg.drop()


def test_store_level_ttl_and_refresh_as_the_embedded_store(url):
    clock = FakeClock()
    ltm = LongTermMemory(None, emb(), clock=clock, ttl=60, refresh_ttl=True)
    pg = pg_server.store(clock, emb(), ttl=60, refresh_ttl=True)
    assert (pg.ttl, pg.refresh_ttl) == (60, True)
    for store in (ltm, pg):
        store.put("r", "a", "expires with the store default")
        store.put("r", "b", "own time to live", ttl=200)
        store.put("r", "c", "never expires", ttl=float("inf"))
    clock.advance(50)
    assert pg.get("r", "a").expires_at == ltm.get("r", "a").expires_at == clock() + 60
    clock.advance(50)                                   # a was refreshed by get at 50
    for store in (ltm, pg):
        assert store.keys("r") == ["a", "b", "c"]
    clock.advance(61)
    for store in (ltm, pg):
        assert store.keys("r") == ["b", "c"] and store.get("r", "c").expires_at is None
    with pytest.raises(InvalidArgumentError):
        pg_server.store(clock, emb(), ttl=-1)
    with pytest.raises(TypeError):
        pg_server.store(clock, emb(), refresh_ttl="yes")
    pg.drop()


def test_put_many_copy_path_matches_the_embedded_store():
    """put_many stages a batch by binary COPY and upserts it in one statement: a key given
    twice ends as its last occurrence, write order (keys) follows the batch, a replaced key
    keeps created_at and access_count, and the returned memories equal the embedded store's."""
    clock = FakeClock()
    ltm = LongTermMemory(None, emb(), clock=clock)
    pg = pg_server.store(clock, emb())
    first = [MemoryItem(f"k{i}", f"first {i}", 0.1 * (i % 10), {"i": i}) for i in range(30)]
    again = [MemoryItem("k3", "k3 again"), MemoryItem("new", "fresh"), MemoryItem("k1", "k1 again"),
             MemoryItem("k3", "k3 thrice", 0.9, {"x": -0.0})]
    for store in (ltm, pg):
        store.put_many("r", first)
    clock.advance(10)
    for store in (ltm, pg):
        store.search("r", "first 3", top_k=3)          # touches: access counts to keep
    clock.advance(10)
    got, want = pg.put_many("r", again), ltm.put_many("r", again)
    assert got == want
    assert pg.keys("r") == ltm.keys("r") and pg.count("r") == ltm.count("r") == 31
    for key in ("k1", "k3", "new", "k7"):
        assert pg.get("r", key) == ltm.get("r", key)
    pg.drop()


# --------------------------------------------------------------------------- ranking

def _pair(n, seed=0, **kw):
    """The same memories in the embedded store and in PostgreSQL (shared clock), with spread
    access times and importances."""
    rng = np.random.default_rng(seed)
    clock = FakeClock()
    ltm = LongTermMemory(None, emb(), clock=clock)
    pg = pg_server.store(clock, emb(), **kw)
    vecs = unit_rows(rng, n)
    imps = rng.uniform(0, 1, n).round(3)
    for s in range(0, n, 500):
        items = [MemoryItem(f"k{i}", f"memory {i}", float(imps[i]), {"c": i % 3})
                 for i in range(s, min(s + 500, n))]
        for store in (ltm, pg):
            store.put_many("ns", items, vectors=vecs[s:s + 500])
        clock.advance(3600.0)
    return ltm, pg, clock, rng


PRESETS = {"similarity": DecayWeights.similarity(), "decay": DecayWeights(),
           "strong-decay": DecayWeights(w_recency=1.0, w_importance=0.5, half_life=7200.0)}


def test_exact_sql_ranks_as_the_embedded_store():
    ltm, pg, clock, rng = _pair(1200, hnsw=False)
    for name, weights in PRESETS.items():
        for q in unit_rows(rng, 8):
            for kw in ({}, {"filter": {"c": {"$in": [0, 2]}}}, {"threshold": 0.2}):
                want = ltm.search("ns", "q", query_vector=q, top_k=10, weights=weights,
                                  touch=False, **kw)
                got = pg.search("ns", "q", query_vector=q, top_k=10, weights=weights,
                                touch=False, **kw)
                assert [h.key for h in got] == [h.key for h in want], (name, kw)
                np.testing.assert_allclose([h.score for h in got], [h.score for h in want],
                                           atol=1e-5)
                np.testing.assert_allclose([h.recency for h in got], [h.recency for h in want])
    assert pg.search_paths["hnsw"] == 0
    pg.drop()


def test_hnsw_candidates_with_the_bound_rank_as_the_embedded_store():
    """Above exact_max_rows: HNSW candidates, re-ranked, widened until the bound holds. HNSW
    is approximate, so the check is recall of the exact top-k and exact scores of what is
    returned (measured here: recall 1.0)."""
    ltm, pg, clock, rng = _pair(1500, exact_max_rows=300, seed=1)
    for name in ("similarity", "decay"):
        weights = PRESETS[name]
        found = total = 0
        for q in unit_rows(rng, 12):
            want = ltm.search("ns", "q", query_vector=q, top_k=10, weights=weights, touch=False)
            got = pg.search("ns", "q", query_vector=q, top_k=10, weights=weights, touch=False)
            exact = {h.key: h.score for h in ltm.search("ns", "q", query_vector=q, top_k=1500,
                                                        weights=weights, touch=False)}
            assert len(got) == 10
            for h in got:
                assert abs(h.score - exact[h.key]) < 1e-5
            found += len({h.key for h in got} & {h.key for h in want})
            total += len(want)
        assert found / total >= 0.97, (name, found / total)
    assert pg.search_paths["hnsw"] > 0        # the index answered (not only the exact order)
    pg.drop()


def test_hybrid_replica_follows_writes_touches_and_deletes():
    """Hybrid recall on the synchronised replica equals the embedded store's, through puts,
    replacements, deletes and refreshes (episodes and speakers in the metadata)."""
    clock = FakeClock()
    hw = HybridWeights.no_model()
    ltm = LongTermMemory(None, emb(), clock=clock, hybrid=hw)
    pg = pg_server.store(clock, emb(), hybrid=hw)
    words = ["dog", "adopted", "paris", "trip", "guitar", "lessons", "sister", "wedding", "job"]
    rng = np.random.default_rng(3)

    def both(fn):
        return fn(ltm), fn(pg)

    for step in range(120):
        i = int(rng.integers(0, 40))
        op = rng.uniform()
        if op < 0.6:
            text = " ".join(rng.choice(words, 3))
            meta = {"episode": int(i % 4), "speaker": ["Ann", "Bob"][i % 2]}
            both(lambda s: s.put("chat", f"m{i}", text, metadata=meta))
        elif op < 0.75:
            a, b = both(lambda s: s.delete("chat", f"m{i}"))
            assert a == b
        else:
            q = " ".join(rng.choice(words, 2)) + (" Ann" if op < 0.85 else "")
            a, b = both(lambda s: s.search("chat", q, top_k=5))
            assert [h.key for h in b] == [h.key for h in a]
            np.testing.assert_allclose([h.score for h in b], [h.score for h in a], atol=1e-5)
            assert [h.last_accessed_at for h in b] == [h.last_accessed_at for h in a]
        clock.advance(60.0)
    assert pg.key_list(("chat",)) == ltm.key_list(("chat",))
    pg.drop()


def test_reads_never_wait_for_the_namespace_lock():
    """A writer holding the namespace lock (a long put_many in flight) does not hold up
    searches that touch, hybrid or not, nor a get that refreshes a time to live; the touches
    land (access counts)."""
    import threading

    import psycopg

    clock = FakeClock()
    pg = pg_server.store(clock, emb(), ttl=100)
    pg.put_many("r", [MemoryItem(f"k{i}", f"the red door {i}") for i in range(5)])
    held = psycopg.connect(pg_server.url())
    held.execute(f'SELECT version FROM "{pg.schema}".memcore_namespaces FOR UPDATE')  # open txn
    done = []

    def reads():
        pg.search("r", "red door", top_k=3)
        pg.search("r", "red door", top_k=3, hybrid=HybridWeights.no_model())
        pg.get("r", "k0", refresh_ttl=True)
        done.append(True)

    try:
        worker = threading.Thread(target=reads)
        worker.start()
        worker.join(10)
        assert done == [True], "a read waited for the namespace lock"
    finally:
        held.close()
    assert sum(pg.get("r", f"k{i}").access_count for i in range(5)) == 6


def test_replica_sees_access_updates_committed_out_of_order():
    """Access updates run without the namespace lock, so they may commit after a later write
    and after a later access update: the replica's safe mark waits for them."""
    import psycopg

    clock = FakeClock()
    hw = HybridWeights.no_model()
    pg = pg_server.store(clock, emb(), hybrid=hw)
    pg.put_many("r", [MemoryItem("a", "the red door"), MemoryItem("b", "the blue door")])
    pg.search("r", "door", touch=False)                 # the replica's first sync
    late = psycopg.connect(pg_server.url())            # another process's access update,
    pg._update_in_place(late, ("r",), ["a"], [          # in flight, uncommitted
        "last_accessed_at = %(now)s", "access_count = m.access_count + 7"], {"now": 123.0})
    pg.put("r", "c", "the green door")                  # a later write commits first
    pg.search("r", "door", top_k=1, query_vector=pg.vector("r", "b"))   # touches b: later tseq
    pg.search("r", "door", touch=False)                 # syncs: c and b, not yet a's update
    pg.search("r", "door", touch=False)
    replica = pg._replicas[("r",)].store
    assert replica.get("r", "c") is not None and replica.get("r", "a").access_count == 0
    assert replica.get("r", "b").access_count == 1
    late.commit()
    late.close()
    pg.search("r", "door", touch=False)
    got = replica.get("r", "a")
    assert (got.access_count, got.last_accessed_at) == (7, 123.0)
    pg.drop()


def test_hybrid_replica_follows_expiry_refresh_and_sweep(tmp_path):
    """Time to live on the hybrid replica: expired memories leave its ranking, a refresh_ttl
    read moves their expiry there too, and a sweep deletes them, as in the embedded store."""
    clock = FakeClock()
    hw = HybridWeights.no_model()
    ltm = LongTermMemory(None, emb(), clock=clock, hybrid=hw)
    pg = pg_server.store(clock, emb(), hybrid=hw)

    def both(fn):
        a, b = fn(ltm), fn(pg)
        return a, b

    def same_search(q, **kw):
        a, b = both(lambda s: s.search("chat", q, top_k=6, **kw))
        assert [h.key for h in b] == [h.key for h in a]
        np.testing.assert_allclose([h.score for h in b], [h.score for h in a], atol=1e-5)
        return [h.key for h in a]

    for i in range(8):
        both(lambda s: s.put("chat", f"m{i}", f"Ann adopted a dog number {i}",
                             metadata={"speaker": "Ann", "episode": i % 2},
                             ttl=[10, 20, None, 30][i % 4]))
    assert len(same_search("adopted dog")) == 6
    clock.advance(15)                                       # m0, m4 expire
    assert "m0" not in same_search("adopted dog")
    a, b = both(lambda s: s.get("chat", "m1", refresh_ttl=True))
    assert a == b and a.expires_at == clock() + 20
    clock.advance(10)                                       # m5 (ttl 20) expires, m1 not
    keys = same_search("adopted dog", refresh_ttl=True)
    assert "m1" in keys and "m5" not in keys
    assert both(lambda s: s.count("chat")) == (5, 5)         # m1 m2 m3 m6 m7
    clock.advance(100)
    assert both(lambda s: s.namespaces()) == ([("chat",)], [("chat",)])
    assert both(lambda s: s.export_jsonl(tmp_path / f"{type(s).__name__}.jsonl")) == (8, 8)
    assert both(lambda s: s.sweep()) == (6, 6)
    assert same_search("adopted dog") == ["m2", "m6"]
    assert pg.stats() == {("chat",): {"live": 2, "rows": 2}}
    pg.drop()


def test_schema_1_gains_the_ttl_columns_on_open(url):
    """A version-1 schema (no time to live) opens as version 2: its memories never expire
    and new puts may."""
    clock = FakeClock()
    pg = pg_server.store(clock, emb())
    pg.put("r", "old", "a memory from before time to live")
    t = f'"{pg.schema}".memcore_memories'
    pg._run(lambda conn: conn.execute(
        f"DROP INDEX \"{pg.schema}\".memcore_memories_expiry; "
        f"ALTER TABLE {t} DROP COLUMN expires_at, DROP COLUMN ttl; "
        f"UPDATE \"{pg.schema}\".memcore_meta SET value = '1' WHERE name = 'schema_version'"))
    pg.close()
    again = PostgresMemory(url, emb(), schema=pg.schema, clock=clock)
    version = again._run(lambda conn: conn.execute(
        f"SELECT value FROM \"{again.schema}\".memcore_meta WHERE name = 'schema_version'"
    ).fetchone()[0])
    assert version == "3"
    old = again.get("r", "old")
    assert old.expires_at is None and old.ttl is None
    again.put("r", "new", "a memory that expires", ttl=5)
    clock.advance(5)
    assert again.keys("r") == ["old"] and again.count("r") == 1
    again.drop()


def test_filters_in_sql_equal_the_embedded_store_on_edge_cases():
    """The SQL translation of filters against the embedded store on what the shared oracle
    test does not draw: big ints, float32 rounding of $importance operands at the ends of
    its range, code-point order of non-ASCII strings, keys with quotes and percent signs,
    nested conditions and JSON equality of lists and objects."""
    clock = FakeClock()
    ltm = LongTermMemory(None, emb(), clock=clock)
    pg = pg_server.store(clock, emb())
    metas = [{"n": 10 ** 400, "s": "zebra"}, {"n": 2 ** 60, "s": "\u00e9clair"},
             {"n": -(10 ** 400), "s": "Zoo"}, {"n": 1.5, "s": "\U0001f600"},
             {"n": True, "s": "a", "it's 100%": 1}, {"n": [1, {"a": 2}], "pos": {"floor": 2}},
             {"n": {"a": [1, 2.0]}, "pos": {"floor": 1, "room": "lab"}}, {"n": None}, {}]
    imps = [0.0, 1e-300, 1e-45, 0.1, 0.5, 1.0, 0.3, 0.7, 0.9]
    items = [MemoryItem(f"k{i}", f"red door {i}", imp, m)
             for i, (imp, m) in enumerate(zip(imps, metas))]
    ltm.put_many("r", items)
    pg.put_many("r", items)
    filters = [
        {"n": {"$gt": 1e300}}, {"n": {"$lt": -1e300}}, {"n": {"$gte": float(2 ** 60)}},
        {"n": {"$gt": 1}}, {"n": 1}, {"n": True}, {"n": {"$eq": [1.0, {"a": 2}]}},
        {"n": {"$in": [{"a": [1, 2]}, None]}}, {"n": {"$nin": [1.5, True]}},
        {"n": {"$ne": None}}, {"s": {"$gt": "z"}}, {"s": {"$lt": "a"}},
        {"s": {"$gte": "\u00e9", "$lte": "\U0001f600"}}, {"it's 100%": 1},
        {"it's 100%": {"$ne": 1}}, {"pos": {"floor": {"$gte": 2}}}, {"pos": {"room": "lab"}},
        {"pos": {}}, {"$importance": {"$gt": 0.0}}, {"$importance": {"$lte": 1e-40}},
        {"$importance": {"$gt": 1e-300}}, {"$importance": {"$in": [0.1, 1e-300]}},
        {"$importance": {"$lt": 1.0, "$ne": 0.5}}, {"$importance": 0.3},
        {"$created_at": {"$gte": clock()}, "n": {"$nin": []}}, {"n": {"$in": []}},
    ]
    for flt in filters:
        a = [h.key for h in ltm.search("r", "red door", top_k=20, filter=flt, touch=False)]
        b = [h.key for h in pg.search("r", "red door", top_k=20, filter=flt, touch=False)]
        assert sorted(b) == sorted(a), flt
    pg.drop()


# --------------------------------------------------------------------------- export / agents

def test_export_import_between_backends(tmp_path):
    clock = FakeClock()
    pg = pg_server.store(clock, emb())
    pg.put_many(("a", "b"), [MemoryItem("x", "red door", 0.7, {"c": 1}),
                             MemoryItem("y", "blue door")])
    pg.touch(("a", "b"), ["x"])
    path = tmp_path / "mem.jsonl"
    assert pg.export_jsonl(path) == 2
    ltm = LongTermMemory(None, emb(), clock=clock)
    assert ltm.import_jsonl(path) == 2
    again = pg_server.store(clock, emb())
    ltm.export_jsonl(tmp_path / "back.jsonl")
    assert again.import_jsonl(tmp_path / "back.jsonl") == 2
    for key in ("x", "y"):
        assert ltm.get(("a", "b"), key) == pg.get(("a", "b"), key) == again.get(("a", "b"), key)
        assert again.vector(("a", "b"), key).tobytes() == pg.vector(("a", "b"), key).tobytes()
    pg.drop()
    again.drop()


def test_semantic_memory_and_cli_on_a_url(url, capsys):
    from memcore import SemanticMemory
    from memcore.cli import main

    schema = pg_server.new_schema()
    with SemanticMemory(path=f"{url}?schema={schema}", embedder=emb(384), warmup=False) as mem:
        assert type(mem.long).__name__ == "PostgresMemory"
        password = pg_server.server().get("password")
        assert password is None or (password not in repr(mem) and "***" in repr(mem))
        mem.store("where do you charge?", "at the dock in the hallway", "patrol", importance=0.9)
        mem.consolidate()                           # into the long tier, on PostgreSQL
        assert mem.long.count(mem.namespace_of("patrol")) == 1
        hits = mem.retrieve("where do you charge at the dock", "patrol")   # hybrid, via the replica
        assert [h.text for h in hits] == ["where do you charge?"]
        assert "hallway" in hits[0].metadata["response"]
    store = f"{url}?schema={schema}"
    assert main(["--store", store, "--embedder", "hashing", "put", "notes", "the lab door is red"]) == 0
    capsys.readouterr()
    assert main(["--store", store, "--embedder", "hashing", "search", "notes", "lab door",
                 "--json"]) == 0
    assert "the lab door is red" in capsys.readouterr().out
    with PostgresMemory(store) as pg:
        assert pg.namespaces() == [mem.namespace_of("patrol"), ("notes",)]
    capsys.readouterr()
    assert main(["--store", store, "stats", "--json"]) == 0
    out = capsys.readouterr().out
    assert '"memories": 2' in out and "***" in out
    password = pg_server.server().get("password")
    assert password is None or password not in out


# --------------------------------------------------------------------------- many writers

def _writer(url, schema, w, n, batch, acks):
    """One writer process: ``n`` puts in batches, each acknowledged batch reported."""
    with PostgresMemory(url, HashingEmbedder(dim=DIM), schema=schema, pool_size=1) as pg:
        for s in range(0, n, batch):
            pg.put_many("shared", [MemoryItem(f"w{w}-{i}", f"writer {w} memory {i}")
                                   for i in range(s, min(s + batch, n))])
            if acks is not None:
                acks.put((w, s))
            if w == 0:
                pg.search("shared", "writer memory", top_k=5)


def _run_writers(url, schema, writers, n, batch):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(url, schema, w, n, batch, None))
             for w in range(writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0] * writers


def _check_all_present(pg, writers, n):
    keys = set(pg.key_list(("shared",)))
    assert keys == {f"w{w}-{i}" for w in range(writers) for i in range(n)}
    assert pg.count("shared") == writers * n


def test_writer_processes_lose_nothing(url):
    pg = pg_server.store(emb=emb())
    _run_writers(url, pg.schema, 4, 150, 25)
    _check_all_present(pg, 4, 150)
    pg.drop()


@pytest.mark.slow
def test_eight_writer_processes_2000_puts_each(url):
    pg = pg_server.store(emb=emb())
    _run_writers(url, pg.schema, 8, 2000, 50)
    _check_all_present(pg, 8, 2000)
    pg.drop()


@pytest.mark.slow
def test_sigkilled_writer_loses_only_its_unacknowledged_batch(url):
    pg = pg_server.store(emb=emb())
    ctx = multiprocessing.get_context("fork")
    acks = ctx.Queue()
    n, batch = 5000, 100
    victim = ctx.Process(target=_writer, args=(url, pg.schema, 0, n, batch, acks))
    other = ctx.Process(target=_writer, args=(url, pg.schema, 1, 1000, batch, None))
    victim.start()
    other.start()
    acked = []
    while len(acked) < 8:
        acked.append(acks.get(timeout=60))
    os.kill(victim.pid, signal.SIGKILL)
    victim.join()
    other.join(120)
    while not acks.empty():
        acked.append(acks.get())
    assert victim.exitcode == -signal.SIGKILL and other.exitcode == 0
    keys = set(pg.key_list(("shared",)))
    done = max(s for _, s in acked) + batch          # every acknowledged batch is there
    assert {f"w0-{i}" for i in range(done)} <= keys
    mine = sorted(int(k.split("-")[1]) for k in keys if k.startswith("w0-"))
    assert len(mine) % batch == 0 and mine == list(range(len(mine)))   # whole batches only
    assert len(mine) <= done + batch                   # at most the batch in flight more
    assert {f"w1-{i}" for i in range(1000)} <= keys
    assert pg.count("shared") == len(keys)
    pg.drop()


def _child_uses_the_parents_store(pg, out):
    try:
        pg.put("r", "child", "written by a forked child")
        out.put(pg.count("r"))
        pg.close()
    except BaseException as err:                 # reported to the parent, which fails
        out.put(repr(err))


def test_forked_child_opens_its_own_connections():
    """A store opened before fork: the child connects anew (never on the parent's sockets),
    and its close leaves the parent's connections working."""
    pg = pg_server.store(emb=emb())
    pg.put("r", "parent", "written before the fork")
    backend = pg._run(lambda conn: conn.info.backend_pid)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child_uses_the_parents_store, args=(pg, out))
    child.start()
    assert out.get(timeout=60) == 2
    child.join(60)
    assert child.exitcode == 0
    assert sorted(pg.keys("r")) == ["child", "parent"]
    assert pg._run(lambda conn: conn.info.backend_pid) == backend   # its session untouched
    pg.drop()


def test_server_going_away_and_coming_back(own_server):
    """A server stopped under an open store: every call raises PostgresUnavailableError
    within connect_timeout (no pool wait, no password); once the server is back (same port)
    the same store reconnects on its next call and sees what was committed."""
    from memcore.stores.pg_local import LocalServer

    with LocalServer() as srv:
        pg = PostgresMemory(srv.url, emb(), connect_timeout=2, pool_size=2)
        pg.put("r", "k", "committed before the stop")
        srv.run("pg_ctl", "-D", str(srv.data), "-m", "fast", "-w", "stop")
        for call in (lambda: pg.get("r", "k"), lambda: pg.put("r", "j", "x"),
                     lambda: pg.search("r", "committed"), lambda: pg.count("r")):
            t = time.perf_counter()
            with pytest.raises(PostgresUnavailableError) as info:
                call()
            assert time.perf_counter() - t < 4 and srv.password not in str(info.value)
        srv.start()
        t = time.perf_counter()
        assert pg.get("r", "k").text == "committed before the stop"
        assert time.perf_counter() - t < 3      # the old pool: up to 27 s
        srv.run("pg_ctl", "-D", str(srv.data), "-m", "immediate", "-w", "stop")
        srv.start()                      # idle connections killed: found dead, replaced
        assert pg.count("r") == 1
        pg.close()


def test_local_server_takes_a_relative_path_and_cleans_up_a_failed_start(tmp_path, monkeypatch):
    """``python -m memcore.stores.pg_local ./pgdata`` (the README's way): a relative directory
    works; a first start that fails (port taken) leaves no directory owned by the server's
    user behind."""
    import psycopg
    from memcore.stores.pg_local import LocalServer
    from memcore.stores.postgres import PostgresError

    monkeypatch.chdir(tmp_path)
    with LocalServer("pgdata") as srv:
        assert srv.root == tmp_path / "pgdata"
        with psycopg.connect(srv.url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        taken = s.getsockname()[1]
        with pytest.raises(PostgresError, match="failed"):
            LocalServer("fresh", port=taken).start()
        assert not (tmp_path / "fresh").exists()
        (tmp_path / "mine").mkdir()
        (tmp_path / "mine" / "keep.txt").write_text("the user's")
        before = os.stat(tmp_path / "mine")
        with pytest.raises(PostgresError, match="failed"):
            LocalServer("mine", port=taken).start()
        after = os.stat(tmp_path / "mine")
        assert (after.st_uid, after.st_gid, after.st_mode) == (before.st_uid, before.st_gid,
                                                              before.st_mode)
        assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["keep.txt"]


def _readme_citus_block() -> str:
    import pathlib
    import re

    text = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```sql\n(.*?)```", text, re.S)
                if "create_distributed_table" in b]
    return block


def test_readme_citus_ddl_runs_without_citus_and_calls_it_with_the_tables(own_server):
    """Citus cannot be installed here: the README's distribution block runs verbatim on plain
    PostgreSQL (it does nothing there), and with stand-ins for Citus's two functions on the
    search path it calls them with memcore's tables (which must exist: regclass arguments)."""
    import psycopg

    base = own_server["url"]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS citusddl")
        conn.execute("CREATE DATABASE citusddl")
    url = base.rsplit("/", 1)[0] + "/citusddl"
    PostgresMemory(url, emb()).close()                   # schema "memcore", as the README
    block = _readme_citus_block()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(block)                             # plain PostgreSQL: a notice, no error
        conn.execute("CREATE SCHEMA fakecitus; CREATE TABLE fakecitus.calls (fn text, tbl "
                     "regclass, col text, colocate text)")
        conn.execute("CREATE FUNCTION fakecitus.create_reference_table(table_name regclass) "
                     "RETURNS void LANGUAGE sql AS $$ INSERT INTO fakecitus.calls "
                     "VALUES ('reference', table_name, NULL, NULL) $$")
        conn.execute("CREATE FUNCTION fakecitus.create_distributed_table(table_name regclass, "
                     "distribution_column text, colocate_with text DEFAULT 'default') "
                     "RETURNS void LANGUAGE sql AS $$ INSERT INTO fakecitus.calls VALUES "
                     "('distributed', table_name, distribution_column, colocate_with) $$")
        conn.execute("SET search_path = public, fakecitus")
        conn.execute(block)
        calls = conn.execute("SELECT fn, tbl::text, col, colocate FROM fakecitus.calls").fetchall()
        setting = conn.execute("SELECT setconfig FROM pg_db_role_setting s JOIN pg_database d "
                               "ON d.oid = s.setdatabase WHERE d.datname = 'citusddl'").fetchone()
        tables = {f"memcore.{r[0]}" for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'memcore'")}
    assert tables == {c[1] for c in calls}              # every table memcore made, once
    ns = "memcore.memcore_namespaces"
    assert calls == [("reference", "memcore.memcore_meta", None, None),
                     ("distributed", ns, "namespace", "default"),
                     ("distributed", "memcore.memcore_memories", "namespace", ns),
                     ("distributed", "memcore.memcore_deleted", "namespace", ns),
                     ("distributed", "memcore.memcore_touches", "namespace", ns),
                     ("distributed", "memcore.memcore_postings", "namespace", ns),
                     ("distributed", "memcore.memcore_moments", "namespace", ns)]
    assert setting == (["citus.propagate_set_commands=local"],)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute("DROP DATABASE citusddl WITH (FORCE)")


# --------------------------------------------------------------------------- stateless hybrid

def _random_chat(stores, rng, steps, clock, ttl_share=0.0):
    """Random puts (episodes, speakers, some with a time to live), replacements and deletes,
    applied to every store alike."""
    words = ["dog", "adopted", "paris", "trip", "guitar", "lessons", "sister", "wedding", "job"]
    for _ in range(steps):
        i = int(rng.integers(0, 60))
        if rng.uniform() < 0.8:
            text = " ".join(rng.choice(words, 3))
            meta = {"episode": int(i % 6), "speaker": ["Ann", "Bob", "Cy"][i % 3]}
            ttl = 300.0 if rng.uniform() < ttl_share else None
            for s in stores:
                s.put("chat", f"m{i}", text, metadata=meta, ttl=ttl)
        else:
            assert len({s.delete("chat", f"m{i}") for s in stores}) == 1
        clock.advance(30.0)
    return words


def test_stateless_hybrid_equals_the_replica_when_the_namespace_fits_the_candidates():
    """replica=False reads a namespace of at most ``candidates`` rows whole: the ranking is
    the embedded store's (and the replica's), through replacements, deletes, expiry and
    filters; the store object keeps no replica."""
    clock = FakeClock()
    hw = HybridWeights.no_model()
    ltm = LongTermMemory(None, emb(), clock=clock, hybrid=hw)
    pg = pg_server.store(clock, emb(), hybrid=hw, replica=False)
    rng = np.random.default_rng(5)
    words = _random_chat([ltm, pg], rng, 150, clock, ttl_share=0.2)
    for j in range(30):
        if j == 15:          # rows as an older memcore wrote them: no stored tokens
            pg._run(lambda conn: conn.execute(f"UPDATE {pg._t('memcore_memories')} "
                                              f"SET tokens = NULL WHERE key LIKE 'm1%'"))
        q = " ".join(rng.choice(words, 2)) + (" Ann" if j % 3 == 0 else "")
        flt = {"speaker": "Bob"} if j % 4 == 0 else None
        a = ltm.search("chat", q, top_k=5, filter=flt, touch=False)
        b = pg.search("chat", q, top_k=5, filter=flt, touch=False)
        assert [h.key for h in b] == [h.key for h in a]
        np.testing.assert_allclose([h.score for h in b], [h.score for h in a], atol=1e-5)
        if j % 10 == 0:          # explanations of the same candidate store
            e = pg.search("chat", q, top_k=3, touch=False, explain=True)
            assert all(h.explanation is not None for h in e)
        clock.advance(40.0)          # some memories expire on the way
    assert pg._replicas == {}
    pg.drop()


def test_stateless_hybrid_from_sql_candidates_holds_no_replica():
    """Above ``candidates`` rows the search ranks only SQL candidates (HNSW, BM25 over
    memcore_postings, speaker rows, their window neighbours): the per-query pool holds those, never
    the namespace; every memory the embedded store ranks first by own-text match is found;
    postings follow replacements and deletes."""
    clock = FakeClock()
    hw = HybridWeights.no_model()
    ltm = LongTermMemory(None, emb(), clock=clock, hybrid=hw)
    pg = pg_server.store(clock, emb(), hybrid=hw, replica=False, candidates=4)
    rng = np.random.default_rng(8)
    # many episodes, so the candidates' episodes are a small part of the namespace
    words = ["dog", "adopted", "paris", "trip", "guitar", "lessons", "sister", "wedding", "job"]
    items = [MemoryItem(f"m{i}", " ".join(rng.choice(words, 3)), 0.5,
                        {"episode": i // 5, "speaker": ["Ann", "Bob"][i % 2]}) for i in range(300)]
    for s in (ltm, pg):
        s.put_many("chat", items)
        s.put("chat", "m7", "zebra crossing", metadata={"episode": 1})     # a replacement
        s.delete("chat", "m8")
    hits = pg.search("chat", "zebra", top_k=3, touch=False)
    assert hits[0].key == "m7"
    assert pg.search("chat", "zebra", top_k=3, touch=False, filter={"episode": 2}) == [] or \
        all(h.metadata.get("episode") == 2 for h in pg.search("chat", "zebra", top_k=3,
                                                              touch=False, filter={"episode": 2}))
    pool = pg._local.pool[1]
    assert 0 < len(pool.rows) < 100               # candidates and their window neighbours
    assert pg._replicas == {}
    got = pg._run(lambda conn: conn.execute(
        f"SELECT count(DISTINCT key) FROM {pg._t('memcore_postings')}").fetchone()[0])
    assert got == 299                            # m8's postings went with it
    pg.drop()


def _stateless_chat(hw, candidates, seed, n=400, ttl_share=0.0):
    """An embedded store and a stateless PostgresMemory holding the same chat (episodes of 7
    turns, three speakers, random importances, some memories with a time to live)."""
    clock = FakeClock()
    ltm = LongTermMemory(None, emb(), clock=clock, hybrid=hw)
    pg = pg_server.store(clock, emb(), hybrid=hw, replica=False, candidates=candidates)
    rng = np.random.default_rng(seed)
    words = ["dog", "adopted", "paris", "trip", "guitar", "lessons", "sister", "wedding", "job",
             "zebra", "piano", "lisbon"]
    for s0 in range(0, n, 50):
        items = [MemoryItem(f"m{i}", " ".join(rng.choice(words, 3)), float(rng.uniform()),
                            {"episode": i // 7, "speaker": ["Ann", "Bob", "Cy"][i % 3]})
                 for i in range(s0, min(s0 + 50, n))]
        short = rng.uniform(size=len(items)) < ttl_share
        for st in (ltm, pg):
            st.put_many("chat", [x for x, e in zip(items, short) if not e])
            if short.any():
                st.put_many("chat", [x for x, e in zip(items, short) if e], ttl=300.0)
        clock.advance(3600.0 * 7)             # a new day every batch: the date words differ
    return ltm, pg, clock, rng, words


def test_stateless_pool_ranks_as_an_embedded_store_of_the_rows_read():
    """Above ``candidates`` rows the pool's candidates kernel ranks the candidates exactly as
    a LongTermMemory holding the rows read (candidates and window neighbours, in write order)
    does with the same z statistics, its neighbours left out (own-text BM25 off: that one
    takes the namespace's statistics); explanations come with the hits."""
    from dataclasses import replace

    hw = replace(HybridWeights.no_model(), lexical=0.0)
    _, pg, clock, rng, words = _stateless_chat(hw, 6, 11)
    for j in range(12):
        q = " ".join(rng.choice(words, 2)) + (" Bob" if j % 3 == 0 else "")
        flt = {"speaker": "Ann"} if j % 4 == 1 else None
        got = pg.search("chat", q, top_k=5, filter=flt, touch=False)
        pool = pg._local.pool[1]
        ltm = LongTermMemory(None, emb(), clock=clock, hybrid=hw)
        ltm.put_stored([pg._memory(("chat",), r) for r in pool.rows],
                       np.stack([np.asarray(r[10].to_numpy(), np.float32) for r in pool.rows]))
        rq = ltm.resolve("chat", q, top_k=5 + len(pool.rows), filter=flt, touch=False)
        sig = replace(ltm.signals(rq), moments=pool.signals.moments)
        cand = {pool.rows[i][0] for i in pool.cand.tolist()}
        want = [h for h in ltm.scan(rq, sig) if h.key in cand][:5]
        assert [h.key for h in got] == [h.key for h in want]
        e = pg.search("chat", q, top_k=3, filter=flt, touch=False, explain=True)
        assert all(h.explanation is not None for h in e)
        clock.advance(60.0)
    pg.drop()


def test_stateless_bm25_statistics_are_the_namespaces():
    """Above ``candidates`` rows the own-text BM25 (df from the postings, N and avgdl from
    the namespace row) and its z statistics, and the dense z statistics, are the embedded
    store's over the whole namespace (filters and expired rows included): with the window
    BM25 off, each candidate's fused score is the embedded store's, so the stateless top-k
    is the embedded ranking restricted to the candidates."""
    from dataclasses import replace

    hw = replace(HybridWeights.no_model(), lexical_context=0.0)
    ltm, pg, clock, rng, words = _stateless_chat(hw, 8, 12, ttl_share=0.1)
    assert ltm.count("chat") < 400                  # the memories with a ttl have expired
    for j in range(16):
        q = " ".join(rng.choice(words, 2 + j % 2)) + (" Bob" if j % 3 == 0 else "") + \
            (" may 2023" if j % 5 == 0 else "")
        flt = {"speaker": "Ann"} if j % 4 == 1 else None
        rq = ltm.resolve("chat", q, top_k=400, filter=flt, touch=False)
        mine = pg.resolve("chat", q, top_k=5, filter=flt, touch=False)
        pool = pg._candidates(mine)
        full = ltm.signals(rq).moments
        np.testing.assert_allclose(pool.signals.moments[:2], full[:2], rtol=1e-6, atol=1e-9)
        cand = {pool.rows[i][0] for i in pool.cand.tolist() if pool.visible[i]}
        want = [h for h in ltm.scan(rq) if h.key in cand][:5]
        got = pg.scan(mine)
        assert [h.key for h in got] == [h.key for h in want]
        np.testing.assert_allclose([h.score for h in got], [h.score for h in want],
                                   rtol=1e-5, atol=1e-5)
        clock.advance(30.0)
    pg.drop()


def test_stateless_bm25_statistics_follow_writes_deletes_sweeps_and_clears():
    """The postings' df and the namespace's ``live``/``dl_sum`` kept at write time equal the
    embedded index's BM25 statistics and a recomputation from the rows, through
    replacements (a kept ``created_at``), deletes, expiry sweeps and a clear."""
    clock = FakeClock()
    hw = HybridWeights.no_model()
    ltm = LongTermMemory(None, emb(), clock=clock, hybrid=hw)
    pg = pg_server.store(clock, emb(), hybrid=hw, replica=False)
    rng = np.random.default_rng(13)

    def check():
        idx = ltm._tables[("chat",)].recall_index(hw, ltm.dim, ltm.query_preparer)
        live, dl_sum = pg._run(lambda conn: conn.execute(
            f"SELECT live, dl_sum FROM {pg._t('memcore_namespaces')}").fetchone())
        assert live == idx.lexical.n_docs            # expired rows count until swept
        assert dl_sum == round(idx.lexical.avgdl * idx.lexical.n_docs)
        rows = pg._run(lambda conn: conn.execute(
            f"SELECT text, metadata, created_at FROM {pg._t('memcore_memories')}").fetchall())
        doc, _, _, dl = pg_terms.document_terms(*zip(*rows)) if rows else ([], [], [], [])
        assert dl_sum == sum(dict(zip(doc, dl)).values())
        stored = pg._run(lambda conn: conn.execute(
            f"SELECT text, metadata, created_at, tokens FROM "
            f"{pg._t('memcore_memories')}").fetchall())
        for text, meta, created, toks in stored:       # each row's document, as dated
            want = pg_terms.document_tokens([text], [meta], [created])[0]
            assert np.array_equal(pg_terms.from_bytes(toks), want.view(np.uint64))
        got = dict(pg._run(lambda conn: conn.execute(
            f"SELECT term, count(*) FROM {pg._t('memcore_postings')} GROUP BY term").fetchall()))
        assert got
        for term, df in got.items():
            h = np.array([term], np.int64).view(np.uint64)
            assert idx.lexical.document_frequency(h.tolist())[0] == df

    _random_chat([ltm, pg], rng, 120, clock, ttl_share=0.2)
    check()
    clock.advance(400.0)
    assert pg.sweep("chat") == ltm.sweep("chat")
    check()
    for s in (ltm, pg):          # a replacement keeps created_at: its date words stay
        s.put("chat", "m1", "a zebra at the wedding", metadata={"episode": 1, "speaker": "Ann"})
    check()
    clock.advance(3 * 86400.0)   # on another day too (the batch's own day is not its date)
    live = [k for k in (f"m{i}" for i in range(60)) if ltm.get("chat", k, refresh_ttl=False)]
    for s in (ltm, pg):
        s.put_many("chat", [MemoryItem(live[0], "a lion at the wedding", 0.5, {"speaker": "Bob"}),
                            MemoryItem("new", "a new one", 0.5, {"speaker": "Cy"})])
    check()
    for s in (ltm, pg):
        s.clear("chat")
        s.put("chat", "z", "after the clear")
    check()
    pg.drop()


def test_stateless_speakers_are_the_string_speakers_as_the_embedded_store():
    """replica=False lists the namespace's speakers from the speaker index: names held as a
    non-empty JSON string by some row (a number or a blank is no speaker), as the embedded
    store."""
    clock = FakeClock()
    hw = HybridWeights.no_model()
    ltm = LongTermMemory(None, emb(), clock=clock, hybrid=hw)
    pg = pg_server.store(clock, emb(), hybrid=hw, replica=False)
    metas = [{"speaker": "Ann"}, {"speaker": 3}, {"speaker": " "}, {"speaker": "3"},
             {"speaker": "Bob"}, {"speaker": 7}, {"speaker": ["Cy"]}, {}, {"speaker": "Ann"}]
    for s in (ltm, pg):
        for i, m in enumerate(metas):
            s.put("chat", f"m{i}", f"text {i}", metadata=m)
        s.delete("chat", "m4")                        # Bob's only row
    assert sorted(pg.speakers(("chat",), hw)) == sorted(ltm.speakers(("chat",), hw)) == ["3", "Ann"]
    pg.drop()


def test_postings_written_before_the_date_words_are_rebuilt_on_open(url):
    """A store whose namespaces have no ``dl_sum`` (postings written without the date
    words) gets every memory's postings and every namespace's ``dl_sum`` rebuilt on open,
    equal to what the writes keep."""
    clock = FakeClock()
    pg = pg_server.store(clock, emb())
    _random_chat([pg], np.random.default_rng(3), 80, clock)
    pg.put("other", "x", "another namespace", metadata={"speaker": "Ann"})

    def state(s):
        return s._run(lambda conn: (
            sorted(conn.execute(f"SELECT namespace, term, key, tf, dl "
                                f"FROM {s._t('memcore_postings')}").fetchall()),
            sorted(conn.execute(f"SELECT namespace, live, dl_sum "
                                f"FROM {s._t('memcore_namespaces')}").fetchall())))

    want = state(pg)
    pg._run(lambda conn: conn.execute(
        f"ALTER TABLE {pg._t('memcore_namespaces')} DROP COLUMN dl_sum; "
        f"UPDATE {pg._t('memcore_postings')} SET dl = dl - 3 WHERE key <> 'x'; "
        f"DELETE FROM {pg._t('memcore_postings')} WHERE key = 'm1'"))
    pg.close()
    again = PostgresMemory(url, emb(), schema=pg.schema, clock=clock)
    assert state(again) == want
    again.drop()


def test_stateless_dense_moment_sums_follow_writes_as_a_recomputation():
    """The dense moment sums the writers keep (memcore_moments, O(window) per write; created
    by a replica=False store, kept by a replica store writing too) equal a recomputation from
    the rows and the embedded index's sums, through batches with repeated keys, replacements that move a memory to another episode, rows without an episode,
    deletes, expiry sweeps and a clear; a search with every row visible takes its dense z
    statistics from them, equal to the embedded store's."""
    from memcore.stores import pg_moments

    clock = FakeClock()
    hw = HybridWeights.no_model()
    ltm = LongTermMemory(None, emb(), clock=clock, hybrid=hw)
    pg = pg_server.store(clock, emb(), hybrid=hw, replica=False, candidates=5)
    rng = np.random.default_rng(21)
    words = ["dog", "adopted", "paris", "trip", "guitar", "lessons", "sister", "wedding"]
    a, r = pg_moments.key_of(hw)

    def check():
        got = pg._run(lambda conn: conn.execute(
            f"SELECT c1, c2 FROM {pg._t('memcore_moments')} WHERE alpha = %s AND radius = %s",
            [a, r]).fetchall())
        rows = pg._run(lambda conn: conn.execute(
            f"SELECT metadata, embedding FROM {pg._t('memcore_memories')} ORDER BY seq"
        ).fetchall())
        want = pg_moments.from_rows([(pg_moments.episode_of(m), np.asarray(v.to_numpy()))
                                     for m, v in rows], a, r, DIM)
        assert len(got) == 1
        c1 = np.frombuffer(got[0][0], np.float64)
        c2 = np.frombuffer(got[0][1], np.float64).reshape(DIM, DIM)
        np.testing.assert_allclose(c1, want[0], atol=1e-9)
        np.testing.assert_allclose(c2, want[1], atol=1e-9)
        idx = ltm._tables[("chat",)].recall_index(hw, ltm.dim, ltm.query_preparer)
        e1, e2 = idx._moment_sums(a, r)
        np.testing.assert_allclose(c1, e1, atol=1e-9)
        np.testing.assert_allclose(c2, e2, atol=1e-9)

    def meta(i):
        ep = [0, 1, 2, 2.0, "s", None, [1, 2]][int(rng.integers(0, 7))]
        m = {"speaker": ["Ann", "Bob"][i % 2]}
        if ep is not None or rng.uniform() < 0.5:
            m["episode"] = ep
        return m

    # a replica store writing to the same schema keeps the sums too (it creates none)
    other = pg_server.store(clock, emb(), hybrid=hw, schema=pg.schema)
    for step in range(40):
        u = rng.uniform()
        w = pg if step % 3 else other
        if u < 0.5:
            items = [MemoryItem(f"m{int(rng.integers(0, 40))}", " ".join(rng.choice(words, 3)),
                                0.5, meta(i)) for i in range(int(rng.integers(1, 9)))]
            ttl = 200.0 if rng.uniform() < 0.2 else None
            for s in (ltm, w):
                s.put_many("chat", items, ttl=ttl)
        elif u < 0.85:
            keys = [f"m{int(k)}" for k in rng.integers(0, 40, 3)]
            for s in (ltm, w):
                s.delete_many("chat", keys)
        else:
            clock.advance(250.0)
            assert pg.sweep("chat") == ltm.sweep("chat")
        clock.advance(10.0)
        if step % 8 == 7:
            check()
    clock.advance(250.0)
    pg.sweep("chat")
    ltm.sweep("chat")
    check()
    pg._dense_moments = lambda *a: pytest.fail("the dense pass ran: every row is visible")
    for q in ("a dog in paris", "guitar lessons"):
        rq = pg.resolve("chat", q, top_k=3, touch=False)
        mine = pg._candidates(rq).signals.moments[0]
        want = ltm.signals(ltm.resolve("chat", q, top_k=3, touch=False)).moments[0]
        np.testing.assert_allclose(mine, want, rtol=1e-6, atol=1e-12)
    for s in (ltm, pg):
        s.clear("chat")
        s.put("chat", "z", "after the clear", metadata={"episode": 1})
        s.put("chat", "y", "and one more", metadata={"episode": 1})
    check()
    pg.drop()


def test_stateless_speaker_candidates_are_the_nearest_rows_of_the_named_speakers():
    """The speaker source of ``replica=False`` gives the ``candidates`` rows nearest the
    query among the rows whose speaker (any case) the query names, exactly, on every search
    (psycopg prepares a statement from its fifth execution on: a generic plan must not
    make it an approximate HNSW scan)."""
    hw = HybridWeights.no_model()
    _, pg, clock, rng, words = _stateless_chat(hw, 6, 21)
    pg.put_many("chat", [MemoryItem(f"u{i}", " ".join(rng.choice(words, 3)), 0.5,
                                    {"episode": 1000 + i, "speaker": "BOB"}) for i in range(20)])
    rows = pg._run(lambda conn: conn.cursor(binary=True).execute(
        f"SELECT key, (metadata::jsonb) ->> 'speaker', embedding "
        f"FROM {pg._t('memcore_memories')}").fetchall())
    bob = [(k, np.asarray(v.to_numpy(), np.float32)) for k, s, v in rows
           if s is not None and s.lower() == "bob"]
    for j in range(8):
        q = " ".join(rng.choice(words, 2)) + " Bob"
        rq = pg.resolve("chat", q, top_k=5, touch=False)
        assert "bob" in rq.prepared.entities
        sims = np.array([float(v @ rq.vector) for _, v in bob])
        cut = np.sort(sims)[::-1][5]                      # the 6th nearest
        pool = pg._candidates(rq)
        cand = {pool.rows[i][0] for i in pool.cand.tolist()}
        assert {k for (k, _), s in zip(bob, sims) if s > cut + 1e-6} <= cand
        assert len(cand & {k for k, _ in bob}) >= 6
        clock.advance(60.0)
    pg.drop()


def test_postings_are_read_by_an_index_only_scan():
    """A new store's postings key index includes ``tf`` and ``dl``: once vacuumed, the query
    terms' postings are read from the index alone."""
    import psycopg

    pg = pg_server.store(FakeClock(), emb(), replica=False)
    _random_chat([pg], np.random.default_rng(5), 60, FakeClock())
    pt = pg._t("memcore_postings")
    with psycopg.connect(pg_server.url(), autocommit=True) as conn:
        idx = conn.execute("SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = "
                           "%s::regclass AND indisprimary", [pt]).fetchone()[0]
        assert "INCLUDE (tf, dl)" in idx
        conn.execute(f"VACUUM ANALYZE {pt}")
        conn.execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
        term = conn.execute(f"SELECT term FROM {pt} LIMIT 1").fetchone()[0]
        plan = "\n".join(r[0] for r in conn.execute(
            f"EXPLAIN SELECT term, key, tf, dl FROM {pt} WHERE namespace = %s AND "
            f"term = ANY(%s)", ['["chat"]', [term]]).fetchall())
    assert "Index Only Scan" in plan
    pg.drop()


def test_stateless_pool_documents_and_codes_are_the_hybrid_indexs():
    """The pool's index stems each BM25 document once per process (a bounded cache) and
    encodes the quantised codes only when a scan asks: its documents, lexical signals and a
    full scan equal a plain HybridIndex's."""
    from memcore.recall.index import HybridIndex
    from memcore.recall.words import bm25_documents, stemmer
    from memcore.stores import pg_pool

    texts = [f"the dogs were adopted in paris {i % 7} times" for i in range(200)]
    speakers = [["Ann", None, "Bob"][i % 3] for i in range(200)]
    created = [1.7e9 + 86400.0 * (i % 5) for i in range(200)]
    want = bm25_documents(texts, speakers, created, stemmer())
    assert pg_pool._documents(texts, speakers, created, stemmer()) == want
    assert pg_pool._documents(texts, speakers, created, stemmer()) == want     # cached
    assert pg_pool._documents(texts, speakers, created, None) == \
        bm25_documents(texts, speakers, created, None)
    assert len(pg_pool._DOCS) <= pg_pool.DOCUMENT_CACHE
    hw = HybridWeights.no_model()
    e = emb()
    vecs = e.encode(texts)
    plain, pool = HybridIndex(DIM, hw, None), pg_pool._PoolIndex(DIM, hw, None)
    for idx in (plain, pool):
        idx.put_many(list(range(200)), texts, vecs, [(i // 4, s) for i, s in
                                                     enumerate(speakers)], created)
    q = "adopted dogs in paris"
    qv = e.encode([q])[0]
    pq = plain.prepare(q)
    la, lb = plain.lexical_signals(pq, hw), pool.lexical_signals(pq, hw)
    for name in ("own_rows", "own_vals", "ctx_rows", "ctx_vals"):
        assert np.array_equal(getattr(la, name), getattr(lb, name))
    a = plain.search(q, qv, top_k=10, weights=hw)
    b = pool.search(q, qv, top_k=10, weights=hw)
    assert a.ids[:a.count].tolist() == b.ids[:b.count].tolist()
    np.testing.assert_array_equal(a.scores[:a.count], b.scores[:b.count])
    # documents read from the tokens the writer stored (None: a row without them, tokenised)
    meta = [{"speaker": s} if s else {} for s in speakers]
    toks = pg_terms.document_tokens(texts, meta, created)
    given = pg_pool._PoolIndex(DIM, hw, None)
    given.stored = [None if i % 9 == 0 else pg_terms.to_bytes(t) for i, t in enumerate(toks)]
    # the texts of rows with tokens are not read again (another text changes nothing)
    given.put_many(list(range(200)), [t if i % 9 == 0 else "zebra" for i, t in enumerate(texts)],
                   vecs, [(i // 4, s) for i, s in enumerate(speakers)], created)
    lc = given.lexical_signals(pq, hw)
    for name in ("own_rows", "own_vals", "ctx_rows", "ctx_vals"):
        assert np.array_equal(getattr(la, name), getattr(lc, name))
    c = given.search(q, qv, top_k=10, weights=hw)
    assert a.ids[:a.count].tolist() == c.ids[:c.count].tolist()
    np.testing.assert_array_equal(a.scores[:a.count], c.scores[:c.count])


def test_stateless_ranks_the_window_neighbours_of_the_candidates():
    """A memory that no candidate source finds but whose episode window holds one (its
    context matches the query) is ranked: the rows within the window radius of a candidate
    are ranked too (read with their own whole windows), as the embedded store ranks them."""
    clock = FakeClock()
    hw = HybridWeights.no_model()
    ltm = LongTermMemory(None, emb(), clock=clock, hybrid=hw)
    pg = pg_server.store(clock, emb(), hybrid=hw, replica=False, candidates=2)
    rng = np.random.default_rng(21)
    words = ["dog", "adopted", "paris", "trip", "guitar", "lessons", "sister", "wedding", "job"]
    items = [MemoryItem(f"m{i}", " ".join(rng.choice(words, 3)), 0.5, {"episode": i // 6})
             for i in range(240)]
    items[123] = MemoryItem("m123", "a zebra crossing downtown", 0.5, {"episode": 123 // 6})
    for s in (ltm, pg):
        s.put_many("chat", items)
    want = [h.key for h in ltm.search("chat", "zebra crossing", top_k=3, touch=False)]
    assert "m123" in want and set(want) - {"m123"} <= {"m121", "m122", "m124", "m125"}
    got = pg.search("chat", "zebra crossing", top_k=3, touch=False)
    assert [h.key for h in got] == want
    pool = pg._local.pool[1]
    ranked = {pool.rows[i][0] for i in pool.cand.tolist()}
    assert {"m121", "m122", "m123", "m124", "m125"} <= ranked
    pg.drop()


def test_a_store_made_before_loses_the_postings_foreign_key_and_gains_tokens(url):
    """A schema made before 2026-12-06 (postings with a foreign key to their memories, rows
    without stored tokens) opens: the key is dropped, the tokens column added; its rows
    rank as before (their texts tokenised by the searcher), ``fill_tokens`` stores their
    tokens as a writer would, and a clear still empties the postings."""
    hw = HybridWeights.no_model()
    clock = FakeClock()
    pg = pg_server.store(clock, emb(), hybrid=hw, replica=False)
    pg.put_many("chat", [MemoryItem(f"m{i}", f"the dog went to paris {i}", 0.5,
                                    {"episode": i // 4}) for i in range(12)])
    want = [(h.key, h.score) for h in pg.search("chat", "dog paris 3", top_k=5, touch=False)]
    t = pg._t
    pg._run(lambda conn: conn.execute(
        f"ALTER TABLE {t('memcore_memories')} DROP COLUMN tokens; "
        f"ALTER TABLE {t('memcore_postings')} ADD FOREIGN KEY (namespace, key) "
        f"REFERENCES {t('memcore_memories')} ON DELETE CASCADE"))
    again = pg_server.store(clock, emb(), hybrid=hw, replica=False, schema=pg.schema)
    assert again._run(lambda conn: conn.execute(
        "SELECT count(*) FROM pg_constraint WHERE conrelid = to_regclass(%s) AND contype = 'f'",
        [t("memcore_postings")]).fetchone()[0]) == 0
    assert again._run(lambda conn: conn.execute(
        f"SELECT count(*) FROM {t('memcore_memories')} WHERE tokens IS NULL").fetchone()[0]) == 12
    assert [(h.key, h.score) for h in again.search("chat", "dog paris 3", top_k=5,
                                                   touch=False)] == want
    assert again.fill_tokens(batch_size=5) == 12          # in batches, resumable
    assert again.fill_tokens() == 0
    stored = again._run(lambda conn: conn.execute(
        f"SELECT text, metadata, created_at, tokens FROM {t('memcore_memories')}").fetchall())
    for text, meta, created, toks in stored:
        want_toks = pg_terms.document_tokens([text], [meta], [created])[0]
        assert np.array_equal(pg_terms.from_bytes(toks), want_toks.view(np.uint64))
    assert [(h.key, h.score) for h in again.search("chat", "dog paris 2", top_k=5,
                                                   touch=False)] == \
        [(h.key, h.score) for h in pg.search("chat", "dog paris 2", top_k=5, touch=False)]
    with pytest.raises(ValueError):
        again.fill_tokens(batch_size=0)
    again.clear("chat")
    assert again._run(lambda conn: conn.execute(
        f"SELECT count(*) FROM {t('memcore_postings')}").fetchone()[0]) == 0
    again.drop()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(-2 ** 63, 2 ** 63 - 1) | st.integers(-3, 3), max_size=8),
                max_size=6))
def test_postings_of_a_batch_are_each_documents_term_counts(docs):
    """:func:`pg_terms.postings` (one sort for the batch) equals counting each document's
    terms on its own (``np.unique``), empty documents having none."""
    tokens = [np.array(d, np.int64) for d in docs]
    want: tuple = ([], [], [], [])
    for i, t in enumerate(tokens):
        terms, tf = np.unique(t, return_counts=True)
        for x, f in zip(terms.tolist(), tf.tolist()):
            for out, v in zip(want, (i, x, f, len(t))):
                out.append(v)
    assert pg_terms.postings(tokens) == want
