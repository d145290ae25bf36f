"""Where stage outputs live: one file per output under the storage root (local or fsspec).

Outputs are written by the task that made them, atomically (temp name, then
rename), so a reader never sees half a file and two runs writing the same
cached output do not clash. They are read back for cache hits and resumes.
"""

from __future__ import annotations

import uuid
from typing import Any

import cloudpickle
import fsspec

__all__ = ["output_uri", "write_output", "read_output", "output_exists", "summarize"]


def output_uri(storage: str, *, stage: str, cache_key: str, run_id: int, node: str, shared: bool) -> str:
    """The URI for a stage's output: shared by cache key, or private to the run."""
    root = storage.rstrip("/")
    if shared:
        return f"{root}/outputs/{stage}/{cache_key}.pkl"
    return f"{root}/runs/{run_id}/{node}-{cache_key[:12]}.pkl"


def write_output(uri: str, value: Any) -> None:
    fs, path = fsspec.core.url_to_fs(uri)
    parent = path.rsplit("/", 1)[0]
    fs.makedirs(parent, exist_ok=True)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with fs.open(tmp, "wb") as f:
        cloudpickle.dump(value, f)
    fs.mv(tmp, path)


def read_output(uri: str) -> Any:
    fs, path = fsspec.core.url_to_fs(uri)
    with fs.open(path, "rb") as f:
        return cloudpickle.load(f)


def output_exists(uri: str) -> bool:
    fs, path = fsspec.core.url_to_fs(uri)
    return bool(fs.exists(path))


def summarize(value: Any, limit: int = 200) -> str:
    """A short description of an output for the record."""
    text = f"{type(value).__name__}: {value!r}" if value is not None else "None"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
