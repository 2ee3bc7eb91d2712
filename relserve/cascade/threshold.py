"""Which rows the proxy may answer: the confidence threshold chosen on the audit, and the
agreement it is expected to give, with a confidence interval.

Agreement is counted over the relQuery's rows: a row answered by the LLM agrees with the LLM by
definition, a row answered by the proxy agrees when the proxy gave the LLM's label. With ``n``
rows of which ``rest`` are left after the sample and the audit (the rows the proxy may answer),
and ``r(t)`` the share of rest rows the proxy answers (confidence >= t) AND gets wrong, the
agreement is ``1 - rest * r(t) / n``. It meets the target ``T`` when ``r(t) <= (1 - T) n / rest``.

The audit is a simple random sample of the same rows as the rest (the split is random), the LLM
answered it, and the proxy never saw it: the share of audit rows with confidence >= t that the
proxy gets wrong estimates ``r(t)`` without bias, and its Clopper-Pearson interval bounds it.

Choosing t on the audit and then quoting the audit's interval at that t would be optimistic (the
t is chosen where the audit happened to look good). So the thresholds are fixed before the audit
is read (``GRID`` coverages of the rest rows, from their confidences alone) and every one of
them gets a two-sided Clopper-Pearson interval at level ``1 - delta / len(GRID)`` (Bonferroni):
with probability >= 1 - delta all of them hold at once, so the one chosen holds too, whichever it
is. The threshold chosen is the lowest one (most rows answered by the proxy) whose upper bound on
``r`` keeps the agreement at the target; if none does, the proxy answers nothing. This is the
correction LOTUS's cascades make too (its failure probability divided over the candidates).

One more condition keeps the proxy from spending the agreement budget on guesses: the audit rows
it would answer must agree with the LLM at least as often as the target asks of the whole (a
proxy no better than a coin may not answer the 8% of rows that a 0.95 target would let it get
wrong half the time). It only removes candidates, so the bound above still holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relserve.cascade import binomial

#: shares of the rest rows the candidate thresholds let the proxy answer, fixed in advance
GRID: tuple[float, ...] = tuple(round(0.05 * k, 2) for k in range(20, 0, -1))


@dataclass(frozen=True)
class ThresholdChoice:
    """The threshold chosen for one relQuery and what the audit says of it."""

    #: the proxy answers the rest rows whose confidence is >= this; None: it answers none
    threshold: float | None
    #: rows of the relQuery, and those left after the sample and the audit
    rows: int
    rest: int
    #: audit rows (the LLM answered them, the proxy was not trained on them)
    audit: int
    #: audit rows at or above the threshold, and how many of them the proxy got wrong
    audit_answered: int
    audit_wrong: int
    #: the agreement target, and the confidence of every statement here (1 - delta)
    target: float
    confidence: float
    #: estimated agreement of the relQuery's answers with the LLM's, and its interval
    agreement: float
    agreement_low: float
    agreement_high: float
    #: share of the rest rows the proxy answers at the threshold (from their confidences)
    coverage: float

    @property
    def applies(self) -> bool:
        return self.threshold is not None


def choose(
    audit_confidence: np.ndarray,
    audit_agrees: np.ndarray,
    rest_confidence: np.ndarray,
    *,
    rows: int,
    target: float,
    delta: float = 0.05,
    grid: tuple[float, ...] = GRID,
) -> ThresholdChoice:
    """The lowest grid threshold whose simultaneous upper bound keeps the agreement >= ``target``.

    ``audit_confidence`` / ``audit_agrees``: per audit row, the proxy's confidence and whether its
    label is the LLM's. ``rest_confidence``: the proxy's confidence on every rest row. ``rows``:
    all rows of the relQuery (sample, audit and rest)."""
    audit_confidence = np.asarray(audit_confidence, dtype=np.float64)
    audit_agrees = np.asarray(audit_agrees, dtype=bool)
    rest_confidence = np.asarray(rest_confidence, dtype=np.float64)
    if len(audit_confidence) != len(audit_agrees):
        raise ValueError("one agreement flag per audit row")
    if not 0.0 < target <= 1.0 or not 0.0 < delta < 1.0:
        raise ValueError(f"need 0 < target <= 1 and 0 < delta < 1, got {target}, {delta}")
    m, rest = len(audit_confidence), len(rest_confidence)
    level = delta / len(grid)
    none = ThresholdChoice(None, rows, rest, m, 0, 0, target, 1.0 - delta, 1.0, 1.0, 1.0, 0.0)
    if m == 0 or rest == 0:
        return none
    allowed = (1.0 - target) * rows / rest
    ordered = np.sort(rest_confidence)[::-1]
    best = none
    for share in sorted(grid):  # fewest rows answered first: the bound grows with the share
        threshold = float(ordered[max(1, int(round(share * rest))) - 1])
        answered = audit_confidence >= threshold
        wrong = int((answered & ~audit_agrees).sum())
        low, high = binomial.interval(wrong, m, level)
        if high > allowed:
            break  # the bound only grows with the share answered
        if not answered.any() or 1.0 - wrong / int(answered.sum()) < target:
            continue
        best = ThresholdChoice(
            threshold, rows, rest, m, int(answered.sum()), wrong, target, 1.0 - delta,
            agreement=1.0 - rest * (wrong / m) / rows,
            agreement_low=1.0 - rest * high / rows,
            agreement_high=1.0 - rest * low / rows,
            coverage=float((rest_confidence >= threshold).mean()),
        )
    return best
