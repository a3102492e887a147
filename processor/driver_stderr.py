"""A classic session's JVM stderr, through a pipe the processor copies: a stop can quiet it.

The driver JVM of a classic session is a child of the processor and writes to the
stderr it inherits: log4j's console events (one line each, ``LOG4J2_CONFIG``) and what
Java and Scala print there themselves, such as the traces of failed futures that
Spark's block manager prints in bursts when it stops while block removals run. The
processor starts the JVM with a pipe as its stderr (``JvmStderr.capture``), and a
thread copies the pipe to the terminal. From ``quiet`` on (a deliberate stop) the
terminal gets only FATAL events; the other events are left out (the log file has them
already, with their traces) and everything else the JVM prints goes to the log file.
The processor's own output keeps the terminal. Each line is cut of secrets
(``common.redact``) on its way. No call into the JVM: through Spark Connect there is no
JVM here, and nothing to capture.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from pyspark.errors import PySparkRuntimeError

from common.cli import CliError, console
from common.redact import redact

# A log4j console event (LOG4J2_CONFIG's console pattern): time, level, logger.
_EVENT = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ")


class JvmStderr:
    """Where the JVM's stderr goes: the terminal, then (``quiet``) the log file."""

    def __init__(self, log_file: Path | None) -> None:
        """Copy to the terminal until ``quiet``; then to ``log_file`` (None: nowhere)."""
        self._log_file = log_file
        self._log: BinaryIO | None = None
        self._quiet = False
        self._lock = threading.RLock()  # a signal handler may call quiet() inside quiet()

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        """Give the processes started in this block (the JVM) a pipe as their stderr.

        Raises:
            JvmStartError: The JVM exited before PySpark could reach it: what it printed
                goes to the log file, and the error says its cause in one line.
        """
        read_fd, write_fd = os.pipe()
        sys.stderr.flush()
        terminal = os.dup(2)
        os.dup2(write_fd, 2)
        exited = False
        try:
            yield
        except PySparkRuntimeError as exc:
            if exc.getCondition() != "JAVA_GATEWAY_EXITED":
                raise
            exited = True
        finally:
            sys.stderr.flush()
            os.dup2(terminal, 2)
            os.close(terminal)
            os.close(write_fd)  # the JVM holds its copy; the pipe ends when the JVM does
            if not exited:
                threading.Thread(
                    target=self._copy, args=(read_fd,), name="jvm-stderr", daemon=True
                ).start()
        if exited:
            raise JvmStartError(start_failure(_read_to_end(read_fd), self._log_file))

    def quiet(self) -> None:
        """From now on: FATAL events to the terminal, the JVM's own prints to the log file.

        A log file that cannot be opened (its folder removed under the run) leaves the
        JVM's prints on the terminal, and says so.
        """
        with self._lock:
            if self._quiet:
                return
            if self._log_file is not None:
                try:
                    self._log = self._log_file.open("ab")
                except OSError as exc:
                    console.warning("[processor] the JVM's stderr stays the console: %s", exc)
                    return
            self._quiet = True

    def _copy(self, read_fd: int) -> None:
        with os.fdopen(read_fd, "rb") as pipe:
            for line in pipe:
                self._route(line)

    def _route(self, line: bytes) -> None:
        # log4j's events are cut already (LOG4J2_CONFIG); what Java prints itself is not.
        line = redact(line.decode("utf-8", "replace")).encode()
        with self._lock:
            event = _EVENT.match(line)
            if not self._quiet or (event is not None and event.group(1) == b"FATAL"):
                _write_all(2, line)
            elif event is None and self._log is not None:
                self._log.write(line)
                self._log.flush()


class JvmStartError(CliError):
    """The driver's JVM exited while it started (a download failed, Java is missing ...)."""


# Why the JVM did not start, by what it printed: its main method's exception, or
# spark-submit's own refusal (followed by its usage text); else its last line.
_MAIN_FAILED = re.compile(r'^Exception in thread "main" (.+)$', re.MULTILINE)
_SUBMIT_REFUSED = re.compile(r"^Error: (.+)$", re.MULTILINE)
# Ivy's words when spark.jars.packages cannot be fetched.
_NOT_FETCHED = ("download failed", "unresolved dependency")
# How long a JVM that exited may take to let go of its stderr.
_EXITED_READ_S = 5.0


def start_failure(output: bytes, log_file: Path | None) -> str:
    """The one line that says why the JVM did not start; its whole output goes to the log.

    Args:
        output: What the JVM printed on its stderr.
        log_file: The processor's log file (None: the output is not kept).
    """
    # Cut out as every line a command writes is: a repository URL may carry a password.
    text = redact(output.decode("utf-8", "replace"))
    if log_file is None:  # no log file to keep it (a read-only container): the terminal
        _write_all(2, text.encode())
    else:
        with contextlib.suppress(OSError), log_file.open("a", encoding="utf-8") as log:
            log.write(f"the driver JVM exited while it started; it printed:\n{text}\n")
    found = _MAIN_FAILED.findall(text) or _SUBMIT_REFUSED.findall(text)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    cause = found[-1].strip() if found else (lines[-1] if lines else "it printed nothing")
    where = f" (its output is in {log_file})" if log_file is not None else " (its output is above)"
    if any(words in cause for words in _NOT_FETCHED):
        return (
            f"Spark could not fetch the connector jars ({cause}){where}: check that Maven "
            "Central can be reached (or a local ~/.m2 that holds those jars whole), or run "
            "'python -m infra.jars spark' and set IOT_PROCESSOR_JARS_DIR to the folder it "
            "fills (<state dir>/jars/spark)"
        )
    return f"the Spark driver's JVM exited while it started: {cause}{where}"


def _read_to_end(read_fd: int) -> bytes:
    """All a pipe holds, for at most ``_EXITED_READ_S`` (a process may keep it open)."""
    chunks: list[bytes] = []

    def read() -> None:
        with os.fdopen(read_fd, "rb") as pipe:
            chunks.extend(iter(lambda: pipe.read(65536), b""))

    reader = threading.Thread(target=read, name="jvm-stderr-exited", daemon=True)
    reader.start()
    reader.join(_EXITED_READ_S)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]
