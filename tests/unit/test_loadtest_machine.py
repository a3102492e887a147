"""A process's CPU seconds from /proc, checked against the kernel's times(2)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from loadtest.machine import process_cpu_s


def test_process_cpu_s_reads_what_times_reports() -> None:
    sum(range(3_000_000))  # some CPU, so that the counters are not both zero
    tick = 1 / os.sysconf("SC_CLK_TCK")
    before = os.times()
    measured = process_cpu_s(os.getpid())
    after = os.times()
    assert before.user + before.system - tick <= measured <= after.user + after.system + tick


def test_a_process_that_is_gone_raises_oserror() -> None:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    with pytest.raises(OSError):
        process_cpu_s(int(child.stdout))
