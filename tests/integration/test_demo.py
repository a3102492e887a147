"""`make demo` as a user runs it: the dashboard answers, gold fills, Ctrl-C leaves nothing behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status
    except OSError:
        return None


def _gold_rows(lake: Path) -> int:
    try:
        return (
            DeltaTable(str(lake / "gold" / "device_1m"))
            .to_pyarrow_table(columns=["events"])
            .num_rows
        )
    except TableNotFoundError:
        return 0


def _processes_with_env(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def test_make_demo_runs_and_stops_cleanly(tmp_path):
    home = tmp_path / "home"
    port = _free_port()
    marker = f"IOT_PULSE_HOME={home}"
    env = os.environ | {"IOT_PULSE_HOME": str(home)}
    log = (tmp_path / "demo.log").open("wb")
    proc = subprocess.Popen(
        ["make", "demo", f"DEMO_ARGS=--port {port} --rate 100 --fleet-size 20"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    lake = home / "demo" / "lake"
    # From `make demo` (the venv and jars already there) to gold rows: 3 minutes.
    started = time.monotonic()
    deadline = started + 180
    ok_http = ok_gold = False
    try:
        while time.monotonic() < deadline and not (ok_http and ok_gold):
            assert proc.poll() is None, (tmp_path / "demo.log").read_text()[-3000:]
            ok_http = ok_http or _http_status(f"http://127.0.0.1:{port}") == 200
            ok_gold = ok_gold or _gold_rows(lake) > 0
            time.sleep(2)
        assert ok_http, "dashboard never answered HTTP 200 within 3 minutes"
        assert ok_gold, "gold had no rows within 3 minutes"
        print(f"dashboard up and gold rows after {time.monotonic() - started:.0f} s")
        assert _processes_with_env(marker), "the demo's processes should carry the marker"
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        rc = proc.wait(90)
        log.close()
    output = (tmp_path / "demo.log").read_text()
    # make re-raises the SIGINT it got once its child is done, as it does on Ctrl-C.
    assert rc in (0, -signal.SIGINT), output[-3000:]
    assert "[demo] stopping (SIGINT)" in output
    assert "[demo] stopped" in output
    time.sleep(1)
    assert _processes_with_env(marker) == [], "processes were left behind"
