"""Functional dependencies between template fields, found in the data (GGR's FD refinement).

Field ``a`` determines field ``b`` when every value of ``a`` comes with a single value of ``b``
(a movie id determines its synopsis). When GGR groups rows by a value of ``a``, the values of
``b`` are then shared by the whole group too, so they move to the front with it and count
towards the group's score.
"""

from __future__ import annotations

import numpy as np


def find_dependencies(codes: list[np.ndarray]) -> list[tuple[int, ...]]:
    """For each column, the other columns it determines, from integer-coded columns.

    A column whose values are all distinct determines everything trivially; it is left out, since
    grouping on it never shares anything.
    """
    m = len(codes)
    n = len(codes[0]) if m else 0
    out: list[tuple[int, ...]] = [() for _ in range(m)]
    if n < 2:
        return out
    for a in range(m):
        order = np.argsort(codes[a], kind="stable")
        a_sorted = codes[a][order]
        a_changes = a_sorted[1:] != a_sorted[:-1]
        if a_changes.all():  # a is a key
            continue
        determined = []
        for b in range(m):
            if b == a:
                continue
            b_sorted = codes[b][order]
            b_changes = b_sorted[1:] != b_sorted[:-1]
            # b may only change where a changes
            if not np.any(b_changes & ~a_changes):
                determined.append(b)
        out[a] = tuple(determined)
    return out
