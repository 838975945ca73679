"""``memcore bench namespaces``: many small namespaces in one store (issue 24).

N namespaces x M memories (hashing embedder, 384-d; one put_many per namespace), each system in
its own subprocess under RLIMIT_NOFILE=1024: ingest s, open s (memcore: reopen the store; the
in-memory peer has nothing to open), open descriptors after open and after the searches, search
p50/p99 in a random namespace, get p50, ``namespaces()`` s, disk bytes per memory, peak RSS.
Beside LangGraph's ``InMemoryStore`` (vector index over the same embedder) and
:class:`~memcore.stores.postgres.PostgresMemory` on the same data.

``postgres``: a local server (:class:`~memcore.stores.pg_local.LocalServer`, ``fsync=off``,
127.0.0.1) started by the parent once per run, before any clock starts; each measure gets a
fresh schema, dropped afterwards. Its open is constructing ``PostgresMemory`` on the schema the
ingest wrote (setup checks, no pooled connection yet); its descriptors and peak RSS are the
client process's (the server's are not counted); its disk is ``pg_total_relation_size`` summed
over the schema's tables (indexes and TOAST included; WAL and the server's own files not).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import subprocess
import sys
import tempfile
import time

SYSTEMS = ("memcore", "langgraph")
#: every system :func:`measure` knows (``postgres`` needs ``memcore-agent[postgres]``)
KNOWN = ("memcore", "memcore-format2", "langgraph", "postgres")
#: memcore with the pack of small namespaces (format 3; ``MEMCORE_PACK=1``) or without
#: (format 2: a directory per namespace)
PACK = {"memcore": "1", "memcore-format2": "0"}


def add_arguments(p) -> None:
    p.add_argument("--namespaces", type=int, default=1000, help="N (default 1000)")
    p.add_argument("--memories", type=int, default=10, help="M per namespace (default 10)")
    p.add_argument("--queries", type=int, default=500, help="searches and gets (default 500)")
    p.add_argument("--rounds", type=int, default=1,
                   help="ABAB rounds: each system once per round, interleaved (default 1)")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help=f"comma-separated, of {', '.join(KNOWN)} (default {','.join(SYSTEMS)})")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _pct(xs: list, q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _pg_disk(url: str) -> int:
    """Bytes of the tables (with their indexes and TOAST) in the schema ``url`` names."""
    import psycopg

    from memcore.stores.pg_connect import schema_of

    url, schema = schema_of(url, None)
    with psycopg.connect(url) as conn:
        return int(conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = %s "
            "AND c.relkind = 'r'", [schema]).fetchone()[0])


def measure(system: str, n: int, m: int, queries: int, root: str) -> dict:
    """One system's figures (run in its own process: :func:`run_one`); ``root`` is the store's
    directory, for ``postgres`` the server's URL with ``?schema=``."""
    import resource

    from memcore import HashingEmbedder, LongTermMemory, MemoryItem

    emb = HashingEmbedder(dim=384)
    names = [("users", f"u{i}", "memories") for i in range(n)]
    texts = [[f"user {i} note {j} about thing {j % 4}" for j in range(m)] for i in range(n)]
    t0 = time.perf_counter()
    if system.startswith("memcore") or system == "postgres":
        if system == "postgres":
            from memcore.stores.postgres import PostgresMemory as Store
        else:
            Store = LongTermMemory
        with Store(root, emb) as s:
            for ns, tx in zip(names, texts):
                s.put_many(ns, [MemoryItem(f"k{j}", t) for j, t in enumerate(tx)])
        ingest = time.perf_counter() - t0
        base = _fds()
        t0 = time.perf_counter()
        s = Store(root, emb)
        open_s = time.perf_counter() - t0
        search = lambda ns, q: s.search(ns, q, top_k=5)          # noqa: E731
        get = lambda ns, k: s.get(ns, k)                        # noqa: E731
        listing = s.namespaces
    else:
        from langgraph.store.memory import InMemoryStore

        s = InMemoryStore(index={"dims": 384, "embed": lambda xs: emb.encode(list(xs)).tolist(),
                                 "fields": ["text"]})
        for ns, tx in zip(names, texts):
            for j, t in enumerate(tx):
                s.put(ns, f"k{j}", {"text": t})
        ingest = time.perf_counter() - t0
        base, open_s = _fds(), 0.0
        search = lambda ns, q: s.search(ns, query=q, limit=5)   # noqa: E731
        get = lambda ns, k: s.get(ns, k)                        # noqa: E731
        listing = lambda: s.list_namespaces(limit=n + 1)        # noqa: E731
    fds_open = _fds() - base
    rng = random.Random(0)
    lat, glat = [], []
    for _ in range(queries):
        ns = names[rng.randrange(n)]
        t0 = time.perf_counter()
        search(ns, "note about thing 2")
        lat.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        get(ns, "k3")
        glat.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    listed = len(listing())
    ns_s = time.perf_counter() - t0
    out = dict(system=system, n=n, m=m, ingest_s=ingest, open_s=open_s, fds_open=fds_open,
               fds_after=_fds() - base, search_p50_ms=_pct(lat, .5) * 1e3,
               search_p99_ms=_pct(lat, .99) * 1e3, get_p50_us=_pct(glat, .5) * 1e6,
               namespaces_s=ns_s, listed=listed)
    if system != "langgraph":
        s.close()
        disk = (_pg_disk(root) if system == "postgres" else
                sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs))
        out["disk_bytes_per_memory"] = disk / (n * m)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def run_one(system: str, n: int, m: int, queries: int, server=None) -> dict:
    """:func:`measure` in a subprocess under RLIMIT_NOFILE=1024; ``postgres`` on ``server`` (a
    started :class:`~memcore.stores.pg_local.LocalServer`; one is started and stopped around
    this call when None) in a fresh schema, dropped afterwards."""
    if system == "postgres" and server is None:
        from memcore.stores.pg_local import LocalServer

        with LocalServer() as server:
            return run_one(system, n, m, queries, server)
    with tempfile.TemporaryDirectory() as tmp:
        root, schema = os.path.join(tmp, "store"), None
        if system == "postgres":
            schema = f"bench_ns_{secrets.token_hex(4)}"
            root = f"{server.url}?schema={schema}"
        code = ("import json, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, "
                "(1024, 1024)); from bench.namespaces import measure; "
                "print(json.dumps(measure(*sys.argv[1:2], *map(int, sys.argv[2:5]), sys.argv[5])))")
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=repo, MEMCORE_PACK=PACK.get(system, "0"))
        try:
            out = subprocess.run([sys.executable, "-c", code, system, str(n), str(m),
                                  str(queries), root], capture_output=True, text=True,
                                 env=env, cwd=repo)
        finally:
            if schema is not None:
                _drop_schema(server.url, schema)
        if out.returncode != 0:
            return dict(system=system, n=n, m=m, error=out.stderr.strip().splitlines()[-1:])
        return json.loads(out.stdout.strip().splitlines()[-1])


def run(args) -> int:
    n, m, q = (50, 4, 50) if args.quick else (args.namespaces, args.memories, args.queries)
    systems = [x for x in getattr(args, "systems", ",".join(SYSTEMS)).split(",") if x]
    unknown = sorted(set(systems) - set(KNOWN))
    if unknown:
        print(f"bench namespaces: unknown systems {unknown}; known: {', '.join(KNOWN)}",
              file=sys.stderr)
        return 2
    rows = []
    with contextlib.ExitStack() as stack:
        server = None
        if "postgres" in systems:     # one server for the run, started before any clock
            from memcore.stores.pg_local import LocalServer

            server = stack.enter_context(LocalServer())
        for r in range(getattr(args, "rounds", 1)):
            for sysname in systems:
                row = run_one(sysname, n, m, q, server)
                row["round"], row["load"] = r, os.getloadavg()[0]
                print(json.dumps(row), flush=True)
                rows.append(row)
    return 0 if all("error" not in r for r in rows) else 1
