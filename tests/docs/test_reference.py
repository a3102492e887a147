"""The committed reference pages (``docs/reference/``) against what the code generates today.

``make reference`` writes them (``docs/hooks/reference.py``). The fast tests generate
every page again but the tables' columns, which only a Spark session can tell: the
committed tables page is rendered again from its own columns (so its registry part must
be current) and checked against the schemas that need no session; the Spark test
generates it whole.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from common.lake import TABLES, Table
from tests.docs_reference import reference

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
HOOK = DOCS / "hooks" / "reference.py"


def _committed(page: str) -> str:
    return (DOCS / page).read_text(encoding="utf-8")


def _stale(pages: dict[str, str]) -> list[str]:
    """One line per page whose committed text differs from ``pages``' (none: all current)."""
    return [
        f"docs/{page} is stale: run `{reference().REGENERATE}` and commit it"
        for page, text in pages.items()
        if not (DOCS / page).is_file() or _committed(page) != text
    ]


def _columns_of(page: str) -> dict[str, list[tuple[str, str]]]:
    """The column rows under each ``### <table>`` heading of a tables page."""
    columns: dict[str, list[tuple[str, str]]] = {}
    table = None
    for line in page.splitlines():
        if line.startswith("### "):
            table = line.removeprefix("### ")
            columns[table] = []
        elif table and (row := re.fullmatch(r"\| `([^`]+)` \| ([^|]+) \|", line)):
            columns[table].append((row[1], row[2]))
    return columns


def test_the_settings_and_contract_pages_are_what_the_code_generates():
    ref = reference()
    pages = {ref.SETTINGS_PAGE: ref.settings_page(), ref.CONTRACT_PAGE: ref.contract_page()}
    assert _stale(pages) == []


def test_the_commands_page_is_what_every_command_prints_with_help():
    ref = reference()
    assert _stale({ref.COMMANDS_PAGE: ref.commands_page(ref.command_helps())}) == []


def test_the_tables_page_holds_the_registry_and_every_column_of_every_table():
    from processor.schema import DEVICE_SCHEMA

    ref = reference()
    columns = _columns_of(_committed(ref.TABLES_PAGE))
    assert list(columns) == [str(t) for t in TABLES]
    # Rendered again from its own columns: the registry's part and the text are current.
    again = ref.tables_page({Table(t): c for t, c in columns.items()})
    assert _stale({ref.TABLES_PAGE: again}) == []
    missing_keys = {
        t: [k for k in TABLES[Table(t)].key if k not in dict(c)] for t, c in columns.items()
    }
    assert {t: keys for t, keys in missing_keys.items() if keys} == {}
    assert columns[Table.DIM_DEVICES] == ref.schema_columns(DEVICE_SCHEMA)
    assert ("device_id", "string") in columns[Table.DIM_DEVICES]


def test_the_tables_page_has_the_columns_the_processor_creates_each_table_with(spark):
    ref = reference()
    columns = ref.table_columns(spark)
    assert list(columns) == list(TABLES)
    assert _stale({ref.TABLES_PAGE: ref.tables_page(columns)}) == []


def test_the_help_texts_are_the_same_whatever_the_callers_environment(monkeypatch, tmp_path):
    ref = reference()
    monkeypatch.setenv("IOT_PULSE_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("IOT_LAKE_ROOT", str(tmp_path / "lake"))
    helps = ref.command_helps(["infra.mqtt_broker"])
    assert list(helps) == [
        "python -m infra.mqtt_broker",
        *(f"python -m infra.mqtt_broker {c}" for c in ("start", "stop", "status")),
    ]
    text = helps["python -m infra.mqtt_broker start"]
    assert (
        "  --data-dir DIR, --dir DIR\n                        state folder (default: <state dir>/mqtt-broker)\n"
        in text
    )
    assert max(len(line) for line in text.splitlines()) <= ref.HELP_COLUMNS
    block = f"### `python -m infra.mqtt_broker start`\n\n```text\n{text.rstrip()}\n```\n"
    assert block in _committed(ref.COMMANDS_PAGE)


def _main_guarded(path: Path) -> bool:
    """Whether a module runs code as ``__main__`` (``if __name__ == "__main__":``)."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'":
            return True
    return False


def _command_line(path: Path) -> str:
    """How ``path`` is started: ``python -m`` for a module of a package, else as a script."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    in_package = all(
        (ROOT.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts))
    )
    if not in_package:
        return f"python {path.relative_to(ROOT)}"
    return "python -m " + ".".join(parts[:-1] if parts[-1] == "__main__" else parts)


def _packages() -> list[str]:
    """The project's packages (pyproject.toml's ``packages.find``)."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return [p.removesuffix("*") for p in setup["packages"]["find"]["include"]]


def test_every_entry_point_of_the_packages_is_on_the_commands_page_or_named_internal():
    ref = reference()
    found = {
        _command_line(path)
        for package in _packages()
        for path in sorted((ROOT / package).rglob("*.py"))
        if "__pycache__" not in path.parts and _main_guarded(path)
    }
    documented = {f"python -m {m}" for m in ref.COMMAND_MODULES}
    assert found == documented | set(ref.INTERNAL_COMMANDS)
    page = _committed(ref.COMMANDS_PAGE)
    assert [c for c in sorted(documented) if f"## `{c}`\n" not in page] == []


@pytest.mark.subprocess
def test_each_help_block_is_what_the_command_prints(tmp_path):
    # The parsers are taken in one process; each command, started as a user starts it,
    # prints the same.
    ref = reference()
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")} | {
        "COLUMNS": str(ref.HELP_COLUMNS),
        "IOT_PULSE_HOME": ref.STATE_DIR_PLACEHOLDER,
        "IOT_LOG_DIR": str(tmp_path / "logs"),
    }
    helps = ref.command_helps()
    printed = {
        command: subprocess.run(
            [sys.executable, *command.split()[1:], "--help"],
            cwd=tmp_path, env=env | {"PYTHONPATH": str(ROOT)}, capture_output=True,
            text=True, timeout=120, check=False,
        ).stdout
        for command in helps
    }  # fmt: skip
    assert printed == helps


def test_the_site_build_imports_neither_the_project_nor_spark():
    # What a build runs of the hook (mkdocs.yml): its import and on_page_markdown on a
    # page with a marker. Importing any blocked module fails it.
    blocked = {"pyspark", "py4j", "delta", "pydantic", "pydantic_settings", *_packages()}
    code = f"""
import importlib.util, sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {sorted(blocked)!r}:
            raise ImportError("the docs build imported " + name)

sys.meta_path.insert(0, Refuse())
spec = importlib.util.spec_from_file_location("hook", {str(HOOK)!r})
hook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hook)
print(hook.on_page_markdown("Targets:\\n\\n<!-- reference:bench-targets -->\\n", None, None, None))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "<!-- reference:" not in proc.stdout
    assert "| `bench/producer.py` | `events_per_s` | >= 200,000 |" in proc.stdout


def test_the_dev_group_includes_the_docs_group():
    # make docs builds in a venv of the docs group alone; the tests build the site with the
    # dev group, which includes it: one list of the build's packages.
    groups = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]
    assert {"include-group": "docs"} in groups["dev"]
    assert all(isinstance(p, str) and p.startswith("mkdocs") for p in groups["docs"])
