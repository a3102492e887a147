"""The send loop's pacing (``producer.pacing``): exact steps from the profile's integral."""

from __future__ import annotations

import pytest

from producer.pacing import MAX_SLEEP_S, MIN_SLEEP_S, Pacer, Step
from producer.rate import parse_profile


def test_a_step_sends_what_is_due_or_waits_for_the_next_ten_milliseconds_of_it():
    pacer = Pacer(parse_profile("constant", 1000.0))
    # 50 ms in, nothing sent: 50 readings are due (steps are of 10 at 1,000/s).
    assert pacer.step(0.05, 0) == Step(send=50)
    # 5 ms in: 5 due, less than a step: wait for the other 5 (5 ms).
    step = pacer.step(0.005, 0)
    assert step.send == 0 and step.wait_s == pytest.approx(0.005)
    # A count limit with 3 readings left: a step of 3.
    assert pacer.step(0.05, 0, left=3) == Step(send=3)
    assert pacer.forgiven == 0.0


def test_falling_behind_by_more_than_two_seconds_of_work_forgives_the_rest():
    pacer = Pacer(parse_profile("constant", 1000.0), batch_size=512)
    # 10 s in, nothing sent: 10,000 due, capped at 2 s of work (2,000); 8,000 forgiven.
    assert pacer.step(10.0, 0) == Step(send=512)
    assert pacer.forgiven == 8000.0
    # The next step counts from the forgiven total: 10,000 - 8,000 - 512 sent.
    assert pacer.step(10.0, 512) == Step(send=512)
    assert pacer.forgiven == 8000.0


def test_waits_are_bounded_and_an_unlimited_profile_sends_whole_batches():
    slow = Pacer(parse_profile("constant", 1.0))
    assert slow.step(0.0, 0) == Step(wait_s=MAX_SLEEP_S)  # 1 s to the next reading
    fast = Pacer(parse_profile("constant", 1000.0))
    assert fast.step(0.0099999, 0).wait_s == MIN_SLEEP_S
    assert Pacer(parse_profile("constant", 0.0), batch_size=100).step(5.0, 10**6) == Step(send=100)
    assert Pacer(parse_profile("constant", 0.0), batch_size=100).step(0, 0, left=7) == Step(send=7)
