"""Ranks of one group exchanging small values (addresses, ports) through the Dask scheduler."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["Rendezvous"]


class Rendezvous:
    """Named values of one group, kept in ``distributed.Variable`` s on the scheduler."""

    def __init__(self, group: str, timeout: float = 120.0) -> None:
        self.group = group
        self.timeout = timeout

    def _variable(self, name: str) -> Any:
        from distributed import Variable

        return Variable(f"{self.group}-{name}")

    def publish(self, name: str, value: Any) -> None:
        self._variable(name).set(value)

    def receive(self, name: str) -> Any:
        deadline = time.monotonic() + self.timeout
        variable = self._variable(name)
        while True:
            try:
                return variable.get(timeout=min(5.0, max(0.1, deadline - time.monotonic())))
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"rank rendezvous {self.group!r}: no value for {name!r} within {self.timeout:g} s "
                        "(a rank of the group did not start)") from None

    def all_gather(self, rank: int, world_size: int, value: Any, name: str = "rank") -> list[Any]:
        """Every rank's ``value``, in rank order; ``name`` tells apart two gathers of one group."""
        self.publish(f"{name}-{rank}", value)
        return [self.receive(f"{name}-{r}") for r in range(world_size)]
