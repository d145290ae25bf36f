"""The callback machinery without a cluster: which hooks a CallbackList calls, with what, and how often."""

from __future__ import annotations

import pickle
from typing import Any

from airflowless import tune
from airflowless.train import Checkpoint, Result
from airflowless.tune.callback import CallbackList
from airflowless.tune.logger import flatten
from airflowless.tune.trial import Trial, TrialStatus


class Calls(tune.LoggerCallback):
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def setup(self, stop: Any = None, num_samples: Any = None, total_num_samples: Any = None, **info: Any) -> None:
        self.calls.append(("setup", num_samples, info.get("experiment_name")))

    def log_trial_start(self, trial: Trial) -> None:
        self.calls.append(("start", trial.trial_id))

    def log_trial_result(self, iteration: int, trial: Trial, result: dict[str, Any]) -> None:
        self.calls.append(("result", trial.trial_id, iteration, dict(result)))

    def log_trial_save(self, trial: Trial) -> None:
        self.calls.append(("save", trial.trial_id))

    def log_trial_end(self, trial: Trial, failed: bool = False) -> None:
        self.calls.append(("end", trial.trial_id, failed))

    def on_trial_recover(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self.calls.append(("recover", trial.trial_id))


class OnlyResults:
    """A callback of Ray's shape that does not subclass anything and has one hook."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int, str]] = []

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any],
                        **info: Any) -> None:
        self.seen.append((iteration, len(trials), str(trial)))


def test_a_callback_list_calls_the_hooks_in_the_tuners_order() -> None:
    trials = {"t0": Trial("t0", {"x": 1}, TrialStatus.RUNNING), "t1": Trial("t1", {"x": 2}, TrialStatus.RUNNING)}
    logger, plain = Calls(), OnlyResults()
    callbacks = CallbackList([logger, plain], trials)
    callbacks.setup(num_samples=2, experiment_name="exp")
    callbacks.step_begin()
    callbacks.trial_started(trials["t0"])
    callbacks.result(trials["t0"], {"loss": 1.0, "training_iteration": 1, "checkpoint_uri": "/ck/1"})
    callbacks.step_end()
    callbacks.step_begin()
    callbacks.trial_restarted(trials["t1"])
    trials["t0"].status = TrialStatus.TERMINATED
    callbacks.trial_ended(trials["t0"])
    callbacks.trial_ended(trials["t0"])  # noticed twice: told once
    trials["t1"].status = TrialStatus.ERRORED
    callbacks.trial_ended(trials["t1"])
    callbacks.experiment_end()
    assert logger.calls == [
        ("setup", 2, "exp"), ("start", "t0"), ("result", "t0", 1, {"loss": 1.0, "training_iteration": 1}),
        ("save", "t0"), ("recover", "t1"), ("end", "t0", False), ("end", "t1", True)]
    assert plain.seen == [(1, 2, "t0")]  # iteration of the loop, all trials, the trial's name


def test_a_trainer_fit_is_seen_as_one_trial() -> None:
    logger = Calls()
    logger.on_start("fit_1", {"lr": 0.1}, "/runs/fit_1")
    logger.on_report({"loss": 2.0, "training_iteration": 1}, None)
    logger.on_report({"loss": 1.0, "training_iteration": 2}, Checkpoint("/runs/fit_1/checkpoint_000002"))
    logger.on_end(Result(metrics={"loss": 1.0}, checkpoint=None))
    assert [c[0] for c in logger.calls] == ["setup", "start", "result", "result", "save", "end"]
    assert logger.calls[-1] == ("end", "fit_1", False)
    failing = Calls()
    failing.on_start("fit_2", {}, "/runs/fit_2")
    failing.on_end(Result(metrics=None, checkpoint=None, error=RuntimeError("rank died")))
    assert failing.calls[-1] == ("end", "fit_2", True)


def test_trials_know_their_local_folder_and_old_state_still_loads() -> None:
    assert Trial("t", {}, path="/runs/exp/t").local_path == "/runs/exp/t"
    assert Trial("t", {}, path="file:///runs/exp/t").local_path == "/runs/exp/t"
    assert Trial("t", {}, path="s3://bucket/exp/t").local_path is None
    old = Trial("t", {})
    del old.__dict__["path"]  # a trial pickled before trials had a path
    assert pickle.loads(pickle.dumps(old)).local_path is None


def test_nested_configs_flatten_with_slashes() -> None:
    assert flatten({"a": {"b": {"c": 1}}, "d": [1, 2]}) == {"a/b/c": 1, "d": [1, 2]}
