"""The layer rule of docs/DESIGN.md §3: every module in one layer, imports only sideways or down, no cycle."""

from __future__ import annotations

import ast
import fnmatch
import re

import pytest

from repro.paths import ROOT

PACKAGES = ("repro", "analysis")


def layer_table() -> dict[str, int]:
    """Module pattern → layer number, read from the design document's table."""
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    assert not re.search(r"^(<{7}|={7}|>{7})( |$)", text, re.M), "docs/DESIGN.md holds merge-conflict markers"
    rows = re.findall(r"^\| (\d) \| [^|]+ \| (.+) \|$", text, re.M)
    numbers = [n for n, _ in rows]
    assert len(numbers) == len(set(numbers)), f"a layer listed twice in docs/DESIGN.md: {numbers}"
    table = {}
    for number, modules in rows:
        for pattern in re.findall(r"`([^`]+)`", modules):
            table[pattern] = int(number)
    return table


def modules() -> dict[str, ast.Module]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = ast.parse(path.read_text(), str(path))
    return found


def layer_of(name: str, table: dict[str, int]) -> list[int]:
    return sorted({n for pattern, n in table.items() if name == pattern or fnmatch.fnmatchcase(name, pattern)})


def imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The suite's modules that ``name`` imports anywhere in its body (``from x import y`` resolves y if a module)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in known and t != name}
    return out


@pytest.fixture(scope="module")
def graph():
    mods = modules()
    return {name: imports(name, tree, set(mods)) for name, tree in mods.items()}


def test_every_module_has_exactly_one_layer(graph):
    table = layer_table()
    assert table, "docs/DESIGN.md lost its layer table"
    missing = [m for m in graph if len(layer_of(m, table)) != 1]
    assert not missing, f"modules in no layer or several (add them to docs/DESIGN.md §3): {missing}"


def test_no_import_points_up(graph):
    table = layer_table()
    up = [(m, t) for m, targets in graph.items() for t in targets
          if layer_of(t, table) and layer_of(m, table) and layer_of(t, table)[0] > layer_of(m, table)[0]]
    assert not up, f"imports that run back up a layer: {up}"


def test_no_import_cycle(graph):
    # Package __init__ modules re-export their children; the edge parent → child is not a cycle by itself.
    def edges(m):
        return {t for t in graph[m] if not t.startswith(m + ".")}

    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for t in edges(m):
            if state.get(t) == 1:
                raise AssertionError(f"import cycle: {' → '.join(path[path.index(t):] + [t])}")
            if t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [m])


def test_no_library_module_imports_the_tests(graph):
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not any(n and n.split(".")[0] in ("tests", "conftest") for n in names), name
