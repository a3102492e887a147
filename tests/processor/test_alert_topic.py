"""A run of every query goes on without real-time alerts when their topic is missing."""

from __future__ import annotations

import pytest

from common.cli import CliError
from processor import preflight
from processor.settings import ProcessorSettings


@pytest.fixture
def no_alerts_topic(monkeypatch: pytest.MonkeyPatch, tmp_path) -> list[str]:
    """Every topic exists (3 partitions) but ``iot-alerts``; returns the topics checked."""
    checked: list[str] = []

    def check_kafka(kafka, topic=None):  # type: ignore[no-untyped-def]
        checked.append(topic or kafka.topic)
        if topic == "iot-alerts":
            raise CliError("topic 'iot-alerts' does not exist at localhost:9092 (PLAINTEXT)")
        return 3

    monkeypatch.setattr(preflight, "check_kafka", check_kafka)
    monkeypatch.setenv("IOT_LAKE_ROOT", str(tmp_path / "lake"))
    return checked


def test_every_query_but_the_alert_ones_runs_and_the_run_says_why(no_alerts_topic, capsys):
    settings = ProcessorSettings(_env_file=None)
    partitions, chosen = preflight.preflight(settings, "run")
    assert partitions == 3
    assert no_alerts_topic == ["iot-events", "iot-alerts"]
    assert chosen.query_names() == [
        "silver", "bronze", "device_status", "gold_device_sessions",
        "alerts", "alert_recoveries",
    ]  # fmt: skip
    assert capsys.readouterr().err == (
        "[processor] real-time alerts are off: topic 'iot-alerts' does not exist at "
        "localhost:9092 (PLAINTEXT)\n"
    )


@pytest.mark.parametrize(("command", "queries"), [("run", "alerts_rt"), ("realtime", "")])
def test_alerts_asked_for_must_have_their_topic(no_alerts_topic, command, queries):
    settings = ProcessorSettings(_env_file=None, queries=queries)
    with pytest.raises(CliError, match="topic 'iot-alerts' does not exist"):
        preflight.preflight(settings, command)


@pytest.fixture
def every_topic(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Every topic exists, with 3 partitions."""
    monkeypatch.setattr(preflight, "check_kafka", lambda kafka, topic=None: 3)
    monkeypatch.setenv("IOT_LAKE_ROOT", str(tmp_path / "lake"))


def test_under_spark_submit_a_run_of_every_query_leaves_the_realtime_app_out(every_topic, capsys):
    settings = ProcessorSettings(_env_file=None, master="")
    _, chosen = preflight.preflight(settings, "run")
    assert "realtime_alerts" not in chosen.query_names()
    assert "alerts_rt" in chosen.query_names()
    assert capsys.readouterr().err.startswith(
        "[processor] real-time alerts are off under spark-submit: submit the real-time alerts "
        "as an application of their own (spark-submit ... processor/__main__.py realtime"
    )


def test_under_spark_submit_the_realtime_app_named_beside_others_fails(every_topic):
    settings = ProcessorSettings(_env_file=None, master="", queries="silver,realtime_alerts")
    with pytest.raises(CliError, match="leave realtime_alerts out of --queries") as info:
        preflight.preflight(settings, "run")
    assert info.value.exit_code == 2


def test_under_spark_submit_the_realtime_app_named_alone_runs_there(every_topic):
    settings = ProcessorSettings(_env_file=None, master="", queries="realtime_alerts")
    _, chosen = preflight.preflight(settings, "run")
    assert chosen.query_names() == ["realtime_alerts"]
