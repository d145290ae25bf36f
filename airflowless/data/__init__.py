"""airflowless.data: lazy distributed datasets on Dask, with an optimizer and a streaming executor.

>>> from airflowless import data
>>> ds = data.read_parquet("data/taxi-s").filter(expr=data.col("trip_distance") > 0)  # doctest: +SKIP
"""


from .aggregate import AggregateFn, Count, Max, Mean, Min, Std, Sum
from .compute import ActorPoolStrategy, TaskPoolStrategy
from .context import DataContext
from .dataset import Dataset
from .execution.executor import StallError
from .expressions import col, lit
from .grouped import GroupedData
from .read_api import (
    from_arrow,
    from_dask,
    from_items,
    from_numpy,
    from_pandas,
    range,
    read_binary_files,
    read_csv,
    read_datasource,
    read_json,
    read_parquet,
    read_sql,
    read_text,
)

__all__ = ["Dataset", "GroupedData", "DataContext", "StallError", "col", "lit", "ActorPoolStrategy", "TaskPoolStrategy",
           "read_parquet", "read_datasource",
           "read_csv", "read_json", "read_sql", "read_text", "read_binary_files",
           "from_pandas", "from_arrow", "from_numpy", "from_items", "from_dask", "range", "AggregateFn",
           "Count", "Sum", "Min", "Max", "Mean", "Std"]
