"""infra.daemons: a daemon in its own process group, found by pid, stopped; its state file."""

from __future__ import annotations

import sys

from infra import daemons


def test_a_launched_daemon_is_alive_until_its_group_is_terminated(tmp_path) -> None:
    proc = daemons.launch(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"],
        tmp_path / "daemon.log", tmp_path,
    )  # fmt: skip
    assert daemons.alive(proc.pid)
    assert "time.sleep(600)" in (daemons.cmdline(proc.pid) or "")
    assert daemons.terminate_group(proc.pid, timeout=10) is True
    assert not daemons.alive(proc.pid)
    assert daemons.cmdline(proc.pid) is None


def test_the_state_file_round_trips_and_a_broken_one_reads_as_empty(tmp_path) -> None:
    state = tmp_path / "daemon.json"
    assert daemons.read_state(state) == {}
    with daemons.locked(tmp_path / "lock"):
        daemons.write_state(state, {"pid": 42, "ports": {"rpc": 7077}})
    assert daemons.read_state(state) == {"pid": 42, "ports": {"rpc": 7077}}
    state.write_text("[1, 2]")
    assert daemons.read_state(state) == {}
    state.write_text("{not json")
    assert daemons.read_state(state) == {}
