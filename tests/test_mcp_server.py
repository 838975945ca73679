"""`memcore mcp`: a real server subprocess driven by the MCP SDK's own stdio client.

Round trip remember -> recall (top_k, threshold, filter) -> get -> forget -> list_namespaces,
tool errors for bad input, stdout carrying nothing but the protocol, and the store readable by
the library afterwards. Needs the ``mcp`` extra (skips without it; fails under ``CI=true``).
"""

from __future__ import annotations

import functools
import json
import os
import sys

import anyio
import pytest

from memcore import LongTermMemory
from memcore.errors import InvalidTextError
from tests.extras import require


async def _session_run(store, script, *, errlog):
    """Start ``memcore --store STORE --embedder hashing mcp`` and run ``script(session)``."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memcore.cli", "--store", str(store), "--embedder", "hashing", "mcp"],
        env=dict(os.environ))
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await script(session)


def _payload(result):
    assert not result.is_error, result.content
    return result.structured_content


def test_round_trip_through_a_real_server(tmp_path):
    require("mcp", "mcp")
    store = tmp_path / "store"

    async def script(session):
        tools = {t.name for t in (await session.list_tools()).tools}
        assert tools == {"remember", "recall", "get", "forget", "list_namespaces"}
        call = session.call_tool
        kettle = _payload(await call("remember", {
            "text": "The kettle is in the left cupboard.", "namespace": ["home", "ada"],
            "metadata": {"room": "kitchen"}, "importance": 0.9}))
        assert kettle["key"].startswith("mcp:") and kettle["namespace"] == ["home", "ada"]
        await call("remember", {"text": "The spare key is under the blue pot.",
                                "namespace": ["home", "ada"], "key": "spare-key",
                                "metadata": {"room": "garden"}})
        await call("remember", {"text": "Bob keeps the kettle descaler in the garage.",
                                "namespace": ["home", "bob"]})
        # recall: best first, only Ada's namespace, top_k honoured
        hits = _payload(await call("recall", {"query": "where is the kettle",
                                              "namespace": ["home", "ada"], "top_k": 1}))["hits"]
        assert [h["key"] for h in hits] == [kettle["key"]]
        assert hits[0]["text"] == "The kettle is in the left cupboard."
        # the metadata filter passes through: the garden memory only
        hits = _payload(await call("recall", {"query": "where is the kettle",
                                              "namespace": ["home", "ada"],
                                              "filter": {"room": {"$ne": "kitchen"}}}))["hits"]
        assert [h["key"] for h in hits] == ["spare-key"]
        hits = _payload(await call("recall", {"query": "where is the kettle",
                                              "namespace": ["home", "ada"],
                                              "filter": {"room": {"$in": ["garden", "hall"]}}}))
        assert [h["key"] for h in hits["hits"]] == ["spare-key"]
        # threshold: nothing is that similar
        hits = _payload(await call("recall", {"query": "where is the kettle",
                                              "namespace": ["home", "ada"], "threshold": 0.99}))
        assert hits["hits"] == [] and "note" not in hits    # the namespace holds memories
        # a typo'd namespace: no hits, and a note naming the nearest one
        typo = _payload(await call("recall", {"query": "kettle", "namespace": ["home", "adda"]}))
        assert typo["hits"] == [] and """did you mean '["home", "ada"]'""" in typo["note"]
        lost = await call("get", {"key": "spare-key", "namespace": ["home", "adda"]})
        assert lost.is_error and """did you mean '["home", "ada"]'""" in lost.content[0].text
        got = _payload(await call("get", {"key": "spare-key", "namespace": ["home", "ada"]}))
        assert got["text"] == "The spare key is under the blue pot."
        assert got["metadata"] == {"room": "garden"}
        listed = _payload(await call("list_namespaces", {}))["namespaces"]
        assert listed == [{"namespace": ["home", "ada"], "count": 2},
                          {"namespace": ["home", "bob"], "count": 1}]
        assert _payload(await call("forget", {"key": "spare-key",
                                              "namespace": ["home", "ada"]}))["deleted"] is True
        assert _payload(await call("forget", {"key": "spare-key",
                                              "namespace": ["home", "ada"]}))["deleted"] is False
        # errors are tool errors with the library's message, and the server keeps serving
        missing = await call("get", {"key": "spare-key", "namespace": ["home", "ada"]})
        assert missing.is_error and "no memory 'spare-key'" in missing.content[0].text
        bad = await call("recall", {"query": "kettle", "namespace": ["home", "ada"],
                                    "filter": {"room": {"$regex": "k.*"}}})
        assert bad.is_error and "$regex" in bad.content[0].text
        blank = await call("remember", {"text": "   ", "namespace": "x"})
        assert blank.is_error
        empty_ns = await call("recall", {"query": "kettle", "namespace": ["home", ""]})
        assert empty_ns.is_error
        listed = _payload(await call("list_namespaces", {"prefix": "home"}))["namespaces"]
        return listed

    with open(tmp_path / "stderr.txt", "w+") as errlog:
        listed = anyio.run(functools.partial(_session_run, store, script, errlog=errlog))
        errlog.seek(0)
        log = errlog.read()
    assert listed == [{"namespace": ["home", "ada"], "count": 1},
                      {"namespace": ["home", "bob"], "count": 1}]
    assert "memcore mcp: INFO: serving" in log       # logging went to stderr
    # the server closed the store on exit: the library opens it and sees the same memories
    with LongTermMemory.open(store) as ltm:
        assert ltm.count(("home", "ada")) == 1 and ltm.embedder_name.startswith("hashing")


def test_a_locked_store_is_a_one_line_error_not_a_traceback(tmp_path, capfd):
    require("mcp", "mcp")
    from memcore import HashingEmbedder
    from memcore.cli import main

    with LongTermMemory(tmp_path / "store", embedder=HashingEmbedder()):   # holds the lock
        status = main(["--json", "--store", str(tmp_path / "store"), "mcp"])
    err = capfd.readouterr().err.strip().splitlines()
    assert status == 1 and len(err) == 1
    assert json.loads(err[0])["command"] == "mcp" and "another process" in json.loads(err[0])["error"]


def test_mcp_without_the_sdk_names_the_extra(tmp_path, monkeypatch, capfd):
    from memcore.cli import main

    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)   # import raises ImportError
    status = main(["--store", str(tmp_path / "store"), "mcp"])
    err = capfd.readouterr().err
    # the hint that works from a clone today, and the published name
    assert status == 1 and "pip install -e '.[mcp]'" in err and "memcore-agent[mcp]" in err
    assert not (tmp_path / "store").exists()      # checked before anything is created



def test_recall_refreshes_access_after_answering(tmp_path):
    """The tools without the transport (no SDK needed): a recall's access refresh is done by
    the writer thread, and close() drains it to the store."""
    from memcore.integrations.mcp_server import MemoryTools

    with MemoryTools(tmp_path / "store", embedder="hashing") as tools:
        stored = tools.remember("The kettle is in the left cupboard.", ["home"])
        assert stored["access_count"] == 0
        assert [h["key"] for h in tools.recall("where is the kettle", ["home"])] == [stored["key"]]
        assert tools.recall("where is the kettle", "elsewhere") == []
        with pytest.raises(InvalidTextError, match="no content"):
            tools.remember("?!", ["home"])            # could never be recalled: refused
        with pytest.raises(InvalidTextError):
            tools.remember("   ", ["home"])
        assert [n["count"] for n in tools.list_namespaces()] == [1]
    with LongTermMemory.open(tmp_path / "store") as ltm:
        got = ltm.get(("home",), stored["key"])
        assert got.access_count == 1 and got.last_accessed_at >= stored["last_accessed_at"]


def test_stdout_is_only_the_protocol(tmp_path):
    """Started and closed without a request, the server writes nothing at all to stdout
    (start-up logging goes to stderr) and exits 0."""
    require("mcp", "mcp")
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "memcore.cli", "--store", str(tmp_path / "s"),
                           "--embedder", "hashing", "mcp", "--no-warmup"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "" and "memcore mcp: INFO: serving" in proc.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is Linux's")
def test_the_writer_thread_runs_at_a_lower_priority(tmp_path):
    import threading

    from memcore.integrations.mcp_server import WRITER_NICENESS, MemoryTools

    def niceness():
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    with MemoryTools(tmp_path / "store", embedder="hashing") as tools:
        writer = tools._writer.submit(niceness).result()
    assert writer == min(niceness() + WRITER_NICENESS, 19)


def test_a_recall_never_waits_for_a_write_being_embedded(tmp_path):
    """A write whose embedding takes as long as it likes (here: until the test releases it)
    is in progress on the writer thread; recalls meanwhile answer at once, and the write
    lands once released."""
    import threading

    from memcore.embedders import CallableEmbedder, HashingEmbedder
    from memcore.integrations.mcp_server import MemoryTools

    hashing = HashingEmbedder(dim=64)
    embedding_slow_text = threading.Event()
    release = threading.Event()

    def model(texts):
        if any("slow" in t for t in texts):
            embedding_slow_text.set()
            assert release.wait(timeout=60)
        return hashing.encode(texts)

    with MemoryTools(tmp_path / "store", embedder=CallableEmbedder(model, 64, "gated-v1")) as tools:
        tools.remember("The kettle is in the left cupboard.", "home")
        done = []
        writer = threading.Thread(target=lambda: done.append(
            tools.remember("A slow note about the kettle descaler.", "home")))
        writer.start()
        assert embedding_slow_text.wait(timeout=60)          # the write is mid-embedding
        for _ in range(3):
            hits = tools.recall("where is the kettle", "home")
            assert [h["text"] for h in hits] == ["The kettle is in the left cupboard."]
        assert tools.get(hits[0]["key"], "home")["text"].startswith("The kettle")
        assert done == [] and writer.is_alive()               # ...and still is
        release.set()
        writer.join(timeout=60)
        assert done and len(tools.recall("kettle descaler note", "home")) == 2


def test_memory_tools_open_a_postgres_url_through_the_store_factory():
    import pg_server
    from memcore.errors import MemoryNotFoundError
    from memcore.integrations.mcp_server import MemoryTools

    url = f"{pg_server.url()}?schema={pg_server.new_schema()}"
    with MemoryTools(url, embedder="hashing") as tools:
        assert type(tools.store).__name__ == "PostgresMemory"
        stored = tools.remember("The spare key is under the blue pot.", "home")
    with MemoryTools(url) as tools:                       # the store's own embedder, rebuilt
        hits = tools.recall("where is the spare key?", "home")
        assert [h["key"] for h in hits] == [stored["key"]] and hits[0]["namespace"] == ["home"]
        with pytest.raises(MemoryNotFoundError):
            tools.get("nope", "home")
