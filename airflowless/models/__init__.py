"""The model registry: named models, their immutable versions, aliases such as ``champion`` that move.

>>> from airflowless import models                                                  # doctest: +SKIP
>>> v = models.register("taxi-big-tip", best.checkpoint, metrics=best.metrics)    # doctest: +SKIP
>>> models.set_alias("taxi-big-tip", "champion", v.version)                         # doctest: +SKIP
>>> serve.BatchPredictor.from_checkpoint("models:/taxi-big-tip@champion")           # doctest: +SKIP

A version keeps a copy of the checkpoint's files in the storage, content-addressed
and signed (:mod:`.artifacts`), its metrics, tags and description, and its
lineage: the pipeline run and stage that registered it, the experiment and
trial that wrote the checkpoint (looked up in the record by the checkpoint's
path), the datasets it was trained on and the code's git commit
(:mod:`.lineage`). ``models:/NAME@ALIAS``, ``models:/NAME/VERSION`` and ``models:/NAME``
(the newest) name a version wherever a checkpoint is taken
(:func:`checkpoint_of`; ``Checkpoint.from_uri``, ``BatchPredictor``,
``PredictorDeployment``). The record is the store's (``AIRFLOWLESS_DB``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..store import Store
    from ..train.checkpoint import Checkpoint

__all__ = ["ModelVersion", "register", "get", "versions", "list_models", "set_alias", "remove_alias",
           "delete_version", "resolve", "checkpoint_of", "parse_uri", "is_model_uri"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_ALIAS = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,99}")
PREFIX = "models:/"


@dataclass(frozen=True)
class ModelVersion:
    """One registered version: where its files are, what it measured, where it came from."""

    name: str
    version: int
    uri: str
    digest: str
    source: str | None = None
    metrics: dict[str, Any] | None = None
    tags: dict[str, str] | None = None
    description: str | None = None
    aliases: list[str] = field(default_factory=list)
    run_id: int | None = None
    stage: str | None = None
    experiment_id: int | None = None
    trial_id: int | None = None
    datasets: dict[str, Any] | None = None  # role -> plan token, input fingerprint, files (lineage)
    code_version: str | None = None  # the git commit of the file that registered it
    created_at: datetime | None = None

    @property
    def model_uri(self) -> str:
        return f"{PREFIX}{self.name}/{self.version}"

    @property
    def checkpoint(self) -> Checkpoint:
        """The version's files as a checkpoint (checked against what was registered)."""
        return self.checkpoint_as(self.model_uri)

    def checkpoint_as(self, model_uri: str) -> Checkpoint:
        """The version's files as a checkpoint that remembers the URI it was resolved from (an alias that may
        move: serving follows it)."""
        from ..train.checkpoint import Checkpoint
        from .artifacts import verify_files

        verify_files(self.uri, self.digest)
        return Checkpoint(self.uri, model_uri=model_uri, model_version=self.model_uri)


def _store(store: Store | None) -> Store:
    from ..store import open_store

    return store or open_store()


def register(name: str, checkpoint: Any, *, metrics: dict[str, Any] | None = None,
             tags: dict[str, str] | None = None, description: str | None = None,
             datasets: dict[str, Any] | None = None, store: Store | None = None) -> ModelVersion:
    """A new version of model ``name`` (created if new) from ``checkpoint`` (a Checkpoint, a path or URL, or a
    Train/Tune ``Result``, whose checkpoint and metrics are taken). ``datasets``: the Datasets it was trained
    (and judged) on, by role (``{"train": ds}``): their plan tokens and input fingerprints are kept
    (:mod:`.lineage`), as is the git commit of the calling file."""
    import sys

    from ..dag.interrupt import current_stage
    from ..jsonsafe import to_plain
    from ..train.checkpoint import Checkpoint
    from .artifacts import store_files
    from .lineage import code_version, dataset_lineage

    _check_name(name)
    if hasattr(checkpoint, "checkpoint") and hasattr(checkpoint, "metrics"):  # a Result
        metrics = metrics if metrics is not None else checkpoint.metrics
        checkpoint = checkpoint.checkpoint
    if checkpoint is None:
        raise ConfigError(f"register({name!r}, ...) needs a checkpoint; this result has none (did the training "
                          "report one with train.report(..., checkpoint=...)?)")
    if isinstance(checkpoint, str) and is_model_uri(checkpoint):
        raise ConfigError(f"{checkpoint} is a registered version already; register its checkpoint's path, or move "
                          "an alias to it")
    checkpoint = checkpoint if isinstance(checkpoint, Checkpoint) else Checkpoint(str(checkpoint))
    if tags is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
        raise ConfigError(f"tags are text keys and values, got {tags!r}")
    if datasets is not None and not (isinstance(datasets, dict) and all(isinstance(k, str) for k in datasets)):
        raise ConfigError(f"datasets are given by role, e.g. datasets={{'train': train_ds}}; got {datasets!r}")
    trained_on = {role: dataset_lineage(ds) for role, ds in (datasets or {}).items()} or None
    db = _store(store)
    uri, digest = store_files(checkpoint)
    lineage = db.checkpoint_lineage(checkpoint.path)
    lineage.update(datasets=trained_on, code_version=code_version(sys._getframe(1).f_code.co_filename))
    running = current_stage()
    if running is not None:
        lineage.update(run_id=running[0], stage=running[1])
    version = db.create_model_version(name, uri=uri, digest=digest, source=checkpoint.path,
                                      metrics=to_plain(metrics) if metrics else None, tags=tags,
                                      description=description, lineage=lineage)
    return get(name, version, store=db)


def get(name: str, version: int | None = None, *, alias: str | None = None, store: Store | None = None
        ) -> ModelVersion:
    """Version ``version`` of model ``name``, or the one ``alias`` points at, or the newest."""
    return _version(_store(store).model_version(name, version, alias=alias))


def versions(name: str, *, store: Store | None = None) -> list[ModelVersion]:
    """Every version of model ``name``, newest first."""
    return [_version(row) for row in _store(store).model_versions(name)]


def list_models(*, store: Store | None = None) -> list[dict[str, Any]]:
    """Every registered model: its newest version, how many, its aliases."""
    return _store(store).list_models()


def set_alias(name: str, alias: str, version: int, *, store: Store | None = None) -> None:
    """Point ``alias`` of model ``name`` at ``version`` (moving it if it points elsewhere; kept in its history)."""
    if not _ALIAS.fullmatch(alias or "") or alias.isdigit():
        raise ConfigError(f"an alias is letters, digits, '_' and '-', starting with a letter (e.g. champion); "
                          f"got {alias!r}")
    if isinstance(version, bool) or not isinstance(version, int):
        raise ConfigError(f"a version is a whole number, got {version!r}")
    _store(store).set_model_alias(name, alias, version)


def remove_alias(name: str, alias: str, *, store: Store | None = None) -> None:
    _store(store).set_model_alias(name, alias, None)


def delete_version(name: str, version: int, *, store: Store | None = None) -> None:
    """Remove a version from the record (its files stay: other versions may share them); refused while an alias
    points at it or a serve deployment serves it."""
    db = _store(store)
    serving = db.model_servers(name).get(version)
    if serving:
        where = ", ".join(f"{row['app']}/{row['deployment']} (pid {row['pid']} on {row['hostname']})"
                          for row in serving)
        raise ConfigError(f"version {version} of model {name!r} is served by {where}: serve.delete() that "
                          "application, or roll it to another version, before deleting this one")
    db.delete_model_version(name, version)


def is_model_uri(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def parse_uri(uri: str) -> tuple[str, int | None, str | None]:
    """``models:/NAME@ALIAS``, ``models:/NAME/VERSION`` or ``models:/NAME`` as (name, version, alias).

    >>> parse_uri("models:/taxi-big-tip@champion"), parse_uri("models:/taxi-big-tip/3")
    (('taxi-big-tip', None, 'champion'), ('taxi-big-tip', 3, None))
    """
    rest = uri.removeprefix(PREFIX) if is_model_uri(uri) else None
    found = re.fullmatch(r"([^/@]+)(?:@([^/@]+)|/(\d+))?", rest or "")
    if found is None:
        raise ConfigError(f"a model URI is models:/NAME@ALIAS, models:/NAME/VERSION or models:/NAME; got {uri!r}")
    name, alias, version = found.groups()
    return name, int(version) if version else None, alias


def resolve(uri: str, *, store: Store | None = None) -> ModelVersion:
    """The version ``uri`` names now (an alias is read when this is called)."""
    name, version, alias = parse_uri(uri)
    try:
        return get(name, version, alias=alias, store=store)
    except KeyError as exc:
        raise ConfigError(f"{uri}: {exc.args[0]}") from None


def checkpoint_of(value: Any, *, store: Store | None = None) -> Checkpoint:
    """``value`` as a checkpoint: a ``models:/`` URI resolved through the registry (and its files checked), a
    Checkpoint as it is, anything else as a path or URL."""
    from ..train.checkpoint import Checkpoint

    if isinstance(value, Checkpoint):
        return value
    if is_model_uri(value):
        return resolve(value, store=store).checkpoint_as(value)
    return Checkpoint(str(value))


def _check_name(name: str) -> None:
    if not _NAME.fullmatch(name or ""):
        raise ConfigError(f"a model's name is letters, digits, '.', '_' and '-' (up to 200), starting with a letter "
                          f"or digit; got {name!r}")


def _version(row: dict[str, Any]) -> ModelVersion:
    chosen: dict[str, Any] = {key: row[key] for key in ModelVersion.__dataclass_fields__ if key in row}
    return ModelVersion(**chosen)
