"""Bounded waits for the tests (not a test module): every wait has its own limit and, when it
runs out, fails naming what did not happen, so a hang fails that test alone; a background
thread's failure fails its test too."""

from __future__ import annotations

import reprlib
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from relserve.client import Client, RelQueryStream, RemoteResult

if TYPE_CHECKING:
    from relserve.call_fields import CallFields
    from relserve.relquery import RelQuery
    from relserve.replies import CellAnswer, JobDescription, StreamStart
    from relserve.results import RelQueryResult, RowResult

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class StillWaiting(AssertionError):
    """A bounded wait ran out: says how long it waited and for what."""

    def __init__(self, timeout: float, what: str) -> None:
        super().__init__(f"still waiting after {timeout:.0f} s for {what}")


class HasResult(Protocol[T_co]):
    """A relQuery's handle, a future: ``result(timeout)`` raises TimeoutError when not ready."""

    def result(self, timeout: float | None = None) -> T_co: ...


class Submits(Protocol):
    """An engine, a cluster, a recording wrapper: what takes a relQuery and gives its handle."""

    def submit(self, rq: RelQuery) -> HasResult[RelQueryResult]: ...


def wait_until(condition: Callable[[], T], what: str, timeout: float = 60.0, poll: float = 0.05) -> T:
    """Poll ``condition`` until it returns something true, and return that; after ``timeout``
    seconds fail with "still waiting after N s for <what>". ``poll`` is the interval between two
    looks, never a wait for something to happen."""
    deadline = time.monotonic() + timeout
    while True:
        got = condition()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise StillWaiting(timeout, what)
        time.sleep(poll)


def result_within(handle: HasResult[T], timeout: float, what: str) -> T:
    """``handle.result(timeout)``; when it is not ready in time, fail naming ``what`` (a bare
    TimeoutError says nothing of what did not finish)."""
    try:
        return handle.result(timeout)
    except TimeoutError as e:  # concurrent.futures.TimeoutError is this class since Python 3.11
        raise StillWaiting(timeout, what) from e


def run_within(engine: Submits, rq: RelQuery, timeout: float = 300.0) -> RelQueryResult:
    """``engine.run(rq)`` with a limit: fails naming the relQuery when it has not finished
    within ``timeout`` seconds (``run`` without one would wait for ever)."""
    return result_within(engine.submit(rq), timeout, f"relQuery {rq.rel_id} to finish")


def exit_code_within(proc: subprocess.Popen, timeout: float, what: str) -> int:
    """``proc.wait(timeout)``; when the process still runs after it, fail naming ``what``."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired as e:
        raise StillWaiting(timeout, what) from e


class Worker(threading.Thread):
    """A test's background thread whose failure the test sees: ``finish`` waits for it at most
    ``timeout`` seconds, fails naming ``what`` if it is still running, and re-raises in the test
    what the thread raised (a plain thread's exception is only printed, and the test passes).
    A daemon, so a thread left hanging by a failed test does not keep the run from ending."""

    def __init__(self, target: Callable[..., object], *args: object, what: str) -> None:
        super().__init__(target=target, args=args, daemon=True)
        self.what = what
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            super().run()
        except BaseException as e:  # re-raised by finish(), in the test's own thread
            self.error = e

    def finish(self, timeout: float) -> None:
        self.join(timeout)
        self.check_finished(timeout)

    def check_finished(self, waited: float) -> None:
        """Fail if it still runs (``waited``: the seconds the test gave it), or with its error."""
        if self.is_alive():
            raise StillWaiting(waited, self.what)
        if self.error is not None:
            raise self.error


def finish_all(workers: Iterable[Worker], timeout: float) -> None:
    """``finish`` every worker within one shared ``timeout``."""
    workers = list(workers)
    deadline = time.monotonic() + timeout
    for w in workers:
        w.join(max(0.0, deadline - time.monotonic()))
    for w in workers:
        w.check_finished(timeout)


def returns_within(call: Callable[[], T], timeout: float, what: str) -> T:
    """``call()`` in a worker thread: its value, or what it raised; when it has not returned
    within ``timeout`` seconds, fail naming ``what`` (for a blocking call that takes no limit of
    its own, or one as long as pytest's)."""
    got: list[T] = []
    worker = Worker(lambda: got.append(call()), what=what)
    worker.start()
    worker.finish(timeout)
    return got[0]


def lines_within(lines: Iterator[str], timeout: float, what: str, count: int | None = None) -> list[str]:
    """The next ``count`` lines of a streamed response (``response.iter_lines()``; all of them,
    until the server ends it, when None) read within ``timeout`` seconds; else fail naming
    ``what`` and how many lines came (httpx's timeout bounds each read, not the stream)."""
    got: list[str] = []

    def read() -> None:
        for line in lines:
            got.append(line)
            if count is not None and len(got) >= count:
                return

    worker = Worker(read, what=what)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        last = f", the last {reprlib.repr(got[-1])}" if got else ""
        raise StillWaiting(timeout, f"{what} ({len(got)} line(s) came{last})")
    worker.check_finished(timeout)
    return got


#: how long a test waits for one client call to return: well under pytest's 600 s, so a hang
#: fails that test naming the relQuery, and its servers are torn down
CLIENT_CALL_LIMIT_S = 180.0


class BoundedClient(Client):
    """A ``Client`` whose ``run``, ``map`` (through ``run``) and ``result`` fail within ``limit``
    seconds naming the relQuery: the client's own bound, 600 s, is pytest's, and a hang would
    fail as an anonymous pytest timeout."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *,
                 limit: float = CLIENT_CALL_LIMIT_S) -> None:
        super().__init__(url, api_key)
        self.limit = limit

    def run(self, template: str | None = None, rows: Sequence[Mapping[str, object]] | None = None,
            call: CallFields | None = None, **options: object) -> RemoteResult:
        run = super().run
        what = f"the server's answer to {_relquery_named(template, rows, options)} (Client.run)"
        return returns_within(lambda: run(template, rows, call, **options), self.limit, what)

    def result(self, relquery_id: str, wait: bool = True, timeout: float = 600.0) -> RemoteResult:
        result = super().result
        what = f"relQuery {relquery_id} to finish (Client.result)"
        return returns_within(lambda: result(relquery_id, wait, timeout), self.limit, what)

    def stream(self, template: str | None = None, rows: Sequence[Mapping[str, object]] | None = None,
               call: CallFields | None = None, **options: object) -> BoundedStream:
        stream = super().stream
        what = f"the stream of {_relquery_named(template, rows, options)} (Client.stream)"
        opened = returns_within(lambda: stream(template, rows, call, **options), self.limit, f"the first event of {what}")
        return BoundedStream(opened, self.limit, what)

    def stream_cells(self, cells: Sequence[Mapping[str, object]], **options: object) -> BoundedStream:
        stream_cells = super().stream_cells
        what = f"the stream of {len(cells)} cell(s) {reprlib.repr([c.get('id') for c in cells])} (Client.stream_cells)"
        opened = returns_within(lambda: stream_cells(cells, **options), self.limit, f"the first event of {what}")
        return BoundedStream(opened, self.limit, what)


class BoundedStream:
    """A ``RelQueryStream`` whose every event comes within ``limit`` seconds of the one before;
    else the test fails naming the stream and how many of its rows came (the stream has no
    limit of its own: it waits as long as the server keeps the connection open)."""

    def __init__(self, stream: RelQueryStream, limit: float, what: str) -> None:
        self.stream = stream
        self.limit = limit
        self.what = what

    @property
    def header(self) -> StreamStart:
        return self.stream.header

    @property
    def id(self) -> str:
        return self.stream.id

    @property
    def total(self) -> int:
        return self.stream.total

    @property
    def done(self) -> JobDescription | None:
        return self.stream.done

    def __iter__(self) -> Iterator[RowResult | CellAnswer]:
        events = iter(self.stream)
        came = 0
        while True:
            what = (f"event {came + 1} of {self.what}: {came} of {self.total} row(s) came, "
                    "then neither a row nor the done event")
            got = returns_within(lambda: next(events, None), self.limit, what)
            if got is None:  # the done event came: the stream ended
                return
            came += 1
            yield got

    def close(self) -> None:
        self.stream.close()

    def __enter__(self) -> BoundedStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _relquery_named(template: str | None, rows: Sequence[object] | None, options: Mapping[str, object]) -> str:
    """A relQuery as a failure names it: its template and row count, or its prompts."""
    if template is None:
        return f"the relQuery of prompts {reprlib.repr(options.get('prompts'))}"
    return f"the relQuery {reprlib.repr(template)} over {len(rows or ())} rows"
