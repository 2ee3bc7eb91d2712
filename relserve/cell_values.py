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
    """A pyarrow array's values (``to_pylist``), an ``Unreadable`` for each cell that has none, and
    each interval, at any depth, as DuckDB writes it (``interval_text``)."""
    import pyarrow as pa

    values = _values(array.to_pylist, lambda i: array[i].as_py(), len(array), array.type,
                     (*_READ_ERRORS, pa.ArrowException))
    if _holds_interval(array.type):
        values = [_intervals_as_text(v) for v in values]
    return values


def interval_text(months: int, days: int, nanoseconds: int) -> str:
    """An interval as DuckDB writes it (``v::VARCHAR``): '1 year 2 months 3 days 04:05:06.789',
    '-01:30:00', '00:00:00'; Arrow's MonthDayNano(...) is no text for a prompt."""
    years = int(months / 12)  # (toward zero, as DuckDB divides)
    parts = [f"{n} {unit}{'' if abs(n) == 1 else 's'}"
             for n, unit in ((years, "year"), (months - 12 * years, "month"), (days, "day")) if n]
    if nanoseconds or not parts:
        seconds, fraction = divmod(abs(nanoseconds), 10**9)
        hours, seconds = divmod(seconds, 3600)
        clock = f"{'-' if nanoseconds < 0 else ''}{hours:02d}:{seconds // 60:02d}:{seconds % 60:02d}"
        parts.append(clock + (f".{fraction:09d}".rstrip("0") if fraction else ""))
    return " ".join(parts)


def _holds_interval(arrow_type: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_interval(arrow_type) or any(
        _holds_interval(arrow_type.field(i).type) for i in range(arrow_type.num_fields))


def _intervals_as_text(value: object) -> object:
    import pyarrow as pa

    if isinstance(value, pa.MonthDayNano):
        return interval_text(value.months, value.days, value.nanoseconds)
    if isinstance(value, list):
        return [_intervals_as_text(v) for v in value]
    if isinstance(value, tuple):  # a MAP's (key, value) pairs
        return tuple(_intervals_as_text(v) for v in value)
    if isinstance(value, dict):
        return {k: _intervals_as_text(v) for k, v in value.items()}
    return value


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
