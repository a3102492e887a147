"""Settings precedence: TOML file < .env < environment < CLI flags; secrets stay secret."""

from __future__ import annotations

import argparse
import os

import pytest
from pydantic import ValidationError

from common.settings import (
    KafkaSettings,
    add_settings_arguments,
    load_settings,
    parse_connection_string,
)
from processor.settings import ProcessorSettings
from producer.settings import ProducerSettings

CS = "Endpoint=sb://myns.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=c2VjcmV0LWtleQ=="


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for key in list(os.environ):
        if key.startswith("IOT_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)  # no stray .env
    return tmp_path


def _parse(cls, argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    add_settings_arguments(parser, cls)
    return parser.parse_args(argv)


def test_each_source_overrides_the_one_below(clean_env, monkeypatch):
    config = clean_env / "settings.toml"
    config.write_text(
        "[producer]\nrate = 10\nfleet_size = 11\nseed = 12\ncount = 13\n"
        '[kafka]\ntopic = "from-file"\nbootstrap_servers = "file:1"\n'
    )
    (clean_env / ".env").write_text(
        "IOT_PRODUCER_FLEET_SIZE=21\nIOT_PRODUCER_SEED=22\nIOT_PRODUCER_COUNT=23\n"
    )
    monkeypatch.setenv("IOT_PRODUCER_SEED", "32")
    monkeypatch.setenv("IOT_PRODUCER_COUNT", "33")
    monkeypatch.setenv("IOT_KAFKA_TOPIC", "from-env")
    args = _parse(
        ProducerSettings,
        ["--config", str(config), "--count", "43", "--kafka-bootstrap-servers", "cli:9"],
    )
    s = load_settings(ProducerSettings, args)
    assert (s.rate, s.fleet_size, s.seed, s.count) == (10.0, 21, 32, 43)
    assert (s.kafka.topic, s.kafka.bootstrap_servers) == ("from-env", "cli:9")


def test_event_hubs_bootstrap_comes_from_the_connection_string(clean_env, monkeypatch):
    monkeypatch.setenv("IOT_KAFKA_AUTH", "connection_string")
    monkeypatch.setenv("IOT_KAFKA_CONNECTION_STRING", CS)
    s = KafkaSettings()
    assert s.bootstrap_servers == "myns.servicebus.windows.net:9093"
    assert "c2VjcmV0LWtleQ" not in repr(s) and "c2VjcmV0LWtleQ" not in str(s.model_dump())


def test_connection_string_auth_without_a_secret_is_a_clear_error(clean_env, monkeypatch):
    monkeypatch.setenv("IOT_KAFKA_AUTH", "connection_string")
    with pytest.raises(ValidationError, match="IOT_KAFKA_CONNECTION_STRING"):
        KafkaSettings()


def test_connection_string_errors_never_echo_the_secret():
    with pytest.raises(ValueError, match="has no Endpoint part") as info:
        parse_connection_string("SharedAccessKeyName=x;SharedAccessKey=top-secret")
    assert "top-secret" not in str(info.value)
    assert parse_connection_string(CS).bootstrap_server == "myns.servicebus.windows.net:9093"


def test_boolean_flags_and_nested_lake_settings(clean_env):
    args = _parse(
        ProcessorSettings,
        ["--no-fail-on-data-loss", "--lake-root", "/data/lake", "--trigger", "available_now"],
    )
    s = load_settings(ProcessorSettings, args)
    assert s.fail_on_data_loss is False
    assert s.trigger == "available_now"
    assert s.lake.checkpoint("silver") == "/data/lake/_checkpoints/silver"
    assert s.lake.table("gold/device_1m") == "/data/lake/gold/device_1m"


def test_queries_must_be_known_and_select_the_stages(clean_env):
    from processor import pipeline
    from processor.settings import QUERY_NAMES

    assert set(pipeline.QUERIES) == set(QUERY_NAMES)
    with pytest.raises(ValidationError, match="unknown queries: gold_device_1m"):
        ProcessorSettings(queries="silver, gold_device_1m")

    def names(settings: ProcessorSettings) -> list[list[str]]:
        by_stage = {stage: name for name, stage in pipeline.QUERIES.items()}
        return [[by_stage[s] for s in group] for group in pipeline.stages(settings)]

    background = ["device_status", "gold_site_type_10m", "gold_device_sessions", "alerts",
                  "fleet_summary"]  # fmt: skip
    # Silver reads the source itself: the hot path starts first, bronze with the rest.
    assert names(ProcessorSettings()) == [
        ["silver"], ["bronze", *background], ["alert_recoveries"]
    ]  # fmt: skip
    # Silver reads bronze (asked for, or forced by the rate source): bronze comes first.
    chained = [["bronze"], ["silver"], background, ["alert_recoveries"]]
    assert names(ProcessorSettings(silver_input="bronze")) == chained
    assert names(ProcessorSettings(source="rate")) == chained
    assert names(ProcessorSettings(queries=" alerts,silver ")) == [["silver"], ["alerts"]]


def test_each_tier_triggers_on_its_own_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    from processor.sinks import tier_interval

    for key in list(os.environ):
        if key.startswith("IOT_PROCESSOR_"):
            monkeypatch.delenv(key)
    s = ProcessorSettings(_env_file=None)
    assert [tier_interval(s, t) for t in ("hot", "bronze", "background")] == [
        "1 second", "10 seconds", "1 minute"
    ]  # fmt: skip
    from processor.pipeline import bronze_tier

    # Bronze has its own tier, unless silver reads it: then it is the hot path.
    assert bronze_tier(s) == "bronze"
    assert bronze_tier(ProcessorSettings(_env_file=None, silver_input="bronze")) == "hot"
    assert bronze_tier(ProcessorSettings(_env_file=None, source="rate")) == "hot"
    monkeypatch.setenv("IOT_PROCESSOR_BRONZE_TRIGGER_INTERVAL", "3 seconds")
    assert tier_interval(ProcessorSettings(_env_file=None), "bronze") == "3 seconds"
