"""Scripts that start the embedded cluster, run as real subprocesses: guarded, unguarded, ``python -m``.

Workers are ``python -m airflowless.runtime.worker_main`` processes, so they
never import the script: one without an ``if __name__ == "__main__":`` guard
works, and functions it defines reach the workers by value.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

UNGUARDED = """\
import airflowless
from helper import triple

airflowless.init(n_workers=2, dashboard_address=":0")

def square(x):
    return x * x

client = airflowless.get_client()
print("ANSWER", airflowless.data.range(1000).count(), client.submit(square, 7).result(),
      client.submit(triple, 5).result(), flush=True)
"""

GUARDED = """\
import airflowless

def square(x):
    return x * x

if __name__ == "__main__":
    client = airflowless.init(n_workers=2, dashboard_address=":0")
    print("ANSWER", airflowless.data.range(1000).count(), client.submit(square, 7).result(),
          flush=True)
    airflowless.shutdown()
"""

HELPER = "def triple(x):\n    return 3 * x\n"


def _run(args: list[str], cwd: Path, home: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "AIRFLOWLESS_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    env.pop("AIRFLOWLESS_ADDRESS", None)
    started = time.monotonic()
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)  # the old failure was a hang: any bound catches it
    return done, time.monotonic() - started


@pytest.mark.parametrize(("layout", "expected"), [
    ("unguarded", "ANSWER 1000 49 15"),
    ("guarded", "ANSWER 1000 49"),
    ("module", "ANSWER 1000 49 15"),
])
def test_a_script_prints_its_answer(layout: str, expected: str, tmp_path: Path, home: Path) -> None:
    if layout == "module":  # python -m pkg.mod: the script is a module of a package in the cwd
        (tmp_path / "pkg").mkdir()
        (tmp_path / "pkg" / "__init__.py").write_text("")
        (tmp_path / "pkg" / "mod.py").write_text(UNGUARDED.replace("from helper", "from pkg.helper"))
        (tmp_path / "pkg" / "helper.py").write_text(HELPER)
        args = ["-m", "pkg.mod"]
    else:  # python dir/script.py from elsewhere: a helper next to the script imports too
        (tmp_path / "scripts").mkdir()
        (tmp_path / "scripts" / "myscript.py").write_text(UNGUARDED if layout == "unguarded" else GUARDED)
        (tmp_path / "scripts" / "helper.py").write_text(HELPER)
        args = [str(tmp_path / "scripts" / "myscript.py")]
    done, took = _run(args, tmp_path, home)
    print(f"{layout}: answered and exited in {took:.1f} s")
    assert done.returncode == 0, done.stderr[-3000:]
    assert expected in done.stdout.splitlines(), done.stdout + done.stderr[-3000:]
    assert "bootstrapping phase" not in done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
