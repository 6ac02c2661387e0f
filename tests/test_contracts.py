"""One home per rule, held by tests: only onite/spool/ writes the spool's files, only SpoolDir
(onite/spool/paths.py) builds a path from the spool's folder and file names, and docs/security.md's
count of the attack tests is the tests marked ``attack``.

Each checker of the package reads its source (an AST, no import) and is shown to find a violation
planted in a few lines of source, so that a checker that finds nothing is known to be looking.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "onite"

# ---- (a) what creates, renames, removes or changes the mode of a file -------------------------

OS_WRITES = frozenset({"rename", "renames", "replace", "link", "unlink", "remove", "removedirs", "rmdir", "mkdir",
                       "makedirs", "chmod", "fchmod", "lchmod", "chown", "fchown", "lchown", "symlink", "mknod",
                       "mkfifo", "truncate", "O_CREAT", "O_TRUNC"})
SHUTIL_READS = frozenset({"which", "disk_usage", "get_terminal_size"})
PATH_WRITES = frozenset({"write_text", "write_bytes", "touch", "mkdir", "unlink", "rename", "chmod", "lchmod",
                         "rmdir", "symlink_to", "hardlink_to"})  # and replace(target): one argument


def _scopes(tree: ast.AST):
    """Each node of ``tree`` with the qualified name of the function (or class) it is in."""
    def walk(node: ast.AST, scope: str):
        yield node, scope
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = node.name if scope == "<module>" else f"{scope}.{node.name}"
        for child in ast.iter_child_nodes(node):
            yield from walk(child, scope)
    return walk(tree, "<module>")


def _writes_by_mode(mode: ast.expr | None) -> bool:
    """Does an open() mode write (``w``, ``a``, ``x``, ``+``)? One that is not a literal is taken to."""
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return bool(set(mode.value) & set("wax+"))
    return True


def file_writes(source: str) -> list[tuple[int, str, str]]:
    """Every place ``source`` creates, renames, removes or changes the mode of a file, as ``(line,
    function, operation)``: os's calls (``os.X``, or X imported from os) and O_CREAT or O_TRUNC for
    os.open, open() and Path.open() for writing, Path's writing methods, any of shutil's but its
    reads. A reference counts, called or not (``remove = os.unlink``)."""
    tree = ast.parse(source)
    imported = {alias.asname or alias.name: f"{node.module}.{alias.name}" for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module in ("os", "shutil") for alias in node.names}
    found = []
    for node, scope in _scopes(tree):
        what = None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("os", "shutil"):
            what = f"{node.value.id}.{node.attr}"
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in imported:
            what = imported[node.id]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            method = isinstance(func, ast.Attribute) and not (isinstance(func.value, ast.Name)
                                                              and func.value.id in ("os", "io"))
            if name == "open" and not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                                       and func.value.id == "os"):
                mode = next((k.value for k in node.keywords if k.arg == "mode"), None)
                at = 0 if method else 1  # Path.open(mode), open(path, mode)
                if mode is None and len(node.args) > at:
                    mode = node.args[at]
                if _writes_by_mode(mode):
                    found.append((node.lineno, scope, "open(write)"))
            elif method and (name in PATH_WRITES or (name == "replace" and len(node.args) == 1 and not node.keywords)):
                found.append((node.lineno, scope, f"Path.{name}"))
        if what is not None:
            module, _, name = what.partition(".")
            if (module == "os" and name in OS_WRITES) or (module == "shutil" and name not in SHUTIL_READS):
                found.append((node.lineno, scope, what))
    return found


# ---- (b) what builds a path from the spool's names --------------------------------------------

# The spool's folder and file names (onite.spool.paths): in a path, any of them; anywhere (a string
# with no space: not a sentence for people), the ones no other string could be
FOLDER_NAMES = ("jobs", "urgent", "running", "jobsdone", "stdout", "cancel", "refused", "recur", "hold", "locks")
IN_A_PATH = re.compile(r"(?:^|/)(?:" + "|".join(FOLDER_NAMES) + r"|P)(?:/|$)")
ANYWHERE = re.compile(r"onite\.toml|onite\.log|recur\.state|recur\.lock|driver\.lock|jobsdone|@run\b|@result\b|@stderr\b"
                      r"|^(?:driver|cron|daemon|wake)\.$|^\.(?:state|lock)$"
                      r"|(?:^|/)(?:driver|cron|daemon)\.[^/]*\.(?:state|lock)$|(?:^|/)wake\.[^/]*$")
PATH_CONSTANTS = frozenset({"RESULT", "RUN_RECORD", "STDERR"})
PATH_CALLS = frozenset({"join", "joinpath", "with_name", "Path", "PurePath"})


def _text(node: ast.AST) -> str | None:
    """The text of a string literal, or of an f-string's literal parts with each field as ``{}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _in_a_path(node: ast.AST) -> bool:
    """Is ``node``, a part of a path, one of the spool's names (or a constant of onite.spool.paths)?"""
    text = _text(node)
    if text is not None:
        return any(IN_A_PATH.search(piece) or ANYWHERE.search(piece) for piece in text.split("{}"))
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name in PATH_CONSTANTS


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def spool_paths(source: str) -> list[tuple[int, str, str]]:
    """Every place ``source`` makes a path (or a file name) of the spool's names, as ``(line, function,
    text)``: a name joined into a path (``x / "jobs"``, ``os.path.join(root, "hold")``,
    ``Path(root, "locks")``, ``root + "/stdout"``, ``f"{root}/running/{host}"``, ``f"{name}@run"``,
    a constant of onite.spool.paths in any of those), or a string that can only be one of its file
    names (``"onite.log"``, ``"driver."``, ``".state"``)."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    found = set()
    for node, scope in _scopes(tree):
        parts: list[ast.AST] = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts = [node.left, node.right]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            if any("/" in (_text(side) or "") for side in (node.left, node.right)):
                parts = [node.left, node.right]
        elif isinstance(node, ast.JoinedStr):
            text = _text(node)
            parts = [v.value for v in node.values if isinstance(v, ast.FormattedValue)]  # f"{name}{RESULT}"
            if not re.search(r"\s", text) and ("/" in text or "@" in text):
                parts.append(node)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in PATH_CALLS and not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Constant)):
                parts = list(node.args)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            if not re.search(r"\s", node.value) and ANYWHERE.search(node.value):
                found.add((node.lineno, scope, repr(node.value)[:80]))
        if any(_in_a_path(part) for part in parts):
            found.add((node.lineno, scope, ast.unparse(node)[:80]))
    return sorted(found)



# ---- where the package may do either, and why ---------------------------------------------------

# Writes outside onite/spool/ of files that are no spool files: (module, function) → what and why.
WRITES_OF_OTHER_FILES = {
    ("onite/__main__.py", "_fill_closed_streams"): "reopens a standard stream the caller closed, on /dev/null",
    ("onite/cli/reportpage.py", "_replace"): "the HTML report, written to the file the user named (--html FILE)",
    ("onite/exec/contain.py", "_mkdir"): "a job's cgroup, under /sys/fs/cgroup",
    ("onite/exec/contain.py", "remove_base"): "the folder of the jobs' cgroups, under /sys/fs/cgroup",
    ("onite/exec/contain.py", "_probe"): "a trial cgroup, made and removed at once, under /sys/fs/cgroup",
    ("onite/exec/contain.py", "remove_cgroup"): "a job's cgroup, once empty",
    ("onite/exec/contain.py", "write_file"): "a cgroup's control files (cgroup.kill, memory.max, cpu.max, …)",
    ("onite/exec/contain.py", "sweep_stale"): "empty job cgroups left by dead runs",
    ("onite/exec/limits.py", "discover"): "the folders of the cgroup v1 groups that hold jobs to their requests",
    ("onite/exec/limits.py", "remove"): "a run's cgroup v1 groups, once empty",
}

# Strings of the spool's names outside onite/spool/paths.py that make no spool path: (module, function) → why.
NAMES_THAT_ARE_NO_SPOOL_PATH = {
    ("onite/core/config.py", "parse_config"): "the file name its messages give when no path is known",
    ("onite/spool/locate.py", "<module>"): "/etc/onite.toml, the machine's file that says where the system spool is",
    ("onite/spool/skeleton.py", "skeleton_config"): "the package's own skel/onite.toml, the text init writes",
    ("onite/spool/results.py", "damaged_note"): "a warning that names the damaged records, relative to the spool",
}

def modules(*, outside: str) -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if not p.is_relative_to(PACKAGE / outside))


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def test_only_the_spool_package_writes_files():
    """Outside onite/spool/ nothing creates, renames, removes or changes the mode of a file but the
    files of WRITES_OF_OTHER_FILES, which are no spool files: a spool file another module needs
    written is asked of onite.spool."""
    allowed = WRITES_OF_OTHER_FILES.keys()
    found = {(rel(path), scope): f"line {line}: {what}" for path in modules(outside="spool")
             for line, scope, what in file_writes(path.read_text())}
    assert {key: what for key, what in found.items() if key not in allowed} == {}
    assert WRITES_OF_OTHER_FILES.keys() <= found.keys(), "an entry that is no longer needed"


def test_only_spooldir_builds_spool_paths():
    """Outside onite/spool/paths.py nothing joins the spool's folder or file names into a path: every
    spool path comes from SpoolDir."""
    allowed = NAMES_THAT_ARE_NO_SPOOL_PATH.keys()
    found = {(rel(path), scope): f"line {line}: {text}" for path in modules(outside="spool/paths.py")
             for line, scope, text in spool_paths(path.read_text())}
    assert {key: text for key, text in found.items() if key not in allowed} == {}
    assert NAMES_THAT_ARE_NO_SPOOL_PATH.keys() <= found.keys(), "an entry that is no longer needed"


# ---- each checker finds what it is there to find ----------------------------------------------


@pytest.mark.parametrize("line, what", [
    ("os.rename(a, b)", "os.rename"),
    ("os.replace(a, b)", "os.replace"),
    ("os.unlink(p)", "os.unlink"),
    ("os.makedirs(p, exist_ok=True)", "os.makedirs"),
    ("os.fchmod(fd, 0o600)", "os.fchmod"),
    ("os.open(p, os.O_WRONLY | os.O_CREAT, 0o600)", "os.O_CREAT"),
    ("os.open(p, FLAGS | O_TRUNC)", "os.O_TRUNC"),
    ("remove = os.remove", "os.remove"),
    ("open(p, 'w')", "open(write)"),
    ("open(p, mode='ab')", "open(write)"),
    ("path.open('r+')", "open(write)"),
    ("path.write_text('x')", "Path.write_text"),
    ("path.touch()", "Path.touch"),
    ("path.replace(other)", "Path.replace"),
    ("path.chmod(0o644)", "Path.chmod"),
    ("shutil.rmtree(p)", "shutil.rmtree"),
    ("move(a, b)", "shutil.move"),
])
def test_the_write_checker_finds_a_planted_write(line, what):
    source = f"import os, shutil\nfrom os import O_TRUNC\nfrom shutil import move\n\n\ndef f(p):\n    {line}\n"
    assert (7, "f", what) in file_writes(source)


def test_the_write_checker_leaves_reads_alone():
    source = ("import os, shutil\n"
              "def f(p, fd):\n"
              "    open(p).read(); open(p, 'rb'); p.open(); os.open(p, os.O_RDONLY); os.lstat(p)\n"
              "    'a-b'.replace('-', '_'); shutil.which('sh'); p.read_text(); os.write(fd, b'x')\n")
    assert file_writes(source) == []


@pytest.mark.parametrize("line", [
    "spool.root / 'jobs'",
    "root / 'jobs' / f'P{n}'",
    "spool.root / RESULT",
    "os.path.join(root, 'running', host)",
    "Path(root, 'locks')",
    "root.joinpath('stdout', name)",
    "str(root) + '/cancel'",
    "f'{root}/refused/{name}'",
    "f'{folder}/{name}@run'",
    "f'{name}{RESULT}'",
    "f'driver.{host}.state'",
    "'onite.log'",
    "root / 'driver.lock'",
    "('cron.', '.state')",
])
def test_the_path_checker_finds_a_planted_spool_path(line):
    source = f"def f(root, spool, name, host, folder, n):\n    x = {line}\n"
    assert {(line_no, scope) for line_no, scope, _ in spool_paths(source)} == {(2, "f")}


def test_the_path_checker_leaves_words_and_sentences_alone():
    source = ('"""The jobs/ folder and onite.log: a docstring."""\n'
              "def f(spool, state, name, host):\n"
              "    state = 'running'; kind = 'cancel'; label = f'P{3}'; pid_file = '/run/cron.pid'\n"
              "    spool.jobs_dir / name; spool.state_path(HEARTBEAT, host); name.endswith(RESULT)\n"
              "    raise ValueError(f'no job in {spool.root}/jobs: see onite.log')\n")
    assert spool_paths(source) == []


# ---- (c) the attack tests docs/security.md counts and names -------------------------------------

def attack_tests() -> dict[str, tuple[list[str], list[str]]]:
    """By file: the test functions marked ``attack`` (a decorator, or the module's ``pytestmark``), and those of
    them that are property-based fuzzers (``@given``)."""
    found = {}
    for path in sorted((REPO / "tests").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        whole = any(isinstance(node, ast.Assign) and "pytest.mark.attack" in ast.unparse(node.value)
                    and any(getattr(target, "id", None) == "pytestmark" for target in node.targets) for node in tree.body)
        marked, fuzzers = [], []
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                decorators = [ast.unparse(d) for d in node.decorator_list]
                if whole or "pytest.mark.attack" in decorators:
                    marked.append(node.name)
                    if any(d.startswith("given(") for d in decorators):
                        fuzzers.append(node.name)
        if marked:
            found[path.name] = (marked, fuzzers)
    return found


def test_security_md_counts_the_attack_tests_and_names_only_them():
    """docs/security.md's count of the attack tests (and README's) is the number of tests marked ``attack``, and
    every test its table of attacks names is one of them."""
    found = attack_tests()
    total = sum(len(marked) for marked, _ in found.values())
    fuzzers = sum(len(fuzz) for _, fuzz in found.values())
    doc = (REPO / "docs" / "security.md").read_text()
    section = doc[doc.index("## The attacks the test suite makes"):]
    section = section[:section.index("\n## ")]
    said = re.search(r"\*\*(\d+)\s+attack\s+tests,\s+all\s+refused\*\*.*?(\d+)\s+attacks\s+made\s+as\s+a\s+user.*?"
                     r"(\d+)\s+property-based\s+fuzzers", section, re.S)
    assert said and tuple(map(int, said.groups())) == (total, total - fuzzers, fuzzers), (total, fuzzers)
    assert f"the {total} attacks the tests make" in (REPO / "README.md").read_text()
    marked = {name for names, _ in found.values() for name in names}
    assert set(re.findall(r"`(test_[a-z0-9_]+)`", section)) - marked == set()


def _resolves(dotted: str) -> bool:
    """Does ``onite.<dotted>`` name a module, or a name a module defines (a class's attribute too)?"""
    import importlib

    parts = f"onite.{dotted}".split(".")
    for i in range(len(parts), 1, -1):
        try:
            found = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attribute in parts[i:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_the_docs_name_only_modules_and_functions_that_exist():
    """Every `app.x`, `core.x.y`, `spool.x` … the docs name in backquotes is there: a rename or a removal
    that leaves a doc naming the old place fails here, not in a reader's hands."""
    named = {(doc.name, m.group(1)) for doc in (REPO / "docs").glob("*.md")
             for m in re.finditer(r"`(?:onite\.)?((?:app|cli|core|drain|exec|spool)\.[A-Za-z_][\w.]*)`", doc.read_text())}
    assert named and [pair for pair in sorted(named) if not _resolves(pair[1])] == []


NOT_YOURS = re.compile(r"""f["']no job \{[^}]*\}[^"']* of yours""")


def test_one_wording_of_a_name_that_is_no_job_of_yours():
    """``no job 'x' of yours`` is worded in core.errors.not_yours alone; every command that says it (cancel,
    hold, edit, restart, output, wait, submit --after) asks spool.scan.namesake_error or not_yours."""
    found = [rel(path) for path in PACKAGE.rglob("*.py") for line in path.read_text().splitlines()
             if NOT_YOURS.search(line)]
    assert found == ["onite/core/errors.py"]
    assert NOT_YOURS.search('''raise NotFound(f"no job {text!r} of yours", hint)''')  # what it catches
