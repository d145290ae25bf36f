"""The one door to cloudpickle's private API.

The same rule as :mod:`airflowless._dask_internals`: each private use of
cloudpickle is one small named function here, with a docstring that says what
it touches and why, and a test in ``tests/test_cloudpickle_internals.py`` so
that a cloudpickle release that breaks it fails there, by name.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

_PLACEHOLDER = "<dynamic-code>"  # what cloudpickle >= 3.1.3 writes in place of a code object's file name


def keep_code_filenames() -> None:
    """Code pickled by value keeps its file name, so tracebacks from workers name the user's file.

    Touches ``cloudpickle.Pickler._dispatch_table`` (private), the table of
    reducers every cloudpickle pickler consults. From 3.1.3 on, cloudpickle
    writes ``"<dynamic-code>"`` as the file name of every code object it pickles
    by value (to make payloads the same wherever a function was defined). A
    stage, trial or replica defined in a pipeline module, a script or a notebook
    is pickled by value, so its traceback on a worker would say ``File
    "<dynamic-code>", line 10`` and show no source line. This wraps the code
    reducer once so the placeholder becomes the code's own ``co_filename``
    again; with an older cloudpickle, which keeps the name, it changes nothing.
    Idempotent; called by :func:`airflowless.init` and on every worker by the
    airflowless worker plugin.
    """
    from cloudpickle import Pickler

    table: dict[type, Callable[[Any], Any]] = Pickler._dispatch_table
    reduce = table.get(types.CodeType)
    if reduce is None or getattr(reduce, "keeps_code_filenames", False):
        return

    def reduce_keeping_filename(code: types.CodeType) -> Any:
        rebuild, args = reduce(code)
        return rebuild, tuple(
            code.co_filename if isinstance(arg, str) and arg == _PLACEHOLDER else arg for arg in args
        )

    reduce_keeping_filename.keeps_code_filenames = True  # type: ignore[attr-defined]
    table[types.CodeType] = reduce_keeping_filename
