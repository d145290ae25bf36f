"""An object pickled once on the driver, however often it is sent or saved.

A Tuner sends its trainable with every trial's task and saves it with every
state of the experiment; pickling a function by value each time is most of a
no-work trial's cost on the driver. ``PickledOnce(obj)`` pickles ``obj`` when
built and unpickles as ``obj`` itself, a fresh copy each time, as before.
``Sealed`` carries the same bytes through the scheduler unopened: a task's
arguments are unpickled there and pickled again for the worker, and the
user's function should not be (a ``Sealed`` is opened by the task, on its worker).

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
