"""Load test: the producer's run report, target against achieved rate and ack latency.

After ``python -m loadtest run`` the report also holds the load test's verdict
(``loadtest``: criteria, pass/fail, the full report's path), shown at the end.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import polars as pl
import streamlit as st

from common.report import ProducerReport, ReportUnreadableError
from dashboard import charts, data, display, ui

PASS_RATIO = 0.9  # Azure streaming-at-scale: at least 90 % of the target rate

view = ui.current_view()
settings = view.settings

st.title("Load test")
st.caption(
    f"The producer's run report ({settings.report_path}), refreshed every few seconds while "
    "the producer runs and written once more when it ends. The time range and scope filters "
    "do not apply."
)


def loadtest_part(report: ProducerReport) -> dict[str, Any] | None:
    """The verdict ``python -m loadtest run`` adds to the report (``loadtest``), if any."""
    part = report.loadtest
    return part if part is not None and isinstance(part.get("criteria"), list) else None


def _text(value: object) -> str:
    """A criterion's figure as text; a missing one blank, never ``None``."""
    return "" if value is None else str(value)


def render_verdict(part: dict[str, Any]) -> None:
    """The load test's criteria (rate, latency, loss, duplicates, sequence) and verdict."""
    st.subheader("Load test verdict")
    failed = [str(c.get("name")) for c in part["criteria"] if not c.get("passed")]
    if part.get("passed") and not failed:
        st.success("Passed: every criterion met.", icon=":material/check_circle:")
    else:
        st.error(f"Failed: {', '.join(failed) or 'see the report'}.", icon=":material/error:")
    ui.table(
        pl.DataFrame(
            {
                "criterion": [str(c.get("name")) for c in part["criteria"]],
                "target": [_text(c.get("target")) for c in part["criteria"]],
                "measured": [_text(c.get("measured")) for c in part["criteria"]],
                "result": ["pass" if c.get("passed") else "FAIL" for c in part["criteria"]],
            }
        )
    )
    st.markdown(f"Full report (verify, latency per stage, plots): `{part.get('report', '')}`")


def render(now: datetime) -> None:
    """One refresh of the page."""
    try:
        report = ProducerReport.read(settings.report_path)
    except ReportUnreadableError as exc:
        st.warning(f"Cannot read the producer report yet ({exc}).", icon=":material/warning:")
        return
    if report is None:
        st.info(
            f"Waiting for data: no producer report at {settings.report_path} yet. Run the "
            "producer with IOT_PRODUCER_REPORT_PATH set to it (make demo does).",
            icon=":material/hourglass_empty:",
        )
        return
    ratio = report.rate_ratio
    c = st.columns(4)
    c[0].metric("Target rate", f"{report.target_rate:,.0f} /s" if report.target_rate else "unpaced")
    c[1].metric(
        "Achieved rate",
        f"{report.achieved_rate:,.1f} /s",
        delta=f"{ratio:.1%} of target" if ratio is not None else None,
        delta_color="normal" if ratio is None or ratio >= PASS_RATIO else "inverse",
    )
    c[2].metric("Sent", f"{report.sent:,}")
    c[3].metric("Acknowledged", f"{report.acked:,}", help=f"Undelivered: {report.undelivered:,}")
    latency = report.ack_latency_ms
    c = st.columns(4)
    for col, q in zip(c, ("p50", "p95", "p99"), strict=False):
        value = latency.get(q)
        col.metric(f"Ack latency {q}", f"{value:,.1f} ms" if value is not None else "—")
    c[3].metric("Throttle events", f"{report.throttle_events:,}")
    verdict = (
        "no target (unpaced run)"
        if ratio is None
        else ("pass" if ratio >= PASS_RATIO else "fail") + f": {ratio:.1%} of the target rate"
    )
    progress = (
        f"running for {report.duration_s:,.1f} s so far"
        if report.running
        else f"ran {report.duration_s:,.1f} s, stopped by {report.stopped_by}"
    )
    st.caption(
        f"Started {report.started_utc}, {progress}; {verdict} (criterion: ≥ {PASS_RATIO:.0%})."
    )
    if report.per_second:
        st.altair_chart(charts.send_rate(data.per_second_frame(report)), width="stretch")
    failed = display.delivery_errors(report)
    real = failed.filter(pl.col("cause") == display.DELIVERY_ERROR)
    injected = failed.filter(pl.col("cause") == display.INJECTED)
    if real.height:
        st.subheader("Delivery errors")
        ui.table(real.drop("cause"))
    else:
        st.success("No delivery errors.", icon=":material/check_circle:")
    if injected.height:
        st.subheader("Injected faults")
        st.caption(
            "Messages the producer's fault injection made fail on purpose (oversized "
            "payloads the broker must refuse): expected, not errors."
        )
        ui.table(injected)
    part = loadtest_part(report)
    if part is not None:
        render_verdict(part)


ui.live(view, render)
