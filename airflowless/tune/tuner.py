"""Tuner: search a param_space over a trainable (a function or a Trainer) on the cluster.

>>> from airflowless import tune
>>> def objective(config):                                        # doctest: +SKIP
...     for step in range(10):
...         tune.report({"loss": (config["x"] - 3) ** 2 / (step + 1)})
>>> grid = tune.Tuner(objective, param_space={"x": tune.uniform(0, 10)},   # doctest: +SKIP
...                   tune_config=tune.TuneConfig(num_samples=20, metric="loss", mode="min",
...                                               scheduler=tune.ASHAScheduler())).fit()
>>> grid.get_best_result().config                               # doctest: +SKIP

The controller core (:mod:`.controller`) decides; the driver (:mod:`.driver`)
starts trials on the cluster, turns their reports into controller events and
records everything in the store as it happens; this module builds both, and
saves the experiment state so :meth:`Tuner.restore` can continue after the
driver dies.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import uuid
from typing import Any

import cloudpickle
import fsspec

from ..errors import ConfigError, TrialsErroredError
from ..integrity import read_signed, write_signed
from ..names import join_under
from ..pickled import PickledOnce
from ..train.checkpoint import Checkpoint
from ..train.config import RunConfig
from ..train.prepared import prepared_cache, usage_since
from ..train.prepared import stats as prepared_stats
from ..train.result import Result
from ..train.trainer import BaseTrainer
from .config import TuneConfig
from .controller import Completed, Failed, TuneController
from .driver import TuneDriver
from .recording import ExperimentRecorder
from .result_grid import ResultGrid
from .search.searcher import BasicVariantGenerator, Searcher
from .search.variants import check_space
from .stoppers import as_stoppers
from .trainable import as_function, is_trainable_class
from .trial import TrialStatus
from .wrappers import ParameterizedTrainable

__all__ = ["Tuner"]

STATE_FILE = "experiment_state.pkl"
log = logging.getLogger(__name__)


def _saved_state(path: str) -> dict[str, Any]:
    """The signed state ``fit()`` saves in an experiment's folder ``path``."""
    state: dict[str, Any] = cloudpickle.loads(read_signed(
        f"{path.rstrip('/')}/{STATE_FILE}",
        advice="Do not restore it: start the experiment again with Tuner(...).fit() under a new name."))
    return state


class Tuner:
    """``Tuner(trainable, param_space=..., tune_config=TuneConfig(...), run_config=RunConfig(...)).fit()``."""

    def __init__(self, trainable: Any, *, param_space: dict[str, Any] | None = None,
                 tune_config: TuneConfig | None = None, run_config: RunConfig | None = None) -> None:
        if not (callable(trainable) or isinstance(trainable, BaseTrainer)):
            raise ConfigError(f"a Tuner tunes a function, a Trainer or a tune.Trainable class, got {trainable!r}")
        self.param_space = check_space(param_space)
        self.tune_config = tune_config or TuneConfig()
        self.run_config = run_config or RunConfig()
        if is_trainable_class(trainable):  # Ray's class API runs as a function trial
            trainable = as_function(trainable, self.run_config.checkpoint_config)
        elif isinstance(trainable, ParameterizedTrainable) and is_trainable_class(trainable.fn):  # the same, wrapped
            trainable = ParameterizedTrainable(as_function(trainable.fn, self.run_config.checkpoint_config),
                                               trainable.objects, trainable.resources)
        self.trainable = trainable
        if not isinstance(self.tune_config, TuneConfig):
            raise ConfigError(f"tune_config must be a TuneConfig, got {type(self.tune_config).__name__}")
        self._restored: dict[str, Any] | None = None
        self._reopen: dict[str, bool] = {}  # Tuner.restore's options
        self.name = self.run_config.name or f"tune_{dt.datetime.now():%Y-%m-%d_%H-%M-%S}_{uuid.uuid4().hex[:4]}"

    @property
    def path(self) -> str:
        from ..settings import get_settings

        return join_under(self.run_config.storage_path or get_settings().storage, self.name)

    # -- restore -------------------------------------------------------------------
    @classmethod
    def can_restore(cls, path: str) -> bool:
        """Whether an experiment that ``restore`` can continue was saved at ``path`` (Ray's)."""
        import fsspec

        try:
            fs, root = fsspec.core.url_to_fs(path)
            return bool(fs.exists(f"{root.rstrip('/')}/{STATE_FILE}"))
        except (OSError, ValueError):
            return False

    @classmethod
    def restore(cls, path_or_name: str, trainable: Any = None, *, resume_unfinished: bool = True,
                resume_errored: bool = False, restart_errored: bool = False) -> Tuner:
        """The Tuner of an interrupted experiment (its folder, or its name in the store); ``fit()`` continues it.

        As Ray's: ``resume_unfinished=False`` ends the trials that had not finished instead of running them
        on; ``resume_errored=True`` runs the errored trials again from their latest checkpoints, and
        ``restart_errored=True`` from scratch (the experiment may have finished: it runs them then).
        """
        if resume_errored and restart_errored:
            raise ConfigError("Tuner.restore takes resume_errored=True (from each errored trial's checkpoint) or "
                              "restart_errored=True (from scratch), not both")
        path = path_or_name
        fs, local = fsspec.core.url_to_fs(path)
        if not fs.exists(f"{local}/{STATE_FILE}"):
            from ..store import open_store

            found = open_store().find_experiment(path_or_name)
            if found is None or not found.get("storage_path"):
                raise ConfigError(f"no experiment at {path_or_name!r}: expected its folder (with {STATE_FILE}) "
                                  "or its name as `airflowless experiments list` shows it")
            path = found["storage_path"]
        state = _saved_state(path)
        tuner = cls(trainable if trainable is not None else state["trainable"], param_space=state["param_space"],
                    tune_config=state["tune_config"], run_config=state["run_config"])
        tuner._continue(state, resume_unfinished=resume_unfinished, resume_errored=resume_errored,
                        restart_errored=restart_errored)
        return tuner

    def _continue(self, state: dict[str, Any], **reopen: bool) -> None:
        self.name = state["name"]
        self._restored = state
        self._reopen = reopen

    def _continue_earlier_attempt(self) -> None:
        """Inside a stage of a resumed pipeline run (``--resume``): continue the experiment this stage left
        ``interrupted`` in the run it resumes (its cluster went away; followed back along ``resumed_from``)
        from its trials' checkpoints, as ``Tuner.restore`` would, instead of starting a second one from
        scratch. Only an experiment of the same search (its space, and its name when the Tuner has one);
        errored trials run again from their checkpoints too (the run is resumed because something was fixed).

        Not one left ``running``: its stage's code may still run on a worker whose driver died (a background
        cluster), and two drivers of one experiment would write over each other."""
        from ..dag.interrupt import current_stage
        from ..store import open_store

        started_by = current_stage()
        if started_by is None:
            return
        run_id, node = started_by
        store = open_store()
        space = repr(self.param_space)
        found: dict[str, Any] | None = None

        def resumed_from(run: int) -> int | None:
            try:
                return store.get_run(run).resumed_from
            except KeyError:
                return None

        attempt = resumed_from(run_id)
        while attempt is not None and found is None:  # the run it resumes, then the one that resumed, ...
            for earlier in reversed(store.experiments_of_run(attempt)):
                if (earlier["stage"] == node and earlier["kind"] == "tune" and earlier["status"] == "interrupted"
                        and (self.run_config.name is None or earlier["name"] == self.run_config.name)):
                    row = store.find_experiment(earlier["id"]) or {}
                    if (row.get("config") or {}).get("param_space") == space:
                        found = row
                        break
            attempt = resumed_from(attempt)
        path = (found or {}).get("storage_path")
        if found is None or not path or not self.can_restore(path):
            return
        state = _saved_state(path)
        self.param_space, self.tune_config, self.run_config = (state["param_space"], state["tune_config"],
                                                               state["run_config"])
        self._continue(state, resume_unfinished=True, resume_errored=True, restart_errored=False)
        log.warning("stage %s of run %d: continuing experiment %r (id %d), which run %s left interrupted",
                    node, run_id, self.name, found["id"], found.get("run_id"))

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
        return max(1, int(2 * cpus // max(self._trial_resources().get("CPU", 1), 1e-9)))

    def _trial_resources(self) -> dict[str, float]:
        """What a function trial's task asks Dask for: ``tune.with_resources``, else TuneConfig's, else 1 CPU."""
        wrapped = self.trainable.resources if isinstance(self.trainable, ParameterizedTrainable) else None
        return wrapped if wrapped is not None else (self.tune_config.trial_resources or {"CPU": 1})

    def fit(self) -> ResultGrid:
        from ..runtime import cluster_client

        if self._restored is None:
            self._continue_earlier_attempt()
        scheduler = self.tune_config.scheduler
        if scheduler is not None:
            scheduler.set_search_properties(self.tune_config.metric, self.tune_config.mode)
        with cluster_client() as client:
            if isinstance(self.trainable, ParameterizedTrainable):
                self.trainable.put_objects(client)  # tune.with_parameters: scattered once, fetched by trials
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
                        controller.handle(Failed(trial_id, record.get("error") or "errored"))
                    else:
                        controller.handle(Completed(trial_id))
                ended_now, restarted = controller.reopen(**self._reopen)
                for trial in restarted:  # from scratch: its old reports and checkpoints are not its new run's
                    if trial.record_id is not None:
                        recorder.store.restart_trial(trial.record_id)
                for trial in ended_now:
                    recorder.trial_ended(trial, stopped=True)
            else:
                recorder.create()
            trainer_trials = isinstance(self.trainable, BaseTrainer)  # only they prepare data in this process
            used = prepared_stats() if trainer_trials else None
            try:
                TuneDriver(self, controller, recorder, client).run()
            finally:  # what its Trainer trials prepared together goes with the experiment
                if used is not None:
                    with contextlib.suppress(Exception):  # (the record of it, if the store takes it)
                        recorder.prepared_data(usage_since(used))
                    prepared_cache().release_scope(self.path.rstrip("/"), client)
        return self._checked(self._grid(controller))

    def _checked(self, grid: ResultGrid) -> ResultGrid:
        """``grid``, unless more trials errored than ``TuneConfig.max_errored_trials`` accepts (see there)."""
        from ..dag.interrupt import in_stage

        accepted = self.tune_config.max_errored_trials
        if accepted is None and not in_stage():
            return grid
        if grid.num_errors > (accepted or 0):
            errored = [r for r in grid if r.error is not None]
            first = str(errored[0].error).strip().splitlines()[-1] if str(errored[0].error).strip() else "errored"
            raise TrialsErroredError(
                f"{grid.num_errors} of {len(grid)} trials of {self.name!r} errored (first: "
                f"{errored[0].path or '?'}: {first}); TuneConfig(max_errored_trials={accepted or 0}) accepts "
                f"{accepted or 0}. Fix the trainable, or raise max_errored_trials to keep a partial search",
                grid)
        return grid

    def _grid(self, controller: TuneController) -> ResultGrid:
        results, path = [], self.path
        for trial in controller.trials.values():
            history = [{k: v for k, v in r.items() if k != "checkpoint_uri"} for r in trial.results]
            reported = {r["checkpoint_uri"]: {k: v for k, v in r.items() if k != "checkpoint_uri"}
                        for r in trial.results if r.get("checkpoint_uri")}  # each checkpoint with its report
            results.append(Result(metrics=history[-1] if history else {},
                                  checkpoint=Checkpoint(trial.checkpoint) if trial.checkpoint else None,
                                  best_checkpoints=[(Checkpoint(uri), metrics) for uri, metrics in reported.items()],
                                  error=RuntimeError(trial.error) if trial.status == TrialStatus.ERRORED else None,
                                  path=f"{path}/{trial.trial_id}", metrics_history=history,
                                  config=trial.config))
        return ResultGrid(results, metric=self.tune_config.metric, mode=self.tune_config.mode, path=path)

    def _save_state(self, controller: TuneController, experiment_id: int | None, trainable: PickledOnce, *,
                    ended: dict[str, PickledOnce] | None = None, key: bytes | None = None) -> None:
        """``trainable``: this Tuner's, pickled once for the whole run; ``ended``: trials that ended for good,
        pickled once (filled here), so that a save costs what the running trials and the searcher do;
        ``key``: the signing key (looked up once by the loop)."""
        controller_state = controller.get_state()
        if ended is not None:
            trials: dict[str, Any] = {}
            for trial_id, trial in controller_state["trials"].items():
                if trial.finished and trial_id not in ended:
                    ended[trial_id] = PickledOnce(trial)
                trials[trial_id] = ended.get(trial_id, trial)
            controller_state = {**controller_state, "trials": trials}
        state = {"name": self.name, "trainable": trainable, "param_space": self.param_space,
                 "tune_config": self.tune_config, "run_config": self.run_config,
                 "controller": controller_state, "experiment_id": experiment_id}
        write_signed(f"{self.path}/{STATE_FILE}", cloudpickle.dumps(state), key=key)  # signed: restore checks it
