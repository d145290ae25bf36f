"""A worker shows the source line of a stage's traceback without a copy of its file (airflowless.dag.sources).

Another host has no copy of a pipeline module; here the file is deleted after
the run ships its text, and a traceback formatted on a real worker still shows
the line that raised.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

from airflowless.dag import load_pipeline

MODULE = '''\
from airflowless import pipeline, stage


@stage
def explode(n: int) -> int:
    raise ValueError(f"exploded at {n}")  # the line a traceback must show


@pipeline
def sources(n: int = 1):
    return explode(n)
'''


def test_a_worker_without_the_file_shows_the_source_line(cluster_client: Any, tmp_path: Path, home: Path) -> None:
    path = tmp_path / "pipelines" / "shipped.py"
    path.parent.mkdir()
    path.write_text(MODULE)
    pipe = load_pipeline(str(path))
    result = pipe.run(client=cluster_client, raise_on_failure=False)
    assert result.status == "failed"
    path.unlink()  # as on another host: no file to read

    explode = next(node.stage.fn for node in pipe.graph().nodes.values())

    def failing_traceback() -> str:
        import linecache

        linecache.checkcache()  # what a later traceback does first: entries of files that vanished go
        try:
            explode(2)
        except ValueError:
            return traceback.format_exc()
        return ""

    texts = [cluster_client.submit(failing_traceback, pure=False, workers=[address]).result(timeout=60)
             for address in cluster_client.scheduler_info()["workers"]]
    for text in texts:
        assert f'File "{path}", line 6, in explode' in text, text
        assert 'raise ValueError(f"exploded at {n}")  # the line a traceback must show' in text, text
    sys.modules.pop(pipe.module, None)
