"""Framework chatter goes to Python logging, not to the worker's console.

XGBoost's communicator prints ``Task ...:rank-1 got rank 1`` for every rank
of every fit, and LightGBM's network setup logs ``Connecting to rank 1
failed, waiting ...`` whatever ``verbose`` says. Inside a rank, both go to the
logger ``airflowless.train.frameworks``: their informational lines at DEBUG, XGBoost's
warnings at WARNING. To see the chatter, lower that logger's level in the
workers and forward it to the driver::

    client.run(lambda: logging.getLogger("airflowless.train.frameworks").setLevel(logging.DEBUG))
    client.forward_logging("airflowless.train.frameworks", level=logging.DEBUG)

Both frameworks keep their log callback per thread: a rank installs ours in
its own thread (``lightgbm.register_logger`` is process-wide, so LightGBM
lines logged by Python code in other threads of the worker go there too).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["route_lightgbm_logs", "route_xgboost_logs", "logger"]

logger = logging.getLogger("airflowless.train.frameworks")

_lock = threading.Lock()
_xgboost_callback: Any = None  # kept alive: the native library holds a pointer to it
_lightgbm_routed = False


def _xgboost_message(message: bytes) -> None:
    text = message.decode("utf-8", errors="replace").rstrip()
    if "WARNING:" in text:
        logger.warning("xgboost: %s", text)
    else:
        logger.debug("xgboost: %s", text)


def route_xgboost_logs() -> None:
    """Send XGBoost's native log lines from this thread to ``logger`` (instead of ``print``).

    XGBoost keeps its log callback per thread, and its Python package sets it
    only in the thread that imported it: each rank sets it for its own thread
    (where the communicator prints ``Task ... got rank ...``).
    """
    global _xgboost_callback
    import ctypes

    from xgboost import core  # XGBRegisterLogCallback has no public Python wrapper

    with _lock:
        if _xgboost_callback is None:
            _xgboost_callback = ctypes.CFUNCTYPE(None, ctypes.c_char_p)(_xgboost_message)
    if core._LIB.XGBRegisterLogCallback(_xgboost_callback) != 0:
        logger.debug("xgboost: could not register a log callback in this thread")


class _LightGBMLogger:
    """What ``lightgbm.register_logger`` calls: its native lines (``info``) at DEBUG."""

    def info(self, message: str) -> None:
        logger.debug("lightgbm: %s", message.rstrip())

    def warning(self, message: str) -> None:
        logger.warning("lightgbm: %s", message.rstrip())


def route_lightgbm_logs() -> None:
    """Send LightGBM's log lines from this thread to ``logger`` (instead of ``printf``).

    LightGBM's native log callback (and log level) are thread-local: its Python
    package sets the callback only in the thread that imported it, and a rank
    runs in another thread, so each rank sets it again for its own thread.
    Threads that LightGBM starts itself (the listener of its network setup,
    which logs ``Listening...``) print to the console whatever is done here.
    """
    global _lightgbm_routed
    import lightgbm
    from lightgbm import basic  # LGBM_RegisterLogCallback has no public Python wrapper

    with _lock:
        if not _lightgbm_routed:
            lightgbm.register_logger(_LightGBMLogger())
            _lightgbm_routed = True
    if basic._LIB.LGBM_RegisterLogCallback(basic._LIB.callback) != 0:
        logger.debug("lightgbm: could not register its log callback in this thread")
