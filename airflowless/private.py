"""What airflowless keeps on disk is its user's alone: folders 0700, new files 0600.

On a shared host another local user could read the record, every stage
output and checkpoint: ``$AIRFLOWLESS_HOME`` was made 0755 and the files in it
0644. Everything airflowless keeps locally lives under a few roots — the home
(the record, tokens, cluster state), the storage root (stage outputs,
checkpoints, Tune state) and a background cluster's log folder — so each root
is made private when airflowless makes it (:func:`private_folder`), and what
is written below it is out of other users' reach whatever its own mode. A
home an earlier version left open (it holds the record or the signing key) is
narrowed; a folder airflowless did not make (``/data``, a shared ``/tmp``) is
left as it is, with a warning when others can read it. An SQLite record created elsewhere
gets mode 0600 itself (:func:`private_file`; SQLite gives its ``-wal`` and
``-shm`` files the same mode).

To share with your group instead (a team's record on one server), set
``AIRFLOWLESS_SHARE=group``: folders 0750, files 0640.

>>> oct(folder_mode(share=""))
'0o700'
>>> oct(file_mode(share="group"))
'0o640'
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from .settings import get_settings

__all__ = ["folder_mode", "file_mode", "private_folder", "private_file", "secure_roots"]

log = logging.getLogger(__name__)


def folder_mode(*, share: str | None = None) -> int:
    """The mode of airflowless's folders: 0700, or 0750 with ``AIRFLOWLESS_SHARE=group``."""
    return 0o750 if (get_settings().share if share is None else share) == "group" else 0o700


def file_mode(*, share: str | None = None) -> int:
    """The mode of files airflowless creates outside its private folders: 0600, or 0640 when shared."""
    return 0o640 if (get_settings().share if share is None else share) == "group" else 0o600


def _set_mode(path: Path, mode: int) -> None:
    """Give ``path`` (ours) exactly ``mode`` in its permission bits, keeping setgid and the like."""
    info = path.stat()
    if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o777 == mode:
        return  # another user's folder is theirs to set; or nothing to do
    if stat.S_IMODE(info.st_mode) & 0o077 & ~mode:
        log.info("airflowless: made %s private (mode %o, was %o); set AIRFLOWLESS_SHARE=group to share it "
                 "with your group", path, mode, stat.S_IMODE(info.st_mode) & 0o777)
    os.chmod(path, (stat.S_IMODE(info.st_mode) & ~0o777) | mode)


def private_folder(path: str | Path) -> Path:
    """``path``, made (with any missing parents) or narrowed to :func:`folder_mode`; returned."""
    path = Path(path).expanduser()
    mode = folder_mode()
    missing = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):
        folder.mkdir(mode=mode, exist_ok=True)  # another process may make it meanwhile
    if missing or _airflowless_made(path):
        _set_mode(path, mode)  # mkdir's mode passes through the umask; this does not
    elif stat.S_IMODE(path.stat().st_mode) & 0o077 & ~mode:
        log.warning("airflowless: %s is open to other users of this machine and airflowless did not make it, so "
                    "it leaves its mode alone; chmod %o it to keep what airflowless writes there private", path, mode)
    return path


def _airflowless_made(path: Path) -> bool:
    """Whether the existing folder ``path`` is one airflowless made (a home it keeps its record or key in, or
    empty): only those are narrowed. A folder of the user's (``/data``, a shared ``/tmp``) is left alone."""
    info = path.stat()
    if info.st_mode & stat.S_ISVTX:  # sticky: a shared folder such as /tmp
        return False
    return path.name == ".airflowless" or any((path / name).exists() for name in _MARKS) or not any(path.iterdir())


_MARKS = ("airflowless.db", "signing.key", "tokens", "cluster.json")


def private_file(path: str | Path) -> None:
    """Give the file ``path``, if it is ours, :func:`file_mode`."""
    path = Path(path)
    if path.exists():
        _set_mode(path, file_mode())


def secure_roots() -> None:
    """Make ``$AIRFLOWLESS_HOME`` and a local storage root private (cheap: a few ``stat`` calls)."""
    settings = get_settings()
    roots: list[str | Path] = [settings.home]
    storage = settings.storage.removeprefix("file://")
    if "://" not in storage:
        roots.append(storage)
    for root in roots:
        try:
            private_folder(root)
        except OSError as exc:  # a read-only home still serves reads; writes will say what is wrong
            log.warning("airflowless: cannot make %s private (%s)", root, exc)
