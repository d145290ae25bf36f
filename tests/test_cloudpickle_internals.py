"""One test per function of airflowless._cloudpickle_internals, on a real cluster.

Each function there touches a private part of cloudpickle; a cloudpickle
release that breaks one fails here, by the function's name.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from airflowless import _cloudpickle_internals as internals

USER_MODULE = '''\
def outer(n):
    def inner():
        raise RuntimeError(f"boom {n}")  # the line a traceback must show
    return inner()
'''


def _user_module(tmp_path: Path) -> Any:
    """A module of the user's, pickled by value the way the DAG runner ships pipeline modules."""
    path = tmp_path / "user_code.py"
    path.write_text(USER_MODULE)
    spec = importlib.util.spec_from_file_location("airflowless_test_user_code", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)
    return module


@pytest.fixture
def user_module(tmp_path: Path) -> Any:
    module = _user_module(tmp_path)
    yield module
    cloudpickle.unregister_pickle_by_value(module)
    sys.modules.pop(module.__name__, None)


def test_keep_code_filenames(user_module: Any, cluster_client: Any) -> None:
    internals.keep_code_filenames()
    internals.keep_code_filenames()  # idempotent: one wrapper, not two
    copy = cloudpickle.loads(cloudpickle.dumps(user_module.outer))
    assert copy.__code__.co_filename == user_module.__file__
    nested = [c for c in copy.__code__.co_consts if hasattr(c, "co_filename")]
    assert nested and all(c.co_filename == user_module.__file__ for c in nested)

    # on a worker process (its plugin installed the wrapper too), the traceback names the file and line
    def failing_traceback() -> str:
        try:
            user_module.outer(3)
        except RuntimeError:
            return traceback.format_exc()
        return ""

    text = cluster_client.submit(failing_traceback, pure=False).result(timeout=60)
    assert f'File "{user_module.__file__}", line 3, in inner' in text, text
    assert 'raise RuntimeError(f"boom {n}")  # the line a traceback must show' in text, text
    assert "<dynamic-code>" not in text
