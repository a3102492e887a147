"""What a silver batch does with schema ids that no known schema decodes, and the watch
that tells the real-time alerts of schemas registered while they run."""

from __future__ import annotations

import threading

import pytest

from common.cli import CliError
from common.registry_settings import RegistrySettings
from processor import writer_schemas
from processor.writer_schemas import NewWriterSchemasError, SchemaWatch, check_unknown_ids

REGISTRY = RegistrySettings(url="http://registry.invalid:8081")


def _answers(monkeypatch, *answers):
    """``newly_registered`` gives ``answers`` in turn (an exception is raised)."""
    calls = []

    def fake(settings, topic, ids):
        calls.append(sorted(ids))
        answer = answers[len(calls) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(writer_schemas, "newly_registered", fake)
    monkeypatch.setattr(writer_schemas, "RETRY_S", 0.0)
    return calls


def test_ids_registered_since_the_start_stop_the_batch_in_one_line(monkeypatch):
    _answers(monkeypatch, [7])
    with pytest.raises(NewWriterSchemasError) as exc:
        check_unknown_ids(REGISTRY, "events", [9, 7, 7])
    assert str(exc.value) == (
        "schema ids [7] were registered under events-value after silver started: it "
        "starts again to decode them (this batch wrote nothing)"
    )


def test_ids_the_subject_does_not_hold_are_left_to_quarantine(monkeypatch):
    calls = _answers(monkeypatch, [])
    check_unknown_ids(REGISTRY, "events", [9, 7])
    assert calls == [[7, 9]]


def test_no_ids_or_no_registry_ask_nothing(monkeypatch):
    calls = _answers(monkeypatch)
    check_unknown_ids(REGISTRY, "events", [])
    check_unknown_ids(RegistrySettings(), "events", [7])
    assert calls == []


def test_an_unreachable_registry_is_asked_again_until_it_answers(monkeypatch):
    down = CliError("the schema registry at http://registry.invalid:8081 did not answer")
    calls = _answers(monkeypatch, down, down, [7])
    with pytest.raises(NewWriterSchemasError):
        check_unknown_ids(REGISTRY, "events", [7])
    assert len(calls) == 3


def test_a_registry_down_longer_than_the_wait_fails_the_batch(monkeypatch):
    down = CliError("the schema registry at http://registry.invalid:8081 did not answer")
    _answers(monkeypatch, down, down)
    monkeypatch.setattr(writer_schemas, "UNREACHABLE_WAIT_S", 0.0)
    with pytest.raises(CliError) as exc:
        check_unknown_ids(REGISTRY, "events", [7])
    assert str(exc.value) == str(down)


def _loads(monkeypatch, *answers):
    """``load`` gives ``answers`` in turn (an exception is raised), then the last forever."""
    calls = []

    def fake(settings, topic):
        calls.append(topic)
        answer = answers[min(len(calls), len(answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(writer_schemas, "load", fake)
    return calls


def test_the_watch_calls_back_once_when_the_subject_gains_ids(monkeypatch):
    down = CliError("the schema registry at http://registry.invalid:8081 did not answer")
    calls = _loads(monkeypatch, {1: "v1"}, down, {1: "v1", 2: "v2", 3: "v3"})
    called = threading.Event()
    watch = SchemaWatch(REGISTRY, "events", [1], called.set, every_s=0.01).start()
    assert called.wait(10)
    watch.stop()
    # Unchanged, unreachable (asked again), then two new ids: found once, then no more asked.
    assert (watch.found, len(calls)) == ([2, 3], 3)
    assert watch.schemas == {1: "v1", 2: "v2", 3: "v3"}  # what the restarted query decodes


def test_the_watch_stops_without_calling_back_while_nothing_is_new(monkeypatch):
    calls = _loads(monkeypatch, {1: "v1", 2: "v2"})
    called = threading.Event()
    watch = SchemaWatch(REGISTRY, "events", [2, 1], called.set, every_s=0.01).start()
    while len(calls) < 3:
        threading.Event().wait(0.01)
    watch.stop()
    asked = len(calls)
    threading.Event().wait(0.05)
    assert (watch.found, called.is_set(), len(calls)) == ([], False, asked)


def test_without_a_registry_the_watch_asks_nothing(monkeypatch):
    calls = _loads(monkeypatch, {1: "v1"})
    watch = SchemaWatch(RegistrySettings(), "events", [], lambda: None, every_s=0.01).start()
    threading.Event().wait(0.05)
    watch.stop()
    assert calls == []
