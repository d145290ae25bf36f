"""W3's one-process reference with one torch thread: the honest reference on a loaded machine.

Two intra-op threads on two cores shared with other processes wait on each other
at every operator (a step took 228 ms instead of 12 ms with one thread under load
here), so the 2-thread figure measures the neighbours as much as torch.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from w3_single import run as run_with_threads  # noqa: E402


def setup():
    pass


def run():
    return run_with_threads(threads=1)
