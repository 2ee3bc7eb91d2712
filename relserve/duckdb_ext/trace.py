"""Where a planned statement's wall time went (issue 65): reading the script (sqlglot), each
DuckDB pass, each wave of relQueries and, per relQuery, what the engine, the label method's
first pass and (on a server connection) the round trip took.

The statement's time is split into parts that add up to its total::

    total_s = parse_s + sum(p.seconds for p in passes) + sum(s.seconds for s in stages) + other_s

``other_s`` is what none of the others covers (registering the sites' functions, choosing the
order of AND-ed filters without a sample, the gaps between parts); it is never negative by more
than the clock's resolution. A relQuery's own parts (``CallTrace``) are inside the stage or the
pass that ran it, so they are reported beside the sum, not in it.

EXPLAIN ANALYZE prints it (``StatementTrace.lines``) and the end-to-end benchmark keeps it per
statement, so a regression in what relserve adds around the engine shows as a number.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class PassTrace:
    """One run of the statement's SQL in DuckDB."""

    #: "collect" (sites record unknown rows), "final" (the statement itself, sites answer
    #: inline) or "explain" (EXPLAIN's one collection pass)
    kind: str
    seconds: float
    #: of ``seconds``: relQueries the sites ran inside the pass (inline mode), 0 in a collection pass
    llm_s: float = 0.0


@dataclass(frozen=True)
class CallTrace:
    """One relQuery a site sent: what it took from the statement's side and, where known, the
    engine's and the server's side."""

    site: int
    function: str
    rows: int
    #: the call's wall time as the statement waited for it (planning, sending, running, answers back)
    seconds: float
    #: the engine's relQuery, arrival to last row (None: nothing reached the engine)
    engine_s: float | None = None
    #: of ``engine_s``: waiting for its first prefill step (behind other relQueries)
    queued_s: float | None = None
    #: the label method's first pass (its plan's sample scored before the rows; None: none ran)
    first_pass_s: float | None = None
    #: on a server connection: the server's job, received to last row (None: a local engine)
    server_s: float | None = None
    #: on a server connection: ``seconds`` less ``server_s`` (HTTP both ways, the rows streamed
    #: back, the client's own work); None on a local engine
    round_trip_s: float | None = None


@dataclass(frozen=True)
class StageTrace:
    """The relQueries of one wave (sites whose upstream sites are settled, sent side by side),
    or the sample an AND of filters runs to choose its order."""

    #: "relqueries", "filter order" or "limit" (a LIMIT's filter streamed, the statement
    #: checked as rows pass)
    kind: str
    sites: tuple[int, ...]
    seconds: float
    #: of ``seconds``: the statement run again to check whether a LIMIT has its rows
    checks_s: float = 0.0
    checks: int = 0


@dataclass
class StatementTrace:
    """What one planned statement's time was spent on (see the module docstring)."""

    #: reading the statement: sqlglot's tokenizing and parsing and finding the call sites (the
    #: script's share: a script of several statements is read once, its time split evenly)
    parse_s: float = 0.0
    #: calls of sqlglot's parser over the statement's script (1 since issue 65; was 3)
    parses: int = 0
    passes: list[PassTrace] = field(default_factory=list)
    stages: list[StageTrace] = field(default_factory=list)
    calls: list[CallTrace] = field(default_factory=list)
    total_s: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def passes_s(self) -> float:
        return sum(p.seconds for p in self.passes)

    @property
    def stages_s(self) -> float:
        return sum(s.seconds for s in self.stages)

    @property
    def other_s(self) -> float:
        return self.total_s - self.parse_s - self.passes_s - self.stages_s

    @property
    def engine_s(self) -> float:
        """The engine's own time over the statement's relQueries (summed: side by side relQueries
        count each)."""
        return sum(c.engine_s or 0.0 for c in self.calls)

    @property
    def first_pass_s(self) -> float:
        return sum(c.first_pass_s or 0.0 for c in self.calls)

    @property
    def round_trip_s(self) -> float:
        return sum(c.round_trip_s or 0.0 for c in self.calls)

    def add_reading(self, seconds: float, parses: int) -> None:
        """The statement's share of reading its script, added to its total."""
        self.parse_s += seconds
        self.parses = parses
        self.total_s += seconds

    def add_call(self, call: CallTrace) -> None:
        with self._lock:  # a wave's sites run in threads of their own
            self.calls.append(call)

    @contextmanager
    def timed_pass(self, kind: str) -> Iterator[None]:
        """Time a DuckDB pass; relQueries that ran inside it (inline sites) are counted apart."""
        before = len(self.calls)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            inside = sum(c.seconds for c in self.calls[before:])
            self.passes.append(PassTrace(kind, time.perf_counter() - t0, inside))

    @contextmanager
    def timed_stage(self, kind: str, sites: tuple[int, ...]) -> Iterator[list[float]]:
        """Time a wave of relQueries; the block appends the seconds of each LIMIT check to the
        list it is given."""
        checks: list[float] = []
        t0 = time.perf_counter()
        try:
            yield checks
        finally:
            self.stages.append(StageTrace(kind, sites, time.perf_counter() - t0, sum(checks), len(checks)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_s": self.total_s, "parse_s": self.parse_s, "parses": self.parses,
            "passes_s": self.passes_s, "stages_s": self.stages_s, "other_s": self.other_s,
            "engine_s": self.engine_s, "first_pass_s": self.first_pass_s, "round_trip_s": self.round_trip_s,
            "passes": [asdict(p) for p in self.passes], "stages": [asdict(s) for s in self.stages],
            "calls": [asdict(c) for c in self.calls],
        }

    def lines(self) -> list[str]:
        """EXPLAIN ANALYZE's account of the statement's time."""
        ms = lambda s: f"{s * 1000:.0f} ms"  # noqa: E731
        passes = ", ".join(f"{p.kind} {ms(p.seconds)}" + (f" ({ms(p.llm_s)} of it relQueries)" if p.llm_s else "")
                           for p in self.passes)
        stages = ", ".join(f"{s.kind} #{', #'.join(map(str, s.sites))} {ms(s.seconds)}"
                           + (f" ({s.checks} LIMIT checks, {ms(s.checks_s)})" if s.checks else "") for s in self.stages)
        out = [
            f"time: {self.total_s:.3f} s = reading the SQL {ms(self.parse_s)} ({self.parses} parse(s))"
            f" + {len(self.passes)} DuckDB pass(es) {ms(self.passes_s)}"
            f" + {len(self.stages)} wave(s) of relQueries {ms(self.stages_s)} + other {ms(self.other_s)}",
            f"   passes: {passes or 'none'}",
            f"   waves: {stages or 'none'}",
        ]
        for c in self.calls:
            parts = [f"{c.seconds:.3f} s"]
            if c.server_s is not None:
                parts.append(f"server {c.server_s:.3f} s, round trip {ms(c.round_trip_s or 0.0)}")
            if c.engine_s is not None:
                parts.append(f"engine {c.engine_s:.3f} s ({ms(c.queued_s or 0.0)} queued)")
            if c.first_pass_s is not None:
                parts.append(f"label first pass {ms(c.first_pass_s)}")
            out.append(f"   relQuery of #{c.site} {c.function}, {c.rows} row(s): " + ", ".join(parts))
        return out


def call_trace(site: int, function: str, rows: int, outcome: Any, *, remote: bool) -> CallTrace:
    """A relQuery's trace from its ``CallOutcome``: its seconds, and the engine's ``RelQueryStats``
    (a local engine) or the server's ``JobStats`` (a server connection) when something ran."""
    stats = outcome.engine_stats
    seconds = outcome.seconds
    if stats is None:
        return CallTrace(site, function, rows, seconds, first_pass_s=outcome.first_pass_s)
    get = stats.get if remote else (lambda name, default=None: getattr(stats, name, default))
    if remote:
        server = get("latency_s")
        return CallTrace(site, function, rows, seconds, engine_s=get("engine_latency_s"), queued_s=get("waiting_s"),
                         first_pass_s=get("first_pass_s"), server_s=server,
                         round_trip_s=None if server is None else max(seconds - server, 0.0))
    return CallTrace(site, function, rows, seconds, engine_s=get("latency_s"), queued_s=get("waiting_s"),
                     first_pass_s=outcome.first_pass_s)
