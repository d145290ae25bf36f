"""What the files under a path argument are now: the part of a cache key that makes a changed file a miss.

A stage given a path is keyed by the files under it, not by the path's text:
a file changed (size or modification time), added or removed under a local
folder, or an object whose ETag, checksum or time changed under an fsspec URL,
gives another key, so an earlier output computed from other files is never
reused. What counts as a path:

- a ``pathlib`` path, or a string that reads as a relative local path (it holds
  a ``/`` or starts with ``.`` or ``~``): resolved against the working directory;
  a path that does not exist is keyed as missing (a later run that finds files
  there is a miss);
- an absolute local path string that exists on the driver (one that does not,
  such as an HTTP route or a path only the workers have, is keyed by its text);
- an fsspec URL (``s3://bucket/prefix``, ``file:///data``, ``memory://x``), listed
  with fsspec; http(s) URLs are keyed by their text (a request is not a listing).

A path that cannot be listed (no credentials on the driver) or that holds more
than :data:`MAX_FILES` files gets a key of its own each run: its stage is never
reused from the cache, and a warning says so (give the stage ``cache_key=`` to
key it yourself). Each distinct path is listed once per run.

>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "a.csv").write_text("1,2")
>>> before = Fingerprints().of(str(folder))
>>> _ = (folder / "b.csv").write_text("3,4")
>>> before == Fingerprints().of(str(folder))
False
>>> Fingerprints().of("hello") == "hello"
True
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from pathlib import PurePath
from typing import Any

__all__ = ["Fingerprints", "MAX_FILES"]

logger = logging.getLogger(__name__)

MAX_FILES = 100_000  # past this many files under one path, its stage is not reused (listing would cost seconds)
_NOT_LISTED = frozenset({"http", "https", "ws", "wss"})
# what an fsspec listing says of a file that changes when its content does
_CHANGES = ("size", "ETag", "etag", "md5Hash", "crc32c", "checksum", "mtime", "LastModified", "last_modified",
            "updated", "created")


class _TooMany(Exception):
    pass


class Fingerprints:
    """Path arguments to their cache-key parts, each distinct path listed once (one per run)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], Any] = {}

    def of(self, value: Any) -> Any:
        """What ``value`` contributes to a cache key: a path's files, or the value itself."""
        if isinstance(value, PurePath):
            return self._local(os.path.abspath(os.path.expanduser(str(value))))
        if not isinstance(value, str) or not value or "\n" in value or len(value) >= 4096:
            return value
        protocol, sep, _ = value.partition("://")
        if sep:
            if protocol.lower() in _NOT_LISTED or not protocol.replace("+", "").replace("-", "").isalnum():
                return value
            return self._remembered(("url", value), lambda: self._listed(value))
        if os.path.isabs(value):
            return self._local(value) if os.path.exists(value) else value
        if "/" in value or os.sep in value or value.startswith((".", "~")):
            return self._local(os.path.abspath(os.path.expanduser(value)))
        return value

    def _remembered(self, key: tuple[str, str], make: Any) -> Any:
        if key not in self._seen:
            self._seen[key] = make()
        return self._seen[key]

    def _local(self, path: str) -> Any:
        return self._remembered(("path", path), lambda: ("path", path, self._walk(path)))

    def _walk(self, path: str) -> str | None:
        """A digest of every file under ``path`` (relative name, size, modification time); None if missing."""
        try:
            top = os.stat(path)
        except OSError:
            return None
        digest = hashlib.sha256()
        if not os.path.isdir(path):
            digest.update(f"{top.st_size}\0{top.st_mtime_ns}".encode())
            return digest.hexdigest()
        try:
            entries = sorted(self._files(path))
        except _TooMany:
            return self._unkeyable(path, f"it holds more than {MAX_FILES:,} files")
        for name, size, mtime in entries:
            digest.update(f"{name}\0{size}\0{mtime}\n".encode())
        return digest.hexdigest()

    @staticmethod
    def _files(path: str) -> list[tuple[str, int, int]]:
        found: list[tuple[str, int, int]] = []
        for folder, dirs, files in os.walk(path):
            dirs.sort()
            for name in files:
                full = os.path.join(folder, name)
                try:
                    info = os.stat(full)
                except OSError:  # removed while listed
                    continue
                found.append((os.path.relpath(full, path), info.st_size, info.st_mtime_ns))
                if len(found) > MAX_FILES:
                    raise _TooMany
        return found

    def _listed(self, url: str) -> Any:
        """A digest of every object under ``url``, by what its filesystem says changes with its content."""
        try:
            import fsspec

            fs, path = fsspec.core.url_to_fs(url)
            listing = fs.find(path, withdirs=False, detail=True, maxdepth=None)
        except Exception as exc:  # no such protocol, no credentials, no network: cannot know what is there
            return ("url", url, self._unkeyable(url, f"it could not be listed ({type(exc).__name__}: {exc})"))
        if len(listing) > MAX_FILES:
            return ("url", url, self._unkeyable(url, f"it holds more than {MAX_FILES:,} objects"))
        digest = hashlib.sha256()
        for name in sorted(listing):
            info = listing[name]
            said = [f"{field}={info[field]}" for field in _CHANGES if info.get(field) is not None]
            digest.update(f"{name}\0{' '.join(said)}\n".encode())
        return ("url", url, digest.hexdigest() if listing else None)

    @staticmethod
    def _unkeyable(where: str, why: str) -> str:
        logger.warning("the stage given %s is not reused from the cache this run: %s; give the stage "
                       "cache_key=... to key it yourself", where, why)
        return f"unkeyable-{uuid.uuid4().hex}"
