"""Bronze rows -> silver's and quarantine's rows: the hot path's pure frames.

``silver_frame`` is the whole way from bronze rows to silver's rows. The silver query
streams its first part, ``checked_rows`` (parsing, the device check, the dedup), and
joins each micro-batch with the device dimension, ``enriched_rows``: a batch joins
the dimension's rows of its own devices only, so a fleet of a million devices costs a
batch a scan of the cached dimension, not a broadcast of its every column. (The
stream's device check still broadcasts the dimension's ids.) A dimension rewritten
while a batch runs reaches the check and the join at most one refresh apart: a row
whose device the new dimension dropped is quarantined as ``unknown_device`` either
way. ``silver_out`` and
``quarantine_out`` shape each micro-batch for the two tables
(``processor.pipeline.write_silver_batch`` writes them).
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from processor import transforms


def silver_frame(bronze: DataFrame, devices: DataFrame, watermark: str) -> DataFrame:
    """Bronze rows -> parsed, deduplicated, enriched rows, each with a ``reason``.

    ``enriched_rows`` of ``checked_rows``: what the silver query computes, stream and
    micro-batch together.
    """
    return enriched_rows(checked_rows(bronze, devices, watermark), devices)


def checked_rows(bronze: DataFrame, devices: DataFrame, watermark: str) -> DataFrame:
    """Bronze rows -> parsed, deduplicated rows, each with a ``reason``: the streamed part.

    One pass over the source: every record is parsed once and checked against the
    device dimension's ids; valid events are deduplicated within the watermark, and
    invalid ones go through the same steps under keys of their own, unchanged, so the
    writer can quarantine them (``transforms.dedup_keys``). Valid rows drop their raw
    payload before the dedup's shuffle: it would more than double the bytes shuffled,
    for nothing.
    """
    checked = transforms.flag_unknown_devices(transforms.parse_events(bronze), devices)
    keyed = transforms.payloads_of_invalid(transforms.dedup_keys(checked))
    deduped = transforms.deduplicate(keyed, watermark, key=transforms.DEDUP_KEY)
    return deduped.drop(transforms.DEDUP_KEY)


def enriched_rows(rows: DataFrame, devices: DataFrame) -> DataFrame:
    """``checked_rows``' rows joined with the dimension's rows of the devices they name.

    The rows' distinct device ids are broadcast to pick those devices' rows out of the
    dimension, and only those are broadcast to the join: a micro-batch's few thousand
    devices, not the whole fleet's (``transforms.devices_of``).
    """
    return transforms.enrich(rows, transforms.devices_of(rows, devices))


def silver_out(batch: DataFrame) -> DataFrame:
    """A batch of ``silver_frame``'s valid rows as written to silver, audit columns stamped.

    The times are stamped here, on the cached batch, not in the streaming plan (see
    ``transforms.to_bronze``).
    """
    return transforms.with_audit(transforms.silver_rows(batch))


def quarantine_out(batch: DataFrame) -> DataFrame:
    """A batch of ``silver_frame``'s invalid rows as written to quarantine."""
    return transforms.stamp_ingest(transforms.invalid_events(batch))
