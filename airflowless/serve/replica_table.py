"""The replica table: where a deployment's replicas listen, as the scheduler holds it for every router.

The controller (:mod:`.driver`) writes one table per deployment into the
scheduler's metadata under :func:`metadata_key`; a handle in a worker
(:mod:`.handle`) reads it to route, and a replica whose controller is gone
(:mod:`.replica`) removes it. All three use :class:`ReplicaTable`, so a row's
fields are read by name everywhere; on the scheduler a row is a plain tuple
(msgpack carries it).

>>> row = ReplicaInfo("demo/Model#1", "127.0.0.1", 8001, b"t", 42, "tcp://127.0.0.1:9000")
>>> table = ReplicaTable((row,), max_ongoing=8, max_queued=-1, models={"demo/Model#1": ("a", "b")})
>>> ReplicaTable.from_metadata(table.to_metadata()) == table
True
>>> table.written_by(b"t"), table.written_by(b"other")
(True, False)
"""

from __future__ import annotations

from dataclasses import astuple, dataclass, field
from typing import Any

__all__ = ["ReplicaInfo", "ReplicaTable", "metadata_key"]


def metadata_key(app_name: str, deployment_name: str) -> list[str]:
    """Where the scheduler's metadata holds the table of deployment ``deployment_name`` of ``app_name``."""
    return ["airflowless-serve", app_name, deployment_name]


@dataclass(frozen=True)
class ReplicaInfo:
    """Where a running replica listens, and the token its wire connections prove."""

    replica_id: str
    host: str
    port: int
    token: bytes
    pid: int
    worker: str
    owner: str = ""


@dataclass(frozen=True)
class ReplicaTable:
    """One deployment's running replicas and request limits, as every router of it sees them."""

    replicas: tuple[ReplicaInfo, ...]
    max_ongoing: int
    max_queued: int
    unavailable: str = ""
    """Why the deployment has no replica to route to ("" while it has)."""
    models: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The multiplexed models each replica holds, by replica id, as they last reported (:mod:`.multiplex`)."""

    def to_metadata(self) -> dict[str, Any]:
        return {"replicas": [astuple(r) for r in self.replicas], "max_ongoing": self.max_ongoing,
                "max_queued": self.max_queued, "unavailable": self.unavailable,
                "models": {replica: list(ids) for replica, ids in self.models.items()}}

    @classmethod
    def from_metadata(cls, data: dict[str, Any]) -> ReplicaTable:
        return cls(tuple(ReplicaInfo(*row) for row in data["replicas"]), max_ongoing=data["max_ongoing"],
                   max_queued=data["max_queued"], unavailable=data.get("unavailable", ""),
                   models={replica: tuple(ids) for replica, ids in data.get("models", {}).items()})

    def written_by(self, token: bytes) -> bool:
        """Whether this table lists the replica holding ``token`` (its controller wrote it)."""
        return any(r.token == token for r in self.replicas)
