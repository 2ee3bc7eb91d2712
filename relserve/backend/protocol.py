"""``Backend``: where a relQuery runs. ``relserve.Engine`` (one embedded vLLM) and
``relserve.Cluster`` (engine replicas on Ray) implement it; every surface (SQL, dataframes,
operators, the HTTP server) takes one.

Modelled on vLLM's ``v1/core/sched/interface.py``: the methods callers use, nothing more.
The protocol is structural, so a test double with these members is a backend too.
"""

from __future__ import annotations

from typing import Any, Protocol

from relserve.engine.handle import RelQueryHandle
from relserve.engine.scheduler_stats import ClusterSchedulerStats, SchedulerStats
from relserve.engine.settings import EngineSettings
from relserve.policy import CostModel, PolicySettings
from relserve.relquery import RelQuery
from relserve.results import RelQueryResult


class Backend(Protocol):
    """An engine (or engines) serving relQueries."""

    #: the served model's name, as the result cache keys answers
    model_id: str
    #: the scheduling policy it runs ("relserve", "fcfs", "vllm", ...)
    policy: str
    #: tokens per KV block (prefix caching shares whole blocks)
    block_size: int
    #: the model's context, prompt plus answer, in tokens
    max_model_len: int
    #: tokens of KV cache it holds (per replica), None when it cannot tell
    kv_capacity_tokens: int | None
    #: step-time model the planner and the policies estimate with
    cost_model: CostModel
    #: the model's tokenizer (a ``transformers`` tokenizer)
    tokenizer: Any
    #: the settings it was started with
    settings: EngineSettings
    #: whether relserve's scheduler plug-in runs (it carries the policy controls and stats)
    uses_plugin: bool

    @property
    def alive(self) -> bool:
        """Whether it can still serve.

        Returns:
            False once closed or once its processes died.
        """
        ...

    @property
    def dead_reason(self) -> str | None:
        """Why it can no longer serve, or None while it can."""
        ...

    def submit(self, rq: RelQuery) -> RelQueryHandle:
        """Start a relQuery; returns at once.

        Args:
            rq: the relQuery (template, rows, sampling options).

        Returns:
            A handle on its rows as they finish, and on the whole result.
        """
        ...

    def run(self, rq: RelQuery, timeout: float | None = None) -> RelQueryResult:
        """``submit`` and wait.

        Args:
            rq: the relQuery.
            timeout: seconds to wait at most (None: no limit).

        Returns:
            Every row in input order, with the relQuery's stats.
        """
        ...

    def warm_prefix(self, text: str = "", system: str | None = None) -> int:
        """Prefill the chat template's prefix plus ``text`` so its KV blocks are cached.

        Args:
            text: the shared start of the coming prompts.
            system: their system message.

        Returns:
            The number of prompt tokens warmed (0: shorter than a block, nothing to cache).
        """
        ...

    def prompt_token_ids(self, text: str, system: str | None = None) -> list[int]:
        """The token ids the model sees for a user prompt (chat template applied).

        Args:
            text: the user prompt.
            system: its system message.

        Returns:
            The token ids.
        """
        ...

    def scheduler_stats(self, steps: bool = False, clear: bool = False) -> SchedulerStats | ClusterSchedulerStats:
        """The scheduler's counters (plug-in policies only; a cluster: each replica's).

        Args:
            steps: include the per-step log.
            clear: empty the log after reading it.

        Returns:
            Policy overhead, step count and, if asked, the steps.
        """
        ...

    def set_policy(self, policy: str, settings: PolicySettings | None = None, cost_model: CostModel | None = None, timeout: float = 600) -> None:
        """Switch the scheduling policy once idle (plug-in policies only).

        Args:
            policy: the new policy's name.
            settings: its settings (None: the current ones).
            cost_model: a new cost model (None: keep).
            timeout: seconds to wait for idleness.
        """
        ...

    def reset_prefix_cache(self) -> None:
        """Drop the prefix cache (so a benchmark run starts cold)."""
        ...

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no relQuery runs.

        Returns:
            False if ``timeout`` passed first.
        """
        ...

    def close(self) -> None:
        """Stop it and its processes; unfinished relQueries are cancelled."""
        ...
