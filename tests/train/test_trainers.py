"""Trainers on the real 2-worker cluster: reports, shards, each framework, failures, capacity, concurrency, leaks."""

from __future__ import annotations

import itertools
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from airflowless import data, train
from airflowless.data.preprocessors import MinMaxScaler
from airflowless.datasets import LABEL_COLUMN
from airflowless.train import (
    CapacityError,
    Checkpoint,
    DataParallelTrainer,
    RunConfig,
    ScalingConfig,
    TrainingFailedError,
    gbdt,
)
from tests.support.eventually import eventually

from .conftest import gbdt_frame

pytestmark = pytest.mark.usefixtures("cluster_client", "home")

XGB_PARAMS = {"objective": "binary:logistic", "eval_metric": ["logloss", "error"], "max_depth": 4, "eta": 0.3}
LGB_PARAMS = {"objective": "binary", "metric": ["binary_logloss", "binary_error"], "num_leaves": 15}
SCALED = ["trip_distance", "trip_duration"]


@pytest.fixture(scope="module")
def taxi() -> pd.DataFrame:
    """20k trips."""
    return gbdt_frame(20_000, seed=0)


def _datasets(taxi: pd.DataFrame) -> dict[str, data.Dataset]:
    # train in two uneven blocks (whole blocks can go to the ranks), valid in one (cut between the ranks)
    return {"train": data.from_pandas([taxi[:8_000], taxi[8_000:15_000]]), "valid": data.from_pandas(taxi[15_000:])}


def _rank_tasks(client: Any, before: frozenset[str] = frozenset()) -> list[str]:
    """Rank tasks the scheduler holds, less those it held before the test (the cluster is shared)."""
    def read(dask_scheduler: Any) -> list[str]:
        return [str(key) for key in dask_scheduler.tasks if "-rank" in str(key)]

    return [key for key in client.run_on_scheduler(read) if key not in before]


def _wait_no_rank_tasks(client: Any, before: frozenset[str]) -> list[str]:
    eventually(lambda: not _rank_tasks(client, before),
               message=lambda: f"rank tasks left: {_rank_tasks(client, before)}")
    return _rank_tasks(client, before)


def _rank_keys_seen(client: Any) -> set[str]:
    """Keys of rank tasks in the scheduler's (recent) transition log: every task it was given."""
    def read(dask_scheduler: Any) -> set[str]:
        return {str(entry[0]) for entry in dask_scheduler.transition_log if "-rank" in str(entry[0])}

    return client.run_on_scheduler(read)  # type: ignore[no-any-return]


# -- DataParallelTrainer -----------------------------------------------------------------
def _counting_loop(config: dict[str, Any]) -> None:
    context = train.get_context()
    seen = []
    for name in ("train", "valid"):
        shard = train.get_dataset_shard(name)
        fares = [batch["fare_amount"] for batch in shard.iter_batches(batch_size=1_000)]
        assert sum(len(f) for f in fares) == shard.count()
        seen += [str(shard.count()), repr(float(sum(f.sum() for f in fares)))]
    Path(config["out"], f"rank{context.world_rank}.txt").write_text(" ".join(seen))
    for epoch in range(3):
        with tempfile.TemporaryDirectory() as folder:  # report copies it into the run's storage
            Path(folder, "epoch.txt").write_text(str(epoch))
            train.report({"epoch": epoch, "score": [0.2, 0.9, 0.5][epoch], "world_size": context.world_size},
                         checkpoint=Checkpoint.from_directory(folder))


def test_data_parallel_reports_shards_and_records(taxi: pd.DataFrame, tmp_path: Path) -> None:
    from airflowless.store import open_store

    trainer = DataParallelTrainer(
        _counting_loop, train_loop_config={"out": str(tmp_path)}, scaling_config=ScalingConfig(num_workers=2),
        datasets=_datasets(taxi),
        run_config=RunConfig(name="dp-run", checkpoint_config=train.CheckpointConfig(
            num_to_keep=1, checkpoint_score_attribute="score")))
    result = trainer.fit()
    assert result.error is None
    frame = result.metrics_dataframe
    assert list(frame["epoch"]) == [0, 1, 2] and list(frame["training_iteration"]) == [1, 2, 3]
    assert set(frame["world_size"]) == {2}
    assert result.metrics == {"epoch": 2, "score": 0.5, "world_size": 2}
    # the shards of the two ranks cover every row, once: their row counts and fare sums add up
    seen = [[float(v) for v in (tmp_path / f"rank{r}.txt").read_text().split()] for r in (0, 1)]
    rows_train, fares_train, rows_valid, fares_valid = (sum(s[i] for s in seen) for i in range(4))
    assert (rows_train, rows_valid) == (15_000, 5_000)
    assert fares_train == pytest.approx(taxi["fare_amount"][:15_000].sum())
    assert fares_valid == pytest.approx(taxi["fare_amount"][15_000:].sum())
    assert all(s[0] > 0 and s[2] > 0 for s in seen)
    # kept: the best by score (step 2 of 3 = index 1) and the latest
    assert [m["score"] for _, m in result.best_checkpoints] == [0.9, 0.5]
    with result.checkpoint.as_directory() as folder:  # type: ignore[union-attr]
        assert Path(folder, "epoch.txt").read_text() == "2"
    assert not Path(result.path, "checkpoint_000001").exists()  # dropped and deleted

    store = open_store()
    try:
        experiment = next(e for e in store.list_experiments() if e["name"] == "dp-run")
        assert experiment["kind"] == "train" and experiment["status"] == "completed"
        (trial,) = store.list_trials(experiment["id"])
        assert len(store.trial_metrics(trial["id"])) == len(frame) == 3
        assert [(row["step"], row["epoch"]) for row in store.trial_metrics(trial["id"])] == [(1, 0), (2, 1), (3, 2)]
        assert len(store.trial_checkpoints(trial["id"], include_deleted=True)) == 3
        assert [c["step"] for c in store.trial_checkpoints(trial["id"])] == [2, 3]
    finally:
        store.close()


# -- XGBoost -------------------------------------------------------------------------
def _xy(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    return frame.drop(columns=[LABEL_COLUMN]), frame[LABEL_COLUMN]


def _logloss(label: Any, prob: Any) -> float:
    from sklearn.metrics import log_loss

    return float(log_loss(np.asarray(label), np.asarray(prob), labels=[0, 1]))


def test_xgboost_trainer_matches_single_process_xgboost(taxi: pd.DataFrame) -> None:
    import xgboost as xgb

    from airflowless.train.xgboost import XGBoostTrainer

    result = XGBoostTrainer(
        label_column=LABEL_COLUMN, params=XGB_PARAMS, num_boost_round=10,
        scaling_config=ScalingConfig(num_workers=2), datasets=_datasets(taxi),
        preprocessor=MinMaxScaler(columns=SCALED)).fit()
    assert result.error is None
    assert {"train-logloss", "train-error", "valid-logloss", "valid-error"} <= set(result.metrics)  # type: ignore[arg-type]
    assert list(result.metrics_dataframe["boosting_round"]) == list(range(1, 11))
    booster = XGBoostTrainer.get_model(result.checkpoint)  # type: ignore[arg-type]
    assert booster.num_boosted_rounds() == 10

    preprocessor = gbdt.load_preprocessor(result.checkpoint)  # type: ignore[arg-type]
    assert isinstance(preprocessor, MinMaxScaler) and set(preprocessor.data_min_) == set(SCALED)
    train_frame = preprocessor.transform_batch(taxi[:15_000])
    valid_frame = preprocessor.transform_batch(taxi[15_000:])
    assert train_frame[SCALED].min().min() == 0.0 and train_frame[SCALED].max().max() == 1.0

    # the reported metric covers the whole validation set (XGBoost combines the ranks' parts)
    x_valid, y_valid = _xy(valid_frame)
    distributed = _logloss(y_valid, booster.predict(xgb.DMatrix(x_valid)))
    assert result.metrics["valid-logloss"] == pytest.approx(distributed, abs=1e-4)  # type: ignore[index]
    # ... and is close to one process training on all the data with the same parameters
    x_train, y_train = _xy(train_frame)
    log: dict[str, Any] = {}
    xgb.train({**XGB_PARAMS, "tree_method": "hist", "nthread": 1}, xgb.QuantileDMatrix(x_train, label=y_train),
              num_boost_round=10, evals=[(xgb.DMatrix(x_valid, label=y_valid), "valid")], evals_result=log,
              verbose_eval=False)
    assert result.metrics["valid-logloss"] == pytest.approx(log["valid"]["logloss"][-1], abs=0.02)  # type: ignore[index]


# -- LightGBM ------------------------------------------------------------------------
def test_lightgbm_trainer_matches_single_process_lightgbm(taxi: pd.DataFrame) -> None:
    import lightgbm as lgb

    from airflowless.train.lightgbm import LightGBMTrainer

    result = LightGBMTrainer(
        label_column=LABEL_COLUMN, params=LGB_PARAMS, num_boost_round=10,
        scaling_config=ScalingConfig(num_workers=2), datasets=_datasets(taxi),
        preprocessor=MinMaxScaler(columns=SCALED)).fit()
    assert result.error is None
    assert {"train-binary_logloss", "train-binary_error", "valid-binary_logloss",
            "valid-binary_error"} <= set(result.metrics)  # type: ignore[arg-type]
    # rank 1 scores valid: every round's report carries its metrics, gathered into rank 0's
    frame = result.metrics_dataframe
    assert list(frame["boosting_round"]) == list(range(1, 11))
    assert frame["valid-binary_logloss"].notna().all() and frame["train-binary_logloss"].notna().all()
    booster = LightGBMTrainer.get_model(result.checkpoint)  # type: ignore[arg-type]
    assert booster.current_iteration() == 10
    preprocessor = gbdt.load_preprocessor(result.checkpoint)  # type: ignore[arg-type]
    assert isinstance(preprocessor, MinMaxScaler)

    x_valid, y_valid = _xy(preprocessor.transform_batch(taxi[15_000:]))
    reported = result.metrics["valid-binary_logloss"]  # type: ignore[index]
    assert reported == pytest.approx(_logloss(y_valid, booster.predict(x_valid)), abs=1e-4)  # all of valid
    x_train, y_train = _xy(preprocessor.transform_batch(taxi[:15_000]))
    alone = lgb.train({**LGB_PARAMS, "verbose": -1, "num_threads": 1}, lgb.Dataset(x_train, label=y_train),
                      num_boost_round=10)
    assert reported == pytest.approx(_logloss(y_valid, alone.predict(x_valid)), abs=0.02)


@pytest.mark.parametrize("framework", ["xgboost", "lightgbm"])
def test_resume_from_checkpoint_continues_boosting(taxi: pd.DataFrame, framework: str) -> None:
    if framework == "xgboost":
        from airflowless.train.xgboost import XGBoostTrainer as Trainer

        params: dict[str, Any] = XGB_PARAMS
    else:
        from airflowless.train.lightgbm import LightGBMTrainer as Trainer  # type: ignore[assignment]

        params = LGB_PARAMS
    datasets = {"train": data.from_pandas(taxi[:10_000])}
    first = Trainer(label_column=LABEL_COLUMN, params=params, num_boost_round=20,
                    scaling_config=ScalingConfig(num_workers=2), datasets=datasets).fit()
    assert first.error is None
    resumed = Trainer(label_column=LABEL_COLUMN, params=params, num_boost_round=30,
                      scaling_config=ScalingConfig(num_workers=2), datasets=datasets,
                      resume_from_checkpoint=first.checkpoint).fit()
    assert resumed.error is None
    assert list(resumed.metrics_dataframe["boosting_round"]) == list(range(21, 31))  # only the new rounds ran
    model = Trainer.get_model(resumed.checkpoint)  # type: ignore[arg-type]
    rounds = model.num_boosted_rounds() if framework == "xgboost" else model.current_iteration()
    assert rounds == 30


# -- Torch ---------------------------------------------------------------------------
FEATURES = ["passenger_count", "trip_distance", "fare_amount", "trip_duration", "hour", "day_of_week"]


def _mlp() -> Any:
    import torch

    return torch.nn.Sequential(torch.nn.Linear(len(FEATURES), 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


def _torch_loop(config: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    from airflowless.train.torch import get_device, prepare_model

    torch.manual_seed(0)
    model = prepare_model(_mlp())
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    shard = train.get_dataset_shard("train")
    rows = [0] * train.get_context().world_size
    dist.all_gather_object(rows, shard.count())
    for epoch in range(config["epochs"]):
        total, seen = 0.0, 0
        for batch in shard.iter_torch_batches(batch_size=250, dtypes=torch.float32, device=str(get_device())):
            x = torch.stack([batch[c] for c in FEATURES], dim=1)
            y = batch[LABEL_COLUMN].unsqueeze(1)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total, seen = total + float(loss) * len(y), seen + len(y)
        with tempfile.TemporaryDirectory() as folder:
            torch.save(getattr(model, "module", model).state_dict(), os.path.join(folder, "model.pt"))
            train.report({"epoch": epoch, "loss": total / seen, "rows_per_rank": rows},
                         checkpoint=Checkpoint.from_directory(folder))


def test_torch_trainer_ddp_on_two_ranks(taxi: pd.DataFrame) -> None:
    import torch

    from airflowless.train.torch import TorchConfig, TorchTrainer

    frame = taxi[:15_001]  # an odd number of rows: the ranks still get equal shards
    trainer = TorchTrainer(
        _torch_loop, train_loop_config={"epochs": 3}, scaling_config=ScalingConfig(num_workers=2),
        datasets={"train": data.from_pandas([frame[:9_000], frame[9_000:]])},
        preprocessor=MinMaxScaler(columns=FEATURES), torch_config=TorchConfig(timeout_s=60))
    result = trainer.fit()
    assert result.error is None
    losses = list(result.metrics_dataframe["loss"])
    assert len(losses) == 3 and losses[-1] < losses[0] - 0.01
    assert list(result.metrics["rows_per_rank"]) == [7_500, 7_500]  # type: ignore[index]

    model = _mlp()
    with result.checkpoint.as_directory() as folder:  # type: ignore[union-attr]
        model.load_state_dict(torch.load(os.path.join(folder, "model.pt")))
    scaled = trainer.preprocessor.transform_batch(frame)  # fitted by the trainer
    x = torch.tensor(scaled[FEATURES].to_numpy(), dtype=torch.float32)
    y = torch.tensor(scaled[LABEL_COLUMN].to_numpy(), dtype=torch.float32).unsqueeze(1)
    with torch.no_grad():
        restored_loss = float(torch.nn.functional.binary_cross_entropy_with_logits(model(x), y))
    assert restored_loss == pytest.approx(losses[-1], abs=0.05)  # the restored model is the trained one


# -- scikit-learn ----------------------------------------------------------------------
def test_sklearn_trainer_fits_with_joblib_on_dask(taxi: pd.DataFrame, cluster_client: Any) -> None:
    from distributed import get_task_stream
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from airflowless.train.sklearn import SklearnTrainer

    trainer = SklearnTrainer(
        estimator=make_pipeline(StandardScaler(), LogisticRegression()), label_column=LABEL_COLUMN,
        datasets=_datasets(taxi), params={"logisticregression__C": 0.5}, cv=3,
        preprocessor=MinMaxScaler(columns=SCALED))
    with get_task_stream(cluster_client) as tasks:
        result = trainer.fit()
    assert result.error is None
    metrics = result.metrics or {}
    assert {"train-score", "valid-score", "fit_time", "cv-test_score-mean", "cv-fit_time-mean"} <= set(metrics)
    assert metrics["fit_time"] > 0
    # the folds ran as Dask tasks (joblib's dask backend), not inside the rank
    assert any(str(t["key"]).startswith("batch_of_") for t in tasks.data)

    model = SklearnTrainer.get_model(result.checkpoint)  # type: ignore[arg-type]
    assert model.get_params()["logisticregression__C"] == 0.5
    preprocessor = gbdt.load_preprocessor(result.checkpoint)  # type: ignore[arg-type]
    x_valid, y_valid = _xy(preprocessor.transform_batch(taxi[15_000:]))
    assert model.score(x_valid, y_valid) == pytest.approx(metrics["valid-score"])
    assert metrics["valid-score"] > max(y_valid.mean(), 1 - y_valid.mean())  # better than the majority class


# -- failures, capacity, concurrency --------------------------------------------------
def _failing_loop() -> None:
    if train.get_context().world_rank == 1:
        raise ValueError("boom in rank 1")
    for step in itertools.count():  # rank 0 never ends by itself: the fit returning at all is the driver stopping it
        train.report({"step": step})
        time.sleep(0.02)


def test_a_failing_rank_fails_the_fit_without_hanging(cluster_client: Any) -> None:
    before = frozenset(_rank_tasks(cluster_client))
    with pytest.raises(TrainingFailedError, match=r"max_failures=0.*boom in rank 1") as failed:
        DataParallelTrainer(_failing_loop, scaling_config=ScalingConfig(num_workers=2)).fit()
    result = failed.value.result  # the Result stays available on the error, as in Ray
    assert result.error is failed.value and result.path
    assert _wait_no_rank_tasks(cluster_client, before) == []


def test_too_many_ranks_fail_before_anything_runs(cluster_client: Any) -> None:
    from airflowless.store import open_store

    seen = _rank_keys_seen(cluster_client)
    before = frozenset(_rank_tasks(cluster_client))
    with pytest.raises(CapacityError, match=r"asks for 3 rank\(s\).*workers offer \{'CPU': 1.0\}"):
        DataParallelTrainer(lambda: None, scaling_config=ScalingConfig(num_workers=3),
                            run_config=RunConfig(name="too-big")).fit()
    assert _rank_keys_seen(cluster_client) <= seen  # no rank task was ever submitted
    assert _rank_tasks(cluster_client, before) == []
    store = open_store()
    try:
        assert [e for e in store.list_experiments() if e["name"] == "too-big"] == []  # nothing was recorded
    finally:
        store.close()


def _meeting_loop(config: dict[str, Any]) -> None:
    """Mark that this fit's rank started, then wait for the other fit's: both report only if they ran at once."""
    from distributed import get_worker

    folder = Path(config["folder"])
    (folder / config["me"]).touch()
    eventually(lambda: (folder / config["peer"]).exists(), message=f"fit {config['peer']} to start meanwhile")
    train.report({"worker": get_worker().address})


def test_two_trainers_fit_at_once_from_two_threads(tmp_path: Path) -> None:
    results: dict[int, Any] = {}

    def fit(i: int) -> None:
        try:
            results[i] = DataParallelTrainer(_meeting_loop, scaling_config=ScalingConfig(num_workers=1),
                                             train_loop_config={"folder": str(tmp_path), "me": str(i),
                                                                "peer": str(1 - i)},
                                             run_config=RunConfig(name=f"concurrent-{i}")).fit()
        except BaseException as exc:  # shown by the assertion below
            results[i] = exc

    threads = [threading.Thread(target=fit, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert sorted(results) == [0, 1]
    assert [getattr(r, "error", r) for r in results.values()] == [None, None]  # ...at the same time: they met
    first, second = (results[i].metrics for i in range(2))
    assert first["worker"] != second["worker"]  # one per worker


# -- nothing left behind ----------------------------------------------------------------
def _listening() -> list[tuple[str, int]]:
    import psutil

    return sorted((c.laddr.ip, c.laddr.port) for c in psutil.Process().net_connections(kind="tcp")
                  if c.status == psutil.CONN_LISTEN)


def _framework_threads() -> list[str]:
    pattern = re.compile(r"xgboost|lightgbm|tracker|rabit|gloo|airflowless", re.IGNORECASE)
    return [t.name for t in threading.enumerate() if pattern.search(t.name)]


def _torch_initialized() -> bool:
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def _short_torch_loop() -> None:
    import torch

    from airflowless.train.torch import prepare_model

    model = prepare_model(_mlp())
    model(torch.ones(4, len(FEATURES))).sum().backward()
    train.report({"ok": 1})


def _native_threads() -> int:
    return len(os.listdir("/proc/self/task"))  # every OS thread of the worker process (C++ trackers too)


def test_no_sockets_threads_tasks_or_process_groups_are_left(taxi: pd.DataFrame, cluster_client: Any) -> None:
    from airflowless.train.lightgbm import LightGBMTrainer
    from airflowless.train.torch import TorchTrainer
    from airflowless.train.xgboost import XGBoostTrainer

    datasets = {"train": data.from_pandas(taxi[:2_000]), "valid": data.from_pandas(taxi[2_000:3_000])}
    two = ScalingConfig(num_workers=2)
    trainers = [
        TorchTrainer(_short_torch_loop, scaling_config=two),
        XGBoostTrainer(label_column=LABEL_COLUMN, params=XGB_PARAMS, num_boost_round=3, scaling_config=two,
                       datasets=datasets),
        LightGBMTrainer(label_column=LABEL_COLUMN, params=LGB_PARAMS, num_boost_round=3, scaling_config=two,
                        datasets=datasets),
    ]
    tasks_before = frozenset(_rank_tasks(cluster_client))
    before = cluster_client.run(_listening)
    # the runtime's own threads (airflowless-driver-watch), without stop watchers of earlier tests' ranks
    named_before = {w: [n for n in names if n != "airflowless-rank-stop"]
                    for w, names in cluster_client.run(_framework_threads).items()}
    for trainer in trainers:  # the first fits also start the frameworks' thread pools, which stay
        assert trainer.fit().error is None
    threads = cluster_client.run(_native_threads)
    for trainer in trainers:  # fitting again leaves nothing more behind
        assert trainer.fit().error is None

    assert _wait_no_rank_tasks(cluster_client, tasks_before) == []
    after = cluster_client.run(_listening)
    assert {w: sorted(set(after[w]) - set(before[w])) for w in after} == {w: [] for w in after}
    # a rank's stop watcher ends within a second of its rank (worker_group.STOP_WAIT_S)
    eventually(lambda: cluster_client.run(_framework_threads) == named_before,
               message=lambda: f"{named_before} then {cluster_client.run(_framework_threads)}")
    # a seceded rank's thread ends just after its task
    eventually(lambda: all(n <= threads[w] for w, n in cluster_client.run(_native_threads).items()),
               message=lambda: f"{threads} then {cluster_client.run(_native_threads)}")
    assert cluster_client.run(_torch_initialized) == {w: False for w in after}


def _peer_fails_after_the_stop(config: dict[str, Any]) -> None:
    from airflowless.train.context import StopRequested

    rank = train.get_context().world_rank
    told = Path(config["folder"]) / "rank-0-told-to-stop"
    for step in range(1, 30):
        if rank == 1 and step > 3:
            # the run was told to stop after rank 0's report 3 (which came after rank 1's);
            # rank 0 leaves at its next report, and a peer caught meanwhile in the framework's
            # collective fails there before it can report
            eventually(told.exists, message="rank 0 to be told to stop")
            raise RuntimeError("Connection reset by peer")
        time.sleep(0.15 if rank == 0 else 0.0)
        try:
            train.report({"step": step})
        except StopRequested:
            told.touch()
            raise
        time.sleep(0.15 if rank == 0 else 0.3)


def test_a_rank_failing_once_the_run_was_told_to_stop_is_the_stop_not_a_failure(tmp_path: Path) -> None:
    from airflowless.train.recorder import Recorder

    class StopAfterThree(Recorder):  # what Tune's recorder does when a scheduler says STOP
        step = 0

        def on_report(self, step: int, metrics: dict[str, Any], checkpoint_uri: str | None) -> None:
            self.step = step

        def should_stop(self) -> bool:
            return self.step >= 3

    trainer = DataParallelTrainer(_peer_fails_after_the_stop, train_loop_config={"folder": str(tmp_path)},
                                  scaling_config=ScalingConfig(num_workers=2), run_config=RunConfig(verbose=0))
    result = trainer.fit_with_recorder(StopAfterThree())
    assert result.error is None
    assert 3 <= len(result.metrics_history) < 8


_DATA_PREPARED = threading.Event()  # set by _SignallingScaler.fit (in the driver, while a fit prepares its data)


class _SignallingScaler(MinMaxScaler):
    """A MinMaxScaler that says when a fit fitted it (and fails after, when ``columns`` name no column)."""

    def _fit(self, ds: Any) -> None:
        _DATA_PREPARED.set()
        super()._fit(ds)


def _two_reports() -> None:
    train.report({"step": 0})
    train.report({"step": 1})


def test_a_fit_records_its_start_while_its_data_is_prepared() -> None:
    """The run's record is made while the data is prepared (a first fit imports the store: a second or
    more), and is made before the first report and ended after the last, also when the preparation fails."""
    from airflowless.train.recorder import Recorder

    class StartsOnceTheDataIsPrepared(Recorder):
        def __init__(self) -> None:
            self.calls: list[str] = []

        def start(self, name: str, config: dict[str, Any], storage_dir: str) -> None:
            overlapped = _DATA_PREPARED.wait(timeout=20)  # only in time when the fit prepares its data meanwhile
            self.calls.append(f"start, data prepared meanwhile: {overlapped}")

        def on_report(self, step: int, metrics: dict[str, Any], checkpoint_uri: str | None) -> None:
            self.calls.append(f"report {step}")

        def end(self, status: str, error: str | None, metrics: dict[str, Any] | None,
                checkpoint_uri: str | None) -> None:
            self.calls.append(f"end {status}")

    frame = pd.DataFrame({"x": np.arange(100.0), "seed": np.full(100, time.time_ns())})  # prepared by no other fit
    for columns, ended in ((["x"], "end terminated"), (["no-such-column"], "end errored")):
        _DATA_PREPARED.clear()
        recorder = StartsOnceTheDataIsPrepared()
        trainer = DataParallelTrainer(_two_reports, scaling_config=ScalingConfig(num_workers=2),
                                      run_config=RunConfig(verbose=0), datasets={"train": data.from_pandas(frame)},
                                      preprocessor=_SignallingScaler(columns=columns))
        try:
            trainer.fit_with_recorder(recorder)
        except Exception:
            assert ended == "end errored"
        reports = ["report 1", "report 2"] if ended == "end terminated" else []
        assert recorder.calls == ["start, data prepared meanwhile: True", *reports, ended]
