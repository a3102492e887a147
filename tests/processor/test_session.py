"""The processor's Spark session (``processor.session.build_session``)."""

from __future__ import annotations

from processor.session import CALL_SITE_CAPTURE


def test_dataframe_calls_do_not_capture_their_call_site(spark):
    """No call site is recorded around a Column method, so it is one round trip to the JVM.

    With PySpark's DataFrame debugging on (Spark's default), ``alias`` takes 11: the
    active session, the setting, and the call site set and cleared in the JVM.
    ``bench/silver_writes.py`` counts the round trips (``py4j_calls_column_alias``).
    """
    assert [spark.conf.get(key) for key in CALL_SITE_CAPTURE] == ["false", "false"]
