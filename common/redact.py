"""Secrets cut out of what a command writes: its lines on stderr and its log file.

Settings hold secrets as ``SecretStr`` and messages are written not to quote them, but
a value can still reach a message in another shape: a connection string given to the
wrong flag (argparse quotes it), a token inside a URL a library quotes in its error,
a password in a URL's user part, a webhook's secret path. Every line the logging of
``common.cli`` writes goes through ``redact`` first, and every event the processor's
JVM logs through the same patterns in Java (``log4j_redacted``).
"""

from __future__ import annotations

import re

HIDDEN = "***"
_END = r"""[^;&\s'"]+"""  # a value runs to the next separator, space or quote
_PATTERNS = (
    # Event Hubs: a connection string's key, a SAS token's signature.
    re.compile(rf"(SharedAccessKey\s*=\s*){_END}", re.IGNORECASE),
    re.compile(rf"(\bsig=){_END}", re.IGNORECASE),
    # Spark Connect's bearer token in its URL (sc://host:port/;token=...).
    re.compile(rf"(;\s*token\s*=\s*){_END}", re.IGNORECASE),
    # A password in a URL's user part (scheme://user:password@host).
    re.compile(r"""(\b[a-z][a-z0-9+.-]*://[^/\s:@'"]*:)[^@/\s'"]+(?=@)""", re.IGNORECASE),
    # Webhooks whose path is the secret: Slack's and Teams' incoming webhooks.
    re.compile(r"""(hooks\.slack\.com/services/)[^\s'"]+""", re.IGNORECASE),
    re.compile(r"""(\.webhook\.office\.com/)[^\s'"]+""", re.IGNORECASE),
)


def redact(text: str) -> str:
    """``text`` with every secret of a known shape replaced by ``***``."""
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + HIDDEN, text)
    return text


def log4j_redacted(converter: str) -> str:
    r"""A log4j layout's ``converter`` (``%m``: the message) cut of secrets as ``redact`` cuts.

    What the JVM logs (Spark, Delta, the Kafka client) goes through one ``%replace``
    per pattern, in the same order, each keeping the pattern's first group. ``(?U)``
    gives Java's ``\s``, ``\b`` and case folding Python's Unicode meaning. Quotes are
    written as ``\x27`` and ``\x22``, so the layout passes whole through Spark's option
    parser inside single quotes.

    Raises:
        ValueError: A pattern holds a brace, which log4j's layout parser would take
            for the end of the regex.
    """
    for pattern in _PATTERNS:
        if "{" in pattern.pattern or "}" in pattern.pattern:
            raise ValueError(f"log4j cannot take a brace in a %replace regex: {pattern.pattern}")
        flags = "iU" if pattern.flags & re.IGNORECASE else "U"
        regex = f"(?{flags}:{pattern.pattern})".replace("'", r"\x27").replace('"', r"\x22")
        converter = f"%replace{{{converter}}}{{{regex}}}{{$1{HIDDEN}}}"
    return converter
