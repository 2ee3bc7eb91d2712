"""Row and field ordering for prefix sharing: Greedy Group Recursion (GGR, Liu et al., MLSys'25).

GGR looks at the table of template-field values, picks the value whose grouping shares the most
(score = (len(v)^2 + sum of len^2 of the values it determines) x (rows with v - 1)), puts those
rows together with that field (and the fields it functionally determines) first, recurses into
the group on the remaining fields, and carries on with the rows left over.

Two refinements from the paper:
* functional dependencies: a field determined by the grouping field moves along with it;
* early stop: below ``min_rows`` rows or ``min_score`` the recursion stops and the rows are
  sorted on the fields ordered by their total score, which costs little and loses little.

The greedy choice over the rows left over is made with a lazy max-heap: removing rows only lowers
other groups' scores, so a popped group whose score is still current is the true maximum. That
keeps the whole solve close to O(rows x fields x log) instead of one table scan per group.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from relserve.planner.dependencies import find_dependencies


@dataclass(frozen=True)
class Ordering:
    #: input row indices in planned order
    rows: list[int]
    #: for each planned row (same positions as ``rows``), its fields in planned order
    fields: list[tuple[int, ...]]
    #: GGR's prefix hit score of the plan, in squared characters
    score: float


def sort_rows(keys: Sequence[str]) -> list[int]:
    """Row order when the fields stay put: sorted prompts put every shared prefix side by side
    (a depth-first walk of the prompts' trie), which is the best consecutive-prefix order."""
    return sorted(range(len(keys)), key=keys.__getitem__)


def factorize(values: Sequence[object]) -> tuple[np.ndarray, list[object]]:
    """Integer codes for a column (equal values, equal codes) and the distinct values.

    Codes follow the values' sort order, so sorting on codes sorts on values.
    """
    distinct = list(dict.fromkeys(values))
    try:
        distinct.sort()
    except TypeError:  # mixed types: first-seen order still groups equal values
        pass
    index = {v: i for i, v in enumerate(distinct)}
    codes = np.fromiter((index[v] for v in values), dtype=np.int64, count=len(values))
    return codes, distinct


class GGR:
    """Solve one table. ``columns[c][r]`` is a row's value of field c; ``lengths[c][r]`` the
    number of characters that value occupies in the prompt (defaults to ``len(str(value))``)."""

    def __init__(
        self,
        columns: Sequence[Sequence[object]],
        lengths: Sequence[Sequence[int]] | None = None,
        *,
        min_rows: int = 8,
        min_score: float = 0.0,
        use_dependencies: bool = True,
    ) -> None:
        self.m = len(columns)
        self.n = len(columns[0]) if self.m else 0
        self.min_rows = max(2, min_rows)
        self.min_score = min_score
        self.codes: list[np.ndarray] = []
        self.weights: list[np.ndarray] = []  # per column, len^2 per code
        for c in range(self.m):
            codes, distinct = factorize(columns[c])
            self.codes.append(codes)
            w = np.zeros(len(distinct), dtype=np.float64)
            if lengths is None:
                w[:] = [len(str(v)) ** 2 for v in distinct]
            else:
                # equal values have equal lengths; take each code's first occurrence
                first = np.full(len(distinct), -1, dtype=np.int64)
                first[codes[::-1]] = np.arange(self.n - 1, -1, -1)
                lens = np.asarray(lengths[c], dtype=np.float64)
                w[:] = lens[first] ** 2
            self.weights.append(w)
        self.determines = find_dependencies(self.codes) if use_dependencies else [() for _ in range(self.m)]
        self._alive = np.zeros(self.n, dtype=bool)

    def solve(self) -> Ordering:
        self._out_rows: list[int] = []
        self._out_fields: list[tuple[int, ...]] = []
        self._score = 0.0
        if self.n:
            rows = np.arange(self.n, dtype=np.int64)
            self._alive[rows] = True
            self._solve(rows, tuple(range(self.m)), ())
        return Ordering(self._out_rows, self._out_fields, self._score)

    # -- recursion ---------------------------------------------------------------------------

    def _solve(self, rows: np.ndarray, cols: tuple[int, ...], prefix: tuple[int, ...]) -> None:
        """Emit ``rows`` (all alive on entry, all consumed on exit) in planned order."""
        if len(rows) < self.min_rows or len(cols) <= 1:
            self._fallback(rows, cols, prefix)
            return
        heap = self._candidates(rows, cols)
        remaining = len(rows)
        while heap and remaining >= 2:
            neg, c, seq, members = heapq.heappop(heap)
            members = members[self._alive[members]]
            count = len(members)
            if count < 2:
                continue
            score = self._group_weight(c, members[0], cols) * (count - 1)
            if score < -neg and heap and score < -heap[0][0]:
                heapq.heappush(heap, (-score, c, seq, members))  # stale: another group is better now
                continue
            if score <= self.min_score:
                break
            moved = (c,) + tuple(d for d in self.determines[c] if d in cols)
            rest = tuple(x for x in cols if x not in moved)
            self._score += score
            remaining -= count
            if rest:
                self._solve(members, rest, prefix + moved)
            else:
                self._alive[members] = False
                self._emit(members, prefix + moved)
        left = rows[self._alive[rows]]
        if len(left):
            self._fallback(left, cols, prefix)

    def _candidates(self, rows: np.ndarray, cols: tuple[int, ...]) -> list:
        """Every (field, value) group of two or more rows, as a max-heap on score."""
        heap = []
        for c in cols:
            vals = self.codes[c][rows]
            order = np.argsort(vals, kind="stable")
            sorted_vals = vals[order]
            cuts = np.flatnonzero(sorted_vals[1:] != sorted_vals[:-1]) + 1
            starts = np.concatenate(([0], cuts))
            ends = np.concatenate((cuts, [len(rows)]))
            counts = ends - starts
            big = np.flatnonzero(counts >= 2)
            if not len(big):
                continue
            weight = self.weights[c][sorted_vals[starts[big]]]
            for d in self.determines[c]:
                if d in cols:
                    firsts = rows[order[starts[big]]]
                    weight = weight + self.weights[d][self.codes[d][firsts]]
            scores = weight * (counts[big] - 1)
            members_sorted = rows[order]
            for s, b in zip(scores.tolist(), big.tolist()):
                # the sequence number breaks score ties before numpy arrays get compared
                heap.append((-s, c, len(heap), members_sorted[starts[b] : ends[b]]))
        heapq.heapify(heap)
        return heap

    def _group_weight(self, c: int, row: int, cols: tuple[int, ...]) -> float:
        w = self.weights[c][self.codes[c][row]]
        for d in self.determines[c]:
            if d in cols:
                w += self.weights[d][self.codes[d][row]]
        return float(w)

    def _fallback(self, rows: np.ndarray, cols: tuple[int, ...], prefix: tuple[int, ...]) -> None:
        """Early stop: order the fields by their total score here, then sort the rows on them."""
        if len(rows) > 1 and cols:
            col_scores = []
            for c in cols:
                vals = self.codes[c][rows]
                uniq, counts = np.unique(vals, return_counts=True)
                col_scores.append(float(np.sum(self.weights[c][uniq] * (counts - 1))))
            ordered = tuple(c for _, c in sorted(zip(col_scores, cols), key=lambda t: -t[0]))
            # np.lexsort sorts by the last key first
            order = np.lexsort([self.codes[c][rows] for c in reversed(ordered)])
            rows = rows[order]
            self._score += self._consecutive_score(rows, ordered)
        else:
            ordered = cols
        self._alive[rows] = False
        self._emit(rows, prefix + ordered)

    def _consecutive_score(self, rows: np.ndarray, ordered: tuple[int, ...]) -> float:
        """Shared-prefix weight between neighbours in a sorted block (for the reported score)."""
        total = 0.0
        same = np.ones(len(rows) - 1, dtype=bool)
        for c in ordered:
            vals = self.codes[c][rows]
            same &= vals[1:] == vals[:-1]
            if not same.any():
                break
            total += float(np.sum(self.weights[c][vals[1:]][same]))
        return total

    def _emit(self, rows: np.ndarray, fields: tuple[int, ...]) -> None:
        self._out_rows.extend(rows.tolist())
        self._out_fields.extend([fields] * len(rows))


def ggr(columns: Sequence[Sequence[object]], lengths: Sequence[Sequence[int]] | None = None, **kw) -> Ordering:
    """Plan row and field order for a table of field values (see ``GGR``)."""
    return GGR(columns, lengths, **kw).solve()
