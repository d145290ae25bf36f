"""docs/migrating-from-ray.md's import table holds: every airflowless import it gives runs, and every name it
lists is there (so the table cannot promise a name that was renamed or removed)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

TABLE = Path(__file__).resolve().parents[2] / "docs" / "migrating-from-ray.md"
_CODE = re.compile(r"`([^`]+)`")
_IMPORT = re.compile(r"^from (airflowless[\w.]*) import (.+)$")


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip() and n.strip() != "..."]


def rows() -> list[tuple[str, str]]:
    """(Ray cell, airflowless cell) of each row of the "Import changes" table."""
    section = TABLE.read_text().split("## Import changes", 1)[1].split("\n## ", 1)[0]
    found = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] not in ("Ray", "---") and not set(cells[0]) <= {"-"}:
            found.append((cells[0], cells[1]))
    return found


def imports(ray: str, ours: str) -> list[tuple[str, list[str]]]:
    """The (module, names) each airflowless import of a row brings; ``...`` stands for the Ray side's names."""
    ray_codes = _CODE.findall(ray)
    ray_names = []
    for code in ray_codes:
        if " import " in code:
            ray_names = _names(code.split(" import ", 1)[1])
            break
    found = []
    for code in _CODE.findall(ours):
        for statement in code.split(";"):
            match = _IMPORT.match(statement.strip())
            if match:
                module, names = match.groups()
                listed = _names(names)
                found.append((module, listed if listed else ray_names))
            elif statement.strip().startswith("import airflowless"):
                found.append((statement.strip().split()[1], []))
    return found


def test_the_table_is_read() -> None:
    assert len(rows()) > 15
    assert ("airflowless.serve", ["ingress", "multiplexed", "get_multiplexed_model_id"]) in [
        entry for ray, ours in rows() for entry in imports(ray, ours)]


@pytest.mark.parametrize(("ray", "ours"), rows(), ids=[r[0][:60] for r in rows()])
def test_each_airflowless_import_of_the_table_runs(ray: str, ours: str) -> None:
    for module_name, names in imports(ray, ours):
        module = importlib.import_module(module_name)
        for name in names:
            if re.fullmatch(r"[A-Za-z_]\w*", name):  # a submodule or an attribute
                assert hasattr(module, name) or importlib.util.find_spec(f"{module_name}.{name}"), \
                    f"{module_name} has no {name} (docs/migrating-from-ray.md)"
