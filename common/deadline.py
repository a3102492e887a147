"""A call given a deadline: its answer, its error, or ``NoAnswerInTime``.

For calls that may hang with no timeout of their own (a gRPC call to a server that
hangs, a cloud SDK's token request, a store that takes connections and never answers):
the call goes on in a daemon thread, which does not keep the process alive.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class NoAnswerInTime(Exception):  # noqa: N818 (a finding, like TimeoutError)
    """The call had not returned within its deadline (it goes on in its thread)."""


def within(seconds: float, ask: Callable[[], T], name: str = "deadline") -> T:
    """What ``ask()`` returns or raises, if it returns within ``seconds``.

    Args:
        seconds: The deadline.
        ask: The call.
        name: Its thread's name.

    Raises:
        NoAnswerInTime: ``ask()`` had not returned after ``seconds``.
    """
    outcome: list[T] = []
    error: list[BaseException] = []
    done = threading.Event()

    def call() -> None:
        try:
            outcome.append(ask())
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            error.append(exc)
        finally:
            done.set()

    threading.Thread(target=call, name=name, daemon=True).start()
    if not done.wait(seconds):
        raise NoAnswerInTime(f"no answer within {seconds:g} s")
    if error:
        raise error[0]
    return outcome[0]
