"""How a query's start is tried again, and how a failed run gives up what it started (no Spark)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any, cast

import pytest
from grpc import StatusCode
from pyspark.errors.exceptions.connect import SparkConnectGrpcException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import DataStreamWriter

from common.cli import CliError
from common.lake import Query
from common.stop_signals import StopFlag
from infra.daemons import free_ports
from processor import __main__ as processor_main
from processor import stopping
from processor.connect_server import NotAnsweringError
from processor.queries import WORKER_LATE, started
from processor.settings import ProcessorSettings

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
        "Spark's 10 s, 3 times: the Spark server is too busy, or its Python fails to start "
        "(the server's log says which); give it more cores or fewer other applications, or "
        "fix its Python, then start again"
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
        self.client = SimpleNamespace(close=lambda: self.calls.append("close the channel"))

    def stop(self) -> None:
        self.calls.append("stop")
        raise RuntimeError("the session is already closed")


def test_a_failed_run_gives_up_every_step_even_when_one_fails() -> None:
    session = Session()
    assert stopping.abandon(cast(SparkSession, session), "", cast(Any, "metrics")) is True
    assert session.calls == ["active", "removeListener metrics", "stop"]


def test_a_failed_command_without_a_listener_stops_its_session() -> None:
    session = Session()
    stopping.abandon(cast(SparkSession, session), "")
    assert session.calls == ["active", "stop"]


def test_after_a_second_ctrl_c_the_queries_end_with_the_session() -> None:
    session = Session()
    stopping.abandon(cast(SparkSession, session), "", cast(Any, "metrics"), hurry=True)
    assert session.calls == ["removeListener metrics", "stop"]


def test_a_spark_connect_server_that_is_gone_is_left_alone_at_once() -> None:
    session = Session()
    (port,) = free_ports("127.0.0.1", 1)
    started_at = time.monotonic()
    answered = stopping.abandon(
        cast(SparkSession, session), f"sc://127.0.0.1:{port}", cast(Any, "metrics")
    )
    # No call to the server: only the channel is closed, so that PySpark's exit handler
    # does not call it either.
    assert (answered, session.calls) == (False, ["close the channel"])
    assert time.monotonic() - started_at < stopping.ABANDON_CHECK_S


class Listener:
    """The metrics listener: what ``close`` was asked."""

    def __init__(self, *_args: object, **_kwargs: object) -> None:
        self.closed: list[bool] = []

    def close(self, write_rest: bool = True) -> None:
        self.closed.append(write_rest)


REMOTE = "sc://127.0.0.1:15002/;token=abc"
SERVER_LOST = (
    "the Spark Connect server at 127.0.0.1:15002 stopped answering: start it again if it "
    "stopped, then the processor (it carries on from its checkpoints)"
)
GONE = SparkConnectGrpcException("failed to connect", grpc_status_code=StatusCode.UNAVAILABLE)


def raises(error: BaseException) -> Any:
    """A stand-in for a step of the run that fails with ``error``."""

    def fail(*_args: object, **_kwargs: object) -> None:
        raise error

    return fail


def run_main(
    monkeypatch: pytest.MonkeyPatch,
    spark: object,
    abandon: Any,
    *,
    prepare: Any = lambda *_: None,
    queries: Any = lambda *_a, **_k: True,
    listener: type[Listener] = Listener,
    remote: str = REMOTE,
) -> BaseException:
    """``_run_main`` (available-now) on ``spark``, a stand-in: what it raised.

    Args:
        monkeypatch: The test's.
        spark: What the session is.
        abandon: Stands in for ``stopping.abandon``.
        prepare: Stands in for the lake's set-up.
        queries: Stands in for the run of the queries.
        listener: The metrics listener's class.
        remote: The Spark Connect server's URL; empty for a classic session.
    """
    monkeypatch.setattr(processor_main, "_session", lambda _settings: spark)
    monkeypatch.setattr(processor_main, "prepare_lake", prepare)
    monkeypatch.setattr(processor_main, "MetricsListener", listener)
    monkeypatch.setattr(processor_main, "run_available_now", queries)
    monkeypatch.setattr(processor_main, "abandon", abandon)
    stop = StopFlag()
    monkeypatch.setattr(stop, "install", lambda: None)
    settings = ProcessorSettings(_env_file=None, trigger="available_now", remote=remote or None)
    with pytest.raises(BaseException) as raised:
        processor_main._run_main(settings, stop, None)
    return raised.value


@pytest.mark.parametrize(
    ("error", "hurry"), [(RuntimeError("boom"), False), (KeyboardInterrupt(), True)]
)
def test_a_run_that_fails_once_started_closes_its_listener_then_gives_spark_up(
    monkeypatch: pytest.MonkeyPatch, error: BaseException, hurry: bool
) -> None:
    calls: list[object] = []
    spark = SimpleNamespace(streams=SimpleNamespace(addListener=lambda _: calls.append("added")))

    def abandon(session: object, remote: str, listener: Listener, *, hurry: bool) -> bool:
        calls.append((session is spark, remote, list(listener.closed), hurry))
        return True

    remote = "sc://127.0.0.1:15002"
    raised = run_main(monkeypatch, spark, abandon, queries=raises(error), remote=remote)
    assert raised is error
    # The listener is closed before Spark is given up: no flush of its own meanwhile.
    assert calls == ["added", (True, remote, [False], hurry)]


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (GONE, True),
        (RuntimeError("wrapped"), True),  # its cause below: UNAVAILABLE
        (RuntimeError("a query failed"), False),  # not the server's absence: said as it is
        (KeyboardInterrupt(), False),
    ],
)
def test_a_run_whose_spark_connect_server_is_gone_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, error: BaseException, lost: bool
) -> None:
    if str(error) == "wrapped":
        error.__cause__ = GONE
    spark = SimpleNamespace(streams=SimpleNamespace(addListener=lambda _: None))
    raised = run_main(monkeypatch, spark, lambda *_a, **_k: False, queries=raises(error))
    if lost:  # the server, without the URL's parameters (a token)
        assert isinstance(raised, CliError)
        assert (str(raised), raised.__cause__) == (SERVER_LOST, error)
    else:
        assert raised is error


@pytest.mark.parametrize("step", ["prepare_lake", "addListener"])
def test_a_server_lost_while_the_run_starts_is_the_same_one_line(
    monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    given_up: list[str] = []

    def abandon(*_args: object, **_kwargs: object) -> bool:
        given_up.append("abandon")
        return False

    add = raises(GONE) if step == "addListener" else lambda _: None
    spark = SimpleNamespace(streams=SimpleNamespace(addListener=add))
    monkeypatch.setattr(processor_main, "is_remote", lambda session: session is spark)
    prepare = raises(GONE) if step == "prepare_lake" else lambda *_: None
    raised = run_main(monkeypatch, spark, abandon, prepare=prepare)
    assert (type(raised), str(raised), given_up) == (CliError, SERVER_LOST, ["abandon"])


def test_a_classic_runs_failed_lake_setup_is_raised_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    error = RuntimeError("the lake is not writable")
    # The JVM ends with the process: nothing to give up first.
    raised = run_main(
        monkeypatch,
        SimpleNamespace(),
        lambda *_a, **_k: pytest.fail("abandoned"),
        prepare=raises(error),
        remote="",
    )
    assert raised is error


def test_a_server_that_hangs_is_one_line_once_its_channel_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []

    class OrderedListener(Listener):
        def close(self, write_rest: bool = True) -> None:
            calls.append(f"close the listener, write the rest: {write_rest}")

    client = SimpleNamespace(close=lambda: calls.append("close the channel"))
    spark = SimpleNamespace(streams=SimpleNamespace(addListener=lambda _: None), client=client)
    hung = NotAnsweringError("Spark did not answer within 10 s")
    raised = run_main(
        monkeypatch,
        spark,
        lambda *_a, **_k: calls.append("abandon"),
        queries=raises(hung),
        listener=OrderedListener,
    )
    assert isinstance(raised, CliError)
    assert (str(raised), raised.__cause__) == (SERVER_LOST, hung)
    # The channel first: closing it ends the calls that wait on the server, the listener's
    # write among them. Nothing more is asked of the server.
    assert calls == ["close the channel", "close the listener, write the rest: False"]
