"""The Avro writer schemas silver decodes with: those registered under the topic's subject.

Producers that use Confluent's default naming (``producer --format avro`` does) register
a topic's value schemas under ``<topic>-value``; the processor reads every version of
that subject from the registry when it starts (``load``), and silver decodes a record by
the one its id names (``processor.avro_decoding``). A record whose id is not among them
is quarantined as ``unknown_schema_id``, unless the subject gained it while the processor
ran (``newly_registered``): then the batch stops before it writes anything, and silver
starts again knowing it (``processor.pipeline.restarted_for_new_schemas``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from common.cli import CliError
from common.registry_settings import RegistrySettings, subject_of

log = logging.getLogger(__name__)
# How long a batch with unknown schema ids waits for a registry that does not answer.
UNREACHABLE_WAIT_S = 300.0
RETRY_S = 5.0


class NewWriterSchemasError(RuntimeError):
    """Records carry schema ids that the subject gained after the processor started."""


def _client(registry: RegistrySettings) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient(registry.client_config())


def load(registry: RegistrySettings, topic: str) -> dict[int, str]:
    """Every schema registered under the topic's subject: schema id -> its JSON text.

    Args:
        registry: The registry (no URL: no schemas, and Avro records are quarantined).
        topic: The events topic.

    Returns:
        The schemas; empty when no registry is set or the subject does not exist yet.

    Raises:
        CliError: The registry does not answer, or refuses the credentials (one line).
    """
    if not registry.url:
        return {}
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    subject = subject_of(topic)
    client = _client(registry)
    try:
        versions = client.get_versions(subject)
        registered = [client.get_version(subject, v) for v in versions]
    except SchemaRegistryError as exc:
        if exc.http_status_code == 404:
            return {}
        what = "refused the credentials" if exc.http_status_code in (401, 403) else "failed"
        raise CliError(
            f"the schema registry at {registry.url} {what} (HTTP {exc.http_status_code}): check "
            f"{registry.env_name('url')}, {registry.env_name('username')} and "
            f"{registry.env_name('password')}"
        ) from None
    except Exception as exc:  # the HTTP client's: unreachable, TLS, a timeout
        log.debug("the schema registry did not answer", exc_info=True)
        raise CliError(
            f"the schema registry at {registry.url} did not answer ({type(exc).__name__}): "
            f"start it, or check {registry.env_name('url')}"
        ) from None
    return {r.schema_id: r.schema.schema_str for r in registered}


def newly_registered(registry: RegistrySettings, topic: str, ids: Iterable[int]) -> list[int]:
    """Those of ``ids`` that the topic's subject holds now (registered since the start).

    Raises:
        CliError: The registry does not answer.
    """
    now = load(registry, topic)
    return sorted(i for i in ids if i in now)


def check_unknown_ids(registry: RegistrySettings, topic: str, ids: Iterable[int]) -> None:
    """Stop a batch whose unknown schema ids were registered since the processor started.

    The registry is asked every ``RETRY_S`` while it does not answer, for at most
    ``UNREACHABLE_WAIT_S``: the batch waits rather than quarantine records it may be
    able to read.

    Raises:
        NewWriterSchemasError: Some were: silver starts again (nothing is written).
        CliError: The registry did not answer in ``UNREACHABLE_WAIT_S`` (nothing is written).
    """
    wanted = sorted(set(ids))
    if not wanted or not registry.url:
        return
    deadline = time.monotonic() + UNREACHABLE_WAIT_S
    while True:
        try:
            new = newly_registered(registry, topic, wanted)
            break
        except CliError as exc:  # unreachable: wait, quarantining nothing for want of it
            if time.monotonic() > deadline:
                raise
            log.warning("schema ids %s: %s; asking again in %.0f s", wanted, exc, RETRY_S)
            time.sleep(RETRY_S)
    if new:
        raise NewWriterSchemasError(
            f"schema ids {new} were registered under {subject_of(topic)} after silver "
            "started: it starts again to decode them (this batch wrote nothing)"
        )


class SchemaWatch:
    """Asks the registry every ``every_s`` whether the topic's subject gained schemas.

    For a query that cannot stop a batch on an unknown id, as silver does: real-time mode
    has no ``foreachBatch``. When the subject holds ids beyond ``known``, ``on_new`` runs
    once (in the watch's thread) and ``found`` lists them; the caller starts its query
    again with ``schemas``. A registry that does not answer is asked again at the next turn,
    and the query goes on with the schemas it has.
    """

    def __init__(
        self,
        registry: RegistrySettings,
        topic: str,
        known: Iterable[int],
        on_new: Callable[[], object],
        every_s: float | None = None,
    ) -> None:
        """Set the watch up; ``start`` starts it.

        Args:
            registry: The registry (no URL: nothing to watch).
            topic: The events topic.
            known: The ids the query decodes.
            on_new: Called once when the subject holds others.
            every_s: Seconds between two questions (default: the registry's ``watch_s``).
        """
        self.registry, self.topic = registry, topic
        self.every_s = registry.watch_s if every_s is None else every_s
        self.known = frozenset(known)
        self.on_new = on_new
        self.found: list[int] = []
        self.schemas: dict[int, str] = {}  # what the subject held when ``found`` was seen
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="schema-watch", daemon=True)

    def start(self) -> SchemaWatch:
        """Start watching, unless no registry is set; return the watch."""
        if self.registry.url:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching (at once, or after the question under way)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join()

    def _watch(self) -> None:
        while not self._stopped.wait(self.every_s):
            try:
                held = load(self.registry, self.topic)
            except CliError as exc:
                log.warning("%s; the schema watch asks again in %.0f s", exc, self.every_s)
                continue
            new = sorted(set(held) - self.known)
            if new:
                self.found, self.schemas = new, held
                self.on_new()
                return
