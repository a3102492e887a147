"""docs/run-by-hand.md works as written: its command blocks, in order, on a local broker.

Which blocks run: every ```` ```bash ```` block of the page, except one whose line
before (blank lines aside) is an HTML comment ``<!-- not run: REASON -->``, which the
built site does not show. Those are the blocks that serve until Ctrl-C (the dashboard,
the bridge, the notifier), need another terminal, or set up what the test already has
(the venv, the jars).

The blocks run as one script in one bash process, so that an ``export`` or an ``eval``
of one block holds in the next, with ``set -euo pipefail`` (``-x`` too: the output
shows each command as it ran). The venv's ``bin`` comes first on ``PATH``, as
``source .venv/bin/activate`` puts it. The working directory is a temp folder whose
``.local`` is the state folder (``IOT_PULSE_HOME``), so that the page's paths
(``.local/jars/spark``, ``run/manifest.jsonl``) resolve there as in the project folder,
with the jars this checkout already fetched linked in. The page's own figures (200
readings a second for 10 seconds) are small enough to run as they are.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from infra import broker
from infra.jars import ensure_jar_dir
from tests.jvm_options import SHORT_RUN_ENV

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "run-by-hand.md"
FENCE = "```bash"
NOT_RUN = re.compile(r"<!-- not run: (?P<reason>\S[^>]*\S) -->")
# The broker's start, a producer run of 10 s, Spark's start and three stages, verify, on
# two cores shared with the rest of the suite.
SCRIPT_TIMEOUT_S = 480.0


def page_blocks(text: str) -> list[tuple[str, str | None]]:
    """The page's bash blocks in order: each block's text, and why it is not run (or None).

    Raises:
        ValueError: a block has no closing fence.
    """
    lines = text.splitlines()
    blocks: list[tuple[str, str | None]] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != FENCE:
            i += 1
            continue
        before = next((ln.strip() for ln in reversed(lines[:i]) if ln.strip()), "")
        marker = NOT_RUN.fullmatch(before)
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise ValueError(f"the bash block at line {i + 1} has no closing fence")
        blocks.append(("\n".join(lines[i + 1 : end]), marker["reason"] if marker else None))
        i = end + 1
    return blocks


def run_blocks() -> list[str]:
    """The blocks the test runs, in order."""
    return [block for block, reason in page_blocks(PAGE.read_text()) if reason is None]


def test_the_blocks_run_are_the_pages_main_path_and_each_other_says_why() -> None:
    blocks = page_blocks(PAGE.read_text())
    first_lines = [block.splitlines()[0] for block, reason in blocks if reason is None]
    assert first_lines == [
        "eval \"$(python -m infra.broker start | grep '^  export ')\"",
        "python -m infra.broker topic iot-events",
        "python -m producer --rate 200 --duration-s 10 --manifest-path run/manifest.jsonl",
        "export IOT_PROCESSOR_JARS_DIR=.local/jars/spark",
        "python -m loadtest verify --manifest run/manifest.jsonl --out run/verify",
        "python -m infra.broker stop",
    ]
    not_run = [block.splitlines()[0] for block, reason in blocks if reason is not None]
    assert not_run == [
        "make jars                   # creates .venv, installs the packages, fetches the Kafka "
        "and Spark jars",
        "streamlit run dashboard/app.py",
        "eval \"$(python -m infra.mqtt_broker start | grep '^  export ')\"   # IOT_MQTT_HOST, "
        "IOT_MQTT_PORT",
        "source .venv/bin/activate",
        "python -m infra.broker topic iot-alerts.deadletter   # alerts a destination never took",
    ]


def test_a_comment_that_is_not_the_marker_leaves_a_block_run() -> None:
    text = "<!-- not run: serves -->\n\n```bash\nA\n```\n<!-- a note -->\n```bash\nB\nC\n```\n"
    assert page_blocks(text) == [("A", "serves"), ("B\nC", None)]
    with pytest.raises(ValueError, match=r"^the bash block at line 1 has no closing fence$"):
        page_blocks("```bash\nA\n")


def _manifest_acked(path: Path) -> tuple[dict, int]:
    """The manifest's header, and the acknowledged readings its device lines list."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    acked = sum(len(line["event_ids"]) for line in lines if line["type"] == "device")
    return lines[0], acked


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.subprocess
def test_the_hand_run_blocks_work_as_written(tmp_path: Path) -> None:
    workdir = tmp_path / "project"
    home = workdir / ".local"
    home.mkdir(parents=True)
    ensure_jar_dir("kafka", quiet=True)
    (home / "jars").symlink_to(ensure_jar_dir("spark", quiet=True).parent)
    script = "\n".join(["set -euxo pipefail", "PS4='+ [${SECONDS}s] '", *run_blocks()])
    env = {k: v for k, v in os.environ.items() if not k.startswith("IOT_")}
    env |= SHORT_RUN_ENV | {
        "IOT_PULSE_HOME": str(home),
        "PATH": f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ['PATH']}",
    }
    proc = subprocess.Popen(
        ["bash", "-c", script], cwd=workdir, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=SCRIPT_TIMEOUT_S)
        left_running = broker.status(home / "broker")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        broker.stop(home / "broker")  # what a failed block left running
    print(out)
    assert proc.returncode == 0, out[-4000:]
    assert left_running is None, "the last block left the broker running"
    assert out.rstrip().endswith("\nstopped"), out[-2000:]

    ports = json.loads((home / "broker" / "broker.json").read_text())["ports"]
    address = f"{broker.BIND_HOST}:{ports['plaintext']}"
    assert address in out.splitlines(), "the echo of the exported address"
    assert f"topic iot-events ready on {address}" in out.splitlines()
    assert "[processor] all available data processed" in out.splitlines()

    header, acked = _manifest_acked(workdir / "run" / "manifest.jsonl")
    assert (header["run"]["rate"], header["run"]["duration_s"]) == (200.0, 10.0)
    assert header["totals"]["messages_failed"] == 0
    assert header["totals"]["events_acked"] == acked
    report = json.loads((workdir / "run" / "verify" / "verify.json").read_text())
    # Every acknowledged reading: in bronze once, in silver once, none lost, none pending.
    assert report["ok"] is True
    assert {k: report["counts"][k] for k in ("acked", "bronze_rows", "silver_rows")} == {
        "acked": acked, "bronze_rows": acked, "silver_rows": acked,
    }  # fmt: skip
    assert report["counts"]["quarantine_rows"] == 0
    assert {k: v for k, v in report["loss"].items() if not k.startswith("examples_")} == {
        "total": 0, "missing_from_bronze": 0, "dropped_unexplained": 0,
        "quarantined_valid": 0, "pending": 0,
    }  # fmt: skip
    assert report["duplicates"]["silver_duplicated_ids"] == 0
    assert report["duplicates"]["bronze_unexpected_copies"] == 0
    assert report["failures"] == []
