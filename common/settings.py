"""Typed settings shared by the services, and the loader that fills them.

Every service has one settings object. Values come from, lowest precedence first:

1. a TOML file (``--config FILE`` or ``IOT_CONFIG_FILE``), one table per settings class;
2. a git-ignored ``.env`` file in the working directory;
3. environment variables (``<prefix><FIELD>``, e.g. ``IOT_KAFKA_BOOTSTRAP_SERVERS``);
4. command-line flags (``--bootstrap-servers``, ``--kafka-topic`` ...).

Each environment variable name is derived once, from the class's ``env_prefix``
and the field name (``Settings.env_name``). Secrets are ``SecretStr``: never printed,
not in ``--help``, and not in any validation error (``load_settings`` turns those into
one line naming the variable and flag that are wrong).
"""

from __future__ import annotations

import argparse
import os
import re
import tomllib
import types
import typing
from contextvars import ContextVar
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from common.cli import local_path
from common.lake import (
    LOCAL_DISK_SPARK_CONF,
    S3_SCHEMES,
    Query,
    Table,
    checkpoint_location,
    lake_scheme,
    table_location,
)
from common.paths import state_dir

CONFIG_FILE_ENV = "IOT_CONFIG_FILE"

_config_file: ContextVar[Path | None] = ContextVar("_config_file", default=None)


class _TomlSectionSource(PydanticBaseSettingsSource):
    """Reads the settings class's own table from the TOML config file."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ returns the whole table

    def __call__(self) -> dict[str, Any]:
        path = _config_file.get() or (
            Path(os.environ[CONFIG_FILE_ENV]) if os.environ.get(CONFIG_FILE_ENV) else None
        )
        if path is None:
            return {}
        if not path.is_file():
            raise FileNotFoundError(f"config file {path} does not exist")
        with path.open("rb") as fh:
            data = tomllib.load(fh)
        section = data.get(self.settings_cls.config_section, {})
        if not isinstance(section, dict):
            raise ValueError(f"[{self.settings_cls.config_section}] in {path} must be a table")
        return section


class SettingsError(ValueError):
    """Settings that failed validation, said in one line that never holds a secret."""


# Shown in place of a secret wherever pydantic would show the input.
_HIDDEN = SecretStr("hidden")
# Text holding one of these is treated as a connection string, whatever field it was given to.
_SECRET_MARKERS = ("sharedaccesskey", "sharedaccesssignature")


def _looks_secret(text: str) -> bool:
    folded = text.lower()
    return any(marker in folded for marker in _SECRET_MARKERS)


def _is_secret(annotation: Any) -> bool:
    if annotation is SecretStr:
        return True
    return any(_is_secret(arg) for arg in typing.get_args(annotation))


def _hide(value: Any, secret_fields: frozenset[str], name: Any = None) -> Any:
    """``value`` (of field ``name``) with every secret in it replaced by ``_HIDDEN``.

    Returns the same object when there is nothing to hide.
    """
    if name in secret_fields and value is not None and not isinstance(value, SecretStr):
        return _HIDDEN
    if isinstance(value, str | os.PathLike):
        return _HIDDEN if _looks_secret(str(value)) else value
    if isinstance(value, dict):
        hidden = {k: _hide(v, secret_fields, k) for k, v in value.items()}
        return value if all(hidden[k] is value[k] for k in value) else hidden
    if isinstance(value, list | tuple):
        items = [_hide(v, secret_fields) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def _hidden_errors(exc: ValidationError, secret_fields: frozenset[str]) -> ValidationError:
    """``exc`` with no secret in any error's input (``exc`` itself if it held none).

    pydantic records each error's raw input, and a model-level check's input is the
    whole input dict: this replaces secret fields' values, and any text that looks like
    a connection string, before the error leaves the model.
    """
    details: list[InitErrorDetails] = []
    changed = False
    for err in exc.errors(include_url=False):
        raw = err.get("input")
        shown = _hide(raw, secret_fields, err["loc"][-1] if err["loc"] else None)
        changed = changed or shown is not raw
        details.append(
            {
                "type": PydanticCustomError(err["type"], err["msg"]),
                "loc": err["loc"],
                "input": shown,
            }
        )
    return ValidationError.from_exception_data(exc.title, details) if changed else exc


class Settings(BaseSettings):
    """Base of every settings class: file < .env < environment < CLI flags.

    No validation error of a settings class shows a secret: secret fields
    (``SecretStr``) are sealed before they are validated, and errors are scrubbed of
    them (see ``_hidden_errors``).
    """

    config_section: ClassVar[str] = ""
    cli_prefix: ClassVar[str] = ""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", validate_default=True)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise _hidden_errors(exc, type(self).secret_fields()) from None

    @model_validator(mode="before")
    @classmethod
    def _seal_secrets(cls, data: Any) -> Any:
        """Wrap secret fields' raw text in ``SecretStr`` so that field errors never show it."""
        if not isinstance(data, dict):
            return data
        own = {n for n, info in cls.model_fields.items() if _is_secret(info.annotation)}
        return {
            k: SecretStr(str(v)) if k in own and v is not None and not isinstance(v, SecretStr)
            else v
            for k, v in data.items()
        }  # fmt: skip

    @field_validator("*", mode="before")
    @classmethod
    def _no_connection_string_in_plain_settings(cls, value: Any, info: ValidationInfo) -> Any:
        """Refuse a connection string given to a setting that is not secret, unshown.

        Before the field's own checks, which may quote a value they refuse.
        """
        field = cls.model_fields.get(info.field_name or "")
        if field is None or _is_secret(field.annotation):
            return value
        if isinstance(value, str | os.PathLike) and _looks_secret(str(value)):
            raise ValueError(
                "holds what looks like an Event Hubs connection string (a SharedAccessKey), "
                "and this setting is not secret: put the connection string in "
                f"{KafkaSettings.env_name('connection_string')}"
            )
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Order the sources: init (CLI) > environment > .env > TOML file."""
        return (init_settings, env_settings, dotenv_settings, _TomlSectionSource(settings_cls))

    @classmethod
    def env_name(cls, field: str) -> str:
        """The environment variable of a field, e.g. ``IOT_KAFKA_SSL_CA_LOCATION``.

        Raises:
            KeyError: ``cls`` has no such field.

        """
        if field not in cls.model_fields:
            raise KeyError(f"{cls.__name__} has no setting {field!r}")
        return (str(cls.model_config.get("env_prefix", "")) + field).upper()

    @classmethod
    def env_vars(cls, **values: object) -> dict[str, str]:
        """Environment variables that give a child process these settings.

        ``KafkaSettings.env_vars(topic="t")`` is ``{"IOT_KAFKA_TOPIC": "t"}``. Values are
        passed as text (``SecretStr`` revealed: the child needs it), ``None`` ones left out.

        Raises:
            KeyError: ``cls`` has no such field.

        """
        return {
            cls.env_name(name): (
                value.get_secret_value() if isinstance(value, SecretStr) else str(value)
            )
            for name, value in values.items()
            if value is not None
        }

    @classmethod
    def flag(cls, field: str) -> str:
        """The command-line flag of a field, e.g. ``--kafka-ssl-ca-location``."""
        cls.env_name(field)  # the same check that the field exists
        return "--" + (cls.cli_prefix + field).replace("_", "-")

    @classmethod
    def secret_fields(cls) -> frozenset[str]:
        """Names of the secret fields of this class and of its nested settings."""
        names: set[str] = set()
        for name, info in cls.model_fields.items():
            nested = _nested_settings(info.annotation)
            if nested is not None:
                names |= nested.secret_fields()
            elif _is_secret(info.annotation):
                names.add(name)
        return frozenset(names)


CONNECTION_STRING_SHAPE = (
    "Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<policy>;"
    "SharedAccessKey=<key>[;EntityPath=<event hub>]"
)
_WHERE_TO_COPY = (
    "copy it whole from the portal (the namespace's or event hub's 'Shared access policies') "
    "or from 'terraform output -raw kafka_connection_string'"
)
_PARTS = ("Endpoint", "SharedAccessKeyName", "SharedAccessKey", "EntityPath")
_REQUIRED_PARTS = _PARTS[:3]
_HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
EVENTHUBS_KAFKA_PORT = 9093


@dataclass(frozen=True)
class ConnectionString:
    """The public parts of an Event Hubs connection string (the key is not kept).

    Attributes:
        host: The namespace host, e.g. ``pulse-ns.servicebus.windows.net``.
        port: The Kafka port: the Endpoint's, else 9093.
        key_name: The shared access policy's name.
        entity_path: The event hub of a hub-level string, else None.
    """

    host: str
    port: int
    key_name: str
    entity_path: str | None

    @property
    def bootstrap_server(self) -> str:
        """``host:port`` of the Kafka endpoint."""
        return f"{self.host}:{self.port}"


def _refuse(what: str) -> ValueError:
    return ValueError(f"the Event Hubs connection string {what}; {_WHERE_TO_COPY}")


def _endpoint(value: str) -> tuple[str, int]:
    """Host and port of ``sb://HOST[:PORT][/]``; errors name the part, never its value."""
    scheme, sep, rest = value.strip().partition("://")
    if not sep or scheme.lower() != "sb":
        raise _refuse("has an Endpoint that does not start with sb://")
    authority, _, path = rest.partition("/")
    if path:
        raise _refuse("has an Endpoint with a path after the host (expected sb://HOST[:PORT]/)")
    host, colon, port_text = authority.partition(":")
    if not host:
        raise _refuse("has an Endpoint with no host (expected sb://HOST[:PORT]/)")
    if not _HOST_RE.match(host):
        raise _refuse("has an Endpoint whose host is not a host name")
    if not colon:
        return host, EVENTHUBS_KAFKA_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise _refuse("has an Endpoint whose port is not a number from 1 to 65535")
    return host, int(port_text)


def parse_connection_string(text: str) -> ConnectionString:
    """Check an Event Hubs connection string and return its public parts.

    The string is ``Endpoint=sb://HOST[:PORT]/;SharedAccessKeyName=...;SharedAccessKey=...``
    with an optional ``EntityPath=...``, parts in any order, names in any case.

    Args:
        text: The connection string (a secret).

    Returns:
        Host, port, policy name and event hub.

    Raises:
        ValueError: A part is unknown, repeated, missing or empty, or the Endpoint is not
            ``sb://HOST[:PORT]/``. The message names the part, never any of the text.

    """
    values: dict[str, str] = {}
    segments = [seg for seg in text.split(";") if seg.strip()]
    if not segments:
        raise _refuse(f"is empty (expected {CONNECTION_STRING_SHAPE})")
    canonical = {name.lower(): name for name in _PARTS}
    for position, segment in enumerate(segments, start=1):
        key, sep, value = segment.partition("=")
        name = canonical.get(key.strip().lower())
        if not sep:
            raise _refuse(f"has a part (number {position}) without '=' ({CONNECTION_STRING_SHAPE})")
        if name is None:
            if key.strip().lower() == "sharedaccesssignature":
                raise _refuse(
                    "holds a SharedAccessSignature (a SAS token), which the Kafka endpoint "
                    "does not accept: use a shared access policy's connection string"
                )
            raise _refuse(f"has a part (number {position}) that is not one of {', '.join(_PARTS)}")
        if name in values:
            raise _refuse(f"has {name} twice")
        if not value.strip():
            raise _refuse(f"has an empty {name}")
        values[name] = value
    missing = [name for name in _REQUIRED_PARTS if name not in values]
    if missing:
        raise _refuse(f"has no {' and no '.join(missing)} part ({CONNECTION_STRING_SHAPE})")
    host, port = _endpoint(values["Endpoint"])
    return ConnectionString(
        host=host,
        port=port,
        key_name=values["SharedAccessKeyName"].strip(),
        entity_path=values["EntityPath"].strip() if "EntityPath" in values else None,
    )


class KafkaSettings(Settings):
    """How to reach the broker: local Kafka or Azure Event Hubs' Kafka endpoint.

    Switching from a local broker to Event Hubs is a change of these settings only:
    ``auth=connection_string`` with ``connection_string`` (and the namespace's
    ``bootstrap_servers``, derived from the connection string's Endpoint when left
    empty), or ``auth=entra`` with ``bootstrap_servers`` and an Azure credential.
    """

    config_section: ClassVar[str] = "kafka"
    cli_prefix: ClassVar[str] = "kafka-"
    model_config = SettingsConfigDict(env_prefix="IOT_KAFKA_")

    bootstrap_servers: str = Field(
        "",
        description="host:port[,host:port]; Event Hubs: NS.servicebus.windows.net:9093; "
        "default: the connection string's Endpoint (port 9093 unless it gives one), else "
        "localhost:9092",
    )
    topic: str = Field("iot-events", description="Topic (Event Hubs: the event hub's name)")
    alerts_topic: str = Field(
        "iot-alerts",
        description="Topic of the real-time threshold alerts (Event Hubs: another event hub)",
    )
    auth: Literal["none", "connection_string", "entra"] = Field(
        "none",
        description="none: PLAINTEXT; connection_string: SASL_SSL+PLAIN; entra: OAUTHBEARER",
    )
    connection_string: SecretStr | None = Field(
        None, description="Event Hubs connection string of a namespace or event hub"
    )
    ssl_ca_location: Path | None = Field(
        None, description="CA bundle (PEM) for TLS; default: the system CAs"
    )
    entra_scope: str = Field("", description="OAuth scope; default: https://<namespace>/.default")

    @field_validator("connection_string")
    @classmethod
    def _well_formed(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            parse_connection_string(value.get_secret_value())
        return value

    @model_validator(mode="after")
    def _derive_bootstrap(self) -> KafkaSettings:
        # A setting that only one auth mode uses is refused under another, never ignored.
        for field, mode in (("connection_string", "connection_string"), ("entra_scope", "entra")):
            if getattr(self, field) and self.auth != mode:
                raise ValueError(
                    f"{self.env_name(field)} is set, but {self.env_name('auth')} is "
                    f"{self.auth}, which does not use it: set {self.env_name('auth')}={mode}, "
                    f"or unset {self.env_name(field)}"
                )
        if self.auth == "connection_string" and self.connection_string is None:
            raise ValueError(
                "auth=connection_string needs a connection string: set "
                f"{self.env_name('connection_string')} (in the environment or a .env file)"
            )
        parts = self.connection_parts
        if not self.bootstrap_servers and parts is not None:
            object.__setattr__(self, "bootstrap_servers", parts.bootstrap_server)
        if not self.bootstrap_servers:
            object.__setattr__(self, "bootstrap_servers", "localhost:9092")
        return self

    @property
    def connection_parts(self) -> ConnectionString | None:
        """The connection string's public parts, if there is one."""
        if self.connection_string is None:
            return None
        return parse_connection_string(self.connection_string.get_secret_value())

    @property
    def namespace_host(self) -> str:
        """Host part of the first bootstrap server."""
        return self.bootstrap_servers.split(",")[0].rsplit(":", 1)[0]


S = TypeVar("S", bound=Settings)


def _is_bool(annotation: Any) -> bool:
    if annotation is bool:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return bool in typing.get_args(annotation)
    return False


def _choices(annotation: Any) -> list[str] | None:
    """The allowed values of a ``Literal`` or ``Enum`` field (optional or not), else None."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        found = [c for a in typing.get_args(annotation) if (c := _choices(a)) is not None]
        return found[0] if len(found) == 1 else None
    if typing.get_origin(annotation) is Literal:
        values = typing.get_args(annotation)
        return list(values) if all(isinstance(v, str) for v in values) else None
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        values = [member.value for member in annotation]
        return values if all(isinstance(v, str) for v in values) else None
    return None


def _nested_settings(annotation: Any) -> type[Settings] | None:
    if isinstance(annotation, type) and issubclass(annotation, Settings):
        return annotation
    return None


def _shown_default(info: FieldInfo) -> str:
    """A field's default as a user would write it (``true``, ``unset``, ``""`` ...)."""
    try:
        value = info.get_default(call_default_factory=True, validated_data={})
    except Exception:  # noqa: BLE001 - a factory needing other fields: say so, not fail --help
        return "computed"
    if isinstance(value, Enum):
        value = value.value
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if value == "":
        return '""'
    return str(value)


# A description that gives its default itself: "...; default: X" or "X (default)".
_SAYS_DEFAULT = re.compile(r"\bdefault(:|\))")


def _help(cls: type[Settings], name: str, info: FieldInfo) -> str:
    """Help of one flag: its description, its default (never a secret's) and its variable."""
    env = cls.env_name(name)
    if _is_secret(info.annotation):
        extra = f"secret: set {env} in the environment or .env, where others cannot see it"
    elif _SAYS_DEFAULT.search(info.description or ""):  # it says what the default means
        extra = f"env {env}"
    else:
        extra = f"default: {_shown_default(info)}; env {env}"
    text = f"{info.description} ({extra})" if info.description else extra
    return text.replace("%", "%%")  # argparse formats help with %


def add_settings_arguments(parser: argparse.ArgumentParser, cls: type[Settings]) -> None:
    """Add one ``--flag`` per field of ``cls`` to ``parser`` (default: not given).

    Each flag's help shows the field's default (never a secret's) and environment
    variable; ``Literal`` and ``Enum`` fields take only their allowed values, which
    argparse lists and checks.
    """
    group = parser.add_argument_group(
        f"{cls.config_section} settings (env {cls.model_config.get('env_prefix', '')}*)"
    )
    for name, info in cls.model_fields.items():
        nested = _nested_settings(info.annotation)
        if nested is not None:
            add_settings_arguments(parser, nested)
            continue
        options: dict[str, Any] = {
            "dest": f"{cls.config_section}.{name}", "default": None,
            "help": _help(cls, name, info),
        }  # fmt: skip
        choices = _choices(info.annotation)
        if _is_bool(info.annotation):
            options["action"] = argparse.BooleanOptionalAction
        elif choices is not None:
            options["choices"] = choices
        else:
            options["metavar"] = name.upper()
        group.add_argument(cls.flag(name), **options)


def settings_message(cls: type[Settings], exc: ValidationError) -> str:
    """One line saying what is wrong with each invalid setting, never with a secret.

    Each error names the environment variable and flag it is about and, for a field
    that is not secret, the value given.
    """
    secrets_ = cls.secret_fields()
    said = []
    for err in _hidden_errors(exc, secrets_).errors(include_url=False):
        owner, name = cls, None
        for part in err["loc"]:
            info = owner.model_fields.get(part) if isinstance(part, str) else None
            if info is None:
                break
            nested = _nested_settings(info.annotation)
            if nested is None:
                name = part
                break
            owner = nested
        message = err["msg"].removeprefix("Value error, ")
        raw = err.get("input")
        if name is None:
            said.append(f"[{owner.config_section}] {message}")
            continue
        if (
            err["type"] != "value_error"
            and name not in secrets_
            and isinstance(raw, str | int | float)
        ):
            message += f" (got {raw!r})"
        said.append(f"{owner.env_name(name)} ({owner.flag(name)}): {message}")
    return "; ".join(said)


def load_settings(cls: type[S], args: argparse.Namespace | None = None, **overrides: Any) -> S:
    """Build ``cls`` from the file, ``.env``, the environment and the parsed CLI flags.

    Args:
        cls: The settings class.
        args: Parsed flags from a parser given ``add_settings_arguments(parser, cls)``;
            a ``config`` attribute, if present, names the TOML file.
        **overrides: Values set in code (e.g. nested settings already loaded).

    Returns:
        The validated settings.

    Raises:
        SettingsError: A setting is invalid (one line, see ``settings_message``).
        FileNotFoundError: The TOML file does not exist.

    """
    cli: dict[str, Any] = {}
    config = None
    if args is not None:
        config = getattr(args, "config", None)
        prefix = cls.config_section + "."
        for key, value in vars(args).items():
            if key.startswith(prefix) and value is not None:
                cli[key.removeprefix(prefix)] = value
    token = _config_file.set(Path(config) if config else None)
    try:
        for name, info in cls.model_fields.items():
            nested = _nested_settings(info.annotation)
            if nested is not None and name not in overrides:
                overrides[name] = load_settings(nested, args)
        try:
            return cls(**cli, **overrides)
        except ValidationError as exc:
            raise SettingsError(settings_message(cls, exc)) from None
    finally:
        _config_file.reset(token)


class LakeSettings(Settings):
    """Where the Delta tables and checkpoints live (processor writes, dashboard reads).

    The root is one URI for every service: the processor writes it through Spark
    (``s3a://`` through Hadoop's S3A), the dashboard and the load test read the same
    URI through delta-rs. The ``s3_*`` settings say how to reach an S3 lake, once for
    both: ``spark_conf`` gives them to Spark, ``storage_options`` to delta-rs. Left
    empty, each side uses its default AWS credential chain and endpoint.
    """

    config_section: ClassVar[str] = "lake"
    cli_prefix: ClassVar[str] = "lake-"
    model_config = SettingsConfigDict(env_prefix="IOT_LAKE_")

    root: str = Field(
        default_factory=lambda: str(state_dir() / "lake"),
        description="Folder or URI (abfss://, s3a://) holding every table",
    )
    s3_endpoint: str = Field(
        "",
        description="S3 endpoint URL of an S3-compatible store, e.g. http://127.0.0.1:5000 "
        "(http:// turns TLS off); default: AWS's endpoint for the region",
    )
    s3_region: str = Field("", description="S3 region; default: the AWS SDKs' own lookup")
    s3_access_key_id: str = Field(
        "", description="S3 access key id; default: the AWS credential chain"
    )
    s3_secret_access_key: SecretStr | None = Field(
        None, description="S3 secret access key (with the access key id)"
    )
    s3_path_style: bool = Field(
        False,
        description="Path-style requests (http://host/bucket/key), which most S3-compatible "
        "stores need",
    )

    @model_validator(mode="after")
    def _keys_in_pairs(self) -> LakeSettings:
        if bool(self.s3_access_key_id) != (self.s3_secret_access_key is not None):
            raise ValueError(
                f"set both {self.env_name('s3_access_key_id')} and "
                f"{self.env_name('s3_secret_access_key')}, or neither"
            )
        return self

    def table(self, table: Table | str) -> str:
        """Location of a table, e.g. ``table(Table.GOLD_DEVICE_1M)``."""
        return table_location(self.root, table)

    def checkpoint(self, query: Query | str) -> str:
        """Checkpoint location of one streaming query; every query has its own."""
        return checkpoint_location(self.root, query)

    @property
    def on_s3(self) -> bool:
        """True when the root is an S3 URI (``s3a://`` or ``s3://``)."""
        return lake_scheme(self.root) in S3_SCHEMES

    def spark_conf(self) -> dict[str, str]:
        """Spark settings for the lake: its file system's, and S3A's endpoint, region, keys.

        On a local disk, checkpoints and Delta commits rename in Java
        (``LOCAL_DISK_SPARK_CONF``). On S3, Spark redacts the keys
        (``spark.redaction.regex``) in its UI and event logs.
        """
        if local_path(self.root) is not None:
            return dict(LOCAL_DISK_SPARK_CONF)
        if not self.on_s3:
            return {}
        s3a = "spark.hadoop.fs.s3a."
        # The log store is Delta's default for s3a:// (S3SingleDriverLogStore).
        conf: dict[str, str] = {}
        if self.s3_endpoint:
            conf[s3a + "endpoint"] = self.s3_endpoint
            conf[s3a + "connection.ssl.enabled"] = str(self._tls).lower()
        if self.s3_region:
            conf[s3a + "endpoint.region"] = self.s3_region
        if self.s3_path_style:
            conf[s3a + "path.style.access"] = "true"
        if self.s3_secret_access_key is not None:
            conf[s3a + "access.key"] = self.s3_access_key_id
            conf[s3a + "secret.key"] = self.s3_secret_access_key.get_secret_value()
        return conf

    def storage_options(self) -> dict[str, str]:
        """delta-rs's (and polars') ``storage_options`` for the lake; empty off S3."""
        if not self.on_s3:
            return {}
        options: dict[str, str] = {}
        if self.s3_endpoint:
            options["AWS_ENDPOINT_URL"] = self.s3_endpoint
            options["AWS_ALLOW_HTTP"] = str(not self._tls).lower()
        if self.s3_region:
            options["AWS_REGION"] = self.s3_region
        if self.s3_path_style:
            options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
        if self.s3_secret_access_key is not None:
            options["AWS_ACCESS_KEY_ID"] = self.s3_access_key_id
            options["AWS_SECRET_ACCESS_KEY"] = self.s3_secret_access_key.get_secret_value()
        return options

    @property
    def _tls(self) -> bool:
        return not self.s3_endpoint.lower().startswith("http://")


class FleetSettings(Settings):
    """The simulated fleet, one definition for every service that builds it.

    The producer simulates this fleet, the processor writes it as the device
    dimension, and the load test hands it to both: each service's settings class
    derives from this one, so the fields keep that class's prefix and flags
    (``IOT_PRODUCER_FLEET_SIZE``, ``IOT_PROCESSOR_SEED``, ``--fleet-size`` ...).
    """

    fleet_size: int = Field(
        100, ge=1, description="Simulated devices (the producer's and the processor's must match)"
    )
    seed: int = Field(
        42,
        description="Seed of the fleet and of the producer's event stream (the producer's "
        "and the processor's must match)",
    )

    def fleet(self) -> dict[str, int]:
        """The fleet settings' values, e.g. ``ProcessorSettings.env_vars(**s.fleet())``."""
        return {name: getattr(self, name) for name in FleetSettings.model_fields}
