"""The device dimension as silver joins it: cached in memory, refreshed when the table changes.

Read as a plain Delta table, the dimension costs every one of silver's micro-batches a
snapshot update and a Spark job that lists the table's files, while the batch is
planned: at 200 events/s, planning took 336 ms of each 1.7 s batch, and caching the
table took the processor from 0.91 to 0.73 cores (``docs/processor-costs.md``).

Cached, the table's scan is replaced by the in-memory copy in each micro-batch's plan
(Spark's cache manager matches the plan). A thread checks the table's version every
``POLL_INTERVAL_S`` (delta-rs reads the log: under a millisecond of CPU) and, when it
has changed, has Spark read the table again (``Catalog.refreshByPath``). A rewritten
dimension (``python -m processor devices``, or any writer) so reaches silver's joins
about a second after its commit, without a restart.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from common.delta_table import open_delta_table
from processor import sources

log = logging.getLogger("iot_pulse.processor")

# How often the table's version is checked: a rewrite reaches silver about this late.
POLL_INTERVAL_S = 1.0

# The newest copy of each table: a copy is one cache entry per table (Spark matches the
# plan), so a query that ends drops it only if no query started after it took it over.
_newest: dict[str, CachedDimension] = {}
_newest_lock = threading.Lock()


class CachedDimension:
    """The device dimension's Delta table, cached, and the version the copy was read at.

    Args:
        spark: The session (the cache is its Spark application's).
        path: The dimension's table (``Tables.devices``).
        storage_options: How delta-rs reaches the lake (``LakeSettings.storage_options``).
    """

    def __init__(self, spark: SparkSession, path: str, storage_options: dict[str, str]) -> None:
        self._spark = spark
        self._path = path
        self._table = open_delta_table(path, storage_options)
        # Read before the copy: a commit between the two is seen as a change, not missed.
        self.version = self._table.version()
        self.frame: DataFrame = sources.delta_table(spark, path).cache()
        # A copy an earlier query of this session left would be reused as it was.
        spark.catalog.refreshByPath(path)
        with _newest_lock:
            _newest[path] = self

    def refresh_if_changed(self) -> bool:
        """Read the table again if its version changed since the copy was read.

        Returns:
            Whether it had changed.
        """
        self._table.update_incremental()
        version = self._table.version()
        if version == self.version:
            return False
        self.version = version
        self._spark.catalog.refreshByPath(self._path)
        log.info("device dimension: version %d cached (%s)", version, self._path)
        return True

    def follow(
        self, query: StreamingQuery, interval_s: float = POLL_INTERVAL_S
    ) -> threading.Thread:
        """Keep the copy current while ``query`` runs, then drop it.

        A failed check (the lake unreachable for a moment) is logged and tried again at
        the next interval; the joins keep the copy they have.

        Returns:
            The (daemon) thread doing it.
        """

        def run() -> None:
            while True:
                time.sleep(interval_s)
                try:
                    if not query.isActive:
                        break
                except Exception:  # noqa: BLE001 - the session has stopped: nothing to keep
                    return
                try:
                    self.refresh_if_changed()
                except Exception:  # noqa: BLE001 - the stream must outlive a lake hiccup
                    log.warning("device dimension: version check failed", exc_info=True)
            self.release()

        thread = threading.Thread(target=run, name="device-dimension", daemon=True)
        thread.start()
        return thread

    def release(self) -> None:
        """Drop the copy, unless a newer ``CachedDimension`` of the table has taken it over."""
        with _newest_lock:
            if _newest.get(self._path) is not self:
                return
            del _newest[self._path]
        with contextlib.suppress(Exception):  # the session may be stopping too
            self.frame.unpersist()
