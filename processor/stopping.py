"""How the processor's queries stop: at once, mid-batch if need be, quietly."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from common.cli import CliError, console, first_line, full_trace_hint
from processor.connect_server import check_connect_server, close_channel
from processor.driver_jvm import driver_jvm_gone, stop_session, went_away
from processor.session import is_remote

log = logging.getLogger("iot_pulse.processor")


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
# How long ``abandon`` waits for a Spark Connect server to answer.
ABANDON_CHECK_S = 5.0


def is_stopping(query_id: str) -> bool:
    """Whether ``stop_queries`` is stopping the query with this id."""
    return query_id in _STOPPING


def interrupted(what: str) -> BatchInterruptedError:
    """The error a batch of a stopping query fails with, so that Spark stops it quietly."""
    return BatchInterruptedError(_INTERRUPTED.format(what=what, reason="the processor is stopping"))


def stop_queries(spark: SparkSession, queries: Sequence[StreamingQuery]) -> bool:
    """Stop queries at once, mid-batch if need be; a stopped batch runs again at the next start.

    ``StreamingQuery.stop()`` cancels the query's running jobs and interrupts its
    thread, but its foreachBatch function goes on and starts new jobs, which run to
    the end (minutes, on a backlog). So on a classic session, once each query is
    marked stopped, its job group's jobs are cancelled again until its thread ends;
    and a batch that fails meanwhile is reported to Spark as interrupted, in few words
    (see ``_INTERRUPTED``). Through Spark Connect the server stops the query's work.

    Returns:
        Whether Spark was there to the end. A signal sent to every process of the run
        (systemd, ``timeout``) stops the driver's JVM too, by its own shutdown: the
        queries are gone with it, and what failed on the way is in the log. Any other
        failure to stop a query is said in one line, its trace in the log.
    """
    lost: list[BaseException] = []

    def stop(query: StreamingQuery) -> None:
        try:
            query.stop()
        except Exception as exc:  # noqa: BLE001 - said once every query has stopped
            lost.append(exc)

    try:
        ids, names = [q.id for q in queries], [q.name for q in queries]
    except Exception as exc:
        if not went_away(exc, "before its queries were stopped"):
            raise
        return False
    _STOPPING.update(ids)
    try:
        stoppers = [
            threading.Thread(target=stop, args=(q,), name=f"stop-{name}")
            for q, name in zip(queries, names, strict=True)
        ]
        for t in stoppers:
            t.start()
        context = None if is_remote(spark) else spark.sparkContext
        while any(t.is_alive() for t in stoppers):
            try:
                if context is not None:
                    for q in queries:  # stop() marks a query inactive first thing
                        if not q.isActive:
                            context.cancelJobGroup(q.runId)
            except Exception as exc:  # noqa: BLE001 - as in stop(); nothing is cancelled after
                lost.append(exc)
                context = None
            time.sleep(CANCEL_EVERY_S)
        for t in stoppers:
            t.join()
    finally:
        _STOPPING.difference_update(ids)
    gone = bool(lost) and driver_jvm_gone()
    for error in lost:
        if gone:
            log.info("Spark went away while its queries stopped", exc_info=error)
        else:
            log.error("a query did not stop cleanly", exc_info=error)
            console.warning(
                "warning: a query did not stop cleanly: %s (%s)",
                first_line(error),
                full_trace_hint(),
            )
    return not gone


def abandon(
    spark: SparkSession,
    remote: str,
    listener: StreamingQueryListener | None = None,
    *,
    hurry: bool = False,
) -> bool:
    """After a failure: stop the session's queries, remove ``listener``, stop the session.

    Through Spark Connect the server runs a session's queries until they stop or the
    session ends, and a listener's event thread keeps this process alive until it is
    removed: a run that failed half started would otherwise not end. Each step's own
    failure goes to the log only, so that the first error is the one said.

    Args:
        spark: The session.
        remote: The Spark Connect server's URL; empty for a classic session. A server
            that does not answer is left alone: its queries went with it, and every
            call would wait for PySpark's retries (minutes).
        listener: The run's listener, if it added one.
        hurry: A second Ctrl-C: skip stopping the queries one by one (the session's
            end stops them, and a classic session's JVM ends with this process).

    Returns:
        False when the Spark Connect server did not answer, else True.
    """
    if remote:
        try:
            check_connect_server(remote, ABANDON_CHECK_S)
        except CliError as exc:
            log.info("after a failure, Spark Connect is gone too: %s", exc)
            try:
                close_channel(spark)
            except Exception:  # noqa: BLE001 - as the steps below
                log.info("after a failure, could not close the channel", exc_info=True)
            return False
    steps: list[tuple[str, Callable[[], object]]] = []
    if not hurry:
        steps.append(("stop its queries", lambda: stop_queries(spark, spark.streams.active)))
    if listener is not None:
        steps.append(("remove its listener", lambda: spark.streams.removeListener(listener)))
    steps.append(("stop the session", lambda: stop_session(spark)))
    for what, step in steps:
        try:
            step()
        except Exception:  # noqa: BLE001 - the failure that led here is the one to say
            log.info("after a failure, could not %s", what, exc_info=True)
    return True
