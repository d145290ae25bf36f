"""The import graph keeps its layers: no module of a package (``airflowless/serve``, ...) imports, even lazily inside a function,
a module that imports it back (``if TYPE_CHECKING:`` imports do not count: they never run)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import airflowless

ROOT = Path(airflowless.__file__).parent


def _module_name(root: Path, path: Path) -> str:
    return "airflowless." + ".".join(path.relative_to(root).with_suffix("").parts)


def _imports(root: Path, path: Path, package: str) -> set[str]:
    """Modules under ``package`` (its subpackages' too) that the module at ``path`` imports, at top level or
    inside functions; relative imports of any level count."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    here = f"airflowless.{package}"
    parts = _module_name(root, path).split(".")[:-1]  # the package the module is in
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level > 0:
                anchor = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{anchor}.{node.module}" if node.module else anchor
            elif node.module:
                base = node.module
            else:
                continue
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(name for name in names if name.startswith(here + ".")
                     and (root / Path(*name.split(".")[1:])).with_suffix(".py").exists())
    return found


def _cycle(package: str, root: Path = ROOT) -> list[str]:
    """One import circle among the modules of ``airflowless/<package>`` and its subpackages, or [] when there is
    none (``__init__`` modules, which re-export, are left out)."""
    graph = {_module_name(root, p): _imports(root, p, package) for p in (root / package).rglob("*.py")
             if p.name != "__init__.py"}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str]:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return []
        for nxt in sorted(graph.get(module, ())):
            found = visit(nxt, path + [module])
            if found:
                return found
        done.add(module)
        return []

    for module in sorted(graph):
        found = visit(module, [])
        if found:
            return found
    return []


PACKAGES = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists())


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle_inside_the_package(package: str) -> None:
    circle = _cycle(package)
    assert not circle, "import circle: " + " -> ".join(m.removeprefix(f"airflowless.{package}.") for m in circle)


def test_the_check_sees_a_lazy_import_circle(tmp_path: Path) -> None:
    package = tmp_path / "demo"
    package.mkdir()
    (package / "a.py").write_text("from .b import x\n")
    (package / "b.py").write_text("def f():\n    from .a import y\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import y\n")
    assert _cycle("demo", tmp_path) == ["airflowless.demo.a", "airflowless.demo.b", "airflowless.demo.a"]


def test_the_check_sees_a_circle_through_a_subpackage(tmp_path: Path) -> None:
    package = tmp_path / "demo"
    (package / "sub").mkdir(parents=True)
    (package / "top.py").write_text("from .sub.leaf import x\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "leaf.py").write_text("def f():\n    from ..top import y\n")
    assert _cycle("demo", tmp_path) == ["airflowless.demo.sub.leaf", "airflowless.demo.top", "airflowless.demo.sub.leaf"]
