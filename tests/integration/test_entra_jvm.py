"""auth=entra for the Spark processor: the JVM Kafka client logs in through the project's
OAUTHBEARER login callback handler (processor/jvm/eventhubs-oauth).

Against Event Hubs the handler gets tokens from azure-identity's DefaultAzureCredential;
here its ``tokenSource=unsecured`` mints unsigned JWTs for the local broker's SASL_SSL
listener, which validates OAUTHBEARER with Kafka's unsecured validator. Everything else
(the options ``spark_kafka_options`` builds, the handler, token conversion, TLS) is the
Event Hubs path.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from common.kafka import ENTRA_LOGIN_HANDLER, spark_kafka_options
from common.kafka_settings import KafkaSettings
from infra.broker import ensure_topic

pytestmark = pytest.mark.integration

TOPIC = "entra-jvm"
COUNT = 40


@pytest.fixture(scope="module")
def entra_topic(kafka_broker):
    ensure_topic(kafka_broker.plaintext, TOPIC, partitions=2)
    producer = Producer({"bootstrap.servers": kafka_broker.plaintext})
    for i in range(COUNT):
        producer.produce(TOPIC, f"event-{i}".encode(), f"k{i % 5}".encode())
    assert producer.flush(30) == 0
    return TOPIC


def _entra(kafka_broker) -> KafkaSettings:
    return KafkaSettings(
        auth="entra", bootstrap_servers=kafka_broker.sasl_ssl, ssl_ca_location=kafka_broker.ca_file
    )


def test_spark_reads_through_the_entra_login_handler(spark, kafka_broker, entra_topic):
    opts = spark_kafka_options(_entra(kafka_broker), login_options={"tokenSource": "unsecured"})
    assert opts["kafka.sasl.login.callback.handler.class"] == ENTRA_LOGIN_HANDLER
    df = (
        spark.read.format("kafka")
        .options(**opts)
        .option("subscribe", entra_topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    values = sorted(bytes(r.value).decode() for r in df.select("value").collect())
    assert values == sorted(f"event-{i}" for i in range(COUNT))


def test_spark_fails_clearly_when_the_handler_is_misconfigured(spark, kafka_broker, entra_topic):
    opts = spark_kafka_options(_entra(kafka_broker), login_options={"tokenSource": "bogus"})
    df = (
        spark.read.format("kafka")
        .options(**opts)
        .option("subscribe", entra_topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    with pytest.raises(Exception, match="unknown tokenSource 'bogus'"):
        df.count()


def _jvm_handler(spark, options: dict[str, str], bootstrap: str):
    jvm = spark._jvm
    handler = jvm.io.iotpulse.eventhubs.EntraLoginCallbackHandler()
    jaas_opts = jvm.java.util.HashMap()
    for k, v in options.items():
        jaas_opts.put(k, v)
    flag = jvm.javax.security.auth.login.AppConfigurationEntry.LoginModuleControlFlag.REQUIRED
    entry = jvm.javax.security.auth.login.AppConfigurationEntry(
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule", flag, jaas_opts
    )
    entries = jvm.java.util.ArrayList()
    entries.add(entry)
    configs = jvm.java.util.HashMap()
    configs.put("bootstrap.servers", bootstrap)
    handler.configure(configs, "OAUTHBEARER", entries)
    return handler


def test_handler_derives_the_namespace_scope_and_converts_tokens(spark):
    jvm = spark._jvm
    azure = _jvm_handler(spark, {}, "pulse-ns.servicebus.windows.net:9093,other:9093")
    assert azure.scope() == "https://pulse-ns.servicebus.windows.net/.default"
    azure.close()

    handler = _jvm_handler(
        spark,
        {"tokenSource": "unsecured", "unsecuredSubject": "tester", "scope": "https://x/.default"},
        "localhost:1",
    )
    callback = jvm.org.apache.kafka.common.security.oauthbearer.OAuthBearerTokenCallback()
    callbacks = spark.sparkContext._gateway.new_array(jvm.javax.security.auth.callback.Callback, 1)
    callbacks[0] = callback
    handler.handle(callbacks)
    token = callback.token()
    assert token.principalName() == "tester"
    assert sorted(token.scope()) == ["https://x/.default"]
    lifetime_s = (token.lifetimeMs() - token.startTimeMs()) / 1000
    assert lifetime_s == 3600
    assert token.value().count(".") == 2 and token.value().endswith(".")
    assert token.value() not in str(token.toString())
    handler.close()
