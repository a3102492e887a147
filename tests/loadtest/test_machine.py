"""A process's CPU seconds (psutil), checked against the kernel's times(2)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from loadtest.machine import process_cpu_s, processes_cpu_s, session_pids


def test_process_cpu_s_reads_what_times_reports() -> None:
    sum(range(3_000_000))  # some CPU, so that the counters are not both zero
    tick = 1 / os.sysconf("SC_CLK_TCK")
    before = os.times()
    measured = process_cpu_s(os.getpid())
    after = os.times()
    assert before.user + before.system - tick <= measured <= after.user + after.system + tick


def test_exited_children_add_what_the_ended_children_used() -> None:
    tick = 1 / os.sysconf("SC_CLK_TCK")
    subprocess.run([sys.executable, "-c", "sum(range(20_000_000))"], check=True)  # waited for
    times = os.times()
    own = process_cpu_s(os.getpid())
    with_children = process_cpu_s(os.getpid(), exited_children=True)
    children = times.children_user + times.children_system
    assert children > 0.1  # the child's loop
    assert abs((with_children - own) - children) <= 2 * tick


def test_a_process_that_is_gone_raises_oserror() -> None:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    with pytest.raises(OSError):
        process_cpu_s(int(child.stdout))


def test_processes_cpu_s_counts_ended_children_and_nothing_for_a_gone_process() -> None:
    tick = 1 / os.sysconf("SC_CLK_TCK")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    subprocess.run([sys.executable, "-c", "sum(range(20_000_000))"], check=True)
    before = os.times()
    measured = processes_cpu_s([os.getpid(), int(gone.stdout)])
    after = os.times()
    low = before.user + before.system + before.children_user + before.children_system
    high = after.user + after.system + after.children_user + after.children_system
    assert low - tick <= measured <= high + tick


def test_session_pids_are_the_processes_of_a_session_and_only_they() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; "
         "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"],
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while len(pids := session_pids(child.pid)) < 2:
            assert time.monotonic() < deadline, pids
            time.sleep(0.05)
        assert child.pid in pids and len(pids) == 2  # the child and its own child
        assert os.getpid() not in pids
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
