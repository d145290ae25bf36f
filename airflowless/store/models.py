"""The record of the model registry: registered models, their immutable versions, and aliases that move.

Used through :class:`~airflowless.store.store.Store` (this is a mixin of it);
users go through :mod:`airflowless.models`. A version's number is the model's
highest plus one, chosen under the record's lock (PostgreSQL: an advisory
lock; SQLite: its write lock), so registrations from any number of processes
get distinct numbers; a unique index on (model, version) backs it. An alias
is the newest of its rows: moving one writes a row, so its history is kept.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, and_, func, select

from ..errors import ConfigError
from . import schema
from .clock import aware, utc_now
from .service import _lock as _lock_with

__all__ = ["ModelRecords"]

_REGISTRY_LOCK = 7412203  # PostgreSQL advisory lock of version numbers and aliases


def _lock(conn: Connection) -> None:
    _lock_with(conn, _REGISTRY_LOCK)


class ModelRecords:
    engine: Engine

    def create_model_version(self, name: str, *, uri: str, digest: str, source: str | None = None,
                             metrics: dict[str, Any] | None = None, tags: dict[str, str] | None = None,
                             description: str | None = None, lineage: dict[str, Any] | None = None) -> int:
        """Record a new version of model ``name`` (the model too, if it is new); its version number."""
        models, versions = schema.registered_models, schema.model_versions
        now = utc_now()
        with self.engine.begin() as conn:
            _lock(conn)
            model_id = conn.execute(select(models.c.id).where(models.c.name == name)).scalar()
            if model_id is None:
                model_id = conn.execute(models.insert().values(name=name, created_at=now, updated_at=now)
                                        ).inserted_primary_key[0]  # type: ignore[index]
            else:
                conn.execute(models.update().where(models.c.id == model_id).values(updated_at=now))
            version = (conn.execute(select(func.max(versions.c.version)).where(versions.c.model_id == model_id))
                       .scalar() or 0) + 1
            conn.execute(versions.insert().values(
                model_id=model_id, version=version, uri=uri, digest=digest, source=source, metrics=metrics,
                tags=tags, description=description, created_at=now, **(lineage or {})))
        return int(version)

    def model_version(self, name: str, version: int | None = None, *, alias: str | None = None) -> dict[str, Any]:
        """Version ``version`` of model ``name`` (or the one ``alias`` names, or the newest); :class:`KeyError`
        saying what there is."""
        with self.engine.begin() as conn:
            model_id = _model_id(conn, name)
            if alias is not None:
                version = _alias_version(conn, model_id, alias)
                if version is None:
                    have = sorted(_aliases(conn, model_id))
                    raise KeyError(f"model {name!r} has no alias {alias!r}; it has {have or 'none'} "
                                   f"(set one with `airflowless models alias {name} ALIAS VERSION`)")
            versions = schema.model_versions
            query = select(versions).where(versions.c.model_id == model_id)
            query = query.where(versions.c.version == version) if version is not None else \
                query.order_by(versions.c.version.desc()).limit(1)
            row = conn.execute(query).mappings().first()
            if row is None:
                numbers = conn.execute(select(versions.c.version).where(versions.c.model_id == model_id)
                                       .order_by(versions.c.version)).scalars().all()
                raise KeyError(f"model {name!r} has no version {version}; it has {list(numbers) or 'none'}")
            return _version(row, name, _aliases(conn, model_id))

    def model_versions(self, name: str) -> list[dict[str, Any]]:
        """Every version of model ``name``, newest first, with the aliases on each."""
        versions = schema.model_versions
        with self.engine.begin() as conn:
            model_id = _model_id(conn, name)
            aliases = _aliases(conn, model_id)
            rows = conn.execute(select(versions).where(versions.c.model_id == model_id)
                                .order_by(versions.c.version.desc())).mappings().all()
        return [_version(row, name, aliases) for row in rows]

    def list_models(self) -> list[dict[str, Any]]:
        """Every registered model: name, description, its newest version, how many, its aliases."""
        models, versions = schema.registered_models, schema.model_versions
        with self.engine.begin() as conn:
            rows = conn.execute(select(models).order_by(models.c.name)).mappings().all()
            found = []
            for row in rows:
                numbers = conn.execute(select(func.max(versions.c.version), func.count()).where(
                    versions.c.model_id == row["id"])).one()
                found.append({"name": row["name"], "description": row["description"], "latest_version": numbers[0],
                              "versions": int(numbers[1]), "aliases": _aliases(conn, row["id"]),
                              "created_at": aware(row["created_at"]), "updated_at": aware(row["updated_at"])})
        return found

    def set_model_alias(self, name: str, alias: str, version: int | None) -> None:
        """Point ``alias`` of model ``name`` at ``version`` (None: remove it), atomically; the move is kept."""
        models, versions, aliases = schema.registered_models, schema.model_versions, schema.model_aliases
        with self.engine.begin() as conn:
            _lock(conn)
            model_id = _model_id(conn, name)
            if version is not None and conn.execute(select(versions.c.id).where(and_(
                    versions.c.model_id == model_id, versions.c.version == version))).first() is None:
                numbers = conn.execute(select(versions.c.version).where(versions.c.model_id == model_id)
                                       .order_by(versions.c.version)).scalars().all()
                raise ConfigError(f"model {name!r} has no version {version} to point {alias!r} at; it has "
                                  f"{list(numbers)}")
            if version is None and _alias_version(conn, model_id, alias) is None:
                raise ConfigError(f"model {name!r} has no alias {alias!r} to remove")
            now = utc_now()
            conn.execute(aliases.insert().values(model_id=model_id, alias=alias, version=version, set_at=now))
            conn.execute(models.update().where(models.c.id == model_id).values(updated_at=now))

    def model_alias_history(self, name: str, alias: str) -> list[dict[str, Any]]:
        """Where ``alias`` of model ``name`` pointed, newest first (version None: removed)."""
        aliases = schema.model_aliases
        with self.engine.begin() as conn:
            model_id = _model_id(conn, name)
            rows = conn.execute(select(aliases.c.version, aliases.c.set_at).where(and_(
                aliases.c.model_id == model_id, aliases.c.alias == alias)).order_by(aliases.c.id.desc())).all()
        return [{"version": row.version, "set_at": aware(row.set_at)} for row in rows]

    def delete_model_version(self, name: str, version: int) -> None:
        """Remove version ``version`` of model ``name`` from the record; refused while an alias points at it."""
        versions = schema.model_versions
        with self.engine.begin() as conn:
            _lock(conn)
            model_id = _model_id(conn, name)
            using = sorted(alias for alias, at in _aliases(conn, model_id).items() if at == version)
            if using:
                raise ConfigError(f"version {version} of model {name!r} is what alias(es) {using} point at; move "
                                  f"them first (`airflowless models alias {name} {using[0]} VERSION`)")
            gone = conn.execute(versions.delete().where(and_(versions.c.model_id == model_id,
                                                             versions.c.version == version)))
            if gone.rowcount != 1:
                raise KeyError(f"model {name!r} has no version {version}")

    def checkpoint_lineage(self, uri: str) -> dict[str, Any]:
        """The trial and experiment that wrote the checkpoint at ``uri`` (empty if the record does not know)."""
        checkpoints, trials = schema.checkpoints, schema.trials
        with self.engine.begin() as conn:
            row = conn.execute(select(trials.c.id, trials.c.experiment_id).join(
                checkpoints, checkpoints.c.trial_id == trials.c.id).where(checkpoints.c.uri == uri)
                .order_by(checkpoints.c.id.desc()).limit(1)).first()
            if row is None:
                row = conn.execute(select(trials.c.id, trials.c.experiment_id).where(trials.c.checkpoint_uri == uri)
                                   .order_by(trials.c.id.desc()).limit(1)).first()
        return {"trial_id": row.id, "experiment_id": row.experiment_id} if row is not None else {}


def _model_id(conn: Connection, name: str) -> int:
    models = schema.registered_models
    found = conn.execute(select(models.c.id).where(models.c.name == name)).scalar()
    if found is None:
        names = conn.execute(select(models.c.name).order_by(models.c.name)).scalars().all()
        raise KeyError(f"no registered model named {name!r}; there are {list(names) or 'none'} "
                       "(see `airflowless models list`)")
    return int(found)


def _aliases(conn: Connection, model_id: int) -> dict[str, int]:
    """Alias -> the version it points at now (removed aliases left out)."""
    aliases = schema.model_aliases
    newest: dict[str, int | None] = {}
    for row in conn.execute(select(aliases.c.alias, aliases.c.version).where(aliases.c.model_id == model_id)
                            .order_by(aliases.c.id)):
        newest[row.alias] = row.version
    return {alias: version for alias, version in sorted(newest.items()) if version is not None}


def _alias_version(conn: Connection, model_id: int, alias: str) -> int | None:
    return _aliases(conn, model_id).get(alias)


def _version(row: Any, name: str, aliases: dict[str, int]) -> dict[str, Any]:
    data = dict(row)
    data.pop("id")
    data.pop("model_id")
    data["name"] = name
    data["created_at"] = aware(data["created_at"])
    data["aliases"] = sorted(alias for alias, at in aliases.items() if at == data["version"])
    return data

