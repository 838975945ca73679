"""The store and demo subcommands of the ``memcore`` command line.

:func:`add_global_options` adds ``--store`` and ``--embedder`` to the top-level parser and
:func:`add_commands` registers ``put``, ``search``, ``get``, ``delete``, ``namespaces``,
``stats``, ``import``, ``export``, ``migrate``, ``warmup``, ``mcp`` and ``demo`` on its
subparsers (:mod:`memcore.cli` calls both).
Each subcommand sets ``args.func(args) -> int``.

Conventions
-----------
- The store is ``--store PATH``, else ``$MEMCORE_HOME``, else ``./memcore-data``. The global
  options may also follow the subcommand (``memcore search --store s ns q``).
- A namespace on the command line is one segment, as a str is in the library: ``a/b`` is the
  single segment ``"a/b"``. Several segments are a JSON list: ``'["agent", "patrol"]'`` is
  the namespace ``("agent", "patrol")`` (what ``SemanticMemory`` uses for mode ``patrol``).
- Exit status: 0 success, 1 error (missing store, locked store, missing key, corrupted file),
  2 usage (a bad argument: namespace, JSON, number). An error is one line on stderr,
  ``memcore COMMAND: error: ...``, never a traceback; with ``--json`` it is one JSON object
  on stderr instead: ``{"error": message, "command": name, "status": code}`` (stdout stays
  empty, so a pipe reading it sees no partial document). Under ``--json`` even an unexpected
  failure (a bug) is that object, with status 1 and ``internal error: ...``; without
  ``--json`` a bug keeps its traceback.
- ``--json`` prints one JSON document on stdout.
- ``put`` reads its text from the argument, from stdin (``-``) or from ``--file PATH``;
  ``import -`` reads stdin and ``export -`` writes stdout.
- Only commands that embed text (``put``, ``search``, ``import``) build an embedder; the others
  (``get``, ``delete``, ``namespaces``, ``stats``, ``export``) ignore ``--embedder``.
- Stores are opened by :func:`memcore.open.open_store`. Only ``put``, ``import`` and ``mcp``
  create a missing store, and say so on stderr (``memcore put: note: no store at PATH: creating a new
  one ...``); the first MiniLM load on a machine also prints a note (about 15 s). Under
  ``--json`` a note is one JSON object on stderr, ``{"note": ..., "command": ...}``.
- A ``search`` that finds nothing in a namespace holding nothing, or a ``get`` of a missing
  key there, names the nearest namespaces that do hold memories (``did you mean 'notes'?``,
  SemanticMemory's ``["agent", MODE]`` prefix) or SemanticMemory's short-tier journal.
- Reads (``search``, ``get``, ``namespaces``, ``stats``, ``export``) open the store read-only,
  so they work while another process writes, and peek (``touch=False``): a look from the
  command line does not change what the agent recalls.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

from memcore import _validate
from memcore.agent import SHORT_JOURNAL
from memcore.errors import (
    EmbedderMismatchError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidNamespaceError,
    InvalidTextError,
    MemcoreError,
    MemoryNotFoundError,
    StoreLockedError,
    StoreNotFoundError,
)
from memcore.integrations.mcp_server import serve
from memcore.open import AUTO, EMBEDDERS, build_embedder, describe, is_url, matching_embedder, open_store
from memcore.recall.weights import HybridWeights
from memcore.stores.long import LongTermMemory
from memcore.names import format_namespace
from memcore.views import (empty_namespace_note, explanation_lines, hit_dict, memory_dict,
                           missing_memory_message, text_key)

__all__ = ["add_global_options", "add_commands", "store_path", "parse_namespace", "UsageError",
           "MemoryNotFoundError", "text_key", "format_namespace"]

DEFAULT_STORE = "memcore-data"

#: The first segment of the namespaces where SemanticMemory journals its short tier: internal,
#: checked by ``verify`` but not listed there, and named as such by ``search``/``get`` hints.
INTERNAL_PREFIX = SHORT_JOURNAL


class UsageError(MemcoreError, ValueError):
    """A command-line argument is malformed (exit status 2)."""


# ------------------------------------------------------------------ options and parsing

#: ``--store``'s help on the top level and on every subcommand but ``demo``.
STORE_HELP = ("store directory or postgresql:// URL (default: $MEMCORE_HOME, else "
              "./memcore-data); a directory without a store is created by put, import and mcp "
              "(with a note on stderr)")


def add_global_options(parser: argparse.ArgumentParser, *, suppress: bool = False,
                       store_help: str = STORE_HELP) -> None:
    """Add ``--store`` and ``--embedder`` to ``parser``.

    With ``suppress=True`` (used on subcommands) an absent option leaves the top-level value
    alone instead of overwriting it with a default. ``store_help`` is ``--store``'s help text.
    """
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument("--store", metavar="PATH", default=default, help=store_help)
    parser.add_argument("--embedder", choices=EMBEDDERS, default=default,
                        help="embedder (default: the store's own; for a new store minilm when "
                             "its model loads, else hashing; static: word-piece vectors "
                             "distilled from MiniLM, fastest)")


def _where(args: argparse.Namespace) -> str:
    """``--store``, else ``$MEMCORE_HOME``, else ``./memcore-data`` (a URL keeps its password)."""
    return getattr(args, "store", None) or os.environ.get("MEMCORE_HOME") or DEFAULT_STORE


def store_path(args: argparse.Namespace) -> Path:
    """``--store``, else ``$MEMCORE_HOME``, else ``./memcore-data`` (a URL without its password;
    :func:`store_label` keeps a URL's ``//``)."""
    return Path(describe(_where(args)))


def store_label(args: argparse.Namespace) -> str:
    """The store as messages name it: a path as given, a URL without its password."""
    return describe(_where(args))


def parse_namespace(text: str) -> tuple[str, ...]:
    """``"a/b"`` -> ``("a/b",)`` (one segment, as the library takes a str); a JSON list of str
    is taken segment by segment.

    Raises
    ------
    InvalidNamespaceError
        If a segment is empty or holds NUL, or the JSON is not a list of str.

    Examples
    --------
    >>> parse_namespace("agent/patrol"), parse_namespace('["agent", "patrol"]')
    (('agent/patrol',), ('agent', 'patrol'))
    """
    if text.startswith("["):
        try:
            segments = json.loads(text)
        except ValueError as err:
            raise InvalidNamespaceError(f"namespace {text!r} is not a JSON list: {err}") from err
        if not isinstance(segments, list):
            raise InvalidNamespaceError(f"namespace {text!r} must be a JSON list of str")
        return _validate.namespace(tuple(segments))
    return _validate.namespace(text)


def _note(args: argparse.Namespace) -> Callable[[str], None]:
    """Where the store factory's notes go: one line on stderr (a JSON object under --json)."""

    def note(message: str) -> None:
        if getattr(args, "json", False):
            json.dump({"note": message, "command": args.command}, sys.stderr, ensure_ascii=False)
            sys.stderr.write("\n")
        else:
            print(f"memcore {args.command}: note: {message}", file=sys.stderr)

    return note


class _Opened:
    """An open store plus the embedder that encodes for it (built only when needed)."""

    def __init__(self, store: Any, given: Any, note: Callable[[str], None]) -> None:
        self.store = store
        self._embedder = given
        self._note = note

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            self._embedder = matching_embedder(self.store, notify=self._note)
        return self._embedder

    def vector(self, text: str) -> Any:
        """The embedding of ``text`` (1-D float32), or None when it has no content."""
        vec = self.embedder.encode([text])[0]
        return vec if vec.any() else None

    def visible_namespaces(self) -> list:
        """The store's namespaces but SemanticMemory's internal journal."""
        return [ns for ns in self.store.namespaces() if ns[0] != INTERNAL_PREFIX]

    def __enter__(self) -> "_Opened":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.store.close()


def _open(args: argparse.Namespace, *, write: bool, embeds: bool = False,
          encoder: bool = False) -> _Opened:
    """Open the store read-only (it must exist) or for writing, through :func:`open_store`.

    ``embeds``: the command encodes text. Only then is ``--embedder`` built (and checked by the
    store against the one it was written with) and may a write create a new store (with a note
    on stderr); otherwise no embedder is built or checked. Without ``--embedder`` an existing
    store's own embedder is used, built only if a text must be encoded (``encoder=True``
    builds it up front and hands it to the store, for an import that re-embeds).
    """
    note = _note(args)
    where = _where(args)
    name = getattr(args, "embedder", None) if embeds else None
    given = build_embedder(name, notify=note) if name else None
    try:
        if not write:
            return _Opened(open_store(where, given, read_only=True, notify=note), given, note)
        if given is None and not encoder:
            try:
                return _Opened(open_store(where, None, create=False, lock_timeout=1.0,
                                          notify=note), None, note)
            except StoreNotFoundError:
                if not embeds:
                    raise
        store = open_store(where, given or AUTO, lock_timeout=1.0, notify=note)
    except EmbedderMismatchError as err:
        if given is None:
            raise
        raise EmbedderMismatchError(_mismatch_message(args, where, given)) from err
    return _Opened(store, given or store.embedder, note)


def _mismatch_message(args: argparse.Namespace, where: str, given: Any) -> str:
    """What to do when ``--embedder`` is not the store's: drop it (the store's own is used)."""
    try:
        with open_store(where, None, read_only=True) as probe:
            theirs = f"{probe.embedder_name!r} (dim {probe.dim})"
    except (MemcoreError, OSError):
        theirs = "another embedder"
    return (f"the store {describe(where)} was written with embedder {theirs}, not "
            f"{given.name!r} (dim {given.dim}) of --embedder {args.embedder}; drop --embedder "
            f"(the command line then uses the store's own), or use another --store for "
            f"{args.embedder} vectors")


def _json_default(value: Any) -> Any:
    if hasattr(value, "value"):  # enums
        return value.value
    if isinstance(value, tuple):
        return list(value)
    raise InvalidArgumentTypeError(f"not JSON-serialisable: {type(value).__name__}")


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _preview(text: str, limit: int = 200) -> str:
    """One line of at most ``limit`` characters (``get KEY`` prints the whole text)."""
    line = " ".join(text[: limit * 4].split())
    return line if len(line) <= limit and len(text) <= limit * 4 else line[: limit - 1] + "\u2026"


def _print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, ensure_ascii=False, default=_json_default, allow_nan=False)
    sys.stdout.write("\n")


def report_error(command: str, message: str, status: int, *, as_json: bool,
                 kind: str = "error") -> int:
    """Print one error on stderr (one line, or one JSON object under ``--json``); return status."""
    if as_json:
        json.dump({"error": message, "command": command, "status": status}, sys.stderr,
                  ensure_ascii=False)
        sys.stderr.write("\n")
    else:
        print(f"memcore {command}: {kind}: {' '.join(message.split())}", file=sys.stderr)
    return status


def _locked_message(args: argparse.Namespace) -> str:
    return (f"another process is writing to the store {store_label(args)} (it holds the writer "
            f"lock); close that process or wait until it is done, then retry. Reads (search, "
            f"get, namespaces, stats, export) work meanwhile")


def _guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn expected failures into one error on stderr and an exit status (1 error, 2 usage)."""

    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        as_json = bool(getattr(args, "json", False))
        try:
            return fn(args)
        except (UsageError, InvalidNamespaceError, InvalidTextError) as err:
            return report_error(args.command, str(err), 2, as_json=as_json, kind="usage error")
        except StoreLockedError:
            return report_error(args.command, _locked_message(args), 1, as_json=as_json)
        except (MemcoreError, OSError, ValueError, TypeError, LookupError, ImportError) as err:
            return report_error(args.command, str(err), 1, as_json=as_json)
        except KeyboardInterrupt:
            return report_error(args.command, "interrupted", 130, as_json=as_json)
        except Exception as err:
            if not as_json:
                raise                   # a bug: its traceback helps more than a summary line
            return report_error(args.command, f"internal error: {type(err).__name__}: {err} "
                                f"(please report it)", 1, as_json=True)

    return run


def _json_arg(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON: {err}") from err
    except RecursionError:
        raise argparse.ArgumentTypeError("nests too deeply to parse") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {type(value).__name__}")
    return value


def _filter_arg(text: str) -> dict:
    """``--filter``: a JSON object the store accepts as a metadata filter (checked by the same
    validator as the library's, so a malformed filter is a usage error, never ``[]``)."""
    value = _json_arg(text)
    try:
        _validate.metadata_filter(value)
    except (InvalidArgumentError, InvalidArgumentTypeError) as err:
        raise argparse.ArgumentTypeError(str(err)) from err
    return value


def _checked(text: str, convert: Callable[[str], Any], kind: str,
             ok: Callable[[Any], bool], rule: str) -> Any:
    """``convert(text)`` for argparse: "not <kind>" if it fails, "must be <rule>" unless ``ok``."""
    try:
        value = convert(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not {kind}: {text!r}") from err
    if not ok(value):
        raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
    return value


def _unit_float(text: str) -> float:
    return _checked(text, float, "a number", lambda v: 0.0 <= v <= 1.0, "in [0, 1]")


def _positive_int(text: str) -> int:
    return _checked(text, int, "an integer", lambda v: v >= 1, ">= 1")


def _finite_float(text: str) -> float:
    return _checked(text, float, "a number", math.isfinite, "finite")


# ------------------------------------------------------------------ commands

def _put_text(args: argparse.Namespace) -> str:
    """The text of ``put``: the argument, stdin for ``-``, or the file of ``--file`` (UTF-8).

    From stdin or a file, one final line break is dropped (as the shell's ``$(...)`` does).
    """
    if (args.text is None) == (args.file is None):
        raise UsageError("give the text as an argument, `-` for stdin, or --file PATH (one of them)")
    try:
        if args.file is not None:
            text = Path(args.file).read_text(encoding="utf-8")
        elif args.text == "-":
            text = sys.stdin.read()
        else:
            return args.text
        return text.removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError as err:
        raise InvalidTextError(f"{args.file or 'stdin'} is not UTF-8 text: {err}") from err


@_guard
def cmd_put(args: argparse.Namespace) -> int:
    ns = parse_namespace(args.namespace)
    text = _put_text(args)
    key = args.key or text_key(text, "cli")
    with _open(args, write=True, embeds=True) as opened:
        vec = opened.vector(text)
        if vec is None:
            raise UsageError(f"text {text[:80]!r} has no content for embedder "
                             f"{opened.embedder.name!r}; it could never be recalled")
        stored = opened.store.put(ns, key, text, importance=args.importance,
                                  metadata=args.metadata, vector=vec)
    if args.json:
        _print_json(memory_dict(stored))
    else:
        print(f"stored {format_namespace(ns)} {stored.key}")
    return 0


@_guard
def cmd_search(args: argparse.Namespace) -> int:
    ns = parse_namespace(args.namespace)
    with _open(args, write=False, embeds=True) as opened:
        vec = opened.vector(args.query) if args.query.strip() else None
        hits = [] if vec is None else opened.store.search(
            ns, args.query, top_k=args.top_k, touch=False, query_vector=vec,
            threshold=-1.0 if args.threshold is None else args.threshold, filter=args.filter,
            explain=args.explain)
        why = ("(empty query: nothing to search for)" if not args.query.strip()
               else f"(the query has no content for embedder {opened.embedder.name!r})" if vec is None
               else "(" + (empty_namespace_note(opened.store, ns)
                           or f"nothing found in namespace {format_namespace(ns)}") + ")"
               if args.threshold is None and args.filter is None
               else f"(no memories above the threshold {args.threshold:g})" if args.filter is None
               else "(no memories matching the filter" + (
                   "" if args.threshold is None else f" above the threshold {args.threshold:g}") + ")")
    if args.json:
        _print_json([hit_dict(h) for h in hits])
        if not hits:      # stdout stays a JSON list; why it is empty goes to stderr as a note
            _note(args)(why[1:-1])
        return 0
    if not hits:
        print(why)
    for h in hits:
        print(f"{h.score:7.4f}  sim {h.similarity:6.3f}  {h.key}  {_preview(h.text)}")
        for line in explanation_lines(h.explanation) if args.explain else ():
            print(f"         {line}")
    return 0


def _on_key(args: argparse.Namespace, write: bool, act: Callable[..., Any]) -> tuple[tuple, Any]:
    """``act(store, ns, key)`` on the command's namespace and key; a None result is not found."""
    ns = parse_namespace(args.namespace)
    with _open(args, write=write) as opened:
        found = act(opened.store, ns, args.key)
        if found is None:
            raise MemoryNotFoundError(missing_memory_message(opened.store, ns, args.key))
    return ns, found


@_guard
def cmd_get(args: argparse.Namespace) -> int:
    _, m = _on_key(args, False, lambda store, ns, key: store.get(ns, key))
    if args.json:
        _print_json(memory_dict(m))
    else:
        print(m.text)
        if m.metadata:
            print(json.dumps(dict(m.metadata), ensure_ascii=False))
    return 0


@_guard
def cmd_delete(args: argparse.Namespace) -> int:
    ns, _ = _on_key(args, True, lambda store, ns, key: store.delete(ns, key) or None)
    if args.json:
        _print_json({"deleted": True, "namespace": list(ns), "key": args.key})
    else:
        print(f"deleted {format_namespace(ns)} {args.key}")
    return 0


@_guard
def cmd_namespaces(args: argparse.Namespace) -> int:
    prefix = parse_namespace(args.prefix) if args.prefix else None
    with _open(args, write=False) as opened:
        found = [(ns, opened.store.count(ns)) for ns in opened.store.namespaces(prefix)]
    if args.json:
        _print_json([{"namespace": list(ns), "count": n} for ns, n in found])
    else:
        for ns, n in found:
            print(f"{format_namespace(ns)}\t{n}")
    return 0


@_guard
def cmd_stats(args: argparse.Namespace) -> int:
    where = _where(args)
    with _open(args, write=False) as opened:
        per_ns = {format_namespace(ns): opened.store.count(ns) for ns in opened.store.namespaces()}
        embedder = opened.store.embedder_name
    disk = None if is_url(where) else sum(f.stat().st_size for f in Path(where).rglob("*")
                                          if f.is_file())
    out = {"store": describe(where), "embedder": embedder, "namespaces": len(per_ns),
           "memories": sum(per_ns.values()), "disk_bytes": disk, "per_namespace": per_ns}
    if args.json:
        _print_json(out)
    else:
        size = "" if disk is None else f"  {disk / 1e6:.2f} MB on disk"
        n_mem, n_ns = out["memories"], out["namespaces"]
        print(f"store {out['store']}  embedder {embedder}  {n_mem} memor{'y' if n_mem == 1 else 'ies'}"
              f" in {n_ns} namespace{'' if n_ns == 1 else 's'}{size}")
        for ns, n in per_ns.items():
            print(f"  {ns}\t{n}")
    return 0


IMPORT_CHUNK = 2048


def _export_header(src: Path) -> tuple[str, int]:
    """The header line of the JSONL export ``src`` and how many memory lines follow it,
    checked before the store is opened (so a bad file creates no store).

    Raises
    ------
    InvalidArgumentError
        If ``src`` is not UTF-8 text or is empty.
    """
    try:
        with src.open("r", encoding="utf-8") as f:
            header = f.readline()
            total = sum(1 for line in f if line.strip())
    except UnicodeDecodeError:
        raise InvalidArgumentError(f"{src} is not a memcore JSONL export (not UTF-8 text)") \
            from None
    if not header.strip():
        raise InvalidArgumentError(f"{src} is empty; expected a memcore JSONL export")
    return header, total


def _import_with_progress(store: Any, src: Path, header: str, total: int,
                          progress: bool) -> int:
    """``store.import_jsonl`` in chunks of :data:`IMPORT_CHUNK` lines, with a tqdm bar (drawn
    only on a terminal).

    Each chunk is a temporary file holding the export's header line and the chunk's lines,
    so the store's own import (vector reuse or re-embedding, lifecycle fields) does the work.
    """
    from tqdm import tqdm

    done = 0
    with src.open("r", encoding="utf-8") as f, tempfile.TemporaryDirectory(prefix="memcore-import-") as tmp, \
            tqdm(total=total, unit="mem", desc=f"import {src.name}",
                 disable=None if progress else True,     # None: only on a terminal
                 file=sys.stderr) as bar:
        next(f)  # the header, repeated in every chunk
        chunk_path = Path(tmp) / "chunk.jsonl"
        first = True
        while True:
            lines = [line for line in itertools.islice(f, IMPORT_CHUNK) if line.strip()]
            if not lines and not first:
                break
            first = False  # a header-only file still goes through the store's header check
            chunk_path.write_text(header + "".join(lines), encoding="utf-8")
            done += store.import_jsonl(chunk_path)
            bar.update(len(lines))
    return done


def _summary(args: argparse.Namespace, obj: dict[str, Any], line: str, *, to_stderr: bool) -> None:
    """A command's closing summary: on stdout, or on stderr when stdout carries the data."""
    if to_stderr:
        print(json.dumps(obj) if args.json else line, file=sys.stderr)
    elif args.json:
        _print_json(obj)
    else:
        print(line)


@_guard
def cmd_import(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="memcore-stdin-") as tmp:
        if args.file == "-":
            src = Path(tmp) / "stdin.jsonl"
            with src.open("w", encoding="utf-8") as f:
                for line in sys.stdin:
                    f.write(line)
        else:
            src = Path(args.file)
            if not src.is_file():
                raise FileNotFoundError(f"no file {src}")
        header, total = _export_header(src)
        with _open(args, write=True, embeds=True, encoder=True) as opened:  # an import may re-embed
            n = _import_with_progress(opened.store, src, header, total, progress=not args.quiet)
    name = "stdin" if args.file == "-" else str(src)
    _summary(args, {"imported": n}, f"imported {n} memories from {name} into {store_label(args)}",
             to_stderr=False)
    return 0


@_guard
def cmd_export(args: argparse.Namespace) -> int:
    to_stdout = args.file == "-"
    with _open(args, write=False) as opened, \
            tempfile.TemporaryDirectory(prefix="memcore-export-") as tmp:
        dest = Path(tmp) / "export.jsonl" if to_stdout else Path(args.file)
        n = opened.store.export_jsonl(dest)
        if to_stdout:
            with dest.open("r", encoding="utf-8") as f:
                for line in f:
                    sys.stdout.write(line)
            sys.stdout.flush()
    _summary(args, {"exported": n},
             f"exported {n} memories from {store_label(args)} to {'stdout' if to_stdout else dest}",
             to_stderr=to_stdout)
    return 0


def _store_arg(args: argparse.Namespace) -> Path:
    """The embedded store a maintenance command works on: ``PATH``, else the global store.

    Raises
    ------
    UsageError
        If it is a PostgreSQL URL: the server keeps its own checksums and write-ahead log, so
        ``migrate``, ``verify`` and ``repair`` (which read and rewrite store files) do not apply.
    """
    where = args.path if args.path is not None else _where(args)
    if is_url(where):
        raise UsageError(
            f"{args.command} works on a store directory, and {describe(where)} is a PostgreSQL "
            f"store: the server checks and recovers its own data (its write-ahead log; "
            f"pg_amcheck checks the tables), and its schema is upgraded when it is opened")
    return Path(where)


@_guard
def cmd_migrate(args: argparse.Namespace) -> int:
    path = _store_arg(args)
    n = LongTermMemory.migrate(path, progress=not args.quiet)
    _summary(args, {"migrated": n, "store": str(path)},
             f"migrated {n} memories of {path} to on-disk format "
             f"{_storage_version(path)}" if n
             else f"{path} already is of the current on-disk format",
             to_stderr=False)
    return 0


@_guard
def cmd_warmup(args: argparse.Namespace) -> int:
    """Build and save the hybrid index of every namespace that lacks one
    (:meth:`LongTermMemory.warmup`), and compile (or load) into numba's cache every kernel a
    :class:`SemanticMemory` tick on this store's embedder calls (:func:`warm_ticks`)."""
    from memcore.agent import warm_ticks

    path = _store_arg(args)
    with LongTermMemory.open(path, read_only=False, lock_timeout=1.0) as store:
        n = store.warmup(HybridWeights.hybrid(), progress=not args.quiet)
        embedder = matching_embedder(store, notify=_note(args))
    warm_ticks(embedder)
    _summary(args, {"indexed": n, "store": str(path)},
             f"indexed {n} memories of {path}" if n else f"{path}: every hybrid index is saved",
             to_stderr=False)
    return 0


def _internal(ns: Any) -> bool:
    return isinstance(ns, tuple) and ns[0] == INTERNAL_PREFIX


@_guard
def cmd_verify(args: argparse.Namespace) -> int:
    """Check every checksum of a store (read-only); exit 1 when anything is damaged.

    SemanticMemory's journal namespaces are checked like any other; the text output sums them
    up in one line instead of listing them (``--json`` lists them, ``"internal": true``).
    """
    path = _store_arg(args)
    with LongTermMemory.open(path, read_only=True) as store:
        report = store.verify()
    bad = {name: r for name, r in report.items() if r["errors"] or r["bad_rows"]}
    if args.json:
        _print_json({"store": str(path), "ok": not bad, "namespaces": [
            {"namespace": list(ns) if isinstance(ns, tuple) else None,
             "directory": None if isinstance(ns, tuple) else ns, "internal": _internal(ns), **r}
            for ns, r in report.items()]})
        return 1 if bad else 0
    journal = [ns for ns in report if _internal(ns)]
    for ns, r in report.items():
        if ns in bad or not _internal(ns):          # a damaged journal namespace is listed too
            name = format_namespace(ns) if isinstance(ns, tuple) else ns
            state = ("ok" if ns not in bad else "; ".join(r["errors"])
                     or f"{len(r['bad_rows'])} rows fail their checksum")
            print(f"{name}: {r['live']} live of {r['rows']} rows: {state}")
    shown = len(report) - len(journal)
    print(f"{path}: {shown - sum(not _internal(ns) for ns in bad)} of {shown} namespaces intact"
          + (f", and {sum(ns not in bad for ns in journal)} of {len(journal)} namespaces of "
             f"SemanticMemory's short-tier journal (internal, not listed)" if journal else "")
          + ("" if not bad else "; `memcore repair` rewrites the damaged ones"))
    return 1 if bad else 0


@_guard
def cmd_repair(args: argparse.Namespace) -> int:
    """Rebuild what is damaged (store header, namespaces) keeping every intact record."""
    path = _store_arg(args)
    note = _note(args)
    try:                                       # re-embeds damaged vectors exactly when it can
        with LongTermMemory.open(path, read_only=True) as probe:
            embedder = matching_embedder(probe, notify=note)
    except MemcoreError:                       # e.g. a lost store header
        name = getattr(args, "embedder", None)
        embedder = build_embedder(name, notify=note) if name else None
    with LongTermMemory(path, embedder, repair=True, lock_timeout=1.0) as store:
        report = store.repair_report + store.repair()
    if args.json:
        _print_json({"store": str(path), "repaired": [
            {**r, "namespace": list(r["namespace"])} if "namespace" in r else r
            for r in report]})
    elif not report:
        print(f"{path}: nothing to repair")
    else:
        for r in report:
            if "namespace" not in r:
                print(f"{path}: store header rebuilt (epoch {r['epoch']})")
                continue
            name = "/".join(r["namespace"])
            print(f"{name}: kept {r['kept']}, dropped {r['dropped']}, "
                  f"re-embedded {r['reembedded']}, damaged stretches {r['skipped']}")
            lost = r.get("lost_keys", [])
            for key in r["uncertain"]:        # dropped from the store: nothing vouches for it
                why = "its record is damaged" if key in lost else "a damaged record may have " \
                      "deleted or replaced it, or its vector is damaged"
                print(f"  not vouched for: {name} {key!r} ({why})")
            if None in lost:
                print(f"  not vouched for: {lost.count(None)} memory(ies) of {name} whose "
                      "damaged record no longer names its key")
            for key in r.get("ttl_unverified", []):
                print(f"  kept, time to live unverified: {name} {key!r} (its check copy is "
                      "damaged; the TTL column's value is kept)")
            for key in r.get("stats_reset", []):
                print(f"  kept, access statistics reset: {name} {key!r} (their check failed; "
                      "its record's last_accessed_at and access_count)")
            if r.get("quarantine"):
                print(f"  set aside in {r['quarantine']}: inspect it; `memcore import FILE` "
                      "brings back what is still wanted")
    return 0


def _storage_version(path: Any) -> int:
    """The on-disk format version the store header at ``path`` says (3 with a pack)."""
    from memcore.storage import read_store_header

    return read_store_header(str(path))["version"]


@_guard
def cmd_demo(args: argparse.Namespace) -> int:
    from memcore.agent import SemanticMemory
    from memcore.demo import (DEMO_THRESHOLD, DEMO_TOP_K, ManualClock, load_locomo, load_script,
                              run_locomo, run_script)
    from memcore.extractors import FactExtractor
    from memcore.types import DecayWeights

    out = None if args.json else sys.stdout
    clock = ManualClock()
    with tempfile.TemporaryDirectory(prefix="memcore-demo-") as tmp:
        path = store_path(args) if args.keep else Path(tmp) / "store"
        embedder = build_embedder(getattr(args, "embedder", None), notify=_note(args))
        weights = DecayWeights.similarity() if args.similarity_only else None
        if args.locomo:
            conv = load_locomo(args.locomo, args.conversation)
            with SemanticMemory(path, embedder, clock=clock, short_capacity=256,
                                consolidate_every=64, weights=weights) as memory:
                summary = run_locomo(memory, conv, clock, top_k=args.top_k, out=out,
                                     verbose=args.verbose)
        else:
            if args.conversation != "conv-26" or args.top_k != 5:
                raise UsageError("--conversation and --top-k apply to --locomo replays")
            script = load_script(args.script)
            with SemanticMemory(path, embedder, clock=clock, extractors=[FactExtractor()],
                                top_k=DEMO_TOP_K, threshold=DEMO_THRESHOLD,
                                weights=weights) as memory:
                summary = run_script(memory, script, clock, out=out)
    if args.json:
        _print_json(_json_safe(summary))
    return 0


@_guard
def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        return serve(_where(args), embedder=getattr(args, "embedder", None),
                     warmup=not args.no_warmup)
    except EmbedderMismatchError as err:
        if not getattr(args, "embedder", None):
            raise
        raise EmbedderMismatchError(_mismatch_message(args, _where(args), build_embedder(
            args.embedder))) from err


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, float):
        return _finite(obj)
    return obj


def add_commands(subparsers: Any) -> None:
    """Register the store and demo subcommands on an ``add_subparsers()`` object."""
    common = argparse.ArgumentParser(add_help=False)
    add_global_options(common, suppress=True)

    def sub(name: str, help_: str, func: Callable[[argparse.Namespace], int],
            parents: Sequence[argparse.ArgumentParser] = (common,)) -> argparse.ArgumentParser:
        p = subparsers.add_parser(name, help=help_, description=help_, parents=list(parents))
        p.set_defaults(func=func, command=name)
        return p

    def json_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")

    ns_help = 'namespace: one segment ("a/b" included), or a JSON list of segments'
    p = sub("put", "store (or replace) one memory", cmd_put)
    p.add_argument("namespace", help=ns_help)
    p.add_argument("text", nargs="?", help="the text; `-` reads it from stdin")
    p.add_argument("--file", metavar="PATH", help="read the text from a UTF-8 file instead")
    p.add_argument("--key", help="key (default: derived from the text)")
    p.add_argument("--importance", type=_unit_float, default=0.5, help="in [0, 1] (default 0.5)")
    p.add_argument("--metadata", type=_json_arg, default=None, metavar="JSON", help="a JSON object")
    json_flag(p)

    p = sub("search", "the memories of a namespace most relevant to a query", cmd_search)
    p.add_argument("namespace", help=ns_help)
    p.add_argument("query")
    p.add_argument("--top-k", type=_positive_int, default=5, help="hits (default 5)")
    p.add_argument("--threshold", type=_finite_float, default=None,
                   help="minimum cosine similarity in [-1, 1] (default: none)")
    p.add_argument("--filter", type=_filter_arg, default=None, metavar="JSON",
                   help='metadata filter, a JSON object: \'{"room": "kitchen"}\', '
                        '\'{"room": {"$in": ["kitchen", "hall"]}}\', \'{"room": {"$ne": "hall"}}\'')
    p.add_argument("--explain", action="store_true",
                   help="under each hit, its score's terms, one line per signal")
    json_flag(p)

    p = sub("get", "one memory by key", cmd_get)
    p.add_argument("namespace")
    p.add_argument("key")
    json_flag(p)

    p = sub("delete", "delete one memory by key (exit 1 when absent)", cmd_delete)
    p.add_argument("namespace")
    p.add_argument("key")
    json_flag(p)

    p = sub("namespaces", "list namespaces and their memory counts", cmd_namespaces)
    p.add_argument("prefix", nargs="?", default=None, help="only namespaces under this prefix")
    json_flag(p)

    p = sub("stats", "counts, embedder and disk use of the store", cmd_stats)
    json_flag(p)

    p = sub("import", "import memories from a JSONL export", cmd_import)
    p.add_argument("file", metavar="FILE.jsonl", help="a memcore JSONL export; `-` reads stdin")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    json_flag(p)

    p = sub("export", "export every memory to JSONL", cmd_export)
    p.add_argument("file", metavar="FILE.jsonl", help="`-` writes stdout (the summary goes to stderr)")
    json_flag(p)

    for name, what, fn in (
            ("migrate", "convert a store of an older on-disk format to the current one",
             cmd_migrate),
            ("warmup", "build and save the hybrid index of every namespace that lacks one, and "
             "compile the tick's kernels into numba's cache",
             cmd_warmup)):
        p = sub(name, what, fn)
        p.add_argument("path", nargs="?", default=None, metavar="PATH",
                       help="the store (default: --store, $MEMCORE_HOME, else ./memcore-data)")
        p.add_argument("--quiet", action="store_true", help="no progress bar")
        json_flag(p)

    p = sub("mcp", "serve the store to MCP clients over stdio (needs the mcp extra)",
            cmd_mcp)
    p.add_argument("--no-warmup", action="store_true",
                   help="start serving at once (the first recall then loads the model)")
    p.add_argument("--json", action="store_true",
                   help="a start-up error (locked store, missing SDK) as one JSON object on stderr")

    for name, what, fn in (
            ("verify", "check every checksum of a store (read-only); exit 1 on damage",
             cmd_verify),
            ("repair", "rewrite damaged namespaces (and a lost store header) from their logs",
             cmd_repair)):
        p = sub(name, what, fn)
        p.add_argument("path", nargs="?", default=None, metavar="PATH",
                       help="the store (default: --store, $MEMCORE_HOME, else ./memcore-data)")
        json_flag(p)

    demo_common = argparse.ArgumentParser(add_help=False)
    add_global_options(demo_common, suppress=True,
                       store_help="with --keep: the store directory or postgresql:// URL the "
                                  "replay writes into (default: $MEMCORE_HOME, else "
                                  "./memcore-data); without --keep a temporary store")
    p = sub("demo", "replay a conversation tick by tick through SemanticMemory", cmd_demo,
            parents=(demo_common,))
    p.add_argument("--locomo", metavar="FILE", help="a LoCoMo JSON file (e.g. locomo_dev.json)")
    p.add_argument("--conversation", default="conv-26", help="LoCoMo sample_id (default conv-26)")
    p.add_argument("--top-k", type=_positive_int, default=5,
                   help="hits per LoCoMo question for evidence recall (default 5)")
    p.add_argument("--script", metavar="FILE", help="a demo script JSON instead of the bundled one")
    p.add_argument("--keep", action="store_true",
                   help="write into --store instead of a temporary store")
    p.add_argument("--similarity-only", action="store_true",
                   help="rank by similarity alone (no recency or importance terms)")
    p.add_argument("--verbose", action="store_true", help="print every LoCoMo turn and question")
    json_flag(p)
