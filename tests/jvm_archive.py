"""A class-data archive for the tests' Spark drivers: made once per Spark and JDK install.

Every Spark driver starts by loading and verifying the same classes of Spark, Scala,
Hadoop, Parquet and RocksDB, tens of thousands of them, and the suite starts dozens of
drivers (processors, ``spark-submit``, the tests' own session). With
``-XX:SharedArchiveFile`` naming a dynamic CDS archive of those classes, a JVM maps
them ready-made instead, and a short processor run spends less CPU
(``bench/jvm_archive.py`` measures how much).
``tests.jvm_options`` adds the option when the archive is there.

``python -m tests.jvm_archive`` makes it, unless there: one short processor run (a few
hundred events from files, bronze and silver, ``available_now``) with
``-XX:ArchiveClassesAtExit``, which the JVM writes as it exits. An archive made by a run
of every query maps no more of a full run's classes: the other queries' classes come
from the same jars, loaded by then. ``make test`` runs it before the Spark tests.

The archive's name carries what it must match (the JDK, Spark's jars): after an upgrade
a new one is made, and a JVM never meets an archive of other jars (it would say so and
load its classes as usual). The archive holds the classes of Spark's own folder; those
of ``spark.jars`` (Delta, the Kafka connector) come through another class loader, which
dynamic archives leave out.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common.paths import PROJECT_ROOT, state_dir

# The archive run's readings: a few hundred from a small fleet.
_DUMP_EVENTS, _DUMP_FLEET, _DUMP_SEED = 400, 10, 7


def file_events_command(folder: Path, count: int, fleet: int, seed: int) -> list[str]:
    """``python -m producer`` writing ``count`` clean readings as JSON-lines files in ``folder``."""
    return [sys.executable, "-m", "producer", "--transport", "file", "--out-dir", str(folder),
            "--count", str(count), "--rate", "0", "--fleet-size", str(fleet),
            "--seed", str(seed), "--scenario", "clean"]  # fmt: skip


def file_processor_command(
    landing: Path, lake: Path, fleet: int, seed: int, *flags: str
) -> list[str]:
    """``python -m processor run`` over the files in ``landing`` to the end (``available_now``).

    Args:
        landing: The readings' folder (``file_events_command``'s).
        lake: The lake root.
        fleet: The fleet size the readings were made with.
        seed: Their seed.
        *flags: More flags, e.g. ``--queries bronze,silver``.
    """
    from infra.jars import ensure_jar_dir

    return [sys.executable, "-m", "processor", "run", "--source", "files",
            "--landing-dir", str(landing), "--trigger", "available_now",
            "--fleet-size", str(fleet), "--seed", str(seed),
            "--shuffle-partitions", "2", "--driver-memory", "1g",
            "--jars-dir", str(ensure_jar_dir("spark", quiet=True)),
            "--lake-root", str(lake), *flags]  # fmt: skip


def java_executable() -> Path | None:
    """The ``java`` PySpark starts: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).is_file() else None


def spark_jars_dir() -> Path:
    """The folder of the jars on a PySpark driver's classpath."""
    spec = importlib.util.find_spec("pyspark")  # found, not imported: conftest asks early
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("pyspark is not installed")
    return Path(spec.submodule_search_locations[0]).resolve() / "jars"


def archive_path() -> Path | None:
    """Where the archive of this JDK and these Spark jars is, or None without a ``java``.

    Named by a hash of the ``java`` binary's path, size and time and of each Spark jar's
    name, size and time: what a JVM checks before it maps an archive.
    """
    java = java_executable()
    if java is None:
        return None
    digest = hashlib.sha256()
    for path in (java, *sorted(spark_jars_dir().glob("*.jar"))):
        info = path.stat()
        digest.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return state_dir() / "jvm" / f"spark-driver-{digest.hexdigest()[:16]}.jsa"


def archive_options() -> str:
    """JVM options that map the archive, or ``""`` when there is none to map.

    The JVM's own CDS messages are off: an archive it cannot map only costs speed.
    """
    path = archive_path()
    if path is None or not path.is_file() or any(c.isspace() for c in str(path)):
        return ""
    return f"-XX:SharedArchiveFile={path} -Xlog:cds=off,cds+dynamic=off"


def _wait_for_group(pgid: int, timeout_s: float) -> bool:
    """Wait until no process of group ``pgid`` is left (the JVM writes the archive last)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.5)
    return False


def make_archive(target: Path, work: Path, log: Path, timeout_s: float = 600) -> None:
    """Run one short processor with ``-XX:ArchiveClassesAtExit``; the archive goes to ``target``.

    Args:
        target: The archive's path (written atomically: a half-written archive never
            has this name).
        work: A folder for the run's events and lake.
        log: Where the run's output goes (kept: it says why a run failed).
        timeout_s: The longest the producer, the processor, and its JVM's exit after it
            may each take.

    Raises:
        RuntimeError: the run failed, or its JVM wrote no archive; the message names
            the log.
    """
    from processor.settings import ProcessorSettings
    from tests.integration.proc import service_env
    from tests.jvm_options import QUICK_JIT_OPTIONS

    partial = target.with_name(f".{target.name}.{os.getpid()}")
    options = f"{QUICK_JIT_OPTIONS} -XX:ArchiveClassesAtExit={partial}"
    env = service_env(
        PYTHONUNBUFFERED="1", **ProcessorSettings.env_vars(driver_java_options=options)
    )
    landing = work / "landing"
    with log.open("wb") as out:
        try:
            subprocess.run(
                file_events_command(landing, _DUMP_EVENTS, _DUMP_FLEET, _DUMP_SEED),
                cwd=PROJECT_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, check=True,
                timeout=timeout_s,
            )  # fmt: skip
        except subprocess.SubprocessError as exc:
            raise RuntimeError(f"the archive run's producer failed: see {log}") from exc
        proc = subprocess.Popen(
            file_processor_command(
                landing, work / "lake", _DUMP_FLEET, _DUMP_SEED, "--queries", "bronze,silver"
            ),
            cwd=PROJECT_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        exited = False
        try:
            code = proc.wait(timeout_s)
            exited = _wait_for_group(proc.pid, timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            if not exited:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
    if code != 0 or not exited or not partial.is_file():
        partial.unlink(missing_ok=True)  # a JVM stopped while writing leaves half an archive
        if code is None or (code == 0 and not exited):
            raise RuntimeError(f"the archive run did not end within {timeout_s:.0f} s: see {log}")
        raise RuntimeError(f"the archive run wrote no archive (exit code {code}): see {log}")
    partial.replace(target)


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.jvm_archive``: make the archive unless it is there."""
    argparse.ArgumentParser(
        prog="python -m tests.jvm_archive", description=__doc__.splitlines()[0]
    ).parse_args(argv)
    target = archive_path()
    if target is None:
        print("[tests] no java found: the Spark drivers start without a class archive")
        return 0
    if target.is_file():
        print(f"[tests] class archive for the Spark drivers: {target}")
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    print(
        "[tests] making the Spark drivers' class archive (once per Spark and JDK, under a minute)"
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jvm-archive-") as work:
        try:
            make_archive(target, Path(work), target.parent / "archive-run.log")
        except RuntimeError as exc:
            print(f"[tests] {exc}")
            return 1
    print(f"[tests] class archive made in {time.monotonic() - started:.0f} s: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
