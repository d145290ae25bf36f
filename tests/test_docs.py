"""Every shell and Python block of the README and of docs/*.md runs as written, or says why it cannot.

Each file's blocks run in order, from the repository root, against one scratch
``AIRFLOWLESS_HOME``: a ``bash`` block with ``bash -e`` (the interpreter's
folder first on ``PATH``, as an activated virtualenv), a ``python`` block in a
fresh interpreter. A block that cannot run here (a fragment, a server that runs
until stopped, another host) is preceded in the Markdown by
``<!-- docs-test: skip: why -->`` (invisible once rendered), and must say why.
Nothing in a block is rewritten but ``/tmp/scratch``, which becomes a folder of
the test's own. A cluster a block starts with ``airflowless cluster up`` is
stopped at the end.

The README and the getting-started guide also run from the folder that holds
the clone, as a new user with the clone at ``~/src/airflowless`` runs them from
``~/src``: there the clone's files are named from that folder
(``airflowless/pipelines/taxi.py``), and a Python block that imports
``pipelines`` finds the clone's ``pipelines`` folder (alone) on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the guide first: its runs write data/taxi-s, which later examples read (as after the README's main command)
FIRST = ["docs/getting-started.md", "README.md"]
FILES = FIRST + sorted(str(path.relative_to(ROOT)) for path in (ROOT / "docs").glob("*.md")
                       if str(path.relative_to(ROOT)) not in FIRST and re.search(r"^```(bash|python)\s*$", path.read_text(), re.M))
SKIP = re.compile(r"<!-- docs-test: skip: (?P<why>[^>]*\S) -->\s*$")


@dataclass(frozen=True)
class Block:
    file: str
    line: int
    language: str
    text: str
    skipped: str | None  # why it cannot run here


def blocks(file: str) -> list[Block]:
    """The fenced ``bash`` and ``python`` blocks of ``file``, in order."""
    lines = (ROOT / file).read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = re.match(r"^```(\w+)\s*$", lines[index])
        if opening is None:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
        before = next((lines[i] for i in range(index - 1, max(index - 3, -1), -1) if lines[i].strip()), "")
        marked = SKIP.match(before)
        if opening.group(1) in ("bash", "python"):
            found.append(Block(file, index + 1, opening.group(1), "\n".join(lines[index + 1:end]) + "\n",
                               marked.group("why") if marked else None))
        index = end + 1
    return found


def _run(block: Block, env: dict[str, str], scratch: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    text = block.text.replace("/tmp/scratch", str(scratch))
    if cwd != ROOT and block.language == "bash":  # the clone's files, named from the folder that holds it
        text = re.sub(r"(?<![\w./])pipelines/", "airflowless/pipelines/", text)
    command = ["bash", "-e", "-c", text] if block.language == "bash" else [sys.executable, "-c", text]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def _run_all(files: list[str], tmp_path: Path, cwd: Path, **extra_env: str) -> None:
    """Run the blocks of ``files`` in order from ``cwd``; fail on the first that exits non-zero."""
    env = {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", "COLUMNS": "200",
           **extra_env}
    try:
        for file in files:
            found = blocks(file)
            assert found, f"{file} has no bash or python block"
            for block in (block for block in found if block.skipped is None):
                done = _run(block, env, tmp_path / "scratch", cwd)
                assert done.returncode == 0, (
                    f"{file}:{block.line} exited {done.returncode} (from {cwd})\n{block.text}\n"
                    f"--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}")
    finally:
        if (tmp_path / "home" / "cluster.json").exists():
            subprocess.run([sys.executable, "-m", "airflowless.cli", "cluster", "down"], env=env, timeout=120,
                           capture_output=True)


@pytest.mark.parametrize("file", [file for file in FILES if any(block.skipped is None for block in blocks(file))])
def test_every_block_runs_or_says_why_not(file: str, tmp_path: Path) -> None:
    if file not in FIRST and not (ROOT / "data" / "taxi-s" / "_SUCCESS").exists():  # this file's test run alone
        from airflowless.datasets import make_taxi
        make_taxi(200_000, n_files=4, path=ROOT / "data" / "taxi-s")  # what the README's main command writes
    _run_all([file], tmp_path, ROOT)


@pytest.mark.timeout(900)  # the guide's and the README's blocks in one test (about a minute)
def test_the_readme_and_the_guide_run_from_the_folder_that_holds_the_clone(tmp_path: Path) -> None:
    """``~/src/airflowless`` run from ``~/src``: the clone's folder, with its ``data/``, is no package of workers'."""
    src, importable = tmp_path / "src", tmp_path / "importable"
    src.mkdir()
    importable.mkdir()
    (src / "airflowless").symlink_to(ROOT, target_is_directory=True)  # the clone, named like the package
    (importable / "pipelines").symlink_to(ROOT / "pipelines", target_is_directory=True)  # only pipelines, not the package
    _run_all(FIRST, tmp_path, src, PYTHONPATH=str(importable))
    assert (src / "data" / "taxi-s" / "_SUCCESS").exists()  # the guide's runs wrote their data where they ran


def test_blocks_are_found_and_skips_say_why() -> None:
    every = [block for file in FILES for block in blocks(file)]
    assert {block.language for block in every} == {"bash", "python"}
    for block in every:
        assert block.skipped is None or len(block.skipped) > 10, f"{block.file}:{block.line}: say why it is skipped"
