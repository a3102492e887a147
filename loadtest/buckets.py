"""Verify's inputs split by event id into buckets on disk, so each bucket fits in memory.

A load test of an hour holds a hundred million readings in the manifest and in each
table: more than a machine holds at once. Every check that matches readings across the
manifest and the tables (loss, duplicates, late drops, the quarantine of valid
readings, latency) joins rows of one ``event_id``; so each input is streamed once into
Parquet files by ``hash(event_id) % count`` (polars' streaming engine), and the checks
run on one bucket at a time. The sequence check, which follows each device's readings in
order, gets buckets of its own by ``device_id``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import polars as pl

ROWS_PER_BUCKET = 500_000  # a bucket's readings: its frames and joins take under 1 GB
# Buckets written at once: each open file buffers a row group, so a pass over an input
# writes at most this many (an input split into more is read once per this many).
OPEN_BUCKETS = 32
ROW_GROUP_ROWS = 65_536
_SEED = 20_260_301  # any fixed seed: the bucket of an id must be the same in every input


def bucket_count(rows: int, rows_per_bucket: int = ROWS_PER_BUCKET) -> int:
    """How many buckets ``rows`` readings need (at least one)."""
    return max(1, math.ceil(rows / rows_per_bucket))


def bucket_of(column: str, count: int) -> pl.Expr:
    """The bucket of each row: a hash of ``column`` modulo ``count``."""
    return (pl.col(column).hash(_SEED) % count).cast(pl.Int32).alias("bucket")


@dataclass(frozen=True)
class Buckets:
    """Inputs split into ``count`` buckets under ``folder`` (one sub-folder per input)."""

    folder: Path
    count: int

    def write(
        self,
        name: str,
        frame: pl.LazyFrame,
        key: str = "event_id",
        open_at_once: int = OPEN_BUCKETS,
    ) -> None:
        """Stream ``frame`` into the buckets of input ``name``, by ``key``.

        Args:
            name: The input's name (its sub-folder).
            frame: The input.
            key: The column whose hash chooses the bucket.
            open_at_once: Buckets written per pass over ``frame`` (what bounds memory).
        """
        keyed = frame.with_columns(bucket_of(key, self.count))
        for first in range(0, self.count, open_at_once):
            last = min(self.count, first + open_at_once)
            part = (
                keyed
                if (first, last) == (0, self.count)
                else keyed.filter(pl.col("bucket").is_between(first, last, closed="left"))
            )
            part.sink_parquet(
                pl.PartitionBy(self.folder / name, key="bucket", include_key=False),
                mkdir=True,
                row_group_size=ROW_GROUP_ROWS,
            )

    def read(self, name: str, bucket: int, schema: pl.Schema) -> pl.DataFrame:
        """Bucket ``bucket`` of input ``name``, in memory (empty, of ``schema``, if none)."""
        files = self.folder / name / f"bucket={bucket}"
        if not files.is_dir():
            return pl.DataFrame(schema=schema)
        return pl.read_parquet(files / "*.parquet", schema=schema)
