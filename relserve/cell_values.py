"""A surface's column as Python values, with a cell Python cannot hold failing its row only.

DuckDB's ``'infinity'`` timestamps, a date past the year 9999 (DuckDB's or polars'), and the like
have no Python value: read as a whole column, one such cell raised OverflowError and lost every
row of the statement, naming neither the column nor the row. Each such cell becomes
``Unreadable``: its row fails with a message naming the placeholder (``null_error``), and the
other rows run.
"""

from __future__ import annotations

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

    errors = (*_READ_ERRORS, pa.ArrowException)
    try:
        return array.to_pylist()
    except errors:
        out: list[object] = []
        for i in range(len(array)):
            try:
                out.append(array[i].as_py())
            except errors as e:
                out.append(Unreadable(f"holds a {array.type} value Python cannot read ({e})"))
        return out


def polars_values(series: Any) -> list[object]:
    """A polars Series' values (``to_list``), an ``Unreadable`` for each cell that has none."""
    try:
        return series.to_list()
    except _READ_ERRORS:
        out: list[object] = []
        for i in range(len(series)):
            try:
                out.append(series.slice(i, 1).to_list()[0])
            except _READ_ERRORS as e:
                out.append(Unreadable(f"holds a {series.dtype} value Python cannot read ({e})"))
        return out
