"""A statement's SQL parameters, as ``duckdb.DuckDBPyConnection.sql`` takes them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: positional (``?``, ``$1``) or named (``$name``) parameter values; None: the statement has none
Params = Sequence[object] | Mapping[str, object] | None
