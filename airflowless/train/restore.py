"""``Trainer.restore(path)``: go on with a fit that was interrupted (its driver killed, a crash), as Ray's.

``fit()`` saves the trainer, without its datasets, as ``<run folder>/trainer.pkl``
(signed, :mod:`..integrity`) before it trains. ``XGBoostTrainer.restore(path,
datasets={...})`` loads it, takes the datasets again (Datasets are plans over
the cluster's data, not saved: give the same names), and resumes from the
latest checkpoint in the folder, its reports numbered on from that
checkpoint's step, into the same folder (the record gets a new run there,
which ``Result.from_path`` finds). ``can_restore(path)`` says whether a
folder holds such a trainer.

>>> from airflowless.train.xgboost import XGBoostTrainer
>>> if XGBoostTrainer.can_restore(path):                                         # doctest: +SKIP
...     trainer = XGBoostTrainer.restore(path, datasets={"train": train_ds, "valid": valid_ds})
... else:
...     trainer = XGBoostTrainer(label_column="y", datasets=..., run_config=RunConfig(name="taxi"))
>>> result = trainer.fit()                                                       # doctest: +SKIP
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
from typing import TYPE_CHECKING, Any

import cloudpickle
import fsspec

from ..errors import ConfigError
from ..integrity import read_signed, write_signed
from .checkpoint import Checkpoint

if TYPE_CHECKING:
    from .trainer import BaseTrainer

__all__ = ["STATE_FILE", "save_trainer", "can_restore", "restore"]

logger = logging.getLogger(__name__)

STATE_FILE = "trainer.pkl"
_CHECKPOINT = re.compile(r"checkpoint_(\d+)$")


def save_trainer(trainer: BaseTrainer, folder: str) -> None:
    """Save ``trainer`` without its datasets in ``folder`` (a trainer that does not pickle is logged, not raised:
    the fit goes on, only ``restore`` will not find it)."""
    saved = copy.copy(trainer)
    saved.datasets = {}  # (its resume_from_checkpoint is kept: a restore before the first save starts from it)
    state = {"trainer": saved, "datasets": sorted(trainer.datasets), "kind": type(trainer).__name__}
    try:
        payload = cloudpickle.dumps(state)
    except Exception as exc:
        logger.info("%s cannot be saved for Trainer.restore (%s: %s); the fit goes on", type(trainer).__name__,
                    type(exc).__name__, exc)
        return
    write_signed(f"{folder.rstrip('/')}/{STATE_FILE}", payload)


def can_restore(path: str) -> bool:
    """Whether ``path`` is the folder of a fit that :func:`restore` can go on with."""
    fs, local = fsspec.core.url_to_fs(str(path).rstrip("/"))
    return bool(fs.exists(f"{local}/{STATE_FILE}"))


def restore(cls: type[BaseTrainer], path: str, datasets: dict[str, Any] | None,
            overrides: dict[str, Any]) -> BaseTrainer:
    """The trainer saved at ``path``, given ``datasets`` again and ``overrides`` (constructor arguments it keeps
    as attributes, e.g. ``train_loop_per_worker``), set to resume from the folder's latest checkpoint."""
    folder = str(path).rstrip("/")
    if not can_restore(folder):
        raise ConfigError(f"{folder!r} holds no fit to restore (no {STATE_FILE}); expected the folder of a fit "
                          "(Result.path), or start a new fit")
    state = cloudpickle.loads(read_signed(f"{folder}/{STATE_FILE}", advice="Start the fit again instead."))
    trainer = state["trainer"]
    if not isinstance(trainer, cls):
        raise ConfigError(f"the fit at {folder!r} was a {state['kind']}; restore it with {state['kind']}.restore")
    given = dict(datasets or {})
    missing = [name for name in state["datasets"] if name not in given]
    if missing:
        raise ConfigError(f"restore needs the datasets the fit was given, by the same names: {missing} missing "
                          f"(pass datasets={{...}} with {state['datasets']}); Datasets are not saved with the fit")
    trainer.datasets = given
    for name, value in overrides.items():
        if not hasattr(trainer, name):
            raise ConfigError(f"{type(trainer).__name__}.restore cannot change {name!r}; it can change "
                              f"{sorted(k for k in vars(trainer) if not k.startswith('_'))}")
        setattr(trainer, name, value)
    parent, _, name = folder.rpartition("/")
    trainer.run_config = dataclasses.replace(trainer.run_config, name=name, storage_path=parent or ".")
    step, latest = _latest_checkpoint(folder)
    if latest is not None:  # else it starts as the fit did (from its own resume_from_checkpoint, if it had one)
        trainer.resume_from_checkpoint = latest
    trainer._restored_step = step
    trainer._validate()
    return trainer


def _latest_checkpoint(folder: str) -> tuple[int, Checkpoint | None]:
    fs, local = fsspec.core.url_to_fs(folder)
    steps = []
    for entry in fs.ls(local, detail=False):
        found = _CHECKPOINT.search(str(entry).rstrip("/"))
        if found and fs.isdir(entry):
            steps.append(int(found.group(1)))
    if not steps:
        return 0, None
    step = max(steps)
    return step, Checkpoint(f"{folder}/checkpoint_{step:06d}")
