"""When a call runs as a cascade, and how many of its rows the LLM answers first.

A cascade pays when the rows the proxy answers save more LLM time than the sample, the audit and
the embedding cost. The LLM answers ``train + audit`` rows whatever happens, so a relQuery must
be several times that size before a proxy can save anything: below ``MIN_ROWS`` distinct prompts
the call runs exactly as it does without the option (BigQuery's optimized mode asks for about
3,000 rows too). Sizes grow with the relQuery up to a cap: past it, more training rows barely
help a linear proxy and a larger audit barely tightens its bound, while each costs an LLM row.
"""

from __future__ import annotations

from dataclasses import dataclass

from relserve.cascade.targets import DEFAULT_FAILURE, Targets

#: fewer distinct prompts to run than this: no cascade (every row to the LLM, as without it)
MIN_ROWS = 3000
#: training rows: this share of the prompts, within [MIN_TRAIN, MAX_TRAIN]
TRAIN_SHARE, MIN_TRAIN, MAX_TRAIN = 0.03, 300, 600
#: audit rows: this share of the prompts, within [MIN_AUDIT, MAX_AUDIT] (half chooses the
#: threshold, half estimates the agreement: threshold.py). 1,000 rows tighten the bound by a
#: third of a point of agreement over 800, 400 LLM rows that a 20,000-row relQuery pays
AUDIT_SHARE, MIN_AUDIT, MAX_AUDIT = 0.04, 600, 1000
#: every statement about the agreement holds with this probability (1 - delta) unless the call
#: names its own failure probability (``cascade_failure``)
CONFIDENCE = 1.0 - DEFAULT_FAILURE
#: recall and precision targets (relserve/cascade/audit.py): the rows drawn from the proxy's "no"
#: candidates are at most this share of the prompts (the audit sizes them from the proxy's
#: scores; more than this would cost about what the proxy saves)
TARGET_DRAW_SHARE = 0.15


@dataclass(frozen=True)
class CascadePlan:
    """Whether a relQuery of a call runs as a cascade, and with how many sample rows."""

    #: the agreement target asked for (None: not asked)
    target: float | None
    #: prompts to run
    rows: int
    #: None when it applies, else why not (EXPLAIN says it)
    skipped: str | None
    train: int = 0
    #: the agreement's audit rows; under recall / precision targets the most rows drawn from the
    #: proxy's "no" candidates (the audit itself is sized from the proxy's scores)
    audit: int = 0
    #: a filter's recall and precision targets (None: not asked; either one makes the cascade
    #: a targets cascade, which the agreement target then does not steer)
    recall: float | None = None
    precision: float | None = None
    #: the probability that the cascade misses its target
    failure: float = DEFAULT_FAILURE

    @property
    def applies(self) -> bool:
        return self.skipped is None

    @property
    def on(self) -> bool:
        """Whether the call asked for a cascade (applied or not)."""
        return self.target is not None or self.targets is not None

    @property
    def targets(self) -> Targets | None:
        """The recall / precision targets, None for an agreement cascade."""
        if self.recall is None and self.precision is None:
            return None
        return Targets(self.recall, self.precision, self.failure)

    @property
    def confidence(self) -> float:
        return 1.0 - self.failure

    def _what(self) -> str:
        if self.targets is not None:
            return self.targets.describe()
        return f"target {self.target:g}"

    def describe(self) -> str:
        if not self.on:
            return "off"
        if self.skipped:
            return f"{self._what()}: not applied ({self.skipped})"
        if self.targets is not None:
            ignored = f" (the agreement target {self.target:g} does not apply)" if self.target is not None else ""
            return (f"{self._what()}{ignored}: the LLM answers {self.train:,} training rows first, then an audit "
                    f"sampled by the proxy's score (at most {self.audit:,} drawn from its 'no' candidates); the proxy "
                    f"answers the rows its zones hold, the rest go to the LLM")
        return (f"target {self.target:g}: the LLM answers {self.train:,} training + {self.audit:,} audit rows first; "
                f"a proxy answers the rows it is sure of, the rest go to the LLM")


def plan(call, rows: int) -> CascadePlan:
    """The cascade of a relQuery of ``rows`` distinct prompts of ``call`` (an ``LLMCall``)."""
    o = call.options
    failure = o.cascade_failure if o.cascade_failure is not None else DEFAULT_FAILURE
    asked = dict(target=o.cascade, rows=rows, recall=o.cascade_recall, precision=o.cascade_precision, failure=failure)
    if o.cascade is None and o.cascade_recall is None and o.cascade_precision is None:
        return CascadePlan(**asked, skipped="off")
    if call.function.kind not in ("filter", "classify"):
        return CascadePlan(**asked, skipped=f"{call.function.name} answers free text; only llm_filter and llm_classify "
                                            f"cascade")
    if not call.deterministic:
        return CascadePlan(**asked, skipped="temperature > 0: the LLM's answers are sampled, there is no one answer "
                                            "to agree with")
    if rows < MIN_ROWS:
        return CascadePlan(**asked, skipped=f"{rows:,} prompts to run, under the {MIN_ROWS:,} where a proxy pays")
    train = _clamp(TRAIN_SHARE * rows, MIN_TRAIN, MAX_TRAIN)
    if o.cascade_recall is not None or o.cascade_precision is not None:
        return CascadePlan(**asked, skipped=None, train=train, audit=max(MIN_AUDIT, round(TARGET_DRAW_SHARE * rows)))
    audit = _clamp(AUDIT_SHARE * rows, MIN_AUDIT, MAX_AUDIT)
    return CascadePlan(**asked, skipped=None, train=train, audit=audit)


def _clamp(x: float, low: int, high: int) -> int:
    return int(min(high, max(low, round(x))))
