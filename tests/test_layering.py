"""The architecture as the imports show it (issue 23): arrows point down, no cycles.

integrations/commands -> agent -> tiered -> stores -> storage/core -> recall -> kernels. Every
import counts, also one inside a function: an import placed there to dodge a cycle is a cycle.
Edges into the package root ``memcore`` (which re-exports the public names) are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "memcore"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


MODULES = _modules()


def _imports(name: str) -> set[str]:
    """The memcore modules ``name`` imports (anywhere in its body), resolved to modules."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
                       for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:               # memcore.x.Name -> memcore.x
                t = t.rpartition(".")[0]
            if t and t != "memcore" and t != name:
                out.add(t)
    return out


GRAPH = {name: _imports(name) for name in MODULES}


def _under(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("layer, forbidden", [
    ("memcore.kernels", ("memcore.core", "memcore.recall", "memcore.storage", "memcore.stores",
                         "memcore.embedders", "memcore.integrations", "memcore.agent",
                         "memcore.tiered", "memcore.commands", "memcore.cli", "memcore.open",
                         "memcore.views", "memcore.errors", "memcore.types")),
    ("memcore.recall", ("memcore.core", "memcore.storage", "memcore.stores", "memcore.tiered",
                        "memcore.agent", "memcore.integrations", "memcore.commands",
                        "memcore.cli", "memcore.open", "memcore.views")),
    ("memcore.core", ("memcore.storage", "memcore.stores", "memcore.tiered", "memcore.agent",
                      "memcore.integrations", "memcore.commands", "memcore.cli",
                      "memcore.open", "memcore.views")),
    ("memcore.storage", ("memcore.stores", "memcore.tiered", "memcore.agent",
                         "memcore.integrations", "memcore.commands", "memcore.cli",
                         "memcore.open", "memcore.views")),
])
def test_a_layer_imports_nothing_above_it(layer, forbidden):
    up = sorted((m, t) for m, ts in GRAPH.items() if _under(m, layer)
                for t in ts if _under(t, *forbidden))
    assert not up, f"{layer} imports from above it: {up}"


def test_only_the_cli_imports_the_commands():
    users = sorted(m for m, ts in GRAPH.items()
                   if ts & {"memcore.commands", "memcore.cli"} and m not in
                   ("memcore.cli", "memcore.__main__"))
    assert not users, f"only memcore.cli may import memcore.commands/cli: {users}"


def test_no_import_cycles():
    state: dict[str, int] = {}                      # 1 on the stack, 2 done
    cycles = []

    def visit(m, stack):
        state[m] = 1
        stack.append(m)
        for t in sorted(GRAPH[m]):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m, [])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)
