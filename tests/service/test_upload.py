"""Submitted code: packed without caches or ignored files, deterministic, bounded, signed, unpacked once."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from airflowless.errors import ConfigError, SignatureError
from airflowless.service.upload import local_target, pack, root_of, upload


def _tree(root: Path) -> Path:
    (root / "jobs").mkdir(parents=True)
    (root / "jobs" / "version.txt").write_text(str(root))  # each tree its own content
    (root / "jobs" / "__init__.py").write_text("")
    (root / "jobs" / "helpers.py").write_text("FACTOR = 3\n")
    module = root / "jobs" / "scaled.py"
    module.write_text("from airflowless import pipeline, stage\nfrom jobs.helpers import FACTOR\n\n"
                      "@stage\ndef scale(n: int) -> int:\n    return n * FACTOR\n\n"
                      "@pipeline\ndef scaled(n: int = 2):\n    return scale(n)\n")
    for ignored in (".git/HEAD", "jobs/__pycache__/x.pyc", ".venv/lib/big.so", "data/raw.csv", "notes.tmp"):
        (root / ignored).parent.mkdir(parents=True, exist_ok=True)
        (root / ignored).write_text("ignored")
    (root / ".airflowlessignore").write_text("# what the runs do not need\ndata\n*.tmp\n")
    return module


def _names(payload: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r:gz") as archive:
        return sorted(archive.getnames())


def test_the_package_folder_is_packed_without_caches_or_ignored_files_and_the_same_bytes_twice(
        tmp_path: Path) -> None:
    module = _tree(tmp_path / "project")
    assert root_of(module) == (tmp_path / "project").resolve()
    payload = pack(root_of(module))
    assert _names(payload) == [".airflowlessignore", "jobs/__init__.py", "jobs/helpers.py", "jobs/scaled.py",
                               "jobs/version.txt"]
    assert pack(root_of(module)) == payload  # deterministic: one stored archive per content


def test_a_folder_over_the_bound_is_refused_naming_its_largest_files(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    module = _tree(tmp_path / "project")
    (tmp_path / "project" / "model.bin").write_bytes(b"x" * 2 * 2**20)
    monkeypatch.setenv("AIRFLOWLESS_SUBMIT_MAX_MB", "1")
    with pytest.raises(ConfigError, match=r"over the 1 MiB bound.*model\.bin \(2\.0 MiB\).*\.airflowlessignore"):
        pack(root_of(module))


@pytest.mark.usefixtures("home")
def test_a_submission_unpacks_where_the_driver_runs_and_a_changed_or_foreign_one_is_refused(tmp_path: Path) -> None:
    from airflowless.dag import load_pipeline
    from airflowless.integrity import install_key

    module = _tree(tmp_path / "project")
    target = upload(module, "scaled")
    assert target.startswith("submission:") and target.endswith("#jobs/scaled.py:scaled")
    module.write_text("raise ImportError('edited after the submission')\n")  # the run keeps the submitted code
    local = local_target(target)
    assert "/service/work/" in local and load_pipeline(local).name == "scaled"
    assert local_target(target) == local  # unpacked once

    other = upload(_tree(tmp_path / "other"), "scaled")
    stored = Path(other.removeprefix("submission:").rpartition("#")[0])
    framed = stored.read_bytes()
    stored.write_bytes(framed[:-10] + b"0123456789")  # changed in the storage
    with pytest.raises(SignatureError, match="does not match"):
        local_target(other)
    install_key(b"k" * 32)  # another installation's key signs a third one
    try:
        foreign = upload(_tree(tmp_path / "third"), "scaled")
    finally:
        install_key(None)
    with pytest.raises(SignatureError, match="does not match"):
        local_target(foreign)
