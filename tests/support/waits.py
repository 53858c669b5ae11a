"""Waiting for a condition instead of sleeping for a while: a fixed sleep is too short
on a loaded machine and too long on an idle one."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar, Union

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T],
    what: Union[str, Callable[[], str]],
    timeout: float = 10,
    interval: float = 0.05,
) -> T:
    """Poll ``condition`` until it returns something true, and return that. When
    ``timeout`` seconds pass first, fail saying what was awaited: ``what``, the condition
    in words (or a function that says it then, with what the test has seen by then)."""
    deadline = time.monotonic() + timeout
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() >= deadline:
            said = what if isinstance(what, str) else what()
            raise AssertionError(f"not within {timeout:g} s: {said}")
        time.sleep(interval)
