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

#: fewer distinct prompts to run than this: no cascade (every row to the LLM, as without it)
MIN_ROWS = 3000
#: training rows: this share of the prompts, within [MIN_TRAIN, MAX_TRAIN]
TRAIN_SHARE, MIN_TRAIN, MAX_TRAIN = 0.03, 300, 600
#: audit rows: this share of the prompts, within [MIN_AUDIT, MAX_AUDIT] (half chooses the
#: threshold, half estimates the agreement: threshold.py). 1,000 rows tighten the bound by a
#: third of a point of agreement over 800, 400 LLM rows that a 20,000-row relQuery pays
AUDIT_SHARE, MIN_AUDIT, MAX_AUDIT = 0.04, 600, 1000
#: every statement about the agreement holds with this probability (1 - delta)
CONFIDENCE = 0.95
@dataclass(frozen=True)
class CascadePlan:
    """Whether a relQuery of a call runs as a cascade, and with how many sample rows."""

    #: the agreement target asked for (None: the option is off)
    target: float | None
    #: prompts to run
    rows: int
    #: None when it applies, else why not (EXPLAIN says it)
    skipped: str | None
    train: int = 0
    audit: int = 0

    @property
    def applies(self) -> bool:
        return self.skipped is None

    def describe(self) -> str:
        if self.target is None:
            return "off"
        if self.skipped:
            return f"target {self.target:g}: not applied ({self.skipped})"
        return (f"target {self.target:g}: the LLM answers {self.train:,} training + {self.audit:,} audit rows first; "
                f"a proxy answers the rows it is sure of, the rest go to the LLM")


def plan(call, rows: int) -> CascadePlan:
    """The cascade of a relQuery of ``rows`` distinct prompts of ``call`` (an ``LLMCall``)."""
    target = call.options.cascade
    if target is None:
        return CascadePlan(None, rows, "off")
    if call.function.kind not in ("filter", "classify"):
        return CascadePlan(target, rows, f"{call.function.name} answers free text; only llm_filter and llm_classify cascade")
    if not call.deterministic:
        return CascadePlan(target, rows, "temperature > 0: the LLM's answers are sampled, there is no one answer to agree with")
    if rows < MIN_ROWS:
        return CascadePlan(target, rows, f"{rows:,} prompts to run, under the {MIN_ROWS:,} where a proxy pays")
    train = _clamp(TRAIN_SHARE * rows, MIN_TRAIN, MAX_TRAIN)
    audit = _clamp(AUDIT_SHARE * rows, MIN_AUDIT, MAX_AUDIT)
    return CascadePlan(target, rows, None, train, audit)


def _clamp(x: float, low: int, high: int) -> int:
    return int(min(high, max(low, round(x))))
