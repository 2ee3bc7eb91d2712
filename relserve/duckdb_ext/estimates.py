"""A DuckDB statement's estimate from its EXPLAIN (issue 47): its sites replayed together on the
engine of this process (relserve/estimate/statement.py), or, on a connection to a server, the
server's estimate of each site added up stage by stage."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import duckdb

from relserve.budget import Allowance, Budget, BudgetExceeded, refusal
from relserve.duckdb_ext.params import Params
from relserve.duckdb_ext.planned import StatementRun
from relserve.duckdb_ext.session import LocalRunner, Session
from relserve.duckdb_ext.statement import Statement
from relserve.estimate import selectivity
from relserve.estimate.estimate import CallEstimate, engine_view
from relserve.estimate.statement import SiteWork, StatementEstimate, estimate_statement
from relserve.planner.engine_ref import EngineRef


def site_stages(run: StatementRun) -> dict[int, int]:
    """Each site's stage: 1 for a site that waits for none, else one past the latest it waits for."""
    sites = run.statement.sites
    stage: dict[int, int] = {}

    def stage_of(i: int, visiting: frozenset = frozenset()) -> int:
        if i not in stage:
            deps = [d for d in sites[i].depends_on if d not in visiting]
            stage[i] = 1 + max((stage_of(d, visiting | {i}) for d in deps), default=0)
        return stage[i]

    return {s.index: stage_of(s.index) for s in sites}


def _share(run: StatementRun, index: int) -> float:
    """The share of a site's rows the filters it waits for are expected to keep."""
    share = 1.0
    states = {s.site.index: s for s in run.sites}
    for d in run.statement.sites[index].depends_on:
        state = states[d]
        if state.function.kind == "filter":
            calls = list(state.arrivals or {})
            share *= math.prod(selectivity.kept_share(c.call_key()) for c in calls) if calls else 1.0
    return share


def statement_estimate(run: StatementRun, session: Session) -> StatementEstimate | None:
    stages = site_stages(run)
    explains = [(s, p) for s in run.sites for p in s.explains]
    if any(getattr(p, "estimate", None) is None for _, p in explains):
        return None  # a site could not be estimated (no tokenizer)
    if any(p.estimate.work is None for _, p in explains):
        return remote_statement(run, stages)
    sites = [SiteWork(f"#{s.site.index}", stages[s.site.index], [p.estimate.work for p in s.explains], _share(run, s.site.index))
             for s in run.sites]
    engine = session.runner.engine if isinstance(session.runner, LocalRunner) else None
    model_id = next((p.model_id for _, p in explains), None)
    if model_id is None:
        return estimate_statement(sites, engine_view(None, ""), run.collect_s)
    running = EngineRef(engine, None).peek()
    return estimate_statement(sites, engine_view(running, model_id), run.collect_s)


def remote_statement(run: StatementRun, stages: dict[int, int]) -> StatementEstimate:
    """The server's estimate of each site, summed: each stage of sites takes its slowest site
    (behind the server's queue for the first stage, alone after it), plus the passes."""
    by_stage: dict[int, list[CallEstimate]] = {}
    for s in run.sites:
        by_stage.setdefault(stages[s.site.index], []).extend(p.estimate for p in s.explains)
    idle = now = 0.0
    have_now = False
    for k, (_, ests) in enumerate(sorted(by_stage.items())):
        idle += max((e.idle_s or 0.0 for e in ests), default=0.0)
        first = [e.now_s for e in ests if e.now_s is not None]
        have_now = have_now or bool(first)
        now += max(first or [e.idle_s or 0.0 for e in ests], default=0.0) if k == 0 else max((e.idle_s or 0.0 for e in ests), default=0.0)
    passes = len(by_stage) + 1
    pass_s = run.collect_s
    ests = [e for v in by_stage.values() for e in v]
    return StatementEstimate(
        prompt_tokens=sum(e.prompt_tokens for e in ests), most_answer_tokens=sum(e.most_answer_tokens for e in ests),
        exact=all(e.exact for e in ests) and len(by_stage) <= 1, idle_s=idle + passes * pass_s,
        now_s=now + passes * pass_s if have_now else None, passes=passes, pass_s=pass_s,
    )


@contextmanager
def statement_budget(con: duckdb.DuckDBPyConnection, query: str, params: Params, budget: Budget,
                     explain: Callable[[duckdb.DuckDBPyConnection, str, Params], object]) -> Iterator[None]:
    """Run a statement under ``budget``: refused first when its estimate exceeds it (``explain``
    reads the rows once, as EXPLAIN does), then held by an ``Allowance`` every call of the
    statement spends from (``Session.budget``)."""
    from relserve.duckdb_ext.connections import session_of

    session = session_of(con)
    started = time.monotonic()
    if budget.on_budget == "refuse":
        estimate = getattr(explain(con, query, params), "estimate", None)
        if estimate is not None:
            seconds = estimate.now_s if estimate.now_s is not None else estimate.idle_s
            why = refusal(budget, "statement", estimate.most_tokens, seconds, exact=estimate.exact)
            if why is not None:
                raise BudgetExceeded(why)
    session.budget = Allowance(budget.max_tokens_total, budget.max_seconds, name="statement", started=started)
    try:
        yield
    finally:
        session.budget = None


@dataclass(frozen=True)
class Measured:
    """EXPLAIN ANALYZE: what running the statement took."""

    seconds: float
    #: the engine's tokens of everything the statement sent (prompt, and prompt plus answer)
    prompt_tokens: int
    tokens: int

    def line(self, estimate: StatementEstimate | None) -> str:
        est = "no estimate"
        if estimate is not None and estimate.idle_s is not None:
            now = "" if estimate.now_s is None else f", {estimate.now_s:.2f}s now"
            bound = "" if estimate.exact else " (at most, or about)"
            est = f"estimated {estimate.idle_s:.2f}s alone{now}, {estimate.prompt_tokens:,} prompt tokens{bound}"
        return (f"measured: {self.seconds:.2f}s, {self.prompt_tokens:,} engine prompt tokens, {self.tokens:,} with the "
                f"answers ({est})")


def measured_run(con: duckdb.DuckDBPyConnection, session: Session, statement: Statement,
                 params: Params) -> tuple[Measured, StatementRun]:
    """Run the statement as ``sql`` does, counting the engine's tokens of everything it sends
    (an allowance of no limit: relserve/budget.py)."""
    from relserve.duckdb_ext.planned import run_planned

    counter = session.budget or Allowance(name="statement")
    held, session.budget = session.budget, counter
    t0 = time.perf_counter()
    try:
        _, run = run_planned(con, session, statement, params)
    finally:
        session.budget = held
    return Measured(time.perf_counter() - t0, counter.spent_prompt, counter.spent_tokens), run
