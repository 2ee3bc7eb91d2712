"""Server-side relQueries ("jobs"): one per request, owned by a tenant, run as ONE engine
relQuery per call (spreadsheet cells of several templates: one per template, one after the
other), with their rows fanned back out to the request's rows as they finish.

Everything here runs on the server's event loop, except ``Engine.submit`` (tokenizing) and the
result-cache write, which go to a worker thread.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace

from starlette.concurrency import run_in_threadpool

from relserve.backend.protocol import Backend
from relserve.budget import Allowance
from relserve.cascade import policy as cascade_policy
from relserve.cascade import prefetch
from relserve.estimate.estimate import CallEstimate
from relserve.functions import SchedulingHints
from relserve.job_stats import JobStats
from relserve.planner.cascade_drive import AnyCascade, make_cascade, merged_stats, write_proxy_answers
from relserve.planner.executor import CallExecutor
from relserve.planner.explain import describe_labels
from relserve.planner.planned_rows import PlannedRows
from relserve.policy.types import Tenancy
from relserve.replies import JobDescription, JobProgress
from relserve.results import RelQueryStats, RowResult
from relserve.server.budget import ZERO, Cost, LimitExceeded, call_max_tokens, label_cost
from relserve.server.tenant_engine import engine_for_tenant
from relserve.validation import OnError

RUNNING, FINISHED, CANCELLED, FAILED = "running", "finished", "cancelled", "failed"

class Job:
    """One request's relQuery on the server: its rows as they finish, for every reader."""

    def __init__(
        self,
        batch: PlannedRows,
        tenant: str,
        kind: str,
        hints: SchedulingHints = SchedulingHints(),
        tenancy: Tenancy | None = None,
        budget: Allowance | None = None,
        estimate: CallEstimate | None = None,
        *,
        costs: Sequence[Cost],
    ) -> None:
        self.id = uuid.uuid4().hex[:16]
        self.batch = batch
        self.hints = hints
        self.tenant = tenant
        self.kind = kind
        self.priority = hints.priority
        self.deadline_s = hints.deadline_s
        self.fail_fast = batch.call.options.on_error == OnError.RAISE
        self.received = time.monotonic()
        #: the prompts of each call of the request, each run as its own relQuery with its own
        #: label path (one part unless cells of several templates)
        self.parts = batch.by_call()
        # the model id is the engine's, known when the job runs. The rows' shared prefix is warmed
        # in the tenant's namespace before they run, as on the local surfaces (the engine skips
        # a prefix its cache holds already)
        self.executors = [CallExecutor(part, model_id="", hints=hints, rel_id=self.id if k == 0 else f"{self.id}-{k}",
                                       received=self.received, budget=budget, prefix=part.shared_prefix())
                          for k, part in enumerate(self.parts)]
        #: the executor running now (a cascade's runs several), the last one once the job ended
        self.executor = self.executors[0]
        #: per part, the last executor that ran it (what the job's stats describe)
        self._ran: list[CallExecutor] = []
        self.created_at = time.time()
        self.finished_at: float | None = None
        self.status = RUNNING
        self.error: str | None = None
        self.rows: list[RowResult | None] = [None] * batch.total
        self.order: list[int] = []
        self.engine_total = len(batch.prompts)
        #: per part, its engine rows' size (rows, prompt characters, tokens): what counts against
        #: the tenant (``engine_costs``)
        self.costs = list(costs)
        if len(self.costs) != len(self.parts):
            raise ValueError(f"{len(self.costs)} costs for {len(self.parts)} parts")
        #: per part, its engine rows finished, and the part running now
        self._part_done = [0] * len(self.parts)
        self._part = 0
        #: who runs it in the engine (prefix-cache salt, share); None: no tenancy (open mode)
        self.tenancy = tenancy
        #: its estimate when it started (issue 47), shown beside what it took
        self.estimate = estimate
        self.engine_done = 0
        self.engine_stats: RelQueryStats | None = None
        self.handle = None
        self._cancel_reason: str | None = None
        #: fail-fast: the first row error, which fails the whole job
        self._failure: str | None = None
        self._changed = asyncio.Condition()
        #: a model cascade (``cascade`` option, relserve/cascade/): its plan per part (the first's
        #: is described), and once one runs, itself
        self.cascade_plans = [cascade_policy.plan(part.call, len(part.prompts)) for part in self.parts]
        self.cascade_plan = self.cascade_plans[0]
        self.cascade: AnyCascade | None = None
        #: the engine statistics of every relQuery run so far (merged into ``engine_stats``)
        self._stats: list[RelQueryStats | None] = []
        #: executors whose answers are in the result cache already (a cascade runs two)
        self._cache_written: list[CallExecutor] = []

    # ------------------------------------------------------------------ state

    @property
    def total(self) -> int:
        return self.batch.total

    @property
    def done(self) -> bool:
        return self.status != RUNNING

    @property
    def cost(self) -> Cost:
        """The job's size: its parts' summed."""
        return sum(self.costs, ZERO)

    def _pending(self) -> list[int]:
        # per part: a bootstrap first pass (cost.rows over its prompts) counts until the job
        # ends; a row that finished frees each of its scoring requests (its own call's count)
        return [max(0, c.rows - done * c.per_prompt) for c, done in zip(self.costs, self._part_done)]

    @property
    def engine_pending(self) -> int:
        return 0 if self.done else sum(self._pending())

    @property
    def tokens_pending(self) -> int:
        if self.done:
            return 0
        return sum(-(-c.tokens * n // c.rows) for c, n in zip(self.costs, self._pending()) if c.rows)

    @property
    def latency_s(self) -> float:
        end = self.finished_at if self.finished_at is not None else time.monotonic()
        return end - self.received

    def cancel(self, reason: str = "cancelled") -> None:
        """Abort the unfinished rows (they get the error ``reason``); finished rows keep their answers."""
        if self.done or self._cancel_reason is not None:
            return
        self._cancel_reason = reason
        if self.handle is not None:
            self.handle.cancel()

    def _put(self, row: RowResult) -> None:
        if self.rows[row.index] is None:
            self.rows[row.index] = row
            self.order.append(row.index)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------------------ running

    async def run(self, engine: Backend, on_finish: Callable[[Job], None]) -> None:
        """Drive the job to its end: ready rows first, then the engine's rows as they finish, one
        part (call) after the other."""
        b = self.batch
        for ex in self.executors:
            ex.model_id = engine.model_id
        try:
            for row in sorted(b.ready, key=lambda r: r.index):
                self._put(row)
                if row.error is not None:
                    self._row_failed(row.index, row.error)
            await self._notify()
            for k, (part, ex, plan) in enumerate(zip(self.parts, self.executors, self.cascade_plans)):
                if self._cancel_reason is not None:
                    break
                if not part.prompts:
                    continue
                self._part, self.executor = k, ex
                if plan.applies:
                    await self._run_cascade(part, plan, engine)
                else:
                    self._stats.append(await self._run_relquery(ex, engine))
                    self.engine_stats = merged_stats(self._stats)
                self._ran.append(self.executor)
            self._close(CANCELLED if self._cancel_reason else FINISHED)
        except Exception as e:  # an engine failure fails this job, never the server
            self._close(FAILED, f"{type(e).__name__}: {e}")
        finally:
            for ex in (*self.executors, self.executor):
                await self._write_cache(ex)
            await self._notify()
            on_finish(self)

    async def _run_relquery(self, ex: CallExecutor, engine: Backend,
                            record: Callable[[RowResult], None] | None = None) -> RelQueryStats:
        """One engine relQuery of ``ex``'s rows, each streamed to the readers as it finishes."""
        self.executor = ex
        self.handle = await run_in_threadpool(ex.submit, engine_for_tenant(engine, self.tenancy))
        if self._cancel_reason is not None:  # cancelled while the engine was tokenizing
            self.handle.cancel()
        async for er in self.handle:
            for row in self._engine_row(er):
                if record is not None:
                    record(row)
            await self._notify()
        result = await self.handle
        return result.stats

    async def _run_cascade(self, b: PlannedRows, plan: cascade_policy.CascadePlan, engine: Backend) -> None:
        """The cascade's steps over one part ``b`` (relserve/planner/cascade_runner.py,
        cascade_targets.py): the sample's relQuery, the proxy (off the event loop), a recall /
        precision cascade's audit relQuery, the proxy's rows, then the remainder's relQuery."""
        cascade = self.cascade = make_cascade(b, plan, seed=b.call.options.seed or 0)
        if prefetch.OVERLAP:
            cascade.start_prefetch()
        try:
            await self._cascade_steps(engine, b, cascade)
        finally:
            cascade.stop_prefetch()

    async def _cascade_steps(self, engine: Backend, b: PlannedRows, cascade: AnyCascade) -> None:
        rep = cascade.report
        # every relQuery of the cascade spends from the job's budget and its tenant's day
        budget = self.executor.budget

        def part(rows: PlannedRows, rel_id: str) -> CallExecutor:
            return CallExecutor(rows, model_id=engine.model_id, hints=self.hints, rel_id=rel_id, received=self.received,
                                prefix=rows.shared_prefix(), budget=budget)

        stats = self._stats
        rel_id = self.executors[self._part].rel_id or self.id
        t0 = time.perf_counter()
        first = part(cascade.sample(), rel_id)
        try:
            stats.append(await self._run_relquery(first, engine, record=cascade.record))
        finally:
            await self._write_cache(first)
            self.engine_stats = merged_stats(stats)
        rep.sample_s = time.perf_counter() - t0
        if self._cancel_reason is not None or self._failure is not None:
            return
        await run_in_threadpool(cascade.learn, lambda: self._cancel_reason is not None)
        if self._cancel_reason is not None:
            return
        audit = cascade.audit()
        if audit is not None and audit.prompts:
            t1 = time.perf_counter()
            checking = part(audit, f"{rel_id}-audit")
            try:
                stats.append(await self._run_relquery(checking, engine, record=cascade.record))
            finally:
                await self._write_cache(checking)
                self.engine_stats = merged_stats(stats)
            rep.audit_s = time.perf_counter() - t1
            if self._cancel_reason is not None or self._failure is not None:
                return
        await run_in_threadpool(cascade.choose)
        for row in cascade.proxy_answers():
            self._put(row)
        await self._notify()
        if b.cache is not None:
            try:
                await run_in_threadpool(write_proxy_answers, cascade, first)
            except Exception:  # a full disk must not lose the answers already streamed
                pass
        rest = cascade.remainder()
        if rest.prompts:
            t2 = time.perf_counter()
            try:
                stats.append(await self._run_relquery(part(rest, f"{rel_id}-rest"), engine))
            finally:
                self.engine_stats = merged_stats(stats)
            rep.remainder_s = time.perf_counter() - t2

    async def _write_cache(self, ex: CallExecutor) -> None:
        # no thread hop when there is nothing to store: a server that is stopping must still
        # reach the final event
        if ex.has_cache_writes and ex not in self._cache_written:
            self._cache_written.append(ex)
            try:
                await run_in_threadpool(ex.write_cache)
            except Exception:  # a full disk must not lose the answers already streamed
                pass

    def _engine_row(self, er: RowResult) -> list[RowResult]:
        self.engine_done += 1
        self._part_done[self._part] += 1
        if er.error == "cancelled" and self._cancel_reason:
            er = replace(er, error=self._cancel_reason)
        rows = self.executor.answer(er)
        for row in rows:
            self._put(row)
        if rows and rows[0].error is not None:
            self._row_failed(min(r.index for r in rows), rows[0].error)
        return rows

    def _row_failed(self, index: int, error: str) -> None:
        if self.fail_fast and self._failure is None:
            self._failure = f"row {index}: {error}"
            self.cancel(f"not run: row {index} failed and on_error is 'raise'")

    def _close(self, status: str, error: str | None = None) -> None:
        reason = error or self._cancel_reason or "cancelled"
        for i in range(self.total):  # every row gets exactly one answer or one error
            if self.rows[i] is None:
                self._put(RowResult(i, error=reason))
        if self._failure is not None and status != FAILED:
            status, error = FAILED, self._failure
        self.status = status
        self.error = error if status == FAILED else (self._cancel_reason if status == CANCELLED else None)
        self.finished_at = time.monotonic()

    # ------------------------------------------------------------------ reading

    async def follow(self, start: int = 0, idle_s: float | None = None) -> AsyncIterator[RowResult | None]:
        """Rows in the order they finished, from the ``start``-th on, until the job ends.

        With ``idle_s``, yields None after that long without a row (for keep-alive pings)."""
        i = start
        while True:
            async with self._changed:
                try:
                    await asyncio.wait_for(self._changed.wait_for(lambda i=i: len(self.order) > i or self.done), idle_s)
                except TimeoutError:
                    ready, finished = [], False
                else:
                    ready = self.order[i:]
                    finished = self.done
            if not ready and not finished:
                yield None
                continue
            for idx in ready:
                yield self.rows[idx]  # type: ignore[misc]
            i += len(ready)
            if finished and i >= len(self.order):
                return

    async def wait(self) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.done)

    def stats(self) -> JobStats:
        rows = [r for r in self.rows if r is not None]
        out = JobStats(
            rows=self.total,
            errors=sum(r.error is not None for r in rows),
            cached_rows=sum(r.cached for r in rows),
            engine_rows=self.engine_total,
            latency_s=round(self.latency_s, 4),
        )
        s = self.engine_stats
        if s is not None:
            out.waiting_s = round(s.waiting_s, 4)
            out.core_s = round(s.core_s, 4)
            out.tail_s = round(s.tail_s, 4)
            out.engine_latency_s = round(s.latency_s, 4)
            out.prompt_tokens = s.prompt_tokens
            out.output_tokens = s.output_tokens
            out.cached_tokens = s.cached_tokens
            out.prefix_hit_rate = round(s.prefix_hit_rate, 4)
            out.policy = s.policy
        if self.deadline_s is not None and self.done:
            out.deadline_met = self.latency_s <= self.deadline_s
        # the first part's label path is described (the only one, unless cells of several templates)
        ex = self._ran[0] if self._ran else self.executor
        if ex is not None and ex.label_report is not None:
            # EXPLAIN ANALYZE of the label method: the layout chosen, the estimated prior
            out.labels = describe_labels(ex.label_report)
        if ex is not None and ex.first_pass_s is not None:
            out.first_pass_s = round(ex.first_pass_s, 4)
        warning = next((e.warning for e in self._ran if e.warning is not None), None) if self._ran else ex.warning
        if warning is not None:
            # the answers are close to guesses: the client (a PostgreSQL NOTICE, a sheet) says so
            out.warning = warning
        if self.cascade_plan.on:
            # EXPLAIN ANALYZE of the cascade: whether it applied, and what it did
            p = self.cascade_plan
            out.cascade = (self.cascade.report.as_dict() if self.cascade is not None
                           else {"target": p.target, "recall": p.recall, "precision": p.precision, "skipped": p.skipped})
        est = self.estimate
        if est is not None:  # issue 47: the estimate it started with
            out.estimated_s = est.now_s if est.now_s is not None else est.idle_s
            out.estimated_prompt_tokens = est.prompt_tokens
        budget = self.executor.budget if self.executor is not None else None
        if budget is not None:  # issue 47: the engine tokens spent against its budgets
            out.budget_tokens_spent = budget.spent_tokens
            out.budget_prompt_tokens_spent = budget.spent_prompt
        return out

    def description(self) -> JobDescription:
        return JobDescription(
            id=self.id,
            kind=self.kind,
            status=self.status,
            error=self.error,
            created=self.created_at,
            progress=JobProgress(done=len(self.order), total=self.total),
            priority=self.priority,
            deadline_s=self.deadline_s,
            stats=self.stats(),
        )

    def describe(self) -> dict[str, object]:
        """The job's description as JSON: always serialisable (a non-finite number becomes null)."""
        return json_safe(self.description().to_json())  # type: ignore[return-value]


def engine_costs(batch: PlannedRows, engine: Backend) -> list[Cost]:
    """What ``batch``'s job counts against its tenant, per part (``PlannedRows.by_call``): its
    engine rows, and what their label path sends besides them on ``engine`` (``label_cost``).
    May build a label trie: call it off the event loop."""
    return [_part_cost(part, engine) for part in batch.by_call()]


def _part_cost(part: PlannedRows, engine: Backend) -> Cost:
    system = len(getattr(part.call.options, "system", None) or "")
    chars = sum(len(p) + system for p in part.prompts)
    max_tokens = call_max_tokens(part.call)
    # (the values a filter's layout may take labels from: one call's, so they line up with its columns)
    return label_cost(Cost.of(len(part.prompts), chars, max_tokens), part.call, max_tokens, engine, part.values)


def json_safe(value: object) -> object:
    """``value`` with NaN and infinities replaced by None (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


class Reservation:
    """Work a tenant has asked for that is being planned: it counts like running work."""

    def __init__(self, tenant: str, cost: Cost) -> None:
        self.tenant = tenant
        self.cost = cost


class JobRegistry:
    """Jobs by id; finished ones are kept a while so their results can still be read."""

    def __init__(self, keep_finished_s: float = 600.0, max_finished: int = 1000) -> None:
        self.keep_finished_s = keep_finished_s
        self.max_finished = max_finished
        self._jobs: dict[str, Job] = {}
        self._reserved: set[Reservation] = set()

    def rows_in_flight(self, tenant: str | None = None) -> int:
        return self.in_flight(tenant).rows

    def in_flight(self, tenant: str | None = None) -> Cost:
        """Engine rows and tokens not finished yet, plus what is being planned."""
        rows = tokens = 0
        for j in self._jobs.values():
            if tenant is None or j.tenant == tenant:
                rows += j.engine_pending
                tokens += j.tokens_pending
        for r in self._reserved:
            if tenant is None or r.tenant == tenant:
                rows += r.cost.rows
                tokens += r.cost.tokens
        return Cost(rows, 0, tokens)

    def _check(self, tenant: str, new: Cost, limits: object) -> None:
        busy = self.in_flight(tenant)
        # the same check for both limits, rows first; the messages differ only in what they name
        for unit, n, running, limit, counted, smaller in (
            ("rows", new.rows, busy.rows, limits.max_rows_in_flight, "", "fewer rows"),
            ("tokens", new.tokens, busy.tokens, limits.max_tokens_in_flight,
             "; prompt tokens estimated plus max_tokens per row", "fewer rows or a smaller max_tokens"),
        ):
            if n and running + n > limit:
                raise LimitExceeded(
                    f"tenant {tenant!r} would have {running + n} {unit} in flight ({running} running + {n} new{counted}); "
                    f"the limit is {limit} (max_{unit}_in_flight; {unit} being planned count as running). "
                    f"Retry when some finish, or send {smaller}."
                )

    def reserve(self, tenant: str, cost: Cost, limits: object) -> Reservation:
        """Count ``cost`` against ``tenant`` while its request is planned (429 if over a limit).
        Runs on the event loop, like ``admit``: the check and the booking do not interleave."""
        self.prune()
        self._check(tenant, cost, limits)
        r = Reservation(tenant, cost)
        self._reserved.add(r)
        return r

    def release(self, reservation: Reservation | None) -> None:
        if reservation is not None:
            self._reserved.discard(reservation)

    def running(self, tenant: str | None = None) -> list[Job]:
        return [j for j in self._jobs.values() if not j.done and (tenant is None or j.tenant == tenant)]

    def admit(self, job: Job, limits: object) -> None:
        """Register ``job`` if its tenant stays within its limit. Runs on the event loop, so the
        check and the registration cannot interleave with another admission."""
        self.prune()
        self._check(job.tenant, job.cost, limits)
        self._jobs[job.id] = job

    def get(self, job_id: str, tenant: str) -> Job | None:
        job = self._jobs.get(job_id)
        # another tenant's job is reported exactly like a missing one
        return job if job is not None and job.tenant == tenant else None

    def list(self, tenant: str) -> list[Job]:
        return [j for j in self._jobs.values() if j.tenant == tenant]

    def all(self) -> list[Job]:
        return list(self._jobs.values())

    def prune(self) -> None:
        now = time.monotonic()
        finished = [j for j in self._jobs.values() if j.done]
        finished.sort(key=lambda j: j.finished_at or 0.0)
        excess = len(finished) - self.max_finished
        for i, j in enumerate(finished):
            if i < excess or now - (j.finished_at or now) > self.keep_finished_s:
                self._jobs.pop(j.id, None)

    def cancel_all(self, reason: str) -> None:
        for j in self.running():
            j.cancel(reason)
