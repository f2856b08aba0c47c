"""Waiting in tests for what happens elsewhere (another process, node or thread): poll a
check until it holds, and fail the test past a bound instead of sleeping a guessed time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def until(check: Callable[[], T], bound: float, what: str = "the condition") -> T:
    """Poll ``check`` until it returns something truthy, and return that; fail the test
    (``AssertionError``) past ``bound`` seconds. The pause grows from 20 ms to 200 ms (a
    check is often an HTTP request, and a 20 s wait polled at 50 Hz is a thousand of them);
    the last check is at the bound."""
    deadline = time.monotonic() + bound
    pause = 0.02
    while True:
        value = check()
        if value:
            return value
        left = deadline - time.monotonic()
        assert left > 0, f"{what} not within {bound:g} s"
        time.sleep(min(pause, left))
        pause = min(pause * 1.5, 0.2)
