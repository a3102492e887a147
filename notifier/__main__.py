"""``python -m notifier``: deliver the real-time alerts topic to webhooks, Teams and Slack.

Checks the broker and both topics first (one line if it cannot use them), then
follows the alerts topic until Ctrl-C or SIGTERM, when it sends what it holds and
commits; a message still being retried then is left for the next start, so a stop takes
seconds, not a failing destination's whole backoff. A consumer that cannot go on
(fenced by a notifier with the same instance id, not authorized) ends it with one line.
The log is ``<state dir>/logs/notifier.log``; it never holds a webhook URL.
"""

from __future__ import annotations

import logging
import sqlite3
from datetime import timedelta

from common import cli
from common.kafka import KafkaConnectionError, check_connection, librdkafka_config
from common.settings import load_settings, service_parser
from common.stop_signals import StopFlag, stopped_by_signals
from notifier.deadletter import DeadLetterError
from notifier.destinations import DestinationsError
from notifier.ledger import Ledger
from notifier.loop import CLIENT_ID, ConsumerError, Notifier, consumer_config
from notifier.settings import NotifierSettings

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    """Run the notifier; returns the exit code."""
    args = service_parser(
        NotifierSettings,
        "python -m notifier",
        "Deliver the real-time alerts topic to webhook, Teams and Slack destinations.",
    ).parse_args(argv)
    try:
        settings = load_settings(NotifierSettings, args)
        destinations = settings.destination_list()
    except (ValueError, FileNotFoundError, DestinationsError) as exc:
        return cli.settings_error(exc)

    from confluent_kafka import Consumer, KafkaException, Producer

    kafka = settings.kafka
    base = librdkafka_config(kafka, "consumer", client_id=CLIENT_ID)
    try:
        check_connection(base, kafka.alerts_topic, timeout_s=settings.connect_timeout_s)
        check_connection(base, settings.dead_letters, timeout_s=settings.connect_timeout_s)
    except KafkaConnectionError as exc:
        raise cli.CliError(str(exc)) from exc
    try:
        ledger = Ledger(settings.ledger_path)
    except (OSError, sqlite3.Error) as exc:
        raise cli.CliError(
            f"cannot open the delivery ledger {settings.ledger_path} ({cli.first_line(exc)}); "
            f"check {NotifierSettings.env_name('ledger_path')}",
            cli.BAD_INPUT,
        ) from exc
    ledger.prune(timedelta(hours=settings.ledger_retention_h))
    consumer = Consumer(consumer_config(settings, base, len(destinations)))
    producer = Producer(librdkafka_config(kafka, "producer", client_id=CLIENT_ID))
    stop = StopFlag()
    notifier = Notifier(settings, destinations, consumer, producer, ledger, stop=stop)
    names = ", ".join(f"{d.name} ({d.format})" for d in destinations)
    cli.console.info(
        "notifier: following '%s' at %s for %s; dead letters to '%s'",
        kafka.alerts_topic, kafka.bootstrap_servers, names, settings.dead_letters,
    )  # fmt: skip
    try:
        with stopped_by_signals(stop):
            notifier.start()
            notifier.run()
    except (DeadLetterError, ConsumerError) as exc:
        # Nothing unfinished is committed: a restart tries it again.
        raise cli.CliError(str(exc)) from exc
    finally:
        try:
            consumer.close()
        except KafkaException as exc:  # a fatal consumer cannot leave its group cleanly
            log.warning("closing the consumer: %s", cli.one_line(str(exc)))
        producer.flush(10)
        ledger.close()
    cli.console.info(
        "notifier: stopped (%d delivered, %d failed)", notifier.delivered, notifier.failed
    )
    return 0


if __name__ == "__main__":
    cli.run(main, "notifier")
