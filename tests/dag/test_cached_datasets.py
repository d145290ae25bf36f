"""A stage that returns a materialized Dataset is cached as parquet, not as futures of a dead cluster.

Each run is an `airflowless run` subprocess with its own embedded cluster, as
a user's runs are: the second run's cluster never saw the first run's blocks.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PIPELINE = '''\
from pathlib import Path

from airflowless import cluster_client, data, pipeline, stage


@stage
def load(n: int) -> data.Dataset:
    with cluster_client():
        return data.range(n, parallelism=4).materialize()


@stage
def total(ds: data.Dataset, factor: int, fail_flag: str) -> int:
    if Path(fail_flag).exists():
        raise RuntimeError("asked to fail")
    with cluster_client():
        return ds.sum("id") * factor


@pipeline
def datasets(n: int = 100, factor: int = 1, fail_flag: str = "./no-such-flag"):
    return total(load(n), factor, fail_flag)
'''


def cli(*args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AIRFLOWLESS_HOME": str(home), "COLUMNS": "200"}
    env.pop("AIRFLOWLESS_ADDRESS", None)
    return subprocess.run([sys.executable, "-m", "airflowless.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=240)


def _show(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"


@pytest.mark.timeout(600)
def test_a_materialized_dataset_output_outlives_its_cluster(home: Path, tmp_path: Path) -> None:
    module = tmp_path / "datasets_pipeline.py"
    module.write_text(PIPELINE)

    first = cli("run", str(module), "-p", "factor=1", home=home, cwd=tmp_path)
    assert first.returncode == 0, _show(first)
    assert first.stdout.rstrip().endswith("result: 4950")
    written = list((home / "storage" / "outputs" / "load").rglob("*.parquet"))
    assert written, "the materialized blocks were not written to the run's storage"

    # another downstream parameter, a new cluster: `load` is reused from the cache
    second = cli("run", str(module), "-p", "factor=2", home=home, cwd=tmp_path)
    assert second.returncode == 0, _show(second)
    assert re.search(r"│ load\s+│ cached\s+│", second.stdout), second.stdout
    assert second.stdout.rstrip().endswith("result: 9900")

    # a failed run, resumed on yet another cluster
    (tmp_path / "no-such-flag").write_text("")
    failed = cli("run", str(module), "-p", "factor=3", "--no-cache", home=home, cwd=tmp_path)
    assert failed.returncode == 1, _show(failed)
    hint = re.search(r"run (\d+) failed; resume with", failed.stderr)
    assert hint is not None, _show(failed)
    (tmp_path / "no-such-flag").unlink()
    resumed = cli("run", str(module), "--resume", hint.group(1), home=home, cwd=tmp_path)
    assert resumed.returncode == 0, _show(resumed)
    assert re.search(r"│ load\s+│ cached\s+│", resumed.stdout), resumed.stdout
    assert resumed.stdout.rstrip().endswith("result: 14850")


@pytest.mark.usefixtures("cluster_client")
def test_an_output_holding_futures_is_refused_with_a_clear_error() -> None:
    from distributed import get_client

    from airflowless.dag.outputs import dumps_output
    from airflowless.errors import StageOutputError

    future = get_client().submit(sum, [1, 2])
    with pytest.raises(StageOutputError, match="holds the Dask future .* dies with this cluster"):
        dumps_output({"blocks": [future]})
