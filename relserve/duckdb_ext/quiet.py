"""sqlglot's warnings dropped while relserve reads a statement (one thread's, not the logger's)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _ReadingThreads(logging.Filter):
    """On sqlglot's logger: drops its warnings from a thread while that thread is inside
    ``quiet_sqlglot``; other threads' warnings (an application's own sqlglot use) pass."""

    def __init__(self) -> None:
        super().__init__()
        self._depth: dict[int, int] = {}
        self._lock = threading.Lock()

    @contextmanager
    def inside(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._lock:
            self._depth[me] = self._depth.get(me, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                left = self._depth.pop(me) - 1
                if left:
                    self._depth[me] = left

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or record.thread not in self._depth


_READING = _ReadingThreads()
logging.getLogger("sqlglot").addFilter(_READING)


def quiet_sqlglot() -> contextlib.AbstractContextManager[None]:
    """sqlglot without its warnings while relserve reads a statement: it warns when it keeps a
    statement it does not model (EXPLAIN, PRAGMA, ...) as a raw command, and relserve leaves such
    statements to DuckDB, so the warning only puzzles the user. Only the calling thread's
    warnings are dropped (a filter, not the logger's level, which every thread shares)."""
    return _READING.inside()
