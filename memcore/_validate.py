"""Input validation shared by every public entry point.

Each function checks one kind of user input, converts it once to the canonical form the
kernels and stores use, and raises a :class:`~memcore.errors.MemcoreError` subclass (which is
also the matching built-in) with a message naming what was wrong, expected and received.
Nothing here uses ``assert``.
"""

from __future__ import annotations

import json
import math
import numbers
import operator
import reprlib
from typing import Any, Callable, Mapping

import numpy as np

from memcore.errors import (
    DimensionMismatchError,
    EmbedderMismatchError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidNamespaceError,
    InvalidTextError,
    InvalidVectorError,
)
from memcore.types import Namespace

__all__ = [
    "namespace",
    "namespace_prefix",
    "text",
    "memory_text",
    "key",
    "importance",
    "metadata",
    "ttl",
    "top_k",
    "threshold",
    "vector",
    "vectors",
    "embedded",
    "metadata_filter",
    "split_filter",
    "matches_filter",
    "filter_predicate",
    "json_equal",
    "column_mask",
]

FILTER_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin")


def namespace(ns: Any) -> Namespace:
    """Canonical namespace tuple from a str or tuple/list of str segments.

    Raises
    ------
    InvalidNamespaceError
        If ns is empty, not str/tuple of str, or a segment is empty or holds a NUL.
    """
    if isinstance(ns, str):
        segments: tuple = (ns,)
    elif isinstance(ns, (tuple, list)):
        segments = tuple(ns)
    else:
        raise InvalidNamespaceError(
            f"namespace must be a str or a tuple of str, got {type(ns).__name__}")
    if not segments:
        raise InvalidNamespaceError("namespace must have at least one segment, got ()")
    for seg in segments:
        if not isinstance(seg, str):
            raise InvalidNamespaceError(
                f"namespace segments must be str, got {type(seg).__name__} in {segments!r}")
        if not seg:
            raise InvalidNamespaceError(f"namespace segments must be non-empty, got {segments!r}")
        if "\x00" in seg:
            raise InvalidNamespaceError(f"namespace segments must not contain NUL, got {segments!r}")
        try:
            seg.encode("utf-8")
        except UnicodeEncodeError as err:
            raise InvalidNamespaceError(
                f"namespace segment {seg!r} is not valid Unicode (lone surrogate?)") from err
    return segments


def namespace_prefix(prefix: Any) -> Namespace:
    """Like :func:`namespace` but ``None`` and ``()`` mean "every namespace" (returns ())."""
    if prefix is None or prefix == ():
        return ()
    return namespace(prefix)


def text(value: Any, *, name: str = "text") -> str:
    """A str that is valid Unicode (encodable as UTF-8); lone surrogates are rejected.

    Raises
    ------
    InvalidTextError
    """
    if not isinstance(value, str):
        raise InvalidTextError(f"{name} must be a str, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as err:
        raise InvalidTextError(
            f"{name} is not valid Unicode at position {err.start} (lone surrogate "
            f"{value[err.start]!r}); decode your bytes with errors='replace' first") from err
    return value


def memory_text(value: Any) -> str:
    """The text of a memory being stored: valid Unicode with at least one non-space character.

    An empty or whitespace-only memory carries no content to recall by; an embedder would give it
    a meaningless vector that then matches unrelated queries, so it is refused up front.

    Raises
    ------
    InvalidTextError
    """
    value = text(value)
    if not value.strip():
        raise InvalidTextError(
            f"text of a memory must have content, got {value!r} (empty or whitespace-only)")
    return value


def key(value: Any) -> str:
    """A non-empty str key without NUL.

    Raises
    ------
    InvalidTextError
    """
    value = text(value, name="key")
    if not value or "\x00" in value:
        raise InvalidTextError(f"key must be a non-empty str without NUL, got {value!r}")
    return value


def _bounded(value: Any, name: str, lo: float, hi: float, what: str = "a number") -> float:
    """``float(value)`` in [lo, hi] for a real number (int, float, NumPy's, Fraction); a
    bool, a str (``"0.5"``: refused as :func:`top_k` refuses ``"5"``), NaN or anything else
    raises."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not lo <= float(value) <= hi:
        kind = "" if isinstance(value, numbers.Real) else f" (a {type(value).__name__})"
        raise InvalidArgumentError(f"{name} must be {what} in [{lo:g}, {hi:g}], got "
                                   f"{value!r}{kind}")
    return float(value)


def importance(value: Any) -> float:
    """A float in [0, 1].

    Raises
    ------
    InvalidArgumentError
    """
    return _bounded(value, "importance", 0.0, 1.0)


_JSON_SCALARS = (str, int, float, bool, type(None))


def metadata(value: Any) -> dict:
    """A JSON-serialisable dict (deep-copied through JSON), ``None`` -> {}.

    Raises
    ------
    TypeError, ValueError
        If value is not a dict with str keys, or is not JSON-serialisable (incl. NaN).
    """
    if value is None:
        return {}
    if type(value) is not dict and not isinstance(value, Mapping):
        raise InvalidArgumentTypeError(f"metadata must be a dict, got {type(value).__name__}")
    if all(type(k) is str and (k.isascii() or _utf8(k))
           and (type(v) in _JSON_SCALARS and (type(v) is not float or math.isfinite(v)))
           and (type(v) is not str or v.isascii() or _utf8(v))
           for k, v in value.items()):
        return dict(value)  # flat dict of JSON scalars (the common case): a copy is enough
    _json_tree(value, 0)
    try:
        blob = json.dumps(dict(value), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as err:
        raise InvalidArgumentError(f"metadata must be JSON-serialisable (no NaN/inf): {err}") from err
    return json.loads(blob)


#: Deepest metadata nesting accepted (JSON encoders and decoders recurse per level).
MAX_METADATA_DEPTH = 64


def _utf8(s: str) -> bool:
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _json_tree(value: Any, depth: int) -> None:
    """Check what ``json.dumps`` would silently change or choke on: non-str keys (turned
    into strings), strings that are not valid Unicode (lone surrogates), nesting deeper
    than :data:`MAX_METADATA_DEPTH` (RecursionError)."""
    if depth > MAX_METADATA_DEPTH:
        raise InvalidArgumentError(f"metadata nests deeper than {MAX_METADATA_DEPTH} levels")
    if isinstance(value, Mapping):
        for k, v in value.items():
            if type(k) is not str:
                raise InvalidArgumentTypeError(f"metadata keys must be str, got {k!r}")
            if not _utf8(k):
                raise InvalidArgumentError(f"metadata key {k!r} is not valid Unicode "
                                           "(lone surrogate?)")
            _json_tree(v, depth + 1)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _json_tree(v, depth + 1)
    elif isinstance(value, str) and not value.isascii() and not _utf8(value):
        raise InvalidArgumentError(f"metadata value {value[:40]!r} is not valid Unicode "
                                   "(lone surrogate?)")


def ttl(value: Any, name: str = "ttl") -> float | None:
    """A time to live in seconds: None (none given), a finite number > 0, or ``math.inf``
    (never expires), returned as 0.0.

    Raises
    ------
    InvalidArgumentError

    Examples
    --------
    >>> ttl(None), ttl(90), ttl(float("inf"))
    (None, 90.0, 0.0)
    """
    if value is None:
        return None
    if not _is_number(value) and not (isinstance(value, (float, np.floating))
                                      and value == math.inf):
        raise InvalidArgumentError(f"{name} must be seconds > 0 (math.inf: never expires), "
                                   f"got {value!r}")
    if value <= 0:
        raise InvalidArgumentError(f"{name} must be seconds > 0 (math.inf: never expires), "
                                   f"got {value!r}")
    return 0.0 if value == math.inf else float(value)


def top_k(value: Any) -> int:
    """An int >= 1.

    Raises
    ------
    ValueError
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidArgumentError(f"top_k must be an int >= 1, got {value!r}")
    return int(value)


def threshold(value: Any) -> float:
    """A similarity threshold: a cosine in [-1, 1] (-1 admits everything).

    Raises
    ------
    InvalidArgumentError
    """
    return _bounded(value, "threshold", -1.0, 1.0, "a cosine similarity")


def vectors(value: Any, dim: int, *, name: str = "vectors", allow_zero: bool = False) -> np.ndarray:
    """Validate and L2-normalise a (n, dim) batch; returns a new C-contiguous float32 array.

    float32 rows whose norm is already 1 within 1e-6 are copied unchanged (renormalising them
    could move a component by one ulp), so stored vectors round-trip bit-exactly.

    ``allow_zero=True`` keeps all-zero rows as they are (an embedder's vector for a text
    without content, e.g. when moving stored memories between stores) instead of raising.

    Raises
    ------
    DimensionMismatchError
        If the shape is not (n, dim).
    InvalidVectorError
        If a row holds NaN/inf or has zero norm, or the values are not real numbers
        (complex, strings, ...; see :func:`_real_array`).
    """
    src = _real_array(value, name)
    if src.ndim != 2 or src.shape[1] != dim:
        got = src.shape[-1] if src.ndim >= 1 else "a scalar"
        raise DimensionMismatchError(
            f"{name} has shape {src.shape} (dim {got}), but this store expects dim={dim}")
    out = np.empty(src.shape, np.float32)
    step = 4096   # float64 work in chunks: same result, bounded temporary memory
    for start in range(0, src.shape[0], step):
        arr = np.asarray(src[start:start + step], dtype=np.float64)
        finite = np.isfinite(arr).all(axis=1)
        if not finite.all():
            bad = start + int(np.flatnonzero(~finite)[0])
            raise InvalidVectorError(f"{name} row {bad} holds NaN or inf")
        with np.errstate(over="ignore", under="ignore"):
            norms = np.linalg.norm(arr, axis=1)
        odd = ~np.isfinite(norms) | ((norms == 0) & (arr != 0).any(axis=1))
        if odd.any():        # the norm over- or underflows (1e200s, 1e-200s): scale first
            scale = np.abs(arr[odd]).max(axis=1, keepdims=True)
            arr = arr.copy()
            arr[odd] = arr[odd] / scale
            norms[odd] = np.linalg.norm(arr[odd], axis=1)
        if allow_zero:
            norms[norms == 0] = 1.0
        if (norms == 0).any():
            bad = start + int(np.flatnonzero(norms == 0)[0])
            raise InvalidVectorError(
                f"{name} row {bad} is all zeros; it has no direction to compare")
        out[start:start + step] = arr / norms[:, None]
        if src.dtype == np.float32:
            # Rows already unit-norm in float32 are kept bit for bit, so a vector read back from
            # a store (``put(k, vector=store.vector(k))``) round-trips exactly.
            unit = np.abs(norms - 1.0) <= 1e-6
            if unit.any():
                chunk = out[start:start + step]
                chunk[unit] = src[start:start + step][unit]
    return out


def _describe(value: Any) -> str:
    """``"str 'oops'"``: a value's type and a short repr, for messages."""
    return f"{type(value).__name__} {reprlib.repr(value)}"


def _real_array(value: Any, what: str) -> np.ndarray:
    """``value`` as an ndarray of real numbers (bool, int or float dtype; an object array of
    real numbers becomes float64), never converted from complex numbers or strings.

    Raises
    ------
    InvalidVectorError
        Complex numbers (NumPy would drop the imaginary part with only a warning), strings
        (``"0.5"``: parsed silently), ragged nesting or any other non-number, naming
        ``what`` and what it got.
    """
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as err:          # ragged nesting, ...
        raise InvalidVectorError(f"{what} must be an array of real numbers, got "
                                 f"{_describe(value)} ({err})") from err
    kind = arr.dtype.kind
    if kind in "fiub":
        return arr
    real = kind == "O" and all(isinstance(x, numbers.Real) for x in arr.flat)
    if real:
        return arr.astype(np.float64)
    bad = next((x for x in arr.flat if not isinstance(x, numbers.Real)), None) \
        if kind == "O" else None
    if kind == "c" or isinstance(bad, (complex, np.complexfloating)):
        raise InvalidVectorError(f"{what} holds complex numbers ({_describe(value)}); memcore "
                                 "stores real vectors and never drops an imaginary part: pass "
                                 "the real vectors (e.g. x.real)")
    if kind in "SU" or isinstance(bad, (str, bytes)):
        raise InvalidVectorError(f"{what} holds strings, not numbers: got {_describe(value)}")
    raise InvalidVectorError(f"{what} must be an array of real numbers, got {_describe(value)}")


def embedded(vectors: Any, n: int, dim: int, name: str) -> np.ndarray:
    """An embedder's output checked once: ndarray (n, dim) float32, C-contiguous, finite,
    unit rows.

    The protocol asks for L2-normalised rows; a user embedder that returns other norms (or
    float64) is normalised here, so similarity stays a cosine in [-1, 1]. Rows already of unit
    norm within 1e-6 are kept bit for bit; all-zero rows (a text without content) stay zero.

    Parameters
    ----------
    vectors : array-like
        What ``embedder.encode(texts)`` returned.
    n : int
        ``len(texts)``.
    dim : int
        The store's (or embedder's) dim.
    name : str
        The embedder's name, for messages.

    Returns
    -------
    ndarray of shape (n, dim), float32

    Raises
    ------
    InvalidVectorError
        If it returned no array of real numbers (a str, None, complex numbers, ...: the
        message names the embedder and what it returned), or NaN or inf (a broken model would
        otherwise be stored and surface much later).
    EmbedderMismatchError
        On another shape.

    Examples
    --------
    >>> embedded([[3.0, 4.0]], 1, 2, "toy").tolist()
    [[0.6000000238418579, 0.800000011920929]]
    """
    src = _real_array(vectors, f"the output of embedder {name!r}")
    enc = np.ascontiguousarray(src, dtype=np.float32)
    if enc.shape != (n, dim):
        raise EmbedderMismatchError(f"embedder {name!r} returned shape {enc.shape}, expected "
                                    f"({n}, {dim})")
    if not np.isfinite(enc).all():
        raise InvalidVectorError(f"embedder {name!r} returned NaN or inf")
    norms = np.linalg.norm(enc.astype(np.float64), axis=1)
    off = (np.abs(norms - 1.0) >= 1e-6) & (norms > 0)
    if off.any():
        enc = enc.copy() if enc is vectors else enc
        enc[off] = (enc[off].astype(np.float64) / norms[off, None]).astype(np.float32)
    return enc


def vector(value: Any, dim: int, *, name: str = "vector") -> np.ndarray:
    """Validate and L2-normalise one (dim,) vector; returns float32 (dim,).

    Raises
    ------
    DimensionMismatchError, InvalidVectorError
    """
    arr = _real_array(value, name)
    if arr.ndim != 1:
        raise DimensionMismatchError(f"{name} must be 1-D of length {dim}, got shape {arr.shape}")
    return vectors(arr[None, :], dim, name=name)[0]


#: Filter keys naming a column of every memory instead of a metadata key: the lifecycle times
#: (Unix seconds) and the importance (compared at float32, as stored).
COLUMN_FILTER_KEYS = ("$created_at", "$updated_at", "$last_accessed_at", "$importance")
_RANGE = ("$gt", "$gte", "$lt", "$lte")
_SETS = ("$in", "$nin")
_FILTER_HELP = ("conditions are {key: value} (equality) or {key: {op: operand}} with op in "
                + ", ".join(FILTER_OPERATORS))


def is_operator_dict(cond: Any) -> bool:
    """Whether a condition is an operator dict (its keys start with "$")."""
    return isinstance(cond, Mapping) and any(isinstance(k, str) and k.startswith("$")
                                             for k in cond)


def _json_operand(value: Any, where: str) -> Any:
    """A JSON value (copied through JSON: finite numbers, str keys), else InvalidArgumentError."""
    try:
        return json.loads(json.dumps(value, allow_nan=False, ensure_ascii=False))
    except (TypeError, ValueError) as err:
        raise InvalidArgumentError(f"filter {where}: the operand must be JSON (str, finite "
                                   f"number, bool, None, list or dict), got {value!r}") from err


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) \
        and math.isfinite(x)


def _condition(cond: Any, where: str, column: bool) -> Any:
    """One validated condition (see :func:`metadata_filter`)."""
    if isinstance(cond, (list, tuple, set, frozenset)):
        raise InvalidArgumentError(
            f"filter {where}: a list value is ambiguous; use {{'$in': [...]}} to match any of "
            f"its values or {{'$eq': [...]}} to match the list itself, got {cond!r}")
    if is_operator_dict(cond):
        out = {}
        for op, operand in cond.items():
            if not (isinstance(op, str) and op.startswith("$")):
                raise InvalidArgumentError(
                    f"filter {where}: {cond!r} mixes operators with plain keys; "
                    f"{_FILTER_HELP}")
            if op not in FILTER_OPERATORS:
                raise InvalidArgumentError(f"unknown filter operator {op!r} on {where}; "
                                           f"supported: {', '.join(FILTER_OPERATORS)}")
            if op in _SETS:
                if not isinstance(operand, (list, tuple, set, frozenset)):
                    raise InvalidArgumentError(f"filter {where}: {op} needs a list, got "
                                               f"{type(operand).__name__}")
                operand = [_condition_scalar(x, f"{where} {op}", column) for x in operand]
            elif op in _RANGE:
                if not (_is_number(operand) or (isinstance(operand, str) and not column)):
                    raise InvalidArgumentError(
                        f"filter {where}: {op} needs a finite number"
                        f"{'' if column else ' or a str'}, got {operand!r}")
                operand = operand if isinstance(operand, str) else float(operand)
            else:
                operand = _condition_scalar(operand, f"{where} {op}", column)
            out[op] = operand
        return out
    if isinstance(cond, Mapping):
        if column:
            raise InvalidArgumentError(f"filter {where}: a column takes a number or "
                                       f"{{op: number}}, got {cond!r}")
        for k in cond:
            if not isinstance(k, str):
                raise InvalidArgumentError(f"filter {where}: keys must be str, got {k!r}")
        return {k: _condition(c, f"{where}.{k}", False) for k, c in cond.items()}
    return _condition_scalar(cond, where, column)


def _condition_scalar(value: Any, where: str, column: bool) -> Any:
    if column:
        if not _is_number(value):
            raise InvalidArgumentError(f"filter {where}: a column compares with finite numbers "
                                       f"(Unix seconds, importance), got {value!r}")
        return float(value)
    return _json_operand(value, where)


def metadata_filter(value: Any) -> dict | None:
    """Validate a search filter; returns an independent, canonical copy (None for None).

    A filter is a dict of conditions that must all hold:

    - ``{"room": "kitchen"}``: equality with a JSON value (JSON equality: ``True`` is not
      ``1``, ``1`` is ``1.0``). A nested dict ``{"pos": {"floor": 2}}`` matches when the
      metadata value is a dict satisfying each nested condition.
    - ``{"n": {"$gt": 3, "$lte": 9}}``: operators ``$eq $ne $gt $gte $lt $lte $in $nin``.
      ``$gt``/``$gte``/``$lt``/``$lte`` compare numbers with numbers and str with str
      (e.g. ISO dates); another type never matches. ``$in``/``$nin`` take a list.
      ``$ne`` and ``$nin`` match memories without the key; the others require it.
    - ``{"$created_at": {"$gte": t0, "$lt": t1}}``: the same operators on a column of every
      memory: ``$created_at``, ``$updated_at``, ``$last_accessed_at`` (Unix seconds) and
      ``$importance`` (compared at float32, as stored); operands are finite numbers.

    A bare list (``{"room": ["a", "b"]}``) is ambiguous and raises: write
    ``{"room": {"$in": ["a", "b"]}}`` (any of) or ``{"room": {"$eq": ["a", "b"]}}``.

    Raises
    ------
    InvalidArgumentError
        On anything else: a non-dict, a non-str key, an unknown operator (also a "$" key at
        the top level that is not a column), operators mixed with plain keys, a bad operand.

    Examples
    --------
    >>> metadata_filter({"room": "kitchen", "$created_at": {"$gte": 1_700_000_000}})
    {'room': 'kitchen', '$created_at': {'$gte': 1700000000.0}}
    >>> metadata_filter({"room": ["a", "b"]})
    Traceback (most recent call last):
    ...
    memcore.errors.InvalidArgumentError: filter 'room': a list value is ambiguous; ...
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"filter must be a dict, got {type(value).__name__}")
    out = {}
    for k, cond in value.items():
        if not isinstance(k, str):
            raise InvalidArgumentError(f"filter keys must be str, got {k!r}")
        column = k.startswith("$")
        if column and k not in COLUMN_FILTER_KEYS:
            raise InvalidArgumentError(
                f"unknown filter key {k!r} at the top level: a key starting with '$' names a "
                f"column ({', '.join(COLUMN_FILTER_KEYS)}); {_FILTER_HELP}")
        out[k] = _condition(cond, repr(k), column)
    return out


def split_filter(flt: Mapping[str, Any] | None) -> tuple[dict | None, dict | None]:
    """A validated filter as ``(metadata conditions, column conditions)``, each None if empty.

    Examples
    --------
    >>> split_filter({"room": "a", "$importance": {"$gt": 0.5}})
    ({'room': 'a'}, {'$importance': {'$gt': 0.5}})
    """
    if not flt:
        return None, None
    meta = {k: c for k, c in flt.items() if k not in COLUMN_FILTER_KEYS}
    cols = {k: c for k, c in flt.items() if k in COLUMN_FILTER_KEYS}
    return meta or None, cols or None


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: a bool equals only a bool, numbers compare by value.

    Examples
    --------
    >>> json_equal(1, 1.0), json_equal(True, 1), json_equal([1, {"a": 2}], [1.0, {"a": 2}])
    (True, False, True)
    """
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple))
                and len(a) == len(b) and all(map(json_equal, a, b)))
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        return (isinstance(a, Mapping) and isinstance(b, Mapping) and a.keys() == b.keys()
                and all(json_equal(a[k], b[k]) for k in a))
    return a == b


def _ordered(have: Any, op: str, x: Any) -> bool:
    if isinstance(x, str):
        if not isinstance(have, str):
            return False
    elif not _is_number(have):
        return False
    if op == "$gt":
        return have > x
    if op == "$gte":
        return have >= x
    if op == "$lt":
        return have < x
    return have <= x


def _match(have: Any, present: bool, cond: Any) -> bool:
    if is_operator_dict(cond):
        for op, x in cond.items():
            if op == "$eq":
                ok = present and json_equal(have, x)
            elif op == "$ne":
                ok = not present or not json_equal(have, x)
            elif op == "$in":
                ok = present and any(json_equal(have, y) for y in x)
            elif op == "$nin":
                ok = not present or not any(json_equal(have, y) for y in x)
            else:
                ok = present and _ordered(have, op, x)
            if not ok:
                return False
        return True
    if isinstance(cond, Mapping):
        return present and isinstance(have, Mapping) and all(
            _match(have.get(k), k in have, c) for k, c in cond.items())
    return present and json_equal(have, cond)


def matches_filter(meta: Mapping[str, Any], flt: Mapping[str, Any] | None) -> bool:
    """True when metadata ``meta`` satisfies the metadata conditions of a validated filter
    (all must hold; column conditions are the table's: :meth:`memcore.core.table.Table.visible`).

    Examples
    --------
    >>> matches_filter({"n": 4}, {"n": {"$gt": 3}}), matches_filter({}, {"n": {"$ne": 4}})
    (True, True)
    """
    if not flt:
        return True
    return all(_match(meta.get(k), k in meta, cond) for k, cond in flt.items()
               if k not in COLUMN_FILTER_KEYS)


_MISSING = object()
_NUMBER_TYPES = (int, float)


def _scalar_test(key: str, op: str, x: Any) -> Callable[[Mapping], bool] | None:
    """A fast test of ``meta[key] <op> x`` for the common operand types, with the semantics
    of :func:`_match` (metadata values are exact JSON types: validated on the way in); None
    when the generic matcher must be used."""
    get = operator.methodcaller("get", key, _MISSING)
    if op == "$eq" and (isinstance(x, str) or x is None):
        return lambda m: get(m) == x                       # a str (None) equals only a str (None)
    if op == "$eq" and isinstance(x, bool):
        return lambda m: get(m) is x
    if op == "$eq" and _is_number(x):
        return lambda m: type(h := get(m)) in _NUMBER_TYPES and h == x
    if op == "$ne" and (isinstance(x, str) or x is None):
        return lambda m: get(m) != x
    if op == "$ne" and isinstance(x, bool):
        return lambda m: get(m) is not x
    if op == "$ne" and _is_number(x):
        return lambda m: not (type(h := get(m)) in _NUMBER_TYPES and h == x)
    if op in _RANGE:
        cmp = {"$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt,
               "$lte": operator.le}[op]
        if isinstance(x, str):
            return lambda m: type(h := get(m)) is str and cmp(h, x)
        return lambda m: type(h := get(m)) in _NUMBER_TYPES and cmp(h, x)
    if op in _SETS and all(isinstance(y, str) for y in x):
        choices = frozenset(x)
        if op == "$in":
            return lambda m: type(h := get(m)) is str and h in choices
        return lambda m: not (type(h := get(m)) is str and h in choices)
    return None


def filter_predicate(flt: Mapping[str, Any] | None) -> Callable[[Mapping], bool]:
    """``predicate(meta) -> bool``, equal to ``matches_filter(meta, flt)`` for a validated
    filter, compiled once for a pass over many rows (a search's mask).

    Examples
    --------
    >>> p = filter_predicate(metadata_filter({"room": "lab", "n": {"$gte": 2}}))
    >>> p({"room": "lab", "n": 3}), p({"room": "lab", "n": True}), p({"n": 3})
    (True, False, False)
    """
    meta, _ = split_filter(flt)
    if not meta:
        return lambda m: True
    tests = []
    for key, cond in meta.items():
        ops = cond.items() if is_operator_dict(cond) else [("$eq", cond)]
        fast = [_scalar_test(key, op, x) for op, x in ops]
        if all(t is not None for t in fast):
            tests += fast
        else:
            tests.append(lambda m, key=key, cond=cond: _match(m.get(key), key in m, cond))
    if len(tests) == 1:
        return tests[0]
    return lambda m: all(t(m) for t in tests)


def column_mask(values: np.ndarray, cond: Any) -> np.ndarray:
    """ndarray (n,), bool: which ``values`` (a column, (n,)) satisfy a validated column
    condition. float32 columns compare with the operands rounded to float32.

    Examples
    --------
    >>> column_mask(np.array([1.0, 2.0, 3.0]), {"$gte": 2, "$lt": 3}).tolist()
    [False, True, False]
    """
    cast = values.dtype.type
    with np.errstate(over="ignore"):     # an operand beyond float32 rounds to +-inf: exact order
        if not isinstance(cond, Mapping):
            return values == cast(cond)
        out = np.ones(values.shape[0], np.bool_)
        for op, x in cond.items():
            if op in _SETS:
                hit = np.isin(values, np.asarray(x, np.float64).astype(values.dtype))
                out &= hit if op == "$in" else ~hit
                continue
            out &= _COMPARE[op](values, cast(x))
    return out


_COMPARE = {"$eq": np.equal, "$ne": np.not_equal, "$gt": np.greater, "$gte": np.greater_equal,
            "$lt": np.less, "$lte": np.less_equal}
