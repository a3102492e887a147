"""The processor's one-off commands (``devices``, ``maintain``) stop at once while Spark starts.

A SIGTERM (what a supervisor or ``kill`` sends) that arrives while the command's JVM
is starting gives the start-up up within seconds: exit 0, one line saying so, and
no JVM left behind (a JVM cut short before its gateway was up would otherwise run,
orphaned, until killed).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest

from infra.jars import bundle_dir
from tests.integration.proc import ROOT, processor_env

pytestmark = [pytest.mark.integration, pytest.mark.subprocess]

STOP_LIMIT_S = 10.0


def _driver_jvm(pid: int) -> list[psutil.Process]:
    """The driver JVM, once spark-submit's script has exec'd it (a direct child)."""
    try:
        children = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    return [c for c in children if c.name() == "java"]


@pytest.mark.parametrize("command", ["devices", "maintain"])
def test_sigterm_while_the_jvm_starts_gives_the_command_up(tmp_path, command):
    env = processor_env(
        "127.0.0.1:9", "unused", tmp_path / "lake", bundle_dir("spark"),
        IOT_PULSE_HOME=str(tmp_path / "home"),
    )  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "processor", command],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (jvms := _driver_jvm(proc.pid)):
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "no JVM started within 120 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        output, _ = proc.communicate(timeout=60)
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert took <= STOP_LIMIT_S, f"stopped {took:.1f} s after SIGTERM\n{output}"
    assert output.splitlines()[-1] == "[processor] stopped before the start-up finished", output
    assert "Traceback" not in output
    _, alive = psutil.wait_procs(jvms, timeout=10)
    assert alive == [], "the command's JVM outlived it"
