"""What a relQuery returns: one ``RowResult`` per input row, and the relQuery's statistics.

``RowResult`` is the one row type from the engine to the client: the engine fills the text and
the token counts, the executor (``relserve.planner.executor``) the value in the function's type
and ``cached``, the server sends ``as_dict()`` and the client reads it back with ``from_dict``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from relserve.token_counts import TokenCounts

#: the fields a row has on the wire (the server's JSON), in the order sent
WIRE_FIELDS = ("index", "value", "text", "error", "cached", "prompt_tokens", "output_tokens", "cached_tokens", "finish_reason",
               "answered_by", "confidence")


@dataclass(slots=True)
class RowResult:
    #: position of the row in the relQuery's input (after fan-out: in the call's input)
    index: int
    text: str | None = None
    error: str | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0
    #: prompt tokens served from the engine's prefix cache
    cached_tokens: int = 0
    finish_reason: str | None = None
    #: label scoring (``RelQuery(score_labels=True)``): each label's log-probability, normalised
    #: over the labels, before any calibration
    label_logprobs: dict[str, float] | None = None
    #: the answer in the call's type (llm_filter: bool); None when the row failed or for a bare
    #: relQuery, whose answer is ``text``
    value: Any = None
    #: answered from the result cache (the engine did not run it)
    cached: bool = False
    #: label scoring: the log of the labels' total score before normalising (how likely the model
    #: is to answer with one of them at all)
    label_mass: float | None = None
    #: who gave the answer when it was not the LLM: "proxy" (a cascade's light classifier,
    #: relserve/cascade/); None: the LLM (or the result cache, see ``cached``)
    answered_by: str | None = None
    #: the probability of the answer given: the label method's for a closed question (the
    #: adaptive method's posterior, or the normalised label scores), the proxy's for the rows a
    #: cascade answered; None for free text, JSON and decoded labels
    confidence: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_dict(self) -> dict[str, object]:
        """The row as the server sends it."""
        return {name: getattr(self, name) for name in WIRE_FIELDS}

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> RowResult:
        """A row as the server sent it (unknown keys are left out)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def in_input_order(rows: Iterable[RowResult], total: int) -> list[RowResult]:
    """``total`` rows in input order from rows that arrived in any order; a row that never
    arrived (the relQuery ended early) gets the error "no answer"."""
    got = {r.index: r for r in rows}
    return [got.get(i) or RowResult(i, error="no answer") for i in range(total)]


@dataclass(slots=True)
class RelQueryStats(TokenCounts):
    """A finished relQuery's latency breakdown (paper Eq. 2, in seconds) and its tokens
    (``TokenCounts``: prompt_tokens, output_tokens, cached_tokens, prefix_hit_rate)."""

    rel_id: str
    num_rows: int
    num_errors: int = 0
    #: arrival to the start of its first prefill batch
    waiting_s: float = 0.0
    #: first prefill start to the end of its last prefill batch
    core_s: float = 0.0
    #: end of the last prefill batch to the end of its last decode batch
    tail_s: float = 0.0
    #: arrival to the last row's result
    latency_s: float = 0.0
    policy: str = ""
    #: engine replicas that ran its rows (``relserve.Cluster``; 1 on one engine)
    replicas: int = 1
    #: rows sent again to another replica because the first one died or stopped answering
    redispatched_rows: int = 0

    def as_dict(self) -> dict[str, object]:
        d = asdict(self)
        # in the order the stats have always been sent: the tokens right after the times
        tokens = {f.name: d.pop(f.name) for f in fields(TokenCounts)}
        at = list(d).index("latency_s") + 1
        items = list(d.items())
        return dict(items[:at]) | tokens | dict(items[at:]) | {"prefix_hit_rate": self.prefix_hit_rate}


class RowsView:
    """Reading a result's rows, the same for the engine's result and the server's (client)."""

    rows: list[RowResult]

    @property
    def texts(self) -> list[str | None]:
        return [r.text for r in self.rows]

    @property
    def values(self) -> list[Any]:
        return [r.value for r in self.rows]

    @property
    def errors(self) -> list[str | None]:
        return [r.error for r in self.rows]

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def __getitem__(self, i: int) -> RowResult:
        return self.rows[i]


@dataclass
class RelQueryResult(RowsView):
    rows: list[RowResult]
    stats: RelQueryStats
    cancelled: bool = False
    extra: dict = field(default_factory=dict)
