"""What ``Engine`` and the Ray ``Cluster`` share: reading their settings (model, policy, cost
model, limits), the tokenizer and chat template, the ``run``/``map`` shortcuts, and the result of
a finished relQuery with its latency breakdown (paper Eq. 2)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from relserve.calibration import machine_cost_model
from relserve.engine.chat_template import ChatPrompter, ChatTokenizing
from relserve.engine.handle import RelQueryHandle
from relserve.engine.settings import EngineSettings
from relserve.model import resolve_model
from relserve.policy import CostModel, policy_class
from relserve.relquery import RelQuery
from relserve.results import RelQueryResult, RelQueryStats
from relserve.token_counts import TokenCounts

#: (first scheduled, last prefill done, last token) of a row or a part, on one clock
Span = tuple[float, float, float]


class BackendBase(ChatTokenizing):
    """The setup and surface ``Engine`` and ``Cluster`` have in common."""

    _closed: bool

    def _configure(self, model: str | None, policy: str | None, options: dict[str, object]) -> EngineSettings:
        """Read the settings; an unknown policy or model fails here, before anything starts."""
        if model is not None:
            options["model"] = model
        if policy is not None:
            options["policy"] = policy
        self.settings = s = EngineSettings(**options)
        policy_class(s.policy)
        spec = resolve_model(s.model)
        self.model_id = spec.model_id
        self.model_path = spec.path
        self.policy = s.policy
        self.cost_model: CostModel = s.cost_model or machine_cost_model(self.model_id, s.resolved_dtype)
        self.block_size = s.block_size
        self.max_model_len = s.max_model_len
        return s

    def _load_tokenizer(self) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self._prompters: dict[str | None, ChatPrompter] = {None: ChatPrompter(self.tokenizer)}

    @property
    def dead_reason(self) -> str | None:
        raise NotImplementedError

    @property
    def alive(self) -> bool:
        return not self._closed and self.dead_reason is None

    def submit(self, rq: RelQuery) -> RelQueryHandle:
        raise NotImplementedError

    def run(self, rq: RelQuery, timeout: float | None = None) -> RelQueryResult:
        """``submit`` and wait for every row."""
        return self.submit(rq).result(timeout)

    def map(self, template: str, rows: object, **options: object) -> list[str | None]:
        """Shortcut: the answer text of every row, in row order."""
        return self.run(RelQuery(template, rows, **options)).texts

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def finished_result(handle: RelQueryHandle, policy: str, arrival: float, spans: Sequence[Span]) -> RelQueryResult:
    """The result of a relQuery whose rows are all in: rows in input order, token totals, and
    waiting / core / tail (Eq. 2) from the ``spans`` of its rows or parts (on the clock of
    ``arrival``)."""
    rows = handle.rows_in_order()
    tokens = TokenCounts.total(rows)
    stats = RelQueryStats(rel_id=handle.rel_id, num_rows=len(rows), policy=policy, prompt_tokens=tokens.prompt_tokens,
                          output_tokens=tokens.output_tokens, cached_tokens=tokens.cached_tokens)
    stats.latency_s = time.monotonic() - arrival
    stats.num_errors = sum(r.error is not None for r in rows)
    if spans:
        start = min(s[0] for s in spans)
        last_prefill = max(s[1] for s in spans)
        end = max(s[2] for s in spans)
        stats.waiting_s = max(start - arrival, 0.0)
        stats.core_s = max(last_prefill - start, 0.0)
        stats.tail_s = max(end - last_prefill, 0.0)
    return RelQueryResult(rows, stats, cancelled=handle.cancelled)
