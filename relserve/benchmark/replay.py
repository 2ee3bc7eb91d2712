"""Replaying a trace against the real engine: each relQuery submitted at its arrival time."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

from relserve.engine.step_record import StepRecord
from relserve.relquery import RelQuery
from relserve.token_counts import TokenCounts
from relserve.workloads.traces import TraceQuery


@dataclass
class RelQueryRecord(TokenCounts):
    """One replayed relQuery: its times, its rows' tokens (``TokenCounts``) and answer lengths."""

    id: str
    type: str | None
    rows: int
    #: arrival relative to the start of the replay (seconds)
    arrival_s: float
    latency_s: float
    waiting_s: float
    core_s: float
    tail_s: float
    errors: int
    #: tokens generated for each row (feeds the simulator's validation)
    output_lengths: list[int] = field(default_factory=list)


@dataclass
class ReplayResult:
    records: list[RelQueryRecord]
    #: first arrival to last finish
    span_s: float
    #: the policy's own time (DPU + ABA) during the replay, when the plug-in runs
    policy_seconds: float | None = None
    steps: int | None = None
    #: the plug-in's log of every step of the replay (work, model run, scheduling call, policy
    #: time): what the step model is checked against on the shapes a policy really took
    step_log: list[StepRecord] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "records": [asdict(r) for r in self.records],
            "span_s": self.span_s,
            "policy_seconds": self.policy_seconds,
            "steps": self.steps,
            "step_log": [s.to_dict() for s in self.step_log],
        }


def replay(
    engine,
    trace: Sequence[TraceQuery],
    *,
    on_done: Callable[[RelQueryRecord], None] | None = None,
    timeout: float | None = None,
) -> ReplayResult:
    """Submit every relQuery of ``trace`` at its ``arrival_s`` (from now) and wait for all."""
    queries = sorted(trace, key=lambda q: q.arrival_s)
    if engine.uses_plugin:
        engine.reset_scheduler_stats()
    run_tag = uuid.uuid4().hex[:6]
    records: list[RelQueryRecord | None] = [None] * len(queries)
    finish: list[float] = [0.0] * len(queries)
    lock = threading.Lock()
    t0 = time.monotonic()
    waiters = []

    def collect(i: int, q: TraceQuery, handle, arrival: float) -> None:
        res = handle.result()
        end = time.monotonic()
        s = res.stats
        rec = RelQueryRecord(
            id=q.id,
            type=getattr(q, "type", None),
            rows=len(q.rows),
            arrival_s=arrival - t0,
            latency_s=s.latency_s,
            waiting_s=s.waiting_s,
            core_s=s.core_s,
            tail_s=s.tail_s,
            prompt_tokens=s.prompt_tokens,
            output_tokens=s.output_tokens,
            cached_tokens=s.cached_tokens,
            errors=s.num_errors,
            output_lengths=[r.output_tokens for r in res.rows],
        )
        with lock:
            records[i] = rec
            finish[i] = end
        if on_done:
            on_done(rec)

    for i, q in enumerate(queries):
        delay = t0 + q.arrival_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        arrival = time.monotonic()
        rq = RelQuery(
            q.template, q.rows, max_tokens=q.max_tokens, ignore_eos=bool(q.extras.get("ignore_eos", False)), rel_id=f"{q.id}-{run_tag}"
        )
        handle = engine.submit(rq)
        th = threading.Thread(target=collect, args=(i, q, handle, arrival), daemon=True)
        th.start()
        waiters.append(th)
    for th in waiters:
        th.join(timeout)
    span = max(finish) - t0 if finish else 0.0
    policy_s = steps = None
    log: list[StepRecord] = []
    if engine.uses_plugin:
        st = engine.scheduler_stats(steps=True)
        policy_s = st.policy_s
        steps = st.steps
        log = st.step_log
    return ReplayResult([r for r in records if r is not None], span, policy_s, steps, log)
