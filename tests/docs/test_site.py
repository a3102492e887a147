"""The documentation: the README's shape, the site's build, and the generated reference.

The reference pages are generated from the code by ``docs/hooks/reference.py`` (``make
reference``) and committed (``tests/docs/test_reference.py`` checks they are current);
what they must hold is computed here from the same code (every settings class's
variables, the table registry, the contract, the commands), never from a list typed in
the test, so a setting, table, field or command the pages leave out fails a test.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from common import contract
from common.lake import TABLES
from common.settings import setting_docs
from tests.docs_reference import reference

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
MAX_README_LINES = 200


def _env_names() -> set[str]:
    return {doc.env for cls in reference().settings_classes() for doc in setting_docs(cls)}


def _missing(pages: dict[str, str]) -> dict[str, list[str]]:
    """What each built reference page lacks: env vars, table names, contract fields, commands."""
    wanted = {
        "settings": sorted(_env_names()),
        "tables": [str(t) for t in TABLES],
        "contract": [f.name for f in (*contract.FIELDS, *contract.DEVICE_FIELDS)],
        "commands": [f"python -m {m}" for m in reference().COMMAND_MODULES],
    }
    return {kind: [n for n in names if n not in pages[kind]] for kind, names in wanted.items()}


def test_the_committed_reference_names_every_setting_table_field_and_command():
    ref = reference()
    pages = {page: (DOCS / page).read_text(encoding="utf-8") for page in ref.PAGES}
    missing = {
        "settings": [n for n in sorted(_env_names()) if n not in pages[ref.SETTINGS_PAGE]],
        "tables": [str(t) for t in TABLES if f"### {t}" not in pages[ref.TABLES_PAGE]],
        "contract": [
            f.name for f in contract.FIELDS if f"| `{f.name}` |" not in pages[ref.CONTRACT_PAGE]
        ],
        "commands": [
            m for m in ref.COMMAND_MODULES if f"## `python -m {m}`" not in pages[ref.COMMANDS_PAGE]
        ],
    }
    assert missing == {"settings": [], "tables": [], "contract": [], "commands": []}


def test_every_settings_module_is_found():
    # A package's settings module that the hook did not import would leave its settings out.
    modules = set(reference().settings_modules())
    on_disk = {f"{p.parent.name}.settings" for p in ROOT.glob("*/settings.py")} - {
        "common.settings", "tests.settings",
    }  # fmt: skip
    on_disk |= {f"common.{p.stem}" for p in (ROOT / "common").glob("*_settings.py")}
    assert on_disk <= modules


def test_the_settings_reference_says_what_help_says():
    page = reference().settings_page()
    from processor.settings import ProcessorSettings

    row = next(line for line in page.splitlines() if "`IOT_PROCESSOR_TRIGGER`" in line)
    assert "`--trigger`" in row and "`processing_time`, `available_now`" in row
    # A secret's default is never shown, and a local path is no machine's own.
    secret = next(line for line in page.splitlines() if "`IOT_KAFKA_CONNECTION_STRING`" in line)
    assert "secret" in secret
    assert str(ROOT) not in page
    assert ProcessorSettings.env_name("watermark") in page


def test_readme_is_short_undated_and_links_to_files_that_exist():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_README_LINES
    # The two commands come first, before any other command block.
    first_block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    assert first_block.splitlines()[0].startswith("make demo")
    assert first_block.splitlines()[1].startswith("make test")
    for needed in ("make demo-clean", "make clean", "docs/getting-started.md", ".png"):
        assert needed in text, needed
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "a date in the README"
    assert not re.search(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b", text)
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def test_nothing_links_to_a_removed_page():
    texts = [README.read_text(encoding="utf-8")]
    texts += [p.read_text(encoding="utf-8") for p in DOCS.rglob("*.md")]
    assert not [t for t in texts if "processor-costs" in t]


@pytest.mark.subprocess
def test_the_site_builds_strictly_with_every_setting_table_and_field(tmp_path):
    site = tmp_path / "site"
    # The venv's mkdocs script (not python -m, which puts the working directory on the
    # import path): make docs runs the docs group's, of the same versions.
    mkdocs = Path(sys.executable).with_name("mkdocs")
    proc = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
        env=os.environ | {"NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    built = {
        page: html.unescape((site / "reference" / page / "index.html").read_text())
        for page in ("settings", "tables", "contract", "commands")
    }
    assert _missing(built) == {"settings": [], "tables": [], "contract": [], "commands": []}
    # The marker blocks were filled, and every page of the nav was built.
    assert "<!-- reference:" not in (site / "development" / "index.html").read_text()
    for page in ("getting-started", "eventhubs", "cluster", "operating/troubleshooting"):
        assert (site / page / "index.html").is_file(), page
