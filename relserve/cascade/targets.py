"""What a filter's cascade promises about its "yes" rows: recall and precision targets, and the
probability that it misses them (the ``cascade_recall``, ``cascade_precision`` and
``cascade_failure`` options).

Against the LLM's own answers over the same rows: **recall** is the share of the rows the LLM
would keep that the cascade keeps; **precision** the share of the rows the cascade keeps that the
LLM would keep. The agreement target (``cascade``) counts every row alike, so a filter that keeps
one row in fifty reaches 0.98 by answering "no" everywhere; these count the kept rows.

With both targets the failure probability is split evenly between the two statements (a union
bound), so both hold together with probability at least 1 - failure.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the probability that a cascade misses its target, unless the call says otherwise
DEFAULT_FAILURE = 0.05


@dataclass(frozen=True)
class Targets:
    """The kept rows' targets of one filter call (at least one of recall and precision)."""

    recall: float | None
    precision: float | None
    failure: float = DEFAULT_FAILURE

    def __post_init__(self) -> None:
        if self.recall is None and self.precision is None:
            raise ValueError("a targets cascade needs a recall or a precision target")

    @property
    def _split(self) -> int:
        return 2 if self.recall is not None and self.precision is not None else 1

    @property
    def recall_delta(self) -> float:
        """The failure probability the recall statement may use."""
        return self.failure / self._split

    @property
    def precision_delta(self) -> float:
        return self.failure / self._split

    def describe(self) -> str:
        parts = [f"{name} {value:g}" for name, value in (("recall", self.recall), ("precision", self.precision))
                 if value is not None]
        return f"{' and '.join(parts)} of the 'yes' rows, failure probability {self.failure:g}"
