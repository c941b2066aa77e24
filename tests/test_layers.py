"""The layer rule of docs/DESIGN.md §3: a module's layer is its folder; imports only sideways or down, no cycle."""

from __future__ import annotations

import ast
import re

import pytest

from repro.core.paths import ROOT

PACKAGES = ("repro", "analysis")


def layer_table() -> dict[str, int]:
    """Folder (``repro/core/``) or file (``analysis/gate.py``) → layer number, read from the design document's table."""
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    assert not re.search(r"^(<{7}|={7}|>{7})( |$)", text, re.M), "docs/DESIGN.md holds merge-conflict markers"
    rows = re.findall(r"^\| (\d) \| [^|]+ \| (.+) \|$", text, re.M)
    numbers = [n for n, _ in rows]
    assert len(numbers) == len(set(numbers)), f"a layer listed twice in docs/DESIGN.md: {numbers}"
    table = {}
    for number, places in rows:
        for place in re.findall(r"`([^`]+)`", places):
            assert place not in table, f"{place} is in two layers of docs/DESIGN.md"
            table[place] = int(number)
    return table


def module_files() -> dict[str, str]:
    """Module name → its path relative to the repository, for every module of the two packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = rel.as_posix()
    return found


def layer_of(path: str, table: dict[str, int]) -> int | None:
    """The layer of the file at ``path``: the table's entry for the file itself, else for its nearest folder."""
    if path in table:
        return table[path]
    folder = path.rsplit("/", 1)[0]
    while folder:
        if folder + "/" in table:
            return table[folder + "/"]
        folder = folder.rsplit("/", 1)[0] if "/" in folder else ""
    return None


def imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The suite's modules that ``name`` imports anywhere in its body (``from x import y`` resolves y if a module),
    and those it names in a string (``importlib.import_module("analysis.cli.gate")``, ``python -c "from … "``):
    a module imported by its name is an import too."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{name}: a relative import (from {'.' * node.level}{node.module or ''}): name the module")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a module's name, or code that imports
            named = {node.value} | set(re.findall(r"(?:^|;\s*|\n\s*)(?:from|import)\s+([\w.]+)", node.value))
            out |= {m for m in named if "." in m and m in known and m != name}
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        out |= {t for t in targets if t in known and t != name}
    return out


@pytest.fixture(scope="module")
def files():
    return module_files()


@pytest.fixture(scope="module")
def trees(files):
    """Each module's syntax tree, parsed once for the module's tests."""
    return {name: ast.parse((ROOT / path).read_text(), path) for name, path in files.items()}


@pytest.fixture(scope="module")
def graph(files, trees):
    return {name: imports(name, tree, set(files)) for name, tree in trees.items()}


def test_the_table_names_folders_that_exist():
    for place in layer_table():
        assert (ROOT / place).exists(), f"docs/DESIGN.md §3 names {place}, which does not exist"


def test_every_module_sits_in_a_layer_folder(files):
    table = layer_table()
    assert table, "docs/DESIGN.md lost its layer table"
    missing = [path for path in files.values() if layer_of(path, table) is None]
    assert not missing, f"modules outside every layer folder (move them, or add the folder to docs/DESIGN.md §3): {missing}"


def test_no_import_points_up(graph, files):
    table = layer_table()
    up = [(m, t) for m, targets in graph.items() for t in targets
          if layer_of(files[t], table) > layer_of(files[m], table)]
    assert not up, f"imports that run back up a layer: {up}"


def test_measuring_never_imports_judging(graph):
    back = [(m, t) for m, targets in graph.items() if m.split(".")[0] == "repro"
            for t in targets if t.split(".")[0] == "analysis"]
    assert not back, f"repro/ imports analysis/: {back}"


#: The layers whose modules compile or run kernels (the backends and what gathers with them).
GATHERING = ("repro.backends", "repro.runners", "repro.toy", "repro.learning", "repro.bench")


def _data_names(tree: ast.Module) -> dict[str, str]:
    """A module's top-level names that are data: classes and UPPER_CASE constants (name → what it is)."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            out[node.name] = "class"
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        out |= {t.id: "constant" for t in targets if isinstance(t, ast.Name) and t.id.isupper()}
    return out


def test_judging_and_presenting_run_no_kernel(trees):
    """Judgement and presentation are functions of what was gathered (the command lines call the gathering, then
    the judgement: analysis/cli/evaluate.py). From the backends and the gathering layers they take data types and
    constants only (Evidence, Run, Traces, GROUPS, the benchmark's mode registry), never a function or a whole
    module: whatever they could call there might run a kernel. Every import, function-level ones included."""
    data = {name: _data_names(tree) for name, tree in trees.items() if name.startswith(GATHERING)}
    for name in data:  # a package re-exports its modules' data (``from repro.toy import COLLAPSE``)
        for node in trees[name].body:
            if isinstance(node, ast.ImportFrom) and node.module in data:
                data[name] |= {a.name: data[node.module][a.name] for a in node.names if a.name in data[node.module]}
    wrong = []
    for name, tree in trees.items():
        if not name.startswith(("analysis.judge", "analysis.present")):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                wrong += [(name, a.name) for a in node.names if a.name.startswith(GATHERING)]
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(GATHERING):
                wrong += [(name, f"{node.module}.{a.name}") for a in node.names
                          if a.name not in data.get(node.module, {})]
    assert not wrong, f"judgement or presentation imports a function or module of a gathering layer: {wrong}"


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


def test_no_library_module_imports_the_tests(trees):
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert not any(n and n.split(".")[0] in ("tests", "conftest") for n in names), name


def test_no_test_module_imports_another():
    """Shared test material lives in tests/catalogue.py, tests/commands.py or conftest.py's fixtures: a test module
    importing another runs that module's tests' set-up as a side effect and hides what is shared."""
    modules = sorted((ROOT / "tests").rglob("test_*.py"))
    assert (ROOT / "tests" / "deep" / "test_sentinel.py") in modules  # the folders below tests/ too
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                found = [n for n in names if n and n.split(".")[-1].startswith("test_")]
                assert not found, f"{path.relative_to(ROOT)} imports {found}"
