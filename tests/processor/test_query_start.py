"""How a query's start is tried again, and how a failed run gives up what it started (no Spark)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter

from common.cli import CliError
from common.lake import Query
from processor import stopping
from processor.queries import WORKER_LATE, started

LATE = RuntimeError(f"{WORKER_LATE}.\n\nJVM stacktrace:\norg.apache.spark.SparkException")


class Writer:
    """A writer whose starts raise ``errors`` in turn, then return ``"query"``."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.starts = 0

    def start(self) -> str:
        self.starts += 1
        if self.errors:
            raise self.errors.pop(0)
        return "query"


def _started(writer: Writer, attempts: int = 3) -> Any:
    return started(cast(DataStreamWriter, writer), Query.BRONZE, attempts, backoff_s=0)


def test_a_start_whose_python_process_was_late_is_tried_again(capfd) -> None:
    writer = Writer(LATE)
    assert (_started(writer), writer.starts) == ("query", 2)
    assert capfd.readouterr().err == (
        "[processor] bronze: Spark's Python process for it did not start within Spark's 10 s "
        "(a busy machine); starting it again (try 2 of 3)\n"
    )


def test_late_every_time_is_one_line_that_says_what_to_do() -> None:
    writer = Writer(LATE, LATE, LATE)
    with pytest.raises(CliError) as raised:
        _started(writer)
    assert writer.starts == 3
    assert str(raised.value) == (
        "bronze did not start: Spark's Python process for it did not connect back within "
        "Spark's 10 s, 3 times; the Spark server is too busy: give it more cores or fewer "
        "other applications, then start again"
    )
    assert raised.value.__cause__ is LATE


def test_any_other_start_failure_is_raised_at_once() -> None:
    other = RuntimeError("[STREAMING_QUERY_ALREADY_ACTIVE] bronze is already active")
    writer = Writer(other, LATE)
    with pytest.raises(RuntimeError) as raised:
        _started(writer)
    assert (raised.value, writer.starts) == (other, 1)


class Streams:
    """``spark.streams`` whose active queries cannot be listed (Spark has gone)."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    @property
    def active(self) -> list[object]:
        self.calls.append("active")
        raise ConnectionRefusedError("[Errno 111] Connection refused")

    def removeListener(self, listener: object) -> None:  # noqa: N802 - Spark's API
        self.calls.append(f"removeListener {listener}")


class Session:
    """A session whose every step is recorded; ``stop`` fails too."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.streams = Streams(self.calls)

    def stop(self) -> None:
        self.calls.append("stop")
        raise RuntimeError("the session is already closed")


def test_a_failed_run_gives_up_every_step_even_when_one_fails() -> None:
    session = Session()
    stopping.abandon(cast(SparkSession, session), cast(Any, "metrics"))
    assert session.calls == ["active", "removeListener metrics", "stop"]


def test_a_failed_command_without_a_listener_stops_its_session() -> None:
    session = Session()
    stopping.abandon(cast(SparkSession, session))
    assert session.calls == ["active", "stop"]
