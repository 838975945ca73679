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
import importlib
import logging
import pkgutil
import signal
import sys
import threading

__all__ = ["load", "preload", "start_preload", "kernel_dispatchers", "loaded_signatures"]

logger = logging.getLogger("memcore")

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


def kernel_dispatchers() -> list:
    """memcore's numba kernels: every ``numba`` dispatcher defined in a ``memcore.kernels``
    module (importing them), in module then name order.

    Returns
    -------
    list of numba Dispatcher

    Examples
    --------
    >>> len(kernel_dispatchers()) > 10
    True
    """
    from numba.core.dispatcher import Dispatcher

    import memcore.kernels as package

    out = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for name in sorted(vars(module)):
            obj = getattr(module, name)
            if isinstance(obj, Dispatcher) and getattr(obj.py_func, "__module__", None) == module.__name__:
                out.append(obj)
    return out


def loaded_signatures() -> set:
    """The (kernel, signature) pairs compiled or loaded so far in this process.

    Returns
    -------
    set of (str, str)
        ``("memcore.kernels.scan.rows_in", "(Array(int32, 1, 'C', ...), ...)")``.

    Examples
    --------
    >>> isinstance(loaded_signatures(), set)
    True
    """
    return {(f"{d.py_func.__module__}.{d.py_func.__qualname__}", str(sig))
            for d in kernel_dispatchers() for sig in list(d.overloads)}


def preload() -> int:
    """Load from numba's on-disk cache every signature of every memcore kernel it holds for
    this machine, as a first call with those argument types would, without running a kernel.

    Nothing compiles: a signature the cache lacks (or whose entry is stale) stays for its
    first call (:meth:`SemanticMemory.warmup` compiles the tick's). Any failure is logged at
    DEBUG on the ``memcore`` logger and ends the preload; it never raises.

    Returns
    -------
    int
        Signatures loaded.

    Examples
    --------
    >>> preload() >= 0
    True
    """
    loaded = 0
    try:
        load()
        from numba.core.compiler_lock import global_compiler_lock

        for disp in kernel_dispatchers():
            cache = getattr(disp, "_cache", None)
            impl = getattr(cache, "_impl", None)
            cache_file = getattr(cache, "_cache_file", None)
            if impl is None or cache_file is None:
                continue                      # cache=False kernel
            try:
                index = cache_file._load_index()
            except Exception:                 # no index yet, or unreadable
                continue
            codegen = disp.targetctx.codegen()
            for key in list(index):
                sig, machine = key[0], key[1]
                if machine != codegen.magic_tuple():
                    continue
                with global_compiler_lock:
                    if tuple(sig) in disp.overloads:
                        continue
                    cres = cache.load_overload(sig, disp.targetctx)
                    if cres is None:
                        continue
                    if not cres.objectmode:
                        disp.targetctx.insert_user_function(cres.entry_point, cres.fndesc,
                                                            [cres.library])
                    disp.add_overload(cres)
                    loaded += 1
    except Exception:
        logger.debug("preloading numba kernels failed after %d signatures", loaded, exc_info=True)
    return loaded


def start_preload() -> threading.Thread:
    """Run :func:`preload` in a daemon thread (``memcore-preload``), started now.

    Returns
    -------
    threading.Thread

    Examples
    --------
    >>> start_preload().join()
    """
    thread = threading.Thread(target=preload, name="memcore-preload", daemon=True)
    thread.start()
    return thread
