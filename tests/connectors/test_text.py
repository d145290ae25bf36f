"""read_text and read_binary_files on real files, through the session's cluster."""

from __future__ import annotations

import bz2
import gzip
import importlib.util
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
    assert [row["text"] for row in kept] == ["alpha", "beta", "", "   ", "gamma"]
    (texts / "ends.TXT").write_bytes(b"x\n\n")  # a last newline ends a line and starts none
    kept = data.read_text(str(texts), file_extensions="txt", drop_empty_lines=False).take_all()
    assert [row["text"] for row in kept] == ["alpha", "beta", "", "   ", "gamma", "x", ""]  # empty.txt: none
    logs = data.read_text(str(texts), file_extensions=["gz", ".bz2"]).to_pandas()
    assert sorted(logs["text"]) == ["delta", "epsilon", "zeta é"]
    with pytest.raises(SourceNotFoundError, match=r"matched no file ending in \.csv"):
        data.read_text(str(texts), file_extensions=["csv"])
    with pytest.raises(ConfigError, match=r"file_extensions=\[\] keeps no file"):
        data.read_text(str(texts), file_extensions=[])


def test_hidden_and_marker_files_and_folders_are_left_out_of_a_folder(tmp_path: Path) -> None:
    for name in (".git/objects/ab12", ".ipynb_checkpoints/notes-checkpoint.txt", "_temporary/0/part-0.txt",
                 "_SUCCESS", ".env"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"\xff not data")
    with pytest.raises(SourceNotFoundError, match=r"matched no file \(5 whose name, or a folder's, starts with"):
        data.read_text(str(tmp_path))
    (tmp_path / "notes.txt").write_text("kept")
    assert data.read_text(str(tmp_path)).take_all() == [{"text": "kept"}]
    assert data.read_text(str(tmp_path / ".env"), encoding="latin-1").count() == 1  # named: read


def test_a_corrupt_or_unreadable_compressed_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "bad.log.gz").write_bytes(gzip.compress(b"fine\n" * 100)[:-30] + b"\x00" * 30)
    with pytest.raises(ReadError, match=r"bad\.log\.gz"):
        data.read_text(str(tmp_path)).take_all()
    (tmp_path / "bad.log.gz").unlink()
    (tmp_path / "z.log.zst").write_bytes(b"(\xb5/\xfd not readable here")
    if importlib.util.find_spec("zstandard") is None:  # no dependency of ours: without it, the file says so
        with pytest.raises(ReadError, match=r"z\.log\.zst.*zstd-compressed.*pip install zstandard"):
            data.read_text(str(tmp_path)).take_all()


def test_read_binary_files_gives_each_file_as_it_is(texts: Path) -> None:
    ds = data.read_binary_files(str(texts), include_paths=True)
    rows = {Path(row["path"]).name: row["bytes"] for row in ds.take_all()}
    assert rows == {name: (texts / name).read_bytes() for name in ("a.txt", "empty.txt", "c.log.bz2")} | {
        "b.log.gz": (texts / "deep" / "b.log.gz").read_bytes()}  # compressed files stay compressed
    sizes = ds.map_batches(lambda batch: {"n": [len(b) for b in batch["bytes"]]}).sum("n")
    assert sizes == sum(len(b) for b in rows.values())
