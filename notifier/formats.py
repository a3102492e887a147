"""Request bodies: one alert, or a device's grouped alerts, as each destination format wants.

Pure functions: alerts in, ``(idempotency key, JSON body)`` out.

- ``webhook``: the alert record as the topic carries it; a group is
  ``{"device_id", "count", "alerts": [records]}``.
- ``teams``: a Teams incoming webhook (Workflows) message holding an Adaptive Card,
  a title and one text block per alert.
- ``slack``: a Slack incoming webhook message, ``{"text": ...}`` in Slack's mrkdwn.

Each alert reads as one line: device, type and site, the metric's contract label and
unit, value against threshold, kind, and the event time in UTC.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from common.alerts import THRESHOLD_HIGH, THRESHOLD_LOW, LiveAlert
from common.contract import FIELD_BY_NAME
from notifier.records import Received

ADAPTIVE_CARD = "application/vnd.microsoft.card.adaptive"
ADAPTIVE_SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
ADAPTIVE_VERSION = "1.4"
GROUP_KEY_PREFIX = "group-"
_DIRECTION = {THRESHOLD_HIGH: "above", THRESHOLD_LOW: "below"}


def event_time_text(ts: datetime) -> str:
    """``2026-11-21 14:05:09.123 UTC``."""
    ts = ts.astimezone(UTC)
    return f"{ts:%Y-%m-%d %H:%M:%S}.{ts.microsecond // 1000:03d} UTC"


def _amount(value: float, unit: str) -> str:
    return f"{value:,.2f} {unit}" if unit else f"{value:,.2f}"


def alert_line(alert: LiveAlert) -> str:
    """One alert in words.

    ``dev-00003 (air_quality, Austin): CO₂ 1,534.25 ppm above the threshold 1,200.00 ppm
    (threshold_high) at 2026-03-01 17:00:32.000 UTC``
    """
    field = FIELD_BY_NAME.get(alert.metric)
    label = (field.label or field.name) if field is not None else alert.metric
    unit = field.unit if field is not None else ""
    where = ", ".join(p for p in (alert.device_type, alert.site) if p)
    device = f"{alert.device_id} ({where})" if where else alert.device_id
    direction = _DIRECTION.get(alert.kind, "against")
    return (
        f"{device}: {label} {_amount(alert.value, unit)} {direction} the threshold "
        f"{_amount(alert.threshold, unit)} ({alert.kind}) at {event_time_text(alert.event_time)}"
    )


def title(alerts: Sequence[LiveAlert]) -> str:
    """``IoT Pulse alert: dev-00003`` or ``IoT Pulse: 3 alerts from dev-00003``."""
    if len(alerts) == 1:
        return f"IoT Pulse alert: {alerts[0].device_id}"
    return f"IoT Pulse: {len(alerts)} alerts from {alerts[0].device_id}"


def idempotency_key(alert_ids: Sequence[str]) -> str:
    """The ``Idempotency-Key`` of a message: the alert id, or a stable key of a group's ids.

    A group's key is ``group-`` and the first 32 hex digits of the SHA-256 of its ids,
    sorted and joined by newlines: the same ids give the same key in any order.
    """
    if len(alert_ids) == 1:
        return alert_ids[0]
    digest = hashlib.sha256("\n".join(sorted(alert_ids)).encode()).hexdigest()
    return GROUP_KEY_PREFIX + digest[:32]


def webhook_doc(items: Sequence[Received]) -> dict[str, Any]:
    """The generic webhook's JSON: the record itself, or a group of records."""
    if len(items) == 1:
        return items[0].record
    return {
        "device_id": items[0].alert.device_id,
        "count": len(items),
        "alerts": [i.record for i in items],
    }


def teams_doc(items: Sequence[Received]) -> dict[str, Any]:
    """A Teams incoming webhook message: an Adaptive Card with a title and a line per alert."""
    alerts = [i.alert for i in items]
    body: list[dict[str, Any]] = [
        {"type": "TextBlock", "text": title(alerts), "weight": "Bolder", "size": "Medium",
         "wrap": True},
    ]  # fmt: skip
    body += [{"type": "TextBlock", "text": alert_line(a), "wrap": True} for a in alerts]
    card = {"$schema": ADAPTIVE_SCHEMA, "type": "AdaptiveCard", "version": ADAPTIVE_VERSION,
            "body": body}  # fmt: skip
    return {
        "type": "message",
        "attachments": [{"contentType": ADAPTIVE_CARD, "contentUrl": None, "content": card}],
    }


def slack_escape(text: str) -> str:
    """Text safe in Slack's mrkdwn: ``&``, ``<`` and ``>`` as Slack wants them."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_doc(items: Sequence[Received]) -> dict[str, Any]:
    """A Slack incoming webhook message: a bold title, then one line (a bullet) per alert."""
    alerts = [i.alert for i in items]
    head = f"*{slack_escape(title(alerts))}*"
    if len(alerts) == 1:
        return {"text": f"{head}\n{slack_escape(alert_line(alerts[0]))}"}
    return {"text": "\n".join([head, *(f"• {slack_escape(alert_line(a))}" for a in alerts)])}


_DOCS = {"webhook": webhook_doc, "teams": teams_doc, "slack": slack_doc}


def request(format_: str, items: Sequence[Received]) -> tuple[str, bytes]:
    """The ``(Idempotency-Key, JSON body)`` of one message of ``items`` in a format.

    Args:
        format_: ``webhook``, ``teams`` or ``slack``.
        items: One alert, or one device's alerts in the order they arrived.

    Raises:
        KeyError: An unknown format.
    """
    if not items:
        raise ValueError("a message needs at least one alert")
    key = idempotency_key([i.alert_id for i in items])
    return key, orjson.dumps(_DOCS[format_](items))
