"""The ``memcore`` command line: exit codes, JSON, one-line errors, stdin/stdout.

Most tests call :func:`memcore.cli.main` in-process (fast); a few run the real entry point
in subprocesses (persistence across processes, a second writer holding the lock).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from memcore.cli import main

REPO = Path(__file__).resolve().parents[1]


def memcore(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The real entry point in a new process."""
    full_env = {k: v for k, v in os.environ.items() if k != "MEMCORE_HOME"}
    full_env.setdefault("NUMBA_CACHE_DIR", "/tmp/numba_cache")
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "memcore.cli", *args], capture_output=True,
                          text=True, timeout=120, env=full_env, cwd=cwd or REPO)


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys, monkeypatch):
    """``cli(*argv, stdin=None) -> Run``: ``memcore.cli.main`` in this process."""
    monkeypatch.delenv("MEMCORE_HOME", raising=False)

    def run(*args: str, stdin: str | None = None) -> Run:
        capsys.readouterr()
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        try:
            code = main(list(args))
        except SystemExit as exc:   # argparse: usage errors and --help
            code = exc.code
        out, err = capsys.readouterr()
        return Run(code, out, err)

    return run


def one_line_error(proc, code: int, *needles: str) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    # a note may precede the error (e.g. the first MiniLM load on this machine)
    err = "\n".join(line for line in proc.stderr.strip().splitlines() if ": note: " not in line)
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err


def json_error(proc, code: int, *needles: str) -> dict:
    """Under --json an error is one JSON object on stderr, and stdout is empty."""
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    err = json.loads(proc.stderr)
    assert err["status"] == code and err["command"] and err["error"]
    for needle in needles:
        assert needle in err["error"], err
    return err


MEMORIES = (("name", "My name is Ada Lovelace."), ("kettle", "The kettle is in the left cupboard."),
            ("dock", "The charging dock is in the hallway."))
NS = '["agent", "chat"]'   # two segments, as SemanticMemory names a mode's namespace


@pytest.fixture
def store(tmp_path) -> Path:
    """A store with three memories in ("agent", "chat"), written in-process."""
    from memcore.embedders import HashingEmbedder
    from memcore.stores.long import LongTermMemory

    path = tmp_path / "store"
    with LongTermMemory(path, HashingEmbedder(dim=384)) as ltm:
        for key, text in MEMORIES:
            ltm.put(("agent", "chat"), key, text, importance=0.8, metadata={"source": "test"})
    return path


# ---------------------------------------------------------------- the real entry point

def test_entry_point_put_then_search_in_new_processes(tmp_path):
    path = str(tmp_path / "s")
    proc = memcore("--store", path, "--embedder", "hashing", "put", NS, "My name is Ada.",
                   "--key", "name", "--importance", "0.8", "--metadata", '{"source": "cli"}', "--json")
    assert proc.returncode == 0, proc.stderr
    stored = json.loads(proc.stdout)
    assert stored["key"] == "name" and stored["namespace"] == ["agent", "chat"]
    assert stored["importance"] == 0.8 and stored["metadata"] == {"source": "cli"}
    # a new process finds it (persistence across a restart), with the store's own embedder
    hits = json.loads(memcore("--store", path, "search", NS, "What is my name?", "--json").stdout)
    assert [h["text"] for h in hits] == ["My name is Ada."]
    one_line_error(memcore("--store", path, "get", NS, "nope"), 1, "no memory")


def test_second_writer_is_told_what_to_do(store, cli):
    code = ("import sys\n"
            "from memcore.stores.long import LongTermMemory\n"
            "from memcore.embedders import HashingEmbedder\n"
            "s = LongTermMemory(sys.argv[1], HashingEmbedder(dim=384))\n"
            "print('ready', flush=True)\n"
            "sys.stdin.read()\n"
            "s.close()\n")
    with subprocess.Popen([sys.executable, "-c", code, str(store)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True,
                          env={"NUMBA_CACHE_DIR": "/tmp/numba_cache", **os.environ}) as holder:
        try:
            assert holder.stdout.readline().strip() == "ready"
            err = one_line_error(cli("--store", str(store), "--embedder", "hashing", "put", NS, "x"),
                                 1, "another process is writing", "close that process or wait")
            assert "LongTermMemory" not in err and "read_only" not in err   # no Python API
            json_error(cli("--store", str(store), "delete", NS, "dock", "--json"), 1, "writer lock")
            # reads work meanwhile
            assert cli("--store", str(store), "get", NS, "dock").returncode == 0
        finally:
            holder.stdin.close()
            holder.wait(timeout=60)
    assert cli("--store", str(store), "--embedder", "hashing", "put", NS, "x").returncode == 0


# ---------------------------------------------------------------- in-process

def test_search_and_get(store, cli):
    proc = cli("--store", str(store), "--embedder", "hashing", "search", NS, "What is my name?",
               "--top-k", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    hits = json.loads(proc.stdout)
    assert len(hits) == 2 and hits[0]["key"] == "name" and hits[0]["text"] == "My name is Ada Lovelace."
    assert hits[0]["metadata"] == {"source": "test"} and hits[0]["tier"] == "long"
    assert hits[0]["score"] >= hits[1]["score"]
    got = json.loads(cli("--store", str(store), "get", NS, "kettle", "--json").stdout)
    assert got["text"] == "The kettle is in the left cupboard." and got["importance"] == 0.8
    assert got["namespace"] == ["agent", "chat"]
    # without --embedder the store's own embedder (hashing) encodes the query
    plain = cli("--store", str(store), "search", NS, "kettle")
    assert plain.returncode == 0 and "kettle" in plain.stdout.splitlines()[0]


def test_global_options_after_the_subcommand_and_memcore_home(store, tmp_path, cli, monkeypatch):
    proc = cli("namespaces", "--store", str(store), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [{"namespace": ["agent", "chat"], "count": 3}]
    monkeypatch.setenv("MEMCORE_HOME", str(store))
    home = cli("namespaces")
    assert home.returncode == 0 and home.stdout.strip() == '["agent", "chat"]\t3'
    monkeypatch.delenv("MEMCORE_HOME")
    # neither --store nor $MEMCORE_HOME: ./memcore-data
    monkeypatch.chdir(tmp_path)
    assert cli("--embedder", "hashing", "put", "x", "hello").returncode == 0
    assert (tmp_path / "memcore-data").is_dir()


def test_stats_delete_and_missing_key(store, cli):
    stats = json.loads(cli("--store", str(store), "stats", "--json").stdout)
    assert stats["memories"] == 3 and stats["per_namespace"] == {NS: 3}
    assert stats["embedder"].startswith("hashing") and stats["disk_bytes"] > 0
    deleted = cli("--store", str(store), "delete", NS, "dock", "--json")
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout) == {"deleted": True, "namespace": ["agent", "chat"], "key": "dock"}
    one_line_error(cli("--store", str(store), "delete", NS, "dock"), 1, "dock")
    json_error(cli("--store", str(store), "delete", NS, "dock", "--json"), 1, "dock")
    one_line_error(cli("--store", str(store), "get", NS, "dock"), 1, "no memory")
    assert json.loads(cli("--store", str(store), "stats", "--json").stdout)["memories"] == 2


def test_commands_that_embed_nothing_ignore_the_embedder(store, cli, tmp_path):
    # the store was written with hashing; --embedder minilm would not match it, but these
    # commands encode no text, so they neither load the model nor refuse the store
    for argv in (["stats"], ["namespaces"], ["get", NS, "kettle"], ["export", str(tmp_path / "d.jsonl")],
                 ["delete", NS, "dock"]):
        proc = cli("--store", str(store), "--embedder", "minilm", *argv)
        assert proc.returncode == 0, (argv, proc.stderr)
    one_line_error(cli("--store", str(store), "--embedder", "minilm", "search", NS, "q"), 1, "embedder")
    # delete never creates a store
    one_line_error(cli("--store", str(tmp_path / "none"), "delete", "x", "k"), 1, "no memcore store")
    assert not (tmp_path / "none").exists()


def test_export_import_round_trip_through_files_and_pipes(store, tmp_path, cli):
    dump = tmp_path / "dump.jsonl"
    out = cli("--store", str(store), "export", str(dump), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"exported": 3}
    assert len(dump.read_text().splitlines()) == 1 + 3  # a header line, then one per memory
    other = tmp_path / "other"
    imp = cli("--store", str(other), "--embedder", "hashing", "import", str(dump), "--json", "--quiet")
    assert imp.returncode == 0, imp.stderr
    assert json.loads(imp.stdout) == {"imported": 3}
    hits = json.loads(cli("--store", str(other), "search", NS, "where is the kettle", "--top-k", "1",
                          "--json").stdout)
    assert hits[0]["key"] == "kettle"
    # `-`: export to stdout (summary on stderr), import from stdin
    piped = cli("--store", str(store), "export", "-")
    assert piped.returncode == 0 and piped.stdout == dump.read_text()
    assert "exported 3 memories" in piped.stderr
    third = tmp_path / "third"
    imp = cli("--store", str(third), "--embedder", "hashing", "import", "-", "--quiet", stdin=piped.stdout)
    assert imp.returncode == 0 and "imported 3 memories from stdin" in imp.stdout, imp.stderr
    assert json.loads(cli("--store", str(third), "stats", "--json").stdout)["memories"] == 3


def test_put_reads_stdin_and_files(tmp_path, cli):
    path = str(tmp_path / "s")
    stored = cli("--store", path, "--embedder", "hashing", "put", "notes", "-", "--json",
                 stdin="The spare key is under the blue pot.\n")
    assert stored.returncode == 0, stored.stderr
    assert json.loads(stored.stdout)["text"] == "The spare key is under the blue pot."  # no "-"
    big = "The robot patrols the long corridor at night. " * 110_000       # about 5 MB
    (tmp_path / "big.txt").write_text(big, encoding="utf-8")
    put = cli("--store", path, "put", "notes", "--file", str(tmp_path / "big.txt"), "--key", "big")
    assert put.returncode == 0, put.stderr
    got = cli("--store", path, "get", "notes", "big", "--json")
    assert json.loads(got.stdout)["text"] == big.removesuffix("\n") and len(big) > 5_000_000
    one_line_error(cli("--store", path, "put", "notes"), 2, "--file")            # no text at all
    one_line_error(cli("--store", path, "put", "notes", "x", "--file", "f"), 2, "one of them")
    one_line_error(cli("--store", path, "put", "notes", "--file", str(tmp_path / "nope")), 1, "nope")


def test_search_says_why_nothing_was_found(store, cli, tmp_path):
    base = ("--store", str(store), "--embedder", "hashing", "search")
    assert cli(*base, NS, "").stdout.strip() == "(empty query: nothing to search for)"
    assert cli(*base, NS, "   ").stdout.strip() == "(empty query: nothing to search for)"
    assert "no content" in cli(*base, NS, "!!! ???").stdout
    assert cli(*base, "elsewhere", "kettle").stdout.strip() == "(no memories in namespace elsewhere)"
    assert "threshold 0.99" in cli(*base, NS, "volcano eruption", "--threshold", "0.99").stdout
    assert json.loads(cli(*base, NS, "", "--json").stdout) == []


def test_search_filter(tmp_path, cli):
    path = str(tmp_path / "s")
    base = ("--store", path, "--embedder", "hashing")
    for key, room, text in (("k1", "kitchen", "The kettle is in the left cupboard."),
                            ("k2", "hall", "The kettle box is in the hall cupboard."),
                            ("k3", "garage", "The old kettle is in the garage.")):
        assert cli(*base, "put", "home", text, "--key", key,
                   "--metadata", json.dumps({"room": room})).returncode == 0
    search = (*base, "search", "home", "where is the kettle", "--json")
    assert len(json.loads(cli(*search).stdout)) == 3
    only = json.loads(cli(*search, "--filter", '{"room": "hall"}').stdout)
    assert [h["key"] for h in only] == ["k2"]
    some = json.loads(cli(*search, "--filter", '{"room": {"$in": ["hall", "garage"]}}').stdout)
    assert sorted(h["key"] for h in some) == ["k2", "k3"]
    rest = json.loads(cli(*search, "--filter", '{"room": {"$ne": "kitchen"}}').stdout)
    assert sorted(h["key"] for h in rest) == ["k2", "k3"]
    assert cli(*search[:-1], "--filter", '{"room": "attic"}').stdout.strip() == \
        "(no memories matching the filter)"
    # a malformed filter is a usage error (argparse's, or one JSON object under --json)
    bad = cli(*search[:-1], "--filter", '{"room": {"$regex": "k"}}')
    assert bad.returncode == 2 and "$regex" in bad.stderr and "Traceback" not in bad.stderr
    json_error(cli(*search, "--filter", '{"room": {"$regex": "k"}}'), 2, "$regex")
    json_error(cli(*search, "--filter", '["room"]'), 2, "JSON object")
    json_error(cli(*search, "--filter", "{room"), 2, "not valid JSON")


def test_json_never_prints_a_traceback(store, cli, monkeypatch):
    """Under --json even a failure nobody anticipated (here: injected) is one JSON object."""
    from memcore.stores.long import LongTermMemory

    def broken(*args, **kwargs):
        raise RuntimeError("injected fault")

    monkeypatch.setattr(LongTermMemory, "open", broken)
    err = json_error(cli("--json", "--store", str(store), "stats"), 1, "internal error")
    assert "RuntimeError: injected fault" in err["error"]
    with pytest.raises(RuntimeError, match="injected fault"):   # without --json: the traceback
        cli("--store", str(store), "stats")


def test_missing_store_is_one_line_error(tmp_path, cli):
    err = one_line_error(cli("--store", str(tmp_path / "nope"), "--embedder", "hashing", "search",
                             NS, "hello"), 1, "no memcore store")
    assert str(tmp_path / "nope") in err
    one_line_error(cli("--store", str(tmp_path / "nope"), "stats"), 1)
    json_error(cli("--store", str(tmp_path / "nope"), "stats", "--json"), 1, "no memcore store")
    one_line_error(cli("--store", str(tmp_path), "--embedder", "hashing", "import",
                       str(tmp_path / "missing.jsonl")), 1, "missing.jsonl")


@pytest.mark.parametrize("namespace", ['["a", ""]', "[not json", '["a", 1]', ""])
def test_bad_namespace_is_a_usage_error(store, namespace, cli):
    one_line_error(cli("--store", str(store), "--embedder", "hashing", "search", namespace, "q"),
                   2, "namespace")
    json_error(cli("--store", str(store), "search", namespace, "q", "--json"), 2, "namespace")


@pytest.mark.parametrize("args", [
    ["search", "agent"],                                  # missing query
    ["put", "ns", "text", "--importance", "2"],
    ["put", "ns", "text", "--metadata", "[1, 2]"],
    ["search", "ns", "q", "--top-k", "0"],
])
def test_usage_errors_exit_2(store, args, cli):
    proc = cli("--store", str(store), *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "error:" in proc.stderr
    json_error(cli("--store", str(store), *args, "--json"), 2)


def test_a_namespace_is_one_segment_as_in_the_library(tmp_path, cli):
    from memcore.embedders import HashingEmbedder
    from memcore.stores.long import LongTermMemory

    path = str(tmp_path / "s")
    assert cli("--store", path, "--embedder", "hashing", "put", "a/b", "slash segment").returncode == 0
    assert cli("--store", path, "put", '["a", "b"]', "two segments").returncode == 0
    listed = json.loads(cli("--store", path, "namespaces", "--json").stdout)
    assert sorted(map(tuple, (d["namespace"] for d in listed))) == [("a", "b"), ("a/b",)]
    assert sorted(cli("--store", path, "namespaces").stdout.splitlines()) == ['["a", "b"]\t1', "a/b\t1"]
    with LongTermMemory.open(path, HashingEmbedder(dim=384), read_only=True) as ltm:
        assert ltm.count("a/b") == 1 and ltm.count(("a", "b")) == 1    # the library's "a/b"
    hits = json.loads(cli("--store", path, "search", "a/b", "segment", "--json").stdout)
    assert [h["text"] for h in hits] == ["slash segment"]


# ---------------------------------------------------------------- demo

def test_demo_bundled_script_json(cli):
    proc = cli("--embedder", "hashing", "demo", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["ticks"] == 16 and summary["recalled"] >= 6
    assert summary["tick_ms"]["p50_ms"] > 0
    assert summary["memories"]["short"] + summary["memories"]["long"] >= 16
    for tick in summary["transcript"]:            # every answer's facts were recalled that tick
        if tick["needs"] and not tick["response"].startswith("I don't remember"):
            recalled = " ".join(tick["recalled"]).casefold()
            assert all(f.casefold() in recalled for f in tick["needs"]), tick


def test_demo_bundled_script_transcript(cli):
    proc = cli("--embedder", "hashing", "demo")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "RELEVANT MEMORIES" in out and "The user's name is Alice." in out
    assert "tick p50" in out and "p95" in out and "questions answered from memory" in out
    blocks = out.split("\n[tick")[1:]
    (lisbon,) = [b for b in blocks if b.splitlines()[0].endswith("Where do I live again?")]
    memories, robot = lisbon.split("robot:")
    assert "You live in Lisbon." in robot and "Lisbon" in memories.split("RELEVANT MEMORIES")[1]


@pytest.mark.data("locomo")
def test_demo_locomo_replay_reports_recall(shared, cli):
    locomo = shared / "data" / "locomo" / "locomo_dev.json"
    proc = cli("--embedder", "hashing", "demo", "--locomo", str(locomo), "--conversation", "conv-26",
               "--top-k", "10", "--json")
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["conversation"] == "conv-26" and s["turns"] == 419 and s["top_k"] == 10
    assert s["questions"] == 197
    assert 0.1 < s["recall"] <= 1.0  # hashing is weak here, but far above chance (10/419)
    assert set(s["recall_by_category"]) == {"1", "2", "3", "4", "5"}
    one_line_error(cli("--embedder", "hashing", "demo", "--locomo", str(locomo), "--conversation",
                       "conv-99"), 1, "conv-26")


def test_json_may_stand_before_the_command_and_search_previews_long_texts(tmp_path, capsys):
    from memcore.cli import main

    store = str(tmp_path / "s")
    assert main(["--store", store, "--embedder", "hashing", "put", "notes", "alpha " * 500]) == 0
    capsys.readouterr()
    assert main(["--json", "--store", store, "--embedder", "hashing", "stats"]) == 0
    assert json.loads(capsys.readouterr().out)["memories"] == 1
    assert main(["--store", store, "--embedder", "hashing", "search", "notes", "alpha"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.endswith("\u2026") and len(line) < 300


# ---------------------------------------------------------------- hints instead of silence

def test_a_new_store_is_created_with_a_note_and_reads_never_create(tmp_path, cli):
    path = tmp_path / "robot-memry"
    err = cli("--store", str(path), "search", "notes", "key")
    one_line_error(err, 1, "no memcore store", str(path))
    assert not path.exists()
    first = cli("--store", str(path), "--embedder", "hashing", "put", "notes", "the key is here")
    assert first.returncode == 0, first.stderr
    assert first.stderr.strip() == (f"memcore put: note: no store at {path}: creating a new one "
                                    f"(embedder hashing-unicode-v1)")
    again = cli("--store", str(path), "put", "notes", "the door is red")
    assert again.returncode == 0 and again.stderr == ""              # it exists now: no note
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\xff\xfe not text")
    one_line_error(cli("--store", str(tmp_path / "fresh"), "--embedder", "hashing", "import",
                       str(bad)), 1, "not UTF-8")
    assert not (tmp_path / "fresh").exists()           # a bad file is refused before creating
    quiet = cli("--store", str(tmp_path / "other"), "--embedder", "hashing", "put", "n", "x", "--json")
    assert json.loads(quiet.stdout)["key"] and json.loads(quiet.stderr)["note"].startswith("no store")


def test_search_and_get_name_the_nearest_namespaces(store, cli):
    base = ("--store", str(store), "--embedder", "hashing")
    assert cli(*base, "put", "notes", "The spare key is under the blue pot.").returncode == 0
    assert cli(*base, "search", "note", "key").stdout.strip() == \
        "(no memories in namespace note; did you mean 'notes'?)"
    # the store was written as SemanticMemory writes mode chat: ("agent", "chat")
    chat = cli(*base, "search", "chat", "kettle").stdout.strip()
    assert chat.startswith("""(no memories in namespace chat; did you mean '["agent", "chat"]'?""")
    assert "SemanticMemory" in chat
    err = one_line_error(cli(*base, "get", "chat", "kettle"), 1, "no memory 'kettle'")
    assert """did you mean '["agent", "chat"]'""" in err
    # a namespace that holds memories gets no hint, nor one far from every name
    one_line_error(cli(*base, "get", "notes", "nope"), 1, "no memory 'nope' in namespace notes")
    assert cli(*base, "search", "kitchen", "kettle").stdout.strip() == \
        "(no memories in namespace kitchen)"
    # --json: stdout stays a JSON list; why it is empty (with the hint) is a note on stderr
    typo = cli(*base, "search", "note", "key", "--json")
    assert typo.returncode == 0 and json.loads(typo.stdout) == []
    note = json.loads(typo.stderr)
    assert note["command"] == "search" and "did you mean 'notes'?" in note["note"]
    found = cli(*base, "search", "notes", "key", "--json")
    assert json.loads(found.stdout) and found.stderr == ""


def test_search_and_the_mcp_recall_tool_give_the_same_note(store, cli):
    from memcore.integrations.mcp_server import MemoryTools

    base = ("--store", str(store), "--embedder", "hashing")
    assert cli(*base, "put", "notes", "The spare key is under the blue pot.").returncode == 0
    note = json.loads(cli(*base, "--json", "search", "ntoes", "key").stderr)["note"]
    assert note == "no memories in namespace ntoes; did you mean 'notes'?"
    with MemoryTools(store) as tools:
        assert tools.recall("key", "ntoes") == [] and tools.why_empty("ntoes") == note
        with pytest.raises(LookupError) as lost:
            tools.get("nope", "ntoes")
    assert one_line_error(cli(*base, "get", "ntoes", "nope"), 1).endswith(f": {lost.value}")


def test_semantic_memory_stores_short_tier_and_journal(tmp_path, cli):
    from memcore import SemanticMemory
    from memcore.embedders import HashingEmbedder

    path = tmp_path / "sm"
    with SemanticMemory(path, HashingEmbedder(dim=384), warmup=False) as mem:
        mem.store("The kettle is in the left cupboard.", "Noted.", mode="chat", importance=0.1)
    # not promoted: the memory is in the short tier, journaled in an internal namespace
    out = cli("--store", str(path), "search", NS, "kettle").stdout.strip()
    assert "short tier holds 1 memories" in out and "not consolidated" in out, out
    assert "did you mean" in cli("--store", str(path), "search", "chat", "kettle").stdout
    verify = cli("verify", str(path))
    assert verify.returncode == 0 and "memcore-short-journal" not in verify.stdout
    assert verify.stdout.strip().endswith("0 of 0 namespaces intact, and 1 of 1 namespaces of "
                                          "SemanticMemory's short-tier journal (internal, not "
                                          "listed)")
    listed = json.loads(cli("verify", str(path), "--json").stdout)["namespaces"]
    assert [(n["namespace"][0], n["internal"]) for n in listed] == [("memcore-short-journal", True)]


def test_embedder_mismatch_says_what_to_do_on_the_command_line(store, cli):
    err = one_line_error(cli("--store", str(store), "--embedder", "minilm", "search", NS, "q"), 1,
                         "written with embedder 'hashing-unicode-v1'", "drop --embedder")
    assert "reindex" not in err and "--embedder minilm" in err    # no Python call
    assert cli("--store", str(store), "search", NS, "kettle").returncode == 0   # and it works


def test_import_draws_no_progress_bar_off_a_terminal(store, tmp_path, cli):
    dump = tmp_path / "d.jsonl"
    assert cli("--store", str(store), "export", str(dump)).returncode == 0
    got = cli("--store", str(tmp_path / "copy"), "import", str(dump))   # stderr is no terminal
    assert got.returncode == 0, got.stderr
    assert "it/s" not in got.stderr and "mem/s" not in got.stderr and "%|" not in got.stderr
    assert got.stderr.startswith("memcore import: note: no store at")


@pytest.mark.parametrize("command", ["verify", "repair", "migrate"])
def test_maintenance_commands_refuse_a_postgres_url(command, cli):
    url = "postgresql://ann:s3cret@db.invalid/mem"
    for argv in (("--store", url, command), (command, url)):
        err = one_line_error(cli(*argv), 2, "PostgreSQL store", "postgresql://ann:***@db.invalid")
        assert "s3cret" not in err


def test_stats_on_a_url_names_the_url_and_no_disk(cli):
    import pg_server

    url = f"{pg_server.url()}?schema={pg_server.new_schema()}"
    put = cli("--store", url, "--embedder", "hashing", "put", "notes", "the lab door is red")
    assert put.returncode == 0 and "creating a new one" in put.stderr
    out = cli("--store", url, "stats").stdout
    assert out.startswith("store postgresql://") and "MB on disk" not in out
    assert "1 memory in 1 namespace" in out
    assert json.loads(cli("--store", url, "stats", "--json").stdout)["disk_bytes"] is None


def test_readme_filter_example_finds_what_put_metadata_stored(tmp_path, cli, monkeypatch):
    """The README's command-line block: its put lines, then its --filter search, find the
    memory the --metadata put stored."""
    import shlex

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    block = readme.split("## The command line")[1].split("```bash\n")[1].split("```")[0]
    lines = [shlex.split(line.split("  #")[0]) for line in block.splitlines()]
    puts = [a for a in lines if a[:2] == ["memcore", "put"] and "--file" not in a
            and "-" not in a]
    (search,) = [a for a in lines if a[:2] == ["memcore", "search"] and "--filter" in a]
    assert any("--metadata" in a for a in puts)
    monkeypatch.chdir(tmp_path)
    for argv in puts:
        assert cli("--embedder", "hashing", *argv[1:]).returncode == 0
    hits = json.loads(cli(*search[1:], "--json").stdout)
    assert [h["metadata"] for h in hits] == [{"room": "hall"}]


def test_a_foreign_directory_as_store_is_one_error_and_no_creation_note(tmp_path):
    from store_helpers import run_cli

    mine = tmp_path / "mydocs"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    code, out, err = run_cli("--store", str(mine), "--embedder", "hashing", "put", "notes", "x")
    assert code == 1 and out == "" and "creating" not in err
    assert len(err.strip().splitlines()) == 1 and "not a memcore store" in err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_python_m_memcore_runs_the_command_line():
    import subprocess
    import sys

    from memcore import __version__

    out = subprocess.run([sys.executable, "-m", "memcore", "--version"], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == f"memcore {__version__}"


def test_stats_counts_read_as_english(tmp_path):
    from store_helpers import run_cli

    store = str(tmp_path / "s")
    run_cli("--store", store, "--embedder", "hashing", "put", "notes", "hello there")
    code, out, _ = run_cli("--store", store, "stats")
    assert code == 0 and " 1 memory in 1 namespace " in out.splitlines()[0]
    run_cli("--store", store, "--embedder", "hashing", "put", "todo", "buy milk")
    assert " 2 memories in 2 namespaces " in run_cli("--store", store, "stats")[1].splitlines()[0]


def test_store_help_names_every_command_that_creates_and_demo_its_own(cli):
    for argv in ((), ("mcp",), ("search",)):
        out = " ".join(cli(*argv, "--help").stdout.split())
        assert "created by put, import and mcp" in out, out
    demo = " ".join(cli("demo", "--help").stdout.split())
    assert "created by" not in demo and "with --keep: the store" in demo
