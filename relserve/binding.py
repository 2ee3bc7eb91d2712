"""Values to placeholders, the one way every surface binds them.

* By position: the values fill the template's distinct placeholders in order of first
  appearance (``Template.columns``), and their number must match.
* By name: a struct, a row object or a frame's columns, whose field names the placeholders are.

DuckDB, polars, the server (rows and spreadsheet cells) and PostgreSQL's ``bind()`` call these,
so a template gets the same values, and a mistake the same message, everywhere.

>>> from relserve.template import Template
>>> Binding(Template.parse("Is {review} about {movie}?")).row(args=["Great", "Up"])
('Great', 'Up')
>>> Binding(Template.parse("Is {review} about {movie}?")).row(values={"movie": "Up", "review": "Great"})
('Great', 'Up')
>>> Binding(Template.parse("Compare {a} with {b}"), "llm_map").row(args=["x"])
Traceback (most recent call last):
...
relserve.errors.TemplateError: llm_map: the template has 2 placeholder(s) ({a}, {b}) but 1 value(s) were given; values fill the placeholders in order of first appearance
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from relserve.errors import TemplateError
from relserve.template import Template

POSITION_HINT = "values fill the placeholders in order of first appearance"


@dataclass(frozen=True)
class Binding:
    """How the values of one template's placeholders are found; ``who`` starts every message."""

    template: Template
    who: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        return self.template.columns

    def _prefix(self) -> str:
        return f"{self.who}: " if self.who else ""

    def check_count(self, given: int, hint: str = POSITION_HINT) -> None:
        """By position: exactly one value per distinct placeholder."""
        names = self.names
        if given != len(names):
            shown = ", ".join("{" + n + "}" for n in names)
            raise TemplateError(
                f"{self._prefix()}the template has {len(names)} placeholder(s) ({shown}) but {given} value(s) "
                f"were given; {hint}"
            )

    def check_names(self, available: Iterable[str], described_as: str = "available columns:") -> None:
        """By name: every placeholder names one of ``available``."""
        have = list(available)
        missing = [n for n in self.names if n not in have]
        if missing:
            raise TemplateError(
                f"{self._prefix()}template names unknown column(s) {', '.join(map(repr, missing))}; "
                f"{described_as} {', '.join(map(repr, have)) or '(none)'}"
            )

    def row(self, *, args: Sequence[object] | None = None, values: Mapping[str, object] | None = None) -> tuple:
        """One row's values, aligned with ``template.columns``: from ``args`` by position or
        from ``values`` by name."""
        if values is not None:
            if args:
                raise TemplateError(f"{self._prefix()}give values by position or by name, not both")
            self.check_names(values.keys())
            return tuple(values[n] for n in self.names)
        args = list(args or ())
        self.check_count(len(args))
        return tuple(args)

    def check_rows(self, rows: Sequence[Mapping[str, object]]) -> None:
        """Rows that name their columns: the first row names the table's columns, and every row
        has each placeholder's column."""
        if rows:
            self.check_names(rows[0].keys())
        for i, row in enumerate(rows):
            missing = [n for n in self.names if n not in row]
            if missing:
                raise TemplateError(f"row {i} has no column(s) {', '.join(map(repr, missing))} named in the template")

    def rows(self, rows: Sequence[Mapping[str, object]]) -> list[list[object]]:
        """Rows that name their columns (the server's ``rows``), as columns aligned with
        ``template.columns``."""
        self.check_rows(rows)
        return [[row[n] for row in rows] for n in self.names]

    def tuples(self, rows: Sequence[Mapping[str, object]]) -> list[tuple]:
        """Rows that name their columns (the server's ``rows``), as value tuples aligned with
        ``template.columns``: the planner's rows."""
        self.check_rows(rows)
        names = self.names
        return [tuple(row[n] for n in names) for row in rows]

    def columns(
        self,
        *,
        positional: Sequence[Sequence[object]] | None = None,
        fields: Mapping[str, Sequence[object]] | None = None,
        described_as: str = "available columns:",
        hint: str = POSITION_HINT,
    ) -> list[Sequence[object]]:
        """Whole columns (DuckDB's arguments, a polars series), aligned with ``template.columns``:
        ``positional`` value columns in placeholder order, or a struct's ``fields`` by name."""
        if fields is not None:
            self.check_names(fields.keys(), described_as)
            return [fields[n] for n in self.names]
        positional = list(positional or ())
        self.check_count(len(positional), hint)
        return positional
