"""A LangGraph store backed by any memcore store: ``MemcoreStore(store)``.

:class:`MemcoreStore` is a ``langgraph.store.base.BaseStore`` (LangGraph's long-term memory
interface: ``put``/``get``/``search``/``delete``/``list_namespaces`` and their async forms,
through ``batch``/``abatch``), so a graph compiled with ``store=MemcoreStore(...)`` keeps its
memories in a :class:`~memcore.ShortTermMemory`, :class:`~memcore.LongTermMemory` (in RAM or on
disk) or :class:`~memcore.TwoTierMemory`, searched by memcore's ranking. Install with
``pip install 'memcore-agent[langgraph]'``.

How LangGraph's model maps onto memcore's:

- A LangGraph namespace (a tuple of str labels, any depth) is the memcore namespace with the
  same labels: memcore accepts every label LangGraph does (non-empty str; memcore also refuses
  NUL, which LangGraph's own stores cannot hold either).
- An item's ``value`` (a JSON dict) is the memory's metadata, so LangGraph filters are memcore
  filters (``$eq $ne $gt $gte $lt $lte``, plus ``$in $nin``, masked inside memcore's ranking).
  Its text is the text at the index ``fields`` (JSON paths; ``"$"``, the whole value, by
  default), joined by newlines: one vector per item (LangGraph's in-memory store keeps one per
  field and max-pools them).
- ``index=False`` (or a value with no text at the fields) stores the item without calling the
  embedder: it is listed and filtered, and appended unscored (``score=None``) after the ranked
  items when a query finds fewer than ``limit`` -- as LangGraph's ``InMemoryStore`` does. The
  memory's ``importance`` marks it (1.0 indexed, 0.0 not), so this adapter owns importance.
- ``search(..., query=...)`` ranks every namespace under the prefix with memcore
  (``similarity`` preset by default: ``SearchItem.score`` is the cosine similarity) and merges
  them by score; without a query, items come in namespace then key order (oldest write first).
- TTL (``supports_ttl``): ``ttl`` is in minutes (LangGraph's unit) and becomes memcore's time
  to live in seconds; expired items are invisible at once (``omit_expired`` always holds);
  ``refresh_ttl`` restarts it on ``get``/``search``; ``ttl={"sweep_interval_minutes": m}``
  runs :meth:`sweep_ttl` every ``m`` minutes on a daemon thread.
- ``Item.created_at``/``updated_at`` are timezone-aware UTC datetimes of memcore's Unix
  seconds; an update keeps ``created_at``.
- ``batch`` answers its reads from the state before the batch and then applies its writes,
  the last write of a key winning (as ``InMemoryStore``); ``abatch`` runs ``batch`` on a worker
  thread, as memcore's async API does (never blocking the event loop).

Examples
--------
>>> from memcore import HashingEmbedder, LongTermMemory
>>> store = MemcoreStore(LongTermMemory(embedder=HashingEmbedder(dim=64)))
>>> store.put(("user", "ann"), "pref", {"text": "likes green tea", "kind": "food"})
>>> [(i.key, i.value["kind"]) for i in store.search(("user",), query="tea", filter={"kind": "food"})]
[('pref', 'food')]
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

import numpy as np

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        IndexConfig,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        TTLConfig,
        get_text_at_path,
        tokenize_path,
    )
except ImportError as err:  # pragma: no cover - exercised on a clone without the extra
    from memcore.errors import MissingDependencyError, install_hint
    raise MissingDependencyError("memcore.integrations.langgraph needs LangGraph's store "
                                 "interface: " + install_hint("langgraph")) from err

from memcore import _validate
from memcore.core.store import MemoryStore
from memcore.errors import InvalidArgumentError, InvalidArgumentTypeError
from memcore.recall.weights import HybridWeights
from memcore.types import DecayWeights, MemoryItem, StoredMemory

__all__ = ["MemcoreStore"]

#: importance of an item whose text was embedded (ranked) / stored without embedding
INDEXED, UNINDEXED = 1.0, 0.0
_RANKED = {"$importance": {"$gt": 0.5}}
_UNRANKED = {"$importance": {"$lt": 0.5}}


def _datetime(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def _item(m: StoredMemory, score: float | None = None, search: bool = False) -> Item:
    fields = dict(namespace=m.namespace, key=m.key, value=dict(m.metadata),
                  created_at=_datetime(m.created_at), updated_at=_datetime(m.updated_at))
    return SearchItem(score=score, **fields) if search else Item(**fields)


def _lg_filter(value: Any) -> Any:
    """LangGraph's filter semantics in memcore's language: a list value means that exact
    list (memcore refuses a bare list as ambiguous)."""
    if isinstance(value, (list, tuple)):
        return {"$eq": list(value)}
    if isinstance(value, Mapping) and not any(str(k).startswith("$") for k in value):
        return {k: _lg_filter(v) for k, v in value.items()}
    return value


def _matches(m: StoredMemory, flt: Mapping[str, Any] | None) -> bool:
    """Whether a memory satisfies a validated memcore filter (metadata and columns)."""
    if not _validate.matches_filter(m.metadata, flt):
        return False
    _, cols = _validate.split_filter(flt)
    for key, cond in (cols or {}).items():
        dtype = np.float32 if key == "$importance" else np.float64
        if not _validate.column_mask(np.array([getattr(m, key[1:])], dtype), cond)[0]:
            return False
    return True


def _does_match(cond: MatchCondition, ns: tuple) -> bool:
    path = tuple(cond.path)
    if len(ns) < len(path):
        return False
    part = ns[:len(path)] if cond.match_type == "prefix" else ns[len(ns) - len(path):]
    if cond.match_type not in ("prefix", "suffix"):
        raise InvalidArgumentError(f"unsupported namespace match type {cond.match_type!r}")
    return all(p == "*" or p == s for p, s in zip(path, part))


class MemcoreStore(BaseStore):
    """LangGraph ``BaseStore`` over a memcore store (mapping: see the module notes).

    Parameters
    ----------
    store : MemoryStore
        Any memcore store; its embedder embeds the items and the queries.
    index : dict, optional
        LangGraph's ``IndexConfig``: ``fields`` (JSON paths of the text to embed; ``["$"]``,
        the whole value, by default) and optionally ``dims`` (must equal the store's ``dim``).
        The embedder is the memcore store's: ``embed`` is refused.
    ttl : dict, optional
        LangGraph's ``TTLConfig``: ``default_ttl`` (minutes), ``refresh_on_read`` (default
        True), ``sweep_interval_minutes``, ``omit_expired`` (expired items are always omitted).
    weights : DecayWeights, optional
        Ranking weights; ``DecayWeights.similarity()`` (score = cosine, as LangGraph's own
        stores) when None.
    hybrid : HybridWeights, optional
        memcore's recall; the similarity preset when None.

    Raises
    ------
    InvalidArgumentTypeError
        If ``store`` is not a memcore store, or a config is not a dict.
    InvalidArgumentError
        On an unknown config key, ``embed`` in ``index``, ``dims`` other than the store's,
        bad ``fields`` or TTL values.

    Examples
    --------
    >>> from memcore import HashingEmbedder, ShortTermMemory
    >>> store = MemcoreStore(ShortTermMemory(capacity=100, embedder=HashingEmbedder(dim=64)),
    ...                      index={"fields": ["text"]}, ttl={"default_ttl": 60})
    >>> store.put(("docs",), "d1", {"text": "the dock is in the hallway"})
    >>> store.get(("docs",), "d1").value
    {'text': 'the dock is in the hallway'}
    """

    supports_ttl: bool = True

    def __init__(self, store: MemoryStore, *, index: IndexConfig | None = None,
                 ttl: TTLConfig | None = None, weights: DecayWeights | None = None,
                 hybrid: HybridWeights | None = None):
        if not isinstance(store, MemoryStore):
            raise InvalidArgumentTypeError(
                f"store must be a memcore store (ShortTermMemory, LongTermMemory, "
                f"TwoTierMemory, ...), got {type(store).__name__}")
        if weights is not None and not isinstance(weights, DecayWeights):
            raise InvalidArgumentTypeError(f"weights must be a DecayWeights, got {weights!r}")
        if hybrid is not None and not isinstance(hybrid, HybridWeights):
            raise InvalidArgumentTypeError(f"hybrid must be a HybridWeights, got {hybrid!r}")
        self.store = store
        self.weights = weights if weights is not None else DecayWeights.similarity()
        self.hybrid = hybrid if hybrid is not None else HybridWeights.similarity()
        self.index_config = self._index(index)
        self.ttl_config = self._ttl_config(ttl)
        self.fields = [(p, p if p == "$" else tokenize_path(p))
                       for p in self.index_config.get("fields", ["$"])]
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        minutes = self.ttl_config.get("sweep_interval_minutes")
        if minutes:
            self._sweeper = threading.Thread(target=self._sweep_loop, args=(minutes * 60.0,),
                                             name="memcore-ttl-sweeper", daemon=True)
            self._sweeper.start()

    def _index(self, index: Any) -> dict:
        if index is None:
            return {}
        if not isinstance(index, Mapping):
            raise InvalidArgumentTypeError(f"index must be a dict (IndexConfig), got {index!r}")
        unknown = set(index) - {"fields", "dims", "embed"}
        if unknown:
            raise InvalidArgumentError(f"index has unknown keys {sorted(unknown)}; this store "
                                       "takes 'fields' and 'dims'")
        if index.get("embed") is not None:
            raise InvalidArgumentError(
                "index['embed'] is not used: the memcore store embeds with its own embedder "
                "(construct it with embedder=..., any object with name, dim and encode)")
        dims = index.get("dims")
        if dims is not None and dims != self.store.dim:
            raise InvalidArgumentError(f"index['dims'] is {dims}, but the memcore store's "
                                       f"embedder has dim={self.store.dim}")
        fields = index.get("fields", ["$"])
        if isinstance(fields, str) or not isinstance(fields, (list, tuple)) or \
                not all(isinstance(f, str) and f for f in fields):
            raise InvalidArgumentError(f"index['fields'] must be a list of JSON paths, got "
                                       f"{fields!r}")
        return {**index, "fields": list(fields)}

    def _ttl_config(self, ttl: Any) -> dict:
        if ttl is None:
            return {}
        if not isinstance(ttl, Mapping):
            raise InvalidArgumentTypeError(f"ttl must be a dict (TTLConfig), got {ttl!r}")
        unknown = set(ttl) - {"default_ttl", "refresh_on_read", "sweep_interval_minutes",
                              "omit_expired"}
        if unknown:
            raise InvalidArgumentError(f"ttl has unknown keys {sorted(unknown)}")
        if ttl.get("default_ttl") is not None:
            _validate.ttl(ttl["default_ttl"], "ttl['default_ttl']")
        minutes = ttl.get("sweep_interval_minutes")
        if minutes is not None:
            _validate.ttl(minutes, "ttl['sweep_interval_minutes']")
        for name in ("refresh_on_read", "omit_expired"):
            if name in ttl and not isinstance(ttl[name], bool):
                raise InvalidArgumentError(f"ttl[{name!r}] must be a bool, got {ttl[name]!r}")
        return dict(ttl)

    # ------------------------------------------------------------------ TTL
    def sweep_ttl(self) -> int:
        """Delete expired items now (memcore's ``sweep``); returns how many."""
        return self.store.sweep()

    def _sweep_loop(self, seconds: float) -> None:
        while not self._stop.wait(seconds):
            self.sweep_ttl()

    def stop_ttl_sweeper(self, timeout: float | None = None) -> bool:
        """Stop the sweeper thread (``sweep_interval_minutes``); True once it has ended."""
        self._stop.set()
        if self._sweeper is None:
            return True
        self._sweeper.join(timeout)
        return not self._sweeper.is_alive()

    # ------------------------------------------------------------------ batch
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run LangGraph operations: reads first (the state before the batch), then the
        writes, the last write of a key winning; one result per operation (None for puts).

        Raises
        ------
        InvalidArgumentError, InvalidArgumentTypeError, InvalidNamespaceError
            On a malformed operation (memcore's errors, also ValueError/TypeError); writes
            are not applied then.
        """
        ops = list(ops)
        results: list[Result] = []
        puts: dict[tuple, PutOp] = {}
        for op in ops:
            if isinstance(op, GetOp):
                m = self.store.get(op.namespace, op.key, refresh_ttl=op.refresh_ttl)
                results.append(None if m is None else _item(m))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                puts.pop((tuple(op.namespace), op.key), None)
                puts[(tuple(op.namespace), op.key)] = op
                results.append(None)
            else:
                raise InvalidArgumentTypeError(f"unknown operation {type(op).__name__}")
        self._apply_puts(list(puts.values()))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` on a worker thread (the event loop keeps running)."""
        return await asyncio.to_thread(self.batch, list(ops))

    # ------------------------------------------------------------------ writes
    def _text(self, op: PutOp) -> str | None:
        """The text to embed for a put, or None (stored without embedding)."""
        if op.index is False:
            return None
        paths = self.fields if op.index is None else \
            [(p, p if p == "$" else tokenize_path(p)) for p in op.index]
        texts = [t for _, path in paths for t in get_text_at_path(op.value, path)]
        text = "\n".join(t for t in texts if t and t.strip())
        return text or None

    def _apply_puts(self, puts: list[PutOp]) -> None:
        groups: dict[tuple, list[MemoryItem]] = {}
        for op in puts:                    # everything is validated before anything is written
            _validate.namespace(op.namespace)
            _validate.key(op.key)
            if op.value is None:
                continue
            if not isinstance(op.value, Mapping):
                raise InvalidArgumentTypeError(f"value must be a dict, got "
                                               f"{type(op.value).__name__}")
            _validate.metadata(dict(op.value))
            text = self._text(op)
            ttl = math.inf if op.ttl is None else _validate.ttl(op.ttl, "ttl") * 60.0 or math.inf
            item = MemoryItem(op.key, text if text is not None else
                              json.dumps(dict(op.value), ensure_ascii=False, default=str) or "{}",
                              INDEXED if text is not None else UNINDEXED, dict(op.value))
            groups.setdefault((tuple(op.namespace), ttl, text is not None), []).append(item)
        for op in puts:
            if op.value is None:
                self.store.delete(op.namespace, op.key)
        for (ns, ttl, indexed), items in groups.items():
            vectors = None
            if not indexed and self.store.dim is not None:
                vectors = np.zeros((len(items), self.store.dim), np.float32)
                vectors[:, 0] = 1.0          # never ranked (masked out): no embedder call
            self.store.put_many(ns, items, vectors=vectors, ttl=ttl)

    # ------------------------------------------------------------------ reads
    def _search(self, op: SearchOp) -> list[SearchItem]:
        flt = _validate.metadata_filter(_lg_filter(op.filter)) or {}
        namespaces = self.store.namespaces(tuple(op.namespace_prefix))
        want = op.offset + op.limit
        if op.limit < 1:
            return []
        found: list[tuple[float | None, StoredMemory | Any]] = []
        if op.query and op.query.strip():
            qv = None
            if self.store.dim is not None and self.hybrid.is_similarity:
                qv = self.store.embed([op.query])[0]
            hits = []
            if qv is None or qv.any():
                for ns in namespaces:
                    hits += self.store.search(ns, op.query, top_k=want,
                                              filter={**flt, **_RANKED}, weights=self.weights,
                                              hybrid=self.hybrid, touch=False, query_vector=qv,
                                              refresh_ttl=False)
            hits.sort(key=lambda h: -h.score)
            found = [(h.score, h) for h in hits[op.offset:want]]
            if len(found) < op.limit:
                extra = self._listing(namespaces, {**flt, **_UNRANKED}, op.limit - len(found))
                found += [(None, m) for m in extra]
        else:
            found = [(None, m) for m in self._listing(namespaces, flt, want)[op.offset:]]
        out = []
        for score, hit in found:
            m = self.store.get(hit.namespace, hit.key, refresh_ttl=op.refresh_ttl)
            if m is not None:
                out.append(_item(m, None if score is None else float(score), search=True))
        return out

    def _listing(self, namespaces: list, flt: dict, limit: int) -> list[StoredMemory]:
        """Up to ``limit`` memories matching ``flt``, namespace by namespace, oldest write
        first."""
        out: list[StoredMemory] = []
        for ns in namespaces:
            for key in self.store.keys(ns):
                if len(out) >= limit:
                    return out
                m = self.store.get(ns, key, refresh_ttl=False)
                if m is not None and _matches(m, flt):
                    out.append(m)
        return out

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        found = self.store.namespaces()
        if op.match_conditions:
            found = [ns for ns in found if all(_does_match(c, ns) for c in op.match_conditions)]
        if op.max_depth is not None:
            found = sorted({ns[:op.max_depth] for ns in found})
        return found[op.offset:op.offset + op.limit]
