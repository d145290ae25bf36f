"""A model version's files: copied once into the storage under their content's digest, with a signed manifest.

Registering copies the checkpoint's folder to ``<storage>/models/<digest>/``,
where the digest is the SHA-256 of a manifest of every file's relative path and
SHA-256; the manifest itself sits beside it, signed with the installation's key
(:mod:`airflowless.integrity`). The same files registered twice are stored once.
Resolving a version checks the signature and every file's hash before anyone
loads the model: a file swapped in the storage is refused, not served.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import IO

import fsspec

from ..errors import ConfigError
from ..train.checkpoint import Checkpoint, persist_directory

__all__ = ["store_files", "verify_files"]

_CHUNK = 1 << 20


def store_files(checkpoint: Checkpoint) -> tuple[str, str]:
    """Copy ``checkpoint``'s files into the registry's storage (once per content); (its URI, its digest)."""
    from ..integrity import write_signed
    from ..settings import get_settings

    with checkpoint.as_directory() as local:
        files = sorted(str(p.relative_to(local)) for p in Path(local).rglob("*") if p.is_file())
        if not files:
            raise ConfigError(f"the checkpoint at {checkpoint.path} holds no files: nothing to register")
        manifest = {"files": {name: _file_sha256(Path(local, name)) for name in files}}
        body = json.dumps(manifest, sort_keys=True).encode()
        digest = hashlib.sha256(body).hexdigest()
        uri = f"{get_settings().storage.rstrip('/')}/models/{digest}"
        fs, _ = fsspec.core.url_to_fs(uri)
        if not fs.exists(_manifest_path(uri)):
            persist_directory(local, uri)
            write_signed(_manifest_path(uri), body)
    return uri, digest


def verify_files(uri: str, digest: str) -> None:
    """:class:`ConfigError` unless the files at ``uri`` are the ones registered under ``digest``."""
    from ..integrity import read_signed

    advice = "the registry's copy of this version was changed in the storage; register the model again"
    body = read_signed(_manifest_path(uri), advice=advice)
    if hashlib.sha256(body).hexdigest() != digest:
        raise ConfigError(f"the manifest at {uri} is not the one registered ({digest[:12]}...): {advice}")
    fs, root = fsspec.core.url_to_fs(uri)
    for name, expected in json.loads(body)["files"].items():
        try:
            with fs.open(f"{root}/{name}", "rb") as handle:
                found = _sha256(handle)
        except FileNotFoundError:
            raise ConfigError(f"{uri}/{name} is missing: {advice}") from None
        if found != expected:
            raise ConfigError(f"{uri}/{name} does not match what was registered: {advice}")


def _manifest_path(uri: str) -> str:
    return uri.rstrip("/") + ".manifest"


def _file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return _sha256(handle)


def _sha256(handle: IO[bytes]) -> str:
    digest = hashlib.sha256()
    with handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()

