"""airflowless's files are its user's alone on a shared host (airflowless.private).

The last test runs a real pipeline, then reads its record and outputs as
another local user (``nobody``, through ``runuser``: needs root, as CI runs).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflowless.errors import ConfigError
from airflowless.private import private_folder, secure_roots
from airflowless.settings import Settings


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_parent() -> Iterator[Path]:
    """A folder everyone may enter (0755), as /home or /srv are: only the modes below it protect."""
    parent = Path(tempfile.mkdtemp(prefix="airflowless-private-"))
    parent.chmod(0o755)
    yield parent
    shutil.rmtree(parent, ignore_errors=True)


def test_private_folder_makes_and_narrows(open_parent: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOWLESS_SHARE", raising=False)
    made = private_folder(open_parent / "a" / "b")
    assert _mode(open_parent / "a") == _mode(made) == 0o700
    old = open_parent / "old-home"
    old.mkdir()
    old.chmod(0o755)  # as an earlier airflowless left it
    (old / "airflowless.db").touch()
    private_folder(old)
    assert _mode(old) == 0o700
    users = open_parent / "data"  # a folder of the user's, named as the storage root: left as it is
    users.mkdir()
    users.chmod(0o755)
    (users / "trips.csv").touch()
    private_folder(users)
    assert _mode(users) == 0o755
    shared = open_parent / "shared-tmp"  # sticky, as /tmp: never narrowed
    shared.mkdir()
    shared.chmod(0o1777)
    private_folder(shared)
    assert _mode(shared) == 0o1777

    monkeypatch.setenv("AIRFLOWLESS_SHARE", "group")
    assert _mode(private_folder(open_parent / "team")) == 0o750
    monkeypatch.setenv("AIRFLOWLESS_SHARE", "world")
    with pytest.raises(ConfigError, match="AIRFLOWLESS_SHARE must be 'group'"):
        Settings.from_env()


def test_secure_roots_leaves_remote_storage_alone(open_parent: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOWLESS_HOME", str(open_parent / "home"))
    monkeypatch.setenv("AIRFLOWLESS_STORAGE", "s3://bucket/airflowless")
    secure_roots()
    assert _mode(open_parent / "home") == 0o700
    assert not (open_parent / "s3:").exists()


PIPELINE = '''\
from airflowless import pipeline, stage


@stage
def secret() -> str:
    return "the user's data"


@pipeline
def private():
    return secret()
'''


def test_another_user_reads_nothing_of_a_run(open_parent: Path) -> None:
    runuser = shutil.which("runuser")
    if os.geteuid() != 0 or runuser is None:
        pytest.skip("reading as another user needs root and runuser (CI runs as root)")
    module = open_parent / "private.py"
    module.write_text(PIPELINE)
    module.chmod(0o644)
    home = open_parent / "home"
    env = {**os.environ, "AIRFLOWLESS_HOME": str(home)}
    for name in ("AIRFLOWLESS_DB", "AIRFLOWLESS_STORAGE", "AIRFLOWLESS_ADDRESS"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-m", "airflowless.cli", "run", str(module)], env=env, cwd=open_parent,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    record, storage = home / "airflowless.db", home / "storage"
    assert _mode(home) == _mode(storage) == 0o700
    assert _mode(record) == 0o600
    outputs = [path for path in storage.rglob("*") if path.is_file()]
    assert outputs, "the run wrote no output to check"

    for target in (record, outputs[0]):
        other = subprocess.run([runuser, "-u", "nobody", "--", "cat", str(target)], capture_output=True, text=True)
        assert other.returncode != 0 and "Permission denied" in other.stderr, (target, other)
    listing = subprocess.run([runuser, "-u", "nobody", "--", "ls", str(storage)], capture_output=True, text=True)
    assert listing.returncode != 0 and "Permission denied" in listing.stderr, listing
