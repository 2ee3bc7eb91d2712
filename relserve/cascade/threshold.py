"""Which rows the proxy may answer: the confidence threshold chosen on one half of the audit,
and the agreement it gives estimated on the other half, with a confidence interval.

Agreement is counted over the relQuery's rows: a row answered by the LLM agrees with the LLM by
definition, a row answered by the proxy agrees when the proxy gave the LLM's label. With ``n``
rows of which ``rest`` are left after the sample and the audit (the rows the proxy may answer),
and ``r(t)`` the share of rest rows the proxy answers (confidence >= t) AND gets wrong, the
agreement is ``1 - rest * r(t) / n``: it meets the target ``T`` when ``r(t) <= (1 - T) n / rest``.

The audit is a simple random sample of the same rows as the rest (the split is random), the LLM
answered it, and the proxy never saw it. It is cut in two random halves:

* **Choosing** (the first half): the candidates are the thresholds that let the proxy answer one
  hundredth, two hundredths, ..., all of the rest rows (from the rest rows' confidences alone, fixed before any audit
  answer is read), tested in that order against ``H(t): r(t) > (1 - T) n / rest`` with the
  one-sided Clopper-Pearson bound at level ``delta``, stopping at the first that is not
  rejected; the last rejected one is the threshold. ``r`` only grows as the threshold falls, so
  this fixed-sequence test needs no correction for the number of candidates (Bauer 1991; the
  "Learn then Test" calibration of Angelopoulos et al. 2021): with probability >= 1 - delta the
  chosen threshold meets the target. Dividing delta over the candidates instead (Bonferroni,
  what LOTUS's cascades do) answers fewer rows with the same audit.
* **Estimating** (the second half): the share of its rows the proxy answers at the chosen
  threshold and gets wrong, and its two-sided Clopper-Pearson interval at level delta, turned into
  the agreement and its interval. These rows played no part in the choice, so the interval is
  not made optimistic by it (quoting the choosing half's figure at the threshold it chose would
  be).

One more condition keeps the proxy from spending the agreement budget on guesses: at least
``FLOOR_ROWS`` of the choosing half's rows are at or above the threshold, and they agree with the
LLM at least as often as the target asks of the whole (a proxy no better than a coin may not
answer twice the rows a 0.95 target lets it get wrong, half of them wrongly; the row count keeps a
lucky handful of rows from passing for a proxy). It only removes candidates, so the guarantee
above still holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from relserve.cascade import binomial

#: the shares of the rest rows the candidate thresholds let the proxy answer, in test order
GRID: tuple[float, ...] = tuple(k / 100 for k in range(1, 101))
#: the fewest choosing-half rows a threshold must let the proxy answer to be chosen
FLOOR_ROWS = 30


@dataclass(frozen=True)
class AuditCount:
    """One half of the audit at a threshold: its rows, those at or above it, those wrong."""

    rows: int
    answered: int
    wrong: int


@dataclass(frozen=True)
class ThresholdChoice:
    """The threshold chosen for one relQuery and what the audit says of it."""

    #: the proxy answers the rest rows whose confidence is >= this; None: it answers none
    threshold: float | None
    #: rows of the relQuery, and those left after the sample and the audit
    rows: int
    rest: int
    #: the audit's halves at the threshold: the one that chose it, the one that estimates it
    chose: AuditCount
    estimated: AuditCount
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
    """The threshold (see the module's docstring). ``audit_confidence`` / ``audit_agrees``: per
    audit row, in random order, the proxy's confidence and whether its label is the LLM's; the
    first half chooses, the second estimates. ``rest_confidence``: the proxy's confidence on
    every rest row. ``rows``: all rows of the relQuery (sample, audit and rest)."""
    audit_confidence = np.asarray(audit_confidence, dtype=np.float64)
    audit_agrees = np.asarray(audit_agrees, dtype=bool)
    rest_confidence = np.asarray(rest_confidence, dtype=np.float64)
    if len(audit_confidence) != len(audit_agrees):
        raise ValueError("one agreement flag per audit row")
    if not 0.0 < target <= 1.0 or not 0.0 < delta < 1.0:
        raise ValueError(f"need 0 < target <= 1 and 0 < delta < 1, got {target}, {delta}")
    half = len(audit_confidence) // 2
    pick_conf, pick_agrees = audit_confidence[:half], audit_agrees[:half]
    est_conf, est_agrees = audit_confidence[half:], audit_agrees[half:]
    rest = len(rest_confidence)
    none = ThresholdChoice(None, rows, rest, AuditCount(half, 0, 0), AuditCount(len(est_conf), 0, 0), target,
                           1.0 - delta, 1.0, 1.0, 1.0, 0.0)
    if half == 0 or rest == 0:
        return none
    allowed = (1.0 - target) * rows / rest
    ordered = np.sort(rest_confidence)[::-1]
    chosen: float | None = None
    for share in grid:  # fewest rows answered first: r only grows along the grid
        threshold = float(ordered[max(1, int(round(share * rest))) - 1])
        answered = pick_conf >= threshold
        wrong = int((answered & ~pick_agrees).sum())
        if binomial.upper_bound(wrong, half, delta) > allowed:
            break  # the first hypothesis not rejected ends the fixed sequence
        count = int(answered.sum())
        if count >= FLOOR_ROWS and 1.0 - wrong / count >= target:
            chosen = threshold
    if chosen is None:
        return none
    answered = pick_conf >= chosen
    chose = AuditCount(half, int(answered.sum()), int((answered & ~pick_agrees).sum()))
    answered = est_conf >= chosen
    estimated = AuditCount(len(est_conf), int(answered.sum()), int((answered & ~est_agrees).sum()))
    share = estimated.wrong / estimated.rows
    low, high = binomial.interval(estimated.wrong, estimated.rows, delta)
    return ThresholdChoice(
        chosen, rows, rest, chose, estimated, target, 1.0 - delta,
        agreement=1.0 - rest * share / rows,
        agreement_low=1.0 - rest * high / rows,
        agreement_high=1.0 - rest * low / rows,
        coverage=float((rest_confidence >= chosen).mean()),
    )
