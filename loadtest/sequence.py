"""Out-of-sequence readings per device: as the producer sent them, and as bronze holds them."""

from __future__ import annotations

from typing import Any

import polars as pl

from loadtest.buckets import Buckets
from loadtest.frames import EXAMPLES
from loadtest.truth import DELAYED_KINDS, Truth

SENT_SCHEMA = pl.Schema({"device_id": pl.String, "seq": pl.Int64, "pos": pl.Int64})
GOT_SCHEMA = pl.Schema(
    {"device_id": pl.String, "seq": pl.Int64, "partition": pl.Int64, "offset": pl.Int64}
)


def _out_of_sequence(df: pl.DataFrame, order: list[str]) -> pl.DataFrame:
    """Per device, the readings whose ``seq`` is below one before them in ``order``."""
    return (
        df.sort(["device_id", *order])
        .with_columns(
            (pl.col("seq") < pl.col("seq").cum_max().shift(1).over("device_id"))
            .fill_null(False)
            .alias("oos")
        )
        .group_by("device_id")
        .agg(pl.col("oos").sum().cast(pl.Int64).alias("n"))
    )


def check_sequence(truth: Truth, by_device: Buckets) -> dict[str, Any]:
    """Out-of-sequence readings per device: as sent (manifest) and as in bronze (offsets).

    Args:
        truth: The manifest.
        by_device: Buckets by device of the manifest's readings (``sent``: ``device_id``,
            ``seq``, ``pos``) and of bronze's first copy of each (``got``: ``device_id``
            from the manifest, ``seq``, ``partition``, ``offset``), as ``verify`` writes them.
    """
    per_device = pl.concat(
        [
            _sequence_per_device(
                by_device.read("sent", b, SENT_SCHEMA), by_device.read("got", b, GOT_SCHEMA)
            )
            for b in range(by_device.count)
        ]
    )
    bad = per_device.filter(pl.col("expected") != pl.col("actual")).sort("device_id")
    expected, actual = int(per_device["expected"].sum()), int(per_device["actual"].sum())
    devices = int(per_device["sent"].sum())
    unexpected = int((bad["actual"] - bad["expected"]).clip(lower_bound=0).sum())
    return {
        "ok": bad.is_empty(),
        "expected": expected,
        "actual": actual,
        "unexpected": unexpected,
        "injected": {k: len(truth.fault_ids(k)) for k in DELAYED_KINDS},
        "mismatched_devices": bad.drop("sent").head(EXAMPLES).to_dicts(),
        "devices": devices,
    }


def _sequence_per_device(sent: pl.DataFrame, got: pl.DataFrame) -> pl.DataFrame:
    """Per device: out-of-sequence readings as sent and as in bronze; ``sent``: 1 if it sent."""
    expected = _out_of_sequence(sent, ["pos"]).rename({"n": "expected"})
    actual = _out_of_sequence(got, ["partition", "offset"]).rename({"n": "actual"})
    return (
        expected.with_columns(pl.lit(1).alias("sent"))
        .join(actual, on="device_id", how="full", coalesce=True)
        .fill_null(0)
    )
