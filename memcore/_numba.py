"""numba's first load, made interrupt-safe.

numba imports about 70 modules the first time anything compiles or loads a cached kernel;
each registers boxing functions in registries that refuse a second registration, so a
``KeyboardInterrupt`` inside one of those imports used to leave every later kernel call
raising ``KeyError("duplicate registration for ...")``. :func:`load` does that first load
once, up front: every store calls it when constructed (:meth:`MemoryStore._setup`), the
text kernels before their first call.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading

__all__ = ["load"]

_lock = threading.Lock()
_loaded = False


def load() -> None:
    """Load numba's compiler registries (what its first kernel call does) once, so that an
    interrupt cannot cut the load short: under a lock, with the main thread's Python signal
    handlers deferred (a Ctrl-C arriving meanwhile is raised right after the load completes,
    about 0.3 s later); if the load fails anyway, the registrations of modules whose import
    did not complete are forgotten, so the next call loads cleanly. Later calls return at
    once.

    Raises
    ------
    KeyboardInterrupt
        A Ctrl-C (or another signal's handler's exception) that arrived during the load.

    Examples
    --------
    >>> load()
    """
    global _loaded
    if _loaded:
        return
    with _lock:
        if _loaded:
            return
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.registry import cpu_target

        with _deferred_signals():
            try:
                with global_compiler_lock:
                    cpu_target.target_context.refresh()
            except BaseException:
                _forget_partial_registrations()
                raise
            _loaded = True


@contextlib.contextmanager
def _deferred_signals():
    """Hold back the main thread's Python signal handlers (Ctrl-C's included) for the
    duration, then run those whose signal arrived, in order (other threads never run
    Python signal handlers: nothing to defer there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list = []
    saved = {}
    for sig in signal.valid_signals():
        try:
            handler = signal.getsignal(sig)
            if callable(handler):
                saved[sig] = handler
                signal.signal(sig, lambda signum, frame: caught.append((signum, frame)))
        except (OSError, ValueError, RuntimeError):
            pass
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        for signum, frame in caught:
            saved[signum](signum, frame)


def _forget_partial_registrations() -> None:
    """Drop numba's box/unbox/reflect registrations made by modules whose import was cut
    short (no longer in ``sys.modules``): importing them again registers them anew."""
    from numba.core import pythonapi

    for name in ("_boxers", "_unboxers", "_reflectors"):
        functions = getattr(getattr(pythonapi, name, None), "functions", {})
        for typeclass, func in list(functions.items()):
            if getattr(func, "__module__", None) not in sys.modules:
                del functions[typeclass]
