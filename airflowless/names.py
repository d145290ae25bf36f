"""Names that become parts of storage paths, and joining them under a root that they cannot leave.

Stage names, node names and run names are folder or file names under the
storage root. :func:`check_name` refuses what would not be one name (``/``,
``\\``, ``.``, ``..``, empty, control characters); :func:`join_under` joins
and normalises a path and refuses one that leaves its root, whatever made it.

>>> check_name("stage name", "load")
'load'
>>> join_under("/srv/storage", "outputs", "load", "k.pkl")
'/srv/storage/outputs/load/k.pkl'
"""

from __future__ import annotations

import os
import posixpath
from typing import Any

from .errors import ConfigError

__all__ = ["check_name", "join_under"]


def check_name(kind: str, value: Any) -> str:
    """``value`` if it is a usable single path component; else :class:`ConfigError` naming ``kind``."""
    problem = None
    if not isinstance(value, str):
        problem = f"a {type(value).__name__}"
    elif not value.strip():
        problem = "an empty name"
    elif value in (".", ".."):
        problem = f"{value!r}, which names a folder, not a new one"
    elif "/" in value or "\\" in value:
        problem = f"{value!r}, which holds a path separator"
    elif any(ord(c) < 32 or ord(c) == 127 for c in value):
        problem = f"{value!r}, which holds control characters"
    if problem is not None:
        raise ConfigError(
            f"{kind} must be a non-empty name without '/', '\\' or control characters, and not '.' or '..'; "
            f"got {problem}; use letters, digits, '-', '_' or '.' (e.g. 'load-taxi')"
        )
    return value


def join_under(root: str, *parts: str) -> str:
    """``root/part/...`` normalised; :class:`ConfigError` if the result is not inside ``root``.

    ``root`` is a local folder or an fsspec URL (``s3://bucket/prefix``).
    """
    protocol, sep, rest = root.partition("://")
    if sep:  # a URL: paths are POSIX paths after the protocol
        clean_root = posixpath.normpath(rest or "/")
        joined, slash = posixpath.normpath(posixpath.join(clean_root, *parts)), "/"
    else:
        clean_root = os.path.normpath(os.path.abspath(root))
        joined, slash = os.path.normpath(os.path.join(clean_root, *parts)), os.sep
    inside = joined == clean_root or joined.startswith(clean_root.rstrip(slash) + slash)
    if not inside:
        raise ConfigError(
            f"a path under the storage root {root!r} was expected, but joining {list(parts)} gives "
            f"{joined!r}, outside it; name stages and runs with single names (no '/' or '..')"
        )
    return f"{protocol}://{joined}" if sep else joined
