"""A small fit prints no framework chatter; the chatter is in logging at DEBUG for who asks for it.

Each case runs a real program (its own embedded cluster of 2 worker processes)
and reads what it wrote to its console.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.support.eventually import eventually

PROGRAM = textwrap.dedent('''
    import numpy as np
    import pandas as pd

    import airflowless
    from airflowless import data
    from airflowless.train import RunConfig, ScalingConfig
    from airflowless.train.lightgbm import LightGBMTrainer
    from airflowless.train.xgboost import XGBoostTrainer

    if __name__ == "__main__":
        airflowless.init(n_workers=2, dashboard_address=":0", quiet=True)
        rng = np.random.default_rng(0)
        frame = pd.DataFrame({"x": rng.normal(size=400), "z": rng.normal(size=400)})
        frame["label"] = (frame["x"] > 0).astype(int)
        datasets = {"train": data.from_pandas([frame[:200], frame[200:300]]), "valid": data.from_pandas(frame[300:])}
        two = ScalingConfig(num_workers=2)
        quiet = RunConfig(verbose=0)
        for trainer in 2 * (
            XGBoostTrainer(label_column="label", params={"objective": "binary:logistic"}, num_boost_round=3,
                           scaling_config=two, run_config=quiet, datasets=datasets),
            LightGBMTrainer(label_column="label", params={"objective": "binary", "verbose": -1}, num_boost_round=3,
                            scaling_config=two, run_config=quiet, datasets=datasets),
        ):
            assert trainer.fit().error is None
        airflowless.shutdown()
        print("FITTED")
''')


def _run(tmp_path: Path, **env: str) -> str:
    script = tmp_path / "fit_quietly.py"
    script.write_text(PROGRAM)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOWLESS_", "DASK_"))}
    environ.update(AIRFLOWLESS_HOME=str(tmp_path / "home"), PYTHONPATH=str(Path(__file__).parents[2]), **env)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=environ, capture_output=True,
                          text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "FITTED" in done.stdout, output
    return output


def test_a_fit_prints_no_framework_chatter(tmp_path: Path) -> None:
    output = _run(tmp_path)
    assert "got rank" not in output  # XGBoost's tracker, once per rank
    # LightGBM's network setup, including the listener thread that LightGBM starts itself
    # (its log callback and level are unset there: they are per thread)
    assert [line for line in output.splitlines() if "[LightGBM]" in line] == []
    assert "xgboost:" not in output and "lightgbm:" not in output


def _set_level(level: int) -> None:
    logging.getLogger("airflowless.train.frameworks").setLevel(level)


@pytest.mark.usefixtures("home")
def test_the_chatter_is_logged_at_debug(cluster_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    from airflowless import data
    from airflowless.train import RunConfig, ScalingConfig
    from airflowless.train.lightgbm import LightGBMTrainer
    from airflowless.train.xgboost import XGBoostTrainer

    frame = pd.DataFrame({"x": [float(i % 7) for i in range(300)], "label": [i % 2 for i in range(300)]})
    datasets = {"train": data.from_pandas([frame[:150], frame[150:]])}
    two, quiet = ScalingConfig(num_workers=2), RunConfig(verbose=0)
    cluster_client.run(_set_level, logging.DEBUG)  # what a user does to see it: level on the workers...
    cluster_client.forward_logging("airflowless.train.frameworks", level=logging.DEBUG)  # ...shown here
    try:
        with caplog.at_level(logging.DEBUG, logger="airflowless.train.frameworks"):
            for trainer in (XGBoostTrainer(label_column="label", num_boost_round=2, scaling_config=two,
                                           run_config=quiet, datasets=datasets),
                            LightGBMTrainer(label_column="label", params={"verbose": -1}, num_boost_round=2,
                                            scaling_config=two, run_config=quiet, datasets=datasets)):
                assert trainer.fit().error is None
            lines = eventually(lambda: [r.getMessage() for r in caplog.records
                                        if r.name == "airflowless.train.frameworks"] if any(
                "Connected to rank" in r.getMessage() for r in caplog.records) else [], timeout=30)
    finally:
        cluster_client.unforward_logging("airflowless.train.frameworks")
        cluster_client.run(_set_level, logging.NOTSET)
    assert any(line.startswith("xgboost: ") and "got rank" in line for line in lines)
    assert any(line.startswith("lightgbm: ") and "Connected to rank" in line for line in lines)
    assert any(line == "lightgbm: Listening..." for line in lines)  # from LightGBM's own listener thread


def test_lightgbm_lines_on_stdout_are_logged_by_level_and_other_output_is_kept(
        capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    from airflowless.train.backends.chatter import lightgbm_stdout_to_log

    with caplog.at_level(logging.DEBUG, logger="airflowless.train.frameworks"):
        with lightgbm_stdout_to_log() as network_up:
            # what LightGBM's listener thread does: write to file descriptor 1 directly
            os.write(1, b"[LightGBM] [Info] Listening...\n[LightGBM] [Warning] slow peer\n")
            os.write(1, b"a user's line\n[LightGBM] [Fatal] Socket recv error\n")
            network_up()
            network_up()  # idempotent
        os.write(1, b"[LightGBM] [Info] after the network is up\n")
        logged = eventually(lambda: [(r.levelno, r.getMessage()) for r in caplog.records
                                     if r.name == "airflowless.train.frameworks"] if len(caplog.records) >= 3 else [])
    assert logged == [(logging.DEBUG, "lightgbm: Listening..."), (logging.WARNING, "lightgbm: slow peer"),
                      (logging.ERROR, "lightgbm: Socket recv error")]
    seen: list[str] = []  # the reader thread forwards the user's line: it may come after the later line
    eventually(lambda: seen.extend(capfd.readouterr().out.splitlines()) or len(seen) >= 2)
    assert sorted(seen) == ["[LightGBM] [Info] after the network is up", "a user's line"]


def test_xgboost_connection_retries_are_debug_and_other_warnings_stay_warnings(
        caplog: pytest.LogCaptureFixture) -> None:
    from airflowless.train.backends.chatter import _xgboost_message

    retry = (b"[23:41:41] WARNING: /workspace/src/collective/socket.cc:143: Failed to connect to:127.0.0.1:39279 "
             b"Error:\n- [socket.h:348|23:41:41]: Socket error. Connection refused\n")
    with caplog.at_level(logging.DEBUG, logger="airflowless.train.frameworks"):
        _xgboost_message(retry)  # a rank of a fit being cancelled, reaching a tracker that is gone
        _xgboost_message(b"[23:41:41] WARNING: socket.cc:149: Retrying connection to 127.0.0.1 for the 1 time.")
        _xgboost_message(b"[23:41:42] WARNING: learner.cc:740: Parameters: { \"bogus\" } are not used.")
    assert [r.levelno for r in caplog.records if r.name == "airflowless.train.frameworks"] == [
        logging.DEBUG, logging.DEBUG, logging.WARNING]
