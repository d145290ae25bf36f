"""The GPU suite: runs where PyTorch sees a CUDA device, skips with the reason everywhere else.

It is run on a lent GPU machine by ``tests/gpu/run_on_device.sh`` (one call,
a few minutes; tests/README.md says how to build the wheel folder it needs).
Each test asserts that the work really ran on ``cuda``, not only that it
finished.
"""

from __future__ import annotations

import importlib.util

import pytest


def _why_not() -> str:
    if importlib.util.find_spec("torch") is None:
        return "the GPU suite needs PyTorch with CUDA (pip install torch on a GPU machine)"
    import torch

    if not torch.cuda.is_available():
        return f"no CUDA device: torch {torch.__version__} sees none (the GPU suite runs on a GPU machine)"
    return ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    for item in items:
        if "tests/gpu/" not in item.nodeid and not item.nodeid.startswith("gpu/"):
            continue
        item.add_marker(pytest.mark.gpu)
        if reason is None:
            reason = _why_not()
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))
