"""A discrete-event model of one vLLM engine, driven step by step by a ``relserve.policy`` Policy.

Each step the host describes its queues as a ``StepView``, asks the policy for a ``StepPlan`` and
applies it with the same meaning the vLLM scheduler plug-in gives it:

* PREFILL: admit ``plan.admit`` in order, running requests set aside (stop at the first request
  that does not fit ``max_num_seqs`` or the KV cache); each admitted request computes its
  uncached prompt within ``max_num_batched_tokens`` (the policy keeps batches within it, so a
  prompt is chunked only when the first one alone exceeds it).
  If not even the first fits beside the running requests, the step decodes instead.
* DECODE: nothing admitted; every running request gets one token (a request still prefilling
  from a chunked PREFILL gets its next chunk), as vLLM's scheduler does with an empty waiting
  queue.
* MIXED: vLLM v1 continuous batching within a token budget: running requests first (a decoding
  one takes 1 token, a prefilling one the rest of its prompt up to the budget: chunked prefill),
  then waiting requests in ``plan.admit`` order.
* IDLE: nothing to do until the next arrival.

A step takes ``cost.mixed(prefill tokens, decodes, prefill attention pairs, decode context)``,
which is ``cost.prefill`` or ``cost.decode`` when the step holds only one kind of work.

Token bookkeeping follows vLLM: a request has ``num_tokens`` (prompt plus generated) and
``computed`` (tokens whose KV exists). A step schedules ``n`` tokens of it; when ``computed``
reaches ``num_tokens`` at the step's end the request samples one token. So a decode schedules 1
token, and a prefill emits the first output token at the end of the step that completes it.
When the KV cache runs out for a running request, the most recently admitted running request is
preempted (vLLM's FCFS rule): its blocks are released and it goes back to the waiting queue (in
arrival order, as the plug-in presents it) to recompute its prompt and the tokens generated so far.
"""

from __future__ import annotations

import bisect
import dataclasses
import gc
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from relserve.errors import RelServeError
from relserve.policy import CostModel, Limits, Policy, Req, StepKind, StepPlan, StepView
from relserve.sim.prefix_cache import BlockPool
from relserve.sim.prepared_trace import PreparedRelQuery

WAITING, RUNNING, FINISHED = 0, 1, 2


class SimulationError(RelServeError, RuntimeError):
    """The simulation cannot go on (a request larger than the KV cache, a policy that stalls...)."""


class RelQueryLog:
    """Timestamps of one relQuery (paper Eq. 2)."""

    __slots__ = ("id", "arrival", "size", "first_prefill_start", "last_prefill_end", "finish", "done")

    def __init__(self, rel_id: str, arrival: float, size: int) -> None:
        self.id = rel_id
        self.arrival = arrival
        self.size = size
        #: start of the first step that computed any of its prompt tokens
        self.first_prefill_start: float | None = None
        #: end of the last step that computed any of its prompt tokens
        self.last_prefill_end: float | None = None
        #: end of the step in which its last request finished
        self.finish: float | None = None
        self.done = 0


class SimRequest:
    """The simulator's side of one request; ``req`` is what the policy sees."""

    __slots__ = (
        "req", "order", "rel", "prompt", "hashes", "out_len", "num_tokens", "computed", "prefill_end", "owned", "anon", "next_block", "state",
        "admitted",
    )

    def __init__(self, req: Req, order: int, rel: RelQueryLog, hashes: tuple[int, ...], out_len: int) -> None:
        self.req = req
        self.order = order  # position in arrival order (keeps the waiting list sorted)
        self.rel = rel
        self.prompt = req.prompt_tokens
        self.hashes = hashes
        self.out_len = out_len
        self.num_tokens = req.prompt_tokens  # prompt plus generated tokens
        self.computed = 0  # tokens with KV in the cache
        self.prefill_end = 0  # num_tokens when (re)admitted: computed below this means prefilling
        self.owned: list[int] = []  # cached blocks held, in prompt order
        self.anon = 0  # blocks held that are not (yet) cached prompt blocks
        self.next_block = 0  # next full prompt block to publish to the cache
        self.state = WAITING
        self.admitted = False  # admitted once (a preempted request is admitted again)


@dataclass
class EngineStats:
    steps: dict[str, int] = field(default_factory=lambda: {k.value: 0 for k in StepKind})
    busy_seconds: float = 0.0
    #: prompt tokens (including recomputed output after preemption) and how many were cache hits
    prefill_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    preemptions: int = 0
    #: PREFILL plans of which not even the first request fitted the KV cache (the step decoded)
    kv_blocked_prefills: int = 0
    evictions: int = 0
    end_time: float = 0.0


class EngineSim:
    def __init__(self, policy: Policy, cost: CostModel, limits: Limits, relqueries: Sequence[PreparedRelQuery],
                 until_done: Collection[str] = ()) -> None:
        """``until_done``: the run stops at the end of the step in which the last of these
        relQueries finished (an estimate needs no more); empty: it runs everything."""
        self.policy = policy
        self.cost = cost
        self.limits = limits
        self.block_size = limits.block_size
        self.pool = BlockPool(limits.kv_capacity_tokens // limits.block_size, limits.block_size)
        self.pending = deque(sorted(relqueries, key=lambda q: q.arrival))
        self.waiting: list[Req] = []
        self.running: list[Req] = []
        self.logs: list[RelQueryLog] = []
        self.stats = EngineStats()
        self.now = 0.0
        self._arrived = 0
        self._watched = frozenset(until_done)
        self._watched_left = len(self._watched)
        #: (time, request id) of each request's first admission, in order
        self.admissions: list[tuple[float, str]] = []

    # -- the event loop ---------------------------------------------------------------------------

    def run(self) -> EngineStats:
        # The loop allocates many short-lived tuples while ~10^5 long-lived request objects exist;
        # the cyclic collector would rescan those over and over, so it is paused for the run.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if was_enabled:
                gc.enable()

    def _run(self) -> EngineStats:
        pending = self.pending
        while True:
            while pending and pending[0].arrival <= self.now:
                self._arrive(pending.popleft())
            if not self.waiting and not self.running:
                if not pending:
                    break
                self.now = pending[0].arrival  # an empty engine does not call the scheduler
                continue
            view = StepView(self.now, self.waiting, self.running, self._view_limits(), self._probe)
            plan = self.policy.schedule(view)
            dt = self._execute(plan)
            if dt is None:
                if pending:
                    self.now = max(self.now, pending[0].arrival)
                    continue
                raise SimulationError(
                    f"policy {self.policy.name!r} made no progress at t={self.now:.3f}s with "
                    f"{len(self.waiting)} waiting and {len(self.running)} running requests and no arrival to wait for "
                    f"(plan {plan.kind.value}, reason {plan.reason!r})"
                )
            self.stats.busy_seconds += dt
            self.now += dt
            if self._watched and not self._watched_left:
                break
        self.stats.end_time = self.now
        self.stats.evictions = self.pool.evictions
        return self.stats

    def _arrive(self, q: PreparedRelQuery) -> None:
        log = RelQueryLog(q.id, q.arrival, q.size)
        self.logs.append(log)
        bs, blocks = self.block_size, self.pool.num_blocks
        for i in range(q.size):
            prompt, out_len = q.prompt_tokens[i], q.output_tokens[i]
            if -(-(prompt + out_len) // bs) > blocks:
                raise SimulationError(
                    f"relQuery {q.id!r} row {i}: {prompt} prompt + {out_len} output tokens need more than the "
                    f"{blocks * bs} tokens of KV cache (limits.kv_capacity_tokens)"
                )
            req = Req(request_id(q.id, i), q.id, q.arrival, q.rel_size, prompt, q.max_tokens, call_key=q.call_key)
            req.handle = SimRequest(req, self._arrived, log, q.hashes[i], out_len)
            self._arrived += 1
            self.waiting.append(req)

    def _view_limits(self) -> Limits:
        return dataclasses.replace(self.limits, kv_free_tokens=self.pool.available * self.block_size)

    def _probe(self, req: Req) -> int:
        """Prompt tokens of a waiting request the prefix cache holds now."""
        sr: SimRequest = req.handle
        return self.pool.hit_blocks(sr.hashes, sr.num_tokens) * self.block_size

    # -- one step ---------------------------------------------------------------------------------

    def _execute(self, plan: StepPlan) -> float | None:
        """Apply the plan; returns the step's duration, or None if it scheduled nothing."""
        if not plan.hold:
            return self._execute_plan(plan)
        # held requests (a tenant over its cap, a relQuery ranked behind: decode_subset) keep their
        # KV blocks but sit out the step
        ids = {id(r) for r in plan.hold}
        held = [r for r in self.running if id(r) in ids]
        self.running = [r for r in self.running if id(r) not in ids]
        try:
            return self._execute_plan(plan)
        finally:
            self.running = self.running + held

    def _execute_plan(self, plan: StepPlan) -> float | None:
        kind = plan.kind
        scheduled: list[tuple[SimRequest, int]] = []
        if kind is StepKind.IDLE:
            self.stats.steps["idle"] += 1
            return None
        budget0 = self.limits.max_num_batched_tokens
        if kind is StepKind.PREFILL:
            self._admit(plan.admit, budget0, scheduled)
            if scheduled:
                return self._take_step("prefill", scheduled)
            if not self.running:
                req = plan.admit[0] if plan.admit else None
                raise SimulationError(
                    f"PREFILL plan admitted nothing on an idle engine (first request {req.req_id if req else None!r}, "
                    f"KV blocks available {self.pool.available})"
                )
            # Not even the first request fits beside the running ones: they decode instead.
            self.stats.kv_blocked_prefills += 1
            kind = StepKind.DECODE
        if kind is StepKind.DECODE:
            self._schedule_running(budget0, scheduled)
            return self._take_step("decode", scheduled) if scheduled else None
        if kind is StepKind.MIXED:
            if plan.token_budget is not None:
                budget0 = plan.token_budget
            budget, preempted, _ = self._schedule_running(budget0, scheduled)
            if not preempted:  # vLLM admits nothing in a step that had to preempt
                self._admit(plan.admit, budget, scheduled)
            return self._take_step("mixed", scheduled) if scheduled else None
        raise SimulationError(f"unknown step kind {kind!r}")

    def _take_step(self, kind: str, scheduled: list[tuple[SimRequest, int]]) -> float:
        """Count a step of ``kind`` that computes ``scheduled`` and apply it; returns its duration."""
        self.stats.steps[kind] += 1
        dt = self._step_time(scheduled)
        self._complete(scheduled, dt)
        return dt

    def _step_time(self, scheduled: list[tuple[SimRequest, int]]) -> float:
        """The cost model's time for a step that computes ``scheduled`` (before ``_complete``):
        prefill tokens and the context they attend to, decodes and theirs, one fixed cost."""
        utok = decodes = context = 0
        pairs = 0.0
        for sr, n in scheduled:
            c = sr.computed
            if c < sr.prefill_end:
                utok += n
                pairs += n * (c + (n + 1) / 2)
            else:
                decodes += 1
                context += c + 1
        return self.cost.mixed(utok, decodes, pairs, context)

    def _admit(self, queue: Sequence[Req], budget: int, scheduled: list[tuple[SimRequest, int]]) -> int:
        """Admit waiting requests in ``queue`` order while the budget, max_num_seqs and KV allow;
        returns the budget left."""
        max_seqs = self.limits.max_num_seqs
        admitted: list[Req] = []
        for req in queue:
            if budget <= 0 or len(self.running) >= max_seqs:
                break
            sr: SimRequest = req.handle
            if sr.state != WAITING:
                raise SimulationError(f"policy {self.policy.name!r} admitted {req.req_id!r}, which is not waiting")
            n = self._allocate_for_admission(sr, budget)
            if not n:
                break
            sr.state = RUNNING
            if not sr.admitted:
                sr.admitted = True
                self.admissions.append((self.now, req.req_id))
            self.running.append(req)
            scheduled.append((sr, n))
            budget -= n
            admitted.append(req)
        if admitted:
            self._remove_waiting(admitted)
        return budget

    def _remove_waiting(self, admitted: list[Req]) -> None:
        """Drop admitted requests from the waiting list, keeping its order.

        Policies admit a run of consecutive waiting requests (the queue's head, or the head of one
        relQuery), so a slice deletion usually does it without a Python-level pass over the list.
        """
        waiting = self.waiting
        start = waiting.index(admitted[0])
        end = start + len(admitted)
        if waiting[start:end] == admitted:  # identity comparison: Req has eq=False
            del waiting[start:end]
        else:
            self.waiting = [r for r in waiting if r.handle.state == WAITING]

    def _allocate_for_admission(self, sr: SimRequest, budget: int) -> int:
        """Prefix-cache lookup and block allocation for a waiting request; tokens scheduled or 0."""
        pool, bs = self.pool, self.block_size
        k = pool.hit_blocks(sr.hashes, sr.num_tokens)
        cached = k * bs
        n = min(sr.num_tokens - cached, budget)
        need = -(-(cached + n) // bs) - k
        hits = sr.hashes[:k]
        # hit blocks that are evictable now stop being available once this request holds them
        if need > pool.available - pool.evictable_among(hits):
            return 0
        for h in hits:
            pool.acquire(h)
        pool.take(need)
        sr.owned = list(hits)
        sr.anon = need
        sr.next_block = k
        sr.computed = cached
        sr.prefill_end = sr.num_tokens
        sr.req.prompt_tokens = sr.prompt
        sr.req.computed_tokens = cached
        self._publish(sr, cached + n)
        self.stats.prefill_tokens += sr.num_tokens
        self.stats.cached_tokens += cached
        return n

    def _publish(self, sr: SimRequest, upto_tokens: int) -> None:
        """Blocks become cached as soon as the step that fills them is scheduled (as in vLLM)."""
        full = min(upto_tokens // self.block_size, len(sr.hashes))
        if full > sr.next_block:
            pool = self.pool
            for h in sr.hashes[sr.next_block : full]:
                pool.publish(h)
                sr.owned.append(h)
                sr.anon -= 1
            sr.next_block = full

    def _grow(self, sr: SimRequest, n: int) -> bool:
        """Blocks for ``n`` more tokens of a running request."""
        bs = self.block_size
        upto = sr.computed + n
        need = -(-upto // bs) - len(sr.owned) - sr.anon
        if need > 0:
            if not self.pool.take(need):
                return False
            sr.anon += need
        if sr.next_block < len(sr.hashes) and upto // bs > sr.next_block:  # only chunked prefills publish here
            self._publish(sr, upto)
        return True

    def _schedule_running(self, budget: int, scheduled: list[tuple[SimRequest, int]]) -> tuple[int, bool, int]:
        """vLLM v1's first loop: give tokens to running requests in order, preempting from the back.

        Returns the budget left, whether anything was preempted, and the number of decodes."""
        running = self.running
        bs = self.block_size
        preempted = False
        decodes = 0
        i = 0
        while i < len(running) and budget > 0:
            sr: SimRequest = running[i].handle
            computed = sr.computed
            if computed >= sr.prefill_end:
                # decoding: one token; the common case needs no new block
                if computed < (len(sr.owned) + sr.anon) * bs:
                    scheduled.append((sr, 1))
                    budget -= 1
                    decodes += 1
                    i += 1
                    continue
                n = 1
            else:
                n = min(sr.num_tokens - computed, budget)
            ok = self._grow(sr, n)
            while not ok:
                victim: SimRequest = running.pop().handle
                self._preempt(victim)
                preempted = True
                if victim is sr:
                    break
                ok = self._grow(sr, n)
            if not ok:
                break
            scheduled.append((sr, n))
            budget -= n
            if computed >= sr.prefill_end:
                decodes += 1
            i += 1
        return budget, preempted, decodes

    def _preempt(self, sr: SimRequest) -> None:
        self.pool.release(sr.owned, sr.anon)
        sr.owned = []
        sr.anon = 0
        sr.next_block = 0
        sr.computed = 0
        sr.state = WAITING
        # as the plug-in shows it: a preempted request's prompt is everything it must recompute
        sr.req.prompt_tokens = sr.num_tokens
        sr.req.computed_tokens = 0
        bisect.insort(self.waiting, sr.req, key=_arrival_order)
        self.stats.preemptions += 1

    def _complete(self, scheduled: list[tuple[SimRequest, int]], dt: float) -> None:
        """The step's end: computed tokens advance, finished prefills and decodes sample a token."""
        start, end = self.now, self.now + dt
        finished = False
        out_tokens = 0
        for sr, n in scheduled:
            if sr.computed < sr.prefill_end:
                rel = sr.rel
                if rel.first_prefill_start is None:
                    rel.first_prefill_start = start
                rel.last_prefill_end = end
            sr.computed += n
            req = sr.req
            req.computed_tokens = sr.computed  # vLLM's num_computed_tokens (prompt and output)
            if sr.computed < sr.num_tokens:
                continue
            sr.num_tokens += 1
            req.output_tokens += 1
            out_tokens += 1
            if req.output_tokens >= sr.out_len:
                sr.state = FINISHED
                self.pool.release(sr.owned, sr.anon)
                sr.owned = []
                sr.anon = 0
                finished = True
                rel = sr.rel
                rel.done += 1
                if rel.done == rel.size:
                    rel.finish = end
                    if rel.id in self._watched:
                        self._watched_left -= 1
        self.stats.output_tokens += out_tokens
        if finished:
            self.running = [r for r in self.running if r.handle.state == RUNNING]


def request_id(rel_id: str, index: int) -> str:
    """The id of request ``index`` of relQuery ``rel_id`` in the simulator."""
    return f"{rel_id}#{index}"


def relquery_of(req_id: str) -> str:
    """The relQuery of a request id ``request_id`` made."""
    return req_id.rpartition("#")[0]


def _arrival_order(req: Req) -> int:
    return req.handle.order
