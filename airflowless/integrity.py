"""Signed files: what airflowless pickles to storage carries an HMAC of this installation's key.

Stage outputs and Tune experiment state are pickles, and unpickling runs
code. Whoever can write the storage root must not be able to make the next
run execute a file of theirs, so every such file is framed as::

    AIRFLOWLESS-SIGNED-1\\n<hex HMAC-SHA256(key, file name + NUL + payload)>\\n<payload>

and a reader checks the HMAC (constant-time) before it unpickles anything.
Binding the file name means a signed file copied over another one is refused too.

The key: 32 random bytes, hex, in ``$AIRFLOWLESS_HOME/signing.key`` (created
with mode 0600 on first use, whatever the store is, SQLite or PostgreSQL).
A pipeline driver hands its key to the cluster's workers with
:class:`SigningKeyPlugin`, so workers on other hosts sign and check with the
driver's key; a process without an installed key uses its own key file. Hosts
that share outputs without a driver between them (two drivers on one storage
root) need the same key file.

>>> framed = sign(b"payload", "out.pkl", key=b"k" * 32)
>>> unsign(framed, "out.pkl", key=b"k" * 32)
b'payload'
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import uuid
from pathlib import Path
from typing import Any

import fsspec
from distributed import WorkerPlugin
from fsspec.implementations.local import LocalFileSystem

from .errors import SignatureError

__all__ = ["KEY_FILE", "SigningKeyPlugin", "current_key", "install_key", "key_path", "read_signed",
           "sign", "unsign", "write_signed"]

KEY_FILE = "signing.key"
_MAGIC = b"AIRFLOWLESS-SIGNED-1\n"
_DIGEST_HEX = 64
_installed: bytes | None = None


def key_path() -> Path:
    """Where this process's key file is: ``$AIRFLOWLESS_HOME/signing.key``."""
    from .settings import get_settings

    return get_settings().home / KEY_FILE


def _load_or_create(path: Path) -> bytes:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
            with contextlib.suppress(FileExistsError):  # another process made it first: use theirs
                os.link(tmp, path)  # atomic, and never replaces an existing key
        finally:
            tmp.unlink(missing_ok=True)
    text = path.read_text().strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) < 32:
        raise SignatureError(str(path), "the key file does not hold a key (64 hex digits)",
                             f"delete {path} to make a new key (outputs signed with the old one are then refused)")
    return key


def install_key(key: bytes | None) -> None:
    """Use ``key`` in this process instead of the key file (``None``: the key file again)."""
    global _installed
    _installed = key


def current_key() -> bytes:
    """The key this process signs and checks with: the installed one, else the key file's."""
    return _installed if _installed is not None else _load_or_create(key_path())


def _mac(key: bytes, name: str, payload: bytes) -> bytes:
    return hmac.new(key, name.encode() + b"\0" + payload, hashlib.sha256).hexdigest().encode()


def sign(payload: bytes, name: str, *, key: bytes | None = None) -> bytes:
    """``payload`` framed with its HMAC, bound to the file name ``name``."""
    return _MAGIC + _mac(key or current_key(), name, payload) + b"\n" + payload


def unsign(framed: bytes, name: str, *, key: bytes | None = None, where: str | None = None,
           advice: str = "") -> bytes:
    """The payload of ``framed``, or :class:`SignatureError` if its HMAC does not match."""
    where = where or name
    if not framed.startswith(_MAGIC):
        raise SignatureError(where, "it carries no airflowless signature", advice)
    start = len(_MAGIC)
    given, payload = framed[start:start + _DIGEST_HEX], framed[start + _DIGEST_HEX + 1:]
    if framed[start + _DIGEST_HEX:start + _DIGEST_HEX + 1] != b"\n":
        raise SignatureError(where, "its signature header is malformed", advice)
    if not hmac.compare_digest(given, _mac(key or current_key(), name, payload)):
        raise SignatureError(where, "its signature does not match its contents", advice)
    return payload


def _name_of(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def write_signed(uri: str, payload: bytes, *, key: bytes | None = None) -> None:
    """Write ``payload`` signed at ``uri`` (local or fsspec), atomically: a temp file, then a rename.

    ``key``: sign with it instead of looking up :func:`current_key` (for a writer saving often).
    """
    fs, path = fsspec.core.url_to_fs(uri)
    framed = sign(payload, _name_of(path), key=key)
    if isinstance(fs, LocalFileSystem):  # the same steps in a few system calls (a Tuner saves every turn)
        _write_local(path, framed)
        return
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    try:
        with fs.open(tmp, "wb") as f:
            f.write(framed)
        fs.mv(tmp, path)
    except BaseException:
        if fs.exists(tmp):
            fs.rm(tmp)
        raise


def _write_local(path: str, data: bytes) -> None:
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        try:
            fd = os.open(tmp, flags, 0o666)
        except FileNotFoundError:  # its folder is not there yet
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(tmp, flags, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def read_signed(uri: str, *, advice: str = "") -> bytes:
    """The payload of the signed file at ``uri``; :class:`SignatureError` (naming it) if it is not ours."""
    fs, path = fsspec.core.url_to_fs(uri)
    with fs.open(path, "rb") as f:
        framed = f.read()
    return unsign(framed, _name_of(path), where=uri, advice=advice)


class SigningKeyPlugin(WorkerPlugin):
    """Installs a driver's signing key on every worker (and every worker that joins later).

    ``setup`` installs the key in the worker process; ``teardown`` removes it.
    """

    name = "airflowless-signing-key"
    idempotent = False  # a new driver's key replaces the last one

    def __init__(self, key: bytes) -> None:
        self._key = key

    def setup(self, worker: Any) -> None:
        install_key(self._key)

    def teardown(self, worker: Any) -> None:
        install_key(None)

    def __repr__(self) -> str:
        return "<SigningKeyPlugin (key hidden)>"
