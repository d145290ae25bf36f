"""Ray's class API: a ``tune.Trainable`` subclass with ``setup``, ``step``, ``save_checkpoint`` and
``load_checkpoint``, run by a Tuner as a function trial.

Each trial makes one instance (``setup(config)``), restores it from the trial's
checkpoint if it has one (``load_checkpoint``), then calls ``step()`` and
reports what it returns until the trial is stopped (``RunConfig(stop=...)``, a
scheduler) or a step returns ``done: True``. ``RunConfig(checkpoint_config=
CheckpointConfig(checkpoint_frequency=N, checkpoint_at_end=True))`` saves every N
steps and after a step that returns ``done`` (a trial stopped from outside ends
without a last save). ``save_checkpoint(checkpoint_dir)`` writes files there, or
returns a dict of JSON values, which ``load_checkpoint`` then receives instead
of the folder.

>>> from airflowless import tune
>>> class Quadratic(tune.Trainable):
...     def setup(self, config): self.x, self.loss = config["x"], 100.0
...     def step(self):
...         self.loss = self.loss / 2 + (self.x - 3) ** 2
...         return {"loss": self.loss}
>>> Quadratic({"x": 3}).train()["loss"]
50.0
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

from ..errors import UsageError

__all__ = ["Trainable"]

_STATE = ".trainable.json"  # the iteration, and a dict save_checkpoint returned


class Trainable:
    """Subclass it and define ``setup(config)`` and ``step() -> dict``; optionally ``save_checkpoint``,
    ``load_checkpoint`` and ``cleanup``."""

    def __init__(self, config: dict[str, Any] | None = None, **setup_kwargs: Any) -> None:
        """``setup_kwargs``: the objects of ``tune.with_parameters(cls, **objects)``, passed to ``setup``."""
        self.config = dict(config or {})
        self.iteration = 0  # steps done (counted on from a restored checkpoint)
        self.setup(dict(self.config), **setup_kwargs)

    @property
    def training_iteration(self) -> int:
        return self.iteration

    def setup(self, config: dict[str, Any]) -> None:
        """Build what the steps use (a model, data); called once per trial."""

    def step(self) -> dict[str, Any]:
        """One iteration; returns its metrics (``done: True`` ends the trial)."""
        raise NotImplementedError(f"{type(self).__name__} must define step() returning a dict of metrics")

    def save_checkpoint(self, checkpoint_dir: str) -> dict[str, Any] | None:
        """Write the state to ``checkpoint_dir`` (or return it as a dict of JSON values)."""
        return None

    def load_checkpoint(self, checkpoint: Any) -> None:
        """Restore what :meth:`save_checkpoint` saved: its folder, or the dict it returned."""

    def cleanup(self) -> None:
        """Release what ``setup`` took; called once when the trial's run ends."""

    def train(self) -> dict[str, Any]:
        """Run one step and return its result (what the Tuner reports), ``training_iteration`` included."""
        result = self.step()
        if not isinstance(result, dict):
            raise UsageError(f"{type(self).__name__}.step() must return a dict of metrics, got {result!r}")
        self.iteration += 1
        return {**result, "training_iteration": self.iteration}

    def save(self, checkpoint_dir: str) -> None:
        returned = self.save_checkpoint(checkpoint_dir)
        with open(os.path.join(checkpoint_dir, _STATE), "w") as f:
            json.dump({"iteration": self.iteration, "returned": returned}, f)

    def restore(self, checkpoint_dir: str) -> None:
        path = os.path.join(checkpoint_dir, _STATE)
        state: dict[str, Any] = {"iteration": 0, "returned": None}
        if os.path.exists(path):
            with open(path) as f:
                state = json.load(f)
        self.iteration = int(state["iteration"])
        self.load_checkpoint(state["returned"] if state["returned"] is not None else checkpoint_dir)


def is_trainable_class(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, Trainable)


def as_function(cls: type[Trainable], checkpoint_config: Any) -> Callable[[dict[str, Any]], None]:
    """A function trial that runs ``cls`` as Ray runs a class trainable (see the module docstring)."""
    every = int(getattr(checkpoint_config, "checkpoint_frequency", 0) or 0)
    at_end = bool(getattr(checkpoint_config, "checkpoint_at_end", False))

    def run_trainable(config: dict[str, Any], **objects: Any) -> None:
        from ..train.checkpoint import Checkpoint
        from ..train.context import get_checkpoint, report

        trainable = cls(config, **objects)
        try:
            restored = get_checkpoint()
            if restored is not None:
                with restored.as_directory() as folder:
                    trainable.restore(folder)
            while True:
                result = trainable.train()
                done = bool(result.pop("done", False))
                result.pop("training_iteration", None)  # the Tuner numbers the reports itself
                reported = {**result, "done": done} if done else result
                if (every and trainable.iteration % every == 0) or (done and at_end):
                    with tempfile.TemporaryDirectory(prefix="trainable-") as folder:  # report copies it
                        trainable.save(folder)
                        report(reported, checkpoint=Checkpoint.from_directory(folder))
                else:
                    report(reported)
                if done:
                    return
        finally:
            trainable.cleanup()

    run_trainable.__name__ = run_trainable.__qualname__ = cls.__name__
    return run_trainable
