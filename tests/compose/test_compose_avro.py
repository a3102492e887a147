"""The ``avro`` profile as a user runs it: Avro readings through a schema registry.

``docker compose --profile avro up producer-avro processor-avro dashboard-avro`` on the
repository's unchanged files (a stand-in for the registry's public image where no image
registry answers, ``engine.py``). The tests run in order on one stack:

1. every service the three named ones need is healthy (the registry, Kafka, the
   processor, the dashboard), ``kafka-init`` exited 0, the producer runs;
2. the registry holds the contract's versions under the topic's subject, as the producer
   registered them, and refuses an incompatible schema (BACKWARD, set by the compose file);
3. every record on the events topic is Confluent-framed Avro of a registered id, except
   the malformed ones the scenario makes on purpose;
4. gold holds the whole fleet, silver holds both contract versions of the rollout, and the
   quarantine holds exactly the Avro scenario's reasons;
5. the dashboard renders every page.
"""

from __future__ import annotations

import json
import struct
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from common.contract import VERSIONS
from common.delta_table import open_delta_table
from common.fleet import device_id
from common.lake import Table
from common.reasons import UNDECODABLE_AVRO, UNKNOWN_SCHEMA_ID
from common.registry_settings import CCOMPAT_PATH
from tests.compose.conftest import new_stack
from tests.compose.stack import Stack, wait_for

pytestmark = pytest.mark.timeout(3600)

FLEET_SIZE = 50  # the compose file's DEMO_FLEET_SIZE default
TOPIC = "iot-events"  # its DEMO_TOPIC default
SUBJECT = f"{TOPIC}-value"
NAMED = ("producer-avro", "processor-avro", "dashboard-avro")
SERVICES = {
    "kafka": "healthy",
    "kafka-init": "exited 0",
    "schema-registry": "healthy",
    "processor-avro": "healthy",
    "dashboard-avro": "healthy",
    "producer-avro": "running",
}
# What the realistic scenario's malformed Avro records are quarantined as (the producer's
# broken_json, wrong_type and missing_field kinds: not Avro, a body cut short, an id the
# registry does not hold) and the readings of devices the fleet does not have.
AVRO_REASONS = {"unparsable", UNDECODABLE_AVRO, UNKNOWN_SCHEMA_ID, "unknown_device"}


@pytest.fixture(scope="module")
def stack(docker_engine) -> Iterator[Stack]:
    """The avro profile's three services and what they depend on, built and started."""
    stack = new_stack("iotpulse-compose-avro")
    stack.compose("--profile", "avro", "down", "-v", "--remove-orphans")
    started = time.monotonic()
    stack.compose("--profile", "avro", "build", *NAMED)
    print(f"\n[compose-test] docker compose build (avro): {time.monotonic() - started:.0f} s")
    stack.compose("--profile", "avro", "up", "-d", *NAMED)
    try:
        yield stack
    finally:
        stack.compose("--profile", "avro", "logs", "--no-color", check=False)
        stack.compose("--profile", "avro", "down", "-v", "--remove-orphans", check=False)


def _registry(stack: Stack, path: str, body: dict | None = None) -> tuple[int, object]:
    """``GET`` (or ``POST`` ``body``) the registry's API on its published port."""
    url = f"http://localhost:{stack.env['REGISTRY_HOST_PORT']}{CCOMPAT_PATH}{path}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    req.add_header("Content-Type", "application/vnd.schemaregistry.v1+json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _rows(stack: Stack, table: Table, columns: list[str]) -> list[dict]:
    path = stack.volume("avro-lake") / str(table)
    if not (path / "_delta_log").is_dir():
        return []
    return open_delta_table(str(path)).to_pyarrow_dataset().to_table(columns=columns).to_pylist()


def test_every_service_becomes_healthy(stack):
    took = stack.wait_healthy(SERVICES)
    print(f"\n[compose-test] the avro profile healthy {took:.0f} s after docker compose up")
    states = stack.states("avro")
    assert {name: states[name]["state"] for name in SERVICES} == {
        "kafka": "running", "kafka-init": "exited", "schema-registry": "running",
        "processor-avro": "running", "dashboard-avro": "running", "producer-avro": "running",
    }  # fmt: skip
    # Only what the named services need: neither the JSON producer nor its processor.
    assert "producer" not in states and "processor" not in states


def test_the_registry_holds_the_contract_and_refuses_a_breaking_schema(stack):
    status, versions = _registry(stack, f"/subjects/{SUBJECT}/versions")
    assert (status, versions) == (200, [v.number for v in VERSIONS])
    status, latest = _registry(stack, f"/subjects/{SUBJECT}/versions/latest")
    assert status == 200
    fields = json.loads(latest["schema"])["fields"]
    # A new required field: readers of the versions before it could not read old records.
    breaking = {"type": "record", "name": "Breaking", "fields": [
        *fields, {"name": "required_extra", "type": "int"}]}  # fmt: skip
    status, refusal = _registry(
        stack, f"/subjects/{SUBJECT}/versions", {"schema": json.dumps(breaking)}
    )
    assert status == 409, refusal
    assert _registry(stack, f"/subjects/{SUBJECT}/versions")[1] == versions


def test_the_topic_carries_framed_avro_of_registered_ids(stack):
    ids = {_registry(stack, f"/subjects/{SUBJECT}/versions/{v.number}")[1]["id"] for v in VERSIONS}
    consumer = Consumer(
        {"bootstrap.servers": f"localhost:{stack.env['KAFKA_HOST_PORT']}",
         "group.id": f"compose-avro-{time.time_ns()}", "enable.auto.commit": False}
    )  # fmt: skip
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
        headers = []
        while len(headers) < 2000:
            msg = consumer.poll(10)
            assert msg is not None, f"read {len(headers)} records"
            assert msg.error() is None, msg.error()
            value = msg.value()
            headers.append(
                (value[0], struct.unpack(">I", value[1:5])[0] if value[0] == 0 else None)
            )
    finally:
        consumer.close()
    framed = [schema_id for magic, schema_id in headers if magic == 0]
    # Registered ids but for the scenario's unregistered one (about 1 in 2,000 records);
    # the records that are not framed are its broken ones (as many).
    assert len([i for i in framed if i in ids]) >= len(headers) - 20
    assert {i for i in framed if i in ids} == ids  # both versions of the rollout on the wire


def test_silver_gold_and_quarantine_from_avro(stack):
    fleet = {device_id(i) for i in range(FLEET_SIZE)}

    def devices(table: Table) -> set[str]:
        return {row["device_id"] for row in _rows(stack, table, ["device_id"])}

    wait_for(lambda: devices(Table.GOLD_DEVICE_1M) == fleet, 300, "every device in gold")
    versions = {r["schema_version"] for r in _rows(stack, Table.SILVER_EVENTS, ["schema_version"])}
    assert versions == {v.number for v in VERSIONS}

    def reasons() -> bool:
        found = {r["reason"] for r in _rows(stack, Table.SILVER_QUARANTINE, ["reason"])}
        assert found <= AVRO_REASONS, found - AVRO_REASONS
        return found == AVRO_REASONS

    wait_for(reasons, 300, f"the quarantine to hold {sorted(AVRO_REASONS)}")


def test_the_dashboard_renders_every_page(stack):
    health = stack.compose("exec", "-T", "dashboard-avro", "python", "-m", "dashboard.health")
    assert health.strip().splitlines()[-1] == "healthy: every page renders"
