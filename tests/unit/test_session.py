"""The processor's Spark session (``processor.session.build_session``)."""

from __future__ import annotations

from pyspark.sql import functions as F

from processor.session import CALL_SITE_CAPTURE


def test_dataframe_calls_do_not_capture_their_call_site(spark, py4j_calls):
    """A Column method is one round trip to the JVM: no call site is recorded around it.

    With PySpark's DataFrame debugging on (Spark's default), ``alias`` takes 11: the
    active session, the setting, and the call site set and cleared in the JVM.
    """
    assert [spark.conf.get(key) for key in CALL_SITE_CAPTURE] == ["false", "false"]
    column = F.col("reading")
    assert py4j_calls(lambda: column.alias("renamed")) == 1
