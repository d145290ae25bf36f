"""The cluster runtime: start or join a Dask cluster, and the worker plugin."""

from .cluster import cluster_client, get_client, init, is_initialized, shutdown

__all__ = ["init", "shutdown", "get_client", "is_initialized", "cluster_client"]
