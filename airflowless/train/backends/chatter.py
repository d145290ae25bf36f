"""Framework chatter goes to Python logging, not to the worker's console.

XGBoost's communicator prints ``Task ...:rank-1 got rank 1`` for every rank
of every fit, and LightGBM's network setup logs ``Connecting to rank 1
failed, waiting ...`` whatever ``verbose`` says. Inside a rank, both go to the
logger ``airflowless.train.frameworks``: their informational lines at DEBUG, XGBoost's
warnings at WARNING, except its connection retries (a rank reaching a peer or the
tracker that is not listening yet, or no longer: a fit being cancelled), which
are DEBUG too: a connection that never comes fails the rank with XGBoost's error. To see the chatter, lower that logger's level in the
workers and forward it to the driver::

    client.run(lambda: logging.getLogger("airflowless.train.frameworks").setLevel(logging.DEBUG))
    client.forward_logging("airflowless.train.frameworks", level=logging.DEBUG)

Both frameworks keep their log callback per thread: a rank installs ours in
its own thread (``lightgbm.register_logger`` is process-wide, so LightGBM
lines logged by Python code in other threads of the worker go there too).
The thread LightGBM starts itself to accept its peers has no callback and
prints ``[LightGBM] [Info] Listening...`` straight to the process's stdout:
:func:`lightgbm_stdout_to_log` catches those lines while the network starts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ..._library_internals import lightgbm_log_here, xgboost_log_here

__all__ = ["lightgbm_stdout_to_log", "route_lightgbm_logs", "route_xgboost_logs", "logger"]

logger = logging.getLogger("airflowless.train.frameworks")

_lock = threading.Lock()
_xgboost_callback: Any = None  # kept alive: the native library holds a pointer to it
_lightgbm_routed = False


_RETRYING = ("Failed to connect to", "Retrying connection to")


def _xgboost_message(message: bytes) -> None:
    text = message.decode("utf-8", errors="replace").rstrip()
    if "WARNING:" in text and not any(retry in text for retry in _RETRYING):
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

    with _lock:
        if _xgboost_callback is None:
            _xgboost_callback = ctypes.CFUNCTYPE(None, ctypes.c_char_p)(_xgboost_message)
    if not xgboost_log_here(_xgboost_callback):
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

    with _lock:
        if not _lightgbm_routed:
            lightgbm.register_logger(_LightGBMLogger())
            _lightgbm_routed = True
    if not lightgbm_log_here():
        logger.debug("lightgbm: could not register its log callback in this thread")


_stdout_holders = 0
_stdout_saved: int | None = None  # the real stdout while fd 1 is our pipe
_LIGHTGBM = "[LightGBM] ["
_LIGHTGBM_LEVELS = {"Info": logging.DEBUG, "Debug": logging.DEBUG, "Warning": logging.WARNING}


@contextlib.contextmanager
def lightgbm_stdout_to_log(active: bool = True) -> Iterator[Callable[[], None]]:
    """While LightGBM's network starts, its lines on this process's stdout go to ``logger``.

    LightGBM accepts its peers in a thread of its own, whose log callback and
    level are unset (both are per thread): it prints ``[LightGBM] [Info]
    Listening...`` to file descriptor 1 whatever ``verbose`` says. While any
    rank of the process holds this, fd 1 is a pipe; a thread reads it, logs the
    ``[LightGBM]`` lines (Info at DEBUG, Warning at WARNING, anything else at
    ERROR) and writes every other byte to the real stdout, so what else the
    worker prints still shows. Yields a function that ends the hold early (call
    it once the network is up); leaving the ``with`` ends it too.
    """
    held = active and _hold_stdout()
    released = False

    def release() -> None:
        nonlocal released
        if held and not released:
            released = True
            _release_stdout()

    try:
        yield release
    finally:
        release()


def _hold_stdout() -> bool:
    global _stdout_holders, _stdout_saved
    with _lock:
        if _stdout_holders == 0:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
            try:
                saved = os.dup(1)
            except OSError:  # no stdout at all: nothing to keep clean
                return False
            read_fd, write_fd = os.pipe()
            os.dup2(write_fd, 1)
            os.close(write_fd)
            _stdout_saved = saved
            threading.Thread(target=_forward_stdout, args=(read_fd, saved), daemon=True,
                             name="airflowless-lightgbm-stdout").start()
        _stdout_holders += 1
        return True


def _release_stdout() -> None:
    global _stdout_holders, _stdout_saved
    with _lock:
        _stdout_holders -= 1
        if _stdout_holders == 0 and _stdout_saved is not None:
            with contextlib.suppress(Exception):
                sys.stdout.flush()  # what was printed meanwhile goes through the pipe, in order
            os.dup2(_stdout_saved, 1)  # the pipe's last write end closes: the reader sees its end
            _stdout_saved = None


def _forward_stdout(read_fd: int, out_fd: int) -> None:
    """Route each line from the pipe until every write end is closed, then close ``out_fd``."""
    pending = b""
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        while chunk := pipe.read(65536):
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                _route_stdout_line(line + b"\n", out_fd)
    if pending:
        _route_stdout_line(pending, out_fd)
    os.close(out_fd)


def _route_stdout_line(line: bytes, out_fd: int) -> None:
    text = line.decode("utf-8", errors="replace")
    if _LIGHTGBM not in text:
        _write_all(out_fd, line)
        return
    before, *messages = text.split(_LIGHTGBM)  # threads printing at once can share a line
    if before.strip():
        _write_all(out_fd, before.encode() + b"\n")
    for message in messages:
        tag, _, rest = message.partition("] ")
        logger.log(_LIGHTGBM_LEVELS.get(tag, logging.ERROR), "lightgbm: %s", rest.rstrip())


def _write_all(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the real stdout is gone: nothing to show it on
        while data:
            data = data[os.write(fd, data):]
