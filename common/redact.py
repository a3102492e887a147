"""Secrets cut out of what a command writes: its lines on stderr and its log file.

Settings hold secrets as ``SecretStr`` and messages are written not to quote them, but
a value can still reach a message in another shape: a connection string given to the
wrong flag (argparse quotes it), a token inside a URL a library quotes in its error,
a password in a URL's user part, a webhook's secret path. Every line the logging of
``common.cli`` writes goes through ``redact`` first, and every event the processor's
JVM logs through the same patterns in Java (``java_redaction``).
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


def java_redaction() -> tuple[str, str]:
    r"""The same patterns as one Java regex and its replacement, for log4j's ``%replace``.

    What the JVM logs (Spark, Delta, the Kafka client) goes through them as it is
    written. Each pattern is one alternative whose group keeps its prefix: Java leaves
    a group that did not take part out of the replacement. Quotes are written as
    ``\x27`` and ``\x22``, so the regex passes whole through Spark's option parser
    inside single quotes.
    """
    alternatives, kept, group = [], "", 1
    for pattern in _PATTERNS:
        flags = "i" if pattern.flags & re.IGNORECASE else ""
        alternatives.append(f"(?{flags}:{pattern.pattern})" if flags else pattern.pattern)
        kept += f"${group}"  # the pattern's first group: what ``redact`` keeps
        group += pattern.groups
    regex = "|".join(alternatives).replace("'", r"\x27").replace('"', r"\x22")
    return regex, kept + HIDDEN
