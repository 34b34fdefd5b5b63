"""Waiting in tests for something that happens elsewhere (a server, a worker, a thread).

Tests wait for a condition, never for a duration: :func:`wait_until` polls and returns as
soon as the condition holds, and its timeout only bounds a hung test, so it is generous.
Desktop tests keep ``qtbot.waitUntil``, which also runs the Qt event loop meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class NeverHappened(AssertionError):
    """A waited-for condition did not hold within its timeout (the test fails, naming it)."""


def wait_until(
    condition: Callable[[], T | None],
    what: str | Callable[[], str],
    timeout: float = 120.0,
    *,
    interval: float = 0.05,
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that.

    ``condition`` is called at once, then every ``interval`` seconds; it may raise (an
    assertion that a process is still alive, say) to end the wait early. ``what`` names the
    awaited event in the failure; a callable is called only then, so the message can show
    the state at the timeout (a server's output, the last /health). Runs on the calling
    thread.

    Raises:
        NeverHappened: ``condition`` stayed falsy for ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            described = what if isinstance(what, str) else what()
            raise NeverHappened(f"not within {timeout:g} s: {described}")
        time.sleep(interval)
