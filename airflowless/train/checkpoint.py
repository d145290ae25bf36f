"""Checkpoints: a directory of files at a URI (a local folder or any fsspec URL).

>>> import tempfile, pathlib
>>> folder = tempfile.mkdtemp(); _ = pathlib.Path(folder, "model.json").write_text("{}")
>>> ckpt = Checkpoint.from_directory(folder)
>>> with ckpt.as_directory() as local:
...     sorted(p.name for p in pathlib.Path(local).iterdir())
['model.json']
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import fsspec

from ..errors import CheckpointPathError

__all__ = ["Checkpoint", "CheckpointManager", "persist_directory", "METADATA_FILE"]

METADATA_FILE = ".metadata.json"
"""Where a checkpoint keeps the metadata of :meth:`Checkpoint.set_metadata` (Ray's name)."""


class Checkpoint:
    """A directory at ``path`` (local or URL). Cheap to pass around: only the path travels."""

    remove_after_report = False  # a folder made only to be reported (TorchCheckpoint.from_model): gone once copied

    def __init__(self, path: str, *, storage_options: dict[str, Any] | None = None,
                 model_uri: str | None = None, model_version: str | None = None) -> None:
        self.path = str(path)
        self.storage_options = storage_options or {}
        self.model_uri = model_uri  # the registered version it was resolved from (models:/NAME@ALIAS), if any
        self.model_version = model_version  # and the version that was then (models:/NAME/3)

    @classmethod
    def from_directory(cls, path: str | os.PathLike[str]) -> Checkpoint:
        return cls(os.fspath(path))

    @classmethod
    def from_uri(cls, uri: str) -> Checkpoint:
        """The checkpoint at ``uri``: a path or fsspec URL, or a registered model version
        (``models:/NAME@ALIAS``, ``models:/NAME/VERSION``; :mod:`airflowless.models`)."""
        from ..models import checkpoint_of

        return checkpoint_of(uri)

    @property
    def filesystem(self) -> Any:
        return fsspec.core.url_to_fs(self.path, **self.storage_options)[0]

    def get_metadata(self) -> dict[str, Any]:
        """The checkpoint's metadata (Ray's): a JSON object kept in its ``.metadata.json``; {} if none."""
        import json

        try:
            with fsspec.open(f"{self.path.rstrip('/')}/{METADATA_FILE}", "r", **self.storage_options) as f:
                found = json.load(f)
        except FileNotFoundError:
            return {}
        return found if isinstance(found, dict) else {}

    def set_metadata(self, metadata: dict[str, Any]) -> None:
        """Replace the checkpoint's metadata with ``metadata`` (JSON-serializable, text keys)."""
        import json

        from ..errors import ConfigError

        if not isinstance(metadata, dict) or not all(isinstance(k, str) for k in metadata):
            raise ConfigError(f"checkpoint metadata is a dict with text keys, got {type(metadata).__name__}")
        try:
            text = json.dumps(metadata)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"checkpoint metadata must be JSON-serializable ({exc})") from None
        with fsspec.open(f"{self.path.rstrip('/')}/{METADATA_FILE}", "w", **self.storage_options) as f:
            f.write(text)

    def update_metadata(self, metadata: dict[str, Any]) -> None:
        """Merge ``metadata`` into the checkpoint's metadata."""
        self.set_metadata({**self.get_metadata(), **metadata})

    @property
    def is_local(self) -> bool:
        return "://" not in self.path or self.path.startswith("file://")

    def to_directory(self, path: str | os.PathLike[str] | None = None) -> str:
        """Copy the checkpoint into a local folder (a new temporary one by default); return it."""
        target = os.fspath(path) if path is not None else tempfile.mkdtemp(prefix="checkpoint-")
        fs, remote = fsspec.core.url_to_fs(self.path, **self.storage_options)
        os.makedirs(target, exist_ok=True)
        for item in fs.find(remote):
            destination = _inside(target, remote, item, self.path)
            os.makedirs(os.path.dirname(destination), exist_ok=True)
            fs.get(item, destination)
        return target

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """A local folder with the checkpoint's files: the folder itself when it is local."""
        if self.is_local:
            yield self.path.removeprefix("file://")
            return
        local = self.to_directory()
        try:
            yield local
        finally:
            shutil.rmtree(local, ignore_errors=True)

    def __repr__(self) -> str:
        return f"Checkpoint(path={self.path!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Checkpoint) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)


def _inside(root: str, remote: str, item: str, source: str) -> str:
    """Where ``item`` (listed under ``remote``) goes under the local ``root``, resolved; refuses a
    place outside ``root`` (an object store key such as ``ckpt/../../x`` is legal, and a symlink
    in the target may point anywhere)."""
    base = os.path.realpath(root)
    destination = os.path.realpath(os.path.join(base, os.path.relpath(item, remote)))
    if destination == base or os.path.commonpath([base, destination]) != base:
        raise CheckpointPathError(source, item, root)
    return destination


def persist_directory(local: str, uri: str) -> Checkpoint:
    """Copy a local folder to ``uri`` (atomically on local disks: copy, then rename)."""
    fs, remote = fsspec.core.url_to_fs(uri)
    if "://" not in uri or uri.startswith("file://"):
        tmp = remote.rstrip("/") + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(local, tmp)
        shutil.rmtree(remote, ignore_errors=True)
        os.replace(tmp, remote)
    else:
        fs.put(local.rstrip("/") + "/", remote, recursive=True)
    return Checkpoint(uri)


@dataclass
class _Kept:
    checkpoint: Checkpoint
    metrics: dict[str, Any]
    index: int


@dataclass
class CheckpointManager:
    """Keeps the best ``num_to_keep`` checkpoints by score (all when None) and always the latest."""

    num_to_keep: int | None = None
    score_attribute: str | None = None
    score_order: str = "max"
    kept: list[_Kept] = field(default_factory=list)

    def register(self, checkpoint: Checkpoint, metrics: dict[str, Any]) -> list[Checkpoint]:
        """Add one; return the checkpoints that are no longer kept (the caller deletes them)."""
        index = self.kept[-1].index + 1 if self.kept else 0
        self.kept.append(_Kept(checkpoint, dict(metrics), index))
        if self.num_to_keep is None or len(self.kept) <= self.num_to_keep:
            return []
        latest = self.kept[-1]
        ranked = sorted(self.kept, key=self._score, reverse=True)
        keep = {id(k) for k in ranked[: self.num_to_keep]} | {id(latest)}
        dropped = [k.checkpoint for k in self.kept if id(k) not in keep]
        self.kept = [k for k in self.kept if id(k) in keep]
        return dropped

    def _score(self, kept: _Kept) -> float:
        if self.score_attribute is None:
            return float(kept.index)  # newest first
        value = kept.metrics.get(self.score_attribute)
        if value is None:
            return float("-inf")
        return float(value) if self.score_order == "max" else -float(value)

    @property
    def latest(self) -> Checkpoint | None:
        return self.kept[-1].checkpoint if self.kept else None

    @property
    def best(self) -> list[tuple[Checkpoint, dict[str, Any]]]:
        ranked = sorted(self.kept, key=self._score, reverse=True)
        return [(k.checkpoint, k.metrics) for k in ranked]


def delete_checkpoint(checkpoint: Checkpoint) -> None:
    with contextlib.suppress(FileNotFoundError):
        checkpoint.filesystem.rm(fsspec.core.url_to_fs(checkpoint.path)[1], recursive=True)
