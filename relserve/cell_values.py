"""A surface's column as Python values, with a cell Python cannot hold failing its row only.

DuckDB's ``'infinity'`` timestamps, a date past the year 9999 (DuckDB's or polars'), and the like
have no Python value: read as a whole column, one such cell raised OverflowError and lost every
row of the statement, naming neither the column nor the row. Each such cell becomes
``Unreadable``: its row fails with a message naming the placeholder (``null_error``), and the
other rows run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: what reading a cell as a Python value raises when it has none
_READ_ERRORS: tuple[type[BaseException], ...] = (OverflowError, ValueError, ArithmeticError)


@dataclass(frozen=True)
class Unreadable:
    """A cell with no Python value, and why."""

    why: str


def arrow_values(array: Any) -> list[object]:
    """A pyarrow array's values (``to_pylist``), an ``Unreadable`` for each cell that has none."""
    import pyarrow as pa

    return _values(array.to_pylist, lambda i: array[i].as_py(), len(array), array.type,
                   (*_READ_ERRORS, pa.ArrowException))


def polars_values(series: Any) -> list[object]:
    """A polars Series' values (``to_list``), an ``Unreadable`` for each cell that has none."""
    return _values(series.to_list, lambda i: series.slice(i, 1).to_list()[0], len(series), series.dtype,
                   _READ_ERRORS)


def _values(read_all: Callable[[], list], read_one: Callable[[int], object], n: int, dtype: object,
            errors: tuple[type[BaseException], ...]) -> list[object]:
    # the whole column at once; cell by cell only when a cell has no Python value
    try:
        return read_all()
    except errors:
        out: list[object] = []
        for i in range(n):
            try:
                out.append(read_one(i))
            except errors as e:
                out.append(Unreadable(f"holds a {dtype} value Python cannot read ({e})"))
        return out
