"""The Python UDF DuckDB calls once per chunk of 2,048 rows: Arrow arrays in, one Arrow array out.

On a plain connection each chunk is one relQuery (deduplicated, cached and ordered within the
chunk; the result cache carries answers across chunks); ``relserve.duckdb.sql`` plans whole
statements instead (``planned.py``), with the same decoding and answering of a chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb
import pyarrow as pa

from relserve.duckdb_ext.arguments import DecodedChunk, decode_chunk
from relserve.duckdb_ext.session import Session
from relserve.errors import RowError
from relserve.functions import LLM_SCORE, LLMCall, LLMFunction
from relserve.planner.plan_and_run import CallOutcome

#: DuckDB return type of each kind of function (``return_type``: of each function)
RETURN_TYPES = {"map": "VARCHAR", "filter": "BOOLEAN", "classify": "VARCHAR", "extract": "JSON"}
_ARROW_TYPES = {"map": pa.string(), "filter": pa.bool_(), "classify": pa.string(), "extract": pa.json_(pa.string())}


def return_type(fn: LLMFunction) -> str:
    """The DuckDB type ``fn`` returns (llm_score: the probability of "yes", a DOUBLE)."""
    return "DOUBLE" if fn is LLM_SCORE else RETURN_TYPES[fn.kind]


def create_function(con: duckdb.DuckDBPyConnection, name: str, udf: Any, returns: str, *, replace: bool = False) -> None:
    """Register ``udf`` as ``name`` on ``con``: any arguments, returning the DuckDB type
    ``returns``; with ``replace``, in place of a function of that name already there (a
    connection installed again)."""
    if replace:
        try:
            con.remove_function(name)
        except (duckdb.InvalidInputException, duckdb.CatalogException):
            pass
    con.create_function(
        name,
        udf,
        None,  # any number of arguments of any type
        returns,
        type="arrow",
        null_handling="special",  # NULL arguments reach us, so the row gets an error message
        side_effects=True,  # never fold or skip a call: each row's answer comes from the model
    )


#: DuckDB types (as ``typeof`` names them) whose Arrow form is not the value: UHUGEINT from 2**127
#: wraps negative, BIT and BIGNUM (once named VARINT) arrive as bytes, INTERVAL as
#: MonthDayNano(...), TIME WITH TIME ZONE without its offset, GEOMETRY and VARIANT as their binary
#: encodings. A planned site gets such an argument as DuckDB writes it (``v::VARCHAR``).
AS_TEXT_TYPES = ("UHUGEINT", "BIT", "BIGNUM", "VARINT", "INTERVAL", "TIME WITH TIME ZONE", "GEOMETRY", "VARIANT")


def as_text_test(arg: str) -> str:
    """SQL that is true when ``arg``'s type is one of ``AS_TEXT_TYPES`` (a constant once bound)."""
    return f"typeof({arg}) IN (" + ", ".join(f"'{t}'" for t in AS_TEXT_TYPES) + ")"


def create_site_function(con: duckdb.DuckDBPyConnection, name: str, udf: Any, returns: str, arity: int | None) -> bool:
    """Register a planned call site's ``udf`` as ``name`` taking ``arity`` arguments: a macro that
    passes ``udf`` each argument, or NULL where its type is one of ``AS_TEXT_TYPES``, then each
    one's text where its type is one of those, or NULL. ``typeof`` is a constant once DuckDB binds
    the statement, so each CASE is folded to one side and an argument is evaluated once.
    ``with_texts`` puts the texts in place. Returns whether it did: with ``arity`` None (see
    ``CallSite.arity``) ``udf`` is ``name`` itself, and gets the arguments as Arrow gives them."""
    if arity is None:
        create_function(con, name, udf, returns)
        return False
    create_function(con, f"{name}_values", udf, returns)
    params = [f"relserve_arg{i}" for i in range(arity)]
    values = [f"CASE WHEN {as_text_test(p)} THEN NULL ELSE {p} END" for p in params]
    texts = [f"CASE WHEN {as_text_test(p)} THEN CAST({p} AS VARCHAR) END" for p in params]
    con.execute(f"CREATE OR REPLACE TEMP MACRO {name}({', '.join(params)}) AS {name}_values({', '.join(values + texts)})")
    return True


def remove_site_function(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Undo ``create_site_function`` (either form)."""
    for drop in (lambda: con.execute(f"DROP MACRO IF EXISTS temp.main.{name}"),
                 lambda: con.remove_function(f"{name}_values"), lambda: con.remove_function(name)):
        try:
            drop()
        except duckdb.Error:
            pass


def with_texts(arrays: tuple[pa.Array, ...]) -> tuple[pa.Array, ...]:
    """A site macro's arguments (``create_site_function``): each argument, or its text where the
    macro gave one (an argument whose values are all NULL stays as it is, NULL either way)."""
    n = len(arrays) // 2
    return tuple(text if text.null_count < len(text) else value for value, text in zip(arrays[:n], arrays[n:]))


def to_arrow(fn: LLMFunction, values: list[Any]) -> pa.Array:
    return pa.array(values, type=pa.float64() if fn is LLM_SCORE else _ARROW_TYPES[fn.kind])


class PlainFunction:
    """The UDF on a plain connection: each chunk is planned and run as one relQuery."""

    def __init__(self, session: Session, fn: LLMFunction) -> None:
        self.session = session
        self.fn = fn

    def __call__(self, *arrays: pa.Array) -> pa.Array:
        chunk = decode_chunk(self.fn, arrays, self.session.defaults)
        return to_arrow(self.fn, answer_chunk(self.fn, chunk, self.session, self.session.run))


def answer_chunk(
    fn: LLMFunction, chunk: DecodedChunk, session: Session, run: Callable[[LLMCall, list[tuple]], CallOutcome]
) -> list[Any]:
    """Values for every row of a chunk; failed rows are NULL and logged (or raise, if asked)."""
    settle_chunk_errors(fn, chunk, session)
    out: list[Any] = [None] * chunk.size
    for group in chunk.groups:
        outcome = run(group.call, group.values)
        for r, v in zip(group.rows, outcome.values):
            out[r] = v
        session.record_failures(group.call, group.values, outcome.errors)
    return out


def settle_chunk_errors(fn: LLMFunction, chunk: DecodedChunk, session: Session, where: str = "") -> None:
    """Rows of a chunk whose arguments could not be read: the first raises when a call of the
    chunk (or the session) asks for on_error "raise", else they are logged (their value is NULL)."""
    if chunk.errors:
        modes = {g.call.options.on_error for g in chunk.groups} or {session.defaults.on_error}
        if "raise" in modes:
            raise RowError(f"{where}{chunk.errors[min(chunk.errors)]}")
        session.record_chunk_errors(fn, chunk.errors)
