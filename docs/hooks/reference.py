"""The reference pages under ``docs/reference/``, generated from the code; and the MkDocs hook.

``make reference`` (``python docs/hooks/reference.py``) writes every page of
``PAGES``; they are committed, so that they read the same on the repository's web
view as in the built site, and ``tests/docs/test_reference.py`` fails when one
differs from what the code gives. Nothing here is a copy of the data:

* the settings come from each service's pydantic settings class through the settings
  framework's own ``setting_docs`` (the same variable names, flags and defaults as
  ``--help``);
* the tables from the registry ``common.lake.TABLES`` and, for their columns, the
  schema the processor creates each table with: what its query's transforms return on
  empty frames (``processor.lake_setup.table_frames``, which takes a Spark session:
  generating this page starts a local one), and ``processor.schema.DEVICE_SCHEMA``
  for the device dimension;
* the event's fields from ``common.contract``;
* the commands from each entry point's own ``argparse`` parser, formatted as its
  ``--help`` prints it (in a child process with a fixed environment, so that the page
  holds no machine's paths).

As an MkDocs hook (``mkdocs.yml``), it only fills the marker lines a page asks for,
e.g. ``<!-- reference:bench-targets -->`` (``on_page_markdown``): a build imports
nothing of the project, so that it needs neither Spark nor Java.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import runpy
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from common.contract import Field
    from common.lake import Query, Table
    from common.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

SETTINGS_PAGE = "reference/settings.md"
TABLES_PAGE = "reference/tables.md"
CONTRACT_PAGE = "reference/contract.md"
COMMANDS_PAGE = "reference/commands.md"
# Every generated page, by its path under docs/.
PAGES = (SETTINGS_PAGE, TABLES_PAGE, CONTRACT_PAGE, COMMANDS_PAGE)
# The one command that writes them.
REGENERATE = "make reference"

# How each service is started, by its settings section; a section not listed here is
# documented all the same, as ``python -m <its package>``.
COMMANDS: dict[str, str] = {
    "producer": "python -m producer",
    "processor": "python -m processor run",
    "dashboard": "streamlit run dashboard/app.py",
    "loadtest": "python -m loadtest run",
}
# Services that read no command-line flags (only the environment, .env and the file).
NO_FLAGS = frozenset({"dashboard"})

# Every command-line entry point a user runs, as ``python -m <module>``, in the order
# of the commands page.
COMMAND_MODULES = (
    "producer",
    "processor",
    "loadtest",
    "demo",
    "bridge",
    "notifier",
    "processor.health",
    "dashboard.health",
    "infra.broker",
    "infra.mqtt_broker",
    "infra.schema_registry",
    "infra.spark_cluster",
    "infra.spark_connect",
    "infra.jars",
    "infra.compose_rehearsal",
)
# The project's other ``__main__`` code, which no user starts, and what does.
INTERNAL_COMMANDS: dict[str, str] = {
    "python -m processor.worker_daemon": "Spark starts it as the processor's Python workers",
    "python infra/docker/log_ready.py": "the bridge's container image runs it as its health check",
    "python -m infra.eventhubs.azurerm_schema": "`make tf-schema` runs it",
}
# What the child process that formats the commands' help runs in: the width --help
# wraps at, and placeholders where a default names this machine's folders.
HELP_COLUMNS = 80
STATE_DIR_PLACEHOLDER = "<state dir>"
# The child's only inherited variables (the interpreter and its libraries need them).
_CHILD_ENV_KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "SYSTEMROOT", "TMPDIR")


def _importable() -> None:
    """Put the checkout first on the import path, for packages newer than the venv's install.

    An editable install maps the packages that existed when it was made; a script run
    as ``python docs/hooks/reference.py`` has ``docs/hooks`` on its path, not the checkout.
    """
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


# ---------------------------------------------------------------- Markdown helpers


def _cell(text: object) -> str:
    """``text`` made safe for one Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _generated_by(sources: str) -> str:
    """The first line of a page: what it comes from and how it is written."""
    return (
        f"Generated from {sources} by `{REGENERATE}` (`docs/hooks/reference.py`); "
        "do not edit it by hand."
    )


# ---------------------------------------------------------------- settings


def settings_modules() -> list[str]:
    """The modules that hold settings: each package's ``settings``, ``common/*_settings``."""
    packages = sorted(
        p.parent.name
        for p in ROOT.glob("*/settings.py")
        if p.parent.name != "common" and (p.parent / "__init__.py").is_file()
    )
    common = sorted(p.stem for p in (ROOT / "common").glob("*_settings.py"))
    return [f"{name}.settings" for name in packages] + [f"common.{name}" for name in common]


def settings_classes() -> list[type[Settings]]:
    """Every settings class with a section of its own, services first, then shared ones.

    A class that another holds as a field (``KafkaSettings``) is shared; the others are
    services, those of ``COMMANDS`` first.
    """
    _importable()
    from common.settings import Settings, nested_settings

    modules = settings_modules()
    for name in modules:
        importlib.import_module(name)
    found: list[type[Settings]] = []
    pending = list(Settings.__subclasses__())
    while pending:
        cls = pending.pop(0)
        pending += cls.__subclasses__()
        if cls.config_section and cls.__module__ in modules and cls not in found:
            found.append(cls)
    # The services of COMMANDS in its order (the pipeline's), then any other by module.
    order = list(COMMANDS)
    found.sort(
        key=lambda c: (
            order.index(c.config_section) if c.config_section in order else len(order),
            modules.index(c.__module__),
        )
    )
    held = {n for cls in found for n in nested_settings(cls)}
    return [c for c in found if c not in held] + [c for c in found if c in held]


def is_shared(cls: type[Settings], classes: Sequence[type[Settings]]) -> bool:
    """Whether another settings class holds ``cls`` as a field."""
    from common.settings import nested_settings

    return any(cls in nested_settings(other) for other in classes)


def _default(text: str | None) -> str:
    """A default as the reference shows it; a local state folder's path as ``<state dir>``."""
    from common.paths import state_dir

    if text is None:
        return "see description"
    return _code(text.replace(str(state_dir()), STATE_DIR_PLACEHOLDER))


def _settings_table(cls: type[Settings], flags: bool) -> list[str]:
    from common.settings import setting_docs

    rows = []
    for doc in setting_docs(cls):
        flag = f"{doc.flag} / --no-{doc.flag.removeprefix('--')}" if doc.boolean else doc.flag
        values = ", ".join(f"`{c}`" for c in doc.choices) if doc.choices else ""
        if doc.secret:
            values = "secret: never shown; set it in the environment or `.env`"
        rows.append(
            (
                _code(doc.name), _code(doc.env), _code(flag) if flags else "",
                _default(doc.default), values, doc.description,
            )
        )  # fmt: skip
    header = ("setting", "environment variable", "flag", "default", "values", "description")
    return _table(header, rows)


def _prefix(cls: type[Settings]) -> str:
    return str(cls.model_config.get("env_prefix", ""))


def settings_page() -> str:
    """The settings reference: every setting of every service, and the shared sections."""
    from common.settings import nested_settings

    classes = settings_classes()
    out = [
        "# Settings reference",
        "",
        _generated_by("the services' settings classes"),
        "Every service reads, lowest precedence first: a TOML file (`--config FILE` or",
        "`IOT_CONFIG_FILE`; the *section* below is its table), a git-ignored `.env` in",
        "the working directory, environment variables, then command-line flags",
        "([Configure the services](../settings.md) says how). `<state dir>` is `.local/` in the",
        "checkout, or `$IOT_PULSE_HOME`. Each command's flags as `--help` prints them:",
        "[Commands reference](commands.md).",
        "",
    ]
    for cls in classes:
        section = cls.config_section
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        where = f"Section `[{section}]`, variables `{_prefix(cls)}*`."
        if is_shared(cls, classes):
            users = [c.config_section for c in classes if cls in nested_settings(c)]
            intro = f"{doc} {where} Read by: {', '.join(f'[{u}](#{u})' for u in users)}."
        else:
            command = COMMANDS.get(section, f"python -m {cls.__module__.split('.')[0]}")
            shared = [f"[{n.config_section}](#{n.config_section})" for n in nested_settings(cls)]
            intro = f"`{command}`: {doc[0].lower()}{doc[1:]} {where}"
            if shared:
                intro += f" Also reads the shared sections {', '.join(shared)}."
            if section in NO_FLAGS:
                intro += " It takes no flags: use the variables or the file."
        out += [
            f"## {section}",
            "",
            intro,
            "",
            *_settings_table(cls, section not in NO_FLAGS),
            "",
        ]
    return "\n".join(out)


# ---------------------------------------------------------------- tables

# A table's columns: (name, Spark SQL type), in the table's order.
Columns = Sequence[tuple[str, str]]


def schema_columns(schema: StructType) -> list[tuple[str, str]]:
    """A Spark schema's columns as the tables page lists them: name and SQL type."""
    return [(f.name, f.dataType.simpleString()) for f in schema.fields]


def table_columns(spark: SparkSession) -> dict[Table, list[tuple[str, str]]]:
    """Every table's columns, as the processor creates the table (``processor.lake_setup``).

    The device dimension's are ``DEVICE_SCHEMA``; every other table's are what its
    query's transforms return on empty frames (``table_frames``), with the default
    processor settings (not this environment's): Spark analyses the plans, no job runs.

    Args:
        spark: Any Spark session (a local one does; no connector is used).
    """
    _importable()
    from common.lake import TABLES, Table
    from processor.lake_setup import table_frames
    from processor.schema import DEVICE_SCHEMA
    from processor.settings import ProcessorSettings

    devices = spark.createDataFrame([], DEVICE_SCHEMA)
    frames = table_frames(spark, ProcessorSettings.model_construct(), devices)
    schemas = {Table.DIM_DEVICES: DEVICE_SCHEMA} | {t: f.schema for t, f in frames.items()}
    return {table: schema_columns(schemas[table]) for table in TABLES}


def _queries(queries: Iterable[Query]) -> str:
    return ", ".join(f"`{q}`" for q in queries) or "none"


def tables_page(columns: Mapping[Table, Columns]) -> str:
    """The tables reference: the registry, and every column of every table.

    Args:
        columns: Each table's columns (``table_columns``).
    """
    from common.lake import QUERY_SPECS, TABLES, Reader, written_by

    out = [
        "# Tables reference",
        "",
        _generated_by(
            "the registry (`common.lake.TABLES`, `QUERY_SPECS`) and the processor's code"
        ),
        "Each table is a Delta table at `<lake root>/<table>` (`IOT_LAKE_ROOT`). What each",
        "holds and how it is written: [Tables](../tables.md). A clustered table's files are",
        "laid out by its clustering columns when `python -m processor maintain` compacts them",
        "(Delta's liquid clustering).",
        "",
        *_table(
            ("table", "written by", "key", "streamed by", "read by", "clustered by"),
            (
                (
                    f"[`{t}`](#{t.replace('/', '')})",
                    f"`{spec.writer}` query" if spec.writer else "the processor itself",
                    ", ".join(f"`{k}`" for k in spec.key),
                    _queries(spec.streamed_by),
                    ", ".join(r for r in Reader if r in spec.read_by) or "none outside",
                    ", ".join(f"`{c}`" for c in spec.cluster_by) or "none",
                )
                for t, spec in TABLES.items()
            ),
        ),
        "",
        "## Queries",
        "",
        "What each streaming query is, from the query registry (`common.lake.QUERY_SPECS`).",
        "Its tier sets how often its micro-batches run: `hot` every `trigger_interval`,",
        "`bronze` every `bronze_trigger_interval` (bronze is `hot` when silver reads it),",
        "`background` every `background_trigger_interval`, taking turns, and `realtime` in",
        "Spark's real-time mode, in an application of its own. `python -m processor rebuild`",
        "resets the queries it may rebuild: their tables are recomputed from what they read.",
        "",
        *_table(
            ("query", "tier", "writes", "rebuild may reset it"),
            (
                (
                    f"`{q}`",
                    str(spec.tier),
                    ", ".join(f"`{t}`" for t in written_by(q)) or "the alerts topic",
                    "yes" if spec.rebuildable else "no",
                )
                for q, spec in QUERY_SPECS.items()
            ),
        ),
        "",
        "## Columns",
        "",
        "Each table's columns are the schema the processor creates it with",
        "(`processor.lake_setup`): what its query's transforms return",
        "(`processor.lake_setup.table_frames`), and `processor.schema.DEVICE_SCHEMA` for",
        "the device dimension; an existing table gains the columns it lacks when the",
        "processor starts. Types are Spark SQL's: `bigint` is a 64-bit integer, `int` a",
        "32-bit one, `timestamp` an instant (UTC), `binary` the raw bytes.",
        "",
    ]
    for table, spec in TABLES.items():
        key = ", ".join(f"`{k}`" for k in spec.key)
        out += [
            f"### {table}",
            "",
            f"Key: {key}.",
            "",
            *_table(("column", "type"), ((f"`{n}`", t) for n, t in columns[table])),
            "",
        ]
    return "\n".join(out)


def local_spark() -> SparkSession:
    """A local Spark session with one core and no UI: enough to analyse the tables' plans."""
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("iot-pulse-reference")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# ---------------------------------------------------------------- contract


def _range(field: Field) -> str:
    if field.min is None and field.max is None:
        return ""
    if field.max is None:
        return f"from {field.min:g}"
    if field.min is None:
        return f"up to {field.max:g}"
    return f"{field.min:g} to {field.max:g}"


def _fields_table(fields: Iterable[Field]) -> list[str]:
    return _table(
        ("field", "type", "unit", "range", "required", "label", "example", "description"),
        (
            (
                f"`{f.name}`", f.type, f.unit, _range(f), "yes" if f.required else "no",
                f.label, "" if f.example is None else _code(str(f.example)), f.doc,
            )
            for f in fields
        ),
    )  # fmt: skip


def _shown_path(path: Path) -> str:
    """``path`` relative to the checkout where it is in it (the shipped contract is)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def contract_page() -> str:
    """The contract reference: every field, the statuses and the schema versions."""
    _importable()
    from common import contract

    versions = []
    for v in contract.VERSIONS:
        renamed = [f"`{n}` as `{k}`" for n, k in v.keys.items() if n != k]
        versions.append(
            (
                str(v.number), v.doc, ", ".join(f"`{n}`" for n in v.keys),
                ", ".join(renamed),
            )
        )  # fmt: skip
    return "\n".join(
        [
            "# Event contract reference",
            "",
            _generated_by(
                f"`{_shown_path(contract.CONTRACT_FILE)}` (`common/contract.py` reads it)"
            ),
            "One UTF-8 JSON object per message, keyed by `device_id`; times are ISO-8601",
            "UTC with millisecond precision and a `Z`. How to change it:",
            "[The event contract](../contract.md).",
            "",
            "## Envelope",
            "",
            *_fields_table(contract.ENVELOPE),
            "",
            "## Metrics",
            "",
            "A device sends the metrics its type models (`common/fleet.py`).",
            "",
            *_fields_table(contract.METRICS),
            "",
            "## Statuses",
            "",
            ", ".join(f"`{s}`" for s in contract.STATUSES),
            "",
            "## Schema versions",
            "",
            *_table(("version", "what changed", "fields it sends", "renamed keys"), versions),
            "",
            "## Device dimension",
            "",
            "The profile columns of `dim/devices`, one row per device (beside",
            "`battery_powered`, from the device's type, and a `<metric>_low` /",
            "`<metric>_high` threshold pair per metric).",
            "",
            *_fields_table(contract.DEVICE_FIELDS),
            "",
        ]
    )


# ---------------------------------------------------------------- commands


class _ParserBuilt(BaseException):
    """Raised in place of parsing a command line: carries the parser the command built.

    A ``BaseException``, so that no command's ``except Exception`` takes it for a failure.
    """

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__(parser.prog)
        self.parser = parser


def _raise_parser(
    self: argparse.ArgumentParser, args: Any = None, namespace: Any = None
) -> tuple[argparse.Namespace, list[str]]:
    raise _ParserBuilt(self)


def _parser_of(module: str) -> argparse.ArgumentParser:
    """The parser ``python -m <module>`` builds, taken when it parses its command line.

    The module runs as ``__main__`` (``runpy``, as ``python -m`` does) up to that call,
    which raises instead of parsing: nothing of the command itself runs.
    """
    parse = argparse.ArgumentParser.parse_known_args
    argv = sys.argv
    argparse.ArgumentParser.parse_known_args = _raise_parser  # type: ignore[method-assign]
    sys.argv = [module, "--help"]
    try:
        with warnings.catch_warnings():
            # "'infra.broker' found in sys.modules": a module imported by an earlier one.
            warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except _ParserBuilt as built:
        return built.parser
    finally:
        argparse.ArgumentParser.parse_known_args = parse  # type: ignore[method-assign]
        sys.argv = argv
    raise RuntimeError(f"python -m {module} did not parse a command line")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's subcommands (``add_subparsers``), by name, in their order."""
    return {
        name: sub
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, sub in action.choices.items()
    }


def _help_texts(modules: Sequence[str]) -> dict[str, str]:
    """Each command's ``--help``, and each subcommand's, by the command line that prints it."""
    _importable()
    texts: dict[str, str] = {}
    for module in modules:
        parser = _parser_of(module)
        command = f"python -m {module}"
        texts[command] = parser.format_help()
        for name, sub in _subcommands(parser).items():
            texts[f"{command} {name}"] = sub.format_help()
    return texts


def command_helps(modules: Sequence[str] = COMMAND_MODULES) -> dict[str, str]:
    """Each command's ``--help`` text, the same on every machine.

    Formatted in a child process whose environment is fixed: ``COLUMNS`` (argparse
    wraps at it), ``IOT_PULSE_HOME`` set to ``<state dir>`` (the defaults that name the
    state folder say so, before argparse wraps them) and no ``IOT_*`` variable of the
    caller's; its working directory and its log folder are a temporary folder's.

    Raises:
        RuntimeError: The child failed, or a text still names the checkout's folder.
    """
    with tempfile.TemporaryDirectory(prefix="iot-pulse-reference-") as tmp:
        out = Path(tmp) / "help.json"
        env = {k: os.environ[k] for k in _CHILD_ENV_KEEP if k in os.environ} | {
            "COLUMNS": str(HELP_COLUMNS),
            "PYTHONPATH": str(ROOT),
            "PYTHONWARNINGS": "ignore",
            "IOT_PULSE_HOME": STATE_DIR_PLACEHOLDER,
            "IOT_LOG_DIR": str(Path(tmp) / "logs"),
        }
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--help-texts", str(out), *modules],
            cwd=tmp, env=env, capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"formatting the commands' help failed:\n{proc.stderr}")
        texts: dict[str, str] = json.loads(out.read_text(encoding="utf-8"))
    for command, text in texts.items():
        for machine in (str(ROOT), tmp):
            if machine in text:
                raise RuntimeError(f"{command} --help names this machine's folder {machine}")
    return texts


def commands_page(helps: Mapping[str, str]) -> str:
    """The commands reference: every entry point's ``--help``, and each subcommand's.

    Args:
        helps: The texts by command line (``command_helps``).
    """
    internal = ", ".join(f"`{command}` ({why})" for command, why in INTERNAL_COMMANDS.items())
    out = [
        "# Commands reference",
        "",
        _generated_by("each command's own parser"),
        f"Each block is what the command prints with `--help` (at {HELP_COLUMNS} columns).",
        "`<state dir>` is `.local/` in the checkout, or `$IOT_PULSE_HOME`. A settings flag",
        "also has an environment variable and a key in the TOML file: the",
        "[Settings reference](settings.md) lists them, with the dashboard's",
        "(`streamlit run dashboard/app.py` takes no flags of its own).",
        "",
        f"Not listed, as no user starts them: {internal}.",
        "",
    ]
    for command, text in helps.items():
        level = "###" if command.count(" ") > 2 else "##"
        if "```" in text:
            raise ValueError(f"{command} --help holds a code fence")
        out += [f"{level} `{command}`", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(out)


# ---------------------------------------------------------------- the pages


def render_pages(spark: SparkSession) -> dict[str, str]:
    """Every generated page, by its path under ``docs/``.

    Args:
        spark: A Spark session, for the tables' columns (``local_spark``).
    """
    return {
        SETTINGS_PAGE: settings_page(),
        TABLES_PAGE: tables_page(table_columns(spark)),
        CONTRACT_PAGE: contract_page(),
        COMMANDS_PAGE: commands_page(command_helps()),
    }


def write_pages(pages: Mapping[str, str]) -> list[str]:
    """Write each page under ``docs/``; return those whose text changed."""
    changed = []
    for page, text in pages.items():
        path = DOCS / page
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(page)
    return changed


def main(argv: Sequence[str]) -> int:
    """``python docs/hooks/reference.py``: write every reference page.

    ``--help-texts FILE MODULE...`` is the child process of ``command_helps``: it
    writes each command's help text to FILE, as JSON.

    Returns:
        0; 2 when the environment names another event contract than the shipped one.
    """
    if argv[:1] == ["--help-texts"]:
        Path(argv[1]).write_text(json.dumps(_help_texts(argv[2:])), encoding="utf-8")
        return 0
    if os.environ.get("IOT_CONTRACT"):
        print("error: unset IOT_CONTRACT: the reference documents the shipped contract")
        return 2
    spark = local_spark()
    try:
        pages = render_pages(spark)
    finally:
        spark.stop()
    changed = write_pages(pages)
    for page in PAGES:
        print(f"docs/{page}: {'written' if page in changed else 'unchanged'}")
    return 0


# ---------------------------------------------------------------- the MkDocs hook


def bench_targets() -> str:
    """The benchmarks' targets, from ``bench/run_all.py`` (a script, not a package)."""
    spec = importlib.util.spec_from_file_location("bench_run_all", ROOT / "bench" / "run_all.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = (
        (f"`bench/{name}.py`", f"`{figure}`", f"{op} {target:,g}")
        for name, targets in module.TARGETS.items()
        for figure, op, target in targets
    )
    return "\n".join(_table(("bench", "figure", "target"), rows))


MARKERS: dict[str, Callable[[], str]] = {"<!-- reference:bench-targets -->": bench_targets}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill each marker line with its generated block."""
    for marker, render in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
