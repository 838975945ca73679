"""A process's first ticks compile and load no numba kernel once SemanticMemory is open (issue 29
item 4): ``warmup()`` exercises every kernel signature a tick calls, the background preload
loads numba's cached signatures, and ``memcore warmup PATH`` fills numba's cache with them.

Each check runs in a fresh subprocess (kernels already loaded in the test process would hide a
miss); it counts the kernel signatures loaded and numba's compile events around the ticks.
No timing is asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Ticks with speakers, rare and common terms, filters, peeks; consolidation every 4 stores.
TICKS = textwrap.dedent("""
    import json, sys, threading
    from numba.core import event
    from memcore import _numba
    from memcore.agent import SemanticMemory
    from memcore.embedders import HashingEmbedder
    from memcore.recall.weights import HybridWeights

    compiled = []

    class Listener(event.Listener):
        def on_start(self, e):
            pass

        def on_end(self, e):
            compiled.append(str(e.data["dispatcher"].py_func.__qualname__))

    event.install_listener("numba:compile", Listener())
    cfg = json.loads(sys.argv[1])
    hybrid = getattr(HybridWeights, cfg["hybrid"])() if cfg["hybrid"] else None
    mem = SemanticMemory(cfg["path"], embedder=HashingEmbedder(), hybrid=hybrid,
                         short_capacity=8, consolidate_every=4, warmup=cfg["warmup"])
    for t in threading.enumerate():
        if t.name == "memcore-preload":
            t.join()
    at_open = len(compiled)
    before = _numba.loaded_signatures()
    names = ["Ada", "Grace", "Linus"]
    for i in range(40):
        who = names[i % 3]
        mem.retrieve(f"what did {who} say about the garden on day {i}?", "tick")
        mem.retrieve("the", "tick", touch=False, filter={"speaker": who})
        mem.store(f"{who}: I watered the garden on day {i} with {i * 7} litres", f"ok {i}", "tick",
                  metadata={"speaker": who, "episode": f"e{i // 5}"})
    mem.close()
    new = sorted(_numba.loaded_signatures() - before)
    print(json.dumps({"new": new, "compiled": compiled[at_open:], "at_open": at_open}))
""")


def _run(code: str, *args: str, env: dict | None = None) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ticks(path, hybrid=None, warmup=True, env=None) -> dict:
    return _run(TICKS, json.dumps({"path": None if path is None else str(path), "hybrid": hybrid,
                                   "warmup": warmup}), env=env)


def _seed(path: Path, env: dict | None = None) -> None:
    """A store with memories, opened again by the ticks' process (as a robot restarts)."""
    _run(textwrap.dedent("""
        import json, sys
        from memcore.agent import SemanticMemory
        from memcore.embedders import HashingEmbedder
        with SemanticMemory(sys.argv[1], embedder=HashingEmbedder(), warmup=False,
                            preload=False) as mem:
            for i in range(30):
                mem.store(f"Ada: the robot parked in bay {i}", "noted", "tick",
                          metadata={"speaker": "Ada"})
        print("{}")
    """), str(path), env=env)


@pytest.mark.parametrize("on_disk, hybrid", [(True, None), (False, "hybrid")],
                         ids=["disk-default", "ram-hybrid"])
def test_no_kernel_compiles_or_loads_during_ticks_after_open(tmp_path, on_disk, hybrid):
    path = tmp_path / "store" if on_disk else None
    if on_disk:
        _seed(path)
    out = _ticks(path, hybrid)
    assert out["new"] == [], f"kernel signatures first loaded during ticks: {out['new']}"
    assert out["compiled"] == []


@pytest.mark.slow
@pytest.mark.parametrize("hybrid", ["similarity", "hybrid"])
def test_every_recall_mode_is_warm(tmp_path, hybrid):
    path = tmp_path / "store"
    _seed(path)
    out = _ticks(path, hybrid)
    assert out["new"] == [] and out["compiled"] == []


def test_preload_loads_cached_signatures_without_compiling(tmp_path):
    _ticks(None)                      # the tick's signatures are in numba's cache now
    out = _run(textwrap.dedent("""
        import json
        from numba.core import event
        from memcore import _numba

        compiled = []

        class Listener(event.Listener):
            def on_start(self, e):
                pass

            def on_end(self, e):
                compiled.append(1)

        event.install_listener("numba:compile", Listener())
        n = _numba.preload()
        print(json.dumps({"n": n, "loaded": len(_numba.loaded_signatures()),
                          "compiled": len(compiled)}))
    """))
    assert out["n"] > 0 and out["loaded"] == out["n"] and out["compiled"] == 0


@pytest.mark.slow
def test_cli_warmup_fills_numba_cache_for_the_tick(tmp_path):
    """From an empty numba cache: ``memcore warmup PATH`` compiles the tick's kernels into it,
    so a later process opening the store with ``warmup=False`` only preloads them."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    path = tmp_path / "store"
    _seed(path, env)
    proc = subprocess.run([sys.executable, "-m", "memcore", "warmup", str(path), "--quiet"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = _ticks(path, warmup=False, env=env)
    assert out["compiled"] == [], f"compiled during ticks: {out['compiled']}"
    assert out["new"] == []
