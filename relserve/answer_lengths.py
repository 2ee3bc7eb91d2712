"""How many tokens a call's answers take, learned from its finished rows (for the estimates).

A decoded answer ends at the end token or at ``max_tokens``; which comes first is the call's
(its template and settings) and the model's, so the estimate of a call's next relQuery takes the
mean length of its last answers (``RECENT`` rows), and ``max_tokens`` until one has finished.
Kept per tenant (a server's), like every learned length (docs/server-postgres-spreadsheet.md#security): whether a call was
run before, and how long its answers were, is nothing another tenant may learn from an estimate.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterable

#: answers per call the mean is taken over
RECENT = 256
#: calls remembered (the least recently used are forgotten past this)
MAX_CALLS = 4096

_lengths: OrderedDict[tuple[str, str, str], deque[int]] = OrderedDict()
_lock = threading.Lock()


def record(tenant: str, model_id: str, call_key: str, lengths: Iterable[int]) -> None:
    """Answer lengths (tokens) of finished rows of ``call_key``."""
    if not call_key:
        return
    got = [n for n in lengths if n > 0]
    if not got:
        return
    key = (tenant, model_id, call_key)
    with _lock:
        recent = _lengths.get(key)
        if recent is None:
            recent = _lengths[key] = deque(maxlen=RECENT)
            while len(_lengths) > MAX_CALLS:
                _lengths.popitem(last=False)
        _lengths.move_to_end(key)
        recent.extend(got)


def expected(tenant: str, model_id: str, call_key: str) -> float | None:
    """The mean answer length of ``call_key``'s recent rows for ``tenant``; None before any."""
    with _lock:
        recent = _lengths.get((tenant, model_id, call_key))
        return sum(recent) / len(recent) if recent else None


def spread(tenant: str, model_id: str, call_key: str, n: int) -> list[int] | None:
    """``n`` answer lengths spread like the recent ones (their quantiles at (i + 0.5) / n), so a
    relQuery of many rows gets the long answers that decide when it ends, not only the mean;
    None before any answer of ``call_key`` finished."""
    with _lock:
        recent = _lengths.get((tenant, model_id, call_key))
        ordered = sorted(recent) if recent else None
    if not ordered or n <= 0:
        return None if not ordered else []
    return [ordered[min(len(ordered) - 1, int((i + 0.5) / n * len(ordered)))] for i in range(n)]


def forget() -> None:
    """Forget every length (tests)."""
    with _lock:
        _lengths.clear()
