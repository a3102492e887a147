"""infra.daemons: a daemon in its own process group, found by pid, stopped; its state file."""

from __future__ import annotations

import socket
import sys
import time

import pytest

from common.file_lock import locked
from infra import daemons


def test_a_launched_daemon_is_alive_until_its_group_is_terminated(tmp_path) -> None:
    proc = daemons.launch(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"],
        tmp_path / "daemon.log", tmp_path,
    )  # fmt: skip
    assert daemons.alive(proc.pid)
    # Between fork and exec the child still shows its parent's command line.
    deadline = time.monotonic() + 10
    while "time.sleep(600)" not in (daemons.cmdline(proc.pid) or ""):
        assert time.monotonic() < deadline, daemons.cmdline(proc.pid)
        time.sleep(0.05)
    assert daemons.terminate_group(proc.pid, timeout=10) is True
    assert not daemons.alive(proc.pid)
    assert daemons.cmdline(proc.pid) is None


def test_the_state_file_round_trips_and_a_broken_one_reads_as_empty(tmp_path) -> None:
    state = tmp_path / "daemon.json"
    assert daemons.read_state(state) == {}
    with locked(tmp_path / "lock"):
        daemons.write_state(state, {"pid": 42, "ports": {"rpc": 7077}})
    assert daemons.read_state(state) == {"pid": 42, "ports": {"rpc": 7077}}
    state.write_text("[1, 2]")
    assert daemons.read_state(state) == {}
    state.write_text("{not json")
    assert daemons.read_state(state) == {}


def test_the_clients_port_range_is_read_from_the_kernel_or_linuxs_default(tmp_path) -> None:
    shown = tmp_path / "ip_local_port_range"
    shown.write_text("40000\t50000\n")
    assert daemons.ephemeral_range(shown) == (40000, 50000)
    shown.write_text("garbled")
    assert daemons.ephemeral_range(shown) == (32768, 60999)
    assert daemons.ephemeral_range(tmp_path / "missing") == (32768, 60999)


def test_daemon_ports_are_free_distinct_and_outside_the_clients_local_ports() -> None:
    low, high = daemons.ephemeral_range()
    ports = daemons.free_ports("127.0.0.1", 20)
    assert len(set(ports)) == 20
    assert all(daemons.port_free("127.0.0.1", port) for port in ports)
    if daemons.daemon_port_range() is not None:
        assert not any(low <= port <= high for port in ports)


def test_the_daemons_range_is_the_wider_side_of_the_clients_range(monkeypatch) -> None:
    for clients, expected in [
        ((32768, 60999), range(20000, 32768)),  # Linux's default: below it
        ((49152, 65535), range(20000, 49152)),  # macOS's: below it
        ((1024, 49151), range(49152, 65536)),  # a range from 1024: above it
        ((1024, 65000), None),  # 535 ports above it: the OS picks
    ]:
        monkeypatch.setattr(daemons, "ephemeral_range", lambda clients=clients: clients)
        assert daemons.daemon_port_range() == expected, clients


def test_a_port_in_use_or_excluded_is_not_given(monkeypatch) -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(1)
        taken = listening.getsockname()[1]
        later = range(25002, 25102)  # the first of them that nothing listens on is given
        expected = next(port for port in later if daemons.port_free("127.0.0.1", port))
        picks = iter([taken, 25001, 25001, *later])
        monkeypatch.setattr(daemons._RANDOM, "choice", lambda _ports: next(picks))
        assert daemons.free_ports("127.0.0.1", 1, exclude=[25001]) == [expected]


def test_without_a_range_outside_the_clients_ports_the_os_picks(monkeypatch) -> None:
    if not daemons.EPHEMERAL_RANGE_FILE.is_file():
        pytest.skip("the kernel does not show its clients' range")
    kernel_low, kernel_high = daemons.ephemeral_range()
    monkeypatch.setattr(daemons, "daemon_port_range", lambda: None)
    ports = daemons.free_ports("127.0.0.1", 3)
    assert len(set(ports)) == 3
    # The OS gives its own clients' range: what the kernel says it is.
    assert all(kernel_low <= port <= kernel_high for port in ports)


def test_stopping_a_folder_that_never_held_a_daemon_stops_nothing_and_creates_nothing(
    tmp_path,
) -> None:
    folder = tmp_path / "never-started"
    assert daemons.stop_folder(folder, 1.0) is False
    assert not folder.exists()
    folder.mkdir()
    assert daemons.stop_folder(folder, 1.0) is False  # a folder without a state file
