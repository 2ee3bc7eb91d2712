"""The share of rows a filter call keeps, from its earlier answers in this process (``call_key``:
the call's template and settings, model included): how many rows a site that waits for the
filter will meet (relserve/estimate/statement.py). Half before any answer."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

#: the share assumed before a filter has answered
UNKNOWN = 0.5
MAX_CALLS = 4096

_kept: OrderedDict[str, list[int]] = OrderedDict()
_lock = threading.Lock()


def record(call_key: str, answers: Iterable[object]) -> None:
    """A filter's answers (True kept, False dropped; anything else is not counted)."""
    kept = dropped = 0
    for a in answers:
        if a is True:
            kept += 1
        elif a is False:
            dropped += 1
    if not kept + dropped:
        return
    with _lock:
        entry = _kept.setdefault(call_key, [0, 0])
        entry[0] += kept
        entry[1] += kept + dropped
        _kept.move_to_end(call_key)
        while len(_kept) > MAX_CALLS:
            _kept.popitem(last=False)


def kept_share(call_key: str) -> float:
    with _lock:
        entry = _kept.get(call_key)
    return entry[0] / entry[1] if entry else UNKNOWN


def forget() -> None:
    with _lock:
        _kept.clear()
