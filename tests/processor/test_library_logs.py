"""Library logs go to the processor's log file, not the console; warnings are one line."""

from __future__ import annotations

import logging
import warnings

import pytest
from pyspark.errors import AnalysisException

from processor.library_logs import PYSPARK_ERROR_LOGGERS, quiet_libraries, warnings_in_one_line


def test_a_sql_error_pyspark_logs_goes_to_the_log_file_only(spark, tmp_path, capfd):
    from pyspark.logger import PySparkLogger

    root = logging.getLogger()
    log_file = tmp_path / "processor.log"
    handler = logging.FileHandler(log_file)
    saved = {n: list(PySparkLogger.getLogger(n).handlers) for n in PYSPARK_ERROR_LOGGERS}
    root.addHandler(handler)
    try:
        quiet_libraries()
        capfd.readouterr()
        with pytest.raises(AnalysisException, match="TABLE_OR_VIEW_NOT_FOUND"):
            spark.sql("SELECT * FROM no_such_table_here").collect()
        handler.flush()
    finally:
        root.removeHandler(handler)
        handler.close()
        for name, handlers in saved.items():
            PySparkLogger.getLogger(name).handlers[:] = handlers
    assert "no_such_table_here" not in capfd.readouterr().err
    assert "TABLE_OR_VIEW_NOT_FOUND" in log_file.read_text()


def test_a_warning_is_one_line_and_a_given_up_retry_is_left_to_its_error(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, "iot_pulse.processor"):
        warnings_in_one_line()
        warnings.warn(
            "[RETRIES_EXCEEDED] The maximum number of retries has been exceeded.", stacklevel=1
        )
        warnings.warn(
            "StreamingQueryListenerBus Handler thread received exception. The error is: <x\n"
            "\tstatus = StatusCode.UNAVAILABLE\n>",
            UserWarning,
            stacklevel=1,
        )
    assert capfd.readouterr().err == (
        "warning: StreamingQueryListenerBus Handler thread received exception. The error is: <x\n"
    )
    logged = [r.getMessage() for r in caplog.records if r.name == "iot_pulse.processor"]
    assert len(logged) == 1
    assert logged[0].endswith(
        "UserWarning: StreamingQueryListenerBus Handler thread received exception. The error "
        "is: <x\n\tstatus = StatusCode.UNAVAILABLE\n>"
    )
