"""User code pickled once on the driver, and carried through the scheduler unopened.

A Tuner sends its trainable with every trial's task and saves it with every
state of the experiment; pickling a function by value each time is most of a
no-work trial's cost on the driver. ``PickledOnce(obj)`` pickles ``obj`` when
built and unpickles as ``obj`` itself, a fresh copy each time, as before.

``Sealed`` carries the same bytes through the scheduler unopened: distributed's
scheduler unpickles a task's arguments and pickles them again for the worker,
with cloudpickle's own rules where it never imported airflowless (a plain
``dask scheduler``), which from cloudpickle 3.1.3 on write ``"<dynamic-code>"``
as the file of every function pickled by value, so a traceback from the worker
would not name the user's file. A ``Sealed`` is opened by the task, on its
worker. Stages (:class:`airflowless.dag.stage.Stage`), trainables and serve
replicas' classes travel so.

>>> import pickle
>>> pickle.loads(pickle.dumps(PickledOnce({"x": 1})))
{'x': 1}
>>> pickle.loads(pickle.dumps(PickledOnce({"x": 1}).sealed())).open()
{'x': 1}
"""

from __future__ import annotations

from typing import Any

import cloudpickle

__all__ = ["PickledOnce", "Sealed"]


class PickledOnce:
    """``obj``, pickled now; pickling this object gives those bytes, unpickling gives ``obj``."""

    def __init__(self, obj: Any) -> None:
        self.data = cloudpickle.dumps(obj)

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return cloudpickle.loads, (self.data,)

    def sealed(self) -> Sealed:
        """The same bytes, unpickled only by :meth:`Sealed.open`."""
        return Sealed(self.data)


class Sealed:
    """A pickled object that stays bytes until ``open()`` (see the module)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return Sealed, (self.data,)

    def open(self) -> Any:
        """A fresh copy of the object."""
        return cloudpickle.loads(self.data)
