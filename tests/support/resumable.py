"""The head of a Tune driver script shared by the restore tests: imports and a resumable trainable.

The tests run their drivers as scripts (a subprocess each, killed or cut off
from its cluster on purpose), so the trainable is pickled by value from the
script; this is its source. A script sets ``MARKS`` (a folder),
``ITERATIONS``, ``CHECKPOINT_EVERY`` and ``PAUSE`` (seconds per iteration)
after these lines. The trainable checkpoints every ``CHECKPOINT_EVERY``
iterations, resumes from its latest checkpoint, and appends the iteration each
of its runs started from to ``MARKS/<trial>.starts``, so executions can be
counted from outside.
"""

from __future__ import annotations

import os
from pathlib import Path

DRIVER_HEAD = '''\
import json
import sys
import tempfile
import time
from pathlib import Path

import airflowless
from airflowless import tune
from airflowless.train import Checkpoint, RunConfig


def trainable(config):
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            start = json.loads(Path(folder, "state.json").read_text())["it"]
    with open(MARKS / (tune.get_context().get_trial_name() + ".starts"), "a") as f:
        f.write(f"{start}\\n")
    for it in range(start + 1, ITERATIONS + 1):
        time.sleep(PAUSE)
        saved = None
        if it % CHECKPOINT_EVERY == 0:
            folder = tempfile.mkdtemp()
            Path(folder, "state.json").write_text(json.dumps({"it": it}))
            saved = Checkpoint.from_directory(folder)
        tune.report({"it": it, "score": config["x"] * it}, checkpoint=saved)
'''


def prepare(tmp_path: Path, home: Path, driver: str) -> tuple[Path, Path, dict[str, str], str]:
    """One restore test's driver script (written from ``driver``), its marks folder, the environment
    of its processes and the store's URL."""
    script = tmp_path / "driver.py"
    script.write_text(driver)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, "AIRFLOWLESS_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    return script, marks, env, f"sqlite:///{home / 'airflowless.db'}"


def starts(marks: Path, trial: str) -> list[int]:
    """The iterations ``trial``'s runs started from, in order (one line per run in its marks file)."""
    path = marks / f"{trial}.starts"
    return [int(line) for line in path.read_text().split()] if path.exists() else []
