"""The copy of a service driver's log: it only grows, says where the rest is past its bound, ends with the mark
that tells readers it is whole; an adopting service appends to what its predecessor copied; object storage gets
the whole copy each time. Real files and fsspec's in-memory filesystem; no cluster."""

from __future__ import annotations

from pathlib import Path

import fsspec

from airflowless.service.driver_logs import END_MARK, Copier, DriverLog


def test_the_copy_grows_with_the_file_and_is_closed_once_the_driver_ended(tmp_path: Path) -> None:
    source, copy = tmp_path / "run-1.log", tmp_path / "storage" / "runs" / "1" / "logs" / "driver.log"
    source.write_bytes(b"first line\n")
    driver_log = DriverLog(source, str(copy))
    driver_log.copy()
    assert copy.read_bytes() == b"first line\n" and oct(copy.stat().st_mode & 0o777) == "0o600"
    with source.open("ab") as out:
        out.write(b"second line\n")
    driver_log.copy()
    driver_log.copy()  # nothing grew: nothing written
    assert copy.read_bytes() == b"first line\nsecond line\n"
    driver_log.copy(final=True)
    assert copy.read_bytes() == b"first line\nsecond line\n" + END_MARK


def test_past_its_bound_the_copy_says_where_the_rest_is_and_is_still_closed(tmp_path: Path) -> None:
    source, copy = tmp_path / "run-2.log", tmp_path / "driver.log"
    source.write_bytes(b"a" * 60)
    driver_log = DriverLog(source, str(copy), limit=100)
    driver_log.copy()
    with source.open("ab") as out:
        out.write(b"b" * 80)
    driver_log.copy()
    driver_log.copy()
    cut = copy.read_bytes()
    assert cut.startswith(b"a" * 60 + b"b" * 40) and b"passed 100 bytes" in cut and str(source).encode() in cut

    # the service dies; one adopting the driver finds the copy cut: it copies nothing more, and closes it
    adopter = DriverLog(source, str(copy), limit=100)
    with source.open("ab") as out:
        out.write(b"c" * 10)
    adopter.copy()
    assert copy.read_bytes() == cut
    adopter.copy(final=True)
    assert copy.read_bytes() == cut + END_MARK


def test_an_adopting_service_appends_what_grew_after_its_predecessors_copy(tmp_path: Path) -> None:
    source, copy = tmp_path / "run-3.log", tmp_path / "driver.log"
    source.write_bytes(b"before the service died\n")
    DriverLog(source, str(copy)).copy()
    with source.open("ab") as out:
        out.write(b"after\n")
    adopter = DriverLog(source, str(copy))
    adopter.copy(final=True)
    assert copy.read_bytes() == b"before the service died\nafter\n" + END_MARK


def test_object_storage_gets_the_whole_copy_each_time_from_the_copiers_thread(tmp_path: Path) -> None:
    source = tmp_path / "run-4.log"
    source.write_bytes(b"x" * 30)
    uri = "memory://airflowless-test/runs/4/logs/driver.log"
    driver_log = DriverLog(source, uri, limit=50)
    copier = Copier()
    copier.sync(driver_log)
    copier.close()  # waits for the copy
    with fsspec.open(uri, "rb") as copied:
        assert copied.read() == b"x" * 30
    with source.open("ab") as out:
        out.write(b"y" * 30)
    copier.sync(driver_log, final=True)  # the thread starts again after close
    copier.close()
    with fsspec.open(uri, "rb") as copied:
        whole = copied.read()
    assert whole.startswith(b"x" * 30 + b"y" * 20) and b"passed 50 bytes" in whole and whole.endswith(END_MARK)
