"""polars' reads of a Delta table under any folder name (common.delta_scan)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from deltalake import DeltaTable, write_deltalake
from polars.testing import assert_frame_equal

from common.delta_scan import file_paths, scan

ROWS = pl.DataFrame(
    {
        "device_id": ["dev-1", "dev-2", "dev-3"],
        "at": [datetime(2026, 1, 1, 0, m, tzinfo=UTC) for m in range(3)],
    },
    schema={"device_id": pl.String, "at": pl.Datetime("us", "UTC")},
)


@pytest.mark.parametrize("folder", ["lake", "a lake", "100% lake"])
def test_a_table_reads_whole_under_any_folder_name(tmp_path: Path, folder: str) -> None:
    path = tmp_path / folder / "t"
    write_deltalake(str(path), ROWS.head(2).to_arrow())
    write_deltalake(str(path), ROWS.tail(1).to_arrow(), mode="append")
    table = DeltaTable(str(path))

    paths = file_paths(table)
    assert len(paths) == 2 and all(Path(p).is_file() for p in paths)
    assert {Path(p).parent for p in paths} == {path}
    assert_frame_equal(scan(table).sort("device_id").collect(), ROWS)
