"""common.deadline: a call's answer or error within its deadline, else NoAnswerInTime."""

from __future__ import annotations

import threading
import time

import pytest

from common.deadline import NoAnswerInTime, within


def test_an_answer_in_time_is_returned_and_an_error_raised_as_it_is() -> None:
    assert within(5.0, lambda: 41 + 1) == 42
    with pytest.raises(KeyError, match="'missing'"):
        within(5.0, lambda: {}["missing"])


def test_a_call_that_does_not_return_in_time_is_left_to_its_thread() -> None:
    release = threading.Event()
    started_at = time.monotonic()
    try:
        with pytest.raises(NoAnswerInTime, match=r"^no answer within 0.3 s$"):
            within(0.3, release.wait, "waits")
        assert 0.3 <= time.monotonic() - started_at < 1.3
        assert [t.daemon for t in threading.enumerate() if t.name == "waits"] == [True]
    finally:
        release.set()
