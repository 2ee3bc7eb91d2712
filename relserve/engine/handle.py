"""``RelQueryHandle``: a submitted relQuery, consumable from threads and from asyncio."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import NamedTuple

from relserve.errors import RowError
from relserve.results import RelQueryResult, RelQueryStats, RowResult
from relserve.token_counts import TokenCounts


class Progress(NamedTuple):
    done: int
    total: int


def _wake_loops(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]) -> None:
    for loop, ev in waiters:
        loop.call_soon_threadsafe(ev.set)


class RelQueryHandle:
    """Results of one relQuery as they arrive.

    ``result()`` (or ``await handle``) gives every row in input order; iterating (``for`` or
    ``async for``) gives rows in the order they finish, each carrying its input ``index``.
    """

    def __init__(self, rel_id: str, total: int, on_error: str, cancel: Callable[[], None]) -> None:
        self.rel_id = rel_id
        self.total = total
        self._on_error = on_error
        self._cancel = cancel
        self._rows: list[RowResult | None] = [None] * total
        self._order: list[int] = []
        self._cond = threading.Condition()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self._future: concurrent.futures.Future[RelQueryResult] = concurrent.futures.Future()
        self.cancelled = False

    @classmethod
    def answered(cls, rel_id: str, rows: list[RowResult], seconds: float = 0.0) -> RelQueryHandle:
        """A relQuery whose rows were answered before it reached an engine (a label method's
        first pass scored every one, in ``seconds``): finished, its stats the rows' own tokens
        and those seconds, as time running."""
        handle = cls(rel_id, len(rows), "null", lambda: None)
        for row in rows:
            handle.row_done(row)
        t = TokenCounts.total(rows)
        handle.finish(RelQueryResult(rows, RelQueryStats(
            rel_id, len(rows), sum(r.error is not None for r in rows), core_s=seconds, latency_s=seconds,
            prompt_tokens=t.prompt_tokens, output_tokens=t.output_tokens, cached_tokens=t.cached_tokens)))
        return handle

    @classmethod
    def joined(cls, rel_id: str, ready: list[RowResult], rest: RelQueryHandle, rest_index: list[int],
               seconds: float = 0.0) -> RelQueryHandle:
        """One relQuery whose ``ready`` rows were answered before it reached the engine (a label
        plan's sample, scored as the rows would be) and whose other rows ``rest`` answers: its row
        ``i`` is this relQuery's row ``rest_index[i]``. Cancelling it cancels ``rest``."""
        handle = cls(rel_id, len(ready) + len(rest_index), "null", rest.cancel)
        for row in ready:
            handle.row_done(row)

        def forward() -> None:
            from dataclasses import replace

            try:
                for row in rest:
                    handle.row_done(replace(row, index=rest_index[row.index]))
                result = rest.result()
                rows = handle.rows_in_order()
                t = TokenCounts.total(ready)
                s = result.stats
                stats = RelQueryStats(
                    rel_id, len(rows), sum(r.error is not None for r in rows),
                    waiting_s=getattr(s, "waiting_s", 0.0), core_s=getattr(s, "core_s", 0.0) + seconds,
                    tail_s=getattr(s, "tail_s", 0.0), latency_s=getattr(s, "latency_s", 0.0) + seconds,
                    policy=getattr(s, "policy", ""), prompt_tokens=getattr(s, "prompt_tokens", 0) + t.prompt_tokens,
                    output_tokens=getattr(s, "output_tokens", 0) + t.output_tokens,
                    cached_tokens=getattr(s, "cached_tokens", 0) + t.cached_tokens)
                handle.finish(RelQueryResult(rows, stats, cancelled=getattr(result, "cancelled", False)))
            except BaseException as e:  # the engine's failure is this relQuery's (never a hang)
                handle.finish(e)

        threading.Thread(target=forward, name=f"relquery-{rel_id}-join", daemon=True).start()
        return handle

    # ------------------------------------------------------------ producer side (engine thread)

    def row_done(self, row: RowResult) -> None:
        """Hand over one finished row (a row already answered keeps its first answer)."""
        with self._cond:
            if self._rows[row.index] is not None:
                return
            self._rows[row.index] = row
            self._order.append(row.index)
            waiters = self._wake_threads()
        _wake_loops(waiters)

    def finish(self, result: RelQueryResult | BaseException) -> None:
        """Hand over the whole result, or the error every caller waiting on it gets."""
        with self._cond:
            if isinstance(result, BaseException):
                self._future.set_exception(result)
            else:
                self._future.set_result(result)
            waiters = self._wake_threads()
        _wake_loops(waiters)

    def _wake_threads(self) -> list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]:
        """With the lock held, after a change: wake the waiting threads, and hand over the event
        loops' waiters (set outside the lock, by ``_wake_loops``)."""
        self._cond.notify_all()
        waiters, self._waiters = self._waiters, []
        return waiters

    # ------------------------------------------------------------ consumer side

    def row(self, index: int) -> RowResult | None:
        """Row ``index`` if it has finished, else None."""
        return self._rows[index]

    def rows_since(self, seen: int) -> list[RowResult]:
        """The rows that finished after the first ``seen`` ones, in the order they finished."""
        with self._cond:
            order = self._order[seen:]
        return [self._rows[i] for i in order]  # type: ignore[misc]

    def rows_in_order(self) -> list[RowResult]:
        """Every row in input order; a row with no answer counts as cancelled."""
        return [r if r is not None else RowResult(i, error="cancelled") for i, r in enumerate(self._rows)]

    @property
    def progress(self) -> Progress:
        return Progress(len(self._order), self.total)

    def done(self) -> bool:
        return self._future.done()

    def cancel(self) -> None:
        """Abort the relQuery's unfinished requests; finished rows keep their answers."""
        self.cancelled = True
        self._cancel()

    def result(self, timeout: float | None = None) -> RelQueryResult:
        result = self._future.result(timeout)
        self._raise_if_asked(result)
        return result

    def _raise_if_asked(self, result: RelQueryResult) -> None:
        if self._on_error == "raise" and not result.cancelled:
            for row in result.rows:
                if row.error is not None:
                    raise RowError(f"row {row.index}: {row.error}")

    def __await__(self):
        return self._await().__await__()

    async def _await(self) -> RelQueryResult:
        result = await asyncio.wrap_future(self._future)
        self._raise_if_asked(result)
        return result

    def __iter__(self) -> Iterator[RowResult]:
        i = 0
        while True:
            with self._cond:
                while i >= len(self._order) and not self._future.done():
                    self._cond.wait()
                ready = self._order[i:]
            for idx in ready:
                yield self._rows[idx]  # type: ignore[misc]
            i += len(ready)
            if not ready and self._future.done():
                return

    async def __aiter__(self) -> AsyncIterator[RowResult]:
        i = 0
        loop = asyncio.get_running_loop()
        while True:
            ev = asyncio.Event()
            with self._cond:
                ready = self._order[i:]
                finished = self._future.done()
                if not ready and not finished:
                    self._waiters.append((loop, ev))
            for idx in ready:
                yield self._rows[idx]  # type: ignore[misc]
            i += len(ready)
            if not ready:
                if finished:
                    return
                await ev.wait()
