"""Errors as PostgreSQL raises them: a message, a SQLSTATE and a hint, never a Python traceback."""

from __future__ import annotations

from dataclasses import dataclass

#: SQLSTATEs used here (PostgreSQL's names)
INVALID_PARAMETER_VALUE = "22023"
DATA_EXCEPTION = "22000"
INSUFFICIENT_PRIVILEGE = "42501"
UNDEFINED_COLUMN = "42703"
SYNTAX_ERROR = "42601"
SQLCLIENT_UNABLE_TO_ESTABLISH = "08001"
CONNECTION_FAILURE = "08006"
INVALID_AUTHORIZATION = "28000"
PROGRAM_LIMIT_EXCEEDED = "54000"
QUERY_CANCELED = "57014"
IO_ERROR = "58030"
INTERNAL_ERROR = "XX000"


@dataclass
class PgError(Exception):
    """Raised by the code here; turned into ``plpy.error`` at the edge (``raise_as_sql``)."""

    message: str
    sqlstate: str = INVALID_PARAMETER_VALUE
    hint: str | None = None

    def __str__(self) -> str:
        return self.message


def raise_as_sql(plpy: object, e: PgError) -> None:
    """Raise ``e`` as a PostgreSQL error with its SQLSTATE and hint."""
    if e.hint:
        plpy.error(e.message, sqlstate=e.sqlstate, hint=e.hint)
    plpy.error(e.message, sqlstate=e.sqlstate)


def server_error(name: str, status: int, message: str) -> PgError:
    """A relserve server's refusal (or its absence) as the error a SQL client can act on."""
    text = f"{name}: {message}"
    if status == 0:
        return PgError(text, SQLCLIENT_UNABLE_TO_ESTABLISH,
                       "Is the relserve server running at the address a superuser set in relserve.config (name 'url')?")
    if status == 401:
        return PgError(text, INVALID_AUTHORIZATION,
                       "A superuser stores this role's key (from the server's tenants file) in relserve.api_keys: "
                       "INSERT INTO relserve.api_keys (role, api_key) VALUES ('<role>', '<key>')")
    if status in (413, 429):
        return PgError(text, PROGRAM_LIMIT_EXCEEDED)
    return PgError(text, INVALID_PARAMETER_VALUE if 400 <= status < 500 else INTERNAL_ERROR)
