"""How ``devices``, ``maintain`` and ``rebuild`` end when a stop meets a failure (no Spark)."""

from __future__ import annotations

import pytest
from grpc import StatusCode
from pyspark.errors.exceptions.connect import SparkConnectGrpcException

from common.cli import CliError
from common.stop_signals import StopFlag
from processor import __main__ as processor_main
from processor.settings import ProcessorSettings


@pytest.fixture
def failing_devices(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``devices`` whose write fails; returns what ``went_away`` was asked."""
    asked: list[str] = []

    def write_fails(_spark: object, _settings: object) -> None:
        raise RuntimeError("No space left on device")

    def gone(_exc: BaseException, when: str) -> bool:
        asked.append(when)
        return True

    monkeypatch.setattr(processor_main, "_started_session", lambda *_: object())
    monkeypatch.setattr(processor_main, "write_devices", write_fails)
    monkeypatch.setattr(processor_main, "went_away", gone)
    return asked


@pytest.fixture
def abandoned(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """What a failed command gave up (``stopping.abandon``'s arguments)."""
    calls: list[tuple[object, ...]] = []

    def abandon(
        spark: object, remote: str, listener: object = None, *, hurry: bool = False
    ) -> bool:
        calls.append((spark, remote, hurry))
        return not remote.endswith(":1")  # a server on port 1: gone

    monkeypatch.setattr(processor_main, "abandon", abandon)
    return calls


def test_after_ctrl_c_a_failure_is_the_commands_own_at_once(failing_devices, abandoned) -> None:
    stop = StopFlag()
    stop.set("SIGINT")  # the JVM ignores it: nothing to wait for
    with pytest.raises(RuntimeError, match="No space left on device"):
        processor_main._once(ProcessorSettings(_env_file=None), "devices", [], stop)
    assert failing_devices == []
    assert [(remote, hurry) for _, remote, hurry in abandoned] == [("", False)]


def test_a_driver_a_sigterm_stopped_under_the_write_is_one_line_and_130(
    failing_devices, abandoned, capfd
) -> None:
    stop = StopFlag()
    stop.set("SIGTERM")
    code = processor_main._once(ProcessorSettings(_env_file=None), "devices", [], stop)
    assert (code, failing_devices, abandoned) == (130, ["while devices ran"], [])
    assert capfd.readouterr().err == (
        "[processor] Spark's driver stopped with the same signal before devices finished: "
        "run it again\n"
    )


def test_a_failure_without_a_stop_is_the_commands_own(failing_devices, abandoned) -> None:
    with pytest.raises(RuntimeError, match="No space left on device"):
        processor_main._once(ProcessorSettings(_env_file=None), "devices", [], StopFlag())
    assert failing_devices == []
    # its session stopped: through Spark Connect, its queries on the server too
    assert [(remote, hurry) for _, remote, hurry in abandoned] == [("", False)]


def test_a_spark_connect_server_gone_under_a_command_is_one_line(
    failing_devices, abandoned, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = SparkConnectGrpcException("failed to connect", grpc_status_code=StatusCode.UNAVAILABLE)

    def write_fails(_spark: object, _settings: object) -> None:
        raise gone

    monkeypatch.setattr(processor_main, "write_devices", write_fails)
    settings = ProcessorSettings(_env_file=None, remote="sc://127.0.0.1:1")
    with pytest.raises(CliError) as raised:
        processor_main._once(settings, "devices", [], StopFlag())
    assert str(raised.value) == (
        "the Spark Connect server at 127.0.0.1:1 stopped answering before devices finished: "
        "start it again if it stopped, then run devices again"
    )
    assert raised.value.__cause__ is gone


def test_another_failure_with_the_server_gone_is_the_commands_own(
    failing_devices, abandoned
) -> None:
    settings = ProcessorSettings(_env_file=None, remote="sc://127.0.0.1:1")
    with pytest.raises(RuntimeError, match="No space left on device"):
        processor_main._once(settings, "devices", [], StopFlag())
