"""What ``serve.status()`` returns: Ray Serve's ``ServeStatus`` shape, readable as plain dicts too.

>>> status = ServeStatus({"shop": ApplicationStatusOverview(
...     status="RUNNING", message="", route_prefix="/shop",
...     deployments={"Items": DeploymentStatusOverview(status="HEALTHY", message="", replica_states={"RUNNING": 2},
...                                                    target_replicas=2, running_replicas=2, models=[])})})
>>> status.applications["shop"].deployments["Items"].status            # Ray's spelling
'HEALTHY'
>>> status["shop"]["deployments"]["Items"]["running_replicas"]           # the dict one
2
"""

from __future__ import annotations

from typing import Any

__all__ = ["ServeStatus", "ApplicationStatusOverview", "DeploymentStatusOverview", "application_status"]


class _Fields(dict[str, Any]):
    """A dict whose keys also read as attributes."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}; it has {sorted(self)}") from None


class DeploymentStatusOverview(_Fields):
    """``status`` (UPDATING, HEALTHY, UNHEALTHY, DEPLOY_FAILED), ``message``, ``replica_states`` (state -> count),
    ``target_replicas``, ``running_replicas``, ``models`` (the registered models it serves)."""


class ApplicationStatusOverview(_Fields):
    """``status`` (RUNNING, DEPLOYING, UNHEALTHY, DEPLOY_FAILED), ``message``, ``route_prefix``, ``deployments``."""


class ServeStatus(_Fields):
    """Application name -> :class:`ApplicationStatusOverview`; ``.applications`` is the same mapping (Ray's)."""

    @property
    def applications(self) -> dict[str, ApplicationStatusOverview]:
        return dict(self)


def application_status(deployments: dict[str, DeploymentStatusOverview]) -> tuple[str, str]:
    """An application's status and message from its deployments', as Ray Serve sums them up."""
    for status, summary in (("DEPLOY_FAILED", "DEPLOY_FAILED"), ("UNHEALTHY", "UNHEALTHY"),
                            ("UPDATING", "DEPLOYING")):
        named = [name for name, d in deployments.items() if d["status"] == status]
        if named:
            return summary, "; ".join(f"{name}: {deployments[name]['message']}" for name in named
                                      if deployments[name]["message"]) or f"{', '.join(named)} {status.lower()}"
    return "RUNNING", ""
