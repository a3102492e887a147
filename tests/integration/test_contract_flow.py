"""The contract drives the house: a field and a metric added to it alone reach silver and gold.

A test contract is the shipped ``common/contract.toml`` plus one envelope field
(``site_zone``) and one metric (``signal_dbm``), given to every process through
``IOT_CONTRACT``. The real producer sends through the broker, the real processor
(``available_now``) writes the lake; no code is edited. The field and the metric have
no model in the simulator, so every device sends their ``example`` values: the
expected silver and gold values are known exactly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from common.lake import Table, table_location
from infra.broker import ensure_topic
from loadtest.lake import read_truth
from tests.integration.proc import (
    contract_with_zone_and_signal,
    process_available_now,
    run_python,
    service_env,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FLEET, SEED, COUNT = 8, 5, 480
ZONE, SIGNAL = "zone-a", -67.5


def test_added_field_and_metric_flow_to_silver_and_gold(kafka_broker, tmp_path: Path) -> None:
    contract = contract_with_zone_and_signal(tmp_path / "contract.toml", ZONE, SIGNAL)
    topic = "contract-flow"
    ensure_topic(kafka_broker.plaintext, topic, partitions=2)
    base = service_env()
    env = base | {
        "IOT_CONTRACT": str(contract),
        "IOT_KAFKA_BOOTSTRAP_SERVERS": kafka_broker.plaintext,
        "IOT_KAFKA_TOPIC": topic,
        "PYTHONUNBUFFERED": "1",
    }
    manifest, lake = tmp_path / "manifest.jsonl", tmp_path / "lake"
    produced = run_python(
        ["-m", "producer", "--scenario", "clean", "--count", str(COUNT), "--rate", "0",
         "--fleet-size", str(FLEET), "--seed", str(SEED), "--clock-rate", "4",
         "--start-time", "2026-01-01T00:00:00Z", "--manifest-path", str(manifest)],
        env, tmp_path / "producer.log", 120,
    )  # fmt: skip
    assert produced == 0, (tmp_path / "producer.log").read_text()[-3000:]
    process_available_now(
        env, lake, tmp_path / "processor.log", FLEET, SEED, "--queries", "silver", timeout_s=600
    )

    sent = read_truth(manifest)
    silver = DeltaTable(table_location(str(lake), Table.SILVER_EVENTS)).to_pyarrow_table()
    assert silver.num_rows == COUNT
    assert set(silver.column("event_id").to_pylist()) == set(
        sent.events.collect()["event_id"].to_list()
    )
    assert Counter(silver.column("site_zone").to_pylist()) == {ZONE: COUNT}
    assert Counter(silver.column("signal_dbm").to_pylist()) == {SIGNAL: COUNT}

    gold = (
        DeltaTable(table_location(str(lake), Table.GOLD_DEVICE_1M)).to_pyarrow_table().to_pylist()
    )
    assert sum(r["events"] for r in gold) == COUNT
    assert {r["device_id"] for r in gold} == {f"dev-{i:05d}" for i in range(FLEET)}
    for row in gold:
        values = (row["signal_dbm_min"], row["signal_dbm_avg"], row["signal_dbm_max"])
        assert values == (SIGNAL, SIGNAL, SIGNAL)
        assert row["signal_dbm_count"] == row["events"]

    label = subprocess.run(
        [sys.executable, "-c", "from dashboard.data import metric_label as m; "
         "print(json.dumps(m('signal_dbm')))".replace("json.", "__import__('json').")],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(label.stdout) == "Signal (dBm)"
