"""What file sinks share: a folder (local or fsspec URL) of ``part-NNNNN.<suffix>`` files, one per block."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from .base import Datasink, WriteResult

__all__ = ["FileSink"]


@dataclass
class FileSink(Datasink):
    """Writes block ``i`` to ``<path>/part-<i>.<suffix>``; a new write replaces the parts of an old one."""

    path: str
    storage_options: dict[str, Any] | None = None
    suffix: ClassVar[str] = ""

    def _fs(self) -> tuple[Any, str]:
        import fsspec

        fs, root = fsspec.core.url_to_fs(self.path, **(self.storage_options or {}))
        return fs, root.rstrip("/")

    def prepare(self) -> None:
        fs, root = self._fs()
        fs.makedirs(root, exist_ok=True)
        for old in fs.glob(f"{root}/part-*.{self.suffix}"):
            fs.rm(old)

    def write(self, block: pa.Table, task_index: int) -> WriteResult:
        fs, root = self._fs()
        target = f"{root}/part-{task_index:05d}.{self.suffix}"
        self.write_file(fs, target, block)
        return WriteResult(target, block.num_rows, block.nbytes)

    def write_file(self, fs: Any, target: str, block: pa.Table) -> None:
        raise NotImplementedError
