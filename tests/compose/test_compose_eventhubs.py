"""The compose file's ``eventhubs`` profile, rehearsed on a SASL_SSL listener of the stack's Kafka.

As the README's compose section says: ``python -m infra.compose_rehearsal`` writes the
listener's keystore, JAAS file, CA and an env file with an Event-Hubs-shaped connection
string; ``docker compose --env-file ... -f docker-compose.yml -f
infra/docker/eventhubs-rehearsal.yml --profile eventhubs up`` starts ``eh-producer``,
``eh-processor`` and ``eh-dashboard``, unchanged but for trusting the CA. They must
connect through ``SASL_SSL`` (the connection string's ``Endpoint`` is all they get), fill
their own lake, and never print a fragment of the key; a wrong key is refused in one line
within 30 s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from dotenv import dotenv_values

from common.delta_table import open_delta_table
from common.fleet import device_id
from common.lake import Table
from infra import compose_rehearsal
from tests.common.test_secrets import leaks
from tests.compose.conftest import new_stack
from tests.compose.stack import Stack, wait_for

pytestmark = pytest.mark.timeout(2400)

EH_FLEET_SIZE = 50  # the compose file's EH_FLEET_SIZE default
SERVICES = {
    "kafka": "healthy",
    "kafka-init": "exited 0",
    "eh-processor": "healthy",
    "eh-dashboard": "healthy",
    "eh-producer": "running",
}


@pytest.fixture(scope="module")
def rehearsal(docker_engine, tmp_path_factory) -> Iterator[tuple[Stack, str]]:
    """The eventhubs services up on the rehearsal listener; the connection string."""
    folder = tmp_path_factory.mktemp("compose-rehearsal")
    env_file = compose_rehearsal.write(folder)
    secret = dotenv_values(env_file)[compose_rehearsal.CONNECTION_STRING_VAR]
    assert secret
    stack = new_stack("iotpulse-compose-rehearsal", env_file, [compose_rehearsal.OVERRIDE])
    stack.compose("down", "-v", "--remove-orphans")
    stack.compose("--profile", "eventhubs", "up", "-d", "--build", *compose_rehearsal.SERVICES)
    try:
        yield stack, secret
    finally:
        stack.compose("--profile", "eventhubs", "logs", "--no-color", check=False)
        stack.compose("--profile", "eventhubs", "down", "-v", "--remove-orphans", check=False)


def test_the_eventhubs_profile_runs_over_sasl_ssl(rehearsal):
    stack, secret = rehearsal
    took = stack.wait_healthy(SERVICES)
    print(f"\n[compose-test] eventhubs profile healthy {took:.0f} s after up")
    logs = stack.compose("--profile", "eventhubs", "logs", "--no-color", "eh-producer")
    assert f"[producer] connected: kafka:{compose_rehearsal.SASL_SSL_PORT}" in logs
    fleet = {device_id(i) for i in range(EH_FLEET_SIZE)}

    def gold_devices() -> bool:
        path = stack.volume("eh-lake") / str(Table.GOLD_DEVICE_1M)
        if not (path / "_delta_log").is_dir():
            return False
        rows = open_delta_table(str(path)).to_pyarrow_dataset().to_table(columns=["device_id"])
        return set(rows.column("device_id").to_pylist()) == fleet

    wait_for(gold_devices, 300, "every device in the eh-lake's gold")
    # The events went through the broker the rehearsal stands for: read them back on the
    # host's plaintext listener of the same broker.
    consumer = Consumer(
        {"bootstrap.servers": f"localhost:{stack.env['KAFKA_HOST_PORT']}", "group.id": "check"}
    )
    try:
        topic = compose_rehearsal.TOPIC
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        on_topic = sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        )
    finally:
        consumer.close()
    silver = open_delta_table(str(stack.volume("eh-lake") / str(Table.SILVER_EVENTS)))
    assert 0 < silver.to_pyarrow_dataset().count_rows() <= on_topic
    key = secret.split("SharedAccessKey=", 1)[1]
    everything = stack.compose("--profile", "eventhubs", "logs", "--no-color")
    assert leaks(key, everything) == []


def test_a_wrong_key_is_refused_in_one_line_within_30_s(rehearsal):
    stack, secret = rehearsal
    wrong = secret.split("SharedAccessKey=", 1)[0] + "SharedAccessKey=" + "A" * 43 + "="
    started = time.monotonic()
    out = stack.compose(
        "--profile", "eventhubs", "run", "--rm", "--no-deps",
        "-e", f"IOT_KAFKA_CONNECTION_STRING={wrong}", "eh-producer", "--count", "5",
        check=False,
    )  # fmt: skip
    took = time.monotonic() - started
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, out
    assert "authentication" in errors[0].lower() or "credential" in errors[0].lower(), errors
    assert took < 30 + 15, took  # 30 s for the producer, the rest for docker compose run
    for key in (secret.split("SharedAccessKey=", 1)[1], wrong.split("SharedAccessKey=", 1)[1]):
        assert leaks(key, out) == []
