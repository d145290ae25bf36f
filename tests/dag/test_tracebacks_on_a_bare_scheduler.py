"""A failed stage's traceback names the user's file and line on a plain ``dask scheduler`` (no airflowless preload).

distributed's scheduler unpickles a client's graph and pickles each task again
for its worker; a scheduler that never imported airflowless pickles with
cloudpickle's own rules, which (from 3.1.3 on) write ``"<dynamic-code>"`` as the
file of every function pickled by value. A stage's function therefore travels
as bytes made on the driver, which the scheduler copies unopened. Real
processes: ``dask scheduler`` and ``dask worker`` started bare, and a driver
script whose stage is pickled by value (it is the script's ``__main__``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from airflowless.store import open_store

SCRIPT = '''\
import sys

import airflowless
from airflowless import pipeline, stage


@stage
def fragile(n: int) -> int:
    if n > 1:
        raise ValueError(f"too big: {n}")  # the line the traceback must show
    return n


@pipeline
def demo(n: int = 3):
    return fragile(n)


if __name__ == "__main__":
    airflowless.init(sys.argv[1], quiet=True)
    demo.run({"n": 3}, raise_on_failure=False)
'''


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_failed_stage_names_its_file_and_line_on_a_bare_dask_scheduler(tmp_path: Path, home: Path) -> None:
    env = {**os.environ, "AIRFLOWLESS_HOME": str(home)}
    address = f"tcp://127.0.0.1:{_free_port()}"
    logs = {name: open(tmp_path / f"{name}.log", "wb") for name in ("scheduler", "worker")}  # noqa: SIM115
    processes = [
        subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                          "--port", address.rsplit(":", 1)[1], "--no-dashboard"],
                         env=env, cwd=tmp_path, stdout=logs["scheduler"], stderr=subprocess.STDOUT),
        subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "2",
                          "--host", "127.0.0.1", "--no-dashboard"],
                         env=env, cwd=tmp_path, stdout=logs["worker"], stderr=subprocess.STDOUT),
    ]
    try:
        from distributed import Client

        with Client(address, timeout=60) as client:  # up, with its worker
            client.wait_for_workers(1, timeout=60)
        script = tmp_path / "fragile_pipeline.py"
        script.write_text(SCRIPT)
        run = subprocess.run([sys.executable, str(script), address], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout + run.stderr
        store = open_store()
        record = store.get_run(store.list_runs()[0].id)
        (stage,) = [s for s in record.stages if s.node == "fragile"]
        assert stage.status == "failed", (record, run.stderr)
        traceback = stage.traceback or ""
        assert f'File "{script}", line 10, in fragile' in traceback, traceback
        assert 'raise ValueError(f"too big: {n}")  # the line the traceback must show' in traceback, traceback
        assert "<dynamic-code>" not in traceback
    finally:
        for process in processes:
            process.kill()
            process.wait(30)
        for log in logs.values():
            log.close()


def test_a_stage_that_names_itself_pickles_and_a_new_run_sends_what_its_function_reads_now() -> None:
    """The sealed bytes hold a stage whose function's globals name the stage (recursion, or a stage reading
    another's name); each run seals afresh, so a global changed between runs reaches the workers."""
    import pickle

    import cloudpickle

    namespace: dict = {}
    exec(  # a module pickled by value, like a notebook's or a script's __main__
        "from airflowless import stage\n"
        "FACTOR = 1\n"
        "@stage\n"
        "def fact(n: int) -> int:\n"
        "    return FACTOR if n <= 1 else n * fact.fn(n - 1)\n", namespace)
    fact = namespace["fact"]
    copy = pickle.loads(cloudpickle.dumps(fact))
    assert copy.fn(4) == 24
    namespace["FACTOR"] = 10
    assert pickle.loads(cloudpickle.dumps(fact)).fn(4) == 24  # one run: the bytes it started with
    fact.reseal()  # what the runner does when a run starts
    assert pickle.loads(cloudpickle.dumps(fact)).fn(4) == 240
