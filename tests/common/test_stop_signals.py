"""How a run is asked to stop (common.stop_signals): real signals to this process."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from common.stop_signals import StartInterrupted, StopFlag, stopped_by_signals


@pytest.fixture
def restore_handlers():
    """The test's own SIGINT and SIGTERM handlers back after it."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_a_step_a_signal_must_not_cut_ends_first_then_the_start_up_is_given_up(
    restore_handlers,
) -> None:
    stop = StopFlag()
    stop.install()
    steps: list[str] = []
    with pytest.raises(StartInterrupted), stop.starting():
        with stop.unbroken():
            os.kill(os.getpid(), signal.SIGTERM)
            steps.append("launched")  # reached: the signal did not cut the step
            steps.append("listed")
        steps.append("next step")  # not reached: the stop came at the step's end
    assert (steps, stop.reason, stop.count) == (["launched", "listed"], "SIGTERM", 1)


def test_an_unbroken_step_outside_a_start_up_raises_nothing(restore_handlers) -> None:
    stop = StopFlag()
    stop.install()
    with stop.unbroken():
        os.kill(os.getpid(), signal.SIGINT)
    assert (stop.is_set(), stop.reason) == (True, "SIGINT")


def test_a_second_signal_aborts_an_announced_run_and_only_counts_for_a_quiet_one(
    restore_handlers, capfd
) -> None:
    announced = StopFlag("processor")
    announced.install()
    os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
    assert capfd.readouterr().err == "[processor] stopping (SIGTERM); again to abort\n"
    quiet = StopFlag()
    with stopped_by_signals(quiet):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
    assert (quiet.reason, quiet.count) == ("SIGINT", 2)
    assert capfd.readouterr().err == ""


def test_a_supervised_child_ignores_ctrl_c_but_not_its_parents_sigterm(
    restore_handlers, capfd
) -> None:
    stop = StopFlag("realtime", supervised=True)
    stop.install()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    os.kill(os.getpid(), signal.SIGINT)
    assert not stop.is_set()
    os.kill(os.getpid(), signal.SIGTERM)
    assert stop.reason == "SIGTERM"
    # A SIGTERM to the whole process group, then the parent's: one stop, not an abort.
    os.kill(os.getpid(), signal.SIGTERM)
    assert (stop.reason, stop.count) == ("SIGTERM", 2)
    assert capfd.readouterr().err == "[realtime] stopping (SIGTERM)\n"


def test_a_signal_during_start_up_gives_it_up_at_once(restore_handlers, capfd) -> None:
    stop = StopFlag("processor")
    stop.install()
    with pytest.raises(StartInterrupted), stop.starting():
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Event().wait(5)  # a wait the start-up would not finish (the JVM's start)
    assert stop.is_set()
    assert capfd.readouterr().err == "[processor] stopping (SIGTERM); again to abort\n"
    with pytest.raises(StartInterrupted), stop.starting():  # asked already: not entered
        raise AssertionError("the block ran")


def test_after_start_up_a_signal_only_asks_the_run_to_stop(restore_handlers) -> None:
    stop = StopFlag("processor")
    stop.install()
    with stop.starting():
        pass
    os.kill(os.getpid(), signal.SIGTERM)
    assert stop.wait(5)  # no exception: the queries stop at the next check


def test_on_stop_runs_once_at_the_first_signal_after_start_up(restore_handlers) -> None:
    calls: list[str | None] = []
    stop = StopFlag("realtime-alerts", supervised=True, on_stop=lambda: calls.append(stop.reason))
    stop.install()
    with pytest.raises(StartInterrupted), stop.starting():
        os.kill(os.getpid(), signal.SIGTERM)
    assert calls == []  # a start-up given up: nothing to quiet
    stop = StopFlag("realtime-alerts", supervised=True, on_stop=lambda: calls.append(stop.reason))
    stop.install()
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)
    assert calls == ["SIGTERM"]
    assert (stop.reason, stop.count) == ("SIGTERM", 2)


def test_an_on_stop_that_fails_loses_no_stop(restore_handlers) -> None:
    def broken() -> None:
        raise OSError("the log folder is gone")

    stop = StopFlag(on_stop=broken)
    stop.install()
    os.kill(os.getpid(), signal.SIGTERM)
    assert (stop.reason, stop.count) == ("SIGTERM", 1)
