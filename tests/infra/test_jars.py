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


def test_the_cli_fetches_the_default_bundles_and_refuses_an_unknown_one(home, monkeypatch, capsys):
    asked = []
    monkeypatch.setattr(jars, "ensure_jars", lambda bundle, quiet=False: asked.append(bundle))
    assert jars.main([]) == 0
    assert asked == ["spark", "kafka"]
    assert jars.main(["s3"]) == 0
    assert asked == ["spark", "kafka", "s3"]
    with pytest.raises(SystemExit) as exc:
        jars.main(["spark", "sparkk"])
    assert exc.value.code == 2
    assert capsys.readouterr().err == (
        "error: python -m infra.jars: unknown bundle sparkk; choose from spark, kafka, s3, "
        "schema-registry (see python -m infra.jars --help)\n"
    )


def test_the_cli_help_lists_the_bundles(capsys):
    with pytest.raises(SystemExit) as exc:
        jars.main(["--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "BUNDLE spark, kafka, s3, schema-registry (default: spark kafka; s3 is for a lake on "
        "S3, schema-registry for Avro)"
    ) in text


def test_the_cli_says_in_one_line_that_maven_is_missing(home, capsys):
    assert jars.main(["kafka"]) == 1
    assert capsys.readouterr().err == (
        "error: Maven ('mvn') is not on PATH; install it (apt-get install maven) to fetch the jars\n"
    )
