"""Open a Delta table with delta-rs (no JVM): the one opener of every service.

The processor's MERGEs, small appends, overwrites and small reads, the dashboard's
reads and the load test's checks all load tables through ``open_delta_table``, with the lake's
``LakeSettings.storage_options`` (S3's endpoint and keys; none for a local folder).
"""

from __future__ import annotations

from collections.abc import Mapping

from deltalake import DeltaTable


def open_delta_table(uri: str, storage_options: Mapping[str, str] | None = None) -> DeltaTable:
    """The Delta table at ``uri``, at its newest version.

    Args:
        uri: The table's location (``LakeSettings.table``).
        storage_options: How to reach it (``LakeSettings.storage_options``); empty or
            None for a local folder.

    Raises:
        deltalake.exceptions.TableNotFoundError: There is no Delta table at ``uri``.
    """
    return DeltaTable(uri, storage_options=dict(storage_options) if storage_options else None)
