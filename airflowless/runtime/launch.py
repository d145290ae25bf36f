"""``python -P -m airflowless.runtime.launch MODULE ARG...``: run MODULE as ``python -m`` would, safely.

``python -m MODULE`` puts the folder it starts in first on ``sys.path``. Started
from the folder that holds a checkout named ``airflowless``, that checkout (a
folder without ``__init__.py``) became the ``airflowless`` package, and its
``data/`` folder stood in for ``airflowless.data``: every worker died with
``No module named 'airflowless.data.consume'``. A ``selectors.py`` of the
user's in that folder would shadow the standard library the same way.

So every process airflowless starts runs under ``python -P`` (Python 3.11:
nothing is put before the installed packages). The embedded workers
(:mod:`airflowless.runtime.worker_main`) then add the driver's path after their
own; the background cluster's scheduler and workers start through this module,
which adds the folder they start in *after* the installed packages, so that a
``dask worker`` still imports the user's modules from there, as it always did,
without one of them shadowing a standard or installed module.

>>> command("distributed.cli.dask_worker", "tcp://127.0.0.1:8786")[1:4]
['-P', '-m', 'airflowless.runtime.launch']
"""

from __future__ import annotations

import os
import runpy
import sys

__all__ = ["command"]


def command(module: str, *args: str) -> list[str]:
    """The command line that runs ``python -m module args...`` in this interpreter, safely."""
    return [sys.executable, "-P", "-m", __name__, module, *args]


def main(argv: list[str]) -> None:
    """Run ``argv[1]`` as ``__main__`` with ``argv[2:]``, the start folder last on ``sys.path``."""
    if len(argv) < 2:
        raise SystemExit("usage: python -P -m airflowless.runtime.launch MODULE [ARG...]")
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    sys.argv = [argv[1], *argv[2:]]  # runpy replaces argv[0] with the module's file
    runpy.run_module(argv[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv)
