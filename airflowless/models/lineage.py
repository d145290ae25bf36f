"""What a model version was made from: the datasets it was trained on and the code that registered it.

A dataset is named by its plan's token (the same reads and transforms give the
same token) and by a fingerprint of the files its reads found (each file's path,
size and modification time or ETag): the same plan over files that changed since
gets another fingerprint. The code is the git commit of the file that called
``register`` (``+dirty`` when that file has uncommitted changes), as MLflow's
``mlflow.source.git.commit`` is.

>>> dataset_lineage(data.read_parquet("/tmp/taxi-days/date=2026-11-01/"))    # doctest: +SKIP
{'plan': '9f1c...', 'label': 'ReadParquet', 'files': 1, 'fingerprint': '4be0...', 'paths': [...]}
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["dataset_lineage", "code_version"]

SHOWN_PATHS = 20
"""How many of a dataset's input files a version lists by name (the fingerprint covers them all)."""


def dataset_lineage(dataset: Any) -> dict[str, Any]:
    """The plan token of ``dataset`` (an airflowless Dataset) and a fingerprint of the files it reads."""
    from ..data import Dataset
    from ..data.logical.operators import Read, walk

    if not isinstance(dataset, Dataset):
        raise ConfigError(f"register(..., datasets={{name: dataset}}) takes airflowless Datasets, got "
                          f"{type(dataset).__name__}")
    inputs: list[tuple[str, int, str]] = []
    for op in walk(dataset._plan):
        if isinstance(op, Read):
            source = op.source
            for path in getattr(source, "files", None) or []:
                info = source.fs.info(path)
                changed = info.get("mtime") or info.get("LastModified") or info.get("ETag") or info.get("etag")
                inputs.append((str(path), int(info.get("size") or 0), str(changed)))
    inputs.sort()
    fingerprint = hashlib.sha256("\n".join(f"{p}\0{s}\0{m}" for p, s, m in inputs).encode()).hexdigest()
    return {"plan": dataset.__dask_tokenize__(), "label": dataset._plan.label, "files": len(inputs),
            "fingerprint": fingerprint, "paths": [p for p, _, _ in inputs[:SHOWN_PATHS]]}


def code_version(path: str) -> str | None:
    """The git commit of the repository holding ``path`` (``+dirty`` if the file has changes not committed);
    None when it is not in a git repository (or git is not there)."""
    file = Path(path)
    if not file.is_file():
        return None
    try:
        head = subprocess.run(["git", "-C", str(file.parent), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(file.parent), "status", "--porcelain", "--", file.name],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
