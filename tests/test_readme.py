"""The README's Python examples run as written and print what the README says they print."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def blocks(kind: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README.read_text(encoding="utf-8")) if lang == kind]


def test_the_first_example_is_short_and_prints_what_the_readme_shows(tmp_path, monkeypatch, capsys):
    example, shown = blocks("python")[0], blocks("text")[0]
    assert len(example.strip().splitlines()) <= 10
    monkeypatch.chdir(tmp_path)
    exec(compile(example, "README.md example", "exec"), {})
    assert capsys.readouterr().out == shown                   # as it prints, blank lines too
    assert (tmp_path / "robot-memory").is_dir()                # it persisted


@pytest.mark.parametrize("index", range(1, len(blocks("python"))))
def test_the_other_examples_run_and_print(index, tmp_path, monkeypatch, capsys):
    if "memcore.integrations.langgraph" in blocks("python")[index]:
        from extras import require as require_extra

        require_extra("langgraph.store.base", "langgraph")
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks("python")[index], f"README.md example {index + 1}", "exec"), {})
    assert capsys.readouterr().out.strip()
