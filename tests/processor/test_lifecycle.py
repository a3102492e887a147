"""processor.lifecycle's wait for the end of a run, with stand-ins for the queries."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.stop_signals import StopFlag
from processor.connect_server import NotAnsweringError
from processor.lifecycle import ChildApp, wait_for_stop


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
    stop = StopFlag("processor")
    stop.set("test")
    assert wait_for_stop([_Query("silver")], stop) is None


def test_a_query_that_ends_by_itself_ends_the_wait() -> None:
    queries = [_Query("bronze"), _Query("silver", isActive=False)]
    assert wait_for_stop(queries, StopFlag("processor")) == "query silver stopped by itself"


def test_a_failed_query_is_one_line() -> None:
    failed = _Query("alerts", isActive=False, error=RuntimeError("boom\n\tat Spark.java:1"))
    failure = wait_for_stop([_Query("bronze"), failed], StopFlag("processor"))
    assert failure is not None and failure.startswith("query alerts failed: boom (")
    assert "\n" not in failure


class _HangingQuery:
    """A query on a Spark Connect server that hangs: a look at it never returns."""

    name = "silver"

    def __init__(self) -> None:
        self.released = threading.Event()

    @property
    def isActive(self) -> bool:  # noqa: N802 (StreamingQuery's own name)
        self.released.wait()
        return True


def test_a_look_at_the_queries_that_does_not_return_in_time_gives_the_server_up() -> None:
    query = _HangingQuery()
    started_at = time.monotonic()
    try:
        with pytest.raises(NotAnsweringError, match=r"^Spark did not answer within 0.5 s$"):
            wait_for_stop([query], StopFlag("processor"), answer_within_s=0.5)
    finally:
        query.released.set()
    # One second's wait for a stop, then half a second's for the answer.
    assert 1.5 <= time.monotonic() - started_at < 2.5


class _GoneQuery:
    name = "silver"

    @property
    def isActive(self) -> bool:  # noqa: N802 (StreamingQuery's own name)
        raise ConnectionError("the server is gone")


def test_an_error_from_a_bounded_look_is_raised_as_it_is() -> None:
    with pytest.raises(ConnectionError, match="^the server is gone$"):
        wait_for_stop([_GoneQuery()], StopFlag("processor"), answer_within_s=5.0)


def test_a_bounded_look_that_answers_in_time_is_the_unbounded_ones_answer() -> None:
    queries = [_Query("bronze"), _Query("silver", isActive=False)]
    failure = wait_for_stop(queries, StopFlag("processor"), answer_within_s=5.0)
    assert failure == "query silver stopped by itself"


def test_the_child_apps_end_ends_the_wait_and_a_stop_comes_through_later() -> None:
    child = _Child("realtime alerts exited with code 1 (its error is above)")
    assert wait_for_stop([_Query("silver")], StopFlag("processor"), child) == child.failure()
    stop = StopFlag("processor")
    threading.Timer(1.5, stop.set, ["test"]).start()
    assert wait_for_stop([_Query("silver")], stop, _Child(None)) is None


def test_a_child_app_is_asked_to_stop_once(tmp_path) -> None:
    ready = tmp_path / "ready"
    # Exits with the number of SIGTERMs it got in half a second after the first.
    code = (
        "import signal, sys, time, pathlib\n"
        "got = []\n"
        "signal.signal(signal.SIGTERM, lambda *_: got.append(1))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "while not got: time.sleep(0.01)\n"
        "time.sleep(0.5)\n"
        "sys.exit(len(got))\n"
    )
    child = ChildApp("counter", ["-c", code])
    while not ready.exists():
        assert child.proc.poll() is None
        threading.Event().wait(0.05)
    child.ask_to_stop()
    child.ask_to_stop()  # no second SIGTERM: it would abort a starting child
    child.stop()
    assert child.proc.returncode == 1


def _held_child(started: Path) -> ChildApp:
    """A child that writes whether it was released to ``started``; SIGTERM ends it (0).

    Returned once it waits for its release (its handler set), however slow its start.
    """
    waiting = started.with_name("waiting")
    code = (
        "import pathlib, signal, sys\n"
        "from processor.lifecycle import wait_for_release\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
        f"pathlib.Path({str(waiting)!r}).touch()\n"
        "released = wait_for_release()\n"
        f"pathlib.Path({str(started)!r}).write_text(str(released))\n"
    )
    child = ChildApp("held", ["-c", code])
    while not waiting.exists():
        assert child.proc.poll() is None
        threading.Event().wait(0.05)
    return child


def test_a_held_child_starts_its_work_only_once_released(tmp_path):
    """The run's real-time app waits for the run's queries, not beside its JVM's start."""
    started = tmp_path / "started"
    child = _held_child(started)
    threading.Event().wait(1.0)
    assert child.proc.poll() is None and not started.exists()
    child.release()
    assert child.proc.wait(30) == 0
    assert started.read_text() == "True"
    child.release()  # once only: the pipe is closed, nothing fails
    child.stop()


def test_a_child_stopped_before_its_release_never_starts(tmp_path):
    started = tmp_path / "started"
    child = _held_child(started)
    threading.Event().wait(1.0)
    child.stop()
    assert child.proc.returncode == 0
    assert not started.exists()
