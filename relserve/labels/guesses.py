"""When a label call's answers are close to guesses, for the methods that decide each row from its
own label scores (``score``, ``prior``, ``batch``, ``bootstrap``: every ``llm_classify`` of three
labels or more, and what a user names). ``adaptive`` reads its two crowds of margins instead
(relserve/labels/adaptive.py) and warns from that reading.

The check reads no label. Over each row's label probabilities as the method corrected them
(divided by the prior, minus the batch means), the share of the answers' entropy the rows explain
(relserve/labels/information.py): a model that tells the rows apart gives each a confident
answer that differs between rows, whatever the labels' shares; one that does not gives every row
about the same distribution, and its picks follow small differences no user should trust (a 135M
model classifying four support tickets answered "damage" for all four). Below ``FEW_ROWS`` rows
and no earlier rows behind the method's reading, that share is mostly noise (a dozen rows can
explain much of it by chance, docs/quality.md#when-the-answers-are-guesses-and-the-warning), so the answers count as guesses unless the model is
sure of every row, as the adaptive method reads a few rows' margins
(relserve/labels/decide.py).
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from relserve.labels.decide import SURE
from relserve.labels.information import categorical_information, explained_share
from relserve.labels.interface import probabilities

#: fewer rows than this behind a reading (a relQuery's and its plan's sample): its share is noise
FEW_ROWS = 16
#: below this share of the answers' entropy explained by the rows, the answers hardly depend on
#: the row. Chosen on the tuning tasks and checked on the check tasks of
#: docs/quality.md#when-the-answers-are-guesses-and-the-warning
WEAK_SHARE_EXPLAINED = 0.1
#: a row's answer is sure when its log-odds against the other labels together reach ``SURE``
SURE_PROBABILITY = 1 / (1 + math.exp(-SURE))


@dataclass
class AnswerSpread:
    """The answers of one relQuery's rows under one method, with each row's label scores as the
    method corrected them (log-probabilities, or anything whose softmax is the row's answer)."""

    #: the label method the relQuery ran
    method: str
    scores: list[Mapping[str, float]] = field(default_factory=list)
    answers: Counter = field(default_factory=Counter)
    #: rows whose answer's probability is below ``SURE_PROBABILITY``
    unsure: int = 0
    #: rows of the call's earlier relQueries behind the method's reading (pooled label means)
    earlier: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, corrected: Mapping[str, float], label: str) -> None:
        sure = probabilities(corrected)[label]
        with self._lock:
            self.scores.append(corrected)
            self.answers[label] += 1
            self.unsure += sure < SURE_PROBABILITY

    @property
    def rows(self) -> int:
        return len(self.scores)

    @property
    def information(self) -> float:
        """I(row; answer) over the rows so far (nats)."""
        with self._lock:
            return categorical_information(list(self.scores))

    @property
    def explained(self) -> float:
        """The share of the answers' entropy the rows explain (0..1)."""
        with self._lock:
            return explained_share(list(self.scores))

    @property
    def few(self) -> bool:
        """Too few rows behind the reading to tell answers from noise."""
        return self.rows + self.earlier < FEW_ROWS

    @property
    def most_common(self) -> tuple[str, float] | None:
        """The label most rows got and its share of the rows (None: no row yet)."""
        if not self.answers:
            return None
        label, n = self.answers.most_common(1)[0]
        return label, n / self.rows

    @property
    def guessing(self) -> bool:
        """Whether the answers are close to guesses: few rows and some unsure, or rows whose
        answers hardly depend on them. A relQuery of few rows behind earlier ones of its call is
        not judged: its own share is noise, and the earlier ones were."""
        if not self.rows:
            return False
        if self.few:
            return self.unsure > 0
        if self.rows < FEW_ROWS:
            return False
        return self.explained < WEAK_SHARE_EXPLAINED

    def warning(self, function: str, template: str) -> str | None:
        if not self.guessing:
            return None
        label, share = self.most_common or ("", 0.0)
        if self.few:
            behind = (f"and only {self.earlier} earlier ones of this call behind its plan" if self.earlier
                      else "and no earlier ones of this call")
            how = (f"with {self.rows} rows {behind}, relserve cannot tell the model's answers "
                   f"from noise, and the model was unsure of {self.unsure} of them (method {self.method!r}; "
                   f"{share:.0%} got {label!r})")
        else:
            how = (f"the model gives the {self.rows} rows it scored about the same scores over the labels (the rows explain "
                   f"{self.explained:.0%} of the answers' entropy, method {self.method!r}), so its answers hardly "
                   f"depend on the row ({share:.0%} got {label!r})")
        return (f"{function}({template!r}): {how}; the answers are close to guesses. Check a sample of the answers by "
                "hand, name the labels more plainly or give examples (llm_options(examples := ...)), or use a "
                "larger model.")
