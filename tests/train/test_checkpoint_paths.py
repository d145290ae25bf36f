"""Copying a checkpoint to a local folder never writes outside that folder (real fsspec filesystems)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from airflowless.errors import CheckpointPathError
from airflowless.train import Checkpoint


@pytest.fixture
def bucket() -> Iterator[str]:
    """A fresh folder of fsspec's in-memory filesystem (its keys may hold ``..``, as S3's may)."""
    name = f"/bucket-{uuid.uuid4().hex[:8]}"
    yield name
    fsspec.filesystem("memory").rm(name, recursive=True)


def test_a_key_leaving_the_checkpoint_is_refused(bucket: str, tmp_path: Path) -> None:
    fs = fsspec.filesystem("memory")
    fs.pipe(f"{bucket}/ckpt/model.txt", b"model")
    fs.pipe(f"{bucket}/ckpt/../../../escaped.txt", b"not yours")
    target = tmp_path / "a" / "b" / "target"

    with pytest.raises(CheckpointPathError, match=r"ckpt/\.\./\.\./\.\./escaped\.txt' that would be written outside"):
        Checkpoint(f"memory://{bucket}/ckpt").to_directory(target)
    assert [p for p in tmp_path.rglob("escaped.txt")] == []
    assert not Path("/escaped.txt").exists()
    with pytest.raises(CheckpointPathError), Checkpoint(f"memory://{bucket}/ckpt").as_directory():
        pass  # as_directory copies through the same path


def test_a_symlink_in_the_target_does_not_lead_outside(tmp_path: Path) -> None:
    source = tmp_path / "source"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "weights.bin").write_bytes(b"w")
    target, elsewhere = tmp_path / "target", tmp_path / "elsewhere"
    target.mkdir()
    elsewhere.mkdir()
    (target / "sub").symlink_to(elsewhere)  # left by someone who can write the target's parent

    with pytest.raises(CheckpointPathError, match="sub/weights.bin"):
        Checkpoint(f"file://{source}").to_directory(target)
    assert list(elsewhere.iterdir()) == []


def test_nested_files_are_copied(bucket: str, tmp_path: Path) -> None:
    fs = fsspec.filesystem("memory")
    fs.pipe(f"{bucket}/ckpt/model.txt", b"model")
    fs.pipe(f"{bucket}/ckpt/sub/dir/state.json", b"{}")
    folder = Checkpoint(f"memory://{bucket}/ckpt").to_directory(tmp_path / "out")
    assert sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*") if p.is_file()) == [
        "model.txt", "sub/dir/state.json"]
