"""The driver JVM this process launches: its start, its stderr, whether it has exited, its end.

A classic session's JVM is a child of the processor (not under spark-submit, whose JVM
is the processor's parent, nor through Spark Connect, where there is none). Its stderr
goes through ``processor.driver_stderr``. A signal can end it without this process: a
SIGTERM sent to every process of the run (systemd, ``timeout``) reaches it too, and it
stops by its own shutdown hook; the callers that then find Spark gone ask
``driver_jvm_gone`` before they take a failure for that. No call into the JVM here:
only the process, through psutil.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import suppress
from pathlib import Path

import psutil
from pyspark.sql import SparkSession

from processor.driver_stderr import JvmStderr

log = logging.getLogger("iot_pulse.processor")
# How long a driver JVM that failed a call is given to exit, if a signal is stopping it.
DRIVER_EXIT_S = 10.0
_STDERR: JvmStderr | None = None  # the one JVM this process launched


def launch(builder: SparkSession.Builder, log_file: Path | None) -> SparkSession:
    """Start the session's JVM, its stderr through a pipe this process copies.

    Args:
        builder: The session's builder, configured.
        log_file: Where the JVM's output goes once quiet, or if it fails to start.

    Raises:
        JvmStartError: The JVM exited while it started (one line; its output in the log).
    """
    global _STDERR  # noqa: PLW0603 - the one JVM of this process
    _STDERR = JvmStderr(log_file)
    with _STDERR.capture():
        spark = builder.getOrCreate()
    _accumulator_errors_to_log(spark)
    return spark


def launched() -> bool:
    """Whether this process launched a driver JVM."""
    return _STDERR is not None


def quiet() -> None:
    """From now on the JVM's stderr goes to the log, but FATAL events (``JvmStderr.quiet``)."""
    if _STDERR is not None:
        _STDERR.quiet()


def stop_session(spark: SparkSession) -> None:
    """Stop the session; a driver JVM a signal stopped already leaves nothing to stop."""
    try:
        spark.stop()
    except Exception as exc:
        if not went_away(exc, "before the session stopped"):
            raise


def went_away(exc: BaseException, when: str) -> bool:
    """Whether ``exc`` came of a driver JVM that has exited (then logged); else a failure.

    Args:
        exc: What a call into Spark raised.
        when: Words for the log, e.g. ``"while the run stopped"``.
    """
    if not driver_jvm_gone():
        return False
    log.info("Spark went away %s", when, exc_info=exc)
    return True


def _accumulator_errors_to_log(spark: SparkSession) -> None:
    """Send the errors of PySpark's accumulator server to the log, not to the terminal.

    That server (a ``socketserver``, in this process) reads the driver JVM's updates;
    when the JVM dies first (a signal sent to every process of the run), its read ends
    in an ``EOFError`` whose trace ``socketserver`` prints on stderr.
    """
    server = getattr(spark.sparkContext, "_accumulatorServer", None)
    if server is not None:
        server.handle_error = _accumulator_error


def _accumulator_error(_request: object, address: object) -> None:
    """Log the accumulator server's error: the JVM's end at INFO, anything else as a warning."""
    ended = isinstance(sys.exc_info()[1], EOFError)
    log.log(
        logging.INFO if ended else logging.WARNING,
        "the driver JVM's accumulator connection from %s %s",
        address,
        "ended" if ended else "failed",
        exc_info=True,
    )


def end_cut_short_jvm(timeout_s: float = 5.0) -> None:
    """End the driver JVM whose start a signal cut short, if this process launched one.

    PySpark launches the JVM, waits for it to write where its gateway listens, and
    removes that file's folder on its way out. A JVM that had not written it yet then
    fails in its main thread while its gateway's server thread goes on: it would run,
    orphaned, until killed. A JVM past that point ends by itself when this process's
    pipe to its stdin closes; ending it here is then only sooner.
    """
    for jvm in (jvms := _launched_jvms()):
        with suppress(psutil.NoSuchProcess):
            jvm.terminate()
    for jvm in psutil.wait_procs(jvms, timeout=timeout_s)[1]:
        with suppress(psutil.NoSuchProcess):
            jvm.kill()


def driver_jvm_gone(within_s: float = DRIVER_EXIT_S) -> bool:
    """Whether the driver JVM this process launched has exited, waiting up to ``within_s``.

    A JVM sent SIGTERM stops its SparkContext, then exits, within seconds. False when
    this process launched no JVM (Spark Connect; under spark-submit the JVM is its parent).
    """
    if _STDERR is None:
        return False
    deadline = time.monotonic() + within_s
    while _launched_jvms():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def _launched_jvms() -> list[psutil.Process]:
    """This process's children that are a JVM PySpark launched (zombies left out)."""
    return [c for c in psutil.Process().children() if _is_pyspark_jvm(c)]


def _is_pyspark_jvm(process: psutil.Process) -> bool:
    """Whether ``process`` is ``spark-submit ... pyspark-shell``, as PySpark launches its JVM."""
    try:
        argv = process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return bool(argv) and argv[-1] == "pyspark-shell"
