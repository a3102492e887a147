"""The device dimension as silver joins it: cached in memory, refreshed when the table changes.

Read as a plain Delta table, the dimension costs every one of silver's micro-batches a
snapshot update and a Spark job that lists the table's files, while the batch is
planned: a fifth of a small micro-batch's time, for a table that changes rarely.

Cached, the table's scan is replaced by the in-memory copy in each micro-batch's plan
(Spark's cache manager matches the plan). A thread checks the table's version every
``POLL_INTERVAL_S`` (delta-rs reads the log: under a millisecond of CPU, and one
listing of ``_delta_log`` on a cloud lake) and, when it has changed, has Spark read the
table again (``Catalog.refreshByPath``). A rewritten dimension (``python -m processor
devices``, or any writer) so reaches silver's joins at the first micro-batch after the
next check, without a restart: up to ``POLL_INTERVAL_S`` later than a plain read would.
A batch planned while the copy is read again reads the table itself (the new version),
and one planned just before reads the old copy's files: either way one version, whole.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from pyspark import InheritableThread
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from common.delta_table import open_delta_table
from processor import sources

log = logging.getLogger("iot_pulse.processor")

# How often the table's version is checked: a rewrite reaches silver up to this much later.
POLL_INTERVAL_S = 1.0

# The newest copy of each table: a copy is one cache entry per table (Spark matches the
# plan), so a query that ends drops it only if no query started after it took it over.
_newest: dict[str, CachedDimension] = {}
_newest_lock = threading.Lock()


class CachedDimension:
    """The device dimension's Delta table, cached, and the version the copy was read at.

    Args:
        spark: The session (the cache is its Spark application's).
        path: The dimension's table (``common.lake.Table.DIM_DEVICES``).
        storage_options: How delta-rs reaches the lake (``LakeSettings.storage_options``).
    """

    def __init__(self, spark: SparkSession, path: str, storage_options: dict[str, str]) -> None:
        self._spark = spark
        self._path = path
        self._table = open_delta_table(path, storage_options)
        # Read before the copy: a commit between the two is seen as a change, not missed.
        self.version = self._table.version()
        with _newest_lock:
            self.frame: DataFrame = sources.delta_table(spark, path).cache()
            # A copy an earlier query of this session left would be reused as it was.
            spark.catalog.refreshByPath(path)
            _newest[path] = self

    def refresh_if_changed(self) -> bool:
        """Read the table again if its version changed since the copy was read.

        A failed read leaves the version as it was, so the next call tries again, and
        the copy registered (Spark drops it before reading the table again).

        Returns:
            Whether it had changed.
        """
        self._table.update_incremental()
        version = self._table.version()
        if version == self.version:
            return False
        try:
            self._spark.catalog.refreshByPath(self._path)
        except Exception:
            with contextlib.suppress(Exception):
                self.frame.cache()  # a no-op if the entry is still there
            raise
        self.version = version
        log.info("device dimension: version %d cached (%s)", version, self._path)
        return True

    def follow(
        self, query: StreamingQuery, interval_s: float = POLL_INTERVAL_S
    ) -> threading.Thread:
        """Keep the copy current while ``query`` runs, then drop it (``release``).

        A failed check (the lake unreachable for a moment) is logged once, with its
        trace, and tried again every interval until it succeeds; the joins keep the copy
        they have meanwhile. The thread inherits the caller's Spark job properties (its
        scheduler pool), so call this where the query was started.

        Args:
            query: The query that joins the copy.
            interval_s: Seconds between two checks of the table's version.

        Returns:
            The (daemon) thread doing it.
        """

        def run() -> None:
            failing = False
            while True:
                time.sleep(interval_s)
                try:
                    active = query.isActive
                except Exception:
                    log.info("device dimension: the session stopped; no longer followed")
                    return
                if not active:
                    break
                try:
                    self.refresh_if_changed()
                except Exception:
                    if not failing:
                        log.warning(
                            "device dimension: version check failed; silver keeps its copy "
                            "and the check runs again every %g s",
                            interval_s,
                            exc_info=True,
                        )
                    failing = True
                    continue
                if failing:
                    log.info("device dimension: version checks work again")
                failing = False
            self.release()

        thread = InheritableThread(
            target=run, name="device-dimension", daemon=True, session=self._spark
        )
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
