"""How the processor's queries stop: at once, mid-batch if need be, quietly."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from processor.session import is_remote


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
# How often a stopping query's new jobs are cancelled, until its thread has ended.
CANCEL_EVERY_S = 0.1


def is_stopping(query_id: str) -> bool:
    """Whether ``stop_queries`` is stopping the query with this id."""
    return query_id in _STOPPING


def interrupted(what: str) -> BatchInterruptedError:
    """The error a batch of a stopping query fails with, so that Spark stops it quietly."""
    return BatchInterruptedError(_INTERRUPTED.format(what=what, reason="the processor is stopping"))


def stop_queries(spark: SparkSession, queries: Sequence[StreamingQuery]) -> None:
    """Stop queries at once, mid-batch if need be; a stopped batch runs again at the next start.

    ``StreamingQuery.stop()`` cancels the query's running jobs and interrupts its
    thread, but its foreachBatch function goes on and starts new jobs, which run to
    the end (minutes, on a backlog). So on a classic session, once each query is
    marked stopped, its job group's jobs are cancelled again until its thread ends;
    and a batch that fails meanwhile is reported to Spark as interrupted, in few words
    (see ``_INTERRUPTED``). Through Spark Connect the server stops the query's work.
    """
    _STOPPING.update(q.id for q in queries)
    try:
        stoppers = [threading.Thread(target=q.stop, name=f"stop-{q.name}") for q in queries]
        for t in stoppers:
            t.start()
        context = None if is_remote(spark) else spark.sparkContext
        while any(t.is_alive() for t in stoppers):
            if context is not None:
                for q in queries:  # stop() marks a query inactive first thing
                    if not q.isActive:
                        context.cancelJobGroup(q.runId)
            time.sleep(CANCEL_EVERY_S)
        for t in stoppers:
            t.join()
    finally:
        _STOPPING.difference_update(q.id for q in queries)
