"""The shell and Python blocks of the README, the getting-started guide and the Serve guide run as written.

Each file's blocks run in order, from the repository root, against one scratch
``AIRFLOWLESS_HOME``: a ``bash`` block with ``bash -e`` (the interpreter's
folder first on ``PATH``, as an activated virtualenv), a ``python`` block in a
fresh interpreter. A block that cannot run here is preceded in the Markdown by
``<!-- docs-test: skip: why -->`` (invisible once rendered), and must say why.
Nothing in a block is rewritten but ``/tmp/scratch``, which becomes a folder of
the test's own. A cluster a block starts with ``airflowless cluster up`` is
stopped at the end.
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
# the guide first: its runs write data/taxi-s, which the README's example reads (as after the README's main command)
FILES = ["docs/getting-started.md", "README.md", "docs/serve.md"]
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


def _run(block: Block, env: dict[str, str], scratch: Path) -> subprocess.CompletedProcess[str]:
    text = block.text.replace("/tmp/scratch", str(scratch))
    command = ["bash", "-e", "-c", text] if block.language == "bash" else [sys.executable, "-c", text]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.parametrize("file", FILES)
def test_every_block_runs_or_says_why_not(file: str, tmp_path: Path) -> None:
    found = blocks(file)
    assert found, f"{file} has no bash or python block"
    env = {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home"), "TMPDIR": str(tmp_path),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", "COLUMNS": "200"}
    ran = 0
    try:
        for block in found:
            if block.skipped is not None:
                continue
            done = _run(block, env, tmp_path / "scratch")
            assert done.returncode == 0, (f"{file}:{block.line} exited {done.returncode}\n{block.text}\n"
                                          f"--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}")
            ran += 1
    finally:
        if (tmp_path / "home" / "cluster.json").exists():
            subprocess.run([sys.executable, "-m", "airflowless.cli", "cluster", "down"], env=env, timeout=120,
                           capture_output=True)
    assert ran, f"every block of {file} is skipped"


def test_blocks_are_found_and_skips_say_why() -> None:
    every = [block for file in FILES for block in blocks(file)]
    assert {block.language for block in every} == {"bash", "python"}
    for block in every:
        assert block.skipped is None or len(block.skipped) > 10, f"{block.file}:{block.line}: say why it is skipped"
