"""From rows of placeholder values to distinct prompts: exact deduplication and rendering."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from relserve.cell_values import Unreadable
from relserve.errors import RowError
from relserve.functions import LLMCall
from relserve.prompt_shapes import SHAPED, ShapedRenderer
from relserve.template import format_value


@dataclass
class DistinctRows:
    """Rows with equal placeholder values collapsed into one."""

    #: per input row, its index in ``values``
    row_to_distinct: list[int]
    #: the distinct value tuples (aligned with ``call.template.columns``), in first-seen order
    values: list[tuple]


def distinct_rows(rows: Iterable[tuple]) -> DistinctRows:
    index: dict[tuple, int] = {}
    values: list[tuple] = []
    row_to_distinct: list[int] = []
    for t in rows:
        try:
            k = index.setdefault(t, len(index))
        except TypeError:  # lists or structs in a cell: compare them by their JSON text
            k = index.setdefault(tuple(_freeze(v) for v in t), len(index))
        if k == len(values):
            values.append(t)
        row_to_distinct.append(k)
    return DistinctRows(row_to_distinct, values)


def _freeze(value: object) -> object:
    if isinstance(value, (list, dict, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    return value


def render(call: LLMCall, values: tuple) -> str:
    """The prompt for one row in the template's own field order; ``RowError`` for a NULL value."""
    if call.prompt_shape in SHAPED:
        null = null_error(call, values)
        if null is not None:
            raise RowError(null)
        return Renderer(call)(values)
    return call.examples_prefix + call.template.render(dict(zip(call.template.columns, values))) + call.answer_instruction


class Renderer:
    """``render`` for many rows: the same text as ``Template.render``, without a dict per row.

    Callers check for NULL values first (``null_error``). Under the shaped layouts the row's
    long values and the question are laid out apart (``relserve.prompt_shapes.ShapedRenderer``)."""

    def __init__(self, call: LLMCall) -> None:
        t = call.template
        self.literals = t.literals
        self.positions = [t.columns.index(f) for f in t.fields]
        self.suffix = t.literals[-1] + call.answer_instruction
        self.prefix = call.examples_prefix
        self.shaped = None
        if call.prompt_shape in SHAPED:
            # no "Answer with one of ..." line: the answer field follows the question (docs/quality.md)
            self.shaped = ShapedRenderer(t.literals, t.fields, self.positions, t.literals[-1], self.prefix, format_value,
                                         question_first=call.prompt_shape == "question_first")

    def __call__(self, values: tuple) -> str:
        if self.shaped is not None:
            return self.shaped(values)
        parts = [self.prefix]
        for lit, pos in zip(self.literals, self.positions):
            v = values[pos]
            parts.append(lit)
            parts.append(v if type(v) is str else format_value(v))
        parts.append(self.suffix)
        return "".join(parts)


def render_with_fields(call: LLMCall, values: tuple, order: Sequence[int]) -> str:
    """The prompt for one row with its fields as ``{"field": value}`` JSON in the given order."""
    cols = call.template.columns
    row = dict(zip(cols, values))
    return call.examples_prefix + call.template.render_fields(row, [cols[i] for i in order]) + call.answer_instruction


def null_error(call: LLMCall, values: tuple) -> str | None:
    """The error a row gets before running (a NULL placeholder value, or one with no Python
    value: relserve/cell_values.py), or None."""
    for name, v in zip(call.template.columns, values):
        if v is None:
            return f"{call.function.name}: placeholder {{{name}}} is NULL in this row"
        if isinstance(v, Unreadable):
            return f"{call.function.name}: placeholder {{{name}}} {v.why} in this row"
    return None


def field_lengths(call: LLMCall, values: Sequence[tuple]) -> list[list[int]]:
    """Characters each value occupies in a ``{"field": value}`` rendering (GGR's len(v))."""
    cols = call.template.columns
    out = []
    for c, name in enumerate(cols):
        key = len(name) + 6  # quotes, colon, comma, spaces
        out.append([key + len(format_value(t[c])) for t in values])
    return out


def safe_render(call: LLMCall, values: tuple) -> str | RowError:
    try:
        return render(call, values)
    except RowError as e:
        return e
