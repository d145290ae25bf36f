"""Which rank failures are a framework's rank network failing: a fit gets one more attempt for those.

XGBoost's, LightGBM's and torch.distributed's ranks talk over sockets of their
own, and XGBoost's and LightGBM's listen on every address (docs/security.md).
A stray connection to a rank's listener, a peer reset or a tracker that timed
out fails the fit with the framework's error although nothing is wrong with the
training. Such a failure is recognised by the framework's error type *and* a
network word in its message (the lines right after it, where XGBoost lists the
causes; never the traceback after them), so a real bug in a training loop is
never retried by this rule.

>>> network_failure("rank 0 failed: XGBoostError: [10:02:11] result.cc:83:\\n- [socket.h:348]: Connection refused")
'XGBoostError: [10:02:11] result.cc:83: (socket.h:348]: Connection refused)'
>>> network_failure("rank 1 failed: ValueError: the connection string is malformed") is None
True
>>> network_failure("rank 0 failed: XGBoostError: label must be in [0, 1]\\nTraceback (most recent call last):\\n"
...                 '  File "loop.py", line 3, in network_loop') is None
True
"""

from __future__ import annotations

import re

__all__ = ["network_failure"]

_FRAMEWORK_ERROR = re.compile(r"\b(XGBoostError|LightGBMError|DistBackendError|DistNetworkError|DistStoreError)\b.*")
_NETWORK = re.compile(r"socket|connect|recv\b|send\b|tracker|broken pipe|timed out|network|peer|proxy",
                      re.IGNORECASE)
_CAUSE_LINES = 12  # XGBoost lists a failure's causes, innermost last, on the lines after its error


def network_failure(error: str) -> str | None:
    """The framework error in ``error`` (a rank's failure) with the network cause it names, or None."""
    message = error.split("Traceback (most recent call last):", 1)[0]  # not the code's names in a traceback
    lines = message.strip().splitlines()
    for at, line in enumerate(lines):
        found = _FRAMEWORK_ERROR.search(line)
        if found is None:
            continue
        causes = [text.strip(" -[") for text in lines[at:at + _CAUSE_LINES] if _NETWORK.search(text)]
        if causes:
            return found.group(0).strip() + ("" if causes[-1] in line else f" ({causes[-1]})")
    return None
