"""Pipelines as Dask graphs: stages, pipelines, runs, the cache, resume."""

from .graph import Graph, Node, StageRef
from .loader import load_pipeline
from .pipeline import Pipeline, pipeline
from .result import RunResult
from .stage import Stage, StageOptions, stage

__all__ = ["stage", "pipeline", "Stage", "StageOptions", "Pipeline", "RunResult", "Graph", "Node",
           "StageRef", "load_pipeline"]
