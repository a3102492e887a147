"""The project's own files at the root: the license, the changelog, the contributing and
security guides, and ``.env.example``, against what the code and the Makefile say.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

import yaml

from common.settings import setting_docs
from tests.docs_reference import reference

ROOT = Path(__file__).resolve().parents[2]
# The SHA-256 of https://www.apache.org/licenses/LICENSE-2.0.txt, unchanged.
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def _text(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def test_the_license_is_the_apache_license_as_published_and_pyproject_says_so():
    data = (ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(data).hexdigest() == APACHE_2_SHA256
    lines = [line.strip() for line in data.decode().splitlines() if line.strip()]
    assert lines[:2] == ["Apache License", "Version 2.0, January 2004"]
    assert "END OF TERMS AND CONDITIONS" in lines
    assert tomllib.loads(_text("pyproject.toml"))["project"]["license"] == "Apache-2.0"


def test_the_changelog_has_an_unreleased_section_and_no_dates_or_commit_ids():
    text = _text("CHANGELOG.md")
    version = tomllib.loads(_text("pyproject.toml"))["project"]["version"]
    headings = re.findall(r"^## (.+)$", text, flags=re.M)
    assert headings == ["[Unreleased]"]
    assert f"The first release, {version}" in text
    assert re.findall(r"^### (.+)$", text, flags=re.M) == ["Added"]
    assert not re.search(r"\b(19|20)\d\d-\d\d-\d\d\b", text)
    assert not re.search(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b", text)


def test_contributing_names_every_check_target_of_the_makefile():
    phony = re.search(r"^\.PHONY: (.+)$", _text("Makefile"), flags=re.M)
    assert phony is not None
    checks = [t for t in phony[1].split() if t.startswith("test") or t in ("lint", "bench")]
    assert sorted(checks) == [
        "bench", "lint", "test", "test-cluster", "test-compose", "test-fast",
    ]  # fmt: skip
    text = _text("CONTRIBUTING.md")
    wanted = [*checks, "setup", "docs", "reference"]
    assert [t for t in wanted if not re.search(rf"\bmake {re.escape(t)}(?![\w-])", text)] == []


def test_security_names_every_secret_and_every_published_port():
    text = _text("SECURITY.md")
    secrets = sorted(
        doc.env for cls in reference().settings_classes() for doc in setting_docs(cls) if doc.secret
    )
    assert len(secrets) == 6
    assert [env for env in secrets if f"| `{env}` |" not in text] == []
    compose = yaml.safe_load(_text("docker-compose.yml"))
    published = {
        name: [port.rsplit(":", 1)[0] for port in service["ports"]]
        for name, service in compose["services"].items()
        if "ports" in service
    }
    rows = {
        name: [
            host
            for host in hosts
            if not re.search(rf"^\| `{name}`.*`{re.escape(host)}`", text, re.M)
        ]
        for name, hosts in published.items()
    }
    assert {name: hosts for name, hosts in rows.items() if hosts} == {}


def test_env_example_sets_nothing_and_points_at_the_settings_reference():
    lines = _text(".env.example").splitlines()
    assigned = [line for line in lines if re.match(r"^\s*[A-Za-z_][A-Za-z0-9_]*=", line)]
    assert assigned == []
    examples = [line for line in lines if re.match(r"^# [A-Z][A-Z0-9_]*=", line)]
    assert "# IOT_KAFKA_AUTH=connection_string" in examples
    assert "docs/reference/settings.md" in "\n".join(lines[:10])
