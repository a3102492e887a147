"""One message to one destination: POSTed, retried with backoff, or given up.

A POST carries ``Idempotency-Key`` (the alert id, or a group's stable key), so that a
destination that honours it can drop a repeat. It is retried on a 5xx, a 429 (after its
``Retry-After``, when that says a number of seconds), a timeout or a failed connection,
waiting ``backoff_s`` and then twice as long each time, up to ``backoff_max_s``; any
other answer outside 2xx (a 4xx, a redirect) is final. Error texts are built here from
the status or the error's kind, never from the URL, and are scrubbed of the URL's parts
besides.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import SecretStr

USER_AGENT = "iot-pulse-notifier"
RETRY_AFTER_MAX_S = 60.0


@dataclass(frozen=True)
class Answer:
    """What one POST got.

    Attributes:
        status: The HTTP status, or None when no answer came.
        error: One line for a failure (no URL in it); empty on success.
        retry: Whether trying again may help.
        retry_after_s: The answer's ``Retry-After`` in seconds, if it gave one.
    """

    status: int | None
    error: str = ""
    retry: bool = False
    retry_after_s: float | None = None

    @property
    def ok(self) -> bool:
        """A 2xx."""
        return self.status is not None and 200 <= self.status < 300


@dataclass(frozen=True)
class Outcome:
    """How a message's delivery ended.

    Attributes:
        ok: The destination took it.
        attempts: POSTs made.
        error: The last failure's line; empty when ``ok``.
        status: The last HTTP status, if any.
        stopped: Retrying ended because the notifier is stopping, not because attempts ran
            out: the message is neither delivered nor failed.
    """

    ok: bool
    attempts: int
    error: str = ""
    status: int | None = None
    stopped: bool = False


def classify(status: int, reason: str, retry_after: str | None = None) -> Answer:
    """An HTTP answer: 2xx ok; 5xx and 429 retried; anything else final."""
    if 200 <= status < 300:
        return Answer(status)
    text = f"HTTP {status}" + (f" {reason}" if reason else "")
    retry = status >= 500 or status == 429
    after = None
    if retry_after is not None and retry_after.strip().isdigit():
        after = min(float(retry_after.strip()), RETRY_AFTER_MAX_S)
    return Answer(status, text, retry, after)


def backoff_s(attempt: int, base_s: float, cap_s: float) -> float:
    """The wait after failed attempt ``attempt`` (1-based): base, 2x, 4x ... up to cap."""
    return float(min(cap_s, base_s * 2 ** (attempt - 1)))


def scrub(text: str, fragments: Sequence[str]) -> str:
    """``text`` with every fragment (a URL's host, path and query parts) replaced by ``***``."""
    for fragment in fragments:
        if fragment:
            text = text.replace(fragment, "***")
    return text


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not followed: a POST's body would be dropped on the way."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect())


def _network_error(exc: BaseException, timeout_s: float) -> Answer:
    """A failure without an HTTP answer, in words built from its kind (no URL)."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError | socket.timeout):
        return Answer(None, f"no answer within {timeout_s:g} s", True)
    if isinstance(reason, ssl.SSLError):
        return Answer(None, f"TLS failed ({reason.reason or type(reason).__name__})", True)
    if isinstance(reason, socket.gaierror):
        return Answer(None, f"the host name did not resolve ({reason.strerror})", True)
    if isinstance(reason, OSError):
        detail = reason.strerror or type(reason).__name__
        return Answer(None, f"connection failed ({detail})", True)
    if isinstance(reason, http.client.HTTPException):
        return Answer(None, f"bad HTTP answer ({type(reason).__name__})", True)
    return Answer(None, f"request failed ({type(reason).__name__})", True)


def post(url: SecretStr, body: bytes, key: str, timeout_s: float) -> Answer:
    """POST a JSON body with its ``Idempotency-Key``; never raises for a network failure."""
    request = urllib.request.Request(
        url.get_secret_value(),
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Idempotency-Key": key,
            "User-Agent": USER_AGENT,
        },
    )
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            response.read()
            return classify(response.status, response.reason)
    except urllib.error.HTTPError as exc:
        try:
            exc.read()
        except OSError:
            pass
        finally:
            exc.close()
        return classify(exc.code, exc.reason or "", exc.headers.get("Retry-After"))
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        return _network_error(exc, timeout_s)


def deliver(
    send: Callable[[], Answer],
    *,
    max_attempts: int,
    base_s: float,
    cap_s: float,
    sleep: Callable[[float], object] = time.sleep,
    on_retry: Callable[[int, Answer, float], object] | None = None,
    stopped: Callable[[], bool] = lambda: False,
) -> Outcome:
    """Send until the destination takes the message, says no for good, or attempts run out.

    A stop asked while waiting to retry ends it at once with ``Outcome.stopped``, so a
    destination that keeps failing cannot hold a stopping notifier for its whole backoff.

    Args:
        send: One attempt.
        max_attempts: Attempts at most.
        base_s: Wait after the first failure; doubled after each next one.
        cap_s: Longest wait.
        sleep: Waits (a stop-aware sleep, which returns early once stop is asked; a test
            passes a recorder).
        on_retry: Told ``(attempt, answer, wait)`` before each wait.
        stopped: Whether the notifier is stopping; checked after each wait.
    """
    answer = Answer(None, "not sent")
    for attempt in range(1, max_attempts + 1):
        answer = send()
        if answer.ok:
            return Outcome(True, attempt, status=answer.status)
        if not answer.retry or attempt == max_attempts:
            return Outcome(False, attempt, answer.error, answer.status)
        wait = max(backoff_s(attempt, base_s, cap_s), min(answer.retry_after_s or 0.0, cap_s))
        if on_retry is not None:
            on_retry(attempt, answer, wait)
        sleep(wait)
        if stopped():
            return Outcome(False, attempt, answer.error, answer.status, stopped=True)
    return Outcome(False, max_attempts, answer.error, answer.status)
