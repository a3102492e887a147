"""What libraries print: their logs to the log file, Python's warnings one line each.

The console shows the processor's own lines and one-line errors; py4j's, PySpark's and
Python's warnings' full text goes to the log file (``common.cli.log_file``).
"""

from __future__ import annotations

import logging
import warnings

from common import cli
from processor.stopping import BatchInterruptedError

log = logging.getLogger("iot_pulse.processor")


class _NotAStoppedBatch(logging.Filter):
    """Drops py4j's report (with its traceback) of a batch failed by a deliberate stop."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], BatchInterruptedError))


# PySpark's loggers of the SQL and DataFrame errors it raises (pyspark.errors).
PYSPARK_ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")


def _warning_in_one_line(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: object = None,
    line: str | None = None,
) -> None:
    """``warnings.showwarning``: the warning's first line on the console, all of it in the log."""
    log.warning("%s:%d: %s: %s", filename, lineno, category.__name__, message)
    cli.console.warning("warning: %s", cli.first_line(Exception(str(message))))


def warnings_in_one_line() -> None:
    """A Python warning is one line on the console, its whole text in the log.

    PySpark's Spark Connect client warns so of a listener it lost. Its warning of a call
    it gave up retrying is left out: the call's error follows it.
    """
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]")
    warnings.showwarning = _warning_in_one_line


def quiet_libraries() -> None:
    """Library logs go to the log file, not the console.

    py4j logs every connection at INFO, and every error of a callback with its trace.
    PySpark logs each error it raises from a SQL statement, the JVM's trace included,
    as JSON on stderr (a handler of its own, not the root's): a MERGE that loses to a
    compaction, retried, would print pages. Those go to the root's handlers (the log).
    Python's warnings are one line each (``warnings_in_one_line``).
    """
    warnings_in_one_line()
    logging.getLogger("py4j").setLevel(logging.WARNING)
    logging.getLogger("py4j.clientserver").addFilter(_NotAStoppedBatch())
    from pyspark.logger import PySparkLogger

    for name in PYSPARK_ERROR_LOGGERS:
        logger = PySparkLogger.getLogger(name)
        logger.handlers[:] = logging.getLogger().handlers  # not addHandler: it adds JSON
