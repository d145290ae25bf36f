"""Stage names and run names cannot escape the storage root; a failed pickle leaves no temp file."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from airflowless import pipeline, stage
from airflowless.dag.outputs import output_uri, write_output
from airflowless.errors import ConfigError, PipelineRunError
from airflowless.names import check_name, join_under
from airflowless.train import RunConfig
from airflowless.tune import Tuner


@pytest.mark.parametrize("name", ["../../escaped-stage", "a/b", "a\\b", "..", ".", "", " ", "tab\there", "nul\0"])
def test_stage_names_that_are_not_one_name_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=r"@stage\(name=...\) must be a non-empty name without '/'"):
        stage(name=name)(lambda: 1)


@pytest.mark.parametrize("name", ["..", ".", "../up", "a/b", "", "line\nbreak"])
def test_run_names_that_are_not_one_name_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="RunConfig.name must be a non-empty name"):
        RunConfig(name=name)


def test_joined_paths_stay_under_their_root(tmp_path: Path) -> None:
    root = str(tmp_path / "storage")
    assert join_under(root, "outputs", "load", "k.pkl") == str(tmp_path / "storage" / "outputs" / "load" / "k.pkl")
    assert join_under("s3://bucket/prefix", "outputs", "x") == "s3://bucket/prefix/outputs/x"
    for parts in (("..", "x"), ("outputs", "../../x"), ("/etc",)):
        with pytest.raises(ConfigError, match="outside it"):
            join_under(root, *parts)
    with pytest.raises(ConfigError, match="outside it"):
        join_under("s3://bucket/prefix", "../other")
    with pytest.raises(ConfigError):
        output_uri(root, stage="../../escaped-stage", cache_key="k" * 32, run_id=1, node="n", shared=True)
    assert check_name("x", "load.v2-final_1") == "load.v2-final_1"


def test_a_tuner_path_stays_under_its_storage(tmp_path: Path) -> None:
    tuner = Tuner(lambda config: None, run_config=RunConfig(name="exp", storage_path=str(tmp_path / "st")))
    assert tuner.path == str(tmp_path / "st" / "exp")


class _Unpicklable:
    def __init__(self) -> None:
        self.lock = threading.Lock()


def test_a_failed_pickle_leaves_no_temp_file(home: Path, tmp_path: Path) -> None:
    uri = str(tmp_path / "outputs" / "s" / "key.pkl")
    (tmp_path / "outputs" / "s").mkdir(parents=True)
    with pytest.raises(TypeError):
        write_output(uri, _Unpicklable())
    assert list((tmp_path / "outputs" / "s").iterdir()) == []


@stage
def unpicklable() -> _Unpicklable:
    return _Unpicklable()


@pipeline
def leaves_nothing():
    return unpicklable()


@pytest.mark.usefixtures("cluster_client")
def test_a_stage_whose_output_cannot_be_pickled_fails_clearly_and_leaves_no_temp(store, home: Path) -> None:  # noqa: ANN001
    with pytest.raises(PipelineRunError, match="cannot pickle"):
        leaves_nothing.run(store=store, storage=str(home / "st"))
    assert not [p for p in (home / "st").rglob("*") if p.name.endswith(".tmp")]
