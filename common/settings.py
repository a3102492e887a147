"""Typed settings shared by the services, and the loader that fills them.

Every service has one settings object. Values come from, lowest precedence first:

1. a TOML file (``--config FILE`` or ``IOT_CONFIG_FILE``), one table per settings class;
2. a git-ignored ``.env`` file in the working directory;
3. environment variables (``<prefix><FIELD>``, e.g. ``IOT_KAFKA_BOOTSTRAP_SERVERS``);
4. command-line flags (``--bootstrap-servers``, ``--kafka-topic`` ...).

Each environment variable name is derived once, from the class's ``env_prefix``
and the field name. Secrets are ``SecretStr`` and never printed.
"""

from __future__ import annotations

import argparse
import os
import tomllib
import types
import typing
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import Field, SecretStr, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
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


class Settings(BaseSettings):
    """Base of every settings class: file < .env < environment < CLI flags."""

    config_section: ClassVar[str] = ""
    cli_prefix: ClassVar[str] = ""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", validate_default=True)

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


class KafkaSettings(Settings):
    """How to reach the broker: local Kafka or Azure Event Hubs' Kafka endpoint.

    Switching from a local broker to Event Hubs is a change of these settings only:
    ``auth=connection_string`` with ``connection_string`` (and the namespace's
    ``bootstrap_servers``, derived from the connection string when left empty), or
    ``auth=entra`` with ``bootstrap_servers`` and an Azure credential.
    """

    config_section: ClassVar[str] = "kafka"
    cli_prefix: ClassVar[str] = "kafka-"
    model_config = SettingsConfigDict(env_prefix="IOT_KAFKA_")

    bootstrap_servers: str = Field(
        "", description="host:port[,host:port]; Event Hubs: NS.servicebus.windows.net:9093"
    )
    topic: str = Field("iot-events", description="Topic (Event Hubs: the event hub's name)")
    auth: Literal["none", "connection_string", "entra"] = Field(
        "none",
        description="none: PLAINTEXT; connection_string: SASL_SSL+PLAIN; entra: OAUTHBEARER",
    )
    connection_string: SecretStr | None = Field(
        None, description="Event Hubs connection string (secret)"
    )
    ssl_ca_location: Path | None = Field(
        None, description="CA bundle for TLS (default: system CAs)"
    )
    entra_scope: str = Field("", description="OAuth scope; default https://<namespace>/.default")

    @model_validator(mode="after")
    def _derive_bootstrap(self) -> KafkaSettings:
        if self.auth == "connection_string" and self.connection_string is None:
            raise ValueError(
                "auth=connection_string needs a connection string: set IOT_KAFKA_CONNECTION_STRING "
                "(in the environment or a .env file)"
            )
        if not self.bootstrap_servers and self.connection_string is not None:
            host = endpoint_host(self.connection_string.get_secret_value())
            object.__setattr__(self, "bootstrap_servers", f"{host}:9093")
        if not self.bootstrap_servers:
            object.__setattr__(self, "bootstrap_servers", "localhost:9092")
        return self

    @property
    def namespace_host(self) -> str:
        """Host part of the first bootstrap server."""
        return self.bootstrap_servers.split(",")[0].rsplit(":", 1)[0]


def endpoint_host(connection_string: str) -> str:
    """Host of the ``Endpoint=sb://HOST/`` part of an Event Hubs connection string.

    Raises:
        ValueError: the string has no Endpoint (the message never repeats the secret).

    """
    for part in connection_string.split(";"):
        key, _, value = part.partition("=")
        if key.strip().lower() == "endpoint" and "://" in value:
            return value.split("://", 1)[1].split("/", 1)[0].split(":")[0]
    raise ValueError(
        "the Event Hubs connection string has no "
        "'Endpoint=sb://<namespace>.servicebus.windows.net/' part; "
        "copy it whole from the portal's 'Shared access policies' page"
    )


S = TypeVar("S", bound=Settings)


def _flag(cls: type[Settings], name: str) -> str:
    return "--" + (cls.cli_prefix + name).replace("_", "-")


def _is_bool(annotation: Any) -> bool:
    if annotation is bool:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return bool in typing.get_args(annotation)
    return False


def _nested_settings(annotation: Any) -> type[Settings] | None:
    if isinstance(annotation, type) and issubclass(annotation, Settings):
        return annotation
    return None


def add_settings_arguments(parser: argparse.ArgumentParser, cls: type[Settings]) -> None:
    """Add one ``--flag`` per field of ``cls`` to ``parser`` (default: not given)."""
    group = parser.add_argument_group(
        f"{cls.config_section} settings (env {cls.model_config.get('env_prefix', '')}*)"
    )
    for name, info in cls.model_fields.items():
        nested = _nested_settings(info.annotation)
        if nested is not None:
            add_settings_arguments(parser, nested)
            continue
        help_text = info.description or ""
        if _is_bool(info.annotation):
            group.add_argument(
                _flag(cls, name), dest=f"{cls.config_section}.{name}",
                action=argparse.BooleanOptionalAction, default=None, help=help_text,
            )  # fmt: skip
        else:
            group.add_argument(
                _flag(cls, name), dest=f"{cls.config_section}.{name}", default=None,
                metavar=name.upper(), help=help_text,
            )  # fmt: skip


def load_settings(cls: type[S], args: argparse.Namespace | None = None, **overrides: Any) -> S:
    """Build ``cls`` from the file, ``.env``, the environment and the parsed CLI flags.

    Args:
        cls: The settings class.
        args: Parsed flags from a parser given ``add_settings_arguments(parser, cls)``;
            a ``config`` attribute, if present, names the TOML file.
        **overrides: Values set in code (e.g. nested settings already loaded).

    Returns:
        The validated settings.

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
        return cls(**cli, **overrides)
    finally:
        _config_file.reset(token)


class LakeSettings(Settings):
    """Where the Delta tables and checkpoints live (processor writes, dashboard reads)."""

    config_section: ClassVar[str] = "lake"
    cli_prefix: ClassVar[str] = "lake-"
    model_config = SettingsConfigDict(env_prefix="IOT_LAKE_")

    root: str = Field(
        default_factory=lambda: str(state_dir() / "lake"),
        description="Folder or URI (abfss://, s3a://) holding every table",
    )

    def table(self, name: str) -> str:
        """Location of a table, e.g. ``table('gold/device_1m')``."""
        return f"{self.root.rstrip('/')}/{name}"

    def checkpoint(self, query: str) -> str:
        """Checkpoint location of one streaming query; every query has its own."""
        return f"{self.root.rstrip('/')}/_checkpoints/{query}"
