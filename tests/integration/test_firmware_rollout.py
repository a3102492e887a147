"""A firmware rollout: a mixed v1/v2 stream, with a field the processor's contract lacks.

The producer runs a contract whose version 2 also adds ``uptime_s`` (devices updated
before the contract was); the processor runs the shipped contract, where version 2
renames ``temperature_c`` to ``temp_c`` and adds ``rssi_dbm`` only. A share of the
fleet sends version 2. Every payload is read back from bronze and mapped here, in
plain Python, to the silver row it must give: renamed fields land in their contract
columns, ``uptime_s`` in ``extra_fields`` with its JSON value, and
``ops/schema_drift`` counts exactly the rows that carried it. The pipeline page says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from deltalake import DeltaTable

from common.contract import DEFAULT_CONTRACT, FIELDS
from common.fleet import build_fleet
from common.lake import Table, table_location
from infra.broker import ensure_topic
from loadtest.lake import read_truth
from producer.simulation import firmware_rollout
from tests.connect_fixture import engine_env
from tests.integration.proc import ROOT, process_available_now, run_python, service_env

pytestmark = pytest.mark.integration

FLEET, SEED, COUNT, SHARE = 10, 24, 400, 0.3
UPTIME = 3600
UNDECLARED = f"""
[[envelope]]
name = "uptime_s"
type = "long"
unit = "s"
example = {UPTIME}
"""
V2_KEYS = {"temp_c": "temperature_c"}  # the shipped contract's version 2


def _expected(payload: dict) -> tuple[dict, dict | None]:
    """The contract columns and the undeclared fields that a payload must give in silver."""
    version = payload["schema_version"]
    renamed = V2_KEYS if version == 2 else {}
    declared = {f.name for f in FIELDS} - ({"rssi_dbm"} if version == 1 else set())
    declared = {k for k in declared if k not in renamed.values()} | set(renamed)
    columns = {f.name: None for f in FIELDS}
    extra = {}
    for key, value in payload.items():
        if key in declared:
            columns[renamed.get(key, key)] = value
        else:
            extra[key] = value
    return columns, extra or None


def test_the_seed_rolls_out_devices_with_and_without_temperature() -> None:
    # The scenario below needs both: a v2 device that sends temp_c, and one that does not.
    fleet = build_fleet(FLEET, SEED)
    rolled = np.flatnonzero(firmware_rollout(FLEET, SEED, SHARE) != 1)
    measures = {"temperature_c" in fleet[int(i)].kind.metrics for i in rolled}
    assert len(rolled) == 3 and measures == {True, False}


@pytest.mark.parametrize("mode", ["classic", "connect"])
def test_a_mixed_v1_v2_stream_lands_in_one_set_of_columns(
    mode: str, kafka_broker, tmp_path: Path
) -> None:
    topic = f"firmware-rollout-{mode}"
    ensure_topic(kafka_broker.plaintext, topic, partitions=2)
    newer = tmp_path / "contract.toml"
    text = DEFAULT_CONTRACT.read_text(encoding="utf-8")
    assert 'added = ["rssi_dbm"]' in text
    newer.write_text(
        text.replace('added = ["rssi_dbm"]', 'added = ["rssi_dbm", "uptime_s"]') + UNDECLARED,
        encoding="utf-8",
    )
    base = service_env()
    env = base | {
        "IOT_KAFKA_BOOTSTRAP_SERVERS": kafka_broker.plaintext,
        "IOT_KAFKA_TOPIC": topic,
        "PYTHONUNBUFFERED": "1",
    }
    manifest, lake, log = tmp_path / "manifest.jsonl", tmp_path / "lake", tmp_path / "run.log"
    code = run_python(
        ["-m", "producer", "--scenario", "clean", "--count", str(COUNT), "--rate", "0",
         "--fleet-size", str(FLEET), "--seed", str(SEED), "--rollout-share", str(SHARE),
         "--clock-rate", "2", "--start-time", "2026-01-01T00:00:00Z",
         "--manifest-path", str(manifest)],
        env | {"IOT_CONTRACT": str(newer)}, log, 120,
    )  # fmt: skip
    assert code == 0, log.read_text()[-3000:]
    with engine_env(mode, tmp_path, env) as processor_env:
        process_available_now(processor_env, lake, log, FLEET, SEED, "--queries", "bronze,silver")

    # What was sent, from bronze's raw bytes; the manifest says which devices rolled out.
    bronze = DeltaTable(table_location(str(lake), Table.BRONZE_EVENTS)).to_pyarrow_table()
    payloads = [json.loads(v) for v in bronze.column("value").to_pylist()]
    assert len(payloads) == COUNT
    header = read_truth(manifest).header
    rolled = set(header["run"]["rollout"]["devices"])
    assert len(rolled) == round(SHARE * FLEET)
    by_version = Counter((p["device_id"] in rolled, p["schema_version"]) for p in payloads)
    assert by_version == {(True, 2): COUNT * 3 // FLEET, (False, 1): COUNT * 7 // FLEET}
    assert any("temp_c" in p for p in payloads)  # a rolled-out device measures temperature

    silver = {
        r["event_id"]: r
        for r in DeltaTable(table_location(str(lake), Table.SILVER_EVENTS))
        .to_pyarrow_table()
        .to_pylist()
    }
    assert len(silver) == COUNT
    for payload in payloads:
        columns, extra = _expected(payload)
        row = silver[payload["event_id"]]
        got = {name: row[name] for name in columns}
        got["event_time"] = payload["event_time"]  # a timestamp in silver, text on the wire
        assert got == columns, payload
        assert (json.loads(row["extra_fields"]) if row["extra_fields"] else None) == extra
    quarantine = DeltaTable(table_location(str(lake), Table.SILVER_QUARANTINE))
    assert quarantine.to_pyarrow_table().num_rows == 0

    drift = DeltaTable(table_location(str(lake), Table.OPS_SCHEMA_DRIFT)).to_pyarrow_table()
    counted = Counter()
    for row in drift.to_pylist():
        counted[(row["field"], row["schema_version"])] += row["rows"]
        assert row["devices"] <= len(rolled)
    assert counted == {("uptime_s", 2): sum(1 for p in payloads if "uptime_s" in p)}
    assert sum(counted.values()) == COUNT * 3 // FLEET

    page = textwrap.dedent("""
        from streamlit.testing.v1 import AppTest
        at = AppTest.from_file("dashboard/app.py", default_timeout=60)
        at.switch_page("views/pipeline.py")
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        print("\\n".join(w.value for w in at.warning))
    """)
    shown = subprocess.run(
        [sys.executable, "-c", page], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=env | {"IOT_LAKE_ROOT": str(lake)}, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert f"new field `uptime_s` seen on {COUNT * 3 // FLEET} rows since " in shown.stdout
