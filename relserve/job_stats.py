"""``JobStats``: a relQuery job's figures as the server sends them and the client reads them.

One pydantic model on both sides of HTTP: the server's job (``relserve.server.jobs.Job.stats``)
fills it, its JSON is the ``stats`` of a job's description, a stream's ``done`` event and
``/result``, and the client (``relserve.client``) parses that back. A figure that does not apply
(no engine run, no estimate, no budget) is not sent at all, so ``to_json`` leaves out what was
never set. Kept outside ``relserve.server`` so the client does not import the server.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict


class JobStats(BaseModel):
    # a newer server may send figures this client does not know: kept, not refused
    model_config = ConfigDict(extra="allow")

    rows: int = 0
    errors: int = 0
    #: rows answered from the result cache
    cached_rows: int = 0
    #: rows the engine ran (a duplicate row takes its twin's answer)
    engine_rows: int = 0
    #: the job's own latency (submission to its last row)
    latency_s: float = 0.0
    # -- the engine's relQuery (``RelQueryStats``), when one ran
    waiting_s: float | None = None
    core_s: float | None = None
    tail_s: float | None = None
    engine_latency_s: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    prefix_hit_rate: float | None = None
    policy: str | None = None
    #: whether it finished within its ``deadline_s`` (only with a deadline, once done)
    deadline_met: bool | None = None
    #: EXPLAIN ANALYZE of the adaptive label method (its layout, the estimated prior)
    labels: str | None = None
    #: seconds the label method's first pass took before the rows were sent (only when one ran)
    first_pass_s: float | None = None
    #: the answers are close to guesses (the label method's warning)
    warning: str | None = None
    #: EXPLAIN ANALYZE of a model cascade (``CascadeReport.as_dict``, or why it was skipped)
    cascade: dict[str, object] | None = None
    #: issue 47: the estimate the job started with
    estimated_s: float | None = None
    estimated_prompt_tokens: int | None = None
    #: issue 47: the engine tokens spent against its budgets
    budget_tokens_spent: int | None = None
    budget_prompt_tokens_spent: int | None = None

    def to_json(self) -> dict[str, object]:
        """The figures as the server sends them: the ones that were set, in this order."""
        return self.model_dump(exclude_unset=True)

    @classmethod
    def from_json(cls, sent: Mapping[str, object] | None) -> JobStats:
        """The figures as the server sent them (an old server's unknown figures are kept too)."""
        return cls.model_validate(dict(sent or {}))

    # Read as a mapping too, as callers always have (``result.stats["rows"]``): only the
    # figures the server sent are there.
    def __getitem__(self, name: str) -> object:
        if name not in self:
            raise KeyError(name)
        return getattr(self, name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self.model_fields_set or name in (self.model_extra or {}))

    def get(self, name: str, default: object = None) -> object:
        return self[name] if name in self else default
