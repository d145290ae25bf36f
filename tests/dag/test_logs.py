"""Per-stage logs: what a stage prints and logs, one file per attempt, kept apart from other stages' threads."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

import pytest

from airflowless import pipeline, stage
from airflowless.dag.logs import capture, read_log


@pytest.fixture(autouse=True)
def _routing_undone() -> object:
    """This process's streams and root logger as they were (capture() routes them by thread for good)."""
    root = logging.getLogger()
    before = (sys.stdout, sys.stderr, list(root.handlers), root.level)
    yield
    sys.stdout, sys.stderr = before[0], before[1]
    root.handlers[:] = before[2]
    root.setLevel(before[3])


def test_two_threads_capturing_at_once_keep_their_own_lines(tmp_path: Path) -> None:
    both = threading.Barrier(2)

    def talk(name: str) -> None:
        with capture(str(tmp_path / f"{name}.log")):
            for i in range(50):
                print(f"{name} line {i}")
                logging.getLogger("user.code").info("%s logged %d", name, i)
                if i == 10:
                    both.wait()  # both are inside their capture here
            print(f"{name} to stderr", file=sys.stderr)

    threads = [threading.Thread(target=talk, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, other in (("a", "b"), ("b", "a")):
        text = (tmp_path / f"{name}.log").read_text()
        assert f"{name} line 49" in text and f"{name} logged 49" in text and f"{name} to stderr" in text
        assert f"{other} line" not in text and f"{other} logged" not in text


def test_a_log_past_its_limit_keeps_its_tail_and_says_what_was_cut(tmp_path: Path) -> None:
    with capture(str(tmp_path / "big.log"), limit=1000):
        for i in range(500):
            print(f"line {i:04d}")
    text = (tmp_path / "big.log").read_text()
    assert text.startswith("[airflowless: the first ")
    assert text.rstrip().endswith("line 0499") and "line 0000" not in text
    assert len(text.encode()) < 1200


@stage(retries=1, retry_delay=0.01, cache=False)
def chatty(marker: str) -> int:
    print("hello from the stage")
    logging.getLogger("chatty").warning("a warning from the stage")
    if not Path(marker).exists():
        Path(marker).touch()
        raise RuntimeError("first attempt fails")
    return 7


@pipeline
def talking(marker: str):
    return chatty(marker)


@pytest.mark.usefixtures("cluster_client")
def test_each_attempt_of_a_stage_has_its_log_on_the_record_and_from_the_cli(store, tmp_path: Path) -> None:  # noqa: ANN001
    result = talking.run({"marker": str(tmp_path / "m")}, store=store)
    record = result.record.stage("chatty")
    assert record.attempts == 2 and record.log_uri and record.log_uri.endswith("chatty.attempt-2.log")
    first = read_log(record.log_uri.replace("attempt-2", "attempt-1")).decode()
    assert "hello from the stage" in first and "a warning from the stage" in first
    assert "RuntimeError: first attempt fails" in first, "the attempt's traceback ends its log"
    second = read_log(record.log_uri).decode()
    assert "hello from the stage" in second and "RuntimeError" not in second
