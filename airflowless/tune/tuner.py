"""Tuner: search a param_space over a trainable (a function or a Trainer) on the cluster.

>>> from airflowless import tune
>>> def objective(config):                                        # doctest: +SKIP
...     for step in range(10):
...         tune.report({"loss": (config["x"] - 3) ** 2 / (step + 1)})
>>> grid = tune.Tuner(objective, param_space={"x": tune.uniform(0, 10)},   # doctest: +SKIP
...                   tune_config=tune.TuneConfig(num_samples=20, metric="loss", mode="min",
...                                               scheduler=tune.ASHAScheduler())).fit()
>>> grid.get_best_result().config                               # doctest: +SKIP

The loop: the controller core (:mod:`.controller`) decides; this module
starts trials on the cluster, turns their reports into controller events,
records everything in the store as it happens, and saves the experiment state
so :meth:`Tuner.restore` can continue after the driver dies.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import queue
import time
import uuid
from typing import Any

import cloudpickle
import fsspec

from ..errors import ConfigError
from ..train.checkpoint import Checkpoint
from ..train.config import RunConfig
from ..train.result import Result
from ..train.trainer import BaseTrainer
from .config import TuneConfig
from .controller import Start, Stop, TuneController
from .recording import ExperimentRecorder
from .result_grid import ResultGrid
from .search.searcher import BasicVariantGenerator, Searcher
from .search.variants import check_space
from .stoppers import as_stoppers
from .trainables import TrainerTrial, run_function_trial
from .trial import TrialStatus

__all__ = ["Tuner"]

STATE_FILE = "experiment_state.pkl"


class Tuner:
    """``Tuner(trainable, param_space=..., tune_config=TuneConfig(...), run_config=RunConfig(...)).fit()``."""

    def __init__(self, trainable: Any, *, param_space: dict[str, Any] | None = None,
                 tune_config: TuneConfig | None = None, run_config: RunConfig | None = None) -> None:
        if not (callable(trainable) or isinstance(trainable, BaseTrainer)):
            raise ConfigError(f"a Tuner tunes a function or a Trainer, got {trainable!r}")
        self.trainable = trainable
        self.param_space = check_space(param_space)
        self.tune_config = tune_config or TuneConfig()
        self.run_config = run_config or RunConfig()
        if not isinstance(self.tune_config, TuneConfig):
            raise ConfigError(f"tune_config must be a TuneConfig, got {type(self.tune_config).__name__}")
        self._restored: dict[str, Any] | None = None
        self.name = self.run_config.name or f"tune_{dt.datetime.now():%Y-%m-%d_%H-%M-%S}_{uuid.uuid4().hex[:4]}"

    @property
    def path(self) -> str:
        from ..settings import get_settings

        return f"{(self.run_config.storage_path or get_settings().storage).rstrip('/')}/{self.name}"

    # -- restore -------------------------------------------------------------------
    @classmethod
    def restore(cls, path_or_name: str, trainable: Any = None) -> Tuner:
        """The Tuner of an interrupted experiment (its folder, or its name in the store); ``fit()`` continues it."""
        path = path_or_name
        fs, local = fsspec.core.url_to_fs(path)
        if not fs.exists(f"{local}/{STATE_FILE}"):
            from ..store import open_store

            found = open_store().find_experiment(path_or_name)
            if found is None or not found.get("storage_path"):
                raise ConfigError(f"no experiment at {path_or_name!r}: expected its folder (with {STATE_FILE}) "
                                  "or its name as `airflowless experiments list` shows it")
            path = found["storage_path"]
            fs, local = fsspec.core.url_to_fs(path)
        with fs.open(f"{local}/{STATE_FILE}", "rb") as f:
            state = cloudpickle.load(f)
        tuner = cls(trainable if trainable is not None else state["trainable"], param_space=state["param_space"],
                    tune_config=state["tune_config"], run_config=state["run_config"])
        tuner.name = state["name"]
        tuner._restored = state
        return tuner

    # -- running ---------------------------------------------------------------------
    def _searcher(self) -> Searcher:
        searcher = self.tune_config.search_alg or BasicVariantGenerator()
        searcher.set_search_properties(self.tune_config.metric, self.tune_config.mode, self.param_space,
                                       self.tune_config.num_samples, self.tune_config.seed)
        return searcher

    def _max_concurrent(self, client: Any) -> int:
        if self.tune_config.max_concurrent_trials:
            return self.tune_config.max_concurrent_trials
        workers = client.scheduler_info(n_workers=-1).get("workers", {}).values()
        cpus = sum(w.get("resources", {}).get("CPU", w.get("nthreads", 1)) for w in workers) or 1
        if isinstance(self.trainable, BaseTrainer):
            per_trial = self.trainable.scaling_config.num_workers * self.trainable.scaling_config.rank_resources.get(
                "CPU", 1)
            return max(1, int(cpus // per_trial))
        return max(1, int(2 * cpus // (self.tune_config.trial_resources or {"CPU": 1}).get("CPU", 1)))

    def fit(self) -> ResultGrid:
        from ..runtime import cluster_client

        scheduler = self.tune_config.scheduler
        if scheduler is not None:
            scheduler.set_search_properties(self.tune_config.metric, self.tune_config.mode)
        with cluster_client() as client:
            controller = TuneController(searcher=self._searcher(), scheduler=scheduler,
                                        stoppers=as_stoppers(getattr(self.run_config, "stop", None)),
                                        max_concurrent=self._max_concurrent(client),
                                        max_failures=self.tune_config.max_failures)
            recorder = ExperimentRecorder(self.name, self.path, self.tune_config, self.param_space)
            if self._restored is not None:
                controller.set_state(self._restored["controller"])
                ended = recorder.attach(self._restored["experiment_id"], controller.trials)
                for trial_id, record in ended.items():  # ended after the state was saved: the store knows
                    if record["status"] == "errored":
                        controller.trials[trial_id].restarts = controller.max_failures  # no retry left
                        controller.on_error(trial_id, record.get("error") or "errored")
                    else:
                        controller.on_complete(trial_id)
            else:
                recorder.create()
            _Loop(self, controller, recorder, client).run()
        return self._grid(controller)

    def _grid(self, controller: TuneController) -> ResultGrid:
        results = []
        for trial in controller.trials.values():
            history = [{k: v for k, v in r.items() if k != "checkpoint_uri"} for r in trial.results]
            results.append(Result(metrics=history[-1] if history else {},
                                  checkpoint=Checkpoint(trial.checkpoint) if trial.checkpoint else None,
                                  error=RuntimeError(trial.error) if trial.status == TrialStatus.ERRORED else None,
                                  path=f"{self.path}/{trial.trial_id}", metrics_history=history,
                                  config=trial.config))
        return ResultGrid(results, metric=self.tune_config.metric, mode=self.tune_config.mode, path=self.path)

    def _save_state(self, controller: TuneController, experiment_id: int | None) -> None:
        fs, local = fsspec.core.url_to_fs(self.path)
        fs.makedirs(local, exist_ok=True)
        state = {"name": self.name, "trainable": self.trainable, "param_space": self.param_space,
                 "tune_config": self.tune_config, "run_config": self.run_config,
                 "controller": controller.get_state(), "experiment_id": experiment_id}
        tmp = f"{local}/{STATE_FILE}.{uuid.uuid4().hex}.tmp"
        with fs.open(tmp, "wb") as f:
            cloudpickle.dump(state, f)
        fs.mv(tmp, f"{local}/{STATE_FILE}")


class _Loop:
    """The Dask adapter: carries out the controller's actions and feeds it events."""

    def __init__(self, tuner: Tuner, controller: TuneController, recorder: ExperimentRecorder, client: Any) -> None:
        self.tuner, self.controller, self.recorder, self.client = tuner, controller, recorder, client
        self.events: queue.Queue[Any] = queue.Queue()
        self.topic = f"airflowless-tune-{uuid.uuid4().hex[:12]}"
        self.futures: dict[str, Any] = {}
        self.threads: dict[str, TrainerTrial] = {}
        self.expected: dict[str, tuple[int, float]] = {}  # trial -> (reports its task sent, when it ended)
        self.received: dict[str, int] = {}
        # (trial, iteration) already handled; a restored experiment's reports count as seen
        self.seen: set[tuple[str, int]] = {(t.trial_id, int(r.get("training_iteration", 0)))
                                           for t in controller.trials.values() for r in t.results}
        needs_stop = self.controller.scheduler.needs_results_promptly or bool(self.controller.stoppers)
        self.stop_events = needs_stop

    def _show(self, force: bool = False) -> None:
        trials = list(self.controller.trials.values())
        metric = self.tuner.tune_config.metric
        rows = [[t.trial_id, t.status.value, _flat_config(t.config), t.iteration,
                 t.last_result.get(metric, "") if metric else ""] for t in trials]
        self.table.update(rows, force=force)

    def run(self) -> None:
        from ..progress import LiveTable

        metric = self.tuner.tune_config.metric or "metric"
        self.table = LiveTable(f"{self.tuner.name}", ["trial", "status", "config", "iter", metric])
        self.client.subscribe_topic(self.topic, lambda event: self.events.put(("message", event[1])))
        last_save = 0.0
        saved_trials = -1
        try:
            while True:
                actions = self.controller.next_actions()
                if len(self.controller.trials) != saved_trials:  # new trials are in the state before they run
                    self.tuner._save_state(self.controller, self.recorder.experiment_id)
                    last_save, saved_trials = time.monotonic(), len(self.controller.trials)
                for action in actions:
                    self._start(action)
                self._drain(timeout=0.05)
                self._finish_ended_tasks()
                self.recorder.flush()
                if time.monotonic() - last_save > 2.0:
                    self.tuner._save_state(self.controller, self.recorder.experiment_id)
                    last_save = time.monotonic()
                self._show()
                if self.controller.done:
                    break
        except BaseException:
            self.recorder.flush()
            self.tuner._save_state(self.controller, self.recorder.experiment_id)
            for trial_id in list(self.futures):
                self._stop(trial_id)
            raise
        finally:
            self._show(force=True)
            self.table.close()
            with contextlib.suppress(Exception):
                self.client.unsubscribe_topic(self.topic)
        self.recorder.flush()
        self.recorder.finish(self.controller.trials)
        self.tuner._save_state(self.controller, self.recorder.experiment_id)

    def _start(self, action: Start) -> None:
        trial = action.trial
        self.recorder.trial_started(trial)
        storage_dir = f"{self.tuner.path}/{trial.trial_id}"
        start_iteration = action.iteration  # a restarted trial numbers its reports on from its checkpoint
        self.received[trial.trial_id] = 0
        self.seen = {(tid, it) for tid, it in self.seen if tid != trial.trial_id or it <= start_iteration}
        if isinstance(self.tuner.trainable, BaseTrainer):
            thread = TrainerTrial(self.tuner.trainable, trial.config, trial.trial_id, storage_dir,
                                  action.checkpoint, self.events)
            self.threads[trial.trial_id] = thread
            thread.start()
            return
        stop_name = f"{self.topic}-{trial.trial_id}-decisions" if self.stop_events else None
        resources = self.tuner.tune_config.trial_resources or {"CPU": 1}
        future = self.client.submit(run_function_trial, self.tuner.trainable, trial.config, trial.trial_id,
                                    self.topic, storage_dir, action.checkpoint, stop_name, start_iteration,
                                    key=f"trial-{trial.trial_id}-{uuid.uuid4().hex[:8]}", resources=resources,
                                    pure=False, retries=0)
        future.add_done_callback(lambda f, tid=trial.trial_id: self.events.put(("ended", tid, f)))
        self.futures[trial.trial_id] = future

    def _stop(self, trial_id: str) -> None:
        if trial_id in self.threads:
            self.threads[trial_id].stop_requested.set()
        elif self.stop_events and trial_id in self.futures:
            self._decide(trial_id, "STOP")

    def _decide(self, trial_id: str, decision: str) -> None:
        from distributed import Queue

        Queue(f"{self.topic}-{trial_id}-decisions", client=self.client).put(decision)

    def _drain(self, timeout: float) -> None:
        try:
            item = self.events.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            self._handle(item)
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                return

    def _handle(self, item: Any) -> None:
        kind = item[0]
        if kind == "message":
            message = item[1]
            if message.get("event") != "report" and "metrics" not in message:
                return
            trial_id = message["trial"]
            self.received[trial_id] = self.received.get(trial_id, 0) + 1
            self._result(trial_id, {**message["metrics"], "training_iteration": message["step"],
                                    "checkpoint_uri": message.get("checkpoint")})
        elif kind == "result":
            self._result(item[1], item[2])
        elif kind == "ended":
            trial_id, future = item[1], item[2]
            sent = future.result() if future.status == "finished" else -1
            self.expected[trial_id] = (sent, time.monotonic())
        elif kind == "done":
            self.threads.pop(item[1], None)
            self.controller.on_complete(item[1])
            self.recorder.trial_ended(self.controller.trials[item[1]])
        elif kind == "error":
            self.threads.pop(item[1], None)
            self._error(item[1], item[2])

    def _result(self, trial_id: str, result: dict[str, Any]) -> None:
        key = (trial_id, int(result.get("training_iteration", 0)))
        if key in self.seen:  # replayed by a trial restarted from an earlier checkpoint: kept once
            future = self.futures.get(trial_id)
            if self.stop_events and future is not None and not future.done():
                self._decide(trial_id, "CONTINUE")  # its task still waits for an answer
            return
        self.seen.add(key)
        stopped = False
        for action in self.controller.on_result(trial_id, result):
            if isinstance(action, Stop):
                self._stop(action.trial.trial_id)
                stopped = stopped or action.trial.trial_id == trial_id
        if self.stop_events and trial_id in self.futures and not stopped:
            self._decide(trial_id, "CONTINUE")  # the function trial waits for an answer to each report
        self.recorder.result(self.controller.trials[trial_id], result)

    def _error(self, trial_id: str, error: str) -> None:
        self.controller.on_error(trial_id, error)
        trial = self.controller.trials[trial_id]
        self.recorder.trial_ended(trial) if trial.finished else self.recorder.trial_restarted(trial)

    def _finish_ended_tasks(self) -> None:
        """A function trial is complete once its task ended and all its reports arrived (events may lag)."""
        for trial_id, (sent, ended) in list(self.expected.items()):
            future = self.futures[trial_id]
            if future.status != "finished":
                del self.expected[trial_id]
                del self.futures[trial_id]
                try:
                    error = f"{type(future.exception()).__name__}: {future.exception()}"
                except BaseException as exc:
                    error = f"{type(exc).__name__}"
                self._error(trial_id, error)
                continue
            if self.received.get(trial_id, 0) < sent and time.monotonic() - ended < 5.0:
                continue
            if self.received.get(trial_id, 0) < sent:  # late: read the topic's history
                for _, message in self.client.get_events(self.topic):
                    if message.get("trial") == trial_id:
                        self._handle(("message", message))
            del self.expected[trial_id]
            del self.futures[trial_id]
            self.controller.on_complete(trial_id)
            self.recorder.trial_ended(self.controller.trials[trial_id])




def _flat_config(config: dict[str, Any], prefix: str = "") -> str:
    parts = []
    for key, value in config.items():
        if isinstance(value, dict):
            parts.append(_flat_config(value, f"{prefix}{key}."))
        else:
            parts.append(f"{prefix}{key}={value:.4g}" if isinstance(value, float) else f"{prefix}{key}={value}")
    return ", ".join(p for p in parts if p)
