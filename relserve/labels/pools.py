"""Each label's mean score over every row a template has scored, not only this relQuery's
(issue 22; ``method := 'batch'`` and ``'bootstrap'``).

Batch calibration (relserve/labels/means.py) subtracts each label's mean over the
rows it corrects. Over one relQuery that mean is wrong when the relQuery's rows are mostly of one
label: SQL over a table stored in blocks of one rating, or a ``WHERE`` that selects one kind of
row, gives the filter rows that are nearly all "yes", and subtracting their own mean answers half
of them "no". The model's bias does not depend on which relQuery a row came in, so the means are
pooled over every relQuery of the same call (template, labels, shape, system message, examples in
front): later relQueries are corrected by means over more, and more varied, rows.

Measured (docs/quality.md, ``bench_quality.py --homogeneous 10``: a task as ten statements over
ranges of its rows sorted by label, the worst order): the default answers 68.5% of am_filter right
with pooled means against 53.0% with each relQuery's own.

Like bootstrap's examples, the pool holds what a tenant's rows scored, so it is kept per
prefix-cache namespace: one tenant of the server (or one ``cache_group``), or the library user's
own process. It holds two numbers per label, not rows.

A relQuery of fewer than 16 prompts, too few for a mean of its own, is corrected by the pool once
the pool holds 16 rows, instead of by the content-free prior: a ``WHERE`` that leaves 5 rows
after a statement over 100 is answered like them (label_calibration.method_ran).
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from relserve.labels.keys import call_key
from relserve.labels.means import label_means, pick_calibrated

#: templates whose means are remembered (the oldest are forgotten past this)
MAX_REMEMBERED = 256


@dataclass
class LabelPool:
    """Running sums of each label's score over the rows a template has scored."""

    sums: dict[str, float] = field(default_factory=dict)
    rows: int = 0

    def add(self, scores: Sequence[Mapping[str, float]]) -> None:
        for s in scores:
            for label, v in s.items():
                self.sums[label] = self.sums.get(label, 0.0) + v
        self.rows += len(scores)

    def means(self) -> dict[str, float]:
        return {label: v / self.rows for label, v in self.sums.items()}


_pools: dict[Hashable, LabelPool] = {}
_lock = threading.Lock()


def means_key(call, engine, model_id: str, examples: str = "") -> tuple:
    """Whose means a relQuery of ``call`` on ``engine`` pools with: ``call_key`` and, since scores
    depend on the examples in front, the bootstrapped ``examples``."""
    return (*call_key(call, engine, model_id), examples)


def pooled_picks(key: Hashable | None, scores: Sequence[Mapping[str, float]]) -> list[str]:
    """Every row's label under batch calibration with the means over this relQuery's ``scores``
    and every earlier relQuery's of ``key`` (which then remembers these too).
    ``key`` None: this relQuery's own means, nothing remembered."""
    if not scores:
        return []
    means = pooled_means(key, scores)
    return [pick_calibrated(s, means) for s in scores]


def pooled_means(key: Hashable | None, scores: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Each label's mean over this relQuery's ``scores`` and every earlier relQuery's of ``key``
    (which then remembers these too); ``key`` None: this relQuery's own means."""
    if key is None:
        return label_means(scores)
    with _lock:
        pool = _pools.pop(key, None) or LabelPool()
        if set(pool.sums) != set(scores[0]):
            pool = LabelPool()  # other labels under the same key: start again
        pool.add(scores)
        _pools[key] = pool  # re-inserted: the dict's order is least recently used first
        if len(_pools) > MAX_REMEMBERED:
            _pools.pop(next(iter(_pools)))
        return pool.means()


def pooled_rows(key: Hashable) -> int:
    """How many rows ``key``'s means are over (0: none yet)."""
    with _lock:
        pool = _pools.get(key)
    return pool.rows if pool else 0


def forget_means() -> None:
    """Forget every template's means (tests, and the benchmark between configurations)."""
    with _lock:
        _pools.clear()
