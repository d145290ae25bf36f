"""Path arguments are keyed by the files under them: what counts as a path, and what changes its key."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from airflowless.dag import fingerprint
from airflowless.dag.fingerprint import Fingerprints


def key(value: object) -> object:
    return Fingerprints().of(value)


def test_a_folder_is_keyed_by_its_files(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "day=1").mkdir(parents=True)
    (data / "day=1" / "a.parquet").write_bytes(b"x" * 10)
    first = key(str(data))
    assert key(str(data)) == first and key(data) == first  # unchanged: the same key, str or Path

    (data / "day=2").mkdir()
    assert key(str(data)) == first, "an empty folder holds no file: nothing the stage reads changed"
    (data / "day=2" / "b.parquet").write_bytes(b"y")
    added = key(str(data))
    assert added != first

    (data / "day=2" / "b.parquet").write_bytes(b"z")  # the same size: its modification time tells
    os.utime(data / "day=2" / "b.parquet", ns=(1, 1))
    changed = key(str(data))
    assert changed not in (first, added)

    (data / "day=2" / "b.parquet").unlink()
    assert key(str(data)) not in (added, changed)


def test_a_missing_path_is_keyed_as_missing_then_by_what_appears(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    missing = key("out/model.json")
    assert missing == ("path", str(tmp_path / "out" / "model.json"), None)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "model.json").write_text("{}")
    assert key("out/model.json") != missing
    assert key("./out/model.json") == key(Path("out/model.json")) == key(str(tmp_path / "out" / "model.json"))


def test_urls_are_listed_with_fsspec(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("1")
    url = f"file://{tmp_path}"
    first = key(url)
    assert first[0] == "url" and first[2] is not None
    (tmp_path / "b.csv").write_text("2")
    assert key(url) != first
    assert key(f"file://{tmp_path}/a.csv") != key(f"file://{tmp_path}/b.csv")


def test_what_is_not_a_path_is_keyed_as_it_is() -> None:
    for kept in ("plain", "taxi-tune", "", 3, 2.5, None, "http://127.0.0.1:1/predict", "https://example.invalid/x",
                 "/no/such/absolute/path", "line one\nline/two", b"data/raw"):
        assert key(kept) == kept


def test_a_path_that_cannot_be_keyed_is_never_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    for i in range(4):
        (tmp_path / f"{i}.txt").write_text(str(i))
    monkeypatch.setattr(fingerprint, "MAX_FILES", 3)
    with caplog.at_level(logging.WARNING, logger=fingerprint.__name__):
        first, second = key(str(tmp_path)), key(str(tmp_path))
    assert first != second
    assert "more than 3 files" in caplog.text and "cache_key" in caplog.text
    unreachable = key("nosuchprotocol123://bucket/x")
    assert unreachable != key("nosuchprotocol123://bucket/x")


def test_each_path_is_listed_once_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a").write_text("1")
    prints, walks = Fingerprints(), []
    real = Fingerprints._files
    monkeypatch.setattr(Fingerprints, "_files", staticmethod(lambda path: walks.append(path) or real(path)))
    assert prints.of(str(tmp_path)) == prints.of(str(tmp_path)) == prints.of(tmp_path)
    assert walks == [str(tmp_path)]
