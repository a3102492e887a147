"""Bronze rows -> silver's and quarantine's rows: the hot path's pure frames.

``silver_frame`` is what the silver query streams; ``silver_out`` and
``quarantine_out`` shape each of its micro-batches for the two tables
(``processor.pipeline.write_silver_batch`` writes them).
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from processor import transforms


def silver_frame(bronze: DataFrame, devices: DataFrame, watermark: str) -> DataFrame:
    """Bronze rows -> parsed, deduplicated, enriched rows, each with a ``reason``.

    One pass over the source: every record is parsed once and checked against the
    device dimension's ids; valid events are deduplicated within the watermark and
    joined with the dimension, and invalid ones go through the same steps under keys
    of their own, unchanged, so the writer can quarantine them
    (``transforms.dedup_keys``). Valid rows drop their raw payload before the dedup's
    shuffle: it would more than double the bytes shuffled, for nothing.
    """
    checked = transforms.flag_unknown_devices(transforms.parse_events(bronze), devices)
    keyed = transforms.payloads_of_invalid(transforms.dedup_keys(checked))
    deduped = transforms.deduplicate(keyed, watermark, key=transforms.DEDUP_KEY)
    return transforms.enrich(deduped, devices).drop(transforms.DEDUP_KEY)


def silver_out(batch: DataFrame) -> DataFrame:
    """A batch of ``silver_frame``'s valid rows as written to silver, audit columns stamped.

    The times are stamped here, on the cached batch, not in the streaming plan (see
    ``transforms.to_bronze``).
    """
    return transforms.with_audit(transforms.silver_rows(batch))


def quarantine_out(batch: DataFrame) -> DataFrame:
    """A batch of ``silver_frame``'s invalid rows as written to quarantine."""
    return transforms.stamp_ingest(transforms.invalid_events(batch))
