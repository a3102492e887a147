"""The Pipeline health page's registered schemas: each subject's versions, from the registry."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from common.avro_schema import avro_schema
from common.contract import VERSION_BY_NUMBER
from common.registry_settings import RegistrySettings
from dashboard.registry import RegistryUnreachableError, subject_versions
from infra.daemons import free_ports
from producer.wire_format import AvroFormat

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


def _expected(subject: str, ids: dict[int, int]) -> list[dict]:
    rows = []
    for number, schema_id in sorted(ids.items()):
        schema = avro_schema(VERSION_BY_NUMBER[number])
        rows.append({"subject": subject, "version": number, "schema_id": schema_id,
                     "fields": len(schema["fields"]), "doc": schema["doc"]})  # fmt: skip
    return rows


def _page(monkeypatch, tmp_path, url: str) -> AppTest:
    (tmp_path / "lake").mkdir()
    monkeypatch.setenv("IOT_LAKE_ROOT", str(tmp_path / "lake"))
    monkeypatch.setenv("IOT_DASHBOARD_AS_OF", datetime(2026, 1, 1, tzinfo=UTC).isoformat())
    monkeypatch.setenv("IOT_DASHBOARD_LIVE_ALERTS", "false")
    monkeypatch.setenv("IOT_SCHEMA_REGISTRY_URL", url)
    at = AppTest.from_file(APP, default_timeout=60)
    at.switch_page("views/pipeline.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_each_subject_lists_its_versions_and_the_page_shows_them(
    schema_registry_server, monkeypatch, tmp_path
):
    topic = f"dash-{uuid.uuid4().hex[:8]}"
    wire = AvroFormat(RegistrySettings(url=schema_registry_server.url), topic, [1, 2])
    expected = _expected(f"{topic}-value", wire.schema_ids)
    found = subject_versions(RegistrySettings(url=schema_registry_server.url))
    assert [r for r in found.iter_rows(named=True) if r["subject"] == f"{topic}-value"] == expected
    at = _page(monkeypatch, tmp_path, schema_registry_server.url)
    shown = [t.value for t in at.dataframe]
    mine = [
        {k: row[k] for k in ("subject", "version", "schema_id", "fields", "doc")}
        for frame in shown
        if "schema_id" in frame.columns
        for row in frame.to_dict("records")
        if row["subject"] == f"{topic}-value"
    ]
    assert mine == expected


def test_a_registry_that_does_not_answer_is_one_line(monkeypatch, tmp_path):
    url = f"http://127.0.0.1:{free_ports('127.0.0.1')[0]}"
    with pytest.raises(RegistryUnreachableError) as exc:
        subject_versions(RegistrySettings(url=url))
    assert str(exc.value) == f"the schema registry at {url} did not answer (ConnectError)"
    at = _page(monkeypatch, tmp_path, url)
    assert str(exc.value) in [w.value for w in at.warning]
