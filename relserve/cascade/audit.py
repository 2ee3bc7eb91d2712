"""Which rows the LLM answers to check a filter's proxy against recall and precision targets: an
audit sampled by the proxy's score (relserve/cascade/targets.py says what the targets mean).

A filter that keeps few of its rows (one in fifty) gives a uniform sample of 1,000 rows about 20
"yes" rows, too few to say how many the proxy would lose. As SUPG (Kang et al., arXiv 2004.00827) and BARGAIN
(Zeighami et al., arXiv 2509.02896) do, the rows are sampled with a probability that depends on
the proxy's score. Here it takes three levels, one per stratum of the rows left after training,
ranked by the proxy's probability of "yes":

* **high** (precision target only): the rows the proxy calls "yes" (probability >= 0.5), the
  candidates for its "yes" zone. A simple random sample of them, sized so that the proxy's own
  expected false share would pass the precision test.
* **census** (recall target only): the next rows down, every one answered by the LLM (sampling
  probability 1). Its size is the one that makes the audit cheapest as the proxy expects it (the
  census's rows plus the low stratum's draws: a larger census leaves fewer expected misses below
  it, so fewer draws prove them few), and at least ``CENSUS_FACTOR`` times the "yes" rows the
  training sample's share predicts. These rows would go to the LLM anyway: the proxy only
  answers "no" below them.
* **low** (recall target only): every row below, the candidates for the proxy's "no" zone. A
  simple random sample, sized so that the misses the proxy expects there would pass the recall
  test: each sampled row stands for ``size / draws`` rows (the inverse of its probability).

The rows a stratum's test reads are a simple random sample of that stratum, drawn from the
proxy's scores alone before any audit answer is read, so the exact hypergeometric bounds of
relserve/cascade/zones.py hold for them whatever the proxy is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from relserve.cascade.targets import Targets

#: rows the proxy gives at least this probability of "yes" are the candidates for its "yes" zone
YES_CUT = 0.5
#: the census holds at least this many times the "yes" rows the training sample's share predicts
CENSUS_FACTOR = 2.0
#: the fewest rows drawn from a stratum (fewer would pass no test)
MIN_DRAWS = 60
#: sizing slack: a stratum's draws are (ln(1/delta) + SLACK) over the room its test has
SLACK = 2.0


@dataclass(frozen=True)
class Stratum:
    """The candidate rows of one zone (positions among the rest rows, in test order: the low
    stratum by rising score, the high one by falling score) and which of them are drawn."""

    rows: np.ndarray
    drawn: np.ndarray

    @property
    def size(self) -> int:
        return len(self.rows)

    @property
    def draws(self) -> int:
        return int(self.drawn.sum())


@dataclass(frozen=True)
class AuditDesign:
    """The audit of one relQuery's rest rows: its three strata and what the proxy expects."""

    census: np.ndarray
    low: Stratum | None
    high: Stratum | None
    #: the proxy's expected "yes" rows (the sum of its probabilities) above the low stratum, and in it
    expected_kept: float
    expected_missed: float

    def audited(self) -> np.ndarray:
        """The rest positions the LLM answers in the audit's relQuery, in order."""
        parts = [self.census]
        for stratum in (self.low, self.high):
            if stratum is not None:
                parts.append(stratum.rows[stratum.drawn])
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


def draws_for(room: float, delta: float, size: int, *, per_row: float = 1.0) -> int:
    """Rows to draw from a stratum of ``size`` rows so that a test with ``room`` (in the bound's
    units) passes when the proxy is as good as it expects: (ln(1/delta) + SLACK) * per_row / room."""
    if size <= 0:
        return 0
    need = math.ceil((math.log(1.0 / delta) + SLACK) * per_row / room) if room > 0 else size
    return int(min(size, max(MIN_DRAWS, need)))


def _audit_cost(head: np.ndarray, tail: np.ndarray, census: np.ndarray, rows: int, base_room: float,
                ratio: float, delta: float) -> np.ndarray:
    """The LLM rows the audit costs (census + low-stratum draws) per census size, as the proxy
    expects: a larger census leaves fewer expected misses below it and so needs fewer draws."""
    low = rows - census
    room = base_room + ratio * head - tail
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.where(room > 0, (math.log(1.0 / delta) + SLACK) * low / room, np.inf)
    draws = np.where(low > 0, np.clip(need, MIN_DRAWS, low), 0)
    return census + draws


def _sample(size: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    mask = np.zeros(size, dtype=bool)
    mask[rng.choice(size, size=min(draws, size), replace=False)] = True
    return mask


def design(scores: np.ndarray, targets: Targets, *, train_positives: int, train_rows: int,
           rng: np.random.Generator, max_draws: int | None = None) -> AuditDesign:
    """The audit of the rest rows whose proxy probabilities of "yes" are ``scores``, for
    ``targets``; ``train_positives`` of the ``train_rows`` training rows were "yes".
    ``max_draws`` caps the rows drawn from the low stratum (the policy's budget)."""
    scores = np.asarray(scores, dtype=np.float64)
    n = len(scores)
    by_score = np.argsort(-scores, kind="stable")  # highest first; ties by position
    high = None
    top = 0
    if targets.precision is not None:
        top = int((scores >= YES_CUT).sum())
        rows = by_score[:top]
        if top:
            room = 1.0 - targets.precision
            expected_false = float(np.mean(1.0 - scores[rows]))
            # the room the whole stratum's false share leaves, at least a quarter of the target's
            draws = draws_for(max(room - expected_false, room / 4), targets.precision_delta, top)
            high = Stratum(rows, _sample(top, draws, rng))
    census = np.zeros(0, dtype=np.int64)
    low = None
    below = by_score[top:]
    kept = float(scores[by_score[:top]].sum())
    missed = float(scores[below].sum())
    if targets.recall is not None and len(below):
        ratio = (1.0 - targets.recall) / targets.recall  # misses allowed per kept "yes" row
        s = scores[below]
        head = np.concatenate([[0.0], np.cumsum(s)])  # head[r]: expected "yes" rows of below[:r]
        tail = head[-1] - head
        share = train_positives / train_rows if train_rows else 0.0
        first = min(len(below), math.ceil(CENSUS_FACTOR * share * n))
        r = first + int(np.argmin(_audit_cost(head[first:], tail[first:], np.arange(first, len(below) + 1), len(below),
                                              ratio * (train_positives + kept), ratio, targets.recall_delta)))
        census = np.sort(below[:r])
        kept, missed = kept + float(head[r]), float(tail[r])
        rows = below[r:][::-1]  # rising score: the fewest rows answered "no" are tested first
        if len(rows):
            room = ratio * (train_positives + kept) - missed
            # each drawn row stands for size / draws rows: the bound's room, in rows, per draw
            draws = draws_for(max(room, ratio * (train_positives + kept) / 4), targets.recall_delta, len(rows),
                              per_row=len(rows))
            if max_draws is not None:
                draws = min(draws, max(MIN_DRAWS, max_draws))
            low = Stratum(rows, _sample(len(rows), draws, rng))
    return AuditDesign(census, low, high, expected_kept=kept, expected_missed=missed)
