"""How the processor's queries stop: at once, mid-batch if need be, quietly."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery


class BatchInterruptedError(RuntimeError):
    """A micro-batch failed because its query is being stopped on purpose."""


# Spark takes a foreachBatch function's error for an interruption by stop() (and stops
# the query quietly) when the error's text matches StreamExecution.PROXY_ERROR, a
# regex that recurses once per character: on a real error's text, Java traces and
# all, it overflows the stack, and the JVM prints a StackOverflowError.
_INTERRUPTED = (
    "py4j.protocol.Py4JJavaError: An error occurred while calling {what}: "
    "java.lang.InterruptedException ({reason})"
)
# Ids of the queries the processor is stopping (stop_queries).
_STOPPING: set[str] = set()


def is_stopping(query_id: str) -> bool:
    """Whether ``stop_queries`` is stopping the query with this id."""
    return query_id in _STOPPING


def interrupted(what: str) -> BatchInterruptedError:
    """The error a batch of a stopping query fails with, so that Spark stops it quietly."""
    return BatchInterruptedError(_INTERRUPTED.format(what=what, reason="the processor is stopping"))


def stop_queries(spark: SparkSession, queries: Sequence[StreamingQuery]) -> None:
    """Stop queries at once, mid-batch if need be; a stopped batch runs again at the next start.

    ``StreamingQuery.stop()`` cancels the query's running jobs and interrupts its
    thread, but its foreachBatch function goes on and starts new jobs, which run
    to the end (minutes, on a backlog). So once each query is marked stopped, its
    job group's future jobs are cancelled too; and a batch that fails meanwhile is
    reported to Spark as interrupted, in few words (see ``_INTERRUPTED``).
    """
    _STOPPING.update(q.id for q in queries)
    try:
        stoppers = [threading.Thread(target=q.stop, name=f"stop-{q.name}") for q in queries]
        for t in stoppers:
            t.start()
        jsc = spark.sparkContext._jsc.sc()  # type: ignore[union-attr]
        for q in queries:
            while q.isActive:  # stop() marks it stopped first thing
                time.sleep(0.05)
            jsc.cancelJobGroupAndFutureJobs(q.runId, "the processor is stopping")
        for t in stoppers:
            t.join()
    finally:
        _STOPPING.difference_update(q.id for q in queries)
