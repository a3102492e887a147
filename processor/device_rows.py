"""The device dimension's rows, computed by Spark's tasks from the fleet's pools.

A device's profile is a pure function of the fleet's seed and its index
(``common.fleet``), so each task computes the rows of its range of device indices
from the fleet's small pools (sites, building names): nothing the size of the fleet
is made by the driver or shipped to the executors. This module is what the tasks'
Python workers import: numpy, pyarrow and ``common.fleet`` only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from common.fleet import Coded, Fleet, Site


def arrow_column(column: Coded | np.ndarray | list[str]) -> pa.Array[Any]:
    """A ``Fleet.columns`` column as Arrow: texts decoded from their pool in Arrow, NaN as null."""
    if isinstance(column, Coded):
        return pa.DictionaryArray.from_arrays(column.codes, column.texts).dictionary_decode()
    return pa.array(column, from_pandas=True)


def profile_batches(
    seed: int,
    size: int,
    sites: tuple[Site, ...],
    buildings: tuple[str, ...],
    schema: pa.Schema,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A ``mapInArrow`` function: batches of device indices (``id``) -> their dimension rows.

    Args:
        seed: The fleet's seed.
        size: Devices in the fleet.
        sites: The fleet's sites (``common.fleet.fleet_pools``).
        buildings: The fleet's building names (``common.fleet.fleet_pools``).
        schema: The rows' Arrow schema, the dimension's columns in ``Fleet.columns``' order.
    """

    def rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            fleet = Fleet(seed, size, sites, buildings, batch.column(0).to_numpy())
            columns = [arrow_column(c) for c in fleet.columns().values()]
            yield pa.RecordBatch.from_arrays(columns, schema=schema)

    return rows
