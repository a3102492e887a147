"""Load-test criteria, pages, SVG plots, settings, child environments and the bench runner."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import SecretStr

from common.kafka_settings import KafkaSettings
from common.report import ProducerReport
from loadtest.charts import bars_chart, rate_chart, to_svg
from loadtest.report import Criteria, evaluate, summary, write_pages
from loadtest.run import child_env, kafka_env, measured_from
from loadtest.settings import LoadtestSettings
from loadtest.verdict import VerifyResult

ROOT = Path(__file__).resolve().parents[2]


def result(
    *, lost: int = 0, dups: int = 0, unexpected_oos: int = 0, p95: float = 4.0, pending: int = 0
) -> VerifyResult:
    stage = {"count": 100, "p50": 2.0, "p95": p95, "p99": p95 + 1, "max": p95 + 2}
    return VerifyResult(
        counts={"acked": 100, "bronze_rows": 100, "silver_rows": 100, "quarantine_rows": 0},
        loss={"total": lost + pending, "missing_from_bronze": lost, "dropped_unexplained": 0,
              "quarantined_valid": 0, "pending": pending},
        duplicates={"silver_duplicated_ids": dups, "silver_extra_rows": dups,
                    "bronze_unexpected_copies": 0},
        late={"watermark_s": 120.0, "injected": 0, "injected_over_watermark": 0, "dropped": 0,
              "dropped_expected": 0, "dropped_boundary": 0, "kept_beyond": 0,
              "spark_rows_dropped": 0},
        quarantine={"ok": True, "expected": 0, "quarantined": 0, "missing": 0,
                    "misclassified": 0, "by_reason": {}},
        sequence={"ok": unexpected_oos == 0, "expected": 0, "actual": unexpected_oos,
                  "unexpected": unexpected_oos, "mismatched_devices": []},
        latency={"events": 100, "stages": {"kafka": stage, "bronze": stage, "silver": stage,
                                           "gold": stage}, "excluded": "x", "note": "y"},
    )  # fmt: skip


PRODUCER = ProducerReport(
    target_rate=2000.0, sent=3900, acked=3890, undelivered=0, duration_s=2.0,
    achieved_rate=1950.0, errors={}, ack_latency_ms={}, acked_rate=1850.0,
    per_second=[2000, 1900], per_second_acked=[1990, 1900], per_second_target=[2000.0, 2000.0],
    started_at="2026-03-01T12:00:00.250000+00:00",
)  # fmt: skip


def test_criteria_pass_at_the_defaults() -> None:
    checks = evaluate(Criteria(), PRODUCER, result())
    assert [(c.name, c.passed) for c in checks] == [
        ("rate", True), ("latency", True), ("lost", True), ("processed", True),
        ("duplicated", True), ("out_of_sequence", True),
    ]  # fmt: skip
    assert checks[0].measured == "1,850/s acknowledged = 92.5%"
    assert checks[1].target == "p95 event time -> gold <= 15 s"


@pytest.mark.parametrize(
    ("kwargs", "producer", "failed"),
    [
        ({"lost": 1}, PRODUCER, "lost"),
        ({"pending": 3}, PRODUCER, "processed"),
        ({"dups": 1}, PRODUCER, "duplicated"),
        ({"p95": 15.5}, PRODUCER, "latency"),
        ({"unexpected_oos": 2}, PRODUCER, "out_of_sequence"),
        ({}, dataclasses.replace(PRODUCER, acked_rate=1799.0), "rate"),
        ({}, dataclasses.replace(PRODUCER, target_rate=0.0), "rate"),
    ],
)
def test_each_criterion_fails_alone(kwargs: dict, producer: ProducerReport, failed: str) -> None:
    checks = evaluate(Criteria(), producer, result(**kwargs))
    assert [c.name for c in checks if not c.passed] == [failed]


def test_latency_without_a_measure_fails() -> None:
    r = result()
    r.latency = {"events": 0, "stages": {}, "note": "simulated"}
    latency = evaluate(Criteria(), PRODUCER, r)[1]
    assert not latency.passed and latency.measured == "not measured"


def test_pages_and_plots(tmp_path: Path) -> None:
    checks = evaluate(Criteria(), PRODUCER, result(lost=1))
    report = {"producer": PRODUCER.to_dict(), "target": "local",
              "started_at": "2026-03-01T12:00:00Z",
              "settings": {"rate_profile": "constant", "rate": 2000.0, "duration_s": 120.0,
                           "fleet_size": 100, "scenario": "clean"}}  # fmt: skip
    files = write_pages(tmp_path, report=report, producer=PRODUCER, checks=checks,
                        result=result(lost=1), producer_summary="sent 2 messages",
                        criteria=Criteria())  # fmt: skip
    assert sorted(f.name for f in files) == [
        "latency.svg", "rate.svg", "report.html", "report.json", "report.md"
    ]  # fmt: skip
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# Load test: FAIL")
    assert "| lost | <= 0 | 1 | **FAIL** |" in md and "![rate.svg](rate.svg)" in md
    assert json.loads((tmp_path / "report.json").read_text())["target"] == "local"
    for name in ("rate.svg", "latency.svg"):
        root = ET.fromstring((tmp_path / name).read_text())
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
    html = (tmp_path / "report.html").read_text()
    assert html.count("<svg") == 2 and "Load test: FAIL" in html
    text = summary(checks, "sent 2 messages", result(lost=1))
    assert text.splitlines()[0] == "load test: FAIL"
    assert "[FAIL] lost             1  (criterion: <= 0)" in text


def test_the_measured_window_starts_after_the_warm_up(tmp_path: Path) -> None:
    assert measured_from(PRODUCER, 60.0) == datetime(2026, 3, 1, 12, 1, 0, 250000, tzinfo=UTC)
    assert measured_from(PRODUCER, 0.0) is None
    report = {"producer": PRODUCER.to_dict(), "target": "local",
              "started_at": "2026-03-01T12:00:00Z",
              "settings": {"rate_profile": "constant", "rate": 2000.0, "duration_s": 120.0,
                           "warmup_s": 60.0, "fleet_size": 100, "scenario": "clean"}}  # fmt: skip
    write_pages(tmp_path, report=report, producer=PRODUCER,
                checks=evaluate(Criteria(), PRODUCER, result()), result=result(),
                producer_summary="", criteria=Criteria())  # fmt: skip
    assert "2,000 events/s for 120 s (after a 60 s warm-up, left out of the latency figures), " in (
        (tmp_path / "report.md").read_text()
    )


SVG = "{http://www.w3.org/2000/svg}"


def _marks(svg: str, role: str) -> list[ET.Element]:
    """The SVG groups of one kind of mark (``role-mark``, ``role-legend-label`` ...)."""
    return [g for g in ET.fromstring(svg).iter(f"{SVG}g") if role in (g.get("class") or "").split()]


def test_the_rate_chart_draws_a_line_per_series_from_its_values_in_order() -> None:
    chart = rate_chart(
        {"target": [0.0, 50.0, 100.0], "sent": [0.0, 40.0]}, title="t", x_label="x", y_label="y"
    )
    (rows,) = chart.to_dict()["datasets"].values()
    assert rows == [
        {"x": 0, "series": "target", "y": 0.0}, {"x": 1, "series": "target", "y": 50.0},
        {"x": 2, "series": "target", "y": 100.0},
        {"x": 0, "series": "sent", "y": 0.0}, {"x": 1, "series": "sent", "y": 40.0},
    ]  # fmt: skip
    svg = to_svg(chart)
    assert len(_marks(svg, "role-mark")) == 2  # one line each
    legend = [t.text for g in _marks(svg, "role-legend-label") for t in g.iter(f"{SVG}text")]
    assert legend == ["target", "sent"]


def test_the_latency_chart_draws_each_value_as_a_bar_and_the_limit_as_a_rule() -> None:
    chart = bars_chart(
        {"bronze": {"p50": 1.0, "p95": 2.5}, "gold": {"p50": 3.0, "p95": 5.0}},
        title="Latency", y_label="seconds", limit=15.0,
    )  # fmt: skip
    labels = [e.get("aria-label") for g in _marks(to_svg(chart), "role-mark") for e in g]
    assert labels == [
        "group: bronze; seconds: 1; bar: p50; value: 1.000",
        "group: bronze; seconds: 2.5; bar: p95; value: 2.500",
        "group: gold; seconds: 3; bar: p50; value: 3.000",
        "group: gold; seconds: 5; bar: p95; value: 5.000",
        "limit: 15",
    ]


def test_settings_defaults_are_the_issue_criteria(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("IOT_LOADTEST_RATE", "IOT_LOADTEST_DURATION_S", "IOT_LOADTEST_WARMUP_S"):
        monkeypatch.delenv(key, raising=False)
    s = LoadtestSettings(_env_file=None)
    assert (s.rate, s.duration_s, s.warmup_s, s.target) == (2000.0, 120.0, 60.0, "local")
    assert s.criteria() == Criteria(0.9, 15.0, "gold", 0, 0, 0)
    with pytest.raises(ValueError, match="cannot read the interval"):
        LoadtestSettings(_env_file=None, watermark="later")


def test_child_env_passes_kafka_settings_and_drops_others() -> None:
    kafka = KafkaSettings(_env_file=None, bootstrap_servers="ns.servicebus.windows.net:9093",
                          topic="hub", auth="connection_string",
                          connection_string=SecretStr("Endpoint=sb://ns.servicebus.windows.net/;"
                                                      "SharedAccessKeyName=k;SharedAccessKey=s"),
                          ssl_ca_location=Path("/etc/ca.pem"))  # fmt: skip
    env = child_env({"PATH": "/bin", "IOT_KAFKA_ENTRA_SCOPE": "old"}, kafka, IOT_LAKE_ROOT="/l")
    assert env == {
        "PATH": "/bin", "PYTHONUNBUFFERED": "1", "IOT_LAKE_ROOT": "/l",
        "IOT_KAFKA_BOOTSTRAP_SERVERS": "ns.servicebus.windows.net:9093", "IOT_KAFKA_TOPIC": "hub",
        "IOT_KAFKA_AUTH": "connection_string",
        "IOT_KAFKA_CONNECTION_STRING": kafka.connection_string.get_secret_value(),
        "IOT_KAFKA_SSL_CA_LOCATION": "/etc/ca.pem",
    }  # fmt: skip
    plain = kafka_env(KafkaSettings(_env_file=None, bootstrap_servers="127.0.0.1:9", topic="t"))
    assert plain == {"IOT_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9", "IOT_KAFKA_TOPIC": "t",
                     "IOT_KAFKA_AUTH": "none"}  # fmt: skip


def _runner():
    spec = importlib.util.spec_from_file_location("bench_run_all", ROOT / "bench" / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_run_all"] = module
    spec.loader.exec_module(module)
    return module


def test_bench_runner_parses_checks_and_tabulates() -> None:
    r = _runner()
    assert {"dashboard", "processor", "producer"} <= set(r.discover())
    assert "run_all" not in r.discover()
    assert r.last_json('progress\n{"a": 1}\n\n') == {"a": 1}
    assert r.last_json("progress\nnot json\n") is None
    assert r.last_json("[1, 2]") is None
    figures = {"pipeline_to_copy_ratio": 1.2, "p95_latency_s_at_200": 5.5, "cores_at_200": 0.35}
    checks = r.check("processor", figures)
    assert [(c["figure"], c["met"]) for c in checks] == [
        ("pipeline_to_copy_ratio", True), ("p95_latency_s_at_200", False),
        ("p95_latency_s_at_2000", False),
    ]  # fmt: skip
    text = r.table("processor", {"pipeline_to_copy_ratio": 1.2, "cores_at_200": 0.35}, checks)
    assert text.splitlines() == [
        "processor:",
        "  pipeline_to_copy_ratio       1.2   target >= 1: met",
        "  cores_at_200                 0.35",
        "  p95_latency_s_at_200         missing   target <= 5: NOT MET",
        "  p95_latency_s_at_2000        missing   target <= 5: NOT MET",
    ]
    assert r.check("producer", {"events_per_s": "fast"})[0]["met"] is False


def test_bench_runner_end_to_end_on_a_fake_bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    r = _runner()
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "dashboard.py").write_text(
        'print("rendering")\nprint(\'{"overview_render_s": 0.25, "device_render_s": 0.5}\')\n'
    )
    (bench / "broken.py").write_text("raise SystemExit(3)\n")
    monkeypatch.setattr(r, "BENCH", bench)
    monkeypatch.setattr(r, "__file__", str(bench / "run_all.py"))
    out = tmp_path / "results.json"
    assert r.main(["--only", "dashboard", "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["passed"] is True
    assert saved["benches"]["dashboard"]["figures"] == {
        "overview_render_s": 0.25,
        "device_render_s": 0.5,
    }
    printed = capsys.readouterr().out
    assert "overview_render_s            0.25   target <= 1: met" in printed
    assert "device_render_s              0.5   target <= 1: met" in printed
    assert r.main(["--out", str(out)]) == 1
    assert json.loads(out.read_text())["benches"]["broken"]["error"] == "exited with code 3"


def test_drain_state_compares_what_silver_read_with_bronze(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    from loadtest.run import drain_state

    def table(name: str, rows: list[tuple[int, int]]) -> None:
        write_deltalake(
            str(tmp_path / name),
            pa.table({"partition": [p for p, _ in rows], "offset": [o for _, o in rows]},
                     schema=pa.schema([("partition", pa.int32()), ("offset", pa.int64())])),
            mode="overwrite",
        )  # fmt: skip

    assert drain_state(str(tmp_path)) == (0, 0, False)
    table("bronze/events", [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)])
    table("silver/events", [(0, 0), (0, 2), (1, 0)])
    table("silver/quarantine", [])
    assert drain_state(str(tmp_path)) == (5, 3, False)  # partition 1 read up to offset 0 of 1
    # Silver's last committed batch read partition 1 to offset 2 (exclusive): its offset 1
    # left no row (a repeat, say), and silver has read it all the same.
    checkpoint = tmp_path / "_checkpoints" / "silver"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}'
    for batch, part1 in ((6, 1), (7, 2)):
        (checkpoint / "offsets" / str(batch)).write_text(
            f'v1\n{meta}\n{{"iot-events":{{"0":3,"1":{part1}}}}}\n'
        )
    (checkpoint / "commits" / "6").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    assert drain_state(str(tmp_path)) == (5, 3, False)  # batch 7 is not committed yet
    (checkpoint / "commits" / "7").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    assert drain_state(str(tmp_path)) == (5, 3, True)
    table("silver/quarantine", [(1, 1)])
    assert drain_state(str(tmp_path)) == (5, 4, True)


def test_gold_holds_silver_when_its_windows_count_every_silver_event(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    from loadtest.run import gold_holds_silver

    def table(name: str, column: str, values: list) -> None:
        write_deltalake(str(tmp_path / name), pa.table({column: values}), mode="overwrite")

    assert not gold_holds_silver(str(tmp_path))  # no tables yet
    table("silver/events", "event_id", ["a", "b", "c", "d", "e"])
    table("gold/device_1m", "events", [2, 2])
    assert not gold_holds_silver(str(tmp_path))
    table("gold/device_1m", "events", [2, 2, 1])
    assert gold_holds_silver(str(tmp_path))
