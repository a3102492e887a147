"""The settings framework: the base class every service's settings derive from, and the loader.

Every service has one settings object. Values come from, lowest precedence first:

1. a TOML file (``--config FILE`` or ``IOT_CONFIG_FILE``), one table per settings class;
2. a git-ignored ``.env`` file in the working directory;
3. environment variables (``<prefix><FIELD>``, e.g. ``IOT_KAFKA_BOOTSTRAP_SERVERS``);
4. command-line flags (``--bootstrap-servers``, ``--kafka-topic`` ...).

The file, ``.env`` and the environment are pydantic-settings' own sources. The flags are
argparse's, one per field (``add_settings_arguments``): pydantic-settings' CLI source
names a prefixed class's flags ``--kafka.topic``, and the flags users have are
``--kafka-topic``.

Each environment variable name is derived once, from the class's ``env_prefix``
and the field name (``Settings.env_name``). Secrets are ``SecretStr``: never printed,
not in ``--help``, and not in any validation error (``load_settings`` turns those into
one line naming the variable and flag that are wrong).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import types
import typing
from contextvars import ContextVar
from dataclasses import dataclass
from enum import Enum, StrEnum
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, cast

from pydantic import (
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
    TomlConfigSettingsSource,
)

from common.cli import ArgumentParser, console

CONFIG_FILE_ENV = "IOT_CONFIG_FILE"

_config_file: ContextVar[Path | None] = ContextVar("_config_file", default=None)


class _DotenvLineWarning(logging.Handler):
    """python-dotenv's warning about a ``.env`` line it cannot parse, said on the console.

    That line's setting is left out, so the user must see it, not only the log file.
    Every settings class reads ``.env``: each line is said once.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._said: set[object] = set()

    def emit(self, record: logging.LogRecord) -> None:
        if "could not parse" not in str(record.msg):
            return
        line = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        where = (Path(str(Settings.model_config["env_file"])).absolute(), line)
        if where not in self._said:
            self._said.add(where)
            console.warning(
                "warning: line %s of %s does not parse and is ignored (a line is NAME=value)",
                line,
                where[0],
            )


logging.getLogger("dotenv.main").addHandler(_DotenvLineWarning())


class Section(StrEnum):
    """The tables of the settings file: each settings class reads one (``config_section``).

    Every service reads the same file, so a file holds the sections of services other
    than the one reading it; a table named here by none is a mistake, said as such.
    """

    KAFKA = "kafka"
    LAKE = "lake"
    MQTT = "mqtt"
    SCHEMA_REGISTRY = "schema_registry"
    PRODUCER = "producer"
    PROCESSOR = "processor"
    DASHBOARD = "dashboard"
    BRIDGE = "bridge"
    NOTIFIER = "notifier"
    LOADTEST = "loadtest"


class _TomlSectionSource(TomlConfigSettingsSource):
    """pydantic-settings' TOML source, reading the settings class's own table of the file.

    Every service's classes share one file (``--config`` or ``IOT_CONFIG_FILE``); each
    reads its ``config_section`` table (``[kafka]``, ``[producer]`` ...), and a file
    without that table gives it nothing.
    """

    def __init__(self, settings_cls: type[Settings]) -> None:
        self._section = settings_cls.config_section
        self._fields = frozenset(settings_cls.model_fields)
        path = _config_file.get() or (
            Path(os.environ[CONFIG_FILE_ENV]) if os.environ.get(CONFIG_FILE_ENV) else None
        )
        if path is not None and not path.is_file():
            raise FileNotFoundError(f"config file {path} does not exist")
        super().__init__(settings_cls, toml_file=path)

    def _read_file(self, file_path: Path | Traversable) -> dict[str, Any]:
        tables = super()._read_file(file_path)
        if unknown := sorted(set(tables) - set(Section)):  # a misspelt [producers] says nothing
            raise ValueError(
                f"{file_path} has no section {', '.join(f'[{t}]' for t in unknown)}: its "
                f"sections are {', '.join(f'[{s}]' for s in sorted(Section))}"
            )
        section = tables.get(self._section, {})
        if not isinstance(section, dict):
            raise ValueError(f"[{self._section}] in {file_path} must be a table")
        unknown = sorted(set(section) - self._fields)
        if unknown:  # a misspelt name would leave its setting at the default, unsaid
            raise ValueError(
                f"[{self._section}] in {file_path} has no setting {', '.join(unknown)}: the "
                "names are the settings' own, as --help and docs/reference/settings.md list them"
            )
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


def _secret_home() -> str:
    """The environment variable of the secret setting that holds a connection string.

    That setting is ``KafkaSettings.connection_string``; it is found among the classes
    derived from ``Settings``, which this module cannot import.
    """
    pending = list(Settings.__subclasses__())
    while pending:
        cls = pending.pop()
        info = cls.model_fields.get("connection_string")
        if info is not None and _is_secret(info.annotation):
            return cls.env_name("connection_string")
        pending += cls.__subclasses__()
    return "the Kafka settings' connection_string"


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
                f"and this setting is not secret: put the connection string in {_secret_home()}"
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
        # pydantic types the class as BaseSettings; only Settings subclasses come here.
        toml = _TomlSectionSource(cast("type[Settings]", settings_cls))
        return (init_settings, env_settings, dotenv_settings, toml)

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
        members = [member.value for member in annotation]
        return members if all(isinstance(v, str) for v in members) else None
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


@dataclass(frozen=True)
class SettingDoc:
    """One setting as a user meets it: its variable, its flag, its default and its values.

    Attributes:
        section: The TOML table it belongs to (``kafka``, ``producer`` ...).
        name: The field's name, also its key in that table.
        env: Its environment variable (``Settings.env_name``).
        flag: Its command-line flag (``Settings.flag``).
        default: The default as ``--help`` shows it; None for a secret or for a
            description that says what the default is itself.
        choices: The allowed values of a ``Literal`` or ``Enum`` field, else None.
        description: The field's description.
        secret: Whether it is a secret (never shown, set in the environment or ``.env``).
        boolean: Whether it is a switch (``--flag`` / ``--no-flag``).
    """

    section: str
    name: str
    env: str
    flag: str
    default: str | None
    choices: tuple[str, ...] | None
    description: str
    secret: bool
    boolean: bool


def setting_docs(cls: type[Settings]) -> list[SettingDoc]:
    """The settings of ``cls`` itself, as ``--help`` gives them (nested classes left out).

    The documentation renders these, so that it says what ``--help`` says.
    """
    out = []
    for name, info in cls.model_fields.items():
        if _nested_settings(info.annotation) is not None:
            continue
        secret = _is_secret(info.annotation)
        says_default = _SAYS_DEFAULT.search(info.description or "")
        choices = _choices(info.annotation)
        out.append(
            SettingDoc(
                section=cls.config_section,
                name=name,
                env=cls.env_name(name),
                flag=cls.flag(name),
                default=None if secret or says_default else _shown_default(info),
                choices=tuple(choices) if choices is not None else None,
                description=info.description or "",
                secret=secret,
                boolean=_is_bool(info.annotation),
            )
        )
    return out


def nested_settings(cls: type[Settings]) -> list[type[Settings]]:
    """The settings classes that ``cls`` holds as fields (``KafkaSettings`` ...), in order."""
    return [
        nested
        for info in cls.model_fields.values()
        if (nested := _nested_settings(info.annotation)) is not None
    ]


def config_sections(cls: type[Settings]) -> list[str]:
    """The TOML tables a settings file may hold for ``cls``: its own, then its sections'."""
    out = [cls.config_section]
    for info in cls.model_fields.values():
        nested = _nested_settings(info.annotation)
        if nested is not None:
            out += [s for s in config_sections(nested) if s not in out]
    return out


def service_parser(
    cls: type[Settings], prog: str, description: str, epilog: str | None = None
) -> ArgumentParser:
    """A service's command line: ``--config FILE`` and one flag per setting of ``cls``.

    Args:
        cls: The service's settings.
        prog: The command, e.g. ``python -m bridge``.
        description: One line for ``--help``.
        epilog: Text after the options in ``--help``.
    """
    parser = ArgumentParser(prog=prog, description=description, epilog=epilog)
    tables = ", ".join(f"[{s}]" for s in config_sections(cls))
    parser.add_argument("--config", help=f"TOML settings file ({tables} tables)")
    add_settings_arguments(parser, cls)
    return parser


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
            if not isinstance(part, str):
                break
            info = owner.model_fields.get(part)
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
