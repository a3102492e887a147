"""Verify's buckets on disk: every row in the bucket its key hashes to, once, in any number of passes."""

from __future__ import annotations

import polars as pl
import pytest

from loadtest.buckets import Buckets, bucket_count, bucket_of

SCHEMA = pl.Schema({"event_id": pl.String, "device_id": pl.String, "x": pl.Int64})


def _rows() -> pl.DataFrame:
    return pl.DataFrame(
        {"event_id": [f"e-{i}" for i in range(2000)], "device_id": [f"d-{i % 7}" for i in range(2000)],
         "x": range(2000)},
        schema=SCHEMA,
    )  # fmt: skip


@pytest.mark.parametrize("open_at_once", [1, 3, 10, 64])
@pytest.mark.parametrize("key", ["event_id", "device_id"])
def test_each_row_lands_once_in_the_bucket_of_its_key(tmp_path, open_at_once, key):
    rows = _rows()
    buckets = Buckets(tmp_path, 10)
    buckets.write("t", rows.lazy(), key=key, open_at_once=open_at_once)
    parts = [buckets.read("t", b, SCHEMA) for b in range(10)]
    assert sorted(pl.concat(parts)["x"].to_list()) == list(range(2000))
    expected = rows.with_columns(bucket_of(key, 10))
    for b, part in enumerate(parts):
        want = expected.filter(pl.col("bucket") == b)["x"].sort().to_list()
        assert part["x"].sort().to_list() == want
    if key == "device_id":  # a device's rows are all in one bucket
        assert sum(p["device_id"].n_unique() for p in parts) == 7


def test_an_empty_bucket_reads_as_an_empty_frame_of_the_schema(tmp_path):
    buckets = Buckets(tmp_path, 50)
    buckets.write("t", _rows().head(3).lazy())
    empty = [b for b in range(50) if not (tmp_path / "t" / f"bucket={b}").exists()]
    assert len(empty) >= 47
    got = buckets.read("t", empty[0], SCHEMA)
    assert got.height == 0 and got.schema == SCHEMA


def test_bucket_count():
    assert [bucket_count(n, 500_000) for n in (0, 1, 500_000, 500_001, 100_000_000)] == [
        1,
        1,
        1,
        2,
        200,
    ]
