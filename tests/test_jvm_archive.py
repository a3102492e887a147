"""The tests' class archive: named by what it must match, and mapped by the Spark drivers."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests import jvm_archive


@pytest.fixture
def fake_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Spark jars folder of two jars, and the state folder under tmp_path."""
    jars = tmp_path / "jars"
    jars.mkdir()
    for name in ("spark-core.jar", "scala-library.jar"):
        (jars / name).write_bytes(b"PK" + name.encode())
    monkeypatch.setattr(jvm_archive, "spark_jars_dir", lambda: jars)
    monkeypatch.setenv("IOT_PULSE_HOME", str(tmp_path / "home"))
    return jars


def test_no_archive_means_no_option(fake_install: Path) -> None:
    assert jvm_archive.archive_options() == ""


def test_an_archive_there_is_mapped_with_the_jvms_messages_off(fake_install: Path) -> None:
    path = jvm_archive.archive_path()
    assert path is not None and path.parent == fake_install.parent / "home" / "jvm"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    assert jvm_archive.archive_options() == (
        f"-XX:SharedArchiveFile={path} -Xlog:cds=off,cds+dynamic=off"
    )


def test_the_name_changes_with_any_jar(fake_install: Path) -> None:
    first = jvm_archive.archive_path()
    assert jvm_archive.archive_path() == first
    jar = fake_install / "spark-core.jar"
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 1_000_000_000))
    touched = jvm_archive.archive_path()
    (fake_install / "delta.jar").write_bytes(b"PK")
    added = jvm_archive.archive_path()
    assert len({first, touched, added}) == 3


def test_without_java_there_is_no_archive(
    fake_install: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jvm_archive, "java_executable", lambda: None)
    assert jvm_archive.archive_path() is None
    assert jvm_archive.archive_options() == ""


@pytest.mark.spark
def test_the_tests_spark_driver_maps_the_archive(spark) -> None:
    """The JVM maps an archive it can use, and does not map one of other jars."""
    from tests.jvm_options import SHORT_RUN_JVM_OPTIONS

    path = jvm_archive.archive_path()
    if path is None or not path.is_file():
        pytest.skip("no class archive: make it with python -m tests.jvm_archive")
    assert f"-XX:SharedArchiveFile={path}" in SHORT_RUN_JVM_OPTIONS.split()
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[attr-defined]
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert str(path) in maps


def test_the_maker_leaves_an_archive_that_is_there(
    fake_install: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = jvm_archive.archive_path()
    assert path is not None
    path.parent.mkdir(parents=True)
    path.write_bytes(b"archive")
    assert jvm_archive.main([]) == 0
    assert capsys.readouterr().out == f"[tests] class archive for the Spark drivers: {path}\n"
    assert path.read_bytes() == b"archive"


def test_the_maker_without_java_says_so_and_succeeds(
    fake_install: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(jvm_archive, "java_executable", lambda: None)
    assert jvm_archive.main([]) == 0
    assert capsys.readouterr().out == (
        "[tests] no java found: the Spark drivers start without a class archive\n"
    )
    assert not (fake_install.parent / "home").exists()


def test_a_failed_run_is_one_line_naming_the_log_kept_beside_the_archive(
    fake_install: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = jvm_archive.archive_path()
    assert path is not None
    calls: list[tuple[Path, Path]] = []

    def fail(target: Path, work: Path, log: Path) -> None:
        calls.append((target, log))
        assert work.is_dir()
        raise RuntimeError(f"the archive run wrote no archive (exit code 1): see {log}")

    monkeypatch.setattr(jvm_archive, "make_archive", fail)
    assert jvm_archive.main([]) == 1
    log = path.parent / "archive-run.log"
    assert calls == [(path, log)]
    assert capsys.readouterr().out == (
        "[tests] making the Spark drivers' class archive (once per Spark and JDK, under a minute)\n"
        f"[tests] the archive run wrote no archive (exit code 1): see {log}\n"
    )


@pytest.mark.subprocess
def test_a_producer_that_fails_is_one_line_naming_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_producer(*_args: object) -> list[str]:
        return [sys.executable, "-c", "import sys; print('no events'); sys.exit(3)"]

    monkeypatch.setattr(jvm_archive, "file_events_command", failing_producer)
    target, log = tmp_path / "spark-driver-test.jsa", tmp_path / "run.log"
    with pytest.raises(RuntimeError) as failed:
        jvm_archive.make_archive(target, tmp_path, log, timeout_s=60)
    assert str(failed.value) == f"the archive run's producer failed: see {log}"
    assert log.read_text() == "no events\n"
    assert not target.exists()


@pytest.mark.subprocess
def test_a_run_that_does_not_end_is_stopped_and_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jvm_archive, "file_events_command", lambda *_: [sys.executable, "-c", ""])
    hanging = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(jvm_archive, "file_processor_command", lambda *_: hanging)
    target, log = tmp_path / "spark-driver-test.jsa", tmp_path / "run.log"
    began = time.monotonic()
    with pytest.raises(RuntimeError) as failed:
        jvm_archive.make_archive(target, tmp_path, log, timeout_s=2)
    assert str(failed.value) == f"the archive run did not end within 2 s: see {log}"
    assert time.monotonic() - began < 10
    assert not target.exists()


@pytest.mark.subprocess
def test_a_run_that_fails_leaves_no_archive_and_names_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests import jvm_options

    # A JVM that cannot start (Spark's launcher ignores unknown options, not a bad heap):
    # the processor exits at once, with no archive written.
    monkeypatch.setattr(jvm_options, "QUICK_JIT_OPTIONS", "-Xmx1k")
    target = tmp_path / "jvm" / "spark-driver-test.jsa"
    target.parent.mkdir()
    with pytest.raises(RuntimeError) as failed:
        jvm_archive.make_archive(target, tmp_path, tmp_path / "archive-run.log", timeout_s=120)
    assert str(failed.value) == (
        f"the archive run wrote no archive (exit code 1): see {tmp_path / 'archive-run.log'}"
    )
    assert list(target.parent.iterdir()) == []
    assert (
        "error: the Spark driver's JVM exited while it started: Not allowed to specify max "
        "heap(Xmx) memory settings through java options"
    ) in (tmp_path / "archive-run.log").read_text()
