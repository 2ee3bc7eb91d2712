"""Sessions: one DuckDB connection and one thread each, running its statements at their arrival
times, one after another (a connection runs one statement at a time); latency = end - arrival."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from e2e.workload import SQL_DIR, Scheduled, tables_sql

#: what a contender's statement gives back: column names, rows, rows the LLM functions ran on
StatementAnswer = tuple[list[str], list[tuple], int]


class Closeable(Protocol):
    def close(self) -> None: ...


Conn = TypeVar("Conn", bound=Closeable)


@dataclass
class Record:
    key: str
    session: int
    name: str
    rows: int
    load: float
    arrival: float
    start: float
    end: float
    #: rows the LLM functions were called on (call sites x rows reaching them; relserve's SQL
    #: planner calls them once per distinct argument tuple, so it counts fewer)
    llm_rows: int = 0
    out_rows: int = 0
    error: str | None = None

    @property
    def latency(self) -> float:
        return self.end - self.arrival


class FifoLock:
    """Statements one after another, in the order they asked (vLLM offline: one process, one batch at a time)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[int] = []
        self._next = 0

    def __enter__(self) -> None:
        with self._cond:
            ticket = self._next
            self._next += 1
            self._queue.append(ticket)
            self._cond.wait_for(lambda: self._queue[0] == ticket)

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._queue.pop(0)
            self._cond.notify_all()

    @property
    def lined_up(self) -> int:
        """Statements holding the lock or waiting for it."""
        with self._cond:
            return len(self._queue)


def run_sessions(
    work: list[Scheduled],
    connect: Callable[[int], Conn],
    execute: Callable[[Conn, Scheduled], StatementAnswer],
) -> tuple[list[Record], dict[str, dict]]:
    """Run every session's statements at their arrival times; returns the records and the answers."""
    sessions: dict[int, list[Scheduled]] = {}
    for w in work:  # statements run back to back share one connection, in the order given
        sessions.setdefault(0 if w.back_to_back else w.item.session, []).append(w)
    conns = {s: connect(s) for s in sessions}
    records: list[Record] = []
    answers: dict[str, dict] = {}
    lock = threading.Lock()
    t0 = time.perf_counter() + 0.5

    def session(s: int) -> None:
        for w in sorted(sessions[s], key=lambda w: (w.arrival, w.item.seq)):
            delay = t0 + w.arrival - time.perf_counter()
            if delay > 0 and not w.back_to_back:
                time.sleep(delay)
            start = time.perf_counter()
            cols: list[str] = []
            rows: list[tuple] = []
            llm_rows, err = 0, None
            try:
                cols, rows, llm_rows = execute(conns[s], w)
            except Exception as e:  # a failed statement is recorded, the session goes on
                err = f"{type(e).__name__}: {e}"[:500]
            end = time.perf_counter()
            arrival = start - t0 if w.back_to_back else w.arrival
            rec = Record(w.key, s, w.item.name, w.item.rows, w.load, arrival, start - t0, end - t0, llm_rows, len(rows), err)
            with lock:
                records.append(rec)
                answers[w.key] = {"columns": cols, "rows": [list(r) for r in rows]}

    threads = [threading.Thread(target=session, args=(s,), name=f"session-{s}") for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in conns.values():
        try:
            c.close()
        except Exception:  # a connection that fails to close loses nothing measured
            pass
    return sorted(records, key=lambda r: r.arrival), answers


def new_duckdb(datasets: Path, sql_dir: Path = SQL_DIR):
    """A plain DuckDB connection (one thread, as every session's) holding the workload's tables."""
    import duckdb

    con = duckdb.connect(config={"threads": 1})
    con.execute(tables_sql(datasets, sql_dir))
    return con
