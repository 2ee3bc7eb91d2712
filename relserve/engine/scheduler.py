"""The vLLM scheduler plug-in: vLLM's own Scheduler, with each step's shape chosen by a policy.

Installed through vLLM's ``scheduler_cls``; runs in the engine-core process. vLLM's v1 scheduler
has no prefill or decode phase (it first serves ``self.running``, then admits from
``self.waiting``), so a step is shaped by what the base class is allowed to see:

* PREFILL: the running requests are hidden and ``waiting`` holds only the policy's batch;
* DECODE:  ``waiting`` is hidden, so nothing is admitted;
* MIXED:   the base class runs as usual (running first, then waiting), with the policy's
           admission order and token budget (Sarathi's chunk).

Each step calls the base class's ``schedule`` exactly once: that call also hands the workers the
ids of finished and preempted requests, KV block copies and blocks to zero, and advances the step
counter, so a second call in one step would lose what the first one took. Before each call the
running requests are put in the policy's order, so when vLLM must preempt, its victim
(``running[-1]``) is a request of the relQuery the policy ranks last.

On GPUs vLLM schedules the next step while the current one runs (``AsyncScheduler``); vLLM builds
``RelServeScheduler(...)`` and gets the async variant whenever its config turns async scheduling on.

Everything else (KV allocation, prefix caching, preemption, outputs) stays vLLM's.
The host-side control channel is a utility method added to the engine core (``relserve_rpc``).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from collections import Counter, deque
from dataclasses import replace

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.request_queue import create_request_queue
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from relserve.engine.prefix_lookup import CachedPrefixAsk, cached_prefix_tokens
from relserve.engine.request_meta import RequestMeta
from relserve.engine.scheduler_stats import SchedulerStats
from relserve.engine.step_measures import StepGap, StepScale
from relserve.engine.step_record import RelQueryCounts, StepRecord
from relserve.policy import CostModel, Limits, Policy, PolicySettings, Req, StepKind, StepView, make_policy
from relserve.policy.preemption import preemption_order

log = logging.getLogger(__name__)

#: environment variable carrying the plug-in's start-up configuration (JSON) to the engine core.
#: (vLLM's additional_config would do, but it is part of the compile-cache hash.)
CONFIG_ENV = "RELSERVE_SCHEDULER_CONFIG"

_ADMISSIBLE = (RequestStatus.WAITING, RequestStatus.PREEMPTED)


class RelServeScheduler(Scheduler):
    def __new__(cls, *args: object, **kwargs: object):
        # vLLM builds ``scheduler_cls(vllm_config=..., ...)``. With async scheduling on (vLLM's
        # default on GPUs) a plain Scheduler subclass would silently run without it, so the
        # class vLLM is given picks its async variant from that same config.
        if cls is RelServeScheduler:
            vllm_config = kwargs["vllm_config"] if "vllm_config" in kwargs else args[0]
            if vllm_config.scheduler_config.async_scheduling:
                cls = RelServeAsyncScheduler
        return super().__new__(cls)

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        log.info(
            "relserve scheduler: %s (async scheduling %s)",
            type(self).__name__,
            "on" if isinstance(self, AsyncScheduler) else "off",
        )
        cfg = json.loads(os.environ.get(CONFIG_ENV, "{}"))
        self._set_policy(cfg.get("policy", "relserve"), cfg.get("cost_model"), cfg.get("settings"))
        self._reqs: dict[str, Req] = {}
        self._step_log: deque[StepRecord] = deque(maxlen=cfg.get("step_log_size", 20000))
        # number of the last logged step (never reset: ``since`` reads stay valid across clears)
        self._step_seq = 0
        # step-log entries of scheduled steps, by id of their output (async: two in flight)
        self._pending_steps: dict[int, StepRecord] = {}
        # the last step's PREFILL batch did not fit beside the running requests: decode next
        self._decode_next = False
        self._preemptions = 0
        self._kv_capacity = self.kv_cache_config.num_blocks * self.block_size
        # rel_id -> [requests added so far, monotonic time the first one was added]
        self._arrived: dict[str, list] = {}
        self._assembly_timeout = float(cfg.get("assembly_timeout_s", 0.25))
        # the host's seconds a busy step takes besides its model run and its policy's decision
        # (vLLM's scheduling, output handling): the estimates add them to every step they replay
        # when the cost model was fitted on model runs alone (relserve/estimate/timing.py)
        self._last_step: tuple[float, float] | None = None
        self._step_gap = StepGap()
        # the busy steps' model runs against the policy's cost model: EXPLAIN's estimates scale
        # the cost model by it, so a preset or an old calibration does not mislead them
        self._step_scale = StepScale()
        _install_rpc()

    @property
    def relserve_policy(self) -> Policy:
        """The policy that decides each step (vLLM's own ``policy`` attribute is its queue order)."""
        return self._policy

    # ----------------------------------------------------------------- control channel

    def _set_policy(self, name: str, cost: dict | None, settings: dict | None) -> None:
        self._policy = make_policy(
            name,
            CostModel(**cost) if cost else None,
            PolicySettings(**settings) if settings else None,
        )
        self._step_scale = StepScale()  # measured against the cost model it now has

    def relserve_rpc(self, command: str, payload: dict) -> dict:
        if command == "set_policy":
            if self.running or self.waiting:
                raise RuntimeError("cannot change the policy while requests are in the engine")
            self._set_policy(payload["policy"], payload.get("cost_model"), payload.get("settings"))
            return {"policy": self._policy.name}
        if command == "stats":
            since = payload.get("since", 0)
            steps = [s for s in self._step_log if s.seq > since] if payload.get("steps") else []
            if payload.get("clear"):
                self._step_log.clear()
            p = self._policy
            return SchedulerStats(
                policy=p.name,
                steps=p.steps,
                dpu_seconds=p.dpu_seconds,
                aba_seconds=p.aba_seconds,
                step_log=steps,
                kv_capacity_tokens=self._kv_capacity,
                preemptions=self._preemptions,
                last_step=self._step_seq,
                block_size=self.block_size,
                scheduler=type(self).__name__,
                async_scheduling=isinstance(self, AsyncScheduler),
            ).model_dump()
        if command == "queue":
            # every request in the engine, for the estimates' replay of its queue (relserve/estimate/)
            return {"requests": [
                [r.request_id, r.status == RequestStatus.RUNNING, r.num_prompt_tokens, r.num_computed_tokens,
                 r.num_output_tokens, r.max_tokens]
                for r in itertools.chain(self.running, self._all_waiting())
            ], "step_gap_s": self._step_gap.seconds, "step_scale": self._step_scale.ratio}
        if command == "reset_stats":
            p = self._policy
            p.dpu_seconds = p.aba_seconds = 0.0
            p.steps = 0
            self._preemptions = 0
            self._step_log.clear()
            return {}
        raise ValueError(f"unknown relserve rpc command {command!r}")

    # ----------------------------------------------------------------- the policy's view

    def _req(self, request: Request) -> Req:
        req = self._reqs.get(request.request_id)
        if req is None:
            sp = request.sampling_params
            meta = RequestMeta.from_extra_args(sp.extra_args if sp else None, request.request_id, time.monotonic())
            req = Req(
                req_id=request.request_id,
                rel_id=meta.rel_id,
                arrival=meta.arrival,
                rel_size=meta.rel_size,
                prompt_tokens=request.num_prompt_tokens,
                max_tokens=request.max_tokens,
                handle=request,
                **meta.tags(),
            )
            self._reqs[request.request_id] = req
        # A preempted request recomputes its output so far as part of its prompt.
        req.prompt_tokens = request.num_prompt_tokens if request.status == RequestStatus.RUNNING else request.num_tokens
        req.output_tokens = request.num_output_tokens
        req.computed_tokens = request.num_computed_tokens
        return req

    def add_request(self, request: Request) -> None:
        super().add_request(request)
        req = self._req(request)
        entry = self._arrived.get(req.rel_id)
        if entry is None:
            self._arrived[req.rel_id] = [1, time.monotonic()]
        else:
            entry[0] += 1

    def _assembled(self, req: Req, now: float) -> bool:
        """Whether all of the relQuery's requests have reached the scheduler.

        The front end adds a relQuery's rows one request at a time; scheduling the first rows
        before the rest arrive would plan (and batch) a fraction of the relQuery. A relQuery
        whose rows stop coming (a cancelled submission) is released after a short timeout.
        """
        entry = self._arrived.get(req.rel_id)
        return entry is None or entry[0] >= req.rel_size or now - entry[1] > self._assembly_timeout

    def _admissible(self, request: Request) -> bool:
        if request.status in _ADMISSIBLE:
            return True
        # The base class promotes a request whose grammar has compiled only when it looks at it;
        # a PREFILL step shows it just the chosen batch, so promote here.
        return self._is_blocked_waiting_status(request.status) and self._handle_blocked_waiting_request(request)

    def _cached_tokens(self, req: Req) -> int:
        request: Request = req.handle  # type: ignore[assignment]
        if request.num_computed_tokens:
            return request.num_computed_tokens
        return self.kv_cache_manager.get_computed_blocks(request)[1]

    def _view(self) -> StepView:
        now = time.monotonic()
        # vLLM admits from kv_holding_waiting (requests that hold KV blocks) before waiting.
        waiting = [self._req(r) for r in self._all_waiting() if self._admissible(r)]
        waiting = [r for r in waiting if self._assembled(r, now)]
        waiting.sort(key=lambda r: r.arrival)
        running = [self._req(r) for r in self.running]
        if len(self._reqs) > 2 * (len(self.waiting) + len(self.kv_holding_waiting) + len(self.running)) + 256:
            live = {r.request_id for r in self._all_waiting()} | {r.request_id for r in self.running}
            self._reqs = {k: v for k, v in self._reqs.items() if k in live}
            rels = {r.rel_id for r in self._reqs.values()}
            self._arrived = {k: v for k, v in self._arrived.items() if k in rels}
        free = self.kv_cache_manager.block_pool.get_num_free_blocks() * self.block_size
        limits = Limits(
            max_num_batched_tokens=self.scheduler_config.max_num_batched_tokens,
            max_num_seqs=self.max_num_running_reqs,
            kv_capacity_tokens=self._kv_capacity,
            kv_free_tokens=free,
            block_size=self.block_size,
            watermark_blocks=self.kv_cache_manager.watermark_blocks,
        )
        return StepView(now, waiting, running, limits, self._cached_tokens)

    # ----------------------------------------------------------------- one step

    def _all_waiting(self):
        return itertools.chain(self.kv_holding_waiting, self.waiting)

    def schedule(self, *args: object, **kwargs: object):
        entered = time.monotonic()
        if self._last_step is not None:
            started, ran = self._last_step
            self._step_gap.add(entered - started - ran)
            self._last_step = None
        t0 = time.perf_counter()
        entered = time.monotonic()
        view = self._view()
        plan = self._policy.schedule(view)
        t_policy = time.perf_counter() - t0
        kind, reason = plan.kind, plan.reason
        if self._decode_next and kind is StepKind.PREFILL:
            kind, reason = StepKind.DECODE, "kv-blocked-decode"
        self._decode_next = False
        if plan.priorities and len(self.running) > 1:
            self.running = preemption_order(self.running, view.running, plan.priorities)
        admit = [r.handle for r in plan.admit]
        # held requests (a tenant over its cap, a relQuery ranked behind: decode_subset) keep
        # their KV blocks but sit out this step
        held = [r.handle for r in plan.hold]
        if held:
            ids = {id(h) for h in held}
            self.running = [r for r in self.running if id(r) not in ids]
        try:
            out = self._dispatch(kind, admit, plan.token_budget, *args, **kwargs)
        finally:
            if held:
                self.running = self.running + held
        if kind is StepKind.PREFILL and out.total_num_scheduled_tokens == 0 and self.running:
            reason = "kv-blocked"
        step = self._describe(out, kind.value, reason, t_policy)
        step = replace(
            step,
            entered=entered,
            # the whole scheduling call (the policy, the view, vLLM's own scheduling), which the
            # step's ``duration`` (model run and output update) does not include
            schedule_s=step.start - entered,
            planned_admit=len(admit),
            held=len(held),
            waiting=len(self.waiting) + len(self.kv_holding_waiting),
            running=len(self.running),
            free_blocks=self.kv_cache_manager.block_pool.get_num_free_blocks(),
            relqueries=self._per_relquery(view, plan.hold, out),
        )
        if out.total_num_scheduled_tokens:
            self._pending_steps[id(out)] = step
        return out

    def _per_relquery(self, view: StepView, held: list[Req], out) -> RelQueryCounts:
        """Which relQueries the step served, and how (``SchedulerStep``): the order of these is
        what tests and traces read the policy's decisions from."""
        prefilled: Counter[str] = Counter()
        decoded: Counter[str] = Counter()
        for req_id, n in out.num_scheduled_tokens.items():
            request = self.requests.get(req_id)
            req = self._reqs.get(req_id)
            rel = req.rel_id if req is not None else ""
            if request is not None and request.num_computed_tokens - n < request.num_prompt_tokens:
                prefilled[rel] += 1
            else:
                decoded[rel] += 1
        preempted = Counter(self._reqs[r].rel_id for r in (out.preempted_req_ids or ()) if r in self._reqs)
        starved = getattr(getattr(self._policy, "dpu", None), "starved", ())
        return RelQueryCounts(
            prefilled=dict(prefilled),
            decoded=dict(decoded),
            held=dict(Counter(r.rel_id for r in held)),
            preempted=dict(preempted),
            waiting=dict(Counter(r.rel_id for r in view.waiting)),
            starved=tuple(sorted(starved)),
        )

    def _dispatch(self, kind: StepKind, admit: list[Request], budget: int | None, *args: object, **kwargs: object):
        if kind is StepKind.PREFILL:
            out = self._schedule_waiting(admit, True, None, *args, **kwargs)
            if out.total_num_scheduled_tokens == 0 and self.running:
                # The batch did not fit after all (KV allocation). This empty output still goes to
                # the workers (it carries finished ids and the like); the next step decodes.
                self._decode_next = True
            return out
        if kind is StepKind.MIXED:
            return self._schedule_waiting(admit, False, budget, *args, **kwargs)
        return self._schedule_decode(*args, **kwargs)  # DECODE, or IDLE: nothing may be admitted

    def _preempt_request(self, request: Request, *args: object, **kwargs: object) -> None:
        self._preemptions += 1
        super()._preempt_request(request, *args, **kwargs)

    def _hide_waiting(self) -> tuple:
        hidden = self.waiting, self.kv_holding_waiting
        self.waiting = create_request_queue(self.policy)
        self.kv_holding_waiting = create_request_queue(self.policy)
        return hidden

    def _restore_waiting(self, hidden: tuple, rest: list[Request] | None) -> None:
        """Put back the waiting queues hidden from the base class.

        What the base class left in the stand-in queues (not admitted, or preempted by it) goes in
        front, each request in the queue vLLM keeps it in. ``rest``: the hidden requests that were
        not shown (None: all of them were hidden, and the hidden queues are intact).
        """
        leftover = list(self.kv_holding_waiting) + list(self.waiting)
        self.waiting, self.kv_holding_waiting = hidden
        if rest is None:
            for queue, holds in ((self.waiting, False), (self.kv_holding_waiting, True)):
                mine = [r for r in leftover if self._holds_kv_blocks(r) == holds]
                if mine:
                    queue.prepend_requests(mine)
            return
        queues = create_request_queue(self.policy), create_request_queue(self.policy)
        for r in leftover + rest:
            queues[self._holds_kv_blocks(r)].add_request(r)
        self.waiting, self.kv_holding_waiting = queues

    def _schedule_waiting(self, batch: list[Request], hide_running: bool, budget: int | None, *args: object, **kwargs: object):
        """Run the base scheduler with the waiting queues holding just ``batch``, in that order."""
        hidden_running = self.running
        chosen = set(batch)
        rest = [r for r in self._all_waiting() if r not in chosen]
        hidden = self._hide_waiting()
        if hide_running:
            self.running = []
        for r in batch:
            (self.kv_holding_waiting if self._holds_kv_blocks(r) else self.waiting).add_request(r)
        cfg = self.scheduler_config
        saved_budget = self.max_num_scheduled_tokens, cfg.max_num_batched_tokens
        if budget is not None:
            self.max_num_scheduled_tokens = cfg.max_num_batched_tokens = min(budget, saved_budget[0])
        kv = self.kv_cache_manager
        if hide_running and hidden_running:
            # vLLM keeps its watermark free when admitting beside running requests; they are only
            # hidden, so the first admission of the batch must keep it too.
            allocate = kv.allocate_slots
            kv.allocate_slots = lambda *a, **kw: allocate(*a, **{**kw, "has_scheduled_reqs": True})
        try:
            out = super().schedule(*args, **kwargs)
        finally:
            kv.__dict__.pop("allocate_slots", None)
            self.max_num_scheduled_tokens, cfg.max_num_batched_tokens = saved_budget
            if hide_running:
                self.running = hidden_running + self.running
            self._restore_waiting(hidden, rest)
        return out

    def _schedule_decode(self, *args: object, **kwargs: object):
        hidden = self._hide_waiting()
        try:
            out = super().schedule(*args, **kwargs)
        finally:
            self._restore_waiting(hidden, None)  # requests vLLM preempted to make room go in front
        return out

    # ----------------------------------------------------------------- step log

    def _describe(self, out, kind: str, reason: str, t_policy: float) -> StepRecord:
        prefill_tokens = 0
        prefill_reqs = 0
        prefill_pairs = 0.0
        decode_reqs = 0
        decode_context = 0
        for req_id, n in out.num_scheduled_tokens.items():
            request = self.requests.get(req_id)
            # the base class has already counted this step's tokens as computed
            before = request.num_computed_tokens - n if request is not None else 0
            if request is not None and before < request.num_prompt_tokens:
                prefill_tokens += n
                prefill_reqs += 1
                prefill_pairs += n * (before + (n + 1) / 2)
            else:
                decode_reqs += 1
                decode_context += before + 1
        return StepRecord(
            kind=kind,
            reason=reason,
            prefill_tokens=prefill_tokens,
            prefill_reqs=prefill_reqs,
            prefill_pairs=prefill_pairs,
            decode_reqs=decode_reqs,
            decode_context=decode_context,
            policy_s=t_policy,
            start=time.monotonic(),
        )

    def update_from_output(self, scheduler_output, model_runner_output):
        step = self._pending_steps.pop(id(scheduler_output), None)
        if step is not None:
            self._step_seq += 1
            step = replace(step, duration=time.monotonic() - step.start, seq=self._step_seq)
            self._step_log.append(step)
            if step.works:
                predicted = self._policy.cost.mixed(step.prefill_tokens, step.decode_reqs, step.prefill_pairs,
                                                    step.decode_context)
                self._step_scale.add(step.duration, predicted)
        out = super().update_from_output(scheduler_output, model_runner_output)
        if step is not None:
            # from this step's scheduling call to the next one's, less its model run and its
            # policy's decision (the replay takes none)
            self._last_step = (step.entered + step.policy_s, step.duration)
        return out


class RelServeAsyncScheduler(RelServeScheduler, AsyncScheduler):
    """The plug-in over vLLM's AsyncScheduler (MRO: the plug-in, then AsyncScheduler, then Scheduler)."""


def _install_rpc() -> None:
    """Give the engine core a utility method that forwards to this scheduler.

    ``AsyncLLM.engine_core.call_utility_async("relserve_rpc", command, payload_json)`` reaches it.
    """
    from vllm.v1.engine.core import EngineCore

    if getattr(EngineCore, "relserve_rpc", None) is not None:
        return

    def relserve_rpc(self, command: str, payload_json: str) -> str:
        scheduler = self.scheduler
        if not isinstance(scheduler, RelServeScheduler):
            raise RuntimeError("the engine does not run the relserve scheduler")
        if command == "cached_prefix":
            # hashed by the engine core's own block hasher, as its requests are
            ask = CachedPrefixAsk.model_validate_json(payload_json)
            return cached_prefix_tokens(scheduler.kv_cache_manager, self.request_block_hasher, ask).model_dump_json()
        return json.dumps(scheduler.relserve_rpc(command, json.loads(payload_json or "{}")))

    EngineCore.relserve_rpc = relserve_rpc  # type: ignore[attr-defined]
