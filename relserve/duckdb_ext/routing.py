"""Which path runs a script through ``relserve.duckdb.sql`` / ``explain``, read from its parsed
statements (sqlglot), not from its text: a word in a string literal or a column name routes
nothing."""

from __future__ import annotations

from enum import Enum

from sqlglot import exp

from relserve.duckdb_ext.blocked_join import asks_blocking
from relserve.duckdb_ext.operator_functions import OPERATORS
from relserve.duckdb_ext.script import Script, read_script


class Route(Enum):
    #: ``llm_reduce`` / ``llm_topk``: the script rewritten to the list form and run in two passes
    #: (``operator_functions.py``)
    OPERATORS = "operators"
    #: ``llm_options(block := k)`` on a join's ``llm_filter`` (``blocked_join.py``)
    BLOCKED_JOIN = "blocked_join"
    #: everything else: the planner, one relQuery per call site (``planned_sql.py``)
    PLANNED = "planned"


def route_of(script: Script | str) -> Route:
    """The path of the whole script: an operator anywhere in it takes it all, as the operators'
    two passes run the script as one; a statement sqlglot cannot parse counts for nothing (DuckDB
    will say what is wrong with it)."""
    trees = (read_script(script) if isinstance(script, str) else script).trees
    if any(str(call.name).lower() in OPERATORS for tree in trees for call in tree.find_all(exp.Anonymous)):
        return Route.OPERATORS
    if any(asks_blocking(tree) for tree in trees):
        return Route.BLOCKED_JOIN
    return Route.PLANNED
