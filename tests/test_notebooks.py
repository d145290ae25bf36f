"""Every notebook in ``notebooks/`` runs from top to bottom without an error.

Each notebook runs in a fresh IPython kernel started from the interpreter that
runs the tests (the project's virtualenv), with ``notebooks/`` as its working
directory, as ``jupyter lab notebooks/`` (the getting-started guide's command)
runs them. The kernel is found without consulting any kernel spec
installed on the machine: a ``python3`` spec in ``~/.local/share/jupyter`` or
``/usr/local/share/jupyter`` could point at another Python, and a fresh
virtualenv may have none at all.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 300


def _kernel_manager() -> AsyncKernelManager:
    """A manager for an IPython kernel of *this* interpreter.

    With no kernel directories to search, jupyter_client falls back to
    ipykernel's built-in spec, whose command is ``sys.executable -m
    ipykernel_launcher``.
    """
    specs = KernelSpecManager(kernel_dirs=[], ensure_native_kernel=True)
    return AsyncKernelManager(kernel_name="python3", kernel_spec_manager=specs)


def _execute(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    client = NotebookClient(
        nb,
        km=_kernel_manager(),
        kernel_name="python3",
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(ROOT / "notebooks")}},  # where `jupyter lab notebooks/` runs them
    )
    return client.execute()


def _stdout(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS, f"expected notebooks in {ROOT / 'notebooks'}, found none"


def test_kernel_runs_this_interpreter() -> None:
    probe = new_notebook(
        cells=[
            new_code_cell(
                "import os, sys; print(sys.executable); print(sys.prefix); print(os.getcwd())"
            )
        ]
    )
    executable, prefix, cwd = _stdout(_execute(probe).cells[0]).splitlines()
    assert (executable, prefix) == (sys.executable, sys.prefix)
    assert os.path.samefile(cwd, ROOT / "notebooks")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    stored = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.get("outputs")]
    assert not stored, (
        f"{path.name}: code cells {stored} keep outputs; clear them before committing"
    )
    executed = _execute(nb)  # raises CellExecutionError, with the traceback, on a failing cell
    errors = [
        o
        for c in executed.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "error"
    ]
    assert not errors, f"{path.name}: {errors[0]['ename']}: {errors[0]['evalue']}"
    for index, cell in enumerate(executed.cells):
        if cell.cell_type != "code":
            continue
        shown = [o for o in cell.outputs if o.output_type in ("display_data", "execute_result")]
        if cell.source.rstrip().endswith(".plot()") or ".plot(" in cell.source.splitlines()[-1]:
            # a saved notebook keeps a still picture of each plot: GitHub and nbviewer run no script
            assert any("image/png" in o.get("data", {}) for o in shown), f"{path.name} cell {index}: no still PNG"
        stderr = "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stderr")
        assert "IProgress" not in stderr and "0block" not in stderr, f"{path.name} cell {index}: {stderr[-300:]}"
