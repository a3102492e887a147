"""MkDocs hook: the reference pages, rendered from the code at every build.

Nothing here is a copy of the data: the settings come from each service's pydantic
settings class through the settings framework's own ``setting_docs`` (the same
variable names, flags and defaults as ``--help``), the tables from the registry
``common.lake.TABLES`` and the pure-Python schemas that exist (``processor.schema``,
``processor.metrics``), and the event's fields from ``common.contract``. The pages are
added to the site as generated files (``on_files``), so a build always says what the
code says; ``render_pages`` gives the same text to tests without MkDocs.

A page may also ask for a generated block with a marker line, e.g.
``<!-- reference:bench-targets -->`` (``on_page_markdown`` fills it).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from common import contract
from common.lake import TABLES, Query, Reader, Table
from common.paths import state_dir
from common.settings import Settings, nested_settings, setting_docs

ROOT = Path(__file__).resolve().parents[2]

SETTINGS_PAGE = "reference/settings.md"
TABLES_PAGE = "reference/tables.md"
CONTRACT_PAGE = "reference/contract.md"


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


def _importable() -> None:
    """Put the checkout first on the import path, for packages newer than the venv's install.

    An editable install maps the packages that existed when it was made; ``mkdocs`` (a
    script, not ``python -m``) does not add the working directory either.
    """
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))


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
    return any(cls in nested_settings(other) for other in classes)


def _cell(text: object) -> str:
    """``text`` made safe for one Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def _default(text: str | None) -> str:
    """A default as the reference shows it; a local state folder's path as ``<state dir>``."""
    if text is None:
        return "see description"
    home = str(state_dir())
    return _code(text.replace(home, "<state dir>"))


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _settings_table(cls: type[Settings], flags: bool) -> list[str]:
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
    classes = settings_classes()
    out = [
        "# Settings reference",
        "",
        "Generated from the services' settings classes at every build of these pages.",
        "Every service reads, lowest precedence first: a TOML file (`--config FILE` or",
        "`IOT_CONFIG_FILE`; the *section* below is its table), a git-ignored `.env` in",
        "the working directory, environment variables, then command-line flags",
        "([Settings](../settings.md) says how). `<state dir>` is `.local/` in the",
        "checkout, or `$IOT_PULSE_HOME`.",
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


def _pure_schemas() -> dict[Table, list[tuple[str, str]]]:
    """The tables whose whole schema has a definition of its own outside Spark's plans.

    The others' columns are what their queries' transforms return on empty frames
    (``processor.lake_setup.table_frames``), which only a Spark session can tell.
    """
    from processor.metrics import METRICS_SCHEMA
    from processor.schema import DEVICE_SCHEMA

    device = [(f.name, f.dataType.simpleString()) for f in DEVICE_SCHEMA.fields]
    # METRICS_SCHEMA is Spark's DDL: "name type, name type, ...".
    metrics = [tuple(c.split()) for c in METRICS_SCHEMA.split(",")]
    return {Table.DIM_DEVICES: device, Table.OPS_PIPELINE_METRICS: metrics}  # type: ignore[dict-item]


def _leading_columns() -> dict[Table, tuple[str, list[tuple[str, str]]]]:
    """Tables whose first columns have a pure-Python source: the contract, the alert record."""
    from processor.schema import ALERT_RECORD_SCHEMA, EVENT_SCHEMA

    def names(schema: Any) -> list[tuple[str, str]]:
        return [(f.name, f.dataType.simpleString()) for f in schema.fields]

    return {
        Table.SILVER_EVENTS: ("the [event contract](contract.md)", names(EVENT_SCHEMA)),
        Table.GOLD_ALERTS_RT: ("the alert record (`common.alerts`)", names(ALERT_RECORD_SCHEMA)),
    }


def _queries(queries: Iterable[Query]) -> str:
    return ", ".join(f"`{q}`" for q in queries) or "none"


def tables_page() -> str:
    """The tables reference: the registry, and the columns that have a pure-Python source."""
    schemas = _pure_schemas()
    leading = _leading_columns()
    out = [
        "# Tables reference",
        "",
        "Generated from the table registry (`common.lake.TABLES`) at every build. Each",
        "table is a Delta table at `<lake root>/<table>` (`IOT_LAKE_ROOT`). What each",
        "holds and how it is written: [Tables](../tables.md).",
        "",
        *_table(
            ("table", "written by", "key", "streamed by", "read by"),
            (
                (
                    f"[`{t}`](#{t.replace('/', '')})",
                    f"`{spec.writer}` query" if spec.writer else "the processor itself",
                    ", ".join(f"`{k}`" for k in spec.key),
                    _queries(spec.streamed_by),
                    ", ".join(r for r in Reader if r in spec.read_by) or "none outside",
                )
                for t, spec in TABLES.items()
            ),
        ),
        "",
        "## Columns",
        "",
        "A table's schema is what its query's transforms return: the processor creates",
        "each table from them (`processor.lake_setup`), so only a Spark session can list",
        "every column. Below are the columns that have a definition of their own in",
        "Python; [Tables](../tables.md) describes the rest.",
        "",
    ]
    for table, spec in TABLES.items():
        out += [f"### {table}", ""]
        out.append(f"Key: {', '.join(f'`{k}`' for k in spec.key)}.")
        out.append("")
        if table in schemas:
            out += [*_table(("column", "type"), ((f"`{n}`", t) for n, t in schemas[table])), ""]
        elif table in leading:
            source, columns = leading[table]
            out += [
                f"Its first columns, from {source}; the rest: [Tables](../tables.md).",
                "",
                *_table(("column", "type"), ((f"`{n}`", t) for n, t in columns)),
                "",
            ]
    return "\n".join(out)


def _range(field: contract.Field) -> str:
    if field.min is None and field.max is None:
        return ""
    if field.max is None:
        return f"from {field.min:g}"
    if field.min is None:
        return f"up to {field.max:g}"
    return f"{field.min:g} to {field.max:g}"


def _fields_table(fields: Iterable[contract.Field]) -> list[str]:
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
            f"Generated from `{_shown_path(contract.CONTRACT_FILE)}` "
            "(`common/contract.py` reads it) at every build. One UTF-8 JSON object per",
            "message, keyed by `device_id`; times are ISO-8601 UTC with millisecond",
            "precision and a `Z`. How to change it: [The event contract](../contract.md).",
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
            "The profile columns of `dim/devices`, one row per device (beside a",
            "`<metric>_low` / `<metric>_high` threshold pair per metric).",
            "",
            *_fields_table(contract.DEVICE_FIELDS),
            "",
        ]
    )


def render_pages() -> dict[str, str]:
    """Every generated page, by its path under ``docs/``."""
    return {
        SETTINGS_PAGE: settings_page(),
        TABLES_PAGE: tables_page(),
        CONTRACT_PAGE: contract_page(),
    }


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


def on_files(files: Any, config: Any) -> Any:
    """Add the generated reference pages to the site."""
    from mkdocs.structure.files import File

    for src_uri, content in render_pages().items():
        files.append(File.generated(config, src_uri, content=content))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Fill each marker line with its generated block."""
    for marker, render in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown
