"""What the operators take: a column's values, grouped, as any surface hands them over.

The operators render a value into a prompt (``relserve.template.format_value``) and never look
inside it, so a value is any object: a DuckDB LIST's element, a polars cell, a PostgreSQL datum.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

#: one value of a column, of any SQL type
Value = object
#: one group's values, or NULL (DuckDB hands an empty group over as NULL)
Group = Sequence[Value] | None
#: a group's GROUP BY key: anything hashable
GroupKey = Hashable
