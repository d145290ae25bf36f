"""Workers import the package the driver uses, whatever folder the driver starts in.

The case a new user met: the clone at ``src/airflowless`` and a command run from
``src``. ``python -m`` put ``src`` first on every worker's ``sys.path``, so the
clone (no ``__init__.py`` at its top) became the ``airflowless`` package and
its ``data/`` folder stood in for ``airflowless.data``: every worker died. A
module of the user's named like a standard one (``selectors.py`` here) must not
shadow it on a worker either.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SNIPPET = '''\
import airflowless
from airflowless import data

airflowless.init(n_workers=1, dashboard_address=":0", quiet=True)
print("rows", data.range(100, parallelism=2).map_batches(lambda batch: batch).count())
airflowless.shutdown()
'''

PIPELINE = '''\
from airflowless import data, pipeline, stage


@stage
def count(n: int) -> int:
    return data.range(n, parallelism=2).map_batches(lambda batch: batch).count()


@pipeline
def counting(n: int = 50):
    return count(n)
'''


@pytest.fixture
def parent(tmp_path: Path) -> Path:
    """``src/``, holding a clone-like ``airflowless/`` folder (with a ``data/`` folder) and a ``selectors.py``."""
    src = tmp_path / "src"
    (src / "airflowless" / "data" / "taxi-s").mkdir(parents=True)
    (src / "airflowless" / "pipelines").mkdir()
    (src / "airflowless" / "pipelines" / "counting.py").write_text(PIPELINE)
    (src / "notes").mkdir()
    (src / "notes" / "snippet.py").write_text(SNIPPET)
    (src / "selectors.py").write_text('raise ImportError("the user\'s selectors.py shadowed the standard one")\n')
    return src


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home"), "COLUMNS": "200"}


def _show(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"


def test_a_script_run_from_the_clones_parent_folder(parent: Path, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "notes/snippet.py"], cwd=parent, env=_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, _show(proc)
    assert "rows 100" in proc.stdout, _show(proc)
    assert "ModuleNotFoundError" not in proc.stderr and "shadowed" not in proc.stderr, _show(proc)


def test_airflowless_run_from_the_clones_parent_folder(parent: Path, tmp_path: Path) -> None:
    command = Path(sys.executable).with_name("airflowless")  # the console script a user runs
    proc = subprocess.run([str(command), "run", "airflowless/pipelines/counting.py"], cwd=parent,
                          env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, _show(proc)
    assert proc.stdout.rstrip().endswith("result: 50"), _show(proc)
    assert "ModuleNotFoundError" not in proc.stderr and "shadowed" not in proc.stderr, _show(proc)
