"""What a scheduling policy sees each step and what it answers.

A *host* (the vLLM scheduler plug-in, or the simulator) describes its queues as a ``StepView``
and applies the ``StepPlan`` the policy returns. Nothing here imports vLLM, so both hosts share
one implementation of every policy.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields


@dataclass(slots=True, frozen=True)
class Tenancy:
    """Whom a relQuery runs for, when several tenants share one engine (the HTTP server).

    ``cache_salt`` keeps the tenant's prompts in their own prefix-cache namespace (None: the
    shared one); ``weight`` is its share when tenants compete for the engine."""

    tenant: str
    cache_salt: str | None = None
    weight: float = 1.0
    #: most running requests it may hold while another tenant has work (None: the policy's
    #: default, ``PolicySettings.tenant_step_slowdown``)
    max_running_shared: int | None = None


@dataclass(slots=True, kw_only=True, eq=False)
class RelQueryTags:
    """What the user and the server say of a relQuery, besides its rows: declared once for the
    policy's ``Req`` and the engine's ``RequestMeta`` (relserve/engine/request_meta.py), which
    carries them to the policy across vLLM's engine-core process. No equality of its own: a
    ``Req`` is itself (the host's queues hold it by identity), a ``RequestMeta`` compares whole."""

    #: the user's priority class for the relQuery (``relserve.relquery.RelQuery.priority``, which
    #: states its direction); not the policy's own per-step priority (``StepPlan.priorities``)
    priority: int = 0
    #: the relQuery's deadline on the host clock, if the user gave one
    deadline: float | None = None
    #: the tenant the relQuery runs for ("" : none) and its share of the engine
    tenant: str = ""
    weight: float = 1.0
    #: its tenant's cap on running requests while another tenant has work (None: the default)
    max_running_shared: int | None = None
    #: the call the relQuery runs (a key of its template and options; "" : unknown): relQueries
    #: of one call answer at alike lengths (``PolicySettings.output_history``)
    call_key: str = ""

    def tags(self) -> dict[str, object]:
        """The tags alone, to hand on (``Req(..., **meta.tags())``)."""
        return {f.name: getattr(self, f.name) for f in fields(RelQueryTags)}


@dataclass(slots=True, eq=False)
class Req(RelQueryTags):
    """One request (one row of a relQuery) as the policy sees it (its relQuery's tags
    keyword-only, from ``RelQueryTags``)."""

    req_id: str
    rel_id: str
    #: arrival time of the request's relQuery, on the host clock (seconds)
    arrival: float
    #: number of requests the relQuery had when it arrived, req(R_0)
    rel_size: int
    prompt_tokens: int
    max_tokens: int
    #: output tokens generated so far
    output_tokens: int = 0
    #: prompt tokens already in the KV cache for this request (prefill progress)
    computed_tokens: int = 0
    #: the host's own object for this request (a vLLM ``Request``, a simulator record)
    handle: object = None

    @property
    def remaining_output(self) -> int:
        return max(self.max_tokens - self.output_tokens, 0)


@dataclass(slots=True, frozen=True)
class Limits:
    """The host's batch and memory limits (vLLM's scheduler config and KV cache manager)."""

    #: most prompt tokens one prefill batch may compute (vLLM ``max_num_batched_tokens``)
    max_num_batched_tokens: int
    #: most requests that may be running at once (vLLM ``max_num_seqs``)
    max_num_seqs: int
    #: tokens the whole KV cache holds (the paper's ``cap``)
    kv_capacity_tokens: int
    #: tokens the KV cache can still give out now (free plus evictable cached blocks)
    kv_free_tokens: int
    #: KV cache block size in tokens (prefix caching works in whole blocks)
    block_size: int = 16
    #: blocks the host keeps free when admitting beside running requests (vLLM's watermark)
    watermark_blocks: int = 0

    @property
    def kv_free_blocks(self) -> int:
        return self.kv_free_tokens // self.block_size


class StepKind(enum.Enum):
    IDLE = "idle"
    #: admit ``StepPlan.admit`` and prefill them; running requests wait this step
    PREFILL = "prefill"
    #: decode every running request by one token; nothing is admitted
    DECODE = "decode"
    #: vLLM's own continuous batching: running first, then waiting requests (chunked) within
    #: ``StepPlan.token_budget`` (stock vLLM and Sarathi)
    MIXED = "mixed"


@dataclass(slots=True, frozen=True)
class StepView:
    """The host's state at the start of one scheduling step."""

    now: float
    #: requests not yet admitted, in arrival order
    waiting: Sequence[Req]
    #: admitted requests (prefilled or prefilling, then decoding)
    running: Sequence[Req]
    limits: Limits
    #: prompt tokens of a waiting request that the prefix cache already holds (host lookup)
    cached_tokens: Callable[[Req], int] = lambda req: 0


@dataclass(slots=True)
class StepPlan:
    kind: StepKind
    #: for PREFILL: the waiting requests to admit this step, in order; for MIXED: the order in
    #: which waiting requests may be admitted
    admit: list[Req] = field(default_factory=list)
    #: for MIXED: the step's token budget (Sarathi's chunk size); None keeps the host's own
    token_budget: int | None = None
    #: priority of each relQuery this step (lower runs first); empty for FCFS policies
    priorities: dict[str, float] = field(default_factory=dict)
    #: running requests that sit out this step, keeping their KV blocks (a tenant over its cap
    #: while another tenant has work; see ``tenant_cap``)
    hold: list[Req] = field(default_factory=list)
    #: which ABA case decided the step (for traces and tests): "only-prefill", "only-decode",
    #: "preemption", "internal", "transitional-prefill", "transitional-decode", "fcfs", ...
    reason: str = ""
