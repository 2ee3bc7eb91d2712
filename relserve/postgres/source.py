"""A source query's rows, read with the caller's rights as ONE statement (a cursor refuses more),
each row as PostgreSQL's own JSON (``row_to_json``): NaN and Infinity, arrays, bytea, json and
NULLs reach the server as PostgreSQL spells them instead of as Python objects."""

from __future__ import annotations

import json

from relserve.postgres.errors import SYNTAX_ERROR, PgError


def as_json_rows_sql(query: str) -> str:
    """The query wrapped so that each row comes back as its JSON text. The newline keeps a
    trailing ``--`` comment of the query from swallowing the closing parenthesis."""
    body = query.strip()
    while body.endswith(";"):
        body = body[:-1].rstrip()
    if not body:
        raise PgError("the source query is empty", SYNTAX_ERROR)
    return f"SELECT pg_catalog.row_to_json(q)::pg_catalog.text AS row FROM (\n{body}\n) AS q"


def read_rows(plpy: object, name: str, query: str, chunk: int = 1000) -> tuple[list[dict[str, object]], list[str]]:
    """Every row of ``query`` (as dicts for the server) and its JSON text (the ``input`` column)."""
    try:
        cursor = plpy.cursor(as_json_rows_sql(query))
        texts: list[str] = []
        while True:
            batch = cursor.fetch(chunk)
            if not batch:
                break
            texts.extend(r["row"] for r in batch)
    except plpy.SPIError as e:  # keep the query's own SQLSTATE (42P01 for a missing table, ...)
        raise PgError(f"{name}: the query failed: {e}", getattr(e, "sqlstate", None) or "42000") from None
    return [json.loads(t) for t in texts], texts
