"""The processor's Spark session (``processor.session.build_session``)."""

from __future__ import annotations

from collections.abc import Callable

import py4j.clientserver
import pytest
from pyspark.sql import functions as F

from processor.session import CALL_SITE_CAPTURE


def _round_trips(monkeypatch: pytest.MonkeyPatch, build: Callable[[], object]) -> int:
    """How many py4j commands ``build`` sends to the JVM."""
    sent = [0]
    send = py4j.clientserver.ClientServerConnection.send_command

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        sent[0] += 1
        return send(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(py4j.clientserver.ClientServerConnection, "send_command", counting)
        build()
    return sent[0]


def test_dataframe_calls_do_not_capture_their_call_site(spark, monkeypatch):
    """A Column method is one round trip to the JVM: no call site is recorded around it.

    With PySpark's DataFrame debugging on (Spark's default), ``alias`` takes 11: the
    active session, the setting, and the call site set and cleared in the JVM.
    """
    assert [spark.conf.get(key) for key in CALL_SITE_CAPTURE] == ["false", "false"]
    column = F.col("reading")
    assert _round_trips(monkeypatch, lambda: column.alias("renamed")) == 1
