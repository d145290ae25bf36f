"""Where stage outputs live: one signed pickle per output under the storage root (local or fsspec).

Outputs are written by the task that made them, atomically (temp name, then
rename), so a reader never sees half a file and two runs writing the same
cached output do not clash. They are read back for cache hits and resumes,
and only after their signature (:mod:`airflowless.integrity`) checks out.

An output must outlive the cluster that made it: a value holding Dask futures
is refused (Datasets are written as parquet first, see :mod:`.persist`).
"""

from __future__ import annotations

import io
from typing import Any

import cloudpickle

from ..errors import StageOutputError
from ..integrity import read_signed, write_signed
from ..names import check_name, join_under

__all__ = ["output_uri", "write_output", "read_output", "check_output", "output_exists", "summarize"]

_ADVICE = ("Delete the file, or run without the cache (`airflowless run ... --no-cache`, "
           "or pipeline.run(cache=False)) so the stage runs again and writes it anew.")


def output_uri(storage: str, *, stage: str, cache_key: str, run_id: int, node: str, shared: bool) -> str:
    """The URI for a stage's output: shared by cache key, or private to the run; always under ``storage``."""
    check_name("@stage(name=...)", stage)
    check_name("node name", node)
    if shared:
        return join_under(storage, "outputs", stage, f"{cache_key}.pkl")
    return join_under(storage, "runs", str(run_id), f"{node}-{cache_key[:12]}.pkl")


class _NoFutures(cloudpickle.CloudPickler):
    """Pickles like cloudpickle, but stops at a Dask future: it would not outlive the cluster."""

    def persistent_id(self, obj: Any) -> None:
        from distributed import Future

        if isinstance(obj, Future):
            raise StageOutputError(
                "a stage output must outlive the cluster (later runs read it back), but this one "
                f"holds the Dask future {obj.key!r}, which dies with this cluster; return computed values, "
                "or a Dataset (airflowless writes those as parquet)")
        return None


def dumps_output(value: Any) -> bytes:
    """``value`` pickled with cloudpickle; :class:`StageOutputError` if it holds Dask futures."""
    buffer = io.BytesIO()
    _NoFutures(buffer).dump(value)
    return buffer.getvalue()


def write_output(uri: str, value: Any) -> None:
    """Pickle and sign ``value`` to ``uri``; nothing is left behind if pickling fails."""
    write_signed(uri, dumps_output(value))


def read_output(uri: str) -> Any:
    """The output at ``uri``, unpickled only if its signature checks out."""
    return cloudpickle.loads(read_signed(uri, advice=_ADVICE))


def check_output(uri: str) -> None:
    """Raise :class:`airflowless.errors.SignatureError` if the output at ``uri`` is not signed by us."""
    read_signed(uri, advice=_ADVICE)


def output_exists(uri: str) -> bool:
    import fsspec

    fs, path = fsspec.core.url_to_fs(uri)
    return bool(fs.exists(path))


def summarize(value: Any, limit: int = 200) -> str:
    """A short description of an output for the record."""
    text = f"{type(value).__name__}: {value!r}" if value is not None else "None"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
