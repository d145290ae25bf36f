"""An object pickled once on the driver, however often it is sent or saved.

A Tuner sends its trainable with every trial's task and saves it with every
state of the experiment; pickling a function by value each time is most of a
no-work trial's cost on the driver. ``PickledOnce(obj)`` pickles ``obj`` when
built and unpickles as ``obj`` itself, a fresh copy each time, as before.

>>> import pickle
>>> pickle.loads(pickle.dumps(PickledOnce({"x": 1})))
{'x': 1}
"""

from __future__ import annotations

from typing import Any

import cloudpickle

__all__ = ["PickledOnce"]


class PickledOnce:
    """``obj``, pickled now; pickling this object gives those bytes, unpickling gives ``obj``."""

    def __init__(self, obj: Any) -> None:
        self.data = cloudpickle.dumps(obj)

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return cloudpickle.loads, (self.data,)
