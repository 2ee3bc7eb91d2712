"""Every request of every client and what became of each of its rows.

A client opens a ``Request`` for the rows it sends and records one outcome per row as it learns
it: answered (with the text) or errored (with the message). A row with no outcome at the end is
lost, one with two or more is duplicated. An error must name its cause: ``causes.py`` sorts the
messages, and one it cannot place is reported as unexplained.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Outcome:
    answered: bool
    #: the answer's text, or the error message
    detail: str


@dataclass
class Request:
    """One request a client sent: ``rows`` rows, each to be answered or errored exactly once."""

    serial: int
    kind: str
    tenant: str
    rows: int
    started: float
    #: the fault the client injected into this request on purpose ("disconnect", "cancel", ...)
    fault: str | None = None
    ended: float | None = None
    #: the server's id of the relQuery, when the client learnt it
    job_id: str | None = None
    outcomes: list[list[Outcome]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.outcomes = [[] for _ in range(self.rows)]

    def answered(self, index: int, text: str) -> None:
        self.outcomes[index].append(Outcome(True, text))

    def errored(self, index: int, message: str) -> None:
        self.outcomes[index].append(Outcome(False, message))

    def fail_rest(self, message: str) -> None:
        """Every row without an outcome yet fails with ``message`` (the request as a whole
        failed: refused, timed out, its connection broke)."""
        for i, got in enumerate(self.outcomes):
            if not got:
                self.errored(i, message)

    def end(self) -> None:
        self.ended = time.monotonic()

    @property
    def latency_s(self) -> float | None:
        return None if self.ended is None else self.ended - self.started

    @property
    def fully_answered(self) -> bool:
        return all(len(o) == 1 and o[0].answered for o in self.outcomes)


class Ledger:
    """Thread-safe: every client thread opens its requests here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[Request] = []

    def open(self, kind: str, tenant: str, rows: int, fault: str | None = None) -> Request:
        with self._lock:
            r = Request(len(self._requests), kind, tenant, rows, time.monotonic(), fault)
            self._requests.append(r)
            return r

    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    def finished_between(self, start: float, end: float) -> list[Request]:
        """Requests that ended in [start, end) (time.monotonic())."""
        return [r for r in self.requests() if r.ended is not None and start <= r.ended < end]
