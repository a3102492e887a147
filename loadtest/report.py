"""Pass/fail criteria of a load test and the pages that publish it (JSON, Markdown, HTML)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from html import escape
from pathlib import Path
from typing import Any

from common.report import ProducerReport
from loadtest.charts import bars_chart, rate_chart, to_svg
from loadtest.latency import STAGES
from loadtest.senders import senders_lines
from loadtest.verdict import VerifyResult


@dataclass(frozen=True)
class Criteria:
    """What a load test must show (defaults: Azure streaming-at-scale's pass criteria).

    Attributes:
        min_rate_ratio: Acknowledged rate over the target rate, at least.
        max_p95_latency_s: 95th percentile of event time -> ``latency_stage``, at most.
        latency_stage: ``kafka``, ``bronze``, ``silver`` or ``gold`` (see ``loadtest.verify``).
        max_lost: Events lost (missing from bronze, dropped unexplained, valid but
            quarantined), at most. Besides, every acknowledged event must have been
            processed (read by silver): a load test that ends before the pipeline has
            caught up proves nothing about the rest.
        max_duplicated: Event ids duplicated in silver, at most.
        max_out_of_sequence: Out-of-sequence readings beyond those sent so on purpose.
    """

    min_rate_ratio: float = 0.9
    max_p95_latency_s: float = 15.0
    latency_stage: str = "gold"
    max_lost: int = 0
    max_duplicated: int = 0
    max_out_of_sequence: int = 0


@dataclass(frozen=True)
class Check:
    """One criterion, what was measured, and whether it passed."""

    name: str
    target: str
    measured: str
    passed: bool


def evaluate(criteria: Criteria, producer: ProducerReport, result: VerifyResult) -> list[Check]:
    """Judge a run: the producer's report and ``verify``'s result against the criteria."""
    target = producer.target_rate
    acked_rate = producer.acked_rate
    ratio = acked_rate / target if target > 0 else None
    p95 = result.latency.get("stages", {}).get(criteria.latency_stage, {}).get("p95")
    pending = int(result.loss["pending"])
    lost = int(result.loss["total"]) - pending
    dups = int(result.duplicates["silver_duplicated_ids"])
    oos = int(result.sequence["unexpected"])
    return [
        Check(
            "rate",
            f">= {criteria.min_rate_ratio:.0%} of the target rate ({target:,.0f}/s)",
            f"{acked_rate:,.0f}/s acknowledged"
            + (f" = {ratio:.1%}" if ratio is not None else " (unpaced run)"),
            ratio is not None and ratio >= criteria.min_rate_ratio,
        ),
        Check(
            "latency",
            f"p95 event time -> {criteria.latency_stage} <= {criteria.max_p95_latency_s:g} s",
            f"p95 {p95:.2f} s" if p95 is not None else "not measured",
            p95 is not None and p95 <= criteria.max_p95_latency_s,
        ),
        Check("lost", f"<= {criteria.max_lost}", f"{lost:,}", lost <= criteria.max_lost),
        Check(
            "processed",
            "every acknowledged event read by silver",
            f"{pending:,} not yet processed",
            pending == 0,
        ),
        Check(
            "duplicated",
            f"<= {criteria.max_duplicated}",
            f"{dups:,}",
            dups <= criteria.max_duplicated,
        ),
        Check(
            "out_of_sequence",
            f"<= {criteria.max_out_of_sequence} beyond those injected",
            f"{oos:,}",
            oos <= criteria.max_out_of_sequence,
        ),
    ]


def summary(checks: list[Check], producer_summary: str, result: VerifyResult) -> str:
    """The readable summary printed at the end of a load test."""
    passed = all(c.passed for c in checks)
    lines = [f"load test: {'PASS' if passed else 'FAIL'}"]
    lines += [
        f"  [{'pass' if c.passed else 'FAIL'}] {c.name:<16} {c.measured}  (criterion: {c.target})"
        for c in checks
    ]
    lines += ["", "producer:", *("  " + line for line in producer_summary.splitlines()), ""]
    lines.append(result.summary())
    return "\n".join(lines)


def _latency_table(result: VerifyResult) -> list[str]:
    stages = result.latency.get("stages") or {}
    if not stages:
        return [f"Latency: {result.latency.get('note', 'not measured')}", ""]
    rows = [
        "| event time -> | events | p50 (s) | p95 (s) | p99 (s) | max (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for stage in STAGES:
        p = stages.get(stage) or {}
        if p.get("count"):
            rows.append(
                f"| {stage} | {p['count']:,} | {p['p50']:.2f} | {p['p95']:.2f} | {p['p99']:.2f} "
                f"| {p['max']:.2f} |"
            )
        else:
            rows.append(f"| {stage} | 0 | | | | |")
    return [*rows, "", f"Excluded: {result.latency.get('excluded', '')}. "
            f"{result.latency.get('note', '')}.", ""]  # fmt: skip


def verify_markdown(result: VerifyResult, sent_by: dict[str, Any] | None = None) -> str:
    """``verify``'s readable page; with ``sent_by`` (``loadtest.senders.senders``), the senders."""
    q = result.quarantine
    lines = [
        f"# verify: {'PASS' if result.ok else 'FAIL'}",
        "",
        "```",
        result.summary(),
        "```",
        "",
        "## Latency",
        "",
        *_latency_table(result),
        "## Quarantine by reason",
        "",
        "| reason | injected | quarantined |",
        "| --- | ---: | ---: |",
        *(
            f"| `{reason}` | {row['injected']:,} | {row['quarantined']:,} |"
            for reason, row in sorted(q["by_reason"].items())
        ),
        *(["| (none injected) | 0 | 0 |"] if not q["by_reason"] else []),
        "",
    ]
    if sent_by is not None:
        lines += ["## Senders", "", *senders_lines(sent_by), ""]
    return "\n".join(lines)


def charts(producer: ProducerReport, result: VerifyResult, criteria: Criteria) -> dict[str, str]:
    """The SVG plots of a load test, by file name."""
    out = {
        "rate.svg": to_svg(
            rate_chart(
                {
                    "target": producer.per_second_target,
                    "sent": producer.per_second,
                    "acknowledged": producer.per_second_acked,
                },
                title="Producer rate",
                x_label="second of the run",
                y_label="events/s",
            )
        )
    }
    stages = result.latency.get("stages") or {}
    groups = {
        s: {q: stages[s][q] for q in ("p50", "p95", "p99")}
        for s in STAGES
        if (stages.get(s) or {}).get("count")
    }
    if groups:
        out["latency.svg"] = to_svg(
            bars_chart(
                groups,
                title="Latency from event time",
                y_label="seconds",
                limit=criteria.max_p95_latency_s,
            )
        )
    return out


def _warmup(settings: dict[str, Any]) -> str:
    warmup = settings.get("warmup_s") or 0
    return f" (after a {warmup:g} s warm-up, left out of the latency figures)" if warmup else ""


def write_pages(
    out: Path,
    *,
    report: dict[str, Any],
    producer: ProducerReport,
    checks: list[Check],
    result: VerifyResult,
    producer_summary: str,
    criteria: Criteria,
) -> list[Path]:
    """Write ``report.json``, ``report.md`` (SVG files beside it) and ``report.html`` (inline).

    Args:
        out: The report folder.
        report: What ``report.json`` holds (``settings``, ``target``, ``started_at`` ...).
        producer: The producer's run report (the rate plot).
        checks: The criteria as judged.
        result: ``verify``'s result.
        producer_summary: The producer's closing summary.
        criteria: The criteria (the latency plot's limit).

    Returns:
        The files written.
    """
    out.mkdir(parents=True, exist_ok=True)
    plots = charts(producer, result, criteria)
    files = []
    for name, body in plots.items():
        (out / name).write_text(body)
        files.append(out / name)
    passed = all(c.passed for c in checks)
    table = [
        "| criterion | target | measured | result |",
        "| --- | --- | --- | --- |",
        *(
            f"| {c.name} | {c.target} | {c.measured} | {'pass' if c.passed else '**FAIL**'} |"
            for c in checks
        ),
    ]
    md = [
        f"# Load test: {'PASS' if passed else 'FAIL'}",
        "",
        f"Target: {report['target']}, {report['settings']['rate_profile']} at "
        f"{report['settings']['rate']:,.0f} events/s for {report['settings']['duration_s']:g} s"
        f"{_warmup(report['settings'])}, "
        f"{report['settings']['fleet_size']} devices, scenario {report['settings']['scenario']}; "
        f"started {report['started_at']}.",
        "",
        *table,
        "",
        *(f"![{name}]({name})" for name in plots),
        "",
        "## Producer",
        "",
        "```",
        producer_summary,
        "```",
        "",
        verify_markdown(result).replace("# verify", "## verify", 1),
    ]
    (out / "report.md").write_text("\n".join(md))
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    html_rows = "".join(
        f"<tr><td>{escape(c.name)}</td><td>{escape(c.target)}</td><td>{escape(c.measured)}</td>"
        f"<td style='color:{'green' if c.passed else 'red'}'>{'pass' if c.passed else 'FAIL'}"
        "</td></tr>"
        for c in checks
    )
    html = (
        "<!doctype html><html><head><meta charset='utf-8'><title>Load test</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
        "td,th{border:1px solid #ccc;padding:4px 8px}table{border-collapse:collapse}</style>"
        f"</head><body><h1>Load test: {'PASS' if passed else 'FAIL'}</h1>"
        f"<p>{escape(md[2])}</p><table><tr><th>criterion</th><th>target</th><th>measured</th>"
        f"<th>result</th></tr>{html_rows}</table>{''.join(plots.values())}"
        f"<h2>Producer</h2><pre>{escape(producer_summary)}</pre>"
        f"<h2>verify</h2><pre>{escape(result.summary())}</pre></body></html>"
    )
    (out / "report.html").write_text(html)
    files += [out / "report.json", out / "report.md", out / "report.html"]
    return files


def checks_as_dicts(checks: list[Check]) -> list[dict[str, Any]]:
    """The checks as JSON-able dicts."""
    return [asdict(c) for c in checks]
