"""Bounded waits for the tests (not a test module): every wait has its own limit and, when it
runs out, fails naming what did not happen, so a hang fails that test alone."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str, timeout: float = 60.0, poll: float = 0.05) -> T:
    """Poll ``condition`` until it returns something true, and return that; after ``timeout``
    seconds fail with "still waiting after N s for <what>". ``poll`` is the interval between two
    looks, never a wait for something to happen."""
    deadline = time.monotonic() + timeout
    while True:
        got = condition()
        if got:
            return got
        assert time.monotonic() < deadline, f"still waiting after {timeout:.0f} s for {what}"
        time.sleep(poll)
