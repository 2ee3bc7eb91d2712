"""Prometheus metrics of one server (its own registry, so several apps can live in one process).

Counters and histograms are updated when a job ends; queue lengths and the scheduler's
overhead are read at scrape time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool

from relserve.backend.protocol import Backend
from relserve.engine.scheduler_stats import SchedulerStats
from relserve.server.jobs import Job, JobRegistry

# the *_created series (one timestamp per label set) only clutter a scrape
disable_created_metrics()

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000)


class _LiveCollector(Collector):
    """Values read when Prometheus scrapes: queues, prefix hit rate, scheduler overhead."""

    def __init__(self, jobs: JobRegistry, tenants: Callable[[], list[str]], engine: Backend, totals: dict[str, float]) -> None:
        self.jobs = jobs
        self.tenants = tenants
        self.engine = engine
        self.totals = totals
        #: the engine's scheduler_stats(), read just before a scrape (off the event loop)
        self.scheduler: SchedulerStats | None = None

    def collect(self):
        running = GaugeMetricFamily("relserve_relqueries_in_flight", "relQueries not finished yet", labels=["tenant"])
        rows = GaugeMetricFamily("relserve_rows_in_flight", "engine rows submitted and not finished yet", labels=["tenant"])
        by_tenant: dict[str, list[Job]] = {t: [] for t in self.tenants()}
        for job in self.jobs.running():
            by_tenant.setdefault(job.tenant, []).append(job)
        for tenant, jobs in sorted(by_tenant.items()):
            running.add_metric([tenant], len(jobs))
            rows.add_metric([tenant], sum(j.engine_pending for j in jobs))
        yield running
        yield rows
        prompt, cached = self.totals["prompt_tokens"], self.totals["cached_tokens"]
        yield GaugeMetricFamily(
            "relserve_prefix_cache_hit_ratio",
            "prompt tokens served from the engine's prefix cache / prompt tokens, since the server started",
            value=cached / prompt if prompt else 0.0,
        )
        st = self.scheduler
        if st is not None:
            sec = CounterMetricFamily("relserve_scheduler_policy_seconds", "time spent in the scheduling policy", labels=["part"])
            sec.add_metric(["dpu"], st.dpu_seconds)
            sec.add_metric(["aba"], st.aba_seconds)
            yield sec
            yield CounterMetricFamily("relserve_scheduler_steps", "engine steps planned by the policy", value=float(st.steps))
            policy = GaugeMetricFamily("relserve_scheduler_policy_info", "the engine's scheduling policy", labels=["policy"])
            policy.add_metric([st.policy or str(getattr(self.engine, "policy", ""))], 1.0)
            yield policy


class ServerMetrics:
    #: the fewest seconds between two scheduler RPCs, however often Prometheus scrapes
    scheduler_refresh_s = 0.5
    #: the longest a scrape waits for a refresh
    scheduler_wait_s = 2.0

    def __init__(self, jobs: JobRegistry, tenants: Callable[[], list[str]], engine: Backend) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.relqueries = Counter(
            "relserve_relqueries", "relQueries finished, by tenant, kind and status", ["tenant", "kind", "status"], registry=r
        )
        self.rows = Counter("relserve_rows", "rows answered, by outcome", ["tenant", "outcome"], registry=r)
        self.latency = Histogram(
            "relserve_relquery_latency_seconds",
            "relQuery latency: request received to last row answered",
            ["kind"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.phase = Histogram(
            "relserve_relquery_phase_seconds",
            "relQuery latency breakdown in the engine (paper Eq. 2): waiting, core running, tail running",
            ["phase"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter("relserve_tokens", "tokens, by kind (prompt, output, prefix_cached)", ["kind"], registry=r)
        self.deadline_missed = Counter(
            "relserve_deadline_missed", "relQueries that finished after their deadline hint", ["tenant"], registry=r
        )
        self.rejected = Counter("relserve_requests_rejected", "requests refused, by HTTP status", ["status"], registry=r)
        self._totals = {"prompt_tokens": 0.0, "cached_tokens": 0.0}
        self._live = _LiveCollector(jobs, tenants, engine, self._totals)
        r.register(self._live)
        self.engine = engine
        self._refresh: asyncio.Future | None = None
        self._refreshed_at = 0.0

    def job_finished(self, job: Job) -> None:
        self.relqueries.labels(job.tenant, job.kind, job.status).inc()
        self.latency.labels(job.kind).observe(job.latency_s)
        answered = errors = cached = 0
        for row in job.rows:
            if row is None or row.error is not None:
                errors += 1
            else:
                answered += 1
                cached += row.cached
        self.rows.labels(job.tenant, "answered").inc(answered - cached)
        self.rows.labels(job.tenant, "result_cache").inc(cached)
        self.rows.labels(job.tenant, "error").inc(errors)
        s = job.engine_stats
        if s is not None:
            self.phase.labels("waiting").observe(s.waiting_s)
            self.phase.labels("core").observe(s.core_s)
            self.phase.labels("tail").observe(s.tail_s)
            self.tokens.labels("prompt").inc(s.prompt_tokens)
            self.tokens.labels("output").inc(s.output_tokens)
            self.tokens.labels("prefix_cached").inc(s.cached_tokens)
            self._totals["prompt_tokens"] += s.prompt_tokens
            self._totals["cached_tokens"] += s.cached_tokens
        if job.deadline_s is not None and job.latency_s > job.deadline_s:
            self.deadline_missed.labels(job.tenant).inc()

    def read_scheduler(self) -> None:
        """Blocking RPC to the engine core: call it from a worker thread (``refresh_scheduler``)."""
        if getattr(self.engine, "uses_plugin", False):
            try:
                # a Backend that still returns the counters as a mapping reads the same way
                self._live.scheduler = SchedulerStats.model_validate(self.engine.scheduler_stats())
            except Exception:  # a scrape must not fail because the engine is busy switching policy
                pass

    async def refresh_scheduler(self) -> None:
        """Bring the scheduler's figures up to date for a scrape without an engine call per scrape:
        at most one RPC per ``scheduler_refresh_s``, shared by the scrapes that arrive meanwhile,
        in a worker thread; a scrape waits at most ``scheduler_wait_s`` for it (then it shows the
        figures of the previous refresh)."""
        if not getattr(self.engine, "uses_plugin", False):
            return
        now = time.monotonic()
        task = self._refresh
        if task is None or (task.done() and now - self._refreshed_at >= self.scheduler_refresh_s):
            self._refreshed_at = now
            task = self._refresh = asyncio.ensure_future(run_in_threadpool(self.read_scheduler))
        try:
            await asyncio.wait_for(asyncio.shield(task), self.scheduler_wait_s)
        except TimeoutError:
            pass

    def render(self) -> bytes:
        return generate_latest(self.registry)
