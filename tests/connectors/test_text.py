"""read_text and read_binary_files on real files, through the session's cluster."""

from __future__ import annotations

import bz2
import gzip
from pathlib import Path

import pytest

from airflowless import data
from airflowless.errors import ConfigError
from connectors.parquet import ReadError
from connectors.paths import SourceNotFoundError

pytestmark = pytest.mark.usefixtures("cluster_client")


@pytest.fixture
def texts(tmp_path: Path) -> Path:
    folder = tmp_path / "texts"
    (folder / "deep").mkdir(parents=True)
    (folder / "a.txt").write_bytes(b"alpha\r\nbeta\r\n\r\n   \ngamma")  # CRLF, a blank line, no last newline
    (folder / "empty.txt").write_bytes(b"")
    with gzip.open(folder / "deep" / "b.log.gz", "wb") as f:
        f.write(b"delta\nepsilon\n")
    (folder / "c.log.bz2").write_bytes(bz2.compress("zeta é\n".encode()))
    (folder / "_SUCCESS").write_bytes(b"")  # a marker, skipped in folders as by every file reader
    return folder


def test_read_text_gives_each_line_of_every_file_in_order(texts: Path) -> None:
    ds = data.read_text(str(texts), include_paths=True)
    rows = ds.take_all()
    assert [row["text"] for row in rows] == ["alpha", "beta", "gamma", "zeta é", "delta", "epsilon"]
    assert [Path(row["path"]).name for row in rows] == ["a.txt", "a.txt", "a.txt", "c.log.bz2", "b.log.gz",
                                                       "b.log.gz"]
    assert ds.count() == 6 and data.read_text(str(texts)).columns() == ["text"]


def test_read_text_keeps_blank_lines_when_asked_and_chooses_files_by_extension(texts: Path) -> None:
    kept = data.read_text(str(texts / "a.txt"), drop_empty_lines=False).take_all()
    assert [row["text"] for row in kept] == ["alpha", "beta", "", "   ", "gamma"]  # a last newline adds no row
    logs = data.read_text(str(texts), file_extensions=["gz", ".bz2"]).to_pandas()
    assert sorted(logs["text"]) == ["delta", "epsilon", "zeta é"]
    with pytest.raises(SourceNotFoundError, match=r"matched no file ending in \.csv"):
        data.read_text(str(texts), file_extensions=["csv"])


def test_read_text_decodes_what_it_is_told_and_names_a_file_it_cannot(tmp_path: Path) -> None:
    (tmp_path / "latin.txt").write_bytes("café\nnaïve\n".encode("latin-1"))
    assert [row["text"] for row in data.read_text(str(tmp_path), encoding="latin-1").take_all()] == ["café", "naïve"]
    with pytest.raises(ReadError, match=r"latin\.txt.*as utf-8 at byte 3.*encoding="):
        data.read_text(str(tmp_path)).take_all()
    with pytest.raises(ConfigError, match="no text encoding is named 'utf-9'"):
        data.read_text(str(tmp_path), encoding="utf-9")


def test_read_binary_files_gives_each_file_as_it_is(texts: Path) -> None:
    ds = data.read_binary_files(str(texts), include_paths=True)
    rows = {Path(row["path"]).name: row["bytes"] for row in ds.take_all()}
    assert rows == {name: (texts / name).read_bytes() for name in ("a.txt", "empty.txt", "c.log.bz2")} | {
        "b.log.gz": (texts / "deep" / "b.log.gz").read_bytes()}  # compressed files stay compressed
    sizes = ds.map_batches(lambda batch: {"n": [len(b) for b in batch["bytes"]]}).sum("n")
    assert sizes == sum(len(b) for b in rows.values())
