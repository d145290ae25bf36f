"""An Application: a deployment bound to its constructor arguments, which may be other Applications.

``flatten`` lists every deployment of an application once, ingress last, with
the Applications among its arguments replaced by :class:`DeploymentHandle`\\ s.

>>> from airflowless import serve
>>> @serve.deployment
... class Model:
...     def __call__(self, x): return x
>>> @serve.deployment
... class Ingress:
...     def __init__(self, model): self.model = model
>>> [d.name for d, _, _ in flatten(Ingress.bind(Model.bind()), app_name="demo")]
['Model', 'Ingress']
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .handle import DeploymentHandle

if TYPE_CHECKING:
    from .deployment import Deployment

__all__ = ["Application", "flatten"]


class Application:
    """The result of ``Deployment.bind(...)``; pass it to ``serve.run``."""

    def __init__(self, deployment: Deployment, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.deployment = deployment
        self.args = args
        self.kwargs = kwargs

    def __repr__(self) -> str:
        return f"Application({self.deployment.name})"


def flatten(app: Application, *, app_name: str) -> list[tuple[Deployment, tuple[Any, ...], dict[str, Any]]]:
    """Every deployment once (dependencies first) with handles in place of nested Applications."""
    if not isinstance(app, Application):
        raise ConfigError(f"serve.run expects an Application (SomeDeployment.bind(...)), got {type(app).__name__}")
    out: list[tuple[Deployment, tuple[Any, ...], dict[str, Any]]] = []
    seen: dict[str, Application] = {}

    def convert(value: Any) -> Any:
        if isinstance(value, Application):
            visit(value)
            return DeploymentHandle(app_name, value.deployment.name)
        if isinstance(value, list | tuple):
            return type(value)(convert(v) for v in value)
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        return value

    def visit(node: Application) -> None:
        name = node.deployment.name
        if name in seen:
            if seen[name] is not node:
                raise ConfigError(f"two different bound deployments are named {name!r} in application "
                                  f"{app_name!r}; give one another name with .options(name=...)")
            return
        seen[name] = node
        args = tuple(convert(a) for a in node.args)
        kwargs = {k: convert(v) for k, v in node.kwargs.items()}
        out.append((node.deployment, args, kwargs))

    visit(app)
    return out
