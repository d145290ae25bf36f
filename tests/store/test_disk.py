"""A record on a full disk or a read-only one: one clear line, nothing recorded lost, and read-only records read.

Each case runs the CLI in a mount namespace of its own (``unshare -m``): a 2 MiB
tmpfs holds the record that fills up, a read-only bind mount the record that
cannot be written. The mounts go with the namespace.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from airflowless.store import open_store

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                reason="needs root and unshare(1) to mount a small or read-only disk")

FILLING = '''
from pathlib import Path
from airflowless import pipeline, stage

@stage
def fill(folder: str) -> int:
    """Write until the disk that holds the record is full."""
    chunks = 0
    try:
        with open(Path(folder, "filler"), "wb") as out:
            while True:
                out.write(b"x" * 65536)
                out.flush()
                chunks += 1
    except OSError:
        return chunks

@stage
def after(chunks: int) -> int:
    return chunks

@pipeline
def filling(folder: str):
    return after(fill(folder))
'''


def _in_namespace(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["unshare", "-m", "bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=180)


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "AIRFLOWLESS_HOME": str(tmp_path / "home"), "AIRFLOWLESS_STORAGE": str(tmp_path / "storage"),
            "TMPDIR": str(tmp_path), "COLUMNS": "200"}


def test_a_full_disk_is_one_line_and_the_run_reads_abandoned_once_there_is_space(tmp_path: Path) -> None:
    disk, module = tmp_path / "disk", tmp_path / "filling.py"
    disk.mkdir()
    module.write_text(FILLING)
    cli = f"{sys.executable} -m airflowless.cli"
    db = f"sqlite:///{disk / 'record.db'}"
    done = _in_namespace(f"""
        mount -t tmpfs -o size=2M tmpfs {disk}
        {cli} run {module} -p folder={disk} --db {db} 2> {tmp_path}/run.err; echo "exit $?" > {tmp_path}/run.code
        rm {disk}/filler
        {cli} runs list --db {db}
    """, _env(tmp_path))
    err = (tmp_path / "run.err").read_text()
    assert (tmp_path / "run.code").read_text().strip() == "exit 2", err
    said = [line for line in err.splitlines() if line.startswith("error: ")]
    assert said == [f"error: the record at {disk / 'record.db'} cannot be written: the disk that holds it is full; "
                    "free space there (a run that was going is shown abandoned; resume it with --resume)"], err
    assert "Traceback" not in err and "sqlalchemy" not in err.lower(), err
    assert done.returncode == 0, done.stderr
    assert "│ 1 " in done.stdout and "abandoned" in done.stdout, done.stdout


def test_a_read_only_record_is_read_and_a_write_to_it_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "record"
    folder.mkdir()
    db = f"sqlite:///{folder / 'airflowless.db'}"
    store = open_store(db)
    run_id = store.create_run("kept", module="m", params={"n": 1})
    store.finish_run(run_id, "succeeded")
    store.close()
    module = tmp_path / "one.py"
    module.write_text("from airflowless import pipeline, stage\n\n@stage\ndef one() -> int:\n    return 1\n\n"
                      "@pipeline\ndef single():\n    return one()\n")
    cli = f"{sys.executable} -m airflowless.cli"
    done = _in_namespace(f"""
        mount --bind {folder} {folder} && mount -o remount,bind,ro {folder}
        {cli} runs list --db {db}
        {cli} runs show {run_id} --db {db} --json > {tmp_path}/show.json
        {cli} run {module} --db {db} 2> {tmp_path}/run.err; echo "exit $?" > {tmp_path}/run.code
    """, _env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "kept" in done.stdout and "succeeded" in done.stdout, done.stdout
    assert '"pipeline": "kept"' in (tmp_path / "show.json").read_text()
    err = (tmp_path / "run.err").read_text()
    assert (tmp_path / "run.code").read_text().strip() == "exit 2", err
    assert err.strip().splitlines()[-1].startswith(f"error: the record at {folder / 'airflowless.db'} is read-only here"), err
    assert "Traceback" not in err, err
