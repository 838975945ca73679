"""Connecting to PostgreSQL: URLs (libpq's forms, passwords redacted everywhere), the store's
connections (:class:`Pool`), and the errors a connection raises.

Used by :mod:`memcore.stores.postgres`; nothing here knows memcore's schema.
"""

from __future__ import annotations

import math
import os
import re
import threading
import time
from typing import Any
from urllib.parse import unquote

from memcore.errors import InvalidArgumentError, MemcoreError, install_hint

__all__ = ["PostgresError", "PostgresUnavailableError", "PostgresAuthError",
           "PostgresExtensionError", "InvalidUrlError", "is_postgres_url", "redact", "Pool",
           "POOL_WAIT", "CONNECT_TIMEOUT"]

#: Seconds a call waits for one of the store's ``pool_size`` connections while all are busy
#: (a down server is answered within ``connect_timeout`` instead: connecting never waits here).
POOL_WAIT = 30.0
#: Default ``connect_timeout`` (seconds): how long a call waits for an unreachable server.
CONNECT_TIMEOUT = 5.0

INSTALL_HINT = install_hint("postgres")


class PostgresError(MemcoreError, RuntimeError):
    """A PostgreSQL backend error (its message never contains the password)."""


class PostgresUnavailableError(PostgresError, ConnectionError):
    """The server cannot be reached (down, wrong host/port, refused, timed out)."""


class PostgresAuthError(PostgresError, PermissionError):
    """The server refused the credentials (or the role may not do what memcore needs)."""


class PostgresExtensionError(PostgresError):
    """The pgvector extension is missing from the server (or may not be created)."""


def is_postgres_url(path: Any) -> bool:
    """True for a ``postgresql://`` or ``postgres://`` URL.

    Examples
    --------
    >>> is_postgres_url("postgresql://localhost/db"), is_postgres_url("./memcore-data")
    (True, False)
    """
    return isinstance(path, str) and path.startswith(("postgresql://", "postgres://"))


#: libpq parameters whose values are secrets (redacted wherever a URL or conninfo is shown).
_SECRET_KEYS = ("password", "sslpassword")
#: A ``key=value`` pair of a libpq conninfo string (value bare or single-quoted with escapes).
_KV_RE = re.compile(r"(\b(?:%s)\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*)" % "|".join(_SECRET_KEYS))
#: A secret parameter in a URL's query string.
_QS_RE = re.compile(r"([?&](?:%s)=)([^&]*)" % "|".join(_SECRET_KEYS))


def url_split(url: str) -> tuple[str, str | None, str | None, str, str]:
    """``(scheme, user, password, hostpath, query)`` of a libpq URL, split as libpq splits it
    (``conninfo_uri_parse_options``): the credentials run to the first ``@`` before any ``/``,
    so a password may hold ``?``, ``#`` or ``:``; the query starts at the first ``?`` after
    them. ``user``/``password`` are None when absent; nothing is percent-decoded."""
    scheme, _, rest = url.partition("://")
    user = password = None
    at = re.match(r"[^@/]*@", rest)
    if at:
        cred, rest = rest[:at.end() - 1], rest[at.end():]
        user, colon, pw = cred.partition(":")
        password = pw if colon else None
    hostpath, _, query = rest.partition("?")
    return scheme, user, password, hostpath, query


def url_join(scheme: str, user: str | None, password: str | None, hostpath: str,
              query: str) -> str:
    cred = "" if user is None else user + ("" if password is None else ":" + password) + "@"
    return f"{scheme}://{cred}{hostpath}" + (f"?{query}" if query else "")


def redact(url: str) -> str:
    """``url`` (a libpq URL or ``key=value`` conninfo string) with every password replaced by
    ``***``: the URL's ``user:password@`` part (split as libpq does, so a password holding
    ``?``, ``#``, ``:`` or ``%``-escapes is found whole) and any ``password=``/``sslpassword=``
    parameter of its query string or conninfo.

    Examples
    --------
    >>> redact("postgresql://ann:s3cret@db:5432/mem")
    'postgresql://ann:***@db:5432/mem'
    >>> redact("postgresql://ann:s?3#c@db/mem?sslmode=require&password=x")
    'postgresql://ann:***@db/mem?sslmode=require&password=***'
    >>> redact("host=db user=ann password='s3 cret' dbname=mem")
    'host=db user=ann password=*** dbname=mem'
    """
    url = str(url)
    if not is_postgres_url(url):
        return _KV_RE.sub(r"\1***", url)
    scheme, user, password, hostpath, query = url_split(url)
    return url_join(scheme, user, None if password is None else "***", hostpath,
                     _QS_RE.sub(r"\1***", "?" + query)[1:] if query else query)


def secrets_of(url: str) -> list[str]:
    """The password values in ``url`` as written and percent-decoded (what a server or
    libpq message could echo), longest first."""
    url = str(url)
    found = []
    if is_postgres_url(url):
        _, _, password, _, query = url_split(url)
        found = ([] if password is None else [password]) + [
            m.group(2) for m in _QS_RE.finditer("?" + query)]
    else:
        found = [m.group(2) for m in _KV_RE.finditer(url)]
    out = set()
    for v in found:
        if v:
            out.update({v, unquote(v), v.strip("'")})
    return sorted((v for v in out if v), key=len, reverse=True)


class InvalidUrlError(InvalidArgumentError):
    """A malformed PostgreSQL URL (libpq cannot parse it, or a port is not a number)."""


def check_url(url: str) -> None:
    """Raise :class:`InvalidUrlError` for a URL libpq would refuse: its own parser's
    verdict (``conninfo_to_dict``), and each port a number from 1 to 65535 (libpq checks
    those only when it connects)."""
    import psycopg

    _, _, _, hostpath, _ = url_split(url)
    hosts = hostpath.split("/", 1)[0].rsplit("@", 1)[-1]
    ports = [h.rsplit(":", 1)[1] for h in re.sub(r"\[[^\]]*\]", "", hosts).split(",")
             if ":" in h and h.rsplit(":", 1)[1]]          # "host:" is libpq's default port
    try:
        params = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error as err:
        raise InvalidUrlError(f"malformed PostgreSQL URL {redact(url)!r}: "
                              f"{scrub(str(err).strip(), url)}") from None
    ports += [p for p in str(params.get("port") or "").split(",") if p]
    for port in ports:
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidUrlError(f"malformed PostgreSQL URL {redact(url)!r}: port {port!r} "
                                  f"is not a number from 1 to 65535")


def libpq_timeout(seconds: float) -> int:
    """libpq's ``connect_timeout`` (whole seconds; libpq treats 1 as 2) for ``seconds``."""
    return max(2, int(math.ceil(seconds)))


def psycopg_modules():
    try:
        import psycopg
        from pgvector.psycopg import register_vector
    except ImportError as err:
        raise PostgresError(f"the PostgreSQL backend needs psycopg 3 and pgvector: "
                            f"{INSTALL_HINT} ({err})") from err
    return psycopg, register_vector


def alive(conn: Any) -> bool:
    """True when a pooled connection is open and idle, checked without a round trip: libpq
    reads what the server sent (a restarted or stopped server has closed the socket)."""
    import psycopg

    if conn.closed or conn.broken:
        return False
    pg = conn.pgconn
    try:
        # twice: a server that stops sends a last message, then closes; libpq reports the
        # close only on a read that finds nothing more
        pg.consume_input()
        pg.consume_input()
    except psycopg.OperationalError:
        return False
    return (pg.status == psycopg.pq.ConnStatus.OK
            and pg.transaction_status == psycopg.pq.TransactionStatus.IDLE)


class Pool:
    """The connections of one store: at most ``size`` open, an idle one reused while
    :func:`alive`, a new one opened in the calling thread by ``connect`` (libpq's
    ``connect_timeout`` bounds it). psycopg_pool opens connections in a background worker
    that backs off exponentially after a failure (1, 2, 4.. s): while a server was down its
    callers waited the pool's full timeout, and after a restart reconnection took up to 27 s;
    here a down server is answered within ``connect_timeout`` and the first call after a
    restart connects at once. A forked child never uses (nor closes) its parent's
    connections: it starts with none."""

    def __init__(self, connect: Any, size: int, wait: float):
        self._connect, self._size, self._wait = connect, size, wait
        self._idle: list = []
        self._open = 0
        self._cond = threading.Condition()
        self._pid = os.getpid()
        self.closed = False

    def _forked(self) -> None:
        """In a forked child: forget the parent's connections (the sockets are the parent's;
        psycopg finishes a connection only in the process that opened it). Lock held."""
        if self._pid != os.getpid():
            self._pid, self._idle, self._open = os.getpid(), [], 0

    def get(self) -> Any:
        """An open connection (autocommit; callers wrap their work in a transaction).

        Raises
        ------
        psycopg.OperationalError
            If a new connection cannot be opened.
        TimeoutError
            If all ``size`` connections stay busy for ``wait`` seconds.
        """
        deadline = time.monotonic() + self._wait
        with self._cond:
            self._forked()
            while True:
                while self._idle:
                    conn = self._idle.pop()
                    if alive(conn):
                        return conn
                    self._open -= 1
                    conn.close()
                if self._open < self._size:
                    self._open += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"all {self._size} connections stayed busy for "
                                       f"{self._wait:g} s (raise pool_size)")
                self._cond.wait(left)
        try:
            return self._connect()
        except BaseException:
            with self._cond:
                self._open -= 1
                self._cond.notify()
            raise

    def put(self, conn: Any) -> None:
        """Return ``conn``: kept while healthy and the pool is open, else closed."""
        with self._cond:
            if self._pid != os.getpid():
                return                           # a parent's connection seen in a child
            keep = not self.closed and alive(conn)
            if keep:
                self._idle.append(conn)
            else:
                self._open -= 1
            self._cond.notify()
        if not keep:
            conn.close()

    def __del__(self) -> None:        # a store dropped unclosed closes its idle connections
        if getattr(self, "_pid", None) == os.getpid():
            for conn in self._idle:
                conn.close()

    def close(self) -> None:
        with self._cond:
            self._forked()
            self.closed = True
            idle, self._idle = self._idle, []
            self._open -= len(idle)
        for conn in idle:
            conn.close()


def schema_of(url: str, schema: str) -> tuple[str, str]:
    """``url`` without its ``schema=`` query parameter (memcore's, not libpq's), and that
    schema (else ``schema``)."""
    scheme, user, password, hostpath, query = url_split(url)
    params = [kv for kv in query.split("&") if kv]
    given = [kv for kv in params if kv.startswith("schema=")]
    if not given:
        return url, schema
    rest = "&".join(kv for kv in params if not kv.startswith("schema="))
    return url_join(scheme, user, password, hostpath, rest), given[-1][len("schema="):]


def scrub(message: str, url: str) -> str:
    """``message`` with every password of ``url`` replaced by ``***``."""
    for secret in secrets_of(url):
        message = message.replace(secret, "***")
    return message


def connect_error(err: Exception, url: str) -> PostgresError:
    """The memcore error for a failed connection (classified from libpq's message)."""
    msg = scrub(str(err).strip(), url)
    where = redact(url)
    low = msg.lower()
    if "password" in low or "authentication" in low or "role" in low and "does not exist" in low:
        return PostgresAuthError(f"PostgreSQL at {where} refused the credentials: {msg}")
    return PostgresUnavailableError(f"cannot connect to PostgreSQL at {where}: {msg}")
