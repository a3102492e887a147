"""Settings precedence: TOML file < .env < environment < CLI flags; secrets stay secret."""

from __future__ import annotations

import argparse
from enum import Enum
from pathlib import Path
from typing import ClassVar, Literal

import pytest
from pydantic import Field, SecretStr, ValidationError
from pydantic_settings import SettingsConfigDict

from common.eventhubs import parse_connection_string
from common.kafka_settings import KafkaSettings
from common.settings import (
    Section,
    Settings,
    SettingsError,
    add_settings_arguments,
    load_settings,
)
from loadtest.settings import LoadtestSettings
from processor.settings import ProcessorSettings
from producer.settings import ProducerSettings

CS = "Endpoint=sb://myns.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey=c2VjcmV0LWtleQ=="


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


def test_the_config_file_gives_each_class_its_own_table_and_names_a_bad_one(clean_env, monkeypatch):
    config = clean_env / "settings.toml"
    config.write_text('[kafka]\ntopic = "from-file"\n')  # no [producer] table: its defaults
    monkeypatch.setenv("IOT_CONFIG_FILE", str(config))
    s = load_settings(ProducerSettings)
    assert (s.kafka.topic, s.rate) == ("from-file", ProducerSettings.model_fields["rate"].default)
    config.write_text('kafka = "not a table"\n')
    with pytest.raises(ValueError, match=rf"^\[kafka\] in {config} must be a table$"):
        load_settings(ProducerSettings)
    config.write_text('[producer]\nrate = 5\nrat = 6\n[kafka]\nbootstrap_server = "b:1"\n')
    with pytest.raises(
        ValueError, match=rf"^\[kafka\] in {config} has no setting bootstrap_server:"
    ):
        load_settings(ProducerSettings)
    config.write_text("[producer]\nrate = 5\nrat = 6\n")
    with pytest.raises(ValueError, match=rf"^\[producer\] in {config} has no setting rat: the"):
        load_settings(ProducerSettings)
    monkeypatch.setenv("IOT_CONFIG_FILE", str(clean_env / "gone.toml"))
    with pytest.raises(FileNotFoundError, match=r"gone\.toml does not exist$"):
        load_settings(ProducerSettings)


def test_a_section_no_service_reads_is_refused_and_the_others_services_are_not(
    clean_env, monkeypatch
):
    config = clean_env / "settings.toml"
    monkeypatch.setenv("IOT_CONFIG_FILE", str(config))
    config.write_text('retries = 3\n[producers]\nrate = 5\n[kafka]\ntopic = "t"\n')
    with pytest.raises(ValueError) as exc:
        load_settings(ProducerSettings)
    assert str(exc.value) == (
        f"{config} has no section [producers], [retries]: its sections are [bridge], "
        "[dashboard], [kafka], [lake], [loadtest], [mqtt], [notifier], [processor], "
        "[producer], [schema_registry]"
    )
    # One file for every service: the producer reads its own tables and leaves the rest.
    config.write_text(
        "[producer]\nrate = 5\n[processor]\nseed = 9\n[dashboard]\nrefresh_s = 7\n"
        "[notifier]\n[bridge]\n[loadtest]\n[mqtt]\n[lake]\n[schema_registry]\n[kafka]\n"
    )
    assert load_settings(ProducerSettings).rate == 5


def test_a_dotenv_line_that_does_not_parse_is_said_once_on_the_console(clean_env, capsys):
    (clean_env / ".env").write_text(
        "IOT_PRODUCER_RATE=7\nIOT_PRODUCER_SEED 5\nIOT_KAFKA_TOPIC=from-dotenv\n"
    )
    s = load_settings(ProducerSettings)  # its kafka, lake and fleet settings read .env too
    assert (s.rate, s.kafka.topic) == (7.0, "from-dotenv")
    assert s.seed == ProducerSettings.model_fields["seed"].default
    assert capsys.readouterr().err.splitlines() == [
        f"warning: line 2 of {clean_env / '.env'} does not parse and is ignored "
        "(a line is NAME=value)"
    ]


def test_each_section_is_the_table_of_one_settings_class():
    from tests.docs_reference import reference

    assert sorted(c.config_section for c in reference().settings_classes()) == sorted(Section)


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


@pytest.mark.parametrize(
    ("cls", "variable", "flag"),
    [
        (KafkaSettings, "IOT_KAFKA_BOOTSTRAP_SERVERS", "--kafka-bootstrap-servers"),
        (KafkaSettings, "IOT_KAFKA_TOPIC", "--kafka-topic"),
        (ProducerSettings, "IOT_PRODUCER_OUT_DIR", "--out-dir"),
        # Settings whose own checks quote a value they refuse: refused before them.
        (ProcessorSettings, "IOT_PROCESSOR_SLIDING_LENGTH", "--sliding-length"),
        (ProcessorSettings, "IOT_PROCESSOR_QUERIES", "--queries"),
        (ProcessorSettings, "IOT_PROCESSOR_WATERMARK", "--watermark"),
        (ProcessorSettings, "IOT_PROCESSOR_STARTING_OFFSETS", "--starting-offsets"),
        (ProcessorSettings, "IOT_PROCESSOR_DRIVER_MEMORY", "--driver-memory"),
        (LoadtestSettings, "IOT_LOADTEST_WATERMARK", "--watermark"),
        (LoadtestSettings, "IOT_LOADTEST_TRIGGER_INTERVAL", "--trigger-interval"),
    ],
)
def test_a_connection_string_in_a_plain_setting_is_refused_without_showing_it(
    clean_env, monkeypatch, cls, variable, flag
):
    monkeypatch.setenv(variable, CS)
    with pytest.raises(SettingsError) as info:
        load_settings(cls, _parse(cls, []))
    assert str(info.value) == (
        f"{variable} ({flag}): holds what looks like an Event Hubs connection string (a "
        "SharedAccessKey), and this setting is not secret: put the connection string in "
        "IOT_KAFKA_CONNECTION_STRING"
    )


def test_a_connection_string_given_as_a_path_is_hidden_in_errors():
    with pytest.raises(ValidationError) as info:
        KafkaSettings(ssl_ca_location=Path(CS))
    assert "c2VjcmV0" not in str(info.value)
    assert info.value.errors()[0]["loc"] == ("ssl_ca_location",)
    assert "holds what looks like an Event Hubs connection string" in str(info.value)


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


def test_sliding_windows_must_be_whole_minutes(clean_env):
    s = ProcessorSettings(sliding_length="1 hour", sliding_slide="15 Minutes")
    assert (s.sliding_length, s.sliding_slide) == ("1 hour", "15 Minutes")
    for bad in ("90 seconds", "0 minutes", "1.5 minutes", "10m"):
        with pytest.raises(ValidationError, match="is not whole minutes or hours"):
            ProcessorSettings(sliding_slide=bad)


def test_queries_must_be_known_and_select_the_stages(clean_env):
    from common.lake import Query
    from processor import pipeline

    # Every query but the real-time one (its own application) is a stage of the main one.
    assert set(pipeline.QUERIES) == set(Query) - {Query.REALTIME_ALERTS}
    with pytest.raises(ValidationError, match="unknown queries: gold_device_1m"):
        ProcessorSettings(queries="silver, gold_device_1m")

    def names(settings: ProcessorSettings) -> list[list[str]]:
        return [[str(q) for q in group] for group in pipeline.stages(settings)]

    background = ["device_status", "gold_device_sessions", "alerts", "alerts_rt"]
    # Silver reads the source itself: the hot path starts first, bronze with the rest.
    assert names(ProcessorSettings()) == [
        ["silver"], ["bronze", *background], ["alert_recoveries"]
    ]  # fmt: skip
    # Silver reads bronze (asked for, or forced by the rate source): bronze comes first.
    chained = [["bronze"], ["silver"], background, ["alert_recoveries"]]
    assert names(ProcessorSettings(silver_input="bronze")) == chained
    # The rate source has no alerts topic to land.
    assert names(ProcessorSettings(source="rate")) == [
        ["bronze"], ["silver"], background[:-1], ["alert_recoveries"]
    ]  # fmt: skip
    assert names(ProcessorSettings(queries=" alerts,silver ")) == [["silver"], ["alerts"]]


def test_each_tier_triggers_on_its_own_interval(clean_env, monkeypatch: pytest.MonkeyPatch) -> None:
    from processor.queries import tier_interval

    s = ProcessorSettings(_env_file=None)
    assert [tier_interval(s, t) for t in ("hot", "bronze", "background")] == [
        "3 seconds", "10 seconds", "1 minute"
    ]  # fmt: skip
    from common.lake import Query
    from processor.queries import tier_of

    # Bronze has its own tier, unless silver reads it: then it is the hot path.
    assert tier_of(Query.BRONZE, s) == "bronze"
    assert tier_of(Query.BRONZE, ProcessorSettings(_env_file=None, silver_input="bronze")) == "hot"
    assert tier_of(Query.BRONZE, ProcessorSettings(_env_file=None, source="rate")) == "hot"
    assert [tier_of(q, s) for q in (Query.SILVER, Query.ALERTS, Query.ALERT_RECOVERIES)] == [
        "hot", "background", "background"
    ]  # fmt: skip
    monkeypatch.setenv("IOT_PROCESSOR_BRONZE_TRIGGER_INTERVAL", "3 seconds")
    assert tier_interval(ProcessorSettings(_env_file=None), "bronze") == "3 seconds"


# --------------------------------------------------------------------------- --help


def _cli_help(run_cli, module: str, tmp_path, **env_extra: str) -> str:
    """``python -m MODULE --help`` on one unwrapped line per option, whitespace collapsed."""
    run = run_cli(
        module, "--help", home=tmp_path / "home", cwd=tmp_path, env={"COLUMNS": "1000", **env_extra}
    )
    assert run.code == 0, run.err
    return " ".join(run.out.split())


def test_producer_help_shows_defaults_choices_and_variables_but_no_secret(run_cli, tmp_path):
    secret = "Endpoint=sb://h/;SharedAccessKeyName=p;SharedAccessKey=SECRETinTheEnvironment"
    text = _cli_help(run_cli, "producer", tmp_path, IOT_KAFKA_CONNECTION_STRING=secret)
    for expected in (
        "--kafka-auth {none,connection_string,entra} none: PLAINTEXT; connection_string: "
        "SASL_SSL+PLAIN; entra: OAUTHBEARER (default: none; env IOT_KAFKA_AUTH)",
        "--transport {kafka,mqtt,file,stdout} Where to send (mqtt: QoS 1 to "
        "<IOT_MQTT_TOPIC_PREFIX>/<device_id>/telemetry, for python -m bridge to forward) "
        "(default: kafka; env IOT_PRODUCER_TRANSPORT)",
        "--mqtt-password PASSWORD Password of the user name (secret: set IOT_MQTT_PASSWORD in "
        "the environment or .env, where others cannot see it)",
        "--scenario {clean,realistic,chaos} Preset anomaly and fault rates; explicit rates "
        "override it (default: clean; env IOT_PRODUCER_SCENARIO)",
        "--compression {none,gzip,snappy,lz4,zstd} librdkafka compression.type (Event Hubs "
        "Standard: none) (default: none; env IOT_PRODUCER_COMPRESSION)",
        "--rate RATE Target events/s (0 = as fast as possible) (default: 1000; env "
        "IOT_PRODUCER_RATE)",
        "--count COUNT Stop after this many readings (default: unset; env IOT_PRODUCER_COUNT)",
        "--kafka-topic TOPIC Topic (Event Hubs: the event hub's name) (default: iot-events; "
        "env IOT_KAFKA_TOPIC)",
        "--kafka-connection-string CONNECTION_STRING Event Hubs connection string of a "
        "namespace or event hub (secret: set IOT_KAFKA_CONNECTION_STRING in the environment "
        "or .env, where others cannot see it)",
    ):
        assert expected in text
    assert "SECRETinTheEnv" not in text


def test_processor_help_shows_defaults_and_choices(run_cli, tmp_path):
    text = _cli_help(run_cli, "processor", tmp_path)
    for expected in (
        "--trigger {processing_time,available_now} Run continuously, or process what is "
        "there and stop (default: processing_time; env IOT_PROCESSOR_TRIGGER)",
        "--source {kafka,files,rate} kafka (or Event Hubs), a JSON-lines landing folder, or "
        "Spark's rate source (default: kafka; env IOT_PROCESSOR_SOURCE)",
        "--fail-on-data-loss, --no-fail-on-data-loss Fail when Kafka offsets aged out before "
        "they were read (default: true; env IOT_PROCESSOR_FAIL_ON_DATA_LOSS)",
        "--kafka-auth {none,connection_string,entra} none: PLAINTEXT; connection_string: "
        "SASL_SSL+PLAIN; entra: OAUTHBEARER (default: none; env IOT_KAFKA_AUTH)",
        "--watermark WATERMARK How late an event may arrive (default: 2 minutes; env "
        "IOT_PROCESSOR_WATERMARK)",
        "--queries QUERIES Comma-separated queries to run (default: all) of silver, bronze, "
        "device_status, gold_device_sessions, alerts, alert_recoveries, alerts_rt, "
        "realtime_alerts; docs/tables.md says what each writes (env IOT_PROCESSOR_QUERIES)",
    ):
        assert expected in text


class _Colour(Enum):
    RED = "red"
    BLUE = "blue"


class _Demo(Settings):
    config_section: ClassVar[str] = "demo"
    model_config = SettingsConfigDict(env_prefix="IOT_DEMO_")

    colour: _Colour = Field(_Colour.RED, description="A colour")
    level: Literal["low", "high"] | None = Field(None, description="How much")
    share: float = Field(0.5, description="A 50% share")
    token: SecretStr = Field(SecretStr("default-token-9f8e7d"), description="A token")
    mode: str = Field("default", description="default | fast")
    window: int = Field(60, description="Default time range")
    scope: str = Field("", description="A scope; default: the host's")
    speed: str = Field("slow", description="slow (default) or fast")


def test_help_lists_enum_and_optional_literal_choices_and_hides_secret_defaults(capsys):
    parser = argparse.ArgumentParser(prog="demo")
    add_settings_arguments(parser, _Demo)
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--colour {red,blue} A colour (default: red; env IOT_DEMO_COLOUR)" in text
    assert "--level {low,high} How much (default: unset; env IOT_DEMO_LEVEL)" in text
    assert "--share SHARE A 50% share (default: 0.5; env IOT_DEMO_SHARE)" in text
    assert "default-token" not in text and "9f8e7d" not in text
    assert "--token TOKEN A token (secret: set IOT_DEMO_TOKEN" in text
    # A description that merely holds the word "default" still gets its default shown.
    assert "--mode MODE default | fast (default: default; env IOT_DEMO_MODE)" in text
    assert "--window WINDOW Default time range (default: 60; env IOT_DEMO_WINDOW)" in text
    assert "--scope SCOPE A scope; default: the host's (env IOT_DEMO_SCOPE)" in text
    assert "--speed SPEED slow (default) or fast (env IOT_DEMO_SPEED)" in text


def test_argparse_refuses_a_value_outside_the_choices(clean_env, capsys):
    with pytest.raises(SystemExit) as exc:
        _parse(ProducerSettings, ["--transport", "kafkaa"])
    assert exc.value.code == 2
    assert (
        "argument --transport: invalid choice: 'kafkaa' (choose from 'kafka', 'mqtt', 'file', 'stdout')"
        in capsys.readouterr().err
    )
    args = _parse(ProducerSettings, ["--transport", "file", "--kafka-auth", "entra"])
    s = load_settings(ProducerSettings, args)
    assert (s.transport, s.kafka.auth) == ("file", "entra")


def test_env_vars_are_named_by_the_model_and_read_back_by_it(monkeypatch, tmp_path):
    from common.kafka_settings import KafkaSettings
    from processor.settings import ProcessorSettings

    assert KafkaSettings.env_vars(
        topic="t", connection_string=SecretStr("s"), ssl_ca_location=None
    ) == {"IOT_KAFKA_TOPIC": "t", "IOT_KAFKA_CONNECTION_STRING": "s"}
    with pytest.raises(KeyError, match="KafkaSettings has no setting 'topik'"):
        KafkaSettings.env_vars(topik="t")
    env = ProcessorSettings.env_vars(
        fail_on_data_loss=False, fleet_size=7, jars_dir=tmp_path, session_gap="3 seconds"
    )
    assert env == {
        "IOT_PROCESSOR_FAIL_ON_DATA_LOSS": "False",
        "IOT_PROCESSOR_FLEET_SIZE": "7",
        "IOT_PROCESSOR_JARS_DIR": str(tmp_path),
        "IOT_PROCESSOR_SESSION_GAP": "3 seconds",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    back = ProcessorSettings(_env_file=None)
    assert (back.fail_on_data_loss, back.fleet_size, back.jars_dir, back.session_gap) == (
        False, 7, str(tmp_path), "3 seconds",
    )  # fmt: skip


def test_the_fleet_is_one_model_named_by_each_service(monkeypatch):
    from common.fleet_settings import FleetSettings
    from loadtest.settings import LoadtestSettings

    for cls, prefix in (
        (ProducerSettings, "IOT_PRODUCER_"),
        (ProcessorSettings, "IOT_PROCESSOR_"),
        (LoadtestSettings, "IOT_LOADTEST_"),
    ):
        assert issubclass(cls, FleetSettings)
        assert (cls.env_name("fleet_size"), cls.env_name("seed")) == (
            f"{prefix}FLEET_SIZE", f"{prefix}SEED",
        )  # fmt: skip
        assert (cls.flag("fleet_size"), cls.flag("seed")) == ("--fleet-size", "--seed")
    monkeypatch.setenv("IOT_LOADTEST_FLEET_SIZE", "7")
    monkeypatch.setenv("IOT_LOADTEST_SEED", "3")
    loadtest = LoadtestSettings(_env_file=None)
    assert loadtest.fleet() == {"fleet_size": 7, "seed": 3}
    assert ProcessorSettings.env_vars(**loadtest.fleet()) == {
        "IOT_PROCESSOR_FLEET_SIZE": "7", "IOT_PROCESSOR_SEED": "3",
    }  # fmt: skip


def test_the_demo_environment_is_read_back_by_each_service(monkeypatch, clean_env):
    from demo.run import demo_env
    from processor.settings import ProcessorSettings
    from producer.settings import ProducerSettings

    args = argparse.Namespace(
        topic="demo-t", rate=200.0, fleet_size=50, scenario="realistic", trigger_interval=None
    )
    env = demo_env(args, clean_env, "127.0.0.1:9999", clean_env / "jars")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    producer = ProducerSettings(_env_file=None)
    processor = ProcessorSettings(_env_file=None)
    assert (producer.kafka.bootstrap_servers, producer.kafka.topic) == ("127.0.0.1:9999", "demo-t")
    assert (producer.scenario, producer.rate, producer.fleet_size) == ("realistic", 200.0, 50)
    assert producer.report_path == clean_env / "producer-report.json"
    assert processor.lake.root == str(clean_env / "lake")
    assert processor.fail_on_data_loss is False and processor.fleet_size == 50
    assert "IOT_PROCESSOR_TRIGGER_INTERVAL" not in env
    # A device goes silent early (the Sessions page fills within a minute): one reading
    # in a hundred lost to dropouts, against the realistic scenario's one in five hundred.
    assert producer.anomaly_config().dropout == 0.01


def test_the_demo_keeps_the_dropouts_of_a_scenario_other_than_realistic(monkeypatch, clean_env):
    from demo.run import _parse, demo_env
    from producer.settings import ProducerSettings

    env = demo_env(_parse(["--scenario", "chaos"]), clean_env, "127.0.0.1:9", clean_env / "j")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert ProducerSettings(_env_file=None).anomaly_config().dropout == 0.02


def test_the_demos_trigger_interval_reaches_the_processor(monkeypatch, clean_env):
    from demo.run import _parse, demo_env
    from processor.settings import ProcessorSettings

    args = _parse(["--trigger-interval", "6 seconds"])
    env = demo_env(args, clean_env, "127.0.0.1:9999", clean_env / "jars")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert ProcessorSettings(_env_file=None).trigger_interval == "6 seconds"


def test_a_child_app_gets_the_flags_that_were_given_and_only_those(clean_env):
    from common import cli
    from common.settings import add_settings_arguments

    parser = cli.ArgumentParser(prog="p")
    parser.add_argument("command", nargs="?", default="run")
    parser.add_argument("--config")
    add_settings_arguments(parser, ProcessorSettings)
    argv = ["run", "--kafka-topic", "run", "--lake-root", "/x", "--no-log-progress"]
    args = parser.parse_args(argv)
    # In the parser's order (the processor's fields, then Kafka's, then the lake's).
    flags = ["--no-log-progress", "--kafka-topic", "run", "--lake-root", "/x"]
    assert cli.given_flags(parser, args) == flags
    assert vars(parser.parse_args(["realtime", *flags])) == vars(args) | {"command": "realtime"}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"IOT_KAFKA_CONNECTION_STRING": "Endpoint=sb://ns.servicebus.windows.net/;"
             "SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0c2VjcmV0"},
            "IOT_KAFKA_CONNECTION_STRING is set, but IOT_KAFKA_AUTH is none, which does not use "
            "it: set IOT_KAFKA_AUTH=connection_string, or unset IOT_KAFKA_CONNECTION_STRING",
        ),
        (
            {"IOT_KAFKA_AUTH": "connection_string", "IOT_KAFKA_CONNECTION_STRING":
             "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=a2V5",
             "IOT_KAFKA_ENTRA_SCOPE": "https://ns.servicebus.windows.net/.default"},
            "IOT_KAFKA_ENTRA_SCOPE is set, but IOT_KAFKA_AUTH is connection_string, which does "
            "not use it: set IOT_KAFKA_AUTH=entra, or unset IOT_KAFKA_ENTRA_SCOPE",
        ),
    ],
)  # fmt: skip
def test_a_setting_the_auth_mode_does_not_use_is_refused_naming_both(
    env, message, clean_env, monkeypatch, run_cli
):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SettingsError) as refused:
        load_settings(KafkaSettings)
    assert str(refused.value) == f"[kafka] {message}"
    done = run_cli("producer", "--count", "10", home=clean_env / "home", cwd=clean_env, env=env)
    assert (done.code, done.err) == (2, f"error: invalid settings: [kafka] {message}\n")
    assert "c2VjcmV0" not in done.err + done.out


def test_each_services_config_help_names_every_table_its_settings_read():
    from bridge.settings import BridgeSettings
    from common.settings import config_sections, service_parser
    from notifier.settings import NotifierSettings
    from processor.settings import ProcessorSettings
    from producer.settings import ProducerSettings

    assert [config_sections(c) for c in (ProcessorSettings, ProducerSettings)] == [
        ["processor", "kafka", "lake", "schema_registry"],
        ["producer", "kafka", "mqtt", "schema_registry"],
    ]
    assert config_sections(BridgeSettings) == ["bridge", "mqtt", "kafka"]
    assert config_sections(NotifierSettings) == ["notifier", "kafka"]
    parser = service_parser(ProducerSettings, "python -m producer", "Simulate.")
    help_text = " ".join(parser.format_help().split())
    assert "TOML settings file ([producer], [kafka], [mqtt], [schema_registry] tables)" in help_text
    args = parser.parse_args(["--config", "x.toml", "--rate", "5"])
    assert args.config == "x.toml" and getattr(args, "producer.rate") == "5"


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--watermark", "2 minuts"], "IOT_PROCESSOR_WATERMARK (--watermark): unknown unit "
         "'minuts' in the interval '2 minuts': use microsecond, millisecond, second, minute, "
         "hour, day, week"),
        (["--trigger-interval", "10s"], "IOT_PROCESSOR_TRIGGER_INTERVAL (--trigger-interval): "
         "unknown unit 's' in the interval '10s': use microsecond, millisecond, second, "
         "minute, hour, day, week"),
        (["--session-gap", "soon"], "IOT_PROCESSOR_SESSION_GAP (--session-gap): cannot read "
         "the interval 'soon': use e.g. '2 minutes' or '30 seconds'"),
        (["--starting-offsets", "latests"], "IOT_PROCESSOR_STARTING_OFFSETS "
         "(--starting-offsets): 'latests' is not earliest, latest or per-partition offsets as "
         'JSON, e.g. {"iot-events": {"0": 23, "1": -2}}'),
        (["--driver-memory", "4gigs"], "IOT_PROCESSOR_DRIVER_MEMORY (--driver-memory): "
         "'4gigs' is not a JVM memory size, e.g. 2g or 1536m"),
        (["--remote", "sc://h:15002;token=t0k3n"], "IOT_PROCESSOR_REMOTE (--remote): not a "
         "Spark Connect URL: write sc://HOST:PORT, and any parameters after a slash "
         "(sc://HOST:PORT/;token=...)"),
        (["--master", "lcoal[2]"], "IOT_PROCESSOR_MASTER (--master): 'lcoal[2]' is not a Spark "
         "master: local, local[N], local[*], local[N,F], spark://HOST:PORT, yarn or k8s://URL; "
         "empty under spark-submit, which gives its own"),
        (["--master", "local[0]"], "IOT_PROCESSOR_MASTER (--master): 'local[0]' is not a "
         "Spark master: local, local[N], local[*], local[N,F], spark://HOST:PORT, yarn or "
         "k8s://URL; empty under spark-submit, which gives its own"),
    ],
)  # fmt: skip
def test_processor_values_spark_would_refuse_are_refused_as_settings(clean_env, flags, said):
    for master in ("", "local", "local[*]", "local[4, 2]", "local[4 ,2]", "local-cluster[ 2,1,1024]",
                   "spark://h1:7077,h2:7077", "yarn", "k8s://https://api:6443"):  # fmt: skip
        assert load_settings(ProcessorSettings, master=master).master == master
    ok = ["--watermark", "1 minute 30 seconds", "--trigger-interval", "2500 milliseconds",
          "--starting-offsets", '{"t": {"0": 5}}', "--driver-memory", "1536m",
          "--remote", "sc://h:15002/;token=t0k3n"]  # fmt: skip
    s = load_settings(ProcessorSettings, _parse(ProcessorSettings, ok))
    assert (s.watermark, s.starting_offsets, s.driver_memory) == (
        "1 minute 30 seconds",
        '{"t": {"0": 5}}',
        "1536m",
    )
    with pytest.raises(SettingsError) as info:
        load_settings(ProcessorSettings, _parse(ProcessorSettings, flags))
    assert str(info.value) == said


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--rate-profile", "ramp:1:x"], "[loadtest] rate profile 'ramp:1:x': expected 3 numbers "
         "after the kind"),
        (["--watermark", "2m"], "IOT_LOADTEST_WATERMARK (--watermark): unknown unit 'm' in the "
         "interval '2m': use microsecond, millisecond, second, minute, hour, day, week"),
    ],
)  # fmt: skip
def test_a_load_test_refuses_what_its_producer_or_processor_would_before_starting_them(
    clean_env, flags, said
):
    from loadtest.settings import LoadtestSettings

    with pytest.raises(SettingsError) as info:
        load_settings(LoadtestSettings, _parse(LoadtestSettings, flags))
    assert str(info.value) == said
    a_file = clean_env / "report"
    a_file.write_text("")
    with pytest.raises(SettingsError, match=f"--out-dir\\): {a_file} is a file: give a folder"):
        load_settings(LoadtestSettings, _parse(LoadtestSettings, ["--out-dir", str(a_file)]))
