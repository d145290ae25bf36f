"""Trainers: a training function run by N ranks on the cluster, with data, checkpoints and restarts.

>>> from airflowless.train import DataParallelTrainer, ScalingConfig
>>> def loop(config):                                             # doctest: +SKIP
...     from airflowless import train
...     for step in range(config["steps"]):
...         train.report({"step": step})
>>> DataParallelTrainer(loop, train_loop_config={"steps": 3},    # doctest: +SKIP
...                     scaling_config=ScalingConfig(num_workers=2)).fit().metrics
{'step': 2}
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..errors import ConfigError, RankFailedError, TrainingFailedError
from .backends.base import Backend
from .checkpoint import Checkpoint, CheckpointManager, delete_checkpoint
from .config import DataConfig, RunConfig, ScalingConfig
from .recorder import Recorder, StoreRecorder
from .result import Result
from .transient import network_failure
from .worker_group import RankSpec, WorkerGroup, pickle_code

__all__ = ["BaseTrainer", "DataParallelTrainer", "FitRun"]

log = logging.getLogger(__name__)


class FitSeconds(dict[str, float]):
    """Where one fit's wall time went: seconds per phase (time in a nested phase counts only there)."""

    def __init__(self) -> None:
        super().__init__()
        self._open: list[str] = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        outer = self._open[-1] if self._open else None
        self._open.append(name)
        try:
            yield
        finally:
            took = time.perf_counter() - began
            self._open.pop()
            self[name] = self.get(name, 0.0) + took
            if outer is not None:
                self[outer] = self.get(outer, 0.0) - took


@dataclass
class FitRun:
    """One fit's own state: made by :meth:`BaseTrainer.fit_with_recorder` and passed to the steps of that fit,
    never kept on the trainer (a Tuner's trials are trainers made from one)."""

    scope: str | None = None  # the experiment a Tune trial belongs to (prepared data is shared in it)
    seconds: FitSeconds = field(default_factory=FitSeconds)
    prepared_key: str | None = None  # the prepared entry this fit trains on (None: not shared)
    layout: str | None = None  # which blocks each rank of the current attempt trains on


class BaseTrainer:
    """What every trainer shares: configs, datasets, preprocessor, fit()."""

    _backend: Backend = Backend()
    _saves_itself = False  # saves checkpoints on its own schedule (CheckpointConfig.checkpoint_frequency applies)
    _restored_step = 0  # the step of the checkpoint a restored fit resumes from (Trainer.restore)
    _shuffles_per_epoch = False  # a random_shuffle() dataset without a seed is shuffled again each epoch (.epochs)
    last_fit_seconds: FitSeconds | dict[str, float] = {}
    """Where the last fit's time went (its :class:`FitRun`'s seconds), for benchmarks and tests."""

    def __init__(self, *, scaling_config: ScalingConfig | None = None, run_config: RunConfig | None = None,
                 datasets: dict[str, Any] | None = None, preprocessor: Any = None,
                 resume_from_checkpoint: Checkpoint | None = None, metadata: dict[str, Any] | None = None) -> None:
        self.scaling_config = scaling_config or ScalingConfig()
        self.run_config = run_config or RunConfig()
        self.datasets = dict(datasets or {})
        self.preprocessor = preprocessor
        self.resume_from_checkpoint = resume_from_checkpoint
        self.metadata = metadata or {}
        self._validate()

    def _validate(self) -> None:
        from ..data import Dataset

        if not isinstance(self.scaling_config, ScalingConfig):
            raise ConfigError(f"scaling_config must be a ScalingConfig, got {type(self.scaling_config).__name__}")
        if not isinstance(self.run_config, RunConfig):
            raise ConfigError(f"run_config must be a RunConfig, got {type(self.run_config).__name__}")
        for name, ds in self.datasets.items():
            if not isinstance(ds, Dataset):
                raise ConfigError(f"datasets[{name!r}] must be an airflowless Dataset, got {type(ds).__name__}; "
                                  "wrap a DataFrame with airflowless.data.from_pandas(df)")
        saving = self.run_config.checkpoint_config
        if not self._saves_itself and (saving.checkpoint_frequency or saving.checkpoint_at_end):
            raise ConfigError(f"{type(self).__name__} saves the checkpoints its loop reports "
                              "(train.report(metrics, checkpoint=...)); CheckpointConfig's checkpoint_frequency and "
                              "checkpoint_at_end are for the XGBoost and LightGBM trainers and tune.Trainable. "
                              "Remove them, and report a checkpoint as often as you want one")
        if self.resume_from_checkpoint is not None and not isinstance(self.resume_from_checkpoint, Checkpoint):
            raise ConfigError(f"resume_from_checkpoint must be a Checkpoint, got {self.resume_from_checkpoint!r}")

    # -- hooks for subclasses ----------------------------------------------------
    def _loop(self) -> Callable[..., Any]:
        raise NotImplementedError

    def _loop_config(self, run: FitRun) -> dict[str, Any] | None:
        return None

    def _config_for_record(self) -> dict[str, Any]:
        return {"trainer": type(self).__name__, "num_workers": self.scaling_config.num_workers}

    def with_overrides(self, overrides: dict[str, Any]) -> BaseTrainer:
        """A copy with ``overrides`` merged into its arguments (Tune's param_space), nested dicts merged."""
        clone = copy.copy(self)
        for key, value in overrides.items():
            current = getattr(clone, key, None)
            if isinstance(value, dict) and isinstance(current, dict):
                setattr(clone, key, {**current, **value})
            elif hasattr(clone, key):
                setattr(clone, key, value)
            else:
                raise ConfigError(f"{type(self).__name__} has no argument {key!r} to tune; "
                                  f"tune one of {sorted(k for k in vars(self) if not k.startswith('_'))}")
        clone._validate()
        return clone

    # -- running -------------------------------------------------------------------
    def fit(self) -> Result:
        """Train on the cluster and return the :class:`Result`.

        Raises ``TrainingFailedError`` when training fails more often than
        ``FailureConfig.max_failures`` allows (as Ray Train does); the run's
        Result, with what was reported and saved before, is its ``.result``.
        """
        from .restore import save_trainer

        name, storage_dir = self._where(None)
        save_trainer(self, storage_dir)  # what Trainer.restore(storage_dir) goes on with
        result = self.fit_with_recorder(StoreRecorder(), storage_dir=storage_dir, name=name,
                                        start_step=self._restored_step)
        if isinstance(result.error, TrainingFailedError):
            raise result.error
        return result

    @classmethod
    def can_restore(cls, path: str) -> bool:
        """Whether ``path`` is the folder of a fit that :meth:`restore` can go on with (Ray's)."""
        from .restore import can_restore

        return can_restore(path)

    @classmethod
    def restore(cls, path: str, datasets: dict[str, Any] | None = None, **overrides: Any) -> BaseTrainer:
        """The trainer of the interrupted fit at ``path``, given its ``datasets`` again, resuming from the latest
        checkpoint there when it fits (Ray's; :mod:`.restore`)."""
        from .restore import restore

        return restore(cls, path, datasets, overrides)

    def _where(self, name: str | None) -> tuple[str, str]:
        """The run's name and folder."""
        from ..settings import get_settings

        name = name or self.run_config.name or (
            f"{type(self).__name__}_{dt.datetime.now():%Y-%m-%d_%H-%M-%S}_{uuid.uuid4().hex[:4]}")
        return name, f"{(self.run_config.storage_path or get_settings().storage).rstrip('/')}/{name}"

    def fit_with_recorder(self, recorder: Recorder, *, storage_dir: str | None = None, name: str | None = None,
                          start_step: int = 0, scope: str | None = None) -> Result:
        """Train, sending the run's start, reports and end to ``recorder``; return the :class:`Result`.

        The public seam Tune uses for a Trainer trial; ``fit`` is this with a
        :class:`StoreRecorder`, raising a ``TrainingFailedError`` instead of
        returning it. Reports are numbered on from ``start_step`` (a trial
        resumed from its checkpoint); ``recorder.should_stop()`` ends the run early.
        Fits of one ``scope`` (a Tune experiment's trials) share their prepared data.

        >>> trainer.fit_with_recorder(StoreRecorder(), name="trial_0001")   # doctest: +SKIP
        Result(...)
        """
        from ..runtime import cluster_client

        if storage_dir is None:
            name, storage_dir = self._where(name)
        name = name or self._where(None)[0]
        run = FitRun(scope)
        seconds = self.last_fit_seconds = run.seconds
        began = time.perf_counter()
        with cluster_client() as client:
            group_args = dict(client=client, name=type(self).__name__, num_workers=self.scaling_config.num_workers,
                              resources=self.scaling_config.rank_resources, backend=self._backend)
            with seconds.phase("placement"):
                self._backend.preload(client)  # the framework loads on the workers while data is prepared
                WorkerGroup(**group_args).check_capacity()  # type: ignore[arg-type]
            # the run's record is made while the data is prepared (a process's first fit imports the store)
            recording = _Background(recorder.start, name, self._config_for_record(), storage_dir)
            self._tell_callbacks("on_start", name, self._config_for_record(), storage_dir)
            try:
                with seconds.phase("data"):
                    datasets = self._prepare_datasets(client, run)
                    self._check_datasets(datasets)
                with seconds.phase("records"):
                    recording.wait()  # before the first report
                result = self._run_attempts(client, group_args, datasets, recorder, storage_dir, name, start_step, run)
            except BaseException as exc:  # the record never says "running" for a fit that left
                with contextlib.suppress(BaseException):  # its start ended (if it failed, exc says so)
                    recording.wait()
                recorder.end("errored", f"{type(exc).__name__}: {exc}".splitlines()[0], None, None)
                self._tell_callbacks("on_end", Result(metrics=None, checkpoint=None, error=exc, path=storage_dir))
                raise
        latest = result.checkpoint
        with seconds.phase("records"):
            recorder.end("terminated" if result.error is None else "errored",
                         None if result.error is None else str(result.error).splitlines()[0], result.metrics,
                         latest.path if latest else None)
        self._tell_callbacks("on_end", result)
        seconds["total"] = time.perf_counter() - began
        return result

    def _tell_callbacks(self, hook: str, *args: Any) -> None:
        """Call ``hook`` (on_start, on_report, on_end) of every RunConfig callback that has it."""
        for callback in self.run_config.callbacks:
            method = getattr(callback, hook, None)
            if method is not None:
                method(*args)

    def _prepare_datasets(self, client: Any, run: FitRun) -> dict[str, Any]:
        """Fit the preprocessor on ``train``, transform every dataset, and materialize them on the cluster.

        Splits of one dataset (``train_test_split``) are cut from it after it ran
        once, so the data is read once for all of them and for the preprocessor's fit.
        Fits of one experiment with the same datasets and preprocessor (and fits of
        blocks already on the cluster) share what the first prepared (:mod:`.prepared`).
        """
        from .prepared import prepared_cache

        hits = prepared_cache().counts["hits"]
        fitted, plans, run.prepared_key = prepared_cache().prepare(
            client, self.datasets, self.preprocessor, run.scope, self._build_prepared)
        run.seconds["prepared_hit"] = float(prepared_cache().counts["hits"] > hits)
        self.preprocessor = fitted
        return plans

    def _build_prepared(self) -> tuple[Any, dict[str, Any]]:
        from ..data import Dataset
        from ..data.splits import share_split_inputs

        shared = share_split_inputs({n: ds.plan for n, ds in self.datasets.items()})
        datasets = {n: Dataset(plan) for n, plan in shared.items()}
        preprocessor = self.preprocessor
        if preprocessor is not None and "train" in datasets:
            if getattr(preprocessor, "is_fittable", True):
                # a private copy: trials of a Tuner share the trainer they were made from
                preprocessor = copy.deepcopy(preprocessor).fit(datasets["train"])
            datasets = {n: preprocessor.transform(ds) for n, ds in datasets.items()}
        return preprocessor, {n: self._materialized(ds) for n, ds in datasets.items()}

    def _materialized(self, ds: Any) -> Any:
        """``ds`` run on the cluster; for a dataset shuffled per epoch, the shuffle's input (:mod:`.epochs`)."""
        from ..data.consume import materialized
        from ..data.logical.operators import RandomShuffle
        from .epochs import EpochShuffled

        plan = ds.plan
        if self._shuffles_per_epoch and isinstance(plan, RandomShuffle) and plan.drawn and plan.seed is not None:
            source = materialized(plan.input)
            return EpochShuffled(source.blocks, source.rows, plan.seed, plan.num_blocks)
        return ds.materialize().plan

    def _shards(self, client: Any, datasets: dict[str, Any], workers: list[str], run: FitRun) -> list[dict[str, Any]]:
        from .prepared import prepared_cache
        from .sharding import assign_shards

        equal, whole = self._backend.equal_shards, self._unsplit(datasets)
        return prepared_cache().shards(run.prepared_key,
                                       (tuple(workers), equal, tuple(sorted(datasets)), tuple(sorted(whole))),
                                       lambda: assign_shards(client, datasets, workers, equal=equal, whole=whole))

    def _unsplit(self, datasets: dict[str, Any]) -> frozenset[str]:
        """The datasets every rank gets whole (none but where a DataConfig says so)."""
        return frozenset()

    def _spec_maker(self, group: WorkerGroup, assigned: list[dict[str, Any]], restore: Checkpoint | None,
                    start_step: int, storage_dir: str, name: str, run: FitRun,
                    decisions: str | None = None) -> Callable[[int, str], RankSpec]:
        code = pickle_code(self._loop(), self._loop_config(run))  # once for all ranks

        def make_spec(rank: int, worker: str) -> RankSpec:
            return RankSpec(group.group, rank, group.num_workers, code, self._backend, assigned[rank], restore, storage_dir,
                            self.scaling_config.use_gpu, name, name, start_step, decisions)

        return make_spec

    def _run_attempts(self, client: Any, group_args: dict[str, Any], datasets: dict[str, Any], recorder: Recorder,
                      storage_dir: str, name: str, start_step: int, run: FitRun) -> Result:
        from .prepared import layout_token

        seconds = run.seconds
        ckpt_config = self.run_config.checkpoint_config
        manager = CheckpointManager(ckpt_config.num_to_keep, ckpt_config.checkpoint_score_attribute,
                                    ckpt_config.checkpoint_score_order)
        history: list[dict[str, Any]] = []
        state: dict[str, Any] = {"step": start_step, "metrics": None}
        failures, error = 0, None
        network_retries = 0  # attempts given beyond max_failures because the ranks' network failed
        max_failures = self.run_config.failure_config.max_failures
        checkpoint = self.resume_from_checkpoint

        def on_report(message: dict[str, Any], *, group: WorkerGroup) -> None:
            metrics = dict(message["metrics"])
            step = message["step"]
            uri = message.get("checkpoint")
            state["step"], state["metrics"] = step, metrics
            history.append({**metrics, "training_iteration": step})
            with seconds.phase("records"):
                recorder.on_report(step, metrics, uri)
            if uri:
                with seconds.phase("checkpoint"):
                    for dropped in manager.register(Checkpoint(uri), metrics):
                        delete_checkpoint(dropped)
                        recorder.on_checkpoint_deleted(dropped.path)
            self._tell_callbacks("on_report", dict(history[-1]), Checkpoint(uri) if uri else None)
            if self.run_config.verbose:
                live.update([[h["training_iteration"], *(h.get(c, "") for c in columns(metrics))]
                             for h in history[-10:]])
            stop = recorder.should_stop()
            if stop:
                group.request_stop()
            if recorder.decides_reports:  # rank 0 waits for this answer before going on
                group.answer(stop)

        from ..progress import LiveTable

        shown: list[str] = []

        def columns(metrics: dict[str, Any]) -> list[str]:
            if not shown:
                shown.extend(k for k in metrics if not k.startswith("_"))
                live.columns = ["iter", *shown]
            return shown

        live = LiveTable(name, ["iter"])
        try:
            while True:
                group = WorkerGroup(**group_args)
                try:  # every way out of an attempt stops its ranks and frees their resources
                    with seconds.phase("placement"):
                        workers = group._place(_holders(client, datasets),
                                               wait_for_capacity=60.0 if failures else 0.0)
                        assigned = self._shards(client, datasets, workers, run)
                        self._check_shards(assigned)
                        run.layout = layout_token(assigned)
                        group.start(self._spec_maker(group, assigned, manager.latest or checkpoint, state["step"],
                                                     storage_dir, name, run,
                                                     group.decisions if recorder.decides_reports else None),
                                    prefer=workers)
                    with seconds.phase("training"):
                        group.watch(partial(on_report, group=group))
                    for phase, took in group.rank_seconds.get(0, {}).items():
                        seconds[f"rank0_{phase}"] = seconds.get(f"rank0_{phase}", 0.0) + took
                    break
                except RankFailedError as exc:
                    failures += 1
                    recorder.on_restart(failures, str(exc).splitlines()[0])
                    over = max_failures != -1 and failures > max_failures + network_retries
                    cause = network_failure(str(exc)) if over and not network_retries else None
                    # a peer whose worker died is not the network failing: max_failures decides
                    if cause is not None and group.workers_alive():  # not the training's fault (see .transient)
                        network_retries = 1
                        log.warning("the ranks' network failed (%s); restarting the ranks once more from %s",
                                    cause, "the latest checkpoint" if manager.latest or checkpoint else "the start")
                        continue
                    if over:
                        error = TrainingFailedError(
                            f"training failed ({failures} failure(s), FailureConfig.max_failures={max_failures}): {exc}")
                        break
                    log.warning("%s\nrestarting the ranks from %s (failure %d, FailureConfig.max_failures=%d)",
                                str(exc).rstrip(), "the latest checkpoint" if manager.latest or checkpoint
                                else "the start", failures, max_failures)
                finally:
                    group.shutdown()
            if history and self.run_config.verbose:
                live.update([[h["training_iteration"], *(h.get(c, "") for c in columns(history[-1]))]
                             for h in history[-10:]], force=True)
        finally:
            live.close()
        result = Result(metrics=state["metrics"], checkpoint=manager.latest, error=error, path=storage_dir,
                        best_checkpoints=manager.best, metrics_history=history)
        if error is not None:
            error.result = result
        return result

    def _check_datasets(self, datasets: dict[str, Any]) -> None:
        """Raise a ``TrainingDataError`` when the prepared datasets cannot be trained on (a hook)."""

    def _check_shards(self, assigned: list[dict[str, tuple[list[Any], int]]]) -> None:
        """Raise a ``TrainingDataError`` when a rank's shards cannot be trained on (a hook)."""


class _Background:
    """``call(*args)`` run in a thread from now on; :meth:`wait` returns once it ended, raising what it raised."""

    def __init__(self, call: Callable[..., Any], *args: Any) -> None:
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call, args), name="airflowless-fit-record",
                                        daemon=True)
        self._thread.start()

    def _run(self, call: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            call(*args)
        except BaseException as exc:  # raised in the waiting thread
            self._error = exc

    def wait(self) -> None:
        self._thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise error


def _holders(client: Any, datasets: dict[str, Any]) -> list[str]:
    """Workers holding the most training rows first (ranks go where their data is)."""
    plan = datasets.get("train")
    if plan is None:
        return []
    who = client.who_has(list(plan.blocks))
    rows: dict[str, int] = {}
    for block, count in zip(plan.blocks, plan.rows, strict=True):
        for worker in who.get(block.key, ()):
            rows[worker] = rows.get(worker, 0) + count
    return sorted(rows, key=lambda w: -rows[w])


class DataParallelTrainer(BaseTrainer):
    """``train_loop_per_worker(config)`` on ``num_workers`` ranks, connected by ``backend``."""

    _shuffles_per_epoch = True  # loops iterate their shards once per epoch (tree learners read theirs once)

    def __init__(self, train_loop_per_worker: Callable[..., Any], *, train_loop_config: dict[str, Any] | None = None,
                 backend: Backend | None = None, dataset_config: DataConfig | None = None, **kwargs: Any) -> None:
        if not callable(train_loop_per_worker):
            raise ConfigError(f"train_loop_per_worker must be a function, got {train_loop_per_worker!r}")
        if dataset_config is not None and not isinstance(dataset_config, DataConfig):
            raise ConfigError(f"dataset_config must be a train.DataConfig, got {dataset_config!r}")
        self.train_loop_per_worker = train_loop_per_worker
        self.train_loop_config = train_loop_config
        self.dataset_config = dataset_config or DataConfig()
        if backend is not None:
            self._backend = backend
        super().__init__(**kwargs)

    def _loop(self) -> Callable[..., Any]:
        return self.train_loop_per_worker

    def _validate(self) -> None:
        super()._validate()
        split = self.dataset_config.datasets_to_split
        unknown = [name for name in split if name not in self.datasets] if split != "all" else []
        if unknown:
            raise ConfigError(f"DataConfig.datasets_to_split names {unknown}, which are not among the trainer's "
                              f"datasets {sorted(self.datasets)}")

    def _unsplit(self, datasets: dict[str, Any]) -> frozenset[str]:
        return frozenset(name for name in datasets if not self.dataset_config.splits(name))

    def _loop_config(self, run: FitRun) -> dict[str, Any] | None:
        if self.train_loop_config is None:
            import inspect

            takes = len(inspect.signature(self.train_loop_per_worker).parameters)
            return None if takes == 0 else {}
        return dict(self.train_loop_config)

    def _config_for_record(self) -> dict[str, Any]:
        return {**super()._config_for_record(), "train_loop_config": self.train_loop_config or {}}
