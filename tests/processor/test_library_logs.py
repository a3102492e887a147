"""Library logs go to the processor's log file, not the console (processor.__main__)."""

from __future__ import annotations

import logging

import pytest
from pyspark.errors import AnalysisException


def test_a_sql_error_pyspark_logs_goes_to_the_log_file_only(spark, tmp_path, capfd):
    from pyspark.logger import PySparkLogger

    from processor.__main__ import PYSPARK_ERROR_LOGGERS, _quiet_libraries

    root = logging.getLogger()
    log_file = tmp_path / "processor.log"
    handler = logging.FileHandler(log_file)
    saved = {n: list(PySparkLogger.getLogger(n).handlers) for n in PYSPARK_ERROR_LOGGERS}
    root.addHandler(handler)
    try:
        _quiet_libraries()
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
