"""infra.jars: a resolved bundle is found without Maven; a stale one needs it."""

from __future__ import annotations

import pytest

from common.paths import HOME_ENV
from infra import jars


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv(HOME_ENV, str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no mvn: resolving would fail
    return tmp_path


def test_ensure_jar_dir_returns_the_folder_of_a_resolved_bundle_without_maven(home):
    folder = home / "jars" / "kafka"
    folder.mkdir(parents=True)
    (folder / "kafka-clients.jar").write_bytes(b"")
    (folder / ".stamp").write_text(jars._pom_digest("kafka"))

    assert jars.ensure_jar_dir("kafka", quiet=True) == folder
    assert jars.ensure_jars("kafka", quiet=True) == [folder / "kafka-clients.jar"]


def test_ensure_jar_dir_resolves_a_stale_bundle_and_says_maven_is_missing(home):
    folder = home / "jars" / "kafka"
    folder.mkdir(parents=True)
    (folder / ".stamp").write_text("the digest of an older pom")

    with pytest.raises(jars.JarResolutionError, match=r"Maven \('mvn'\) is not on PATH"):
        jars.ensure_jar_dir("kafka", quiet=True)
