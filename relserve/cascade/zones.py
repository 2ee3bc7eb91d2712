"""Which rest rows a filter's proxy answers under recall and precision targets: a "no" zone at the
bottom of its scores, a "yes" zone at the top, chosen on the score-sampled audit
(relserve/cascade/audit.py); every other rest row goes to the LLM.

Counts are against the LLM's own answers. Rows the LLM answered (training, census, drawn rows,
the remainder) are right by definition, so the cascade's only misses are the LLM's "yes" rows in
the "no" zone, and its only false rows the LLM's "no" rows in the "yes" zone.

**Precision** (the "yes" zone: the top ``m`` rows of the high stratum, drawn rows answered by the
LLM). With ``F(m)`` the LLM's "no" rows among those ``m``, every kept row outside the zone is a
true one, so precision >= 1 - F(m) / m. The drawn rows are a simple random sample of the
stratum: seeing ``f`` "no" rows among the drawn rows of the top ``m``, the exact hypergeometric
upper bound ``U`` on ``F(m)`` at level delta holds with probability >= 1 - delta.
**Recall** (the "no" zone: the lowest ``m`` rows of the low stratum). With ``M(m)`` the LLM's
"yes" rows among them and ``K`` the "yes" rows known to be kept (the training rows', the
census's, the high stratum's drawn ones, and, once a "yes" zone is chosen, the ``m - U`` true
rows the precision bound leaves it), recall >= 1 - M / (K + M), which is at least the target when
M <= (1 - target) / target * K. ``M(m)`` is bounded as ``F(m)`` is, from the low stratum's draws.

In each stratum the candidates (zones of one hundredth, two hundredths, ..., all of its rows, fixed from the scores
before any answer is read) are tested in order of size, each at level delta, and the first
failure ends the test: fixed-sequence testing (Bauer 1991), whose chance of passing any zone
that misses the target is at most delta, with no correction for the number of candidates. A
precision candidate that could not pass even with no "no" row drawn is left out of the sequence
beforehand (from the draw counts alone). Failed rows of the audit count against the proxy (a
"yes" in the low stratum, a "no" in the high one), so the bounds stay valid. With both targets
each statement takes half the failure probability; the recall statement leans on the precision
one only through ``K``, so both hold together with probability >= 1 - failure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from relserve.cascade import hypergeometric
from relserve.cascade.audit import AuditDesign, Stratum
from relserve.cascade.targets import Targets

#: the zone sizes tested, as shares of their stratum, in test order
GRID: tuple[float, ...] = tuple(k / 100 for k in range(1, 101))
#: an audit answer: the LLM's "yes", its "no", or no answer (not asked, or the row failed)
YES, NO, UNKNOWN = 1, 0, -1


@dataclass(frozen=True)
class ZoneChoice:
    """The proxy's two zones for one relQuery and what the audit says of them."""

    #: the zones: the first ``no_rank`` rows of the low stratum, the first ``yes_rank`` of the
    #: high one (their drawn rows are the LLM's), 0 for none
    no_rank: int
    yes_rank: int
    #: the proxy scores at the zones' edges (the no zone's highest, the yes zone's lowest)
    no_threshold: float | None
    yes_threshold: float | None
    #: kept "yes" rows known to the recall test, and the bound on the zone's misses
    known_positives: int
    misses_bound: int | None
    #: the recall (precision) the bound guarantees with its probability; None: no zone
    recall_low: float | None
    false_bound: int | None
    precision_low: float | None
    #: why a zone is empty (None: it is not, or its target was not asked)
    recall_reason: str | None = None
    precision_reason: str | None = None


def _ranks(size: int, grid: tuple[float, ...]) -> list[int]:
    return sorted({max(1, int(round(share * size))) for share in grid}) if size else []


def _precision_zone(high: Stratum | None, answers: np.ndarray, targets: Targets, grid: tuple[float, ...]):
    if targets.precision is None:
        return 0, None, None, None
    if high is None or high.draws == 0:
        return 0, None, None, "the proxy calls no rest row 'yes'"
    room, delta = 1.0 - targets.precision, targets.precision_delta
    got = answers[high.rows]
    false = np.cumsum(high.drawn & (got != YES))  # a failed row counts as a "no"
    floor = hypergeometric.upper_bound(0, high.size, high.draws, delta)
    chosen, bound = 0, None
    for m in _ranks(high.size, grid):
        if floor > room * m:
            continue  # could not pass with no "no" row drawn: not in the sequence
        ub = hypergeometric.upper_bound(int(false[m - 1]), high.size, high.draws, delta)
        if ub > room * m:
            break
        chosen, bound = m, ub
    if not chosen:
        drawn = high.draws
        seen = int(false[-1])
        return 0, None, None, (f"no 'yes' zone keeps the precision bound at {targets.precision:g} "
                               f"({seen:,} of the {drawn:,} drawn rows the proxy calls 'yes' are the LLM's 'no')")
    return chosen, bound, 1.0 - bound / chosen, None


def _recall_zone(low: Stratum | None, answers: np.ndarray, known: int, targets: Targets, grid: tuple[float, ...]):
    if targets.recall is None:
        return 0, None, None, None
    if low is None or low.draws == 0:
        return 0, None, None, "no rest rows below the census"
    ratio, delta = (1.0 - targets.recall) / targets.recall, targets.recall_delta
    got = answers[low.rows]
    misses = np.cumsum(low.drawn & (got != NO))  # a failed row counts as a "yes"
    chosen, bound = 0, None
    for m in _ranks(low.size, grid):
        ub = hypergeometric.upper_bound(int(misses[m - 1]), low.size, low.draws, delta)
        if ub > ratio * known:
            break
        chosen, bound = m, ub
    if not chosen:
        first = hypergeometric.upper_bound(int(misses[0]), low.size, low.draws, delta)
        return 0, None, None, (f"no 'no' zone keeps the recall bound at {targets.recall:g} (even the smallest "
                               f"may hide {first:,} 'yes' rows; {known:,} known kept 'yes' rows allow "
                               f"{math.floor(ratio * known):,})")
    return chosen, bound, known / (known + bound) if known + bound else 1.0, None


def choose(design: AuditDesign, scores: np.ndarray, answers: np.ndarray, *, train_positives: int,
           targets: Targets, grid: tuple[float, ...] = GRID) -> ZoneChoice:
    """The zones (see the module's docstring). ``scores``: the proxy's probability of "yes" per
    rest row; ``answers``: per rest row ``YES``, ``NO`` or ``UNKNOWN`` (the audit's answers)."""
    answers = np.asarray(answers)
    yes_rank, false_bound, precision_low, precision_reason = _precision_zone(design.high, answers, targets, grid)
    high = design.high
    known = train_positives + int((answers[design.census] == YES).sum())
    if high is not None:
        drawn_yes = high.drawn & (answers[high.rows] == YES)
        known += int(drawn_yes.sum())
        if yes_rank:
            # on the precision statement's event the zone's m rows hold >= m - U true ones; its
            # drawn "yes" rows are counted above already
            known += max(0, yes_rank - false_bound - int(drawn_yes[:yes_rank].sum()))
    no_rank, misses_bound, recall_low, recall_reason = _recall_zone(design.low, answers, known, targets, grid)
    return ZoneChoice(
        no_rank, yes_rank,
        no_threshold=float(scores[design.low.rows[no_rank - 1]]) if no_rank else None,
        yes_threshold=float(scores[high.rows[yes_rank - 1]]) if yes_rank else None,
        known_positives=known, misses_bound=misses_bound, recall_low=recall_low,
        false_bound=false_bound, precision_low=precision_low,
        recall_reason=recall_reason, precision_reason=precision_reason,
    )


def proxy_rows(design: AuditDesign, choice: ZoneChoice) -> tuple[np.ndarray, np.ndarray]:
    """The rest positions the proxy answers "no" and "yes" (the zones' rows the audit did not draw)."""
    def zone(stratum: Stratum | None, rank: int) -> np.ndarray:
        if stratum is None or not rank:
            return np.zeros(0, dtype=np.int64)
        return np.sort(stratum.rows[:rank][~stratum.drawn[:rank]])

    return zone(design.low, choice.no_rank), zone(design.high, choice.yes_rank)
