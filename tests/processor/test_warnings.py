"""Python warnings in the processor: one line on the console, the whole text in the log."""

from __future__ import annotations

import logging
import warnings

import pytest

from processor import __main__ as processor_main


def test_a_warning_is_one_line_and_a_given_up_retry_is_left_to_its_error(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, "iot_pulse.processor"):
        processor_main._warnings_in_one_line()
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
