"""The ``airflowless`` command line: run pipelines, read the record, start a cluster."""

from .main import main

__all__ = ["main"]
