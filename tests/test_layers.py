"""The layers stay what docs/internals.md says: imports flow one way, the monitor imports what it may,
every package's __init__ is empty."""

import ast
import collections
import contextlib
import io
import re
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "onite"
LAYERS = ("core", "spool", "exec", "drain", "app", "cli")


def test_import_linter_contracts_are_kept():
    """pyproject.toml's contracts: the layers, typer and rich only in the command line, a pure core."""
    importlinter = pytest.importorskip("importlinter.cli", reason="needs import-linter (the test extra)")
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        code = importlinter.lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True, no_logo=True)
    assert code == 0, said.getvalue()


def imports_of(path: Path) -> set[str]:
    """The modules a file imports, at any depth (lazy imports inside functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update(f"{node.module}.{alias.name}" if node.module == "onite.exec" else node.module
                         for alias in node.names)
    return found


def test_the_monitor_imports_little():
    """A job's monitor is a fresh interpreter that imports only what it needs (it starts in a few
    milliseconds, and nothing of the driver is in it): os, select, signal, json, socket, time, dataclasses,
    datetime, subprocess (its C fork and exec start the job) and the exec modules it runs; pamela (ctypes over
    libpam) only where jobs get a PAM session, imported once as the monitor starts, before any job."""
    allowed = {"__future__", "os", "select", "signal", "json", "socket", "time", "dataclasses", "datetime",
               "subprocess", "onite.exec.contain", "onite.exec.limits", "onite.exec.jobstart", "onite.exec.jobend",
               "onite.exec.plan", "onite.exec.pam"}
    assert imports_of(PACKAGE / "exec" / "monitor.py") <= allowed
    assert imports_of(PACKAGE / "exec" / "plan.py") <= {"__future__", "os", "marshal", "socket", "dataclasses"}
    assert imports_of(PACKAGE / "exec" / "jobend.py") <= {"__future__", "os", "signal", "time", "onite.exec.contain",
                                                          "onite.exec.limits", "onite.exec.plan"}
    assert imports_of(PACKAGE / "exec" / "jobstart.py") <= {"__future__", "os", "errno", "signal", "subprocess",
                                                            "onite.exec.plan"}
    assert {name for name in imports_of(PACKAGE / "exec" / "contain.py") if name.startswith("onite")} == set()
    assert imports_of(PACKAGE / "exec" / "limits.py") <= {"__future__", "errno", "os", "onite.exec.contain"}
    assert imports_of(PACKAGE / "exec" / "pam.py") <= {"__future__", "json", "os", "sys", "pamela"}


@pytest.mark.parametrize("layer", LAYERS)
def test_every_packages_init_is_empty(layer):
    """Importing a package costs nothing: ``onite submit`` starts in a few tens of milliseconds."""
    assert (PACKAGE / layer / "__init__.py").read_text() == ""


def test_the_folder_listing_is_the_layer_map():
    """Every module is in one of the layers (or is an entry point: __main__, api)."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "api.py"]
    assert sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(
        [*LAYERS, "skel"])


def module_list_problems(doc: str, tree: set[str]) -> dict[str, list[str]]:
    """What the "Modules" section of ``doc`` gets wrong about ``tree`` (module paths under onite/): the
    modules it does not name, the names of modules that do not exist, and the modules named twice."""
    if "\n## Modules\n" not in doc:
        return {"no '## Modules' section": [""]}
    section = doc.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    named = collections.Counter(re.findall(r"`([\w/]+\.py)`", section))
    return {"not named": sorted(tree - set(named)), "no such module": sorted(set(named) - tree),
            "named twice": sorted(name for name, count in named.items() if count > 1)}


def test_internals_names_every_module_once():
    """docs/internals.md names every .py under onite/ once, and no module that does not exist: the map a
    newcomer reads cannot drift from the tree."""
    tree = {str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")}
    problems = module_list_problems((REPO / "docs" / "internals.md").read_text(), tree)
    assert {what: names for what, names in problems.items() if names} == {}


def test_the_module_list_check_finds_a_planted_drift():
    doc = ("# x\n\n## Modules\n\n- `a.py` — a\n- `core/b.py` — b\n- `core/b.py` — b again\n- `gone.py` — c\n"
           "\n## Next\n`d.py`\n")
    assert module_list_problems(doc, {"a.py", "core/b.py", "new.py", "d.py"}) == {
        "not named": ["d.py", "new.py"], "no such module": ["gone.py"], "named twice": ["core/b.py"]}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def test_no_module_imports_itself_back():
    """No circle of imports, lazy ones counted: each module can be read, and moved, on its own."""
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        graph[module_name(path)] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:  # "from a.b import c": c is a module or a's symbol
                names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            graph[module_name(path)].update(name for name in names if name in graph)
    done, path_now = set(), []

    def visit(module: str) -> None:
        if module in path_now:
            raise AssertionError("import cycle: " + " -> ".join(path_now[path_now.index(module):] + [module]))
        if module in done:
            return
        path_now.append(module)
        for other in sorted(graph[module]):
            visit(other)
        path_now.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
