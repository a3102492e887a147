"""processor.lifecycle's wait for the end of a run, with stand-ins for the queries."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from processor.lifecycle import StopSignal, wait_for_stop


@dataclass
class _Query:
    """What ``wait_for_stop`` reads of a ``StreamingQuery``."""

    name: str
    isActive: bool = True  # noqa: N815 (StreamingQuery's own name)
    error: Exception | None = None

    def exception(self) -> Exception | None:
        return self.error


class _Child:
    def __init__(self, failure: str | None) -> None:
        self._failure = failure

    def failure(self) -> str | None:
        return self._failure


def test_a_requested_stop_is_no_failure() -> None:
    stop = StopSignal()
    stop.requested.set()
    assert wait_for_stop([_Query("silver")], stop) is None


def test_a_query_that_ends_by_itself_ends_the_wait() -> None:
    queries = [_Query("bronze"), _Query("silver", isActive=False)]
    assert wait_for_stop(queries, StopSignal()) == "query silver stopped by itself"


def test_a_failed_query_is_one_line() -> None:
    failed = _Query("alerts", isActive=False, error=RuntimeError("boom\n\tat Spark.java:1"))
    failure = wait_for_stop([_Query("bronze"), failed], StopSignal())
    assert failure is not None and failure.startswith("query alerts failed: boom (")
    assert "\n" not in failure


def test_the_child_apps_end_ends_the_wait_and_a_stop_comes_through_later() -> None:
    child = _Child("realtime alerts exited with code 1 (its error is above)")
    assert wait_for_stop([_Query("silver")], StopSignal(), child) == child.failure()
    stop = StopSignal()
    threading.Timer(1.5, stop.requested.set).start()
    assert wait_for_stop([_Query("silver")], stop, _Child(None)) is None
