"""File and partition triggers: which files a pattern matches, grouped into what starts a run, and when each is whole.

A deployment deployed with ``--on-new-files PATTERN`` runs once per new match of
the pattern, an fsspec URL (a local path, ``s3://...``, any fsspec protocol):

- a pattern that ends in ``/`` matches *partitions*, folders of files
  (``s3://bucket/taxi/date=*/``): one run per new partition, whatever number of
  files it holds;
- any other matches *files* (``/data/in/*.csv``): one run per new file, or one
  per batch of the new files found together (``batch``).

``*`` and ``?`` match within one path segment. A segment ``key=*`` (Hive's
partition layout) and a ``{name}`` placeholder capture what they match as a
*field*; so does every match's ``path`` (its URL) and, with ``batch``, the
run's ``paths``. Fields reach the pipeline as parameters of the same name, or
as ``--param-from-match PARAM=FIELD`` maps them.

A match is taken only once it is whole: when a *marker* file appears in the
partition (``_SUCCESS``, as Spark and Hadoop write), or else once nothing in it
changed for ``quiet_s`` seconds (its files' newest modification time, as the
storage reports it). Once taken, a match is never taken again: files that land
in a partition after its run was queued start nothing (run the partition again
with ``airflowless deployments trigger NAME -p day=...``).

>>> spec = FileSpec.parse("s3://bucket/taxi/date=*/")
>>> spec.partitions, spec.fields, spec.root
(True, ('date', 'path'), 's3://bucket/taxi')
>>> spec.match("s3://bucket/taxi/date=2024-01-03/part-0.parquet")
('s3://bucket/taxi/date=2024-01-03/', {'date': '2024-01-03', 'path': 's3://bucket/taxi/date=2024-01-03/'})
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..errors import ConfigError

__all__ = ["FileSpec", "Match", "QUIET_S", "LOCAL_POLL_S", "REMOTE_POLL_S", "parse_param_map"]

QUIET_S = 0.5
"""How long a match must be unchanged before it is taken, when no marker says it is whole (the default)."""

LOCAL_POLL_S = 5.0
"""How often a local pattern is listed again besides its filesystem events (without ``watchfiles``: 1 s)."""

REMOTE_POLL_S = 30.0
"""How often an object store's pattern is listed (the default; ``--poll`` sets it)."""

_SEGMENT_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_HIVE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=\*")


@dataclass(frozen=True)
class FileSpec:
    """A deployment's file trigger, as recorded (``to_json``) and as the service reads it back."""

    pattern: str  # the fsspec URL, "{name}" placeholders kept
    params: dict[str, str] = field(default_factory=dict)  # pipeline parameter -> field
    quiet_s: float = QUIET_S
    marker: str | None = None
    poll_s: float | None = None  # None: LOCAL_POLL_S for local paths, REMOTE_POLL_S for the others
    batch: bool = False

    @classmethod
    def parse(cls, pattern: str, *, params: dict[str, str] | None = None, quiet_s: float | None = None,
              marker: str | None = None, poll_s: float | None = None, batch: bool = False) -> FileSpec:
        """The trigger, checked; :class:`ConfigError` saying what was expected."""
        if not pattern or not isinstance(pattern, str):
            raise ConfigError("--on-new-files is a path or URL pattern, e.g. 's3://bucket/taxi/date=*/'")
        if "://" not in pattern:
            pattern = os.path.abspath(os.path.expanduser(pattern)) + ("/" if pattern.endswith("/") else "")
        if "**" in pattern:
            raise ConfigError(f"--on-new-files takes '*' within one path segment, not '**'; got {pattern!r}: "
                              "spell out each level (e.g. 'year=*/month=*/')")
        glob = _SEGMENT_FIELD.sub("*", pattern)
        if not any(ch in glob for ch in "*?["):
            raise ConfigError(f"--on-new-files needs a wildcard ('*', '?', '{{name}}') to match new files or folders; "
                              f"got {pattern!r}")
        for name, value in (("--quiet-for", quiet_s), ("--poll", poll_s)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value < 0):
                raise ConfigError(f"{name} is a number of seconds from 0 up, got {value!r}")
        if poll_s is not None and poll_s < 0.1:
            raise ConfigError(f"--poll is at least 0.1 s, got {poll_s!r}")
        partitions = pattern.endswith("/")
        if marker is not None:
            if not partitions:
                raise ConfigError(f"--marker says when a partition (a folder) is whole; end the pattern with '/' "
                                  f"to match folders (got {pattern!r})")
            if not marker or "/" in marker or any(ch in marker for ch in "*?["):
                raise ConfigError(f"--marker is a file name inside each partition, e.g. _SUCCESS; got {marker!r}")
        if batch and partitions:
            raise ConfigError("--batch groups new files into one run; a pattern of folders (ending in '/') already "
                              "starts one run per folder")
        spec = cls(pattern, {}, QUIET_S if quiet_s is None else float(quiet_s), marker, poll_s, batch)
        mapped = dict(params or {})
        unknown = sorted(f for f in mapped.values() if f not in spec.fields)
        if unknown:
            raise ConfigError(f"--param-from-match names field(s) {unknown} the pattern {pattern!r} does not capture; "
                              f"it captures {list(spec.fields)} ('key=*' segments and '{{name}}' placeholders)")
        return cls(pattern, mapped, spec.quiet_s, marker, poll_s, batch)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FileSpec:
        return cls(data["pattern"], dict(data.get("params") or {}), float(data.get("quiet_s", QUIET_S)),
                   data.get("marker"), data.get("poll_s"), bool(data.get("batch")))

    def to_json(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "params": self.params, "quiet_s": self.quiet_s, "marker": self.marker,
                "poll_s": self.poll_s, "batch": self.batch}

    @property
    def partitions(self) -> bool:
        return self.pattern.endswith("/")

    @property
    def local(self) -> bool:
        return "://" not in self.pattern or self.pattern.startswith("file://")

    @property
    def poll(self) -> float:
        return self.poll_s if self.poll_s is not None else LOCAL_POLL_S if self.local else REMOTE_POLL_S

    @property
    def fields(self) -> tuple[str, ...]:
        """What a match captures: ``key=*`` segments, ``{name}`` placeholders, then ``path`` (``paths``)."""
        names: list[str] = []
        for segment in self.pattern.rstrip("/").split("/"):
            names += _HIVE.findall(segment) + _SEGMENT_FIELD.findall(segment)
        return (*dict.fromkeys(names), "paths" if self.batch else "path")

    @property
    def root(self) -> str:
        """The folder above the first wildcard: what is listed (and, locally, watched)."""
        segments = _SEGMENT_FIELD.sub("*", self.pattern).split("/")
        fixed = next(i for i, s in enumerate(segments) if any(ch in s for ch in "*?["))
        return "/".join(segments[:fixed]) or "/"

    def describe(self) -> str:
        whole = f"when {self.marker} appears" if self.marker else f"once quiet for {self.quiet_s:g} s"
        what = "folder" if self.partitions else "batch of files" if self.batch else "file"
        return f"each new {what} matching {self.pattern} ({whole})"

    def match(self, path: str) -> tuple[str, dict[str, str]] | None:
        """What ``path`` (a file's URL) belongs to: the partition (or the file) and its fields; None if nothing."""
        found = self._regex.match(path)
        if found is None:
            return None
        key = found.group(0)
        return key, {**found.groupdict(), "path": key}

    @property
    def _regex(self) -> re.Pattern[str]:
        return _compiled(self.pattern)

    def scan(self, fs: Any, now: float | None = None, *, skip: set[str] | frozenset[str] = frozenset()
             ) -> tuple[dict[str, Match], float | None]:
        """Every match under the pattern's root but those in ``skip``, by key, and when the next one that is not
        yet whole may be. Folders are listed first and only those not skipped are looked into, so a lake of
        many days taken already costs one listing of its folders per scan."""
        now = time.time() if now is None else now
        protocol = _protocol(self.pattern)
        found: dict[str, Match] = {}
        try:
            listing: dict[str, Any] = {}
            if self.partitions:
                folders = fs.glob(_strip(_SEGMENT_FIELD.sub("*", self.pattern).rstrip("/")), detail=True)
                for folder, info in folders.items():
                    key = _url(protocol, folder.rstrip("/")) + "/"
                    if info.get("type") == "directory" and key not in skip and self.match(key) is not None:
                        listing.update(fs.find(folder, withdirs=False, detail=True))
            else:
                listing = fs.find(_strip(self.root), withdirs=False, detail=True)
        except FileNotFoundError:
            return {}, None
        for raw, info in listing.items():
            path = _url(protocol, raw)
            matched = self.match(path)
            if matched is None:
                continue
            key, fields = matched
            if key in skip:
                continue
            entry = found.get(key)
            if entry is None:
                entry = found[key] = Match(key, fields)
            entry.files += 1
            entry.newest = max(entry.newest, _mtime(info, now))
            if self.marker is not None and path == key + self.marker:
                entry.marked = True
        wake: float | None = None
        for entry in found.values():
            entry.ready = entry.marked if self.marker is not None else now - entry.newest >= self.quiet_s
            if not entry.ready and self.marker is None:
                due = entry.newest + self.quiet_s
                wake = due if wake is None else min(wake, due)
        return found, wake

    def values(self, matches: Iterable[Match]) -> dict[str, Any]:
        """The pipeline parameters a run of ``matches`` (one, or a batch) gets, as text."""
        chosen = list(matches)
        if self.batch:
            fields: dict[str, Any] = {"paths": [m.key for m in chosen]}
        else:
            (only,) = chosen
            fields = only.fields
        return {param: fields[name] for param, name in self.params.items()}


@dataclass
class Match:
    """One partition (or file) found: its fields, its files, their newest change, whether it is whole."""

    key: str
    fields: dict[str, str]
    files: int = 0
    newest: float = 0.0
    marked: bool = False
    ready: bool = False

    def describe(self) -> str:
        return f"{self.key} ({self.files} file{'s' if self.files != 1 else ''})"


def typed(values: dict[str, Any], declared: dict[str, Any]) -> dict[str, Any]:
    """A trigger's text values parsed to the pipeline's declared parameter types (lists of paths as they are)."""
    import inspect

    from ..dag.params import parse_value

    parsed: dict[str, Any] = {}
    for name, value in values.items():
        param = declared[name]
        annotation = param.annotation
        if annotation is inspect.Parameter.empty and param.default is not None and not param.required:
            annotation = type(param.default)
        parsed[name] = parse_value(name, value, annotation) if isinstance(value, str) else value
    return parsed


def parse_param_map(pairs: list[str]) -> dict[str, str]:
    """``["day=date"]`` as ``{"day": "date"}``: the pipeline parameter ``day`` gets the match's field ``date``."""
    mapped: dict[str, str] = {}
    for pair in pairs:
        param, sep, name = pair.partition("=")
        if not sep or not param.strip() or not name.strip():
            raise ConfigError(f"--param-from-match is PARAM=FIELD, e.g. day=date; got {pair!r}")
        mapped[param.strip()] = name.strip()
    return mapped


def filesystem(spec: FileSpec) -> Any:
    """The fsspec filesystem of the pattern, its listings never cached (each scan sees the storage as it is)."""
    import fsspec

    protocol = _protocol(spec.pattern)
    options: dict[str, Any] = {"use_listings_cache": False} if protocol not in ("file", "local") else {}
    try:
        return fsspec.filesystem(protocol, skip_instance_cache=True, **options)
    except TypeError:  # a filesystem without listings caches
        return fsspec.filesystem(protocol, skip_instance_cache=True)


def check_reachable(spec: FileSpec) -> dict[str, Match]:
    """What the pattern matches now; :class:`ConfigError` if its root cannot be listed."""
    try:
        fs = filesystem(spec)
        if not fs.exists(_strip(spec.root)):
            raise ConfigError(f"--on-new-files: {spec.root} does not exist, so {spec.pattern!r} cannot match; "
                              "create the folder (or bucket) first, or fix the pattern")
        return spec.scan(fs)[0]
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"--on-new-files: cannot list {spec.root} ({type(exc).__name__}: {exc}); check the URL and "
                          "the credentials in this process's environment (the service needs them too)") from None


_COMPILED: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    if pattern not in _COMPILED:
        parts: list[str] = []
        for segment in pattern.rstrip("/").split("/"):
            text, position = "", 0
            for token in re.finditer(r"([A-Za-z_][A-Za-z0-9_]*)=\*|\{([A-Za-z_][A-Za-z0-9_]*)\}|\*|\?|\[[^\]]*\]",
                                     segment):
                text += re.escape(segment[position:token.start()])
                hive, named = token.group(1), token.group(2)
                if hive:
                    text += f"{re.escape(hive)}=(?P<{hive}>[^/]*)"
                elif named:
                    text += f"(?P<{named}>[^/]*)"
                elif token.group(0) == "*":
                    text += "[^/]*"
                elif token.group(0) == "?":
                    text += "[^/]"
                else:
                    text += token.group(0)
                position = token.end()
            parts.append(text + re.escape(segment[position:]))
        body = "/".join(parts)
        # a partition is the folder and everything under it; a file is the whole path
        _COMPILED[pattern] = re.compile(f"{body}/" if pattern.endswith("/") else f"{body}$")
    return _COMPILED[pattern]


def _protocol(url: str) -> str:
    return url.split("://", 1)[0] if "://" in url else "file"


def _strip(url: str) -> str:
    return url.split("://", 1)[1] if "://" in url and not url.startswith("file://") else url.removeprefix("file://")


def _url(protocol: str, path: str) -> str:
    return path if protocol in ("file", "local") else f"{protocol}://{path}"


def _mtime(info: dict[str, Any], now: float) -> float:
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified", "created"):
        value = info.get(key)
        if isinstance(value, datetime):  # whole seconds (S3): the latest moment it could have been
            return value.timestamp() + (1.0 if value.microsecond == 0 else 0.0)
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return now  # a storage that says nothing: whole after quiet_s from the first look
