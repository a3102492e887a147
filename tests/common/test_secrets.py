"""No error, message or repr ever holds any part of an Event Hubs connection string's secret.

Every malformed shape (a missing, empty, unknown or repeated part, an empty Endpoint
host, garbage) is refused with a message naming the part, and neither pydantic's
``ValidationError`` (``str``, ``repr``, ``errors()``, ``json()``) nor the one line the
CLIs print holds a fragment of 6 characters or more of the key, or of the string beyond
the words every connection string shares.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from common.eventhubs import CONNECTION_STRING_SHAPE, parse_connection_string
from common.kafka_settings import KafkaSettings
from common.settings import SettingsError, load_settings
from processor.settings import ProcessorSettings
from producer.settings import ProducerSettings
from tests.cli_runs import CliRun, run_python

KEY = "Qm9ndXNLZXlGb3JUZXN0c09ubHlYeXp6eTEyMzQ1Njc="
POLICY = "sendlistenpolicy"
HUB = "telemetryhub"
HOST = "pulsens.servicebus.windows.net"
NS_KEY_LAST = f"Endpoint=sb://{HOST}/;SharedAccessKeyName={POLICY};SharedAccessKey={KEY}"
HUB_LEVEL = f"{NS_KEY_LAST};EntityPath={HUB}"
KEY_FIRST = f"SharedAccessKey={KEY};SharedAccessKeyName={POLICY};Endpoint=sb://{HOST}/"
KEY_FIRST_HUB = (
    f"SharedAccessKey={KEY};EntityPath={HUB};Endpoint=sb://{HOST}:9093;SharedAccessKeyName={POLICY}"  # noqa: E501
)
ENDPOINT = f"Endpoint=sb://{HOST}/"

# (connection string, what the message must say)
MALFORMED = [
    (f"SharedAccessKeyName={POLICY};SharedAccessKey={KEY}", "has no Endpoint part"),
    (f"{ENDPOINT};SharedAccessKey={KEY}", "has no SharedAccessKeyName part"),
    (f"{ENDPOINT};SharedAccessKeyName={POLICY}", "has no SharedAccessKey part"),
    (f"{ENDPOINT};SharedAccessKeyName={POLICY};SharedAccessKey=", "has an empty SharedAccessKey"),
    (f"SharedAccessKey={KEY};{ENDPOINT};SharedAccessKeyName=", "has an empty SharedAccessKeyName"),
    (
        f"{ENDPOINT};SharedAccessKeyName={POLICY};SharedAccessKeyXX={KEY}",
        "has a part (number 3) that is not one of Endpoint, SharedAccessKeyName, "
        "SharedAccessKey, EntityPath",
    ),
    (
        f"Endpoint=sb:///;SharedAccessKeyName={POLICY};SharedAccessKey={KEY}",
        "has an Endpoint with no host",
    ),
    (
        f"Endpoint=sb://:9093/;SharedAccessKeyName={POLICY};SharedAccessKey={KEY}",
        "has an Endpoint with no host",
    ),
    (f"Endpoint=;SharedAccessKeyName={POLICY};SharedAccessKey={KEY}", "has an empty Endpoint"),
    (
        f"Endpoint=amqps://{HOST}/;SharedAccessKeyName={POLICY};SharedAccessKey={KEY}",
        "has an Endpoint that does not start with sb://",
    ),
    (
        f"Endpoint=sb://{HOST}:90x3/;SharedAccessKeyName={POLICY};SharedAccessKey={KEY}",
        "has an Endpoint whose port is not a number from 1 to 65535",
    ),
    (f"{NS_KEY_LAST};SharedAccessKey={KEY}", "has SharedAccessKey twice"),
    (f"{KEY.rstrip('=')}{POLICY}{HOST}", "has a part (number 1) without '='"),
    (f"random text {KEY}=x;y", "has a part (number 1) that is not one of"),
    (
        f"Endpoint=sb://{HOST}/;SharedAccessSignature=SharedAccessSignature sr={HOST}&sig={KEY}",
        "holds a SharedAccessSignature (a SAS token), which the Kafka endpoint does not accept",
    ),
    ("  ;  ; ", "is empty"),
]

# Words every connection string shares, and that messages may name.
PUBLIC = CONNECTION_STRING_SHAPE + " sb://HOST[:PORT]/ SharedAccessSignature (a SAS token)"


def leaks(secret: str, text: str, *, public: str = "") -> list[str]:
    """Fragments (6 characters or more) of ``secret`` found in ``text``, beyond ``public``."""
    windows = {secret[i : i + 6] for i in range(len(secret) - 5)}
    return sorted(w for w in windows if w in text and w not in public)


def error_texts(exc: ValidationError) -> str:
    """Everything a ValidationError can print: str, repr, errors() and JSON."""
    return "\n".join([str(exc), repr(exc), repr(exc.errors()), exc.json()])


@pytest.mark.parametrize(
    ("text", "bootstrap", "hub"),
    [
        (NS_KEY_LAST, f"{HOST}:9093", None),
        (HUB_LEVEL, f"{HOST}:9093", HUB),
        (KEY_FIRST, f"{HOST}:9093", None),
        (KEY_FIRST_HUB, f"{HOST}:9093", HUB),
        (
            "endpoint=sb://localhost:19093/;sharedaccesskeyname=p;sharedaccesskey=k=",
            "localhost:19093",
            None,
        ),  # noqa: E501
        (f"Endpoint=sb://{HOST};SharedAccessKeyName=p;SharedAccessKey=k;", f"{HOST}:9093", None),
    ],
)
def test_well_formed_strings_give_host_port_and_hub_and_keep_the_key_out(
    clean_env, text, bootstrap, hub
):
    parts = parse_connection_string(text)
    assert (parts.bootstrap_server, parts.entity_path) == (bootstrap, hub)
    kafka = KafkaSettings(auth="connection_string", connection_string=text)
    assert kafka.bootstrap_servers == bootstrap
    assert kafka.connection_string is not None
    assert kafka.connection_string.get_secret_value() == text  # the password, untouched
    shown = "\n".join([repr(kafka), str(kafka), str(kafka.model_dump()), repr(parts)])
    assert leaks(KEY, shown) == [] and "k=" not in repr(parts)


def test_an_explicit_bootstrap_server_wins_over_the_endpoint(clean_env):
    kafka = KafkaSettings(
        auth="connection_string", connection_string=HUB_LEVEL, bootstrap_servers="other:9093"
    )
    assert kafka.bootstrap_servers == "other:9093"


@pytest.mark.parametrize(("text", "says"), MALFORMED, ids=[says for _, says in MALFORMED])
def test_malformed_strings_are_refused_by_part_and_never_echoed(clean_env, monkeypatch, text, says):
    with pytest.raises(ValueError) as parsed:
        parse_connection_string(text)
    assert says in str(parsed.value)
    assert "\n" not in str(parsed.value)

    with pytest.raises(ValidationError) as direct:
        KafkaSettings(auth="connection_string", connection_string=text)
    shown = error_texts(direct.value)
    assert says in shown
    assert leaks(KEY, shown) == []
    assert leaks(text, shown, public=PUBLIC) == []

    # Nested in a service's settings, and beside a model-level error of that service.
    with pytest.raises(ValidationError) as nested:
        ProducerSettings(transport="stdout", workers=2, kafka={"connection_string": text})
    assert leaks(KEY, error_texts(nested.value)) == []
    assert leaks(text, error_texts(nested.value), public=PUBLIC) == []

    monkeypatch.setenv("IOT_KAFKA_AUTH", "connection_string")
    monkeypatch.setenv("IOT_KAFKA_CONNECTION_STRING", text)
    with pytest.raises(SettingsError) as loaded:
        load_settings(ProducerSettings)
    message = str(loaded.value)
    assert message.startswith(
        "IOT_KAFKA_CONNECTION_STRING (--kafka-connection-string): the Event Hubs connection "
        f"string {says}"
    )
    assert "\n" not in message
    assert leaks(KEY, message) == [] and leaks(text, message, public=PUBLIC) == []


def test_model_level_errors_beside_a_valid_secret_never_show_it(clean_env, monkeypatch):
    for text in (NS_KEY_LAST, HUB_LEVEL, KEY_FIRST):
        with pytest.raises(ValidationError) as exc:
            ProducerSettings(
                transport="stdout",
                workers=2,
                kafka={"auth": "connection_string", "connection_string": text},
            )
        assert "transport=stdout needs workers=1" in str(exc.value)
        assert leaks(KEY, error_texts(exc.value)) == []
        assert leaks(text, error_texts(exc.value), public=PUBLIC) == []


def test_a_connection_string_given_to_the_wrong_setting_is_not_echoed(clean_env, monkeypatch):
    monkeypatch.setenv("IOT_KAFKA_AUTH", NS_KEY_LAST)  # pasted into the wrong variable
    with pytest.raises(SettingsError) as exc:
        load_settings(KafkaSettings)
    assert str(exc.value) == (
        "IOT_KAFKA_AUTH (--kafka-auth): holds what looks like an Event Hubs connection string "
        "(a SharedAccessKey), and this setting is not secret: put the connection string in "
        "IOT_KAFKA_CONNECTION_STRING"
    )
    monkeypatch.setenv("IOT_KAFKA_AUTH", "sas")  # not a secret: the value helps
    with pytest.raises(SettingsError) as exc:
        load_settings(KafkaSettings)
    assert str(exc.value) == (
        "IOT_KAFKA_AUTH (--kafka-auth): Input should be 'none', 'connection_string' or 'entra' "
        "(got 'sas')"
    )


def test_a_missing_secret_names_its_variable(clean_env, monkeypatch):
    monkeypatch.setenv("IOT_KAFKA_AUTH", "connection_string")
    with pytest.raises(SettingsError) as exc:
        load_settings(KafkaSettings)
    assert str(exc.value) == (
        "[kafka] auth=connection_string needs a connection string: set "
        "IOT_KAFKA_CONNECTION_STRING (in the environment or a .env file)"
    )


def test_env_names_and_flags_come_from_the_model():
    assert KafkaSettings.env_name("ssl_ca_location") == "IOT_KAFKA_SSL_CA_LOCATION"
    assert KafkaSettings.flag("ssl_ca_location") == "--kafka-ssl-ca-location"
    assert ProducerSettings.env_name("entra_credential") == "IOT_PRODUCER_ENTRA_CREDENTIAL"
    assert ProducerSettings.flag("fleet_size") == "--fleet-size"
    assert ProducerSettings.secret_fields() == frozenset({"connection_string", "password"})
    # A Spark Connect URL may carry a token (Databricks: sc://host:443/;token=...).
    assert "remote" in ProcessorSettings.secret_fields()
    with pytest.raises(KeyError, match="KafkaSettings has no setting 'ca_file'"):
        KafkaSettings.env_name("ca_file")


# --------------------------------------------------------------------------- the CLIs

CLI_CASES = [
    # (connection string, what the one line must say)
    (f"{ENDPOINT};SharedAccessKeyName={POLICY};SharedAccessKeyXX={KEY}", "has a part (number 3)"),
    (
        f"Endpoint=sb:///;SharedAccessKeyName={POLICY};SharedAccessKey={KEY}",
        "has an Endpoint with no host",
    ),  # noqa: E501
    (f"SharedAccessKey={KEY};SharedAccessKeyName={POLICY}", "has no Endpoint part"),
    (f"{KEY.rstrip('=')} {HOST}", "has a part (number 1) without '='"),
]
COMMANDS = {
    "producer": ["producer", "--count", "5"],
    "processor": ["processor", "run", "--trigger", "available_now"],
    "loadtest": ["loadtest", "run", "--target", "external"],
}


def given(text: str) -> list[tuple[str, dict[str, str], list[str]]]:
    """The string once from the environment, once as a flag (the log must not keep argv)."""
    return [
        ("env", {"IOT_KAFKA_CONNECTION_STRING": text}, []),
        ("flag", {}, ["--kafka-connection-string", text]),
    ]


def assert_refused_in_one_line(
    run: CliRun, *, home: Path, command: str, text: str, says: str, given_by: str
) -> None:
    """Exit 2, nothing on stdout, one line naming the part; no fragment there or in the log."""
    assert run.code == 2, (given_by, run.err)
    assert run.out == ""
    lines = run.err.splitlines()
    assert len(lines) == 1, run.err
    assert lines[0].startswith(
        "error: invalid settings: IOT_KAFKA_CONNECTION_STRING (--kafka-connection-string): "
        f"the Event Hubs connection string {says}"
    )
    logs = sorted((home / "logs").glob("*.log"))
    assert [p.name for p in logs] == [f"{command}.log"]
    written = run.err + logs[0].read_text()
    assert leaks(KEY, written) == [], given_by
    assert leaks(text, written, public=PUBLIC) == [], given_by


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(("text", "says"), CLI_CASES, ids=[says for _, says in CLI_CASES])
def test_the_clis_refuse_a_malformed_string_in_one_line_without_a_fragment(
    run_cli, tmp_path, command, text, says
):
    home = tmp_path / "home"
    for given_by, extra_env, extra_args in given(text):
        run = run_cli(
            *COMMANDS[command], *extra_args, home=home, cwd=tmp_path,
            env={"IOT_KAFKA_AUTH": "connection_string", **extra_env},
        )  # fmt: skip
        assert_refused_in_one_line(
            run, home=home, command=command, text=text, says=says, given_by=given_by
        )


@pytest.mark.subprocess
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_python_m_refuses_a_malformed_string_as_in_process(tmp_path, command):
    """The same through the real entry point, ``python -m``, for one malformed string."""
    text, says = CLI_CASES[0]
    home = tmp_path / "home"
    for given_by, extra_env, extra_args in given(text):
        run = run_python(
            "-m", *COMMANDS[command], *extra_args, home=home, cwd=tmp_path,
            env={"IOT_KAFKA_AUTH": "connection_string", **extra_env}, timeout_s=60,
        )  # fmt: skip
        assert_refused_in_one_line(
            run, home=home, command=command, text=text, says=says, given_by=given_by
        )
