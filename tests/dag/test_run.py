"""Pipelines run on a real embedded cluster (worker processes), recorded in a real store."""

from __future__ import annotations

import os
import select
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from dask.utils import key_split

from airflowless import cluster_client as launch_client
from airflowless import pipeline, stage
from airflowless.errors import ClusterError, PipelineRunError
from tests.support.eventually import eventually

pytestmark = pytest.mark.usefixtures("cluster_client")


def _bump(counter: Path) -> int:
    """Count real executions of a stage body in a file (workers are other processes)."""
    count = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(count))
    return count


@stage
def meet(folder: str, tag: str, peer: str) -> str:
    """Mark that this stage started, then wait for its peer to start: both finish only if they ran at once."""
    (Path(folder) / tag).touch()
    eventually(lambda: (Path(folder) / peer).exists(), message=f"stage {peer!r} to start while {tag!r} runs")
    return tag


@stage
def pair(left: str, right: str) -> str:
    return left + right


@pipeline
def parallel(folder: str):
    return pair(meet(folder, "a", "b"), meet(folder, "b", "a"))


def test_independent_stages_run_in_parallel_as_tasks_named_after_stages(store, tmp_path: Path) -> None:  # noqa: ANN001
    result = parallel.run({"folder": str(tmp_path)}, store=store)
    assert result.value == "ab"  # each `meet` saw the other start before it finished: they overlapped
    record = store.get_run(result.run_id)
    assert record.status == "succeeded"
    assert [s.status for s in record.stages] == ["succeeded"] * 3
    assert {key_split(s.task_key) for s in record.stages} == {"meet", "pair"}
    workers = {record.stage("meet").worker, record.stage("meet-2").worker}
    assert len(workers) == 2, "the two independent stages should use both workers"


@stage(retries=2, retry_delay=0.2, backoff=2.0)
def flaky(counter: str) -> int:
    count = _bump(Path(counter))
    with open(f"{counter}.starts", "a") as starts:  # CLOCK_MONOTONIC: one clock for every process here
        starts.write(f"{time.monotonic()}\n")
    if count < 3:
        raise ConnectionError(f"attempt {count} lost the connection")
    return count


@pipeline
def retrying(counter: str):
    return flaky(counter)


def test_retries_with_backoff(store, tmp_path: Path) -> None:  # noqa: ANN001
    result = retrying.run({"counter": str(tmp_path / "n")}, store=store)
    assert result.value == 3
    starts = [float(line) for line in (tmp_path / "n.starts").read_text().split()]
    waits = [later - earlier for earlier, later in zip(starts, starts[1:], strict=False)]
    assert len(waits) == 2 and waits[0] >= 0.2 and waits[1] >= 0.2 * 2.0, waits  # retry_delay, then its backoff
    record = store.get_run(result.run_id).stage("flaky")
    assert record.attempts == 3 and record.status == "succeeded"


@stage(retries=1, retry_delay=5)
def patient(marker: str) -> str:
    if not Path(marker).exists():
        Path(marker).touch()
        raise ConnectionError("the first attempt lost its connection")
    return "second attempt"


@pipeline
def waiting_to_retry(marker: str):
    return patient(marker)


def _seceded(dask_worker: Any) -> list[str]:
    """The tasks running on a worker outside its thread pool (they seceded)."""
    return [str(ts.key) for ts in dask_worker.state.long_running]


def test_a_stage_waiting_to_retry_gives_its_worker_thread_back(cluster_client, store, tmp_path: Path) -> None:  # noqa: ANN001
    marker, results = tmp_path / "failed-once", []
    driver = threading.Thread(target=lambda: results.append(waiting_to_retry.run({"marker": str(marker)},
                                                                                 store=store)))
    driver.start()
    try:
        eventually(marker.exists, message="the first attempt to fail")

        def seceded() -> list[str]:  # (it holds a thread while it runs and fails, and after the wait)
            keys = cluster_client.run(_seceded).values()
            return [key for some in keys for key in some if key_split(key) == "patient"]

        eventually(seceded, timeout=4, message="the task waiting to retry to leave its worker's thread pool")
    finally:
        driver.join(30)
    assert results and results[0].value == "second attempt"
    assert store.get_run(results[0].run_id).stage("patient").attempts == 2


@stage(timeout=0.5, retries=1, retry_delay=0)
def spinning(counter: str) -> None:
    _bump(Path(counter))
    while True:  # Python code: interrupted at the deadline, then retried
        sum(range(100))


@stage(timeout=0.5)
def blocked(release: str) -> None:
    """Block in a C call until the test releases it (opens the pipe's other end); 120 s at most."""
    pipe = os.open(release, os.O_RDONLY | os.O_NONBLOCK)
    try:
        select.select([pipe], [], [], 120)  # the driver stops waiting after the timeout and a grace
    finally:
        os.close(pipe)
        Path(f"{release}.returned").touch()


@stage
def never(value: object) -> None:
    return None


@pipeline
def timing_out(counter: str, release: str):
    return spinning(counter), never(blocked(release))


def _release(pipe: Path) -> bool:
    """Open and close the write end of ``pipe``: a `blocked` stage waiting on it returns; False while none waits."""
    try:
        os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # ENXIO: no reader (yet)
        return False
    return True


def test_timeouts_fail_stages_promptly(store, tmp_path: Path) -> None:  # noqa: ANN001
    release = tmp_path / "release"
    os.mkfifo(release)
    with pytest.raises(PipelineRunError, match="spinning"):
        timing_out.run({"counter": str(tmp_path / "n"), "release": str(release)}, store=store)
    # promptly: the run ended while `blocked` was still in its C call, which returns only once released here
    assert not Path(f"{release}.returned").exists(), "the run waited for `blocked` to return from its C call"
    eventually(lambda: _release(release), message="`blocked` waiting on its pipe")
    eventually(lambda: Path(f"{release}.returned").exists(), message="`blocked` returning once released")
    run = store.get_run(store.list_runs(limit=1)[0].id)
    assert (tmp_path / "n").read_text() == "2", "a timed-out attempt is retried"
    assert {s.node: s.status for s in run.stages} == {"spinning": "failed", "blocked": "failed", "never": "skipped"}
    for node in ("spinning", "blocked"):
        assert "timeout of 0.5 s" in (run.stage(node).error or "")


def _by_value(counter: str, value: int) -> int:
    """The cache key of the counting stages: their value (the counter is written by every run)."""
    return value


@stage(cache_key=_by_value)
def counted(counter: str, value: int) -> int:
    _bump(Path(counter))
    return value * 10


@stage(cache_key=_by_value)
def add_one(counter: str, value: int) -> int:
    _bump(Path(counter))
    return value + 1


@pipeline
def cached(up: str, down: str, value: int = 1):
    return add_one(down, counted(up, value))


def test_unchanged_stages_are_not_run_again_and_a_changed_upstream_invalidates(store, tmp_path: Path) -> None:  # noqa: ANN001
    up, down = str(tmp_path / "up"), str(tmp_path / "down")
    first = cached.run({"up": up, "down": down}, store=store)
    second = cached.run({"up": up, "down": down}, store=store)
    assert first.value == second.value == 11
    assert Path(up).read_text() == "1" and Path(down).read_text() == "1"
    assert [s.status for s in second.record.stages] == ["cached", "cached"]
    assert second.record.stage("add_one").reused_from_run == first.run_id
    third = cached.run({"up": up, "down": down, "value": 2}, store=store)
    assert third.value == 21
    assert Path(up).read_text() == "2" and Path(down).read_text() == "2"
    fresh = cached.run({"up": up, "down": down}, store=store, cache=False)
    assert fresh.value == 11 and Path(up).read_text() == "3"


@stage(cache_key=lambda counter: counter.encode())  # the counter by its name, not its content
def source(counter: str) -> int:
    _bump(Path(counter))
    return 5


@stage
def fragile(value: int, flag: str) -> int:
    if Path(flag).exists():
        raise ValueError("the flag file says this stage is broken")
    return value + 1


@stage
def after(value: int) -> int:
    return value * 2


@stage
def sibling(value: int) -> int:
    return value - 1


@pipeline
def breaking(counter: str, flag: str):
    base = source(counter)
    return after(fragile(base, flag)), sibling(base)


def test_failure_skips_downstream_and_resume_reuses_finished_stages(store, tmp_path: Path) -> None:  # noqa: ANN001
    counter, flag = tmp_path / "source", tmp_path / "broken"
    flag.write_text("yes")
    with pytest.raises(PipelineRunError) as info:
        breaking.run({"counter": str(counter), "flag": str(flag)}, store=store)
    failed_run = info.value.run_id
    record = store.get_run(failed_run)
    assert record.status == "failed"
    assert (record.error or "").startswith("stage fragile failed: ValueError: the flag file says"), record.error
    status = {s.node: s.status for s in record.stages}
    assert status == {"source": "succeeded", "fragile": "failed", "after": "skipped", "sibling": "succeeded"}
    fragile_record = record.stage("fragile")
    assert "ValueError: the flag file says" in (fragile_record.error or "")
    assert 'raise ValueError("the flag file says' in (fragile_record.traceback or "")

    flag.unlink()  # "fix" the stage
    resumed = breaking.resume(failed_run, store=store)
    assert resumed.value == (12, 4)
    assert counter.read_text() == "1", "the finished source stage must not run again"
    again = {s.node: (s.status, s.reused_from_run) for s in resumed.record.stages}
    assert again["source"] == ("cached", failed_run)
    assert again["fragile"][0] == "succeeded" and again["after"][0] == "succeeded"
    assert resumed.record.resumed_from == failed_run
    assert store.get_run(failed_run).status == "failed", "the failed run's record is kept as it was"


def test_resume_refuses_other_parameters(store, tmp_path: Path) -> None:  # noqa: ANN001
    result = cached.run({"up": str(tmp_path / "u"), "down": str(tmp_path / "d")}, store=store)
    with pytest.raises(ValueError, match="keeps the parameters"):
        cached.run({"value": 9}, store=store, resume=result.run_id)
    with pytest.raises(ValueError, match="not 'breaking'"):
        breaking.resume(result.run_id, store=store)


@stage(resources={"GPU": 1})
def needs_gpu() -> int:
    return 1


@stage(resources={"CPU": 1})
def needs_cpu() -> int:
    return 2


def test_resources_are_checked_before_running(store) -> None:  # noqa: ANN001
    @pipeline
    def gpu_job():
        return needs_gpu()

    @pipeline
    def cpu_job():
        return needs_cpu()

    with pytest.raises(ClusterError, match=r"'needs_gpu' asks for resources \{'GPU': 1\}.*offer"):
        gpu_job.run(store=store)
    assert store.count_runs() == 0, "nothing is recorded or run when validation fails"
    assert cpu_job.run(store=store).value == 2


def _square(x: int) -> int:
    return x * x


@stage
def fan_out(n: int) -> int:
    with launch_client() as client:
        return sum(client.gather(client.map(_square, range(n))))


@stage
def plugin_present() -> bool:
    from airflowless.runtime.plugins import worker_state

    worker_state()["seen"] = True
    return True


@pipeline
def nested(n: int = 10):
    return fan_out(n), plugin_present()


def test_stages_launch_cluster_work_and_see_the_worker_plugin(store) -> None:  # noqa: ANN001
    result = nested.run({"n": 10}, store=store)
    assert result.value == (285, True)


@stage(cache=False)
def hold(lock: object) -> str:
    return "held"


@pipeline
def unsendable():
    return hold(threading.Lock())  # no pickle takes a lock to a worker


def test_a_graph_that_cannot_be_sent_fails_its_run_with_the_reason(store) -> None:  # noqa: ANN001
    with pytest.raises(Exception, match="(?i)lock") as raised:
        unsendable.run({}, store=store)
    assert not isinstance(raised.value, KeyError), raised.value
    run = store.get_run(store.list_runs(limit=1)[0].id)
    assert run.status == "failed" and "lock" in (run.error or "").lower(), run.error
