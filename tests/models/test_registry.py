"""The model registry: versions, aliases with history, lineage, models:/ URIs wherever a checkpoint goes, files
checked before they are served; concurrent registrations on PostgreSQL from processes get distinct versions."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

from airflowless import data, models, serve
from airflowless.errors import ConfigError
from airflowless.store import Store, open_store
from airflowless.train.checkpoint import Checkpoint
from tests.serve import conftest as serve_conftest
from tests.serve.test_predictor import FEATURES, Scale, make_checkpoint

serve_url = serve_conftest.serve_url  # the fixture


@pytest.fixture
def db(home: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    url = f"sqlite:///{home / 'record.db'}"
    monkeypatch.setenv("AIRFLOWLESS_DB", url)  # what a models:/ URI is resolved through by default
    return open_store(url)


def test_versions_aliases_and_their_history_and_what_is_refused(db: Store, tmp_path: Path) -> None:
    checkpoint, _ = make_checkpoint(tmp_path / "ckpt")
    first = models.register("taxi-big-tip", checkpoint, metrics={"auc": 0.81}, tags={"data": "2026-11"},
                            description="the first", store=db)
    assert (first.version, first.metrics, first.tags, first.source) == (1, {"auc": 0.81}, {"data": "2026-11"},
                                                                         str(tmp_path / "ckpt"))
    assert first.uri.endswith(f"/models/{first.digest}") and Path(first.uri, "model.ubj").is_file()
    second = models.register("taxi-big-tip", str(tmp_path / "ckpt"), store=db)
    assert second.version == 2 and second.uri == first.uri  # the same files: stored once
    models.set_alias("taxi-big-tip", "champion", 1, store=db)
    models.set_alias("taxi-big-tip", "champion", 2, store=db)
    assert models.get("taxi-big-tip", alias="champion", store=db).version == 2
    assert models.get("taxi-big-tip", store=db).aliases == ["champion"]  # the newest, and what points at it
    assert [h["version"] for h in db.model_alias_history("taxi-big-tip", "champion")] == [2, 1]
    assert models.resolve("models:/taxi-big-tip@champion", store=db).version == 2
    assert models.resolve("models:/taxi-big-tip/1", store=db).description == "the first"
    assert models.resolve("models:/taxi-big-tip", store=db).version == 2
    (row,) = models.list_models(store=db)
    assert (row["name"], row["latest_version"], row["versions"], row["aliases"]) == (
        "taxi-big-tip", 2, 2, {"champion": 2})

    refusals = [
        (lambda: models.resolve("models:/nope@champion", store=db), "no registered model named 'nope'"),
        (lambda: models.resolve("models:/taxi-big-tip@prod", store=db), "has no alias 'prod'; it has ['champion']"),
        (lambda: models.resolve("models:/taxi-big-tip/9", store=db), "has no version 9; it has [1, 2]"),
        (lambda: models.resolve("models:taxi", store=db), "a model URI is models:/NAME@ALIAS"),
        (lambda: models.set_alias("taxi-big-tip", "champion", 7, store=db), "has no version 7 to point"),
        (lambda: models.set_alias("taxi-big-tip", "3", 1, store=db), "an alias is letters"),
        (lambda: models.register("bad name", checkpoint, store=db), "a model's name is letters"),
        (lambda: models.delete_version("taxi-big-tip", 2, store=db), "is what alias(es) ['champion'] point at"),
    ]
    for call, says in refusals:
        with pytest.raises(ConfigError) as raised:
            call()
        assert says in str(raised.value)
    models.delete_version("taxi-big-tip", 1, store=db)
    assert [v.version for v in models.versions("taxi-big-tip", store=db)] == [2]
    assert models.register("taxi-big-tip", checkpoint, store=db).version == 3  # numbers are never reused


def test_a_version_whose_files_were_changed_in_the_storage_is_refused(db: Store, tmp_path: Path) -> None:
    checkpoint, _ = make_checkpoint(tmp_path / "ckpt")
    version = models.register("m", checkpoint, store=db)
    assert Checkpoint.from_uri("models:/m/1").path == version.uri
    Path(version.uri, "model.ubj").write_bytes(b"someone else's model")
    with pytest.raises(ConfigError, match="does not match what was registered"):
        Checkpoint.from_uri("models:/m/1")


def test_lineage_names_the_trial_and_experiment_that_wrote_the_checkpoint(db: Store, tmp_path: Path) -> None:
    checkpoint, _ = make_checkpoint(tmp_path / "ckpt")
    experiment = db.create_experiment("tune-taxi", kind="tune", config={})
    trial = db.add_trial(experiment, "trial_0", config={"eta": 0.1})
    db.add_checkpoint(trial, 5, checkpoint.path, {"auc": 0.9})
    version = models.register("m", checkpoint, store=db)
    assert (version.experiment_id, version.trial_id) == (experiment, trial)
    assert (version.run_id, version.stage) == (None, None)
    from airflowless.dag.interrupt import stage_thread

    with stage_thread(41, "train"):  # as the body of stage "train" of run 41 runs on its worker
        inside = models.register("m", checkpoint, store=db)
    assert (inside.run_id, inside.stage, inside.trial_id) == (41, "train", trial)


def test_lineage_keeps_the_datasets_plans_and_input_fingerprints_and_the_code_version(db: Store, tmp_path: Path
                                                                                      ) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    checkpoint, _ = make_checkpoint(tmp_path / "ckpt")
    (tmp_path / "days").mkdir()
    pq.write_table(pa.table({"x": [1, 2, 3]}), tmp_path / "days" / "a.parquet")
    train = data.read_parquet(str(tmp_path / "days")).map_batches(lambda b: b, batch_format="pyarrow")
    first = models.register("m", checkpoint, datasets={"train": train}, store=db)
    again = models.register("m", checkpoint, datasets={"train": train}, store=db)
    pq.write_table(pa.table({"x": [1, 2, 3, 4]}), tmp_path / "days" / "a.parquet")  # the data changed under it
    changed = models.register("m", checkpoint, store=db,
                              datasets={"train": data.read_parquet(str(tmp_path / "days")).map_batches(
                                  lambda b: b, batch_format="pyarrow")})
    lineage = first.datasets["train"]
    assert lineage["files"] == 1 and lineage["paths"] == [str(tmp_path / "days" / "a.parquet")]
    assert again.datasets == first.datasets  # the same plan over the same files
    assert changed.datasets["train"]["fingerprint"] != lineage["fingerprint"]
    head = subprocess.run(["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    assert first.code_version is not None and first.code_version.removesuffix("+dirty") == head  # this file's repo
    with pytest.raises(ConfigError, match="takes airflowless Datasets, got list"):
        models.register("m", checkpoint, datasets={"train": [1, 2]}, store=db)


def test_a_version_of_another_framework_is_refused_at_bind_with_what_to_do(db: Store, tmp_path: Path) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "state_dict.pt").write_bytes(b"weights")
    models.register("torchy", str(tmp_path / "torch"), store=db)
    with pytest.raises(ConfigError, match=r"models:/torchy/1 holds \['state_dict.pt'\], no model the built-in "
                                          r"predictor loads .*PredictorDeployment.bind\(YourPredictor, checkpoint\)"):
        serve.PredictorDeployment.bind("models:/torchy/1")
    with pytest.raises(ConfigError, match="no model the built-in predictor loads"):
        serve.PredictorDeployment.bind(str(tmp_path / "torch"))
    serve.PredictorDeployment.bind(Scale, str(tmp_path / "torch"))  # a class of one's own loads what it likes


def test_a_models_uri_serves_and_batch_predicts_the_version_it_names(serve_url: str, db: Store, tmp_path: Path
                                                                      ) -> None:
    import xgboost as xgb

    checkpoint, booster = make_checkpoint(tmp_path / "ckpt")
    models.set_alias("taxi", "champion", models.register("taxi", checkpoint).version)
    rows = pd.DataFrame(np.random.default_rng(3).normal(size=(50, 3)), columns=FEATURES).assign(row=range(50))
    expected = booster.predict(xgb.DMatrix(Scale().transform_batch(rows[FEATURES])))  # type: ignore[attr-defined]

    scored = serve.BatchPredictor.from_checkpoint("models:/taxi@champion").predict(
        data.from_pandas(rows), keep_columns=["row"]).to_pandas().sort_values("row")
    assert np.allclose(scored["predictions"].to_numpy(), expected, atol=1e-6)

    serve.run(serve.PredictorDeployment.bind("models:/taxi@champion"), name="taxi", route_prefix="/")
    answer = httpx.post(f"{serve_url}/predict", json=rows[FEATURES].iloc[:3].to_dict("records")).json()
    assert np.allclose(answer["predictions"], expected[:3], atol=1e-6)
    with pytest.raises(ConfigError, match="has no alias 'prod'"):
        serve.PredictorDeployment.bind("models:/taxi@prod")


_REGISTRAR = """
import json, sys
from airflowless import models
from airflowless.store import open_store

url, folder = sys.argv[1], sys.argv[2]
store = open_store(url)
print("RESULT " + json.dumps([models.register("raced", folder, store=store).version for _ in range(10)]))
"""


def test_registrations_from_three_processes_on_postgresql_get_distinct_versions(
        postgres_url: str, tmp_path: Path, home: Path) -> None:
    checkpoint, _ = make_checkpoint(tmp_path / "ckpt")
    script = tmp_path / "register.py"
    script.write_text(_REGISTRAR)
    racers = [subprocess.Popen([sys.executable, str(script), postgres_url, checkpoint.path], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for _ in range(3)]
    numbers: list[int] = []
    for racer in racers:
        out, err = racer.communicate(timeout=300)
        assert racer.returncode == 0, out + err
        numbers += json.loads(out.splitlines()[-1].removeprefix("RESULT "))
    assert sorted(numbers) == list(range(1, 31)) and Counter(numbers).most_common(1)[0][1] == 1


def test_the_cli_lists_shows_and_moves_aliases(db: Store, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from airflowless.cli.main import cli

    checkpoint, _ = make_checkpoint(tmp_path / "ckpt")
    models.register("taxi", checkpoint, metrics={"auc": 0.8123456}, store=db)
    models.register("taxi", checkpoint, store=db)
    url = str(db.url)
    runner = CliRunner()
    moved = runner.invoke(cli, ["models", "alias", "taxi", "champion", "2", "--db", url])
    assert moved.exit_code == 0 and "taxi@champion -> version 2" in moved.output
    listed = runner.invoke(cli, ["models", "list", "--db", url])
    assert "taxi" in listed.output and "champion->2" in listed.output
    shown: Any = runner.invoke(cli, ["models", "show", "taxi", "--db", url, "--json"])
    assert [(v["version"], v["aliases"]) for v in json.loads(shown.output)] == [(2, ["champion"]), (1, [])]
    refused = runner.invoke(cli, ["models", "delete", "taxi", "2", "--db", url])
    assert refused.exit_code == 2 and "point at" in refused.output
    unknown = runner.invoke(cli, ["models", "show", "nope", "--db", url])
    assert unknown.exit_code == 2 and "no registered model named 'nope'" in unknown.output


def test_the_rest_api_lists_models_and_a_models_versions(db: Store, tmp_path: Path) -> None:
    from airflowless.control import service_api
    from airflowless.control.errors import NotFound

    checkpoint, _ = make_checkpoint(tmp_path / "ckpt")
    models.set_alias("taxi", "champion", models.register("taxi", checkpoint, metrics={"auc": 0.8}, store=db).version,
                     store=db)
    (listed,) = service_api.registered_models(db)["models"]
    assert (listed["name"], listed["aliases"]) == ("taxi", {"champion": 1})
    (version,) = service_api.registered_model(db, "taxi")["versions"]
    assert version["metrics"] == {"auc": 0.8} and version["aliases"] == ["champion"]
    json.dumps(version)  # plain JSON
    with pytest.raises(NotFound, match="no registered model named 'nope'"):
        service_api.registered_model(db, "nope")
