"""Task templates: text with ``{column}`` placeholders, rendered once per row.

The syntax is Python's ``str.format`` minus its mini-language: ``{name}`` is a placeholder whose
name is taken literally (so ``{review/overall}`` or ``{beer name}`` work), ``{{`` and ``}}`` are
literal braces. Rendering substitutes text; it never evaluates anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

from relserve.errors import TemplateError


@dataclass(frozen=True)
class Template:
    """A parsed template: alternating literal text and placeholder names."""

    source: str
    # literals[i] precedes fields[i]; literals has one more item than fields.
    literals: tuple[str, ...]
    fields: tuple[str, ...]

    @classmethod
    def parse(cls, source: str) -> Template:
        if not isinstance(source, str):
            raise TemplateError(f"template must be a string, got {type(source).__name__}")
        literals: list[str] = []
        fields: list[str] = []
        buf: list[str] = []
        i, n = 0, len(source)
        while i < n:
            ch = source[i]
            if ch in "{}" and source.startswith(ch * 2, i):  # a doubled brace is a literal one
                buf.append(ch)
                i += 2
                continue
            if ch == "{":
                end = source.find("}", i + 1)
                if end < 0:
                    raise TemplateError(f"unclosed '{{' at position {i} in template {source!r}")
                name = source[i + 1 : end]
                if "{" in name:
                    raise TemplateError(f"nested '{{' at position {i} in template {source!r}")
                name = name.strip()
                if not name:
                    raise TemplateError(f"empty placeholder '{{}}' at position {i} in template {source!r}")
                literals.append("".join(buf))
                buf = []
                fields.append(name)
                i = end + 1
            elif ch == "}":
                raise TemplateError(f"single '}}' at position {i} in template {source!r} (write '}}}}' for a brace)")
            else:
                buf.append(ch)
                i += 1
        literals.append("".join(buf))
        return cls(source, tuple(literals), tuple(fields))

    @cached_property
    def columns(self) -> tuple[str, ...]:
        """Distinct placeholder names in order of first use."""
        return tuple(dict.fromkeys(self.fields))

    @property
    def static_prefix(self) -> str:
        """The text before the first placeholder: shared by every rendered row."""
        return self.literals[0]

    def require_placeholders(self) -> None:
        if not self.fields:
            raise TemplateError(
                f"template {self.source!r} has no {{column}} placeholder, so every row would get the same prompt"
            )

    def render(self, row: Mapping[str, object]) -> str:
        """Fill the placeholders from ``row``; raises ``RowError`` for a missing or NULL value."""
        from relserve.errors import RowError

        parts = [self.literals[0]]
        for name, lit in zip(self.fields, self.literals[1:]):
            if name not in row:
                raise RowError(f"row has no column {name!r}")
            value = row[name]
            if value is None:
                raise RowError(f"column {name!r} is NULL")
            parts.append(format_value(value))
            parts.append(lit)
        return "".join(parts)

    def render_fields(self, row: Mapping[str, object], order: Iterable[str]) -> str:
        """Render for field reordering: the instruction first, then the row as ``{"field": value}``.

        The placeholders stay in the instruction as ``{name}`` references and the values move into
        one JSON object in the given field order, so a reordered prompt still says which value is
        which while the instruction is a prefix shared by every row.
        """
        from relserve.errors import RowError

        obj: dict[str, object] = {}
        for name in order:
            value = row.get(name)
            if value is None:
                raise RowError(f"column {name!r} is NULL")
            obj[name] = value if isinstance(value, (int, float, bool)) else format_value(value)
        parts = [self.literals[0]]
        for name, lit in zip(self.fields, self.literals[1:]):
            parts.append("{" + name + "}")
            parts.append(lit)
        return "".join(parts) + "\n" + json.dumps(obj, ensure_ascii=False)


def format_value(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)
