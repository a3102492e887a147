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
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_result,
    stop_after_attempt,
    wait_exponential,
)

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


class _StoppingError(Exception):
    """The notifier is stopping: no further attempt."""


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

    The wait after failed attempt ``n`` is ``base_s * 2 ** (n - 1)``, at most ``cap_s``,
    and at least the answer's ``Retry-After`` (also at most ``cap_s``). A stop asked while
    waiting to retry ends it at once with ``Outcome.stopped``, so a destination that keeps
    failing cannot hold a stopping notifier for its whole backoff.

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
    backoff = wait_exponential(multiplier=base_s, min=base_s, max=cap_s)
    answers: list[Answer] = []

    def attempt() -> Answer:
        if answers and stopped():
            raise _StoppingError
        answers.append(send())
        return answers[-1]

    def wait(state: RetryCallState) -> float:
        after = answers[-1].retry_after_s or 0.0
        return max(backoff(state), min(after, cap_s))

    def before_sleep(state: RetryCallState) -> None:
        if on_retry is not None and state.next_action is not None:
            on_retry(state.attempt_number, answers[-1], state.next_action.sleep)

    def pause(seconds: float) -> None:
        sleep(seconds)

    retrying = Retrying(
        stop=stop_after_attempt(max_attempts),
        wait=wait,
        sleep=pause,
        retry=retry_if_result(lambda answer: not answer.ok and answer.retry),
        before_sleep=before_sleep,
        retry_error_callback=lambda state: answers[-1],  # attempts ran out: the last answer
    )
    try:
        answer: Answer = retrying(attempt)
    except _StoppingError:
        last = answers[-1]
        return Outcome(False, len(answers), last.error, last.status, stopped=True)
    if answer.ok:
        return Outcome(True, len(answers), status=answer.status)
    return Outcome(False, len(answers), answer.error, answer.status)
