"""common.child: a service in its own process group, stopped politely, then for sure."""

from __future__ import annotations

import os
import signal
import time

from common.child import Child

# Prints its pid and a grandchild's, then waits; with "ignore", SIGTERM does not stop it.
SCRIPT = """
import signal, subprocess, sys, time
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("ready", grandchild.pid, flush=True)
time.sleep(600)
"""


def _started(tmp_path, mode: str) -> tuple[Child, int]:
    child = Child("sleeper", ["-c", SCRIPT, mode], dict(os.environ), tmp_path / "child.log")
    deadline = time.monotonic() + 30
    while "ready" not in child.log.read_text():
        assert time.monotonic() < deadline, child.tail()
        time.sleep(0.05)
    return child, int(child.tail().split()[-1])


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # Killed but not reaped yet (its parent is gone; init reaps it): a zombie.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:  # reaped in between
        return True


def test_sigterm_stops_it_and_its_group_goes_too(tmp_path) -> None:
    child, grandchild = _started(tmp_path, "default")
    told: list[str] = []
    assert child.stop(30, told.append) == -signal.SIGTERM
    assert told == []
    deadline = time.monotonic() + 10
    while not _gone(grandchild):
        assert time.monotonic() < deadline, "the grandchild outlived the stop"
        time.sleep(0.05)
    assert child.stop(30) == -signal.SIGTERM  # again: the same code, no signal sent


def test_a_child_that_ignores_sigterm_is_killed_after_the_timeout(tmp_path) -> None:
    child, grandchild = _started(tmp_path, "ignore")
    told: list[str] = []
    started = time.monotonic()
    assert child.stop(1, told.append) == -signal.SIGKILL
    assert time.monotonic() - started < 10
    assert told == ["sleeper did not stop in 1 s; killing it"]
    deadline = time.monotonic() + 10
    while not _gone(grandchild):
        assert time.monotonic() < deadline, "the grandchild outlived the kill"
        time.sleep(0.05)
    assert child.tail().startswith("ready ")


# Exits with the number of SIGTERMs it got in half a second after the first.
COUNTER = """
import signal, sys, time
got = []
signal.signal(signal.SIGTERM, lambda *_: got.append(1))
print("ready", flush=True)
while not got:
    time.sleep(0.01)
time.sleep(0.5)
sys.exit(len(got))
"""


def test_asked_to_stop_first_it_gets_one_sigterm_only(tmp_path) -> None:
    child = Child("counter", ["-c", COUNTER], dict(os.environ), tmp_path / "child.log")
    deadline = time.monotonic() + 30
    while "ready" not in child.log.read_text():
        assert time.monotonic() < deadline, child.tail()
        time.sleep(0.05)
    child.ask_to_stop()  # the demo asks every service first, then waits for each
    assert child.stop(30) == 1  # a second SIGTERM would abort a service's clean stop
