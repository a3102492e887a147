"""polars' lazy reads of a Delta table, for the readers without a JVM (dashboard, verify).

polars opens a table's files where delta-rs says they are, and delta-rs gives a local
file's path percent-encoded (a space as ``%20``): under a folder with such a character
in its name, ``pl.scan_delta`` looks for files that do not exist (pola-rs/polars#20944).
"""

from __future__ import annotations

from urllib.parse import unquote

import polars as pl
from deltalake import DeltaTable


def file_paths(table: DeltaTable) -> list[str]:
    """The snapshot's data files: a local one as its path, any other as its URI."""
    return [unquote(u) if u.startswith("/") else u for u in table.file_uris()]


def scan(table: DeltaTable) -> pl.LazyFrame:
    """The snapshot, scanned lazily (nothing is read until a query collects it).

    A local table whose file paths delta-rs encodes is scanned through delta-rs's own
    dataset, which opens them; any other through polars' Delta reader.
    """
    if any(u.startswith("/") and unquote(u) != u for u in table.file_uris()):
        return pl.scan_pyarrow_dataset(table.to_pyarrow_dataset())
    return pl.scan_delta(table)
