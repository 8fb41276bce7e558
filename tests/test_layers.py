"""The package's modules import one way: no cycle among them, the bottom layers import nothing
above them, each folder imports only its own layer and the layers below it, and only the
command line imports the command line.

The import graph is read from the source with ``ast``: every ``import`` and ``from ... import``
of a ``tokenwire`` module, at module level and inside functions (a deferred import is a
dependency all the same, only a later one). ``from package import name`` is an edge to the
submodule ``package.name`` when there is one, else to ``package``. The parent packages that
Python initializes on the way to a submodule are not edges: every module would depend on the
facade and the graph would say nothing.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tokenwire

PACKAGE = "tokenwire"
ROOT = Path(tokenwire.__file__).parent

# Edges that stay, each with its reason; checked to exist and to be deferred.
DEFERRED_ALLOWED: dict[tuple[str, str], str] = {
    ("tokenwire.base._types", "tokenwire.arrow"): (
        "GenerateResponse.to_arrow() is the method form of tokenwire.arrow.record_batch, which "
        "builds from the result types; it loads the Arrow layer only when called"
    ),
    ("tokenwire", "tokenwire.auditing._audit"): (
        "tokenwire.audit and tokenwire.Verdict are loaded when first asked for (the package's "
        "__getattr__), so that import tokenwire loads no module of the audit"
    ),
}

# The folders of src/tokenwire/ (and its top-level modules) by layer, lowest first: a module
# imports only modules of its own layer and of the layers below it, save the allowed edges.
LAYERS: list[list[str]] = [
    ["tokenwire.base"],  # wire constants, JSON reader, errors, result types, wire table, options
    ["tokenwire.kernels"],
    ["tokenwire.extract"],
    ["tokenwire.rules"],
    ["tokenwire._core", "tokenwire._pycore"],  # the two peers
    ["tokenwire.read"],  # the selector, head selection, the format registry
    ["tokenwire.batch", "tokenwire.write", "tokenwire.arrow", "tokenwire.samples"],
    ["tokenwire", "tokenwire._docs"],  # the facade
    ["tokenwire.auditing"],
    ["tokenwire.ray"],
    ["tokenwire.compat"],
    ["tokenwire.cli", "tokenwire.__main__"],
]

# The bottom layers, lowest first: each imports only modules before it in this list.
BOTTOM = ["tokenwire.base._wire", "tokenwire.base._json", "tokenwire.base._errors", "tokenwire.base._types"]

# ``python -m tokenwire`` is the command line's entry point.
CLI_ENTRY = {"tokenwire.__main__"}


def _module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# The compiled core's Python imports (its .pyx and the files it includes are Cython, which ast
# cannot read): whole lines ``from X import a, b`` / ``import X`` (never ``cimport``),
# parenthesized lists included.
_PYX_IMPORT = re.compile(r"^[ \t]*(from[ \t]+[\w.]+[ \t]+import[ \t]+(?:\([^)]*\)|[^\n]*)|import[ \t]+[\w., \t]+)$",
                         re.MULTILINE)
# A Cython ``include "file.pxi"`` line (its path relative to the including file).
_PYX_INCLUDE = re.compile(r'^[ \t]*include[ \t]+"([^"]+)"[^\n]*$', re.MULTILINE)


def _cython_text(path: Path) -> str:
    """A Cython file's text with every file it includes in place of its ``include`` line."""
    return _PYX_INCLUDE.sub(lambda m: _cython_text(path.parent / m[1]), path.read_text("utf-8"))


def _imports(path: Path) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement of a module, and whether it runs inside a function."""
    if path.suffix == ".pyx":
        text = _cython_text(path)
        nodes = [ast.parse(m[1].strip()).body[0] for m in _PYX_IMPORT.finditer(text) if "cimport" not in m[1]]
        return [(node, False) for node in nodes if isinstance(node, (ast.Import, ast.ImportFrom))]
    text = path.read_text("utf-8")
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def walk(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, deferred))
            inner = deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            walk(child, inner)

    walk(ast.parse(text, str(path)), False)
    return found


def _graph() -> tuple[set[str], dict[tuple[str, str], bool]]:
    """The package's modules, and each import edge between two of them -> whether every import
    making it is deferred."""
    paths = {_module_name(p): p for p in ROOT.rglob("*.py")}
    core = ROOT / "_core.pyx"
    if core.exists():  # a source tree; installed wheels ship the compiled module only
        paths[f"{PACKAGE}._core"] = core
    elif any(ROOT.glob("_core.*")):
        paths[f"{PACKAGE}._core"] = ROOT / "_core"  # a node, its own imports unknown
    modules = set(paths)
    edges: dict[tuple[str, str], bool] = {}
    for module, path in paths.items():
        if not path.exists():
            continue
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node, deferred in _imports(path):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                if target.split(".")[0] != PACKAGE or target == module:
                    continue
                assert target in modules, f"{module} imports {target}, which is no module of the package"
                edges[module, target] = edges.get((module, target), True) and deferred
    return modules, edges


def _cycle(modules: set[str], edges: set[tuple[str, str]]) -> list[str] | None:
    """One import cycle (its modules in order, the first repeated last), or None."""
    following: dict[str, list[str]] = {m: [] for m in modules}
    for source, target in sorted(edges):
        following[source].append(target)
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    for start in sorted(modules):
        if start in state:
            continue
        path, stack = [start], [iter(following[start])]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(following[nxt]))
    return None


def test_import_tokenwire_loads_no_command_line_module():
    """``import tokenwire`` (and ``import tokenwire.ray``) loads nothing of ``tokenwire.cli``:
    the audit is the library's, the command line imports it."""
    code = (
        "import sys, tokenwire; print(sorted(m for m in sys.modules if m.startswith('tokenwire.cli')))\n"
        "import tokenwire.ray; print(sorted(m for m in sys.modules if m.startswith('tokenwire.cli')))\n"
        "print(tokenwire.audit(b'{}').defect, tokenwire.Verdict.__module__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=None)
    assert done.stdout.splitlines() == ["[]", "[]", "unrecognized tokenwire.auditing._audit"]


def _layer(module: str) -> int:
    """The index in LAYERS of a module's folder (or of the module itself)."""
    for i, names in enumerate(LAYERS):
        for name in names:
            if module == name or (name != PACKAGE and module.startswith(name + ".")):
                return i
    raise AssertionError(f"{module} is in no layer of LAYERS: add its folder")


def test_import_tokenwire_loads_no_audit_ray_or_command_line_module():
    """``import tokenwire`` loads the read path, the batch path and the writer, and nothing of
    the audit, Ray or the command line until asked."""
    code = ("import sys, tokenwire\n"
            "print(sorted(m for m in sys.modules if m.split('.')[:2] in (['tokenwire', 'auditing'], "
            "['tokenwire', 'ray'], ['tokenwire', 'cli']) or m == 'ray'))\n"
            "tokenwire.audit\n"
            "print(sorted(m for m in sys.modules if m.startswith('tokenwire.auditing')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == [
        "[]", "['tokenwire.auditing', 'tokenwire.auditing._audit', 'tokenwire.auditing._capture', "
        "'tokenwire.auditing._formats']"]


def test_every_module_has_a_layer_and_imports_none_above_it():
    modules, edges = _graph()
    for module in modules:
        _layer(module)
    upward = sorted((s, t) for s, t in edges if _layer(t) > _layer(s) and (s, t) not in DEFERRED_ALLOWED)
    assert upward == [], "imports of a higher layer: " + ", ".join(f"{s} -> {t}" for s, t in upward)


def test_the_graph_is_read():
    """The graph holds what the package is known to import (so an empty one cannot pass)."""
    modules, edges = _graph()
    assert {"tokenwire", "tokenwire.read._select", "tokenwire.rules.generate", "tokenwire.cli.commands"} <= modules
    assert edges.get(("tokenwire", "tokenwire.read._select")) is False  # at module level
    assert ("tokenwire.read._select", "tokenwire._pycore") in edges
    assert ("tokenwire._pycore", "tokenwire.rules.generate") in edges
    assert ("tokenwire.cli", "tokenwire.cli.commands") in edges  # deferred
    for edge in DEFERRED_ALLOWED:
        assert edges.get(edge) is True, f"allowed edge {edge} is gone or no longer deferred: drop it"


def test_cython_imports_are_read_through_includes(tmp_path):
    """An import written in a file the compiled core includes is an edge all the same."""
    (tmp_path / "part.pxi").write_text("from ._types import Ragged\ncimport numpy as cnp\n", "utf-8")
    (tmp_path / "mod.pyx").write_text('import os\ninclude "part.pxi"  # a part\nfrom . import _json\n', "utf-8")
    assert [ast.unparse(node) for node, _ in _imports(tmp_path / "mod.pyx")] == [
        "import os", "from ._types import Ragged", "from . import _json"]
    core = ROOT / "_core.pyx"
    if core.exists():  # a source tree: every file the core includes is there and read
        included = _PYX_INCLUDE.findall(core.read_text("utf-8"))
        assert "_fields.pxi" in included and len(included) > 1
        assert "cdef class _Scan" in _cython_text(core)


def test_no_import_cycle():
    """No cycle among the package's modules, counting deferred imports, save the allowed edges."""
    modules, edges = _graph()
    cycle = _cycle(modules, set(edges) - set(DEFERRED_ALLOWED))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())
    assert _cycle(modules, {e for e, deferred in edges.items() if not deferred}) is None


@pytest.mark.parametrize("module", BOTTOM)
def test_bottom_layers_import_nothing_above_them(module):
    """Wire constants, the JSON reader, the errors and the result types import only the layers
    below them."""
    _, edges = _graph()
    below = set(BOTTOM[: BOTTOM.index(module)])
    above = sorted(t for s, t in edges if s == module and t not in below and (s, t) not in DEFERRED_ALLOWED)
    assert above == [], f"{module} imports {above}"


def test_the_peers_import_neither_each_other_nor_what_chooses_them():
    """The compiled core and its pure-Python peer sit side by side below the selector: neither
    imports the other, the selector or the facade."""
    _, edges = _graph()
    peers = (f"{PACKAGE}._core", f"{PACKAGE}._pycore")
    above = {*peers, f"{PACKAGE}._select", PACKAGE}
    found = sorted((s, t) for s, t in edges if s in peers and t in above)
    assert found == []


def test_only_the_command_line_imports_the_command_line():
    _, edges = _graph()
    outside = sorted((s, t) for s, t in edges
                     if t.startswith("tokenwire.cli") and not s.startswith("tokenwire.cli") and s not in CLI_ENTRY)
    assert outside == []
