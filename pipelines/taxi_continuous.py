"""Continuous training of the taxi big-tip model: score each new day with the champion, retrain on a schedule,
promote only a model that beats the champion, and let serving roll to it.

Two pipelines share the day folders ``ROOT/date=YYYY-MM-DD/`` and the registered model ``taxi-big-tip``:

``score_new_day``
    runs once per new day folder (a file trigger): scores the day with the model the ``champion`` alias
    points at (a batch prediction, written as parquet under ``OUT/date=DAY/``) and checks the scores
    against the day's labels; a day scored worse than ``min_accuracy`` fails the run (an ``on_failure``
    alert).
``retrain``
    runs weekly (a schedule; or by hand): a small Tune over the last ``train_days`` days before the run's
    data interval ends, the newest of them held out. The best trial is registered as a new version, always
    (tagged with what it was trained and judged on); it becomes the champion only if its log loss on the
    held-out day beats the champion's by ``min_gain`` (the first version becomes champion). A deployment
    bound to ``models:/taxi-big-tip@champion`` rolls to it by itself.

Set up (docs/models.md, "Continuous training")::

    python pipelines/taxi_continuous.py land /tmp/taxi-days 2026-11-01 2026-11-04     # four days of history
    airflowless run pipelines/taxi_continuous.py:retrain -p root=/tmp/taxi-days       # the first champion
    airflowless deploy pipelines/taxi_continuous.py:score_new_day --name taxi-score \\
        --on-new-files "/tmp/taxi-days/date=*/" --param-from-match day=date -p out=/tmp/taxi-scores
    airflowless deploy pipelines/taxi_continuous.py:retrain --name taxi-retrain --cron "0 3 * * 1" \\
        -p root=/tmp/taxi-days
    python pipelines/taxi_continuous.py land /tmp/taxi-days 2026-11-05                # a day lands: scored
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

from airflowless import cluster_client, data, models, pipeline, serve, stage, tune
from airflowless.datasets import LABEL_COLUMN, add_features, taxi_table
from airflowless.train import RunConfig, ScalingConfig
from airflowless.train.xgboost import XGBoostTrainer

MODEL = "taxi-big-tip"
DROPPED = ["pickup_ts", "dropoff_ts", "tip_amount"]


class QualityError(RuntimeError):
    """The champion scored a day worse than the pipeline accepts."""


def day_folders(root: str) -> dict[dt.date, str]:
    """The ``date=YYYY-MM-DD`` folders under ``root`` (local or any fsspec URL), by day."""
    import fsspec

    fs, base = fsspec.core.url_to_fs(root)
    found = {}
    for folder in fs.glob(f"{base.rstrip('/')}/date=*"):
        name = folder.rstrip("/").rpartition("/")[2]
        try:
            day = dt.date.fromisoformat(name.removeprefix("date="))
        except ValueError:
            continue  # not a day's partition
        found[day] = fs.unstrip_protocol(folder) if "://" in root else folder
    return dict(sorted(found.items()))


def read_days(paths: list[str]) -> data.Dataset:
    """The days' trips with the feature step applied (lazy)."""
    files = [f"{path.rstrip('/')}/" for path in paths]
    return data.read_parquet(files).map_batches(add_features, batch_format="pyarrow").drop_columns(DROPPED)


def holdout_scores(checkpoint: Any, path: str) -> dict[str, float]:
    """Log loss and accuracy of ``checkpoint`` (a path or ``models:/`` URI) on the day at ``path``."""
    import numpy as np

    frame = serve.BatchPredictor(checkpoint).predict(read_days([path]), keep_columns=[LABEL_COLUMN]).to_pandas()
    p = np.clip(frame["predictions"].to_numpy(dtype=float), 1e-7, 1 - 1e-7)
    y = frame[LABEL_COLUMN].to_numpy(dtype=float)
    return {"logloss": round(float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))), 5),
            "accuracy": round(float(np.mean((p > 0.5) == (y > 0.5))), 5), "rows": int(len(frame))}


# -- scoring each new day ----------------------------------------------------------------------------------


@stage(cache=False)  # the alias moves: the same day scored again may meet another model
def score(day: dt.date, path: str, out: str, model: str, alias: str) -> dict[str, Any]:
    """Score the day with the version ``alias`` points at now; the scores as parquet under ``OUT/date=DAY/``."""
    with cluster_client():
        version = models.get(model, alias=alias)
        scored = serve.BatchPredictor(version.checkpoint).predict(read_days([path]), keep_columns=[LABEL_COLUMN])
        written = f"{out.rstrip('/')}/date={day.isoformat()}"
        scored.write_parquet(written)
    return {"day": day.isoformat(), "model": version.model_uri, "scores": written}


@stage(cache=False)
def check_quality(scored: dict[str, Any], min_accuracy: float) -> dict[str, Any]:
    """Accuracy of the day's scores against its labels; below ``min_accuracy`` the run fails (and alerts)."""
    import pyarrow.dataset as ds

    table = ds.dataset(scored["scores"], format="parquet").to_table(columns=["predictions", LABEL_COLUMN])
    frame = table.to_pandas()
    accuracy = round(float(((frame["predictions"] > 0.5) == frame[LABEL_COLUMN]).mean()), 5)
    if accuracy < min_accuracy:
        raise QualityError(f"{scored['model']} scored {scored['day']} at accuracy {accuracy} < {min_accuracy}: "
                           "retrain (airflowless trigger taxi-retrain) or look at the day's data")
    return {**scored, "rows": len(frame), "accuracy": accuracy}


@pipeline(name="score_new_day")
def score_new_day(day: dt.date, path: str, out: str, model: str = MODEL, alias: str = "champion",
                  min_accuracy: float = 0.6):
    """Score a new day with the champion and check the scores against the day's labels."""
    return check_quality(score(day, path, out, model, alias), min_accuracy)


# -- retraining, and promoting only a better model ---------------------------------------------------------


@stage(cache=False)  # the folder listing: new days land under the same root
def window(root: str, interval_end: str, train_days: int) -> dict[str, Any]:
    """The last ``train_days`` days before the interval's end (all days when run by hand), and the next one held
    out to judge the candidate and the champion on."""
    found = day_folders(root)
    if interval_end:
        end = dt.datetime.fromisoformat(interval_end).date()
        found = {day: path for day, path in found.items() if day < end}
    if len(found) < 2:
        raise ValueError(f"retraining needs at least 2 days under {root} (days to train on and one held out), "
                         f"found {len(found)}: {[d.isoformat() for d in found]}")
    days = list(found)[-(train_days + 1):]
    return {"train": [found[d] for d in days[:-1]], "holdout": found[days[-1]],
            "days": [d.isoformat() for d in days[:-1]], "holdout_day": days[-1].isoformat()}


def _flip_labels(batch: Any, share: float, seed: int) -> Any:
    """Flip ``share`` of the labels at random: a deliberately worse training set (a broken labelling job)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    flip = np.random.default_rng(seed + batch.num_rows).random(batch.num_rows) < share
    column = batch.schema.get_field_index(LABEL_COLUMN)
    return batch.set_column(column, LABEL_COLUMN, pc.xor(batch[LABEL_COLUMN], pa.array(flip)))


@stage(retries=1)
def train_candidate(days: dict[str, Any], num_samples: int, num_boost_round: int, num_workers: int,
                    label_noise: float, seed: int) -> dict[str, Any]:
    """A small Tune of the XGBoost model over the training days; the best trial's checkpoint and metrics."""
    train = read_days(days["train"])
    if label_noise:
        train = train.map_batches(_flip_labels, batch_format="pyarrow", fn_kwargs={"share": label_noise,
                                                                                   "seed": seed})
    fit, valid = train.train_test_split(test_size=0.2, shuffle=True, seed=seed)
    trainer = XGBoostTrainer(
        label_column=LABEL_COLUMN, num_boost_round=num_boost_round,
        params={"objective": "binary:logistic", "eval_metric": ["logloss", "error"]},
        scaling_config=ScalingConfig(num_workers=num_workers), datasets={"train": fit, "valid": valid})
    with cluster_client():
        grid = tune.Tuner(
            trainer, param_space={"params": {"eta": tune.uniform(0.2, 0.4), "max_depth": tune.randint(2, 6)}},
            tune_config=tune.TuneConfig(num_samples=num_samples, metric="valid-logloss", mode="min", seed=seed),
            run_config=RunConfig(name=f"taxi-retrain-{days['holdout_day']}-{time.strftime('%Y%m%d-%H%M%S')}"),
        ).fit()
    best = grid.get_best_result()
    if best.checkpoint is None:
        raise RuntimeError(f"no trial of the retraining left a checkpoint ({grid.num_errors} of {len(grid)} failed)")
    return {"checkpoint": best.checkpoint.path, "config": best.config["params"],
            "metrics": {k: round(float(v), 5) for k, v in (best.metrics or {}).items()  # the model's own
                        if k.startswith(("train-", "valid-"))}}


@stage(cache=False)  # the champion may have moved since
def judge(days: dict[str, Any], candidate: dict[str, Any], model: str, alias: str) -> dict[str, Any]:
    """The candidate's and the champion's scores on the held-out day."""
    with cluster_client():
        mine = holdout_scores(candidate["checkpoint"], days["holdout"])
        try:
            champion = models.get(model, alias=alias)
        except KeyError:
            return {"candidate": mine, "champion": None, "champion_version": None}
        return {"candidate": mine, "champion": holdout_scores(champion.checkpoint, days["holdout"]),
                "champion_version": champion.version}


@stage(cache=False)  # registers a version and may move the alias
def register_and_promote(days: dict[str, Any], candidate: dict[str, Any], scores: dict[str, Any], model: str,
                         alias: str, min_gain: float) -> dict[str, Any]:
    """Register the candidate; point ``alias`` at it only if it beats the champion's held-out log loss by
    ``min_gain`` (or there is no champion yet)."""
    mine, theirs = scores["candidate"]["logloss"], (scores["champion"] or {}).get("logloss")
    if theirs is None:
        promoted, why = True, f"no {alias} yet"
    else:
        promoted = mine <= theirs - min_gain
        why = (f"held-out log loss {mine} vs the {alias}'s (version {scores['champion_version']}) {theirs}"
               f"{' ' if promoted else ' not '}better by {min_gain}")
    version = models.register(
        model, candidate["checkpoint"], metrics={**candidate["metrics"], "holdout_logloss": mine,
                                                 "holdout_accuracy": scores["candidate"]["accuracy"]},
        tags={"trained_on": f"{days['days'][0]}..{days['days'][-1]}", "holdout": days["holdout_day"],
              "decision": "promoted" if promoted else "rejected"},
        description=why, datasets={"train": read_days(days["train"]), "holdout": read_days([days["holdout"]])})
    if promoted:
        models.set_alias(model, alias, version.version)
    return {"version": version.version, "promoted": promoted, "why": why}


@pipeline(name="retrain")
def retrain(root: str, model: str = MODEL, alias: str = "champion", train_days: int = 3, num_samples: int = 2,
            num_boost_round: int = 30, num_workers: int = 1, label_noise: float = 0.0, min_gain: float = 0.0,
            seed: int = 0, interval_start: str = "", interval_end: str = ""):
    """Retrain on the last days, judge against the champion on a held-out day, promote only if better."""
    days = window(root, interval_end, train_days)
    candidate = train_candidate(days, num_samples, num_boost_round, num_workers, label_noise, seed)
    return register_and_promote(days, candidate, judge(days, candidate, model, alias), model, alias, min_gain)


# -- simulated days ------------------------------------------------------------------------------------------


def land_day(root: str, day: dt.date | str, rows: int = 4_000) -> Path:
    """Write day ``day``'s synthetic trips as ``ROOT/date=DAY/part-0.parquet`` (written aside, then renamed)."""
    import pyarrow.parquet as pq

    day = dt.date.fromisoformat(day) if isinstance(day, str) else day
    folder = Path(root, f"date={day.isoformat()}")
    folder.mkdir(parents=True, exist_ok=True)
    aside = folder.parent / f".{folder.name}.part-0.parquet.tmp"  # outside the partition until whole
    pq.write_table(taxi_table(rows, seed=day.toordinal()), aside)
    aside.replace(folder / "part-0.parquet")
    return folder


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5) or sys.argv[1] != "land":
        sys.exit("usage: python pipelines/taxi_continuous.py land ROOT FIRST_DAY [LAST_DAY]")
    first = dt.date.fromisoformat(sys.argv[3])
    last = dt.date.fromisoformat(sys.argv[-1]) if len(sys.argv) == 5 else first
    for n in range((last - first).days + 1):
        print(land_day(sys.argv[2], first + dt.timedelta(days=n)))
