"""The ``memcore`` command line, through subprocess: exit codes, JSON, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def memcore(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k != "MEMCORE_HOME"}
    full_env.setdefault("NUMBA_CACHE_DIR", "/tmp/numba_cache")
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "memcore.cli", *args], capture_output=True,
                          text=True, timeout=120, env=full_env, cwd=cwd or REPO)


def one_line_error(proc: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err


MEMORIES = (("name", "My name is Ada Lovelace."), ("kettle", "The kettle is in the left cupboard."),
            ("dock", "The charging dock is in the hallway."))


@pytest.fixture
def store(tmp_path) -> Path:
    """A store with three memories in agent/chat, written in-process (fast)."""
    from memcore.embedders import HashingEmbedder
    from memcore.stores.long import LongTermMemory

    path = tmp_path / "store"
    with LongTermMemory(path, HashingEmbedder(dim=384)) as ltm:
        for key, text in MEMORIES:
            ltm.put(("agent", "chat"), key, text, importance=0.8, metadata={"source": "test"})
    return path


def test_put_from_the_command_line(tmp_path):
    path = str(tmp_path / "s")
    proc = memcore("--store", path, "--embedder", "hashing", "put", "agent/chat", "My name is Ada.",
                   "--key", "name", "--importance", "0.8", "--metadata", '{"source": "cli"}', "--json")
    assert proc.returncode == 0, proc.stderr
    stored = json.loads(proc.stdout)
    assert stored["key"] == "name" and stored["namespace"] == ["agent", "chat"]
    assert stored["importance"] == 0.8 and stored["metadata"] == {"source": "cli"}
    # a new process finds it: persistence across a restart
    hits = json.loads(memcore("--store", path, "--embedder", "hashing", "search", "agent/chat",
                              "What is my name?", "--json").stdout)
    assert [h["text"] for h in hits] == ["My name is Ada."]


def test_put_search_get_across_processes(store):
    # every command is a new process: this is persistence across a restart
    proc = memcore("--store", str(store), "--embedder", "hashing", "search", "agent/chat",
                   "What is my name?", "--top-k", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    hits = json.loads(proc.stdout)
    assert len(hits) == 2 and hits[0]["key"] == "name" and hits[0]["text"] == "My name is Ada Lovelace."
    assert hits[0]["metadata"] == {"source": "test"} and hits[0]["tier"] == "long"
    assert hits[0]["score"] >= hits[1]["score"]

    got = json.loads(memcore("--store", str(store), "--embedder", "hashing", "get", "agent/chat",
                             "kettle", "--json").stdout)
    assert got["text"] == "The kettle is in the left cupboard." and got["importance"] == 0.8
    assert got["namespace"] == ["agent", "chat"]
    # without --embedder the store's own embedder (hashing) encodes the query
    plain = memcore("--store", str(store), "search", "agent/chat", "kettle")
    assert plain.returncode == 0 and "kettle" in plain.stdout.splitlines()[0]


def test_global_options_after_the_subcommand_and_memcore_home(store, tmp_path):
    proc = memcore("namespaces", "--store", str(store), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [{"namespace": ["agent", "chat"], "count": 3}]
    home = memcore("namespaces", env={"MEMCORE_HOME": str(store)})
    assert home.returncode == 0 and home.stdout.strip() == "agent/chat\t3"
    # neither --store nor $MEMCORE_HOME: ./memcore-data
    cwd_store = memcore("--embedder", "hashing", "put", "x", "hello", cwd=tmp_path)
    assert cwd_store.returncode == 0 and (tmp_path / "memcore-data").is_dir()


def test_stats_delete_and_missing_key(store):
    stats = json.loads(memcore("--store", str(store), "stats", "--json").stdout)
    assert stats["memories"] == 3 and stats["per_namespace"] == {"agent/chat": 3}
    assert stats["embedder"].startswith("hashing") and stats["disk_bytes"] > 0
    assert memcore("--store", str(store), "--embedder", "hashing", "delete", "agent/chat", "dock").returncode == 0
    one_line_error(memcore("--store", str(store), "--embedder", "hashing", "delete", "agent/chat", "dock"),
                   1, "dock")
    one_line_error(memcore("--store", str(store), "--embedder", "hashing", "get", "agent/chat", "dock"),
                   1, "no memory")
    stats = json.loads(memcore("--store", str(store), "stats", "--json").stdout)
    assert stats["memories"] == 2


def test_export_import_round_trip(store, tmp_path):
    dump = tmp_path / "dump.jsonl"
    out = memcore("--store", str(store), "--embedder", "hashing", "export", str(dump), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"exported": 3}
    assert len(dump.read_text().splitlines()) == 1 + 3  # a header line, then one per memory
    other = tmp_path / "other"
    imp = memcore("--store", str(other), "--embedder", "hashing", "import", str(dump), "--json")
    assert imp.returncode == 0, imp.stderr
    assert json.loads(imp.stdout) == {"imported": 3}
    hits = json.loads(memcore("--store", str(other), "--embedder", "hashing", "search", "agent/chat",
                              "where is the kettle", "--top-k", "1", "--json").stdout)
    assert hits[0]["key"] == "kettle"


def test_missing_store_is_one_line_error(tmp_path):
    err = one_line_error(memcore("--store", str(tmp_path / "nope"), "--embedder", "hashing", "search",
                                 "agent/chat", "hello"), 1, "no memcore store")
    assert str(tmp_path / "nope") in err
    one_line_error(memcore("--store", str(tmp_path / "nope"), "--embedder", "hashing", "stats"), 1)
    one_line_error(memcore("--store", str(tmp_path), "--embedder", "hashing", "import",
                           str(tmp_path / "missing.jsonl")), 1, "missing.jsonl")


@pytest.mark.parametrize("namespace", ["a//b", '["a", ""]', "[not json"])
def test_bad_namespace_is_a_usage_error(store, namespace):
    one_line_error(memcore("--store", str(store), "--embedder", "hashing", "search", namespace, "q"),
                   2, "namespace")


@pytest.mark.parametrize("args", [
    ["search", "agent/chat"],                                  # missing query
    ["put", "ns", "text", "--importance", "2"],
    ["put", "ns", "text", "--metadata", "[1, 2]"],
    ["search", "ns", "q", "--top-k", "0"],
])
def test_usage_errors_exit_2(store, args):
    proc = memcore("--store", str(store), *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "error:" in proc.stderr


def test_namespace_with_slash_as_json_list(tmp_path):
    path = str(tmp_path / "s")
    assert memcore("--store", path, "--embedder", "hashing", "put", '["a/b", "c"]', "slash segment").returncode == 0
    listed = json.loads(memcore("--store", path, "--embedder", "hashing", "namespaces", "--json").stdout)
    assert listed == [{"namespace": ["a/b", "c"], "count": 1}]
    plain = memcore("--store", path, "--embedder", "hashing", "namespaces")
    assert plain.stdout.strip() == '["a/b", "c"]\t1'
    # "a/b/c" is three segments, a different namespace
    assert json.loads(memcore("--store", path, "--embedder", "hashing", "search", "a/b/c", "slash",
                              "--json").stdout) == []


def test_locked_store_is_one_line_error(store):
    code = ("import sys\n"
            "from memcore.stores.long import LongTermMemory\n"
            "from memcore.embedders import HashingEmbedder\n"
            "s = LongTermMemory(sys.argv[1], HashingEmbedder(dim=384))\n"
            "print('ready', flush=True)\n"
            "sys.stdin.read()\n"
            "s.close()\n")
    with subprocess.Popen([sys.executable, "-c", code, str(store)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "NUMBA_CACHE_DIR": "/tmp/numba_cache"}) as holder:
        try:
            assert holder.stdout.readline().strip() == "ready"
            one_line_error(memcore("--store", str(store), "--embedder", "hashing", "put", "agent/chat", "x"),
                           1, "lock")
        finally:
            holder.stdin.close()
            holder.wait(timeout=60)
    assert memcore("--store", str(store), "--embedder", "hashing", "put", "agent/chat", "x").returncode == 0


def test_embedder_mismatch_is_one_line_error(store):
    one_line_error(memcore("--store", str(store), "--embedder", "minilm", "search", "agent/chat", "q"), 1)


# ---------------------------------------------------------------- demo

def test_demo_bundled_script_json():
    proc = memcore("--embedder", "hashing", "demo", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["ticks"] == 16 and summary["recalled"] >= 6
    assert summary["tick_ms"]["p50_ms"] > 0
    assert summary["memories"]["short"] + summary["memories"]["long"] >= 16


def test_demo_bundled_script_transcript():
    proc = memcore("--embedder", "hashing", "demo")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "RELEVANT MEMORIES" in out and "The user's name is Alice." in out
    assert "tick p50" in out and "p95" in out


@pytest.mark.data("locomo")
def test_demo_locomo_replay_reports_recall(shared):
    locomo = shared / "data" / "locomo" / "locomo_dev.json"
    proc = memcore("--embedder", "hashing", "demo", "--locomo", str(locomo), "--conversation", "conv-26",
                   "--top-k", "10", "--json")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["conversation"] == "conv-26" and s["turns"] == 419 and s["top_k"] == 10
    assert s["questions"] == 197
    assert 0.1 < s["recall"] <= 1.0  # hashing is weak here, but far above chance (10/419)
    assert set(s["recall_by_category"]) == {"1", "2", "3", "4", "5"}
    one_line_error(memcore("--embedder", "hashing", "demo", "--locomo", str(locomo), "--conversation",
                           "conv-99"), 1, "conv-26")
