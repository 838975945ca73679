"""memcore's exceptions.

Every error memcore raises derives from :class:`MemcoreError` and, where one fits, from the
built-in it refines, so ``except ValueError`` keeps working for callers who do not know memcore.
"""

from __future__ import annotations

__all__ = [
    "MemcoreError",
    "InvalidNamespaceError",
    "UnknownNamespaceError",
    "MemoryNotFoundError",
    "InvalidTextError",
    "InvalidVectorError",
    "DimensionMismatchError",
    "EmbedderMismatchError",
    "ModelNotFoundError",
    "ModelChecksumError",
    "ModelQualityError",
    "StoreCorruptedError",
    "StoreLockedError",
    "FormatVersionError",
    "ReadOnlyStoreError",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "StoreClosedError",
    "StoreIOError",
    "StorePathError",
    "ForeignDirectoryError",
    "StorePermissionError",
    "StoreNotFoundError",
    "BackgroundWriteError",
    "MemoryClosedError",
    "MissingDependencyError",
]


class MemcoreError(Exception):
    """Root of every error memcore raises."""


class InvalidArgumentError(MemcoreError, ValueError):
    """An argument has the right type but a bad value (top_k < 1, NaN weight, importance > 1, ...)."""


class InvalidArgumentTypeError(MemcoreError, TypeError):
    """An argument has the wrong type (metadata that is not a dict, ...)."""


class StoreClosedError(MemcoreError, RuntimeError):
    """A store (or SemanticMemory) was used after ``close()``."""


class InvalidNamespaceError(MemcoreError, ValueError):
    """A namespace is empty, has an empty segment, a NUL, or cannot be stored safely."""


class UnknownNamespaceError(InvalidNamespaceError):
    """A strict lookup (``missing_ok=False``) named a namespace that holds nothing; the message
    names the nearest ones that do."""


class MemoryNotFoundError(MemcoreError, LookupError):
    """A key the caller needs is absent (the command line's ``get``/``delete``, MCP's ``get``)."""


class InvalidTextError(MemcoreError, ValueError):
    """A text is not a str, or cannot be encoded (e.g. lone surrogates)."""


class InvalidVectorError(MemcoreError, ValueError):
    """A vector holds NaN/inf, is all zeros, or has the wrong shape."""


class DimensionMismatchError(InvalidVectorError):
    """A vector's dim differs from the store's or embedder's dim."""


class EmbedderMismatchError(MemcoreError, ValueError):
    """A store was written with another embedder (name or dim) than the one given."""


class ModelNotFoundError(MemcoreError, FileNotFoundError):
    """The ONNX model file cannot be found; the message says what to install or set."""


class ModelChecksumError(MemcoreError, ValueError):
    """The model file's sha256 differs from the manifest's."""


class ModelQualityError(MemcoreError, RuntimeError):
    """A derived model variant disagrees with the packaged model on this machine.

    Raised when a variant asked for by name fails its self-check (see
    :class:`memcore.embedders.MiniLMEmbedder`); the message gives the measured cosines.
    """


class StoreCorruptedError(MemcoreError, OSError):
    """A store file is damaged beyond a torn tail; the message names the file and offset."""


class StoreLockedError(MemcoreError, TimeoutError):
    """Another process holds the store's writer lock."""


class FormatVersionError(MemcoreError, ValueError):
    """A store was written by a newer (or unknown) on-disk format version."""


class ReadOnlyStoreError(MemcoreError, PermissionError):
    """A write was attempted on a store opened read-only."""


class StoreIOError(MemcoreError, OSError):
    """A store file or directory could not be read or written (disk full, I/O error, ...)."""


class StorePathError(StoreIOError, FileExistsError):
    """A store path exists but is not a directory (e.g. a file where the store should be)."""


class ForeignDirectoryError(StorePathError):
    """A store path is a non-empty directory that is not a memcore store (it holds files
    memcore did not write, and no store header): memcore creates a store only in an empty or
    missing directory, and refuses before creating anything there."""


class StorePermissionError(StoreIOError, PermissionError):
    """The process may not read or write the store's files (e.g. a read-only directory)."""


class StoreNotFoundError(StoreIOError, FileNotFoundError):
    """There is no store at the given path (and the call does not create one)."""


class BackgroundWriteError(MemcoreError, RuntimeError):
    """A ``SemanticMemory.store(..., background=True)`` write failed in the worker thread.

    Raised by the next call into the :class:`~memcore.SemanticMemory`; ``__cause__`` is the
    original error.
    """


class MemoryClosedError(StoreClosedError):
    """A :class:`~memcore.SemanticMemory` was used after ``close()``."""


class MissingDependencyError(MemcoreError, ImportError):
    """An optional dependency a feature needs is not installed (the message names the extra)."""


def install_hint(extra: str) -> str:
    """The command that installs memcore's optional extra ``extra``, for error messages.

    ``memcore-agent`` is not on PyPI yet, so the hint leads with the form that works today (an
    editable install from a clone) and names the published form after it.

    Parameters
    ----------
    extra : str
        The extra's name in ``pyproject.toml`` (``"mcp"``, ``"postgres"``, ``"ann"``, ...).

    Returns
    -------
    str
        e.g. ``pip install -e '.[mcp]' in a clone of memcore (published: pip install
        'memcore-agent[mcp]')``.
    """
    return (f"pip install -e '.[{extra}]' in a clone of memcore "
            f"(published: pip install 'memcore-agent[{extra}]')")
