"""The one loop that reads a relQuery's answers for a backend.

Python code in a PostgreSQL backend only sees a cancel or a statement timeout when it calls back
into the backend, so the HTTP request (opening it too: a server that does not answer must not
hold the backend) runs in a thread and the backend's own thread polls ``AnswerStream.poll`` in
short slices, checking for interrupts in between.

An abandoned stream (the statement ended by an error the Python code never saw, so nobody polls
any more) cancels its relQuery on the server by itself after ``abandon_after_s``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from relserve.call_fields import CallFields
from relserve.client import Client, ServerError
from relserve.job_stats import JobStats
from relserve.results import RowResult

#: an interrupted statement waits at most this long for the server to confirm the cancel
CANCEL_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Accepted:
    relquery_id: str
    total: int


@dataclass(frozen=True)
class Answer:
    row: RowResult


@dataclass(frozen=True)
class Finished:
    status: str
    #: the job's figures as the server sent them (``JobStats`` reads as a mapping of those too)
    stats: JobStats
    error: str | None


@dataclass(frozen=True)
class Broken:
    """The server refused the relQuery or could not be reached (``status`` 0), or the stream broke."""

    status: int
    message: str


Event = Accepted | Answer | Finished | Broken


class AnswerStream:
    """One relQuery sent in a thread; its events are read with ``poll``."""

    def __init__(self, client: Client, template: str, rows: Sequence[Mapping[str, object]], call: CallFields,
                 *, abandon_after_s: float | None = None) -> None:
        self._client = client
        self._events: queue.Queue[Event] = queue.Queue()
        self._stop = threading.Event()
        self.relquery_id: str | None = None
        self.ended = False  # Finished or Broken has been polled
        self._last_poll = time.monotonic()
        self._abandon_after_s = abandon_after_s
        self._thread = threading.Thread(target=self._read, args=(template, list(rows), call),
                                        name="relserve-answers", daemon=True)
        self._thread.start()
        if abandon_after_s is not None:
            threading.Thread(target=self._watch, name="relserve-watch", daemon=True).start()

    def _read(self, template: str, rows: list, call: CallFields) -> None:
        try:
            with self._client.stream(template, rows, call) as st:
                self.relquery_id = st.id
                self._events.put(Accepted(st.id, st.total))
                for r in st:
                    if self._stop.is_set():
                        return
                    self._events.put(Answer(r))
                done = st.done
                self._events.put(Finished(done.status, done.stats, done.error) if done is not None
                                 else Finished("unknown", JobStats(), None))
        except ServerError as e:
            self._events.put(Broken(e.status, str(e)))
        except Exception as e:  # handed to the polling thread with its message
            self._events.put(Broken(0, f"{type(e).__name__}: {e}"))

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            if time.monotonic() - self._last_poll > (self._abandon_after_s or 0):
                self.cancel()
                return

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def poll(self, wait_s: float, limit: int = 512) -> list[Event]:
        """The events that arrived, waiting at most ``wait_s`` for the first one."""
        self._last_poll = time.monotonic()
        out: list[Event] = []
        try:
            out.append(self._events.get(timeout=wait_s))
            while len(out) < limit:
                out.append(self._events.get_nowait())
        except queue.Empty:
            pass
        if any(isinstance(e, (Finished, Broken)) for e in out):
            self.ended = True
            self._stop.set()
        return out

    def cancel(self) -> str | None:
        """Stop reading and cancel the relQuery on the server (best effort); a message when the
        cancel could not be confirmed."""
        already = self._stop.is_set()
        self._stop.set()
        if already or self.ended:
            return None
        self._thread.join(0.2)  # the id arrives with the first line of the stream
        if self.relquery_id is None:
            return None
        try:
            self._client.cancel(self.relquery_id, timeout=CANCEL_TIMEOUT_S)
        except Exception as e:
            return f"relserve: could not cancel relQuery {self.relquery_id} on the server: {e}"
        return None
