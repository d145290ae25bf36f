"""Submitting code: the module's folder is packed, signed and put in the storage; the driver unpacks it.

``airflowless submit`` (and ``deploy --upload``) pack the folder a pipeline
module is imported from, as Ray's ``working_dir`` or Determined's context
directory are: the top folder of its package (``pipelines/taxi.py`` in a
``pipelines`` package: the folder holding ``pipelines``), else the module's own
folder. Caches, virtual environments and version control are left out
(:data:`IGNORED`, and the patterns of a ``.airflowlessignore`` file at the
root, one per line); the archive is at most ``AIRFLOWLESS_SUBMIT_MAX_MB``
(default 100) MiB, else an error lists the largest files. It is a
deterministic tar.gz, signed with the installation's key
(:mod:`airflowless.integrity`) and stored once per content at
``<storage>/submissions/<sha256>.tar.gz``; the run's target says where, and
which module in it: ``submission:<uri>#<path in the archive>:<pipeline>``.

The driver the service starts checks the signature before it unpacks
anything (a submission is code execution: only a holder of the key can make
the service run code), unpacks into ``$AIRFLOWLESS_HOME/service/work/<sha256>``
(once per content) and loads the module from there.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import tarfile
from pathlib import Path

from ..errors import ConfigError

__all__ = ["IGNORED", "PREFIX", "pack", "upload", "materialize", "is_submission", "local_target", "uploaded"]

PREFIX = "submission:"
IGNORED = (".git", ".hg", ".svn", "__pycache__", "*.pyc", ".venv", "venv", ".mypy_cache", ".ruff_cache",
           ".pytest_cache", ".hypothesis", ".ipynb_checkpoints", "node_modules", ".DS_Store", ".tox")


def is_submission(target: str) -> bool:
    return target.startswith(PREFIX)


def root_of(module: Path) -> Path:
    """The folder to pack for ``module``: the top of its package's folders, else its own folder."""
    folder = module.resolve().parent
    while (folder / "__init__.py").exists() and folder.parent != folder:
        folder = folder.parent
    return folder


def _ignored(root: Path) -> list[str]:
    patterns = list(IGNORED)
    listed = root / ".airflowlessignore"
    if listed.is_file():
        patterns += [line.strip().rstrip("/") for line in listed.read_text().splitlines()
                     if line.strip() and not line.lstrip().startswith("#")]
    return patterns


def _files(root: Path) -> list[Path]:
    patterns = _ignored(root)

    def skip(relative: str) -> bool:
        name = relative.rsplit("/", 1)[-1]
        return any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch(relative, p) for p in patterns)

    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        base = Path(folder).relative_to(root)
        dirs[:] = sorted(d for d in dirs if not skip((base / d).as_posix()) and not (Path(folder) / d).is_symlink())
        found += [Path(folder) / f for f in sorted(files)
                  if not skip((base / f).as_posix()) and (Path(folder) / f).is_file()]
    return found


def _max_bytes() -> int:
    from ..settings import get_settings

    return int(get_settings().submit_max_mb * 2**20)


def pack(root: Path) -> bytes:
    """The files under ``root`` (ignore list applied) as a deterministic tar.gz; ConfigError over the bound."""
    files = _files(root)
    limit = _max_bytes()
    sizes = {path: path.stat().st_size for path in files}
    if sum(sizes.values()) > limit:
        largest = sorted(sizes.items(), key=lambda item: -item[1])[:5]
        shown = ", ".join(f"{p.relative_to(root)} ({n / 2**20:.1f} MiB)" for p, n in largest)
        raise ConfigError(f"the submission of {root} holds {sum(sizes.values()) / 2**20:.1f} MiB, over the "
                          f"{limit / 2**20:g} MiB bound (AIRFLOWLESS_SUBMIT_MAX_MB); the largest: {shown}. List what "
                          "the run does not need in a .airflowlessignore file there (one pattern per line), or put "
                          "data in the storage rather than beside the code")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as archive:
        for path in files:
            info = tarfile.TarInfo(path.relative_to(root).as_posix())
            info.size, info.mtime, info.mode = sizes[path], 0, 0o644
            with path.open("rb") as data:
                archive.addfile(info, data)
    return buffer.getvalue()


def upload(module: Path, pipeline: str, *, storage: str | None = None) -> str:
    """Pack and store the folder of ``module``; the run target naming the archive and the module in it."""
    from ..integrity import write_signed
    from ..names import join_under
    from ..settings import get_settings

    root = root_of(module)
    payload = pack(root)
    digest = hashlib.sha256(payload).hexdigest()
    uri = join_under(storage or get_settings().storage, "submissions", f"{digest}.tar.gz")
    write_signed(uri, payload)
    return f"{PREFIX}{uri}#{module.resolve().relative_to(root).as_posix()}:{pipeline}"


def materialize(target: str) -> str:
    """The local target of submission ``target``: checked, unpacked once, the module's path with ``:NAME``."""
    from ..integrity import read_signed
    from ..private import private_folder
    from ..settings import get_settings

    uri, _, inside = target.removeprefix(PREFIX).rpartition("#")
    digest = uri.rsplit("/", 1)[-1].removesuffix(".tar.gz")
    work = private_folder(get_settings().home / "service" / "work")
    folder = work / digest
    if not folder.exists():
        payload = read_signed(uri, advice="the submission was not made with this installation's key, or was "
                                          "changed after it was made; submit it again")
        if hashlib.sha256(payload).hexdigest() != digest:
            raise ConfigError(f"the submission at {uri} does not hold what its name says; submit it again")
        staging = work / f"{digest}.{os.getpid()}.tmp"
        with tarfile.open(fileobj=io.BytesIO(payload), mode="r:gz") as archive:
            archive.extractall(staging, filter="data")  # no absolute paths, no .., no links out
        try:
            staging.rename(folder)
        except OSError:  # another driver unpacked it first
            import shutil

            shutil.rmtree(staging, ignore_errors=True)
    return f"{folder / inside.rpartition(':')[0]}:{inside.rpartition(':')[2]}"


def local_target(target: str) -> str:
    """``target`` as this process loads it: a submission unpacked here, anything else as it is."""
    return materialize(target) if is_submission(target) else target


def uploaded(target: str, pipeline: str) -> str:
    """``target`` (``/abs/file.py:NAME`` as :func:`~.deploy.resolve_target` gives it) uploaded; a module
    imported by name is left as it is (the service imports it from its environment)."""
    path = Path(target.rpartition(":")[0])
    return upload(path, pipeline) if path.suffix == ".py" and path.is_file() else target
