"""The package's layout: no import cycle, no import from a higher layer, subpackages' ``__init__.py`` only docstrings.

Imports are read with :mod:`ast` from every module of the package, those inside functions and under
``TYPE_CHECKING`` too (a lazy import that dodges a cycle is still a cycle). Each check is a function that
returns what it found, so that it is also shown to find a planted cycle and a planted upward import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import autograder

PACKAGE_ROOT = Path(autograder.__file__).resolve().parent

LAYERS = [
    ["autograder.kernel"],  # what runs in or around the student's kernel
    ["autograder.course", "autograder.table", "autograder.spreadsheet"],  # the course directory, tables, CSV cells
    ["autograder.pipeline"],  # nbgrader's steps and this course's plugins
    ["autograder.results"],  # reports, feedback pages
    ["autograder.grading"],  # one grading run, and the grade command
    ["autograder.authoring"],  # build, check, samples, mutants, validate
    ["autograder.harness"],  # demo, benchmark
    ["autograder.deploy"],  # the course on JupyterHub
    ["autograder.cli", "autograder.__main__", "autograder"],  # the CLI on top
]
"""The package's layers, lowest first: a module may import only from its own layer or lower ones. A module is in
the layer of the longest name here that is it or a package holding it."""


def package_modules(folder: Path, package: str) -> dict[str, Path]:
    """``{dotted name: file}`` of every module of the package in ``folder`` (a package by its own name)."""
    modules = {}
    for path in sorted(folder.rglob("*.py")):
        parts = [package, *path.relative_to(folder).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def import_graph(folder: Path, package: str) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}``, every ``import`` and ``from ... import`` anywhere in the
    module counted, relative ones resolved; ``from . import x`` names module ``x`` where there is one. An import
    of a name the package has no module for is kept as it is (:func:`missing_modules` lists those)."""
    modules = package_modules(folder, package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names if _inside(alias.name, package)}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(here.split(".")[: len(here.split(".")) - node.level + 1])
                    source = f"{base}.{node.module}" if node.module else base
                else:
                    source = node.module or ""
                if not _inside(source, package):
                    continue
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    targets.add(submodule if submodule in modules else source)
        graph[name] = targets - {name}
    return graph


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def missing_modules(folder: Path, package: str) -> list[tuple[str, str]]:
    """``(importer, name)`` for each import of a module of the package that does not exist."""
    modules = package_modules(folder, package)
    graph = import_graph(folder, package)
    return sorted((name, target) for name, targets in graph.items() for target in targets if target not in modules)


def import_cycles(folder: Path, package: str) -> list[list[str]]:
    """Each set of the package's modules that import one another in a circle (a strongly connected component of
    :func:`import_graph` with more than one module), sorted; empty when there is none."""
    graph = import_graph(folder, package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def layer_of(module: str, layers: list[list[str]]) -> int | None:
    """The index in ``layers`` of the longest name there that is ``module`` or a package holding it (None: none)."""
    matches = [(len(name), level) for level, names in enumerate(layers) for name in names if _inside(module, name)]
    return max(matches)[1] if matches else None


def unplaced_modules(folder: Path, package: str, layers: list[list[str]]) -> list[str]:
    """The package's modules that are in no layer."""
    return sorted(name for name in package_modules(folder, package) if layer_of(name, layers) is None)


def upward_imports(folder: Path, package: str, layers: list[list[str]]) -> list[tuple[str, str]]:
    """``(importer, imported)`` for each import of a module of a higher layer than the importer's."""
    found = []
    for name, targets in import_graph(folder, package).items():
        for target in targets:
            mine, theirs = layer_of(name, layers), layer_of(target, layers)
            if mine is not None and theirs is not None and theirs > mine:
                found.append((name, target))
    return sorted(found)


def inits_with_code(folder: Path, package: str) -> list[str]:
    """Subpackages (not the package itself) whose ``__init__.py`` holds anything but a docstring."""
    found = []
    for name, path in package_modules(folder, package).items():
        if path.name != "__init__.py" or name == package:
            continue
        body = ast.parse(path.read_text(encoding="utf-8")).body
        has_docstring = body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        docstring = body[:1] if has_docstring else []
        if body[len(docstring) :] or (docstring and not isinstance(docstring[0].value.value, str)):
            found.append(name)
    return sorted(found)


def test_the_package_has_no_import_cycle():
    assert import_cycles(PACKAGE_ROOT, "autograder") == []


def test_every_import_of_the_package_names_one_of_its_modules():
    assert missing_modules(PACKAGE_ROOT, "autograder") == []


def test_every_module_is_in_a_layer_and_imports_from_its_own_layer_or_lower_ones():
    assert unplaced_modules(PACKAGE_ROOT, "autograder", LAYERS) == []
    assert upward_imports(PACKAGE_ROOT, "autograder", LAYERS) == []


def test_subpackages_init_hold_only_a_docstring():
    assert inits_with_code(PACKAGE_ROOT, "autograder") == []


def _fake_package(tmp_path: Path, files: dict[str, str]) -> Path:
    folder = tmp_path / "fake"
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return folder


def test_a_cycle_through_a_lazy_import_is_found(tmp_path):
    folder = _fake_package(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": '"""Low."""\n',
            "low/a.py": "from . import b\n",
            "low/b.py": "def f():\n    from ..high.c import g\n",
            "high/__init__.py": '"""High."""\n',
            "high/c.py": "import fake.low.a\n",
            "high/d.py": "from fake.low import b\n",
        },
    )
    assert import_graph(folder, "fake")["fake.high.d"] == {"fake.low.b"}
    assert import_cycles(folder, "fake") == [["fake.high.c", "fake.low.a", "fake.low.b"]]
    (folder / "low" / "b.py").write_text("def f():\n    pass\n", encoding="utf-8")
    assert import_cycles(folder, "fake") == []


def test_an_upward_import_inside_a_function_is_found(tmp_path):
    folder = _fake_package(
        tmp_path,
        {
            "__init__.py": "",
            "low.py": "def f():\n    from .high import g\n",
            "high.py": "from .low import f\nfrom . import low\n",
            "other.py": "",
        },
    )
    layers = [["fake.low"], ["fake.high"], ["fake"]]
    assert upward_imports(folder, "fake", layers) == [("fake.low", "fake.high")]
    assert unplaced_modules(folder, "fake", layers) == []
    assert unplaced_modules(folder, "fake", layers[:2]) == ["fake", "fake.other"]


def test_code_in_a_subpackages_init_is_found(tmp_path):
    folder = _fake_package(
        tmp_path,
        {
            "__init__.py": "import sys\n",
            "empty/__init__.py": "",
            "documented/__init__.py": '"""Only a docstring."""\n',
            "busy/__init__.py": '"""A docstring, then code."""\n\nfrom .part import thing\n',
            "busy/part.py": "thing = 1\n",
        },
    )
    assert inits_with_code(folder, "fake") == ["fake.busy"]
    assert missing_modules(folder, "fake") == []
    (folder / "documented" / "__init__.py").write_text("from .gone import thing\n", encoding="utf-8")
    assert missing_modules(folder, "fake") == [("fake.documented", "fake.documented.gone")]
    assert inits_with_code(folder, "fake") == ["fake.busy", "fake.documented"]
